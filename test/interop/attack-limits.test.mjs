// The hostile review's attack battery (issue 7), part 2: limits that can be broken.
//   3. file descriptors: an upstream connect that fails at once (EMFILE) frees the call under its
//      caller; accept at EMFILE must neither spin nor crash; limits.max_connections is checked
//      against RLIMIT_NOFILE at start (raised when the soft limit allows, a clear warning when the
//      hard limit cannot cover it), also by `tollgate -t`
//   5. refunds: a call that timed out, was cancelled by the client or abandoned by it may have run
//      upstream, so its reservation stands; a JSON-RPC error answer (the upstream refused before
//      running) and a connect failure are refunded
//   6. "error": null beside "result" (a JSON-RPC 1.0-style upstream): a successful call, never a
//      refunded failure; a tools/list answered so is still filtered, and one that cannot be
//      filtered (result.tools not an array, no result) is never relayed
// Part 1 (crashes) is attack.test.mjs, part 3 (memory) attack-memory.test.mjs.
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/attack-limits.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as A from './lib/attack.mjs';
import { startHostile } from '../fixtures/hostile/hostile.mjs';

H.requireNodeModules();

const ctx = A.makeContext('tollgate-attack-limits-');
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

const stdioCommand = (extra = []) => [process.execPath, A.HOSTILE, '--stdio', ...extra];
const readLog = (f) => (fs.existsSync(f) ? fs.readFileSync(f, 'utf8').replace(/[^\n]*$/, '').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []);
const stLog = () => path.join(ctx.dir, 'refunds-stdio.log');

