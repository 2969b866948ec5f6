// The official MCP conformance suite (@modelcontextprotocol/conformance, pinned in
// test/package.json) against an upstream, directly and through tollgate (issue 7).
//
// The upstream is test/fixtures/sse-polling/server.mjs: the pinned SDK's Streamable HTTP server
// with sessions, an event store and `retry` in its priming events, implementing the suite's
// `test_reconnection` tool, which ends the call's POST SSE stream before answering (SEP-1699
// polling). Directly, the suite reconnects itself with GET + Last-Event-ID. Through tollgate,
// the gateway reconnects upstream (GET + Last-Event-ID after `retry` ms) and keeps the call
// alive; a client on 2025-11-25 (primed by tollgate: `id: X-0`, `retry`) is polled the same way
// (its POST stream ends with the upstream's `retry`, without the answer, and it resumes with GET
// + Last-Event-ID from tollgate's replay buffer); an older client's POST stream stays open and
// carries the answer.
//   - server-sse-polling, direct and through tollgate: 3 of 3 SUCCESS (priming event, retry
//     field, disconnect-resume), no FAILURE, no WARNING; through tollgate the answer arrives on
//     the suite's GET reconnection stream;
//   - raw fetch, 2025-11-25: the POST stream is the priming event, then ends with
//     `retry: RETRY_MS` and no answer; GET + Last-Event-ID gets the answer once, live (answer
//     produced after the GET came) or replayed from tollgate's buffer (the call had finished:
//     the stream then ends); tollgate reconnected upstream once, `retry` ms after the end;
//     three polls: the client resumes each time (retry, Last-Event-ID, at most 10 times) and
//     gets every notification once, in order, then the answer;
//   - raw fetch, 2025-06-18 (the SDK polls only 2025-11-25 requests, and tollgate's upstream
//     session is on the client's version, so the fixture is told to poll anyway with
//     pollAnyVersion): no priming event, the POST stream stays open and carries the answer (and
//     every notification of three polls, once, in order), and ends within 1500 ms of the answer
//     even when the upstream keeps its resumed stream open (call_timeout_ms is CALL_TIMEOUT_MS);
//   - no -32004 anywhere; each call audited `ok` with upstream_latency_ms covering the whole
//     call (from the first upstream request); server-sse-multiple-streams reported
//     (diagnostics), not asserted; tollgate stops cleanly, no sanitizer report.
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

  test('through tollgate: 3 of 3 checks pass, as directly; the answer comes on the suite\'s GET reconnection stream', async (t) => {
    calls++;
    const r = await conformance(gwUrl(), 'server-sse-polling', 'gw-polling');
    t.diagnostic(`through tollgate ${r.summary}`);
    if (direct) t.diagnostic(`direct ${direct.passed}/${direct.denominator}, through tollgate ${r.passed}/${r.denominator}`);
    assert.equal(r.code, 0, r.output);
    const v = verdicts(r);
    for (const id of ['server-sse-priming-event', 'server-sse-retry-field', 'server-sse-disconnect-resume']) {
      assert.equal(v[id]?.status, 'SUCCESS', `${id}: ${JSON.stringify(v[id])}\n${r.output}`);
    }
    assert.equal(r.failed, 0, r.output);
    assert.equal(r.warnings, 0, r.output);
    assert.equal(r.passed, 3, r.output);
    // tollgate ended the suite's POST stream without the answer (polling), and the suite's GET
    // with Last-Event-ID (tollgate's id) carried it.
    const trace = JSON.stringify(r.checks, null, 1);
    assert.ok(!r.checks.some((c) => c.description === 'Received tool response on POST stream'),
      `no answer on the POST stream:\n${trace}`);
    const onGet = r.checks.filter((c) => c.description?.startsWith('Received SSE event on GET reconnection stream'))
      .map((c) => { try { return JSON.parse(c.details?.data ?? ''); } catch { return null; } })
      .filter((m) => m?.id === 1 && m.result);
    assert.equal(onGet.length, 1, `the tool's answer once on the GET reconnection stream:\n${trace}`);
    assert.equal(H.resultText(onGet[0].result), 'Reconnection test completed', JSON.stringify(onGet[0]));
    assert.match(String(v['server-sse-disconnect-resume'].details?.lastEventIdUsed), /^[0-9a-f]+-\d+$/,
      `the suite resumed with tollgate's event id: ${JSON.stringify(v['server-sse-disconnect-resume'])}`);
    assert.doesNotMatch(gw.stderr(), /-32004|ended the stream without answering/);
  });
});

