// The official MCP conformance suite (@modelcontextprotocol/conformance, pinned in
// test/package.json) against an upstream, directly and through tollgate (issue 7).
//
// The upstream is test/fixtures/sse-polling/server.mjs: the pinned SDK's Streamable HTTP server
// with sessions, an event store and `retry` in its priming events, implementing the suite's
// `test_reconnection` tool, which ends the call's POST SSE stream before answering (SEP-1699
// polling). Directly, the suite reconnects itself with GET + Last-Event-ID. Through tollgate,
// the gateway must do that upstream (after `retry` ms) and go on relaying on the client's POST
// stream: the answer arrives there, never -32004.
//   - server-sse-polling, direct and through tollgate: no FAILURE, no WARNING;
//   - raw fetch through tollgate: the POST's SSE answer carries the tool's result (the answer
//     live on the resumed upstream stream, replayed by it, and after several polls with
//     notifications between: each resume names the newest Last-Event-ID, nothing is repeated);
//     the client never GETs; the upstream saw tollgate's GET with Last-Event-ID `retry` ms
//     after the end; no -32004; the POST stream ends once the answer is relayed, also when the
//     upstream keeps its resumed stream open (the SDK's replay stream does);
//   - server-sse-multiple-streams, direct and through tollgate: reported (diagnostics), not
//     asserted;
//   - every test_reconnection call audited with outcome ok; tollgate stops cleanly, no sanitizer
//     report.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/conformance.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as H from './lib/harness.mjs';

H.requireNodeModules();
const CONFORMANCE = path.join(H.NODE_MODULES, '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
if (!fs.existsSync(CONFORMANCE)) {
  throw new Error(`interop tests: ${path.relative(H.REPO_ROOT, CONFORMANCE)} is missing; ` +
    'install the pinned test dependencies with:  npm ci --prefix test');
}
const FIXTURE = path.join(H.TEST_DIR, 'fixtures', 'sse-polling', 'server.mjs');
const RETRY_MS = 200;
const CALL_TIMEOUT_MS = 5000;

const cleanup = new H.Cleanup();
let dir;
let gw;
let up; // the sse-polling fixture
let fetchFn;
let auditFile;
let calls = 0; // test_reconnection calls made through tollgate

const logs = () => ({
  'tollgate process': gw?.status(),
  'tollgate stderr': gw?.stderr(),
  'upstream log': up?.log(),
});
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

/** Starts the fixture on an ephemeral port; resolves once it printed LISTENING <port>. */
async function startFixture(args = []) {
  const logFile = path.join(dir, 'sse-polling.log');
  const child = spawn(process.execPath, [FIXTURE, '--port', '0', '--retry-ms', String(RETRY_MS), '--log', logFile, ...args], {
    cwd: H.REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'], detached: true,
  });
  let out = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => { out += d; });
  const s = {
    proc: child,
    output: () => out,
    log: () => (fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8') : ''),
    records: () => s.log().split('\n').filter(Boolean).map((l) => JSON.parse(l)),
    stop: () => H.stopChild(child, 2000),
  };
  cleanup.add(() => s.stop());
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const ready = new Promise((resolve) => child.stdout.on('data', (d) => {
    out += d;
    const m = /LISTENING (\d+)/.exec(out);
    if (m) resolve(Number(m[1]));
  }));
  const r = await Promise.race([ready, exited, H.sleep(10000).then(() => 'timeout')]);
  if (typeof r !== 'number') {
    await s.stop();
    throw new Error(`sse-polling fixture did not start (${JSON.stringify(r)}):\n${out}`);
  }
  s.port = r;
  s.url = `http://127.0.0.1:${r}/mcp`;
  return s;
}

/**
 * Runs `conformance server --url URL --scenario NAME -o DIR` on the pinned node and reads the
 * checks.json it writes. Returns {code, output, checks, passed, failed, warnings, denominator}
 * counted as the suite's own summary does ("Passed: SUCCESS/(SUCCESS+FAILURE)").
 */
async function conformance(url, scenario, tag) {
  const outDir = path.join(dir, `results-${tag}`);
  fs.mkdirSync(outDir, { recursive: true });
  const child = spawn(process.execPath, [CONFORMANCE, 'server', '--url', url, '--scenario', scenario, '-o', outDir, '--timeout', '30000'], {
    cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
  });
  let output = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (d) => { output += d; });
  child.stderr.on('data', (d) => { output += d; });
  const timer = setTimeout(() => { try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ } }, 60000);
  const code = await new Promise((resolve) => child.once('exit', (c, sig) => resolve(c ?? sig)));
  clearTimeout(timer);
  const runs = fs.readdirSync(outDir).filter((d) => d.startsWith(`server-${scenario}-`));
  assert.equal(runs.length, 1, `one result directory for ${scenario} in ${outDir}: ${runs}\n${output}`);
  const checks = JSON.parse(fs.readFileSync(path.join(outDir, runs[0], 'checks.json'), 'utf8'));
  const count = (st) => checks.filter((c) => c.status === st).length;
  const r = {
    code, output: output.replace(/\x1b\[[0-9;]*m/g, ''), checks,
    passed: count('SUCCESS'), failed: count('FAILURE'), warnings: count('WARNING'),
  };
  r.denominator = r.passed + r.failed;
  r.summary = `${scenario}: ${r.passed}/${r.denominator} passed, ${r.failed} failed, ${r.warnings} warnings (exit ${code}); ` +
    checks.filter((c) => c.status !== 'INFO' || c.id.startsWith('server-sse-'))
      .map((c) => `${c.id}=${c.status}`).join(' ');
  return r;
}

