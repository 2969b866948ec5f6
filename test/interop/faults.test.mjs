// Faults (issue 10, item 5): upstreams that die, hang, lie or drown the gateway, a stdio child that
// crashes, an audit log on a full disk, and backoff after repeated connect failures. Every case,
// on each upstream kind it applies to (Streamable HTTP "h", legacy SSE "lsse", stdio "st"), checks:
//   - the client's exact JSON-RPC error (-32004 unless said otherwise) and HTTP status;
//   - the refund rule, with call N+1 of a max=N limit (N = 1 here): a call that surely never ran
//     upstream (connect refused, backing off) is given back, one that may have run (the request
//     was written: killed, cut, timed out, garbage or too much after sending) is not;
//   - the audit line of the failed call (decision "allow", its outcome);
//   - that another session's call, started alongside, succeeds;
// and each gateway is stopped at the end of its block and must exit 0 with no sanitizer report.
// The fixture is test/fixtures/hostile/hostile.mjs (its fault tools: kill, killstream, garbage,
// huge, wrongid; stdio flags crash=start, crashonce=FILE). What attack-limits.test.mjs covers
// already (refunds of MCP-level timeouts, cancels, client disconnects, JSON-RPC errors, connect
// failure of a Streamable HTTP upstream) is not repeated; here the faults are below MCP.
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/faults.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as A from './lib/attack.mjs';
import { startHostile } from '../fixtures/hostile/hostile.mjs';

H.requireNodeModules();

const ctx = A.makeContext('tollgate-faults-');
const test = ctx.test(it);
let hostile;

before(async () => {
  ctx.init();
  hostile = await startHostile();
  ctx.cleanup.add(() => hostile.stop());
});
after(async () => {
  process.stderr.write(`gateways started by this file:\n${ctx.summary().replace(/^/gm, '  ')}\n`);
  await ctx.cleanup.run();
});

const readJsonLines = (f) => (fs.existsSync(f) ? fs.readFileSync(f, 'utf8').replace(/[^\n]*$/, '').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []);
const stdioCommand = (log, flags) => [process.execPath, A.HOSTILE, '--stdio', '--log', log, ...(flags ? ['--flags', flags] : [])];