// ---------------------------------------------------------------------------
// Raw fetch through tollgate

/** The upstream by name (the conformance suite uses the default route, /mcp). */
const rawUrl = () => `http://127.0.0.1:${gw.plainPort}/polling/mcp`;
const TIMER_SLACK_MS = 10; // timers and Date.now() granularity between the fixture and tollgate
const PROMPT_END_MS = 1500; // "promptly": well under CALL_TIMEOUT_MS

/** A raw session through tollgate on `proto`: {sessionId, headers}. */
async function openSession(proto) {
  const init = await H.postRaw(fetchFn, rawUrl(), H.initializeBody(1, proto));
  assert.equal(init.status, 200, init.text);
  assert.equal(init.messages[0]?.result?.protocolVersion, proto, init.text);
  const sessionId = init.headers.get('mcp-session-id');
  assert.ok(sessionId, 'tollgate gave a session id');
  const headers = { 'mcp-session-id': sessionId, 'mcp-protocol-version': proto };
  const n = await H.postRaw(fetchFn, rawUrl(), { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
  assert.equal(n.status, 202, n.text);
  return { sessionId, proto, headers };
}

/**
 * Reads an SSE response body to its end as it streams. Unlike H.parseSse it keeps blocks
 * without data (a bare `retry:` is how tollgate ends a polled stream) and notes when each block
 * arrived. Returns {status, text, events: [{id, retry, data, hasData, message, at}], tEnd}.
 */
async function readStream(res) {
  assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/, `HTTP ${res.status}`);
  const events = [];
  let text = '';
  let pending = '';
  const dec = new TextDecoder();
  const take = (block) => {
    const ev = { hasData: false, at: Date.now() };
    const data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line === '' || line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      let value = i < 0 ? '' : line.slice(i + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') data.push(value);
      else if (field === 'id') ev.id = value;
      else if (field === 'retry') ev.retry = value;
      else if (field === 'event') ev.event = value;
    }
    if (ev.id === undefined && ev.retry === undefined && ev.event === undefined && !data.length) return; // a comment
    ev.hasData = data.length > 0;
    ev.data = data.join('\n');
    if (ev.data !== '') ev.message = JSON.parse(ev.data);
    events.push(ev);
  };
  for await (const chunk of res.body) {
    const s = dec.decode(chunk, { stream: true });
    text += s;
    pending += s;
    let m;
    while ((m = /\r?\n\r?\n/.exec(pending))) {
      take(pending.slice(0, m.index));
      pending = pending.slice(m.index + m[0].length);
    }
  }
  if (pending.trim()) take(pending);
  return { status: res.status, text, events, tEnd: Date.now() };
}

/** POSTs tools/call test_reconnection(args) with id `id` in `sess`; resolves with the response and t0. */
async function postCall(sess, args, id) {
  calls++;
  const t0 = Date.now();
  const res = await fetchFn(rawUrl(), {
    method: 'POST',
    headers: { ...H.MCP_HEADERS, ...sess.headers },
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'test_reconnection', arguments: args } }),
  });
  assert.equal(res.status, 200);
  return { res, t0 };
}

/** GET /polling/mcp with Last-Event-ID in `sess` (a client resuming a stream); resolves with the response and when its head came. */
async function resumeGet(sess, lastEventId) {
  const res = await fetchFn(rawUrl(), {
    method: 'GET',
    headers: { accept: 'text/event-stream', ...sess.headers, 'last-event-id': lastEventId },
  });
  const tHead = Date.now();
  if (res.status !== 200) assert.fail(`GET with Last-Event-ID ${lastEventId}: HTTP ${res.status} ${await res.text()}`);
  return { res, tHead };
}

const bounded = (p, what) => H.within(p, CALL_TIMEOUT_MS + 3000, what);