/** The scenario's own checks (not its INFO trace of requests and events), by id. */
const verdicts = (r) => Object.fromEntries(r.checks.filter((c) => c.id.startsWith('server-sse-')).map((c) => [c.id, c]));

const gwUrl = () => `http://127.0.0.1:${gw.plainPort}/mcp`;

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-conformance-');
  up = await startFixture();
  const conf = H.writeConf(dir, {
    log: { level: 'debug' },
    audit: { file: (auditFile = path.join(dir, 'audit.log')) },
    upstreams: [{ name: 'polling', url: up.url, default: true, call_timeout_ms: CALL_TIMEOUT_MS }],
  });
  gw = await H.startTollgate(conf, { cleanup });
  fetchFn = H.makeFetch({ cleanup });
});

after(() => cleanup.run());

describe('server-sse-polling (SEP-1699)', () => {
  let direct;

  test('direct against the fixture: 3 of 3 checks pass', async (t) => {
    direct = await conformance(up.url, 'server-sse-polling', 'direct-polling');
    t.diagnostic(`direct ${direct.summary}`);
    assert.equal(direct.code, 0, direct.output);
    const v = verdicts(direct);
    for (const id of ['server-sse-priming-event', 'server-sse-retry-field', 'server-sse-disconnect-resume']) {
      assert.equal(v[id]?.status, 'SUCCESS', `${id}: ${JSON.stringify(v[id])}\n${direct.output}`);
    }
    assert.equal(direct.failed, 0, direct.output);
    assert.equal(direct.warnings, 0, direct.output);
    assert.equal(direct.passed, 3, direct.output);
  });

  test('through tollgate: no failure, no warning; the answer comes on the POST stream', async (t) => {
    calls++;
    const r = await conformance(gwUrl(), 'server-sse-polling', 'gw-polling');
    t.diagnostic(`through tollgate ${r.summary}`);
    assert.equal(r.code, 0, r.output);
    assert.equal(r.failed, 0, r.output);
    assert.equal(r.warnings, 0, r.output);
    const v = verdicts(r);
    assert.equal(v['server-sse-priming-event']?.status, 'SUCCESS', r.output);
    assert.equal(v['server-sse-retry-field']?.status, 'SUCCESS', r.output);
    // The suite counts the third check a SUCCESS only when it had to GET the answer itself.
    // tollgate resumes upstream and keeps the client's POST stream open, so the answer arrives
    // on it and the suite records that as INFO ("received on initial POST stream"): nothing to
    // resume. Either is a pass; an answer missing altogether is a WARNING, caught above.
    const dr = v['server-sse-disconnect-resume'];
    assert.ok(dr?.status === 'SUCCESS' || (dr?.status === 'INFO' && dr.details?.receivedToolResponse === true),
      `server-sse-disconnect-resume: ${JSON.stringify(dr)}\n${r.output}`);
    const tool = r.checks.find((c) => c.description === 'Received tool response on POST stream' ||
      c.description?.startsWith('Received SSE event on GET reconnection stream'));
    assert.ok(tool, `the tool's answer reached the suite:\n${r.output}`);
    if (direct) t.diagnostic(`direct ${direct.passed}/${direct.denominator}, through tollgate ${r.passed}/${r.denominator}`);
    assert.doesNotMatch(gw.stderr(), /-32004|ended the stream without answering/);
  });
});

