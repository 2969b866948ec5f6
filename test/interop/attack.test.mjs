// The hostile review's attack battery (issue 7), part 1: crashes and hangs a client or an upstream
// can cause. Each test reproduces one defect and fails on a gateway that has it (a sanitizer
// report, an exit, a wrong or missing answer); it passes once the defect is fixed.
//   1. a refused call (denied, rate limited, approval queue full, a batch) answered on a
//      connection the client has just reset: the failed write frees the call, and the caller
//      frees it again (double free)
//   2. a reload that removes an upstream while a call to it waits (stdio, legacy SSE, Streamable
//      HTTP; reloads in a row): the one-second tick and the answer path read the freed upstream
//   4. a legacy SSE upstream that answers initialize with an error: the session and its SSE
//      parser are freed while the parser runs
//   8. a server request (sampling/createMessage) listed in deny_server_requests from a legacy SSE
//      upstream: refused for stdio, but dropped unanswered for legacy SSE, so the call hangs
//   9. cancel_parked copies the request id into a 160-byte buffer: a parked call whose id is long
//      cannot be cancelled, and stays in the approval queue
// Part 2 (limits: descriptors, refunds, "error": null) is attack-limits.test.mjs, part 3 (memory
// a client can pin) attack-memory.test.mjs. The upstream is test/fixtures/hostile/hostile.mjs.
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/attack.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as A from './lib/attack.mjs';
import { startHostile } from '../fixtures/hostile/hostile.mjs';

H.requireNodeModules();

const ctx = A.makeContext('tollgate-attack-');
const test = ctx.test(it);
const ADMIN = 'admin-' + H.randomToken();
let hostile; // the in-process hostile upstream (HTTP: Streamable and legacy SSE)
let sdk;

before(async () => {
  sdk = await H.loadSdk();
  ctx.init();
  hostile = await startHostile();
  ctx.cleanup.add(() => hostile.stop());
  ctx.extraLogs['hostile upstream records (tail)'] = () => hostile.records.slice(-20).map((r) => JSON.stringify(r.msg).slice(0, 300)).join('\n');
});
after(async () => {
  process.stderr.write(`gateways started by this file:\n${ctx.summary().replace(/^/gm, '  ')}\n`);
  await ctx.cleanup.run();
});

const stdioCommand = (log, extra = []) => [process.execPath, A.HOSTILE, '--stdio', '--log', log, ...extra];
const readLog = (f) => (fs.existsSync(f) ? fs.readFileSync(f, 'utf8').replace(/[^\n]*$/, '').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []);