/**
 * What an SDK client does with a polled stream: read it to its end; if the answer has not come,
 * wait the `retry` the server gave (SEP-1699: the client's reconnection delay, not a
 * synchronisation) and GET with Last-Event-ID = the last id seen; again, at most
 * `maxReconnects` times. Returns [{kind, lastEventId (GETs), tHead, ...readStream()}].
 */
async function followPolling(sess, first, id, { maxReconnects = 10 } = {}) {
  const streams = [{ kind: 'POST', ...(await bounded(readStream(first), 'the POST stream to end')) }];
  let lastId;
  let retry;
  const seen = (r) => { for (const e of r.events) { if (e.id) lastId = e.id; if (e.retry !== undefined) retry = Number(e.retry); } };
  const answered = () => streams.some((s) => s.events.some((e) => e.message?.id === id));
  seen(streams[0]);
  for (let n = 0; !answered() && n < maxReconnects; n++) {
    assert.ok(lastId !== undefined && Number.isInteger(retry),
      `a stream ended without the answer, a Last-Event-ID and a retry to resume with:\n${JSON.stringify(streams.at(-1).text)}`);
    await H.sleep(retry);
    const g = await resumeGet(sess, lastId);
    streams.push({ kind: 'GET', lastEventId: lastId, tHead: g.tHead, ...(await bounded(readStream(g.res), `GET ${n + 1} to end`)) });
    seen(streams.at(-1));
  }
  return streams;
}

const allEvents = (streams) => streams.flatMap((s) => s.events);
const allText = (streams) => streams.map((s) => `--- ${s.kind}${s.lastEventId ? ` Last-Event-ID ${s.lastEventId}` : ''}\n${s.text}`).join('\n');

/** The answer to `id` is among `events` exactly once, a success; no -32004 anywhere. */
function assertAnsweredOnce(events, id, text) {
  const answers = events.filter((e) => e.message && e.message.id !== undefined && e.message.method === undefined);
  assert.equal(answers.length, 1, `exactly one answer:\n${text}`);
  const a = answers[0].message;
  assert.equal(a.id, id, `the answer to ${id}:\n${text}`);
  assert.equal(a.error, undefined, `no error: ${JSON.stringify(a)}`);
  assert.equal(H.resultText(a.result), 'Reconnection test completed', JSON.stringify(a));
  assert.doesNotMatch(text, /-32004/);
  return answers[0];
}

/** The upstream's view of this client session's call (the fixture logs requests when they end). */
function upstreamView(t0) {
  const post = up.records().find((x) => x.rpc === 'tools/call' && x.arrived >= t0);
  if (!post) return null;
  const s = post.session;
  const mine = up.records().filter((x) => x.session === s);
  return {
    session: s,
    post,
    gets: mine.filter((x) => x.method === 'GET' && x.lastEventId),
    closes: mine.filter((x) => x.event === 'closing stream'),
    answered: mine.find((x) => x.event === 'answering'),
  };
}

/** The audit record of the test_reconnection call in this client session, once written. */
function auditOf(sessionId) {
  if (!fs.existsSync(auditFile)) return undefined;
  return fs.readFileSync(auditFile, 'utf8').replace(/[^\n]*$/, '').split('\n').filter(Boolean).map((l) => JSON.parse(l))
    .find((l) => l.session === sessionId && l.tool === 'test_reconnection' && l.outcome);
}

/**
 * After the call: tollgate reconnected upstream `polls` times, each with a newer Last-Event-ID and
 * at least `retry` ms after the stream it resumes ended; the audit record is ok and its
 * upstream_latency_ms covers the whole call (first upstream request to the answer reaching
 * tollgate, which is after both the answer and tollgate's last GET). Returns {view, audit}.
 */