describe('tollgate resumes the upstream stream itself (raw fetch)', () => {
  /** A raw session on 2025-11-25 (priming events, polling): {sessionId, headers}. */
  async function initialize2025_11_25() {
    const init = await H.postRaw(fetchFn, gwUrl(), H.initializeBody(1, '2025-11-25'));
    assert.equal(init.status, 200, init.text);
    assert.equal(init.messages[0]?.result?.protocolVersion, '2025-11-25', init.text);
    const sessionId = init.headers.get('mcp-session-id');
    assert.ok(sessionId, 'tollgate gave a session id');
    const headers = { 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-11-25' };
    const n = await H.postRaw(fetchFn, gwUrl(), { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
    assert.equal(n.status, 202, n.text);
    return { sessionId, headers };
  }

  /**
   * Initializes a raw 2025-11-25 session through tollgate, calls test_reconnection with `args`
   * and reads the POST's whole SSE answer as it streams. Returns {res, text, events, messages,
   * upstreamSession, t0, tAnswer (when the answer's event had arrived), tEnd (end of the body)}.
   */
  async function callReconnection(args, id = 7) {
    const sess = await initialize2025_11_25();
    const t0 = Date.now();
    calls++;
    const res = await fetchFn(gwUrl(), {
      method: 'POST',
      headers: { ...H.MCP_HEADERS, ...sess.headers },
      body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'test_reconnection', arguments: args } }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    let text = '';
    let tAnswer;
    const dec = new TextDecoder();
    for await (const chunk of res.body) {
      text += dec.decode(chunk, { stream: true });
      if (tAnswer === undefined && H.parseSse(text).some((e) => e.data && JSON.parse(e.data).id === id)) tAnswer = Date.now();
    }
    const tEnd = Date.now();
    const events = H.parseSse(text);
    const messages = events.filter((e) => e.data !== '').map((e) => JSON.parse(e.data));
    // The upstream session tollgate opened for this one: the one whose tools/call came after t0.
    const call = up.records().find((x) => x.rpc === 'tools/call' && x.t >= t0);
    return { sess, res, text, events, messages, upstreamSession: call?.session, t0, tAnswer, tEnd };
  }

  function assertAnswered(r, id) {
    const answer = r.messages.find((m) => m.id === id);
    assert.ok(answer, `the POST stream carries the answer to ${id}:\n${r.text}`);
    assert.equal(answer.error, undefined, `no error (-32004): ${JSON.stringify(answer)}`);
    assert.equal(H.resultText(answer.result), 'Reconnection test completed', JSON.stringify(answer));
    assert.equal(r.messages.filter((m) => m.id !== undefined).length, 1, `exactly one answer:\n${r.text}`);
    assert.ok(!r.messages.some((m) => m.error?.code === -32004), r.text);
  }

  /** The upstream GETs with Last-Event-ID in that session (logged once their response ended). */
  function upstreamGets(session) {
    return up.records().filter((x) => x.session === session && x.method === 'GET' && x.lastEventId);
  }

  test('the answer arrives live on the resumed upstream stream, relayed on the client\'s POST stream', async () => {
    const r = await callReconnection({ closeAfterMs: 50, answerAfterMs: RETRY_MS + 400 }, 7);
    assertAnswered(r, 7);
    // The first event is tollgate's own priming event (2025-11-25 session).
    assert.equal(r.events[0].data, '', `priming event first: ${JSON.stringify(r.events[0])}`);
    assert.match(r.events[0].retry ?? '', /^\d+$/);
    assert.ok(r.upstreamSession, up.log());
    await H.waitFor(() => upstreamGets(r.upstreamSession).length, { timeout: 3000 });
    const gets = upstreamGets(r.upstreamSession);
    assert.equal(gets.length, 1, `one upstream GET with Last-Event-ID:\n${up.log()}`);
    const closed = up.records().find((x) => x.session === r.upstreamSession && x.event === 'closing stream');
    const answered = up.records().find((x) => x.session === r.upstreamSession && x.event === 'answering');
    assert.ok(closed && answered, up.log());
    // The GET came from tollgate (only it knows the upstream session), `retry` ms after the
    // stream ended (a little slack for timers), before the answer, which it then carried.
    assert.ok(gets[0].arrived - closed.t >= RETRY_MS - 20, `GET ${gets[0].arrived - closed.t} ms after the end:\n${up.log()}`);
    assert.ok(gets[0].arrived < answered.t && gets[0].t >= answered.t, `the resumed GET carried the answer:\n${up.log()}`);
    assert.match(gw.stderr(), /msg="upstream closed the answer stream early; reconnecting" upstream=polling retry_ms=200/);
  });

  test('the answer stored before tollgate comes back is replayed by the upstream and relayed', async () => {
    const r = await callReconnection({ closeAfterMs: 50, answerAfterMs: 0 }, 'replayed');
    assertAnswered(r, 'replayed');
    // The upstream's replay stream stays open (keepalives) after the answer: tollgate ends it
    // (the fixture logs a request when its response closes).
    await H.waitFor(() => upstreamGets(r.upstreamSession).length, { timeout: 3000 });
    const gets = upstreamGets(r.upstreamSession);
    assert.equal(gets.length, 1, `one upstream GET with Last-Event-ID:\n${up.log()}`);
    const answered = up.records().find((x) => x.session === r.upstreamSession && x.event === 'answering');
    const closed = up.records().find((x) => x.session === r.upstreamSession && x.event === 'closing stream');
    // retry is honoured: the call took at least closeAfter + retry.
    assert.ok(Date.now() - r.t0 >= 50 + RETRY_MS, 'tollgate waited retry ms');
    assert.ok(answered.t < gets[0].arrived, `answered before tollgate reconnected:\n${up.log()}`);
  });

  test('the POST stream ends once the answer is relayed, though the upstream keeps its resumed stream open', async () => {
    // The SDK's replay stream (GET + Last-Event-ID after the answer was stored) stays open with
    // keepalives after replaying the answer; nothing more can come for this call, so tollgate
    // must end the client's POST stream (and let go of the upstream GET) then, not when
    // call_timeout_ms (CALL_TIMEOUT_MS here) runs out.
    const warnsBefore = (gw.stderr().match(/upstream call timed out/g) ?? []).length;
    const r = await callReconnection({ closeAfterMs: 50, answerAfterMs: 0 }, 'prompt');
    assertAnswered(r, 'prompt');
    assert.ok(r.tEnd - r.tAnswer < 1000,
      `the POST stream ended ${r.tEnd - r.tAnswer} ms after the answer (call_timeout_ms ${CALL_TIMEOUT_MS})`);
    const warns = (gw.stderr().match(/upstream call timed out/g) ?? []).length;
    assert.equal(warns, warnsBefore, 'no "upstream call timed out" for an answered call');
  });

  test('three polls with a notification before each: every resume names the newest event id, nothing repeated', async () => {
    const r = await callReconnection({ closeAfterMs: 50, answerAfterMs: RETRY_MS + 300, polls: 3 }, 9);
    assertAnswered(r, 9);
    const notes = r.messages.filter((m) => m.method === 'notifications/message').map((m) => m.params.data);
    assert.deepEqual(notes, ['poll 1', 'poll 2', 'poll 3'], `each notification once, in order:\n${r.text}`);
    await H.waitFor(() => upstreamGets(r.upstreamSession).length >= 3, { timeout: 3000 });
    const gets = upstreamGets(r.upstreamSession);
    assert.equal(gets.length, 3, `three upstream GETs with Last-Event-ID:\n${up.log()}`);
    assert.equal(new Set(gets.map((g) => g.lastEventId)).size, 3, `three different Last-Event-IDs:\n${up.log()}`);
    const seq = (id) => Number(id.split('.').pop());
    const ids = gets.map((g) => seq(g.lastEventId)).sort((a, b) => a - b);
    assert.ok(ids[0] < ids[1] && ids[1] < ids[2], `newer ids each time: ${ids}`);
    const n = (gw.stderr().match(/upstream closed the answer stream early; reconnecting/g) ?? []).length;
    assert.ok(n >= 3 + 2, `reconnect logged for each poll (${n} so far)`);
  });
});

describe('server-sse-multiple-streams (SEP-1699), reported only', () => {
  test('direct and through tollgate', async (t) => {
    const d = await conformance(up.url, 'server-sse-multiple-streams', 'direct-multi');
    const g = await conformance(gwUrl(), 'server-sse-multiple-streams', 'gw-multi');
    t.diagnostic(`direct ${d.summary}`);
    t.diagnostic(`through tollgate ${g.summary}`);
  });
});

describe('tollgate', () => {
  test('audited every test_reconnection call as ok (none unavailable or timed out)', async () => {
    const done = () => fs.readFileSync(auditFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
      .filter((l) => l.tool === 'test_reconnection' && l.outcome);
    await H.waitFor(() => done().length >= calls, { timeout: CALL_TIMEOUT_MS + 2000 });
    const lines = done();
    assert.equal(lines.length, calls, JSON.stringify(lines));
    for (const l of lines) assert.equal(l.outcome, 'ok', JSON.stringify(l));
  });

  test('stops cleanly on SIGTERM, no sanitizer report', async () => {
    const r = await gw.stop();
    gw.assertNoSanitizerReport();
    assert.equal(r.code, 0, `exit ${JSON.stringify(r)}`);
  });
});