/** A raw 2025 session on /UP/mcp (initialize + initialized); headers for follow-up requests. */
async function session(gw, up, proto = '2025-06-18') {
  const url = A.mcpUrl(gw, up);
  const r = await H.postRaw(ctx.fetch, url, H.initializeBody(1, proto));
  assert.equal(r.status, 200, `initialize on /${up}/mcp: HTTP ${r.status} ${r.text}`);
  const sid = r.headers.get('mcp-session-id');
  assert.ok(sid, `a session id: ${r.text}`);
  const headers = { 'mcp-session-id': sid, 'mcp-protocol-version': proto };
  const n = await H.postRaw(ctx.fetch, url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
  assert.ok(n.status === 202 || n.status === 200, `initialized: ${n.status}`);
  return { url, sid, headers, proto };
}

/** The text of a raw POST on session s (for writing on a socket of our own). */
function postText(gw, s, body) {
  return A.httpText('POST', new URL(s.url).pathname, {
    host: `127.0.0.1:${gw.plainPort}`,
    headers: { ...H.MCP_HEADERS, ...s.headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** A normal call that must still work. */
async function echoWorks(gw, s, what) {
  const a = await A.rpc(ctx.fetch, s.url, s, A.call(`echo-${H.randomToken(6)}`, 'echo', { text: 'still here' }));
  assert.equal(H.resultText(a.result), 'still here', `${what}: a normal call afterwards: ${JSON.stringify(a)}`);
}

// ---------------------------------------------------------------------------
// 1. Refused calls answered on a connection the client reset

describe('1. a refused call then an immediate TCP reset (RST) must not crash the gateway', () => {
  // A gateway per case, so that a crash is charged to the case that caused it.
  const N = 300;
  let policy;
  before(() => {
    policy = ctx.writePolicy('rst.json', {
      version: '1', default: 'deny',
      tools: {
        echo: { action: 'allow' },
        denied: { action: 'deny', reason: 'never through the gateway' },
        echo_limited: { limits: [{ counter: 'rst_limited', window: 'minute', max: 1 }] },
        echo_approve: { action: 'approve', approval_mode: 'hold', approval_timeout: 30 },
      },
    });
  });

  /** Decisions so far (all verdicts), from /metrics. */
  async function decisions(gw) {
    const r = await A.admin(ctx.fetch, gw, 'GET', '/metrics', ADMIN);
    let n = 0;
    for (const v of ['allow', 'deny', 'limited', 'approve']) n += A.metric(r.text, new RegExp(`^tollgate_decisions_total\\{verdict="${v}"\\}`)) ?? 0;
    return n;
  }

  /** N times: a new connection, `body` on session proto, reset at once; then a normal call, then a clean exit. */
  async function hammer(name, body, proto = '2025-06-18') {
    const gw = await ctx.gateway(name, {
      admin: { token_sha256: H.sha256hex(ADMIN) },
      limits: { approvals_max: 0 }, // every approve call is refused at once: "the approval queue is full"
      upstreams: [{ name: 'h', url: hostile.url('/mcp'), policy }],
    }, { admin: true });
    const s = await session(gw, 'h', proto);
    const spent = await A.rpc(ctx.fetch, s.url, s, A.call('spend', 'echo_limited')); // the one token: the rest are limited
    assert.ok(spent.result, JSON.stringify(spent));
    const d0 = await decisions(gw);
    const text = postText(gw, s, body);
    let sent = 0;
    while (sent < N && gw.exit === null && await A.sendAndReset(gw.plainPort, text)) sent++;
    // wait until the gateway has decided them all (or died: then /metrics fails, and its exit is awaited)
    const now = async () => { try { return (await decisions(gw)) - d0; } catch { return NaN; } };
    await H.waitFor(async () => { const d = await now(); return Number.isNaN(d) || d >= sent; }, { timeout: 10000 });
    const decided = await now();
    if (Number.isNaN(decided)) await H.waitFor(() => gw.exit !== null, { timeout: 3000 });
    process.stderr.write(`# ${name}: ${sent} connections reset, ${decided} calls decided, tollgate ${gw.status()}\n`);
    A.assertAlive(gw, `after ${sent} refused calls (${name}) whose connection was reset at once`);
    await echoWorks(gw, s, name);
    A.assertAlive(gw, `after ${name}`);
    await A.stopAndCheck(gw);
  }

  test(`a denied tools/call (-32001), reset at once, ${N} times: no double free, the gateway goes on serving and exits clean`, async () => {
    await hammer('rst-denied', A.call('d', 'denied'));
  });

  test(`a rate-limited tools/call (-32002), reset at once, ${N} times`, async () => {
    await hammer('rst-limited', A.call('l', 'echo_limited'));
  });

  test(`an approval call refused because the queue is full (approvals_max = 0, -32003), reset at once, ${N} times`, async () => {
    await hammer('rst-queue-full', A.call('q', 'echo_approve'));
  });

  test(`a batch of refused calls (protocol 2025-03-26 session), reset at once, ${N} times`, async () => {
    await hammer('rst-batch', JSON.stringify([A.call('b1', 'denied'), A.call('b2', 'echo_limited'), A.call('b3', 'echo_approve')]), '2025-03-26');
  });
});

// ---------------------------------------------------------------------------
// 2. A reload that removes an upstream while a call to it waits

describe('2. a reload that removes an upstream with a call in flight', () => {
  // Each gateway keeps the upstream "keep"; the others are removed by reloads while a call of
  // theirs waits (the hostile tool "hang" never answers). Their call_timeout_ms is 1500, so the
  // one-second tick reaches the waiting call within two ticks of the reload.
  const keep = () => ({ name: 'keep', url: hostile.url('/mcp') });
  const limits = { sse_keepalive_ms: 1000 };

  /** Posts a hang call on session s; resolves {answer} or {error} (a network error: the gateway died). */
  function hangCall(s, id) {
    return H.postRaw(ctx.fetch, s.url, A.call(id, `hang_${id}`), s.headers)
      .then((r) => ({ answer: A.answerOf(r, id), r }), (error) => ({ error }));
  }

  /** The client's outcome after the reload: a -32004 error (or a result), never a dead gateway. */
  async function expectCleanEnd(p, what) {
    const out = await Promise.race([p, H.sleep(8000).then(() => ({ pending: true }))]);
    assert.ok(!out.error, `${what}: the waiting client lost its connection (gateway crashed?): ${out.error}`);
    assert.ok(!out.pending, `${what}: the waiting call was never answered (8 s after the reload)`);
    assert.ok(out.answer, `${what}: no JSON-RPC answer: HTTP ${out.r?.status} ${out.r?.text}`);
    if (out.answer.error) assert.equal(out.answer.error.code, -32004, `${what}: ${JSON.stringify(out.answer)}`);
  }

  async function reload(gw, how, opts) {
    ctx.rewriteConf(gw, opts);
    const n = (gw.stderr().match(/configuration reloaded/g) ?? []).length;
    if (how === 'SIGHUP') {
      process.kill(gw.proc.pid, 'SIGHUP');
    } else {
      const r = await A.admin(ctx.fetch, gw, 'POST', '/admin/reload', ADMIN);
      assert.equal(r.status, 200, `POST /admin/reload: ${r.status} ${r.text}`);
    }
    assert.ok(await H.waitFor(() => gw.exit !== null || (gw.stderr().match(/configuration reloaded/g) ?? []).length > n, { timeout: 5000 }),
      'tollgate logged "configuration reloaded"');
    A.assertAlive(gw, `right after the ${how} reload`);
  }

  async function afterTicks(gw, witness, what) {
    // Two keepalive comments on the witness stream = two ticks of the gateway since now.
    const ok = await witness.ticks(2, 6000);
    A.assertAlive(gw, `${what}, two ticks later`);
    assert.ok(ok, `${what}: the tick witness saw no two keepalives (gateway stuck or dead?)`);
  }

  test('stdio upstream (its tool never answers), removed by SIGHUP: clean -32004, no use after free at the tick', async () => {
    const log = path.join(ctx.dir, 'reload-stdio.log');
    const st = { name: 'st', command: stdioCommand(log), call_timeout_ms: 1500 };
    const gw = await ctx.gateway('reload-stdio', {
      admin: { token_sha256: H.sha256hex(ADMIN) }, limits, upstreams: [keep(), st],
    }, { admin: true });
    const witness = await A.tickWitness(gw, 'keep');
    try {
      const s = await session(gw, 'st');
      const p = hangCall(s, 'st-1');
      assert.ok(await H.waitFor(() => readLog(log).some((r) => r.msg?.method === 'tools/call'), { timeout: 5000 }),
        'the stdio child got the call');
      await reload(gw, 'SIGHUP', { ...gw.opts, upstreams: [keep()] });
      await expectCleanEnd(p, 'stdio call across the reload');
      await afterTicks(gw, witness, 'stdio upstream removed');
      const k = await session(gw, 'keep');
      await echoWorks(gw, k, 'after removing the stdio upstream');
    } finally { witness.close(); }
    await A.stopAndCheck(gw);
  });

  test('legacy SSE upstream (its tool never answers), removed by POST /admin/reload: clean -32004, no use after free', async () => {
    const lsse = { name: 'lsse', url: hostile.url('/sse'), transport: 'sse', call_timeout_ms: 1500 };
    const gw = await ctx.gateway('reload-sse', {
      admin: { token_sha256: H.sha256hex(ADMIN) }, limits, upstreams: [keep(), lsse],
    }, { admin: true });
    const witness = await A.tickWitness(gw, 'keep');
    try {
      const s = await session(gw, 'lsse');
      const n0 = hostile.calls('hang_sse-1').length;
      const p = hangCall(s, 'sse-1');
      assert.ok(await hostile.waitFor(() => hostile.calls('hang_sse-1').length > n0, 5000), 'the legacy SSE upstream got the call');
      await reload(gw, 'admin', { ...gw.opts, upstreams: [keep()] });
      await expectCleanEnd(p, 'legacy SSE call across the reload');
      await afterTicks(gw, witness, 'legacy SSE upstream removed');
      const k = await session(gw, 'keep');
      await echoWorks(gw, k, 'after removing the legacy SSE upstream');
    } finally { witness.close(); }
    await A.stopAndCheck(gw);
  });

  test('three reloads in a row, each removing a Streamable HTTP upstream with a call in flight', async () => {
    const ups = ['h1', 'h2', 'h3'].map((name) => ({ name, url: hostile.url('/mcp'), call_timeout_ms: 1500 }));
    const gw = await ctx.gateway('reload-http', {
      admin: { token_sha256: H.sha256hex(ADMIN) }, limits, upstreams: [keep(), ...ups],
    }, { admin: true });
    const witness = await A.tickWitness(gw, 'keep');
    try {
      const sessions = {};
      for (const u of ups) sessions[u.name] = await session(gw, u.name);
      const k = await session(gw, 'keep');
      let left = [...ups];
      for (const [i, u] of ups.entries()) {
        const id = `${u.name}-call`;
        const n0 = hostile.calls(`hang_${id}`).length;
        const p = hangCall(sessions[u.name], id);
        assert.ok(await hostile.waitFor(() => hostile.calls(`hang_${id}`).length > n0, 5000), `${u.name} got the call`);
        left = left.filter((x) => x.name !== u.name);
        await reload(gw, i % 2 ? 'admin' : 'SIGHUP', { ...gw.opts, upstreams: [keep(), ...left] });
        await expectCleanEnd(p, `reload ${i + 1}: the call to ${u.name}`);
        await echoWorks(gw, k, `after reload ${i + 1}`);
      }
      await afterTicks(gw, witness, 'three upstreams removed');
      await echoWorks(gw, k, 'after the three reloads and two ticks');
    } finally { witness.close(); }
    await A.stopAndCheck(gw);
  });
});

// ---------------------------------------------------------------------------
// 4. A legacy SSE upstream that refuses initialize

describe('4. a legacy SSE upstream that answers initialize with a JSON-RPC error', () => {
  test('the client gets the error, the session is gone, the gateway survives (5 times)', async () => {
    const gw = await ctx.gateway('sse-init-error', {
      upstreams: [
        { name: 'keep', url: hostile.url('/mcp') },
        { name: 'bad', url: hostile.url('/init=error/sse'), transport: 'sse', call_timeout_ms: 3000 },
      ],
    });
    for (let i = 0; i < 5; i++) {
      const r = await H.postRaw(ctx.fetch, A.mcpUrl(gw, 'bad'), H.initializeBody(`init-${i}`));
      A.assertAlive(gw, `after initialize ${i} was refused by the legacy SSE upstream`);
      const a = A.answerOf(r, `init-${i}`);
      assert.ok(a?.error, `initialize ${i}: the upstream's error reaches the client: HTTP ${r.status} ${r.text}`);
      assert.equal(a.error.code, -32600, `the upstream's own error: ${JSON.stringify(a)}`);
      assert.ok(!r.headers.get('mcp-session-id'), 'no session for a refused initialize');
    }
    const k = await session(gw, 'keep');
    await echoWorks(gw, k, 'after five refused initializes');
    await A.stopAndCheck(gw);
  });
});

// ---------------------------------------------------------------------------
// 8. deny_server_requests on a legacy SSE upstream

describe('8. deny_server_requests: a refused server request gets its error answer on every upstream transport', () => {
  let gw;
  const log = () => path.join(ctx.dir, 'deny-stdio.log');
  const sampled = [];

  before(async () => {
    gw = await ctx.gateway('deny-server-requests', {
      upstreams: [
        { name: 'lsse', url: hostile.url('/sse'), transport: 'sse', call_timeout_ms: 5000, deny_server_requests: ['sampling/createMessage'] },
        { name: 'st', command: stdioCommand(log()), call_timeout_ms: 5000, deny_server_requests: ['sampling/createMessage'] },
      ],
    });
  });

  async function sdkClient(up) {
    return H.connectClient(A.mcpUrl(gw, up), {
      fetch: ctx.fetch, cleanup: ctx.cleanup, capabilities: { sampling: {} },
      handlers: [[sdk.types.CreateMessageRequestSchema, async (req) => {
        sampled.push(req.params);
        return { model: 'm', role: 'assistant', content: { type: 'text', text: 'should never be asked' } };
      }]],
    });
  }

  /** Calls sample_X; resolves {result} | {error} within 8 s (or {pending}). */
  async function sampleCall(c, name) {
    const p = c.client.callTool({ name, arguments: {} }, undefined, { timeout: 15000 })
      .then((result) => ({ result }), (error) => ({ error }));
    return Promise.race([p, H.sleep(8000).then(() => ({ pending: true }))]);
  }

  test('stdio upstream (control): the child gets a -32001 answer for its sampling request; the call completes', async () => {
    const c = await sdkClient('st');
    const out = await sampleCall(c, 'sample_stdio');
    assert.ok(!out.pending && !out.error, `the call completed: ${out.error ?? 'still pending after 8 s'}`);
    const answers = readLog(log()).filter((r) => r.msg && !r.msg.method && String(r.msg.id).startsWith('srvreq-'));
    assert.equal(answers.length, 1, `the child got one answer to its server request: ${JSON.stringify(answers)}`);
    assert.equal(answers[0].msg.error?.code, -32001, JSON.stringify(answers[0].msg));
    assert.equal(sampled.length, 0, 'the client was never asked');
    await c.close();
  });

  test('legacy SSE upstream: it gets a -32001 answer (POSTed to its endpoint) and the call completes instead of hanging', async () => {
    const c = await sdkClient('lsse');
    const n0 = hostile.serverAnswers.length;
    const out = await sampleCall(c, 'sample_sse');
    const answers = hostile.serverAnswers.slice(n0).filter((a) => String(a.msg.id).startsWith('srvreq-'));
    assert.equal(answers.length, 1, `the legacy SSE upstream got an answer to its sampling request (got ${answers.length}); ` +
      `the client's call: ${out.pending ? 'still pending after 8 s' : out.error ? `failed: ${out.error.message}` : 'completed'}`);
    assert.equal(answers[0].msg.error?.code, -32001, JSON.stringify(answers[0].msg));
    assert.ok(!out.pending && !out.error, `the call completed: ${out.error ?? 'still pending'}`);
    assert.equal(sampled.length, 0, 'the client was never asked');
    await c.close();
    A.assertAlive(gw);
  });
});

// ---------------------------------------------------------------------------
// 9. Parked calls with a long id (cancel_parked's 160-byte buffer) and parked calls reset

describe('9. a parked call whose id is 1,000 characters long: cancel and disconnect withdraw it', () => {
  let gw;
  let s;
  const LONG = 'L'.repeat(1000);

  before(async () => {
    const policy = ctx.writePolicy('park.json', {
      version: '1', default: 'deny',
      tools: { echo: { action: 'allow' }, echo_park: { action: 'approve', approval_mode: 'hold', approval_timeout: 60 } },
    });
    gw = await ctx.gateway('park', {
      admin: { token_sha256: H.sha256hex(ADMIN) },
      upstreams: [{ name: 'h', url: hostile.url('/mcp'), policy }],
    }, { admin: true });
    s = await session(gw, 'h');
  });

  const approvals = async () => {
    const r = await A.admin(ctx.fetch, gw, 'GET', '/admin/approvals', ADMIN);
    assert.equal(r.status, 200, r.text);
    return r.json.approvals;
  };

  /** Waits for an approval not in `seen` (ids) to be listed. */
  async function newApproval(seen) {
    const item = await H.waitFor(async () => (await approvals()).find((x) => !seen.has(x.id)), { timeout: 3000 });
    assert.ok(item, 'the call is parked (GET /admin/approvals lists it)');
    return item;
  }
  const listed = async (id) => (await approvals()).some((x) => x.id === id);

  async function parkLong(id) {
    const seen = new Set((await approvals()).map((x) => x.id));
    const p = H.postRaw(ctx.fetch, s.url, A.call(id, 'echo_park', { text: 'parked' }), s.headers)
      .then((r) => ({ r, answer: A.answerOf(r, id) }), (error) => ({ error }));
    return { p, item: await newApproval(seen) };
  }

  test('notifications/cancelled naming it: the approval disappears, the caller gets -32003, it is never forwarded', async () => {
    const n0 = hostile.calls('echo_park').length;
    const { p, item } = await parkLong(LONG);
    const c = await H.postRaw(ctx.fetch, s.url, {
      jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: LONG, reason: 'changed my mind' },
    }, s.headers);
    assert.equal(c.status, 202, c.text);
    A.assertAlive(gw, 'after cancelling a parked call with a 1,000-character id');
    const gone = await H.waitFor(async () => !(await listed(item.id)), { timeout: 3000 });
    const r = await A.admin(ctx.fetch, gw, 'POST', `/admin/approvals/${item.id}/approve`, ADMIN);
    assert.ok(gone, `the cancelled call is still in the approval queue (approving it now answered ${r.status})`);
    assert.equal(r.status, 404, `approving a cancelled call: ${r.status} ${r.text}`);
    const out = await Promise.race([p, H.sleep(3000).then(() => ({ pending: true }))]);
    assert.ok(!out.pending, 'the cancelled call was answered');
    assert.equal(out.answer?.error?.code, -32003, JSON.stringify(out.answer));
    assert.equal(out.answer.id, LONG, 'its id restored byte for byte');
    await H.sleep(100);
    assert.equal(hostile.calls('echo_park').length, n0, 'never forwarded');
  });

  test('the client disconnecting: the approval disappears, it is never forwarded', async () => {
    const n0 = hostile.calls('echo_park').length;
    // a raw socket that we destroy while the call is parked
    const seen = new Set((await approvals()).map((x) => x.id));
    const sock = await A.rawSocket(gw.plainPort);
    sock.sock.write(postText(gw, s, A.call(LONG + '-gone', 'echo_park', { text: 'parked' })));
    const parked = await newApproval(seen);
    sock.sock.destroy();
    const gone = await H.waitFor(async () => !(await listed(parked.id)), { timeout: 3000 });
    assert.ok(gone, 'the abandoned call left the approval queue');
    const r = await A.admin(ctx.fetch, gw, 'POST', `/admin/approvals/${parked.id}/approve`, ADMIN);
    assert.equal(r.status, 404, `approving an abandoned call: ${r.status} ${r.text}`);
    assert.equal(hostile.calls('echo_park').length, n0, 'never forwarded');
    A.assertAlive(gw);
  });

  test('a parked call whose connection is reset (RST) at once, 100 times: the queue ends empty, the gateway survives', async () => {
    const seen = new Set((await approvals()).map((x) => x.id));
    for (let i = 0; i < 100 && gw.exit === null; i++) {
      if (!await A.sendAndReset(gw.plainPort, postText(gw, s, A.call(`${LONG}-${i}`, 'echo_park', { text: 'x' })))) break;
    }
    A.assertAlive(gw, 'after 100 parked calls reset');
    const left = async () => (await approvals()).filter((x) => !seen.has(x.id));
    const empty = await H.waitFor(async () => (await left()).length === 0, { timeout: 5000 });
    assert.ok(empty, `approvals left behind by reset connections: ${(await left()).length}`);
    await echoWorks(gw, s, 'after the parked resets');
  });

  test('and it exits cleanly under ASan', async () => {
    await A.stopAndCheck(gw);
  });
});