async function assertUpstreamSide(t0, sessionId, polls = 1) {
  const audit = await H.waitUntil(() => auditOf(sessionId), {
    timeout: CALL_TIMEOUT_MS + 3000, what: `the audit record of session ${sessionId}`,
    detail: () => fs.readFileSync(auditFile, 'utf8'),
  });
  const view = await H.waitUntil(() => { const v = upstreamView(t0); return v?.answered && v.gets.length >= polls && v; }, {
    timeout: 3000, what: `${polls} upstream GET(s) with Last-Event-ID and the answer in the fixture's log`, detail: () => up.log(),
  });
  assert.equal(view.gets.length, polls, `${polls} upstream GET(s) with Last-Event-ID:\n${up.log()}`);
  assert.equal(view.closes.length, polls, up.log());
  const gets = [...view.gets].sort((a, b) => a.arrived - b.arrived);
  const seq = (id) => Number(String(id).split('.').pop());
  for (let i = 0; i < polls; i++) {
    const after = gets[i].arrived - view.closes[i].t;
    assert.ok(after >= RETRY_MS - TIMER_SLACK_MS,
      `upstream GET ${i + 1} came ${after} ms after the stream ended (retry ${RETRY_MS} ms):\n${up.log()}`);
    if (i > 0) assert.ok(seq(gets[i].lastEventId) > seq(gets[i - 1].lastEventId), `newer Last-Event-ID each time:\n${up.log()}`);
  }
  assert.equal(audit.outcome, 'ok', JSON.stringify(audit));
  const span = Math.max(view.answered.t, gets.at(-1).arrived) - view.post.arrived;
  assert.ok(audit.upstream_latency_ms >= span - TIMER_SLACK_MS,
    `upstream_latency_ms ${audit.upstream_latency_ms} covers the whole call (${span} ms from the first upstream request): ${JSON.stringify(audit)}`);
  return { view, audit, gets };
}