/** A raw 2025-06-18 session on /UP/mcp; throws with the answer when initialize fails. */
async function session(gw, up) {
  const url = A.mcpUrl(gw, up);
  const r = await H.postRaw(ctx.fetch, url, H.initializeBody(1));
  assert.equal(r.status, 200, `initialize on /${up}/mcp: HTTP ${r.status} ${r.text}`);
  assert.ok(r.messages[0]?.result, `initialize on /${up}/mcp: ${r.text}`);
  const sid = r.headers.get('mcp-session-id');
  const headers = { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-06-18' };
  const n = await H.postRaw(ctx.fetch, url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
  assert.ok(n.status === 202 || n.status === 200, `initialized: ${n.status}`);
  return { url, sid, headers, up };
}

/** A JSON-RPC error answer with code `code`, at HTTP 200, and no result beside it. */
function assertError(r, id, code, what) {
  const a = A.answerOf(r, id);
  const show = `HTTP ${r.status} ${r.text.slice(0, 600)}`;
  assert.equal(r.status, 200, `${what}: the HTTP status of a JSON-RPC error answer: ${show}`);
  assert.ok(a, `${what}: a JSON-RPC answer to ${JSON.stringify(id)}: ${show}`);
  assert.ok(!('result' in a), `${what}: an error, not a result: ${show}`);
  assert.equal(a.error?.code, code, `${what}: error code: ${show}`);
  return a;
}

/**
 * One gateway for a block of fault cases: upstreams `ups` (name -> conf without policy) share
 * one policy where each tool of `limitedTools` is limited to 1 call a minute (counter: its own
 * name) and everything else is allowed; an audit file; a control upstream "ctl" and a control
 * session on it.
 */
async function faultGateway(name, { ups, limitedTools, limits = {}, audit, admin = false }) {
  const tools = {};
  for (const t of limitedTools) tools[t] = { limits: [{ counter: t, window: 'minute', max: 1 }] };
  const policy = ctx.writePolicy(`${name}.json`, { version: '1', default: 'allow', tools });
  const auditFile = audit ?? path.join(ctx.dir, `${name}-audit.log`);
  const upstreams = [{ name: 'ctl', url: hostile.url('/mcp'), call_timeout_ms: 5000, policy }];
  for (const [n, u] of Object.entries(ups)) upstreams.push({ name: n, ...u, policy });
  const gw = await ctx.gateway(name, { limits, audit: { file: auditFile }, upstreams, admin });
  gw.auditFile = auditFile;
  gw.ctl = await session(gw, 'ctl');
  gw.controls = 0;
  return gw;
}

/** Runs fn() while another session's call is in flight; that call must succeed. */
async function withControl(gw, fn) {
  const n = ++gw.controls;
  const ms = 200;
  const p = A.rpc(ctx.fetch, gw.ctl.url, gw.ctl, A.call(`ctl-${n}`, `sleep_control_${n}`, { ms }));
  let out;
  try { out = await fn(); } finally {
    const a = await p;
    assert.equal(H.resultText(a.result), `slept ${ms} ms`, `the control session's call alongside the fault: ${JSON.stringify(a)}`);
  }
  // and one after it
  const b = await A.rpc(ctx.fetch, gw.ctl.url, gw.ctl, A.call(`ctl-${n}-after`, 'echo', { text: `after ${n}` }));
  assert.equal(H.resultText(b.result), `after ${n}`, `the control session after the fault: ${JSON.stringify(b)}`);
  return out;
}

const auditOf = (gw, tool) => readJsonLines(gw.auditFile).filter((l) => l.tool === tool);

/** Waits for the audit line settling the first call of `tool`, and checks its outcome. */
async function assertAudited(gw, tool, outcome) {
  const rec = await H.waitFor(() => auditOf(gw, tool).find((l) => l.decision === 'allow' && l.outcome), { timeout: 5000 });
  assert.ok(rec, `the audit log records the failed ${tool} call: ${JSON.stringify(auditOf(gw, tool))}`);
  assert.equal(rec.outcome, outcome, `the audit outcome of the failed ${tool} call: ${JSON.stringify(rec)}`);
  assert.equal(rec.upstream, tool.split('_').at(-1), JSON.stringify(rec));
}

/**
 * The refund rule: the second call of `tool` (max 1), on a fresh session. Not refunded: -32002.
 * Refunded: the call is decided again and fails like the first (`againCode`).
 */
async function assertCounter(gw, up, tool, args, { refunded, againCode = -32004 }) {
  const s = await session(gw, up);
  const id = `${tool}-again`;
  const r = await H.postRaw(ctx.fetch, s.url, A.call(id, tool, args), s.headers);
  const want = refunded ? againCode : -32002;
  assertError(r, id, want, `call 2 of ${tool} (max 1; the first ${refunded ? 'surely never ran: refunded' : 'may have run: kept'})`);
}

/**
 * One fault case: a fresh session on `up` calls `tool`; the client gets `code` (HTTP 200), the
 * audit line says `outcome`, the counter follows `refunded`, and the control session is served.
 * Returns the first answer's postRaw result.
 */
async function faultCase(gw, up, tool, args, { code = -32004, outcome, refunded, againCode, check }) {
  const s = await session(gw, up);
  const id = `${tool}-1`;
  const r = await withControl(gw, () => H.postRaw(ctx.fetch, s.url, A.call(id, tool, args), s.headers));
  if (code === 'result') {
    const a = A.answerOf(r, id);
    assert.ok(a?.result, `${tool}: a result: HTTP ${r.status} ${r.text.slice(0, 400)}`);
  } else {
    assertError(r, id, code, tool);
  }
  await check?.(r, s);
  await assertAudited(gw, tool, outcome);
  await assertCounter(gw, up, tool, args, { refunded, againCode });
  A.assertAlive(gw, `after ${tool}`);
  return r;
}

const KINDS = ['h', 'lsse', 'st'];

describe('faults', { concurrency: true }, () => {
  // -------------------------------------------------------------------------------------------
  describe('an upstream killed mid-call and mid-stream', { concurrency: 1 }, () => {
    let gw;
    const stLog = () => path.join(ctx.dir, 'kill-stdio.log');
    before(async () => {
      gw = await faultGateway('kill', {
        ups: {
          h: { url: hostile.url('/mcp'), call_timeout_ms: 3000 },
          lsse: { url: hostile.url('/sse'), transport: 'sse', call_timeout_ms: 3000 },
          st: { command: stdioCommand(stLog()), call_timeout_ms: 3000 },
        },
        limitedTools: KINDS.flatMap((k) => [`kill_${k}`, `killstream_${k}`]),
      });
    });

    for (const up of KINDS) {
      test(`killed after reading the request (upstream ${up}): -32004, kept (it may have run), audited "unavailable"`, async () => {
        const pids0 = readJsonLines(stLog()).filter((l) => l.started).map((l) => l.pid);
        await faultCase(gw, up, `kill_${up}`, {}, { outcome: 'unavailable', refunded: false });
        if (up === 'st') {
          // the child died with the call; the next session got a fresh one
          const started = readJsonLines(stLog()).filter((l) => l.started).map((l) => l.pid);
          const dead = readJsonLines(stLog()).find((l) => l.msg?.params?.name === 'kill_st')?.pid;
          assert.ok(started.length > pids0.length, `a new child after the crash: ${started}`);
          assert.notEqual(started.at(-1), dead, `the next session's child is not the dead one (${dead})`);
          await gw.waitForLog(/upstream process exited"? upstream=st /);
        }
      });

      test(`its answer stream cut after one progress notification (upstream ${up}): the progress arrives, then -32004, kept`, async () => {
        const tool = `killstream_${up}`;
        const s = await session(gw, up);
        const id = `${tool}-1`;
        const body = A.call(id, tool, {});
        body.params._meta = { progressToken: `pt-${up}` };
        const r = await withControl(gw, () => H.postRaw(ctx.fetch, s.url, body, s.headers));
        assertError(r, id, -32004, tool);
        const progress = r.messages.filter((m) => m?.method === 'notifications/progress');
        assert.equal(progress.length, 1, `the one progress notification before the cut reached the client: ${r.text.slice(0, 600)}`);
        assert.equal(progress[0].params.progressToken, `pt-${up}`, 'with the client\'s own token');
        await assertAudited(gw, tool, 'unavailable');
        await assertCounter(gw, up, tool, {}, { refunded: false });
      });
    }

    test('the gateway exits clean', async () => { await A.stopAndCheck(gw); });
  });

  // -------------------------------------------------------------------------------------------
  describe('an upstream that refuses connections or hangs', { concurrency: 1 }, () => {
    let gw;
    let hang; // accepts, reads, never answers
    const held = new Set();
    before(async () => {
      hang = net.createServer((s) => { held.add(s); s.on('error', () => {}); s.on('close', () => held.delete(s)); });
      await new Promise((r) => hang.listen(0, '127.0.0.1', r));
      ctx.cleanup.add(() => new Promise((r) => { for (const s of held) s.destroy(); hang.close(() => r()); }));
      const closed = await H.freePort('127.0.0.2'); // nobody listens there (and no fixture can)
      const hangUrl = `http://127.0.0.1:${hang.address().port}`;
      gw = await faultGateway('conn', {
        ups: {
          h: { url: `http://127.0.0.2:${closed}/mcp`, initialize: 'local', connect_timeout_ms: 500 },
          lsse: { url: `http://127.0.0.2:${closed}/sse`, transport: 'sse', connect_timeout_ms: 500 },
          hh: { url: `${hangUrl}/mcp`, initialize: 'local', connect_timeout_ms: 500, call_timeout_ms: 400 },
          hlsse: { url: `${hangUrl}/sse`, transport: 'sse', connect_timeout_ms: 500, call_timeout_ms: 400 },
        },
        limitedTools: ['echo_h', 'echo_hh'],
      });
    });

    test('connection refused (Streamable HTTP, initialize local): -32004, refunded (it never ran), audited "unavailable"', async () => {
      await faultCase(gw, 'h', 'echo_h', {}, { outcome: 'unavailable', refunded: true, againCode: -32004 });
      await gw.waitForLog(/upstream connect failed"? upstream=h /);
    });

    test('connection refused (legacy SSE): initialize gets -32004 at HTTP 200, no session is made', async () => {
      const r = await withControl(gw, () => H.postRaw(ctx.fetch, A.mcpUrl(gw, 'lsse'), H.initializeBody('init-lsse')));
      assertError(r, 'init-lsse', -32004, 'initialize on a legacy SSE upstream that refuses connections');
      assert.equal(r.headers.get('mcp-session-id'), null, 'no session id for a failed initialize');
    });

    test('accepts and never answers (Streamable HTTP): -32004 at call_timeout_ms, kept (the request was sent), audited "timeout"', async () => {
      const t0 = Date.now();
      await faultCase(gw, 'hh', 'echo_hh', {}, { outcome: 'timeout', refunded: false });
      assert.ok(held.size > 0, 'the hanging upstream holds the gateway\'s connection');
      assert.ok(Date.now() - t0 < 8000, 'bounded by call_timeout_ms');
    });

    test('accepts and never answers (legacy SSE: no endpoint event): initialize gets -32004 in bounded time', async () => {
      const t0 = Date.now();
      const r = await withControl(gw, () => H.postRaw(ctx.fetch, A.mcpUrl(gw, 'hlsse'), H.initializeBody('init-hlsse')));
      assertError(r, 'init-hlsse', -32004, 'initialize on a legacy SSE upstream that never answers');
      assert.ok(Date.now() - t0 < 5000, `answered in ${Date.now() - t0} ms (call_timeout_ms 400)`);
    });

    test('the gateway exits clean', async () => { await A.stopAndCheck(gw); });
  });

  // -------------------------------------------------------------------------------------------
  describe('an upstream that sends garbage', { concurrency: 1 }, () => {
    let gw;
    const stLog = () => path.join(ctx.dir, 'garbage-stdio.log');
    const KINDS_H = ['nonhttp', 'badchunk', 'badjson', 'badsse'];
    before(async () => {
      const ups = {
        lsse: { url: hostile.url('/sse'), transport: 'sse', call_timeout_ms: 3000 },
        st: { command: stdioCommand(stLog()), call_timeout_ms: 3000 },
      };
      // one Streamable HTTP upstream per kind of garbage, so each has its own tool and counter
      for (const g of KINDS_H) ups[g] = { url: hostile.url('/mcp'), call_timeout_ms: 3000 };
      gw = await faultGateway('garbage', { ups, limitedTools: [...KINDS_H, 'lsse', 'st'].map((u) => `garbage_${u}`) });
    });

    const expectH = {
      nonhttp: ['bytes that are not HTTP', 'unavailable'],
      badchunk: ['an HTTP head and a malformed chunked body', 'unavailable'],
      badjson: ['a JSON answer cut in the middle', 'error'],
      badsse: ['an SSE answer whose event is cut JSON', 'unavailable'],
    };
    for (const [g, [what, outcome]] of Object.entries(expectH)) {
      test(`Streamable HTTP: ${what}: -32004, kept (sent before), audited "${outcome}"`, async () => {
        await faultCase(gw, g, `garbage_${g}`, { kind: g }, { outcome, refunded: false });
        if (g === 'nonhttp' || g === 'badchunk') await gw.waitForLog(/malformed upstream response"? upstream=/);
      });
    }

    for (const up of ['lsse', 'st']) {
      test(`${up === 'st' ? 'stdio: a line that is not JSON' : 'legacy SSE: a line that is not SSE'} and a cut JSON answer with the right id are skipped; the real answer follows and counts`, async () => {
        const r = await faultCase(gw, up, `garbage_${up}`, {}, { code: 'result', outcome: 'ok', refunded: false });
        assert.equal(H.resultText(A.answerOf(r, `garbage_${up}-1`).result), 'after garbage');
      });
    }

    test('the gateway exits clean', async () => { await A.stopAndCheck(gw); });
  });

  // -------------------------------------------------------------------------------------------
  describe('an upstream answer over limits.response_bytes', { concurrency: 1 }, () => {
    let gw;
    const LIMIT = 65536;
    const stLog = () => path.join(ctx.dir, 'huge-stdio.log');
    const MODES = ['hcl', 'hchunked', 'hsse'];
    before(async () => {
      const ups = {
        lsse: { url: hostile.url('/sse'), transport: 'sse', call_timeout_ms: 1000 },
        st: { command: stdioCommand(stLog()), call_timeout_ms: 1000 },
      };
      for (const m of MODES) ups[m] = { url: hostile.url('/mcp'), call_timeout_ms: 3000 };
      gw = await faultGateway('huge', {
        ups, limits: { response_bytes: LIMIT }, limitedTools: [...MODES, 'lsse', 'st'].map((u) => `huge_${u}`),
      });
    });

    const what = { hcl: 'with Content-Length', hchunked: 'chunked', hsse: 'as one SSE event' };
    for (const m of MODES) {
      test(`Streamable HTTP, ${what[m]} (256 KiB, limit 64 KiB): -32004, kept (it ran), audited "error"`, async () => {
        const r = await faultCase(gw, m, `huge_${m}`, { mode: m.slice(1), kib: 256 }, { outcome: 'error', refunded: false });
        assert.ok(r.text.length < LIMIT, `the client got none of the huge answer (${r.text.length} bytes)`);
        await gw.waitForLog(new RegExp(`upstream (SSE event too large; stream cut|response too large)"? upstream=${m} `));
      });
    }

    // On a message stream the one message is skipped and the stream goes on. The message's
    // first bytes name the call's id (a stdio line, a legacy SSE event's data), so that call
    // fails at once (audited "error"), long before its call_timeout_ms (3 s here).
    for (const up of ['lsse', 'st']) {
      test(`${up === 'st' ? 'stdio: one line' : 'legacy SSE: one event'} of 256 KiB (limit 64 KiB): skipped, -32004 at once, kept, and the gateway survives`, async () => {
        const t0 = Date.now();
        const r = await faultCase(gw, up, `huge_${up}`, { kib: 256 }, { outcome: 'error', refunded: false });
        assert.ok(Date.now() - t0 < 2500, `failed before call_timeout_ms (3000 ms): ${Date.now() - t0} ms`);
        assert.ok(r.text.length < LIMIT, `the client got none of the huge answer (${r.text.length} bytes)`);
        await gw.waitForLog(up === 'st' ? /upstream stdout line too long; skipped"? upstream=st / : /legacy SSE upstream event too large"? upstream=lsse/);
      });
    }

    test('the gateway exits clean', async () => { await A.stopAndCheck(gw); });
  });

  // -------------------------------------------------------------------------------------------
  describe('an answer carrying another request\'s id', { concurrency: 1 }, () => {
    let gw;
    const stLog = () => path.join(ctx.dir, 'wrongid-stdio.log');
    before(async () => {
      gw = await faultGateway('wrongid', {
        ups: {
          h: { url: hostile.url('/mcp'), call_timeout_ms: 3000 },
          hsse: { url: hostile.url('/mcp'), call_timeout_ms: 3000 },
          lsse: { url: hostile.url('/sse'), transport: 'sse', call_timeout_ms: 3000 },
          st: { command: stdioCommand(stLog()), call_timeout_ms: 3000 },
        },
        limitedTools: [],
      });
    });

    /** The gateway id of the victim's call as the upstream saw it. */
    const upstreamId = (up, tool) => {
      if (up === 'st') return readJsonLines(stLog()).find((l) => l.msg?.params?.name === tool)?.msg.id;
      return hostile.calls(tool)[0]?.msg.id;
    };

    for (const up of ['h', 'hsse', 'lsse', 'st']) {
      const how = up === 'h' ? 'as the JSON answer' : up === 'hsse' ? 'as the first event of an SSE answer (the real answer second)'
        : 'on the session\'s stream, before the real answer';
      test(`upstream ${up}: an answer with another session's call id ${how} never reaches that session`, async () => {
        const victim = await session(gw, up);
        const thief = await session(gw, up);
        const vtool = `sleep_victim_${up}`;
        const pv = H.postRaw(ctx.fetch, victim.url, A.call('victim-1', vtool, { ms: 800 }), victim.headers);
        const gid = await H.waitUntil(() => upstreamId(up, vtool), { what: 'the victim\'s call at the upstream' });
        const tr = await H.postRaw(ctx.fetch, thief.url, A.call('thief-1', `wrongid_${up}`, { id: gid, sse: up === 'hsse' }), thief.headers);
        assert.doesNotMatch(tr.text, /stolen/, `the other call's answer reached the thief: ${tr.text.slice(0, 400)}`);
        const ta = A.answerOf(tr, 'thief-1');
        if (up === 'h') {
          assertError(tr, 'thief-1', -32004, 'an answer that is not the answer to this request');
        } else {
          assert.equal(H.resultText(ta?.result), 'mine', `the thief gets its real answer: ${tr.text.slice(0, 400)}`);
        }
        const vr = await pv;
        assert.doesNotMatch(vr.text, /stolen/, `the thief's answer reached the victim: ${vr.text.slice(0, 400)}`);
        assert.equal(H.resultText(A.answerOf(vr, 'victim-1')?.result), 'slept 800 ms', `the victim's own answer: ${vr.text.slice(0, 400)}`);
        if (up === 'h') {
          const rec = await H.waitFor(() => auditOf(gw, 'wrongid_h').find((l) => l.outcome), { timeout: 5000 });
          assert.equal(rec?.outcome, 'error', `audited as a garbled answer: ${JSON.stringify(rec)}`);
        }
      });
    }

    test('the gateway exits clean', async () => { await A.stopAndCheck(gw); });
  });

  // -------------------------------------------------------------------------------------------
  describe('a stdio child that crashes at start', { concurrency: 1 }, () => {
    let gw;
    const log = () => path.join(ctx.dir, 'crashstart-stdio.log');
    const once = () => path.join(ctx.dir, 'crashstart-once.flag');
    before(async () => {
      gw = await faultGateway('crashstart', {
        ups: {
          dead: { command: stdioCommand(log(), 'crash=start'), call_timeout_ms: 2000 },
          once: { command: stdioCommand(log(), `crashonce=${once()}`), call_timeout_ms: 2000 },
        },
        limitedTools: [],
      });
    });

    test('every child dies at start: initialize gets -32004 (HTTP 200), no session, and the next try too', async () => {
      for (const i of [1, 2]) {
        const r = await withControl(gw, () => H.postRaw(ctx.fetch, A.mcpUrl(gw, 'dead'), H.initializeBody(`dead-${i}`)));
        assertError(r, `dead-${i}`, -32004, `initialize ${i} on an upstream whose child dies at start`);
        assert.equal(r.headers.get('mcp-session-id'), null, 'no session id for a failed initialize');
      }
      await gw.waitForLog(/upstream process exited"? upstream=dead pid=\d+ status=3/);
    });

    test('the first child dies at start: that session fails, the next session gets a fresh child that works', async () => {
      const r = await H.postRaw(ctx.fetch, A.mcpUrl(gw, 'once'), H.initializeBody('once-1'));
      assertError(r, 'once-1', -32004, 'initialize on the child that dies');
      const s = await session(gw, 'once');
      const a = await A.rpc(ctx.fetch, s.url, s, A.call('once-echo', 'echo', { text: 'fresh child' }));
      assert.equal(H.resultText(a.result), 'fresh child', JSON.stringify(a));
      const dead = Number(fs.readFileSync(once(), 'utf8'));
      const served = readJsonLines(log()).find((l) => l.msg?.id !== undefined && l.msg?.params?.name === 'echo')?.pid;
      assert.ok(served && served !== dead, `served by a fresh child (${served}), not the dead one (${dead})`);
    });

    test('the gateway exits clean', async () => { await A.stopAndCheck(gw); });
  });

  // -------------------------------------------------------------------------------------------
  describe('the audit log\'s disk is full (audit.file = /dev/full: every write fails with ENOSPC)', { concurrency: 1 }, () => {
    let gw;
    before(async () => {
      gw = await faultGateway('diskfull', {
        audit: '/dev/full', admin: true,
        ups: {
          h: { url: hostile.url('/mcp') },
          down: { url: `http://127.0.0.2:${await H.freePort('127.0.0.2')}/mcp`, initialize: 'local', connect_timeout_ms: 500 },
        },
        limitedTools: ['echo_limited'],
      });
      // (the policy allows everything else; deny one tool)
    });

    test('calls still get their right answers and refusals; the failure is logged once and counted; memory stays bounded', async () => {
      const s = await session(gw, 'h');
      const d = await session(gw, 'down');
      const answers = [];
      for (let i = 0; i < 10; i++) answers.push(await A.rpc(ctx.fetch, s.url, s, A.call(`e-${i}`, 'echo', { text: `e${i}` })));
      answers.forEach((a, i) => assert.equal(H.resultText(a.result), `e${i}`, JSON.stringify(a)));
      const l1 = await A.rpc(ctx.fetch, s.url, s, A.call('l-1', 'echo_limited', { text: 'once' }));
      assert.equal(H.resultText(l1.result), 'once', JSON.stringify(l1));
      const l2 = await A.rpc(ctx.fetch, s.url, s, A.call('l-2', 'echo_limited', { text: 'twice' }));
      assert.equal(l2.error?.code, -32002, `the limit holds with no audit: ${JSON.stringify(l2)}`);
      const dn = await A.rpc(ctx.fetch, d.url, d, A.call('d-1', 'echo', { text: 'x' }));
      assert.equal(dn.error?.code, -32004, JSON.stringify(dn));
      await gw.waitForLog(/audit write failed/);
      const dropped = await gw.waitForMetric('tollgate_audit_dropped_total', (v) => v >= 1);
      // memory: 300 more calls, RSS must not follow them
      const rss0 = A.vmRssKiB(gw.proc.pid);
      for (let i = 0; i < 300; i += 10) {
        await Promise.all(Array.from({ length: 10 }, (_, j) => A.rpc(ctx.fetch, s.url, s, A.call(`m-${i + j}`, 'echo', { text: 'm' }))));
      }
      const rss1 = A.vmRssKiB(gw.proc.pid);
      // The audit writes are asynchronous: the last batch may still be on its way to the disk.
      await gw.waitForMetric('tollgate_audit_dropped_total', (v) => v >= 313).catch(() => {});
      const m = await gw.metrics();
      const failures = (gw.stderr().match(/audit write failed/g) ?? []).length;
      process.stderr.write(`# audit on /dev/full: ${m.tollgate_audit_dropped_total} records dropped (${dropped} after the first 13 calls), ` +
        `${m.tollgate_audit_records_total} counted as written, ${failures} "audit write failed" lines; RSS ${rss0} -> ${rss1} KiB\n`);
      A.assertAlive(gw, 'with its audit log on a full disk');
      assert.ok(rss1 - rss0 < 32 * 1024, `RSS grew by ${rss1 - rss0} KiB over 300 calls whose audit lines cannot be written`);
      const wrong = [];
      // 313 calls, each with an audit record, none of which reached the disk
      if (!(m.tollgate_audit_dropped_total >= 313)) wrong.push(`tollgate_audit_dropped_total is ${m.tollgate_audit_dropped_total}: every lost record must be counted (313)`);
      if (m.tollgate_audit_records_total > 0) wrong.push(`tollgate_audit_records_total ("written") is ${m.tollgate_audit_records_total}: none was written`);
      if (failures !== 1) wrong.push(`the failure is logged ${failures} times: once, not once per failed write`);
      assert.deepEqual(wrong, [], wrong.join('; '));
    });

    test('the gateway exits clean', async () => { await A.stopAndCheck(gw); });
  });

  // -------------------------------------------------------------------------------------------
  // Contract (issue 10; the lead's change): upstreams[].backoff_ms (default 500, 0 = off) and
  // backoff_max_ms (default 30000). After 3 consecutive failures to reach an HTTP upstream it is
  // down for backoff_ms, doubling at each further failure up to backoff_max_ms; while down a call
  // gets -32004 at once with no connection attempt, and the log says once
  // `upstream backing off upstream=NAME retry_in_ms=N`; after the period one call tries again; a
  // success logs `upstream reachable again upstream=NAME` and clears it.
  describe('backoff after repeated upstream failures, then recovery', { concurrency: 1 }, () => {
    let gw;
    let port; // "back": down at first, then up
    let back;
    before(async () => {
      port = await H.freePort('127.0.0.2');
      gw = await faultGateway('backoff', {
        ups: {
          back: { url: `http://127.0.0.2:${port}/mcp`, initialize: 'local', connect_timeout_ms: 500, backoff_ms: 3000, backoff_max_ms: 6000 },
          never: { url: `http://127.0.0.2:${await H.freePort('127.0.0.2')}/mcp`, initialize: 'local', connect_timeout_ms: 500, backoff_ms: 100, backoff_max_ms: 400 },
        },
        limitedTools: ['echo_back'],
      });
    });
    after(async () => { await back?.stop(); });

    const backingOff = (up) => [...gw.stderr().matchAll(new RegExp(`upstream backing off"? upstream=${up} (?:\\S+ )*retry_in_ms=(\\d+)`, 'g'))].map((m) => Number(m[1]));

    test('3 failures, then -32004 at once with no connection attempt; refunded; after the period one call tries again and recovers', async () => {
      const s = await session(gw, 'back');
      const call = (id) => H.postRaw(ctx.fetch, s.url, A.call(id, 'echo_back', { text: id }), s.headers);
      for (const i of [1, 2, 3]) assertError(await call(`f${i}`), `f${i}`, -32004, `failure ${i}`);
      await gw.waitForLog(/upstream backing off"? upstream=back (?:\S+ )*retry_in_ms=3000/);
      const tDown = Date.now();
      // the upstream is back at once, but the gateway does not know: it must not try
      back = await startHostile({ port, host: '127.0.0.2' });
      let connections = 0;
      back.server.on('connection', () => { connections++; });
      const t0 = Date.now();
      const r = await withControl(gw, () => call('down-1'));
      const took = Date.now() - t0;
      assert.ok(Date.now() - tDown < 3000, 'still inside the backoff period (the check below is only meaningful then)');
      assertError(r, 'down-1', -32004, 'a call while the upstream is backing off');
      assert.ok(took < 400, `answered at once, not after a connect attempt: ${took} ms`);
      assert.equal(connections, 0, 'no connection attempt while backing off');
      assert.deepEqual(backingOff('back'), [3000], 'the backing-off line is logged once for the period');
      // after the period: one call tries, succeeds, clears it (every refusal was refunded: max 1)
      let n = 0;
      const seen = [];
      await H.waitUntil(async () => {
        const id = `retry-${++n}`;
        const a = A.answerOf(await call(id), id);
        seen.push(a?.error?.code ?? (a?.result ? 'result' : 'none'));
        return a?.result;
      }, { timeout: 8000, interval: 250, what: 'a call that reaches the upstream after the backoff period', detail: () => seen.join(',') });
      assert.ok(seen.slice(0, -1).every((c) => c === -32004), `refused while down, never -32002 (refunded): ${seen}`);
      assert.ok(Date.now() - tDown >= 2900, `no retry before backoff_ms: ${Date.now() - tDown} ms`);
      await gw.waitForLog(/upstream reachable again"? upstream=back/);
      assert.equal(back.calls('echo_back').length, 1, 'the budget of 1 was not spent by refused calls');
      const after = await call('after');
      assert.equal(A.answerOf(after, 'after')?.error?.code, -32002, `the one successful call was counted: ${after.text}`);
    });

    test('the period doubles at each further failure, up to backoff_max_ms', async () => {
      const s = await session(gw, 'never');
      await H.waitUntil(async () => {
        await H.postRaw(ctx.fetch, s.url, A.call(`n-${Date.now()}`, 'echo', {}), s.headers);
        return backingOff('never').length >= 4;
      }, { timeout: 10000, interval: 40, what: 'four backoff periods', detail: () => JSON.stringify(backingOff('never')) });
      assert.deepEqual(backingOff('never').slice(0, 4), [100, 200, 400, 400], gw.stderr().split('\n').filter((l) => /never/.test(l)).join('\n'));
    });

    test('the gateway exits clean', async () => { await A.stopAndCheck(gw); });
  });
});