/** A raw 2025-06-18 session on /UP/mcp. */
async function session(gw, up) {
  const url = A.mcpUrl(gw, up);
  const r = await H.postRaw(ctx.fetch, url, H.initializeBody(1));
  assert.equal(r.status, 200, `initialize on /${up}/mcp: HTTP ${r.status} ${r.text}`);
  const sid = r.headers.get('mcp-session-id');
  const headers = { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-06-18' };
  const n = await H.postRaw(ctx.fetch, url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
  assert.ok(n.status === 202 || n.status === 200, `initialized: ${n.status}`);
  return { url, sid, headers };
}

function postText(gw, s, body) {
  return A.httpText('POST', new URL(s.url).pathname, {
    host: `127.0.0.1:${gw.plainPort}`,
    headers: { ...H.MCP_HEADERS, ...s.headers },
    body: JSON.stringify(body),
  });
}

// ---------------------------------------------------------------------------
// 3. File descriptors

describe('limits.max_connections: a clean 503, then service again', () => {
  test('past the limit a new client gets 503 with Retry-After and a JSON-RPC error, and is closed; once one leaves, a new one is served', async () => {
    const gw = await ctx.gateway('maxconn', {
      limits: { max_connections: 2, header_timeout_ms: 60000, idle_timeout_ms: 60000 },
      upstreams: [{ name: 'h', url: hostile.url('/mcp'), initialize: 'local' }],
    });
    const req = `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`;
    const a = await A.rawSocket(gw.plainPort);
    const b = await A.rawSocket(gw.plainPort);
    // (the gateway accepts in order: a and b are held when c comes)
    const c = await A.rawSocket(gw.plainPort);
    c.sock.write(req);
    await H.waitUntil(() => c.closed, { what: 'the third connection answered and closed' });
    const [r] = A.parseResponses(Buffer.concat(c.chunks));
    assert.equal(r?.status, 503, c.text());
    assert.match(r.head, /\r\nretry-after: 1/i);
    assert.equal(JSON.parse(r.body).error.code, -32004, r.body);
    assert.match(JSON.parse(r.body).error.message, /max_connections/);
    await gw.waitForLog(/connection limit reached/);
    a.sock.destroy();
    await H.waitUntil(async () => {
      const d = await A.rawSocket(gw.plainPort);
      d.sock.write(req);
      await H.waitUntil(() => d.bytes > 0 || d.closed, { what: 'an answer' });
      const [rr] = A.parseResponses(Buffer.concat(d.chunks));
      d.sock.destroy();
      return rr?.status === 200;
    }, { what: 'a new client served once one left' });
    b.sock.destroy();
  });

  test('HEAD is answered without a body, so a request pipelined after it is read right (fuzz_e2e found the body sent)', async () => {
    const gw = await ctx.gateway('head', { upstreams: [{ name: 'h', url: hostile.url('/mcp'), initialize: 'local' }] });
    const s = await A.rawSocket(gw.plainPort);
    s.sock.write('HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
    await H.waitUntil(() => s.closed, { what: 'both answers and the close' });
    const text = s.text();
    const heads = text.split(/(?=HTTP\/1\.1 )/);
    assert.equal(heads.length, 2, text);
    assert.match(heads[0], /^HTTP\/1\.1 200 /, text);
    const len = Number(/\r\ncontent-length: *(\d+)/i.exec(heads[0])?.[1]);
    assert.ok(len > 0, 'HEAD tells the length of the body it does not send');
    assert.ok(heads[0].endsWith('\r\n\r\n'), `no body after the HEAD answer's head: ${JSON.stringify(heads[0])}`);
    assert.match(heads[1], /^HTTP\/1\.1 200 /, text);
    assert.equal(Buffer.byteLength(heads[1].split('\r\n\r\n')[1]), len, 'the GET carries the body HEAD measured');
  });
});

describe('3. file descriptors: EMFILE on upstream connect and on accept; RLIMIT_NOFILE vs limits.max_connections', () => {
  const LIMIT = 64;

  /** A gateway under prlimit --nofile=LIMIT:LIMIT; idle client connections are kept a long time. */
  async function lowFdGateway(name, up = hostile) {
    return ctx.gateway(name, {
      limits: { header_timeout_ms: 120000, idle_timeout_ms: 120000 },
      upstreams: [{
        name: 'h', url: up.url('/mcp'), initialize: 'local', connect_timeout_ms: 1000, call_timeout_ms: 3000,
        pool: { idle_timeout_ms: 100 }, // no idle upstream connection is left to reuse
      }],
    }, { prlimit: `${LIMIT}:${LIMIT}` });
  }

  /**
   * Opens idle connections until the gateway holds LIMIT descriptors (/proc/PID/fd), or 150.
   * Returns the sockets. A gateway that keeps descriptors in reserve (refusing clients before
   * it runs out) never gets there, which is fine: the calls below must work then.
   */
  async function exhaust(gw) {
    const socks = [];
    for (let i = 0; i < 150 && A.fdCount(gw.proc.pid, LIMIT) < LIMIT; i++) {
      const before = A.fdCount(gw.proc.pid, LIMIT);
      const s = await A.rawSocket(gw.plainPort);
      socks.push(s);
      // accepted (one more descriptor), or closed by the gateway, or stuck in the backlog
      await H.waitFor(() => s.closed || A.fdCount(gw.proc.pid, LIMIT) > before, { timeout: 500, interval: 10 });
    }
    const n = A.fdCount(gw.proc.pid, LIMIT);
    process.stderr.write(`# ${socks.length} idle connections (${socks.filter((x) => x.closed).length} closed by tollgate); ` +
      `tollgate holds ${n} descriptors (limit ${LIMIT})\n`);
    return socks;
  }

  test('a call that needs a new upstream connection while descriptors are exhausted: -32004 (or 503), the gateway survives', async () => {
    const up = await startHostile(); // its own, to see when the gateway holds no connection to it
    ctx.cleanup.add(() => up.stop());
    const gw = await lowFdGateway('emfile-connect', up);
    const s = await session(gw, 'h');
    assert.ok(await up.waitFor(() => up.sockets.size === 0, 5000), 'the pooled upstream connection timed out (pool.idle_timeout_ms 100)');
    // the connection that will carry the call, accepted before the descriptors run out
    const fd0 = A.fdCount(gw.proc.pid, LIMIT);
    const c0 = await A.rawSocket(gw.plainPort);
    assert.ok(await H.waitFor(() => A.fdCount(gw.proc.pid, LIMIT) > fd0, { timeout: 2000, interval: 10 }), 'the carrying connection was accepted');
    const fillers = await exhaust(gw);
    try {
      c0.sock.write(postText(gw, s, A.call('emfile-1', 'echo', { text: 'needs a socket' })));
      const answers = () => A.parseResponses(Buffer.concat(c0.chunks));
      await H.waitFor(() => c0.closed || answers().length > 0, { timeout: 6000 });
      A.assertAlive(gw, 'after a call whose upstream connect failed with EMFILE');
      assert.ok(answers().length > 0, `the call was answered (connection ${c0.closed ? 'closed without an answer' : 'open, no answer in 6 s'})`);
      const [res] = answers();
      process.stderr.write(`# the call on exhausted descriptors: HTTP ${res.status} ${res.body.slice(0, 300)}\n`);
      if (res.status === 200) {
        const m = JSON.parse(res.body);
        assert.equal(m.id, 'emfile-1');
        // -32004, or the answer itself from a gateway that kept a descriptor for its upstreams
        if (!m.result) assert.equal(m.error?.code, -32004, `a clean upstream error: ${res.body}`);
      } else {
        assert.equal(res.status, 503, `-32004 or 503: ${res.head}\n${res.body}`);
      }
    } finally {
      for (const f of fillers) f.sock.destroy();
      c0.sock.destroy();
    }
    // descriptors back: a new connection and a new upstream connection work
    assert.ok(await H.waitFor(() => A.fdCount(gw.proc.pid, LIMIT) < LIMIT / 2, { timeout: 5000 }), 'the idle connections were closed');
    const a = await A.rpc(ctx.fetch, s.url, s, A.call('after', 'echo', { text: 'back' }));
    assert.equal(H.resultText(a.result), 'back', JSON.stringify(a));
    await A.stopAndCheck(gw);
  });

  test('accept at EMFILE neither spins nor crashes: low CPU while descriptors are exhausted and clients keep connecting', async () => {
    const gw = await lowFdGateway('emfile-accept');
    const s = await session(gw, 'h');
    const fillers = await exhaust(gw);
    const extra = [];
    try {
      const t0 = A.cpuTicks(gw.proc.pid);
      const w0 = Date.now();
      // 40 more connection attempts over about 1.5 s, each held open
      for (let i = 0; i < 40; i++) {
        extra.push(await A.rawSocket(gw.plainPort));
        await H.sleep(35); // pacing of the load, not a synchronisation
      }
      const cpu = (A.cpuTicks(gw.proc.pid) - t0) / A.CLK_TCK;
      const wall = (Date.now() - w0) / 1000;
      process.stderr.write(`# EMFILE on accept: tollgate used ${cpu.toFixed(2)} s of CPU in ${wall.toFixed(2)} s\n`);
      A.assertAlive(gw, 'while descriptors were exhausted');
      assert.ok(cpu < 0.4 * wall, `tollgate spun at EMFILE: ${cpu.toFixed(2)} s CPU in ${wall.toFixed(2)} s`);
    } finally {
      for (const f of [...fillers, ...extra]) f.sock.destroy();
    }
    assert.ok(await H.waitFor(() => A.fdCount(gw.proc.pid, LIMIT) < LIMIT / 2, { timeout: 5000 }), 'the idle connections were closed');
    const a = await A.rpc(ctx.fetch, s.url, s, A.call('after', 'echo', { text: 'served' }));
    assert.equal(H.resultText(a.result), 'served', JSON.stringify(a));
    await A.stopAndCheck(gw);
  });

  const WARN_MAX = /max_connections/;
  const WARN_FD = /(RLIMIT_NOFILE|descriptor|ulimit)/i;

  test('`tollgate -t` warns when the hard RLIMIT_NOFILE cannot cover limits.max_connections', async () => {
    const sub = path.join(ctx.dir, 'fd-check');
    fs.mkdirSync(sub, { recursive: true });
    const conf = H.writeConf(sub, { limits: { max_connections: 10000 }, upstreams: [{ name: 'h', url: hostile.url('/mcp') }] });
    const r = spawnSync('prlimit', [`--nofile=${LIMIT}:${LIMIT}`, '--', H.tollgateBin(), '-t', '-c', conf],
      { encoding: 'utf8', timeout: 20000, env: { ...process.env, ASAN_OPTIONS: 'detect_leaks=1:abort_on_error=0' } });
    const out = `${r.stdout}\n${r.stderr}`;
    assert.doesNotMatch(out, A.SANITIZER_RE, out);
    const line = out.split('\n').find((l) => WARN_MAX.test(l) && WARN_FD.test(l));
    assert.ok(line, `tollgate -t under a hard limit of ${LIMIT} descriptors with max_connections = 10000 (exit ${r.status}) ` +
      `must say that the limit cannot cover max_connections; it printed:\n${out}`);
  });

  test('a start that fails (a TLS key that does not parse) exits 1 at once: warm stdio children go, nothing leaks', async () => {
    const sub = path.join(ctx.dir, 'bad-start');
    fs.mkdirSync(sub, { recursive: true });
    // The files open (a missing one is refused at load, before any child starts); they fail at
    // start, when the listener's TLS is set up, after the warm child is there.
    fs.writeFileSync(path.join(sub, 'missing.pem'), 'not a certificate\n');
    fs.writeFileSync(path.join(sub, 'missing.key'), 'not a key\n');
    const conf = path.join(sub, 'tollgate.conf');
    const policy = path.join(H.REPO_ROOT, 'conf/policies/cowork-os.json');
    fs.writeFileSync(conf, [
      `listen = ( { address = "127.0.0.1"; port = 0; tls = { cert = "${sub}/missing.pem"; key = "${sub}/missing.key"; }; } );`,
      'grants = ( { name = "local"; anonymous = true; } );',
      `upstreams = ( { name = "s"; command = [ "/bin/cat" ]; warm = 1; default = true; policy = "${policy}"; } );`,
    ].join('\n') + '\n');
    const r = spawnSync(H.tollgateBin(), ['-c', conf],
      { encoding: 'utf8', timeout: 20000, env: { ...process.env, ASAN_OPTIONS: 'detect_leaks=1:abort_on_error=0' } });
    const out = `${r.stdout}\n${r.stderr}`;
    assert.equal(r.signal, null, `tollgate did not exit by itself (killed by ${r.signal}): a warm child kept the loop alive\n${out}`);
    assert.equal(r.status, 1, out);
    assert.match(out, /TLS setup failed/, out);
    assert.doesNotMatch(out, A.SANITIZER_RE, out);
  });

  test('at start: a clear warning when the hard limit cannot cover max_connections plus upstream sockets', async () => {
    const gw = await ctx.gateway('fd-warn', {
      limits: { max_connections: 10000 }, upstreams: [{ name: 'h', url: hostile.url('/mcp') }],
    }, { prlimit: `${LIMIT}:${LIMIT}` });
    const line = await H.waitFor(() => gw.stderr().split('\n').find((l) => WARN_MAX.test(l) && WARN_FD.test(l)), { timeout: 2000 });
    assert.ok(line, `no warning about RLIMIT_NOFILE (${LIMIT}) vs max_connections (10000) at start:\n${gw.stderr()}`);
    assert.match(line, /level=(warn|error)/, line);
    await A.stopAndCheck(gw);
  });

  test('at start: a soft limit below what max_connections needs is raised (up to the hard limit)', async () => {
    const gw = await ctx.gateway('fd-raise', {
      limits: { max_connections: 1000 }, upstreams: [{ name: 'h', url: hostile.url('/mcp') }],
    }, { prlimit: `${LIMIT}:4096` });
    const lim = A.nofile(gw.proc.pid);
    process.stderr.write(`# started with RLIMIT_NOFILE ${LIMIT}:4096, max_connections 1000: now ${lim.soft}:${lim.hard}\n`);
    assert.equal(lim.hard, 4096, 'the hard limit is what it was');
    assert.ok(lim.soft > 1000, `the soft limit was raised above max_connections (1000): it is ${lim.soft}`);
    await A.stopAndCheck(gw);
  });
});

// ---------------------------------------------------------------------------
// 5. Refunds

describe('5. refunds: only a call that cannot have run is given back', () => {
  const N = 2; // every counter here: 2 calls per minute
  let gw;
  let auditFile;
  let latePort; // an upstream that is down at first, started later
  let late;
  const sess = {};
  const limited = (counter) => ({ limits: [{ counter, window: 'minute', max: N }] });

  before(async () => {
    auditFile = path.join(ctx.dir, 'refunds-audit.log');
    const tools = { echo: { action: 'allow' } };
    for (const up of ['h', 'st', 'lsse']) tools[`sleep_timeout_${up}`] = limited(`timeout_${up}`);
    for (const up of ['h', 'st']) tools[`sleep_gone_${up}`] = limited(`gone_${up}`);
    tools.sleep_cancel = limited('cancel');
    tools.flaky_refund = limited('flaky');
    tools.echo_down = limited('down');
    const policy = ctx.writePolicy('refunds.json', { version: '1', default: 'deny', tools });
    latePort = await H.freePort();
    gw = await ctx.gateway('refunds', {
      audit: { file: auditFile },
      upstreams: [
        { name: 'h', url: hostile.url('/mcp'), call_timeout_ms: 300, policy },
        { name: 'st', command: stdioCommand(['--log', stLog()]), call_timeout_ms: 300, policy },
        { name: 'lsse', url: hostile.url('/sse'), transport: 'sse', call_timeout_ms: 300, policy },
        { name: 'hc', url: hostile.url('/mcp'), call_timeout_ms: 1500, policy },
        // backoff off: its N+1 = 3 failures would otherwise back it off (faults.test.mjs tests that)
        { name: 'late', url: `http://127.0.0.1:${latePort}/mcp`, initialize: 'local', connect_timeout_ms: 500, backoff_ms: 0, policy },
      ],
    });
    for (const up of ['h', 'st', 'lsse', 'hc', 'late']) sess[up] = await session(gw, up);
  });
  after(async () => { await late?.stop(); });

  const audits = (tool) => {
    if (!fs.existsSync(auditFile)) return [];
    return fs.readFileSync(auditFile, 'utf8').replace(/[^\n]*$/, '').split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter((l) => l.tool === tool);
  };
  /** Waits for the audit log to hold n settled records (with an outcome) of `tool`. */
  async function settledCalls(tool, n) {
    const ok = await H.waitFor(() => audits(tool).filter((l) => l.outcome).length >= n, { timeout: 5000 });
    assert.ok(ok, `the audit log holds ${n} settled ${tool} calls: ${JSON.stringify(audits(tool))}`);
  }
  const call = (up, id, name, args) => A.rpc(ctx.fetch, sess[up].url, sess[up], A.call(id, name, args));

  for (const up of ['h', 'st', 'lsse']) {
    test(`a call that timed out (call_timeout_ms 300, the tool takes 1.5 s; upstream ${up}) is not refunded: call ${N + 1} is -32002`, async () => {
      const tool = `sleep_timeout_${up}`;
      const codes = [];
      for (let i = 0; i < N + 1; i++) {
        const a = await call(up, `${tool}-${i}`, tool, { ms: 1500 });
        codes.push(a.error?.code ?? 'result');
        if (i < N) await settledCalls(tool, i + 1);
      }
      assert.deepEqual(codes.slice(0, N), Array(N).fill(-32004), `the first ${N} time out: ${codes}`);
      assert.equal(codes[N], -32002, `call ${N + 1} after ${N} timeouts is rate limited (a timed-out call may have run): ${codes}`);
    });
  }

  test('a call the client cancelled (notifications/cancelled; the upstream never answers it) is not refunded', async () => {
    const codes = [];
    for (let i = 0; i < N + 1; i++) {
      const id = `cancel-${i}`;
      const n0 = hostile.calls('sleep_cancel').length;
      const p = H.postRaw(ctx.fetch, sess.hc.url, A.call(id, 'sleep_cancel', { ms: 5000 }), sess.hc.headers);
      const first = await Promise.race([
        p.then(() => 'answered'),
        hostile.waitFor(() => hostile.calls('sleep_cancel').length > n0, 5000).then((v) => (v ? 'reached' : 'lost')),
      ]);
      if (first !== 'reached') { // answered before it reached the upstream (rate limited): that is the outcome
        codes.push(A.answerOf(await p, id)?.error?.code ?? 'result');
        continue;
      }
      const gid = hostile.calls('sleep_cancel').at(-1).msg.id;
      const c = await H.postRaw(ctx.fetch, sess.hc.url, {
        jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id, reason: 'user pressed stop' },
      }, sess.hc.headers);
      assert.equal(c.status, 202, c.text);
      assert.ok(await hostile.waitFor(() => hostile.cancelled.includes(gid), 3000),
        `the cancellation reached the upstream, rewritten to its id ${gid}: ${JSON.stringify(hostile.cancelled)}`);
      // the gateway settles the call (at once, or at call_timeout_ms 1500)
      const r = await Promise.race([p, H.sleep(5000).then(() => null)]);
      codes.push(r ? (A.answerOf(r, id)?.error?.code ?? 'none') : 'pending');
      await settledCalls('sleep_cancel', i + 1);
    }
    assert.equal(codes[N], -32002, `call ${N + 1} after ${N} cancelled calls is rate limited (a cancelled call may have run): ${codes}`);
  });

  for (const up of ['h', 'st']) {
    test(`a call whose client disconnected mid-call (upstream ${up}) is not refunded`, async () => {
      const tool = `sleep_gone_${up}`;
      const upCalls = () => (up === 'h' ? hostile.calls(tool).length
        : readLog(stLog()).filter((r) => r.msg?.method === 'tools/call' && r.msg.params?.name === tool).length);
      // the gateway is done with an abandoned call once it audited it (client_gone) or dropped its late answer
      const done = () => audits(tool).filter((l) => l.outcome).length + (gw.stderr().match(/answer matches no call/g) ?? []).length;
      for (let i = 0; i < N; i++) {
        const sock = await A.rawSocket(gw.plainPort);
        const d0 = done();
        sock.sock.write(postText(gw, sess[up], A.call(`${tool}-${i}`, tool, { ms: 200 })));
        assert.ok(await H.waitFor(() => upCalls() > i, { timeout: 3000, interval: 20 }), 'the call reached the upstream');
        sock.sock.destroy();
        assert.ok(await H.waitFor(() => done() > d0, { timeout: 5000 }), 'the gateway settled the abandoned call');
      }
      const a = await call(up, `${tool}-last`, tool, { ms: 10 });
      assert.equal(a.error?.code, -32002, `call ${N + 1} after ${N} abandoned calls is rate limited: ${JSON.stringify(a)}`);
    });
  }

  test('a JSON-RPC error answer (the upstream refused before running) is refunded: N+1 refusals, then a good call succeeds', async () => {
    for (let i = 0; i < N + 1; i++) {
      const a = await call('h', `flaky-${i}`, 'flaky_refund', { fail: true });
      assert.equal(a.error?.code, -32603, `refusal ${i} relayed as the upstream's error, not -32002: ${JSON.stringify(a)}`);
    }
    const a = await call('h', 'flaky-good', 'flaky_refund', { fail: false, text: 'ran' });
    assert.equal(H.resultText(a.result), 'ran', `the good call after ${N + 1} refunded refusals: ${JSON.stringify(a)}`);
  });

  test('a connect failure (upstream down) is refunded: N+1 failures, then, with the upstream up, a good call succeeds', async () => {
    for (let i = 0; i < N + 1; i++) {
      const a = await call('late', `down-${i}`, 'echo_down', { text: 'x' });
      assert.equal(a.error?.code, -32004, `failure ${i}: -32004, never -32002: ${JSON.stringify(a)}`);
    }
    late = await startHostile({ port: latePort });
    const a = await call('late', 'down-good', 'echo_down', { text: 'up now' });
    assert.equal(H.resultText(a.result), 'up now', `the good call after ${N + 1} refunded connect failures: ${JSON.stringify(a)}`);
  });

  test('the gateway is unharmed', async () => {
    A.assertAlive(gw);
    await A.stopAndCheck(gw);
  });
});

// ---------------------------------------------------------------------------
// 6. "error": null beside "result"

describe('6. "error": null beside "result" is a success, and is filtered like one', () => {
  const N = 2;
  let gw;
  const sess = {};
  let policy;

  before(async () => {
    policy = ctx.writePolicy('errnull.json', {
      version: '1', default: 'deny',
      tools: {
        visible: { action: 'allow' },
        denied: { action: 'deny', reason: 'not for you' },
        errnull_limited: { limits: [{ counter: 'errnull', window: 'minute', max: N }] },
        errnull_limited_st: { limits: [{ counter: 'errnull_st', window: 'minute', max: N }] },
      },
    });
    gw = await ctx.gateway('errnull', {
      upstreams: [
        { name: 'h', url: hostile.url('/mcp'), policy },
        { name: 'st', command: stdioCommand(), policy },
        { name: 'lnull', url: hostile.url('/list=errnull/mcp'), policy },
        { name: 'lobj', url: hostile.url('/list=notarray/mcp'), policy },
        { name: 'lnores', url: hostile.url('/list=noresult/mcp'), policy },
        { name: 'stnull', command: stdioCommand(['--flags', 'list=errnull']), policy },
      ],
    });
    for (const up of ['h', 'st', 'lnull', 'lobj', 'lnores', 'stnull']) sess[up] = await session(gw, up);
  });

  for (const [up, tool] of [['h', 'errnull_limited'], ['st', 'errnull_limited_st']]) {
    test(`a successful tools/call answered with "error": null is counted (upstream ${up}): call ${N + 1} is -32002`, async () => {
      const got = [];
      for (let i = 0; i < N + 1; i++) {
        const a = await A.rpc(ctx.fetch, sess[up].url, sess[up], A.call(`${tool}-${i}`, tool, { text: `r${i}` }));
        got.push(a.result ? 'result' : a.error?.code ?? JSON.stringify(a));
      }
      assert.deepEqual(got.slice(0, N), Array(N).fill('result'), `the first ${N} are results: ${got}`);
      assert.equal(got[N], -32002, `call ${N + 1}: the ${N} successes were refunded as failures: ${got}`);
    });
  }

  const names = (a) => (a.result?.tools ?? []).map((t) => t.name).sort();

  test('tools/list (control): only the allowed tool is listed', async () => {
    const a = await A.rpc(ctx.fetch, sess.h.url, sess.h, { jsonrpc: '2.0', id: 'l', method: 'tools/list', params: {} });
    assert.deepEqual(names(a), ['visible'], JSON.stringify(a));
  });

  for (const up of ['lnull', 'stnull']) {
    test(`tools/list answered with "error": null beside "result" (upstream ${up}) is filtered: no hidden or denied tool`, async () => {
      const r = await H.postRaw(ctx.fetch, sess[up].url, { jsonrpc: '2.0', id: 'l', method: 'tools/list', params: {} }, sess[up].headers);
      assert.doesNotMatch(r.text, /"secret"|"denied"|"hang"/, `hidden or denied tools reached the client: ${r.text.slice(0, 600)}`);
      const a = A.answerOf(r, 'l');
      assert.deepEqual(names(a), ['visible'], r.text.slice(0, 600));
    });
  }

  for (const [up, what] of [['lobj', 'result.tools is an object, not an array'], ['lnores', 'no result at all ("error": null only)']]) {
    test(`a tools/list answer that cannot be filtered (${what}) is not relayed: the client gets an error`, async () => {
      const r = await H.postRaw(ctx.fetch, sess[up].url, { jsonrpc: '2.0', id: 'l', method: 'tools/list', params: {} }, sess[up].headers);
      assert.doesNotMatch(r.text, /"secret"|"denied"|"hang"/, `hidden or denied tools reached the client: ${r.text.slice(0, 600)}`);
      const a = A.answerOf(r, 'l');
      assert.ok(a && a.error && typeof a.error.code === 'number' && !('result' in a),
        `an error instead of the upstream's unfilterable answer: HTTP ${r.status} ${r.text.slice(0, 600)}`);
    });
  }

  test('the gateway is unharmed', async () => {
    await A.stopAndCheck(gw);
  });
});