describe('a 2025-11-25 client is polled like the upstream polls tollgate (raw fetch)', () => {
  /** The POST stream of a polled call: tollgate's priming event, then its end with retry, no answer. */
  function assertPolledPost(post, id) {
    const ev = post.events;
    assert.ok(ev.length >= 2, `priming event and the retry end:\n${post.text}`);
    assert.ok(ev[0].hasData && ev[0].data === '', `tollgate's priming event first: ${JSON.stringify(ev[0])}`);
    assert.match(ev[0].id ?? '', /^[0-9a-f]+-0$/, `priming event id: ${JSON.stringify(ev[0])}`);
    assert.match(ev[0].retry ?? '', /^\d+$/, `priming event retry: ${JSON.stringify(ev[0])}`);
    assert.ok(!ev.some((e) => e.message?.id === id), `no answer on the POST stream:\n${post.text}`);
    assert.equal(ev.at(-1).retry, String(RETRY_MS), `the POST stream ends with the upstream's retry:\n${post.text}`);
  }

  test('the answer produced after the client came back is relayed live on its GET, once; the GET then ends', async (t) => {
    const sess = await openSession('2025-11-25');
    const logFrom = gw.stderr().length;
    const { res, t0 } = await postCall(sess, { closeAfterMs: 50, answerAfterMs: RETRY_MS + 1000 }, 'live');
    const streams = await followPolling(sess, res, 'live');
    const text = allText(streams);
    assertPolledPost(streams[0], 'live');
    assert.equal(streams.length, 2, `one GET with Last-Event-ID:\n${text}`);
    const get = streams[1];
    assert.equal(get.lastEventId, streams[0].events.filter((e) => e.id).at(-1).id, 'resumed from the last id on the POST stream');
    const answer = assertAnsweredOnce(allEvents(streams), 'live', text);
    assert.ok(get.events.includes(answer), `the answer came on the GET:\n${text}`);
    assert.ok(get.tEnd - answer.at < PROMPT_END_MS,
      `the GET stream ended ${get.tEnd - answer.at} ms after the answer (call_timeout_ms ${CALL_TIMEOUT_MS})`);
    const ids = allEvents(streams).filter((e) => e.id).map((e) => e.id);
    assert.equal(new Set(ids).size, ids.length, `no event twice:\n${text}`);
    const { view } = await assertUpstreamSide(t0, sess.sessionId, 1);
    // Live: the upstream produced the answer after the client's GET had reached tollgate.
    assert.ok(view.answered.t > get.tHead, `answer produced ${view.answered.t - get.tHead} ms after the client's GET:\n${up.log()}`);
    const log = gw.stderr().slice(logFrom);
    assert.match(log, new RegExp(`msg="upstream closed the answer stream early; reconnecting" upstream=polling retry_ms=${RETRY_MS}`));
    assert.doesNotMatch(log, /-32004/);
    t.diagnostic(`answer ${answer.at - get.tHead} ms after the GET's head; GET ended ${get.tEnd - answer.at} ms after the answer`);
  });

  test('the answer produced before the client comes back is replayed from tollgate\'s buffer; the GET then ends', async (t) => {
    const sess = await openSession('2025-11-25');
    const logFrom = gw.stderr().length;
    const { res, t0 } = await postCall(sess, { closeAfterMs: 50, answerAfterMs: 0 }, 'replayed');
    const post = await bounded(readStream(res), 'the POST stream to end');
    assertPolledPost(post, 'replayed');
    const lastId = post.events.filter((e) => e.id).at(-1).id;
    // The client stays away until the call is over: tollgate reconnected upstream, got the
    // answer (the SDK replays it and keeps that GET open) and ended the call.
    const { view, audit, gets } = await assertUpstreamSide(t0, sess.sessionId, 1);
    assert.ok(view.answered.t < gets[0].arrived, `answered before tollgate reconnected:\n${up.log()}`);
    // The SDK kept its replay stream open after the answer; tollgate let go of it.
    assert.equal(gets[0].endedBy, 'peer', `the upstream's resumed stream stayed open until tollgate closed it:\n${up.log()}`);
    const ended = Date.parse(audit.time) - gets[0].arrived;
    assert.ok(ended < PROMPT_END_MS, `the call ended ${ended} ms after tollgate's upstream GET (call_timeout_ms ${CALL_TIMEOUT_MS}): ${JSON.stringify(audit)}`);
    const g = await resumeGet(sess, lastId);
    const get = await bounded(readStream(g.res), 'the replaying GET stream to end');
    const text = allText([{ kind: 'POST', ...post }, { kind: 'GET', lastEventId: lastId, ...get }]);
    const answer = assertAnsweredOnce([...post.events, ...get.events], 'replayed', text);
    assert.ok(get.events.includes(answer), `the answer came on the GET:\n${text}`);
    const seq = (id) => Number(id.split('-').pop());
    assert.ok(get.events.every((e) => e.id === undefined || seq(e.id) > seq(lastId)), `only what came after Last-Event-ID replayed:\n${text}`);
    assert.ok(get.events.filter((e) => e.id).every((e) => e.id.split('-')[0] === lastId.split('-')[0]), `the same stream:\n${text}`);
    assert.doesNotMatch(gw.stderr().slice(logFrom), /-32004/);
    t.diagnostic(`call ended ${ended} ms after tollgate's upstream GET; replay GET took ${get.tEnd - g.tHead} ms`);
  });

  test('three polls: the client resumes each time and gets every notification once, in order, then the answer', async (t) => {
    const sess = await openSession('2025-11-25');
    const logFrom = gw.stderr().length;
    const { res, t0 } = await postCall(sess, { closeAfterMs: 50, answerAfterMs: RETRY_MS + 300, polls: 3 }, 9);
    const streams = await followPolling(sess, res, 9, { maxReconnects: 10 });
    const text = allText(streams);
    assertPolledPost(streams[0], 9);
    const events = allEvents(streams);
    const answer = assertAnsweredOnce(events, 9, text);
    const notes = events.filter((e) => e.message?.method === 'notifications/message');
    assert.deepEqual(notes.map((e) => e.message.params.data), ['poll 1', 'poll 2', 'poll 3'], `each notification once, in order:\n${text}`);
    assert.ok(events.indexOf(notes.at(-1)) < events.indexOf(answer), `the answer after the notifications:\n${text}`);
    const gets = streams.slice(1);
    assert.ok(gets.length >= 1 && gets.length <= 10, `the client resumed (${gets.length} GETs):\n${text}`);
    assert.ok(gets.at(-1).events.includes(answer), `the answer came on the last GET:\n${text}`);
    for (const s of streams.slice(0, -1)) {
      assert.equal(s.events.at(-1)?.retry, String(RETRY_MS), `each stream before the answer ends with the upstream's retry:\n${text}`);
    }
    // Each GET names the newest id seen; tollgate's ids only grow: nothing was repeated.
    const seq = (id) => Number(id.split('-').pop());
    const ids = events.filter((e) => e.id).map((e) => seq(e.id));
    for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], `event ids grow: ${ids}\n${text}`);
    await assertUpstreamSide(t0, sess.sessionId, 3);
    assert.doesNotMatch(gw.stderr().slice(logFrom), /-32004/);
    t.diagnostic(`the client resumed ${gets.length} time(s): ${streams.map((s) => `${s.kind}[${s.events.length}]`).join(' ')}`);
  });
});

describe('an older client\'s POST stream stays open and carries the answer (raw fetch, 2025-06-18)', () => {
  /**
   * Calls test_reconnection on a fresh 2025-06-18 session and reads the POST stream to its end.
   * tollgate's upstream session is on the client's version, for which the SDK does not poll;
   * pollAnyVersion makes the fixture poll anyway (an upstream that polls every client), which is
   * the case tollgate must bridge for a client it did not prime.
   */
  async function callOld(args, id) {
    const sess = await openSession('2025-06-18');
    const { res, t0 } = await postCall(sess, { ...args, pollAnyVersion: true }, id);
    const post = await bounded(readStream(res), 'the POST stream to end');
    const upPost = upstreamView(t0)?.post;
    assert.equal(upPost?.protocolVersion, '2025-06-18', `tollgate's upstream request is on the client's version:\n${up.log()}`);
    assert.equal(upPost?.presentedAs, '2025-11-25', up.log());
    // Not primed to resume: no priming event, no retry, the stream just goes on.
    assert.ok(!post.events.some((e) => e.retry !== undefined || (e.hasData && e.data === '')),
      `no priming event or retry for a 2025-06-18 session:\n${post.text}`);
    const answer = assertAnsweredOnce(post.events, id, post.text);
    return { sess, t0, post, answer };
  }

  test('the answer arrives live on the resumed upstream stream, relayed on the POST stream', async () => {
    const { sess, t0, post } = await callOld({ closeAfterMs: 50, answerAfterMs: RETRY_MS + 400 }, 7);
    const { view, gets } = await assertUpstreamSide(t0, sess.sessionId, 1);
    assert.ok(gets[0].arrived < view.answered.t, `tollgate's GET came before the answer, which it then carried:\n${up.log()}`);
    assert.equal(post.events.at(-1).message?.id, 7, post.text);
  });

  test('the answer stored before tollgate comes back is replayed upstream and relayed; the POST stream ends promptly though the upstream keeps its resumed stream open', async (t) => {
    const warnsBefore = (gw.stderr().match(/upstream call timed out/g) ?? []).length;
    const { sess, t0, post, answer } = await callOld({ closeAfterMs: 50, answerAfterMs: 0 }, 'prompt');
    assert.ok(post.tEnd - answer.at < PROMPT_END_MS,
      `the POST stream ended ${post.tEnd - answer.at} ms after the answer (call_timeout_ms ${CALL_TIMEOUT_MS})`);
    const { view, gets } = await assertUpstreamSide(t0, sess.sessionId, 1);
    assert.ok(view.answered.t < gets[0].arrived, `answered before tollgate reconnected:\n${up.log()}`);
    // The SDK kept its replay stream open; tollgate let go of it.
    assert.equal(gets[0].endedBy, 'peer', `the upstream's resumed stream stayed open until tollgate closed it:\n${up.log()}`);
    assert.equal((gw.stderr().match(/upstream call timed out/g) ?? []).length, warnsBefore, 'no "upstream call timed out" for an answered call');
    t.diagnostic(`POST stream ended ${post.tEnd - answer.at} ms after the answer`);
  });

  test('three polls: every notification arrives once, in order, on the POST stream, then the answer', async () => {
    const { sess, t0, post, answer } = await callOld({ closeAfterMs: 50, answerAfterMs: RETRY_MS + 300, polls: 3 }, 9);
    const notes = post.events.filter((e) => e.message?.method === 'notifications/message');
    assert.deepEqual(notes.map((e) => e.message.params.data), ['poll 1', 'poll 2', 'poll 3'], `each notification once, in order:\n${post.text}`);
    assert.ok(post.events.indexOf(notes.at(-1)) < post.events.indexOf(answer), post.text);
    await assertUpstreamSide(t0, sess.sessionId, 3);
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
    const done = () => fs.readFileSync(auditFile, 'utf8').replace(/[^\n]*$/, '').split('\n').filter(Boolean).map((l) => JSON.parse(l))
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
