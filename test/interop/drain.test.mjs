// Graceful operation under load (issue 10, item 8): what the signals do while calls are running.
//
//   1. SIGTERM with a call in flight (a tool that takes 1 s) on every client transport (Streamable
//      HTTP 2025 session, 2026-07-28 stateless, legacy SSE, WebSocket) and on both upstream kinds
//      (HTTP, stdio): every call gets its own answer, a new connection is refused (the listeners
//      close at once: ECONNREFUSED, see core/app/server.c tg_server_drain), /readyz... is gone with the
//      listener, and tollgate exits 0 well within limits.drain_timeout_ms.
//   2. SIGTERM with a call longer than limits.drain_timeout_ms: it is cut at the deadline with a
//      clean JSON-RPC error (-32004, "shutting down"), and tollgate exits 0 soon after the deadline.
//   3. SIGHUP under load: concurrent callers on keep-alive connections of every transport while 20
//      reloads (with policies and a TLS listener in the conf) happen: every call gets its right
//      answer, none is dropped.
//   4. A broken conf on SIGHUP (a syntax error, a missing policy file, a listener's TLS key that is
//      not a key, an audit file that cannot be opened) leaves the old configuration serving (plain and TLS) and the log says why.
//   5. SIGUSR1 reopens the log file and the audit file: after a rename, new lines go to a new file
//      at the old path, and the renamed one stops growing.
//
// What others test already, not repeated here: a reload that removes an upstream with a call in
// flight (attack.test.mjs 2), policy swaps keeping counters and an invalid policy on POST
// /admin/reload (policy.test.mjs 4), SIGTERM with a client that stopped reading and stdio children
// after SIGTERM (transports.test.mjs).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as A from './lib/attack.mjs';
import { openClient, textOf } from './lib/clients.mjs';
import { startHostile } from '../fixtures/hostile/hostile.mjs';

H.requireNodeModules();

const ctx = A.makeContext('tollgate-drain-');
const test = ctx.test(it);
const SLOW = 'sleep_drain';
const TRANSPORTS = ['streamable', 'stateless', 'sse', 'ws'];
// Under valgrind (TOLLGATE_WRAP) everything in the gateway is many times slower.
const T = H.scaled;
let hostile;

before(async () => {
  ctx.init();
  hostile = await startHostile();
  ctx.cleanup.add(() => hostile.stop());
  ctx.extraLogs.hostile = () => `${hostile.records.length} records`;
});
after(async () => { await ctx.cleanup.run(); });

const stdioCommand = (log) => [process.execPath, A.HOSTILE, '--stdio', '--log', log];
const upstreams = (tag) => [
  { name: 'h', url: hostile.url('/mcp'), call_timeout_ms: 30000, default: true },
  { name: 's', command: stdioCommand(path.join(ctx.dir, `${tag}-stdio.log`)), call_timeout_ms: 30000 },
];

/** Resolves with {code, signal, ms} when gw exits, ms counted from t0. */
const exitOf = (gw, t0) => new Promise((resolve) => {
  if (gw.proc.exitCode !== null || gw.proc.signalCode !== null) resolve({ code: gw.proc.exitCode, signal: gw.proc.signalCode, ms: Date.now() - t0 });
  else gw.proc.once('exit', (code, signal) => resolve({ code, signal, ms: Date.now() - t0 }));
});

/** Resolves with 'refused' (ECONNREFUSED), 'reset' (accepted then closed unanswered) or the HTTP status. */
function tryNewConnection(port) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/healthz', agent: false, timeout: 3000 }, (res) => {
      res.resume();
      resolve(res.statusCode);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve(e.code === 'ECONNREFUSED' ? 'refused' : e.code === 'ECONNRESET' || /socket hang up/.test(e.message) ? 'reset' : e.message));
  });
}

/** Waits until the gateway has sent `n` calls of `tool` upstream: the HTTP fixture's records plus the stdio child's log. */
async function waitUpstreamSaw(tool, n, stdioLog, what) {
  const stdioCalls = () => (fs.existsSync(stdioLog) ? fs.readFileSync(stdioLog, 'utf8').split('\n').filter((l) => l.includes(`"name":"${tool}"`)).length : 0);
  await H.waitUntil(() => hostile.calls(tool).length + stdioCalls() >= n, {
    timeout: T(15000), what, detail: () => `http fixture ${hostile.calls(tool).length}, stdio ${stdioCalls()}`,
  });
}

// ---------------------------------------------------------------------------

describe('1-2. SIGTERM drains', () => {
  test('calls in flight on every transport and both upstream kinds finish; new connections are refused; exit 0 before the deadline', async () => {
    const tool = `${SLOW}_ok`;
    const gw = await ctx.gateway('drain-ok', { limits: { drain_timeout_ms: T(8000) }, upstreams: upstreams('drain-ok') });
    const clients = [];
    for (const kind of TRANSPORTS) clients.push(await openClient(kind, { port: gw.plainPort, upstream: 'h' }));
    for (const kind of ['streamable', 'ws']) clients.push(await openClient(kind, { port: gw.plainPort, upstream: 's' }));
    const calls = clients.map((c, i) => c.call(tool, { ms: 1000, text: `c${i}` }, { timeout: T(20000) })
      .then((a) => ({ a }), (e) => ({ e })));
    await waitUpstreamSaw(tool, clients.length, path.join(ctx.dir, 'drain-ok-stdio.log'), 'every call to reach its upstream');

    const from = gw.stderr().length;
    const t0 = Date.now();
    const exited = exitOf(gw, t0);
    gw.stopping = true; // an exit from here on is the one we asked for
    process.kill(gw.proc.pid, 'SIGTERM');
    await gw.waitForLog(/msg="?draining/, { from, timeout: T(5000) });
    assert.equal(await tryNewConnection(gw.plainPort), 'refused', 'a new connection while draining is refused (the listener is closed)');

    const out = await Promise.all(calls);
    const names = clients.map((c, i) => `${c.kind}→${i < TRANSPORTS.length ? 'http' : 'stdio'}`);
    const bad = out.map((o, i) => (o.a?.result ? null : `${names[i]}: ${o.e ? `${o.e.kind}: ${o.e.message}` : JSON.stringify(o.a)}`)).filter(Boolean);
    assert.deepEqual(bad, [], 'every call in flight at SIGTERM got its answer');
    for (const [i, o] of out.entries()) assert.equal(textOf(o.a), 'slept 1000 ms', `${names[i]}: the right answer`);

    const ex = await H.within(exited, T(10000), 'tollgate exit after SIGTERM');
    assert.equal(ex.code, 0, `exit code after SIGTERM (signal ${ex.signal})`);
    assert.ok(ex.ms < T(8000), `tollgate exited ${ex.ms} ms after SIGTERM, before limits.drain_timeout_ms (${T(8000)})`);
    assert.doesNotMatch(gw.stderr().slice(from), /drain deadline passed/, 'no call had to be cut');
    for (const c of clients) await c.close();
  });

  test('a call longer than limits.drain_timeout_ms is cut at the deadline with a clean -32004; exit 0', async () => {
    const tool = `${SLOW}_long`;
    const deadline = T(1500);
    const gw = await ctx.gateway('drain-long', { limits: { drain_timeout_ms: deadline }, upstreams: upstreams('drain-long') });
    const clients = [
      await openClient('streamable', { port: gw.plainPort, upstream: 'h' }),
      await openClient('stateless', { port: gw.plainPort, upstream: 'h' }),
      await openClient('streamable', { port: gw.plainPort, upstream: 's' }),
    ];
    const calls = clients.map((c) => c.call(tool, { ms: 20000 }, { timeout: T(20000) }).then((a) => ({ a }), (e) => ({ e })));
    await waitUpstreamSaw(tool, clients.length, path.join(ctx.dir, 'drain-long-stdio.log'), 'every long call to reach its upstream');
    const from = gw.stderr().length;
    const t0 = Date.now();
    const exited = exitOf(gw, t0);
    gw.stopping = true;
    process.kill(gw.proc.pid, 'SIGTERM');
    const out = await Promise.all(calls);
    const names = ['streamable→http', 'stateless→http', 'streamable→stdio'];
    const bad = out.map((o, i) => (o.a?.error?.code === -32004 ? null
      : `${names[i]}: ${o.e ? `no JSON-RPC answer (${o.e.kind}: ${o.e.message})` : JSON.stringify(o.a).slice(0, 300)}`)).filter(Boolean);
    assert.deepEqual(bad, [], 'every call still running at the drain deadline is answered -32004');
    const ex = await H.within(exited, T(10000), 'tollgate exit after SIGTERM');
    assert.equal(ex.code, 0, `exit code (signal ${ex.signal})`);
    assert.ok(ex.ms >= deadline - 100, `the calls were given the whole deadline (exit after ${ex.ms} ms)`);
    assert.ok(ex.ms < deadline + T(3000), `exit ${ex.ms} ms after SIGTERM, close to the deadline of ${deadline} ms`);
    assert.match(gw.stderr().slice(from), /drain deadline passed/, 'the log says calls were cut');
    for (const c of clients) await c.close();
  });
});

// ---------------------------------------------------------------------------

/** A gateway with a plain and a TLS listener, a policy per upstream, and an admin listener. */
async function reloadGateway(name) {
  const certs = H.makeCerts(fs.mkdtempSync(path.join(ctx.dir, `${name}-certs-`)));
  const policyH = ctx.writePolicy(`${name}-h.json`, { version: '1', default: 'deny', tools: { echo: {}, [`${SLOW}_r`]: {}, denied: { action: 'deny' } } });
  const policyS = ctx.writePolicy(`${name}-s.json`, { version: '1', default: 'deny', tools: { echo: {} } });
  const opts = {
    listeners: [{}, { tls: { cert: certs.cert, key: certs.key } }],
    admin: true,
    limits: { drain_timeout_ms: T(3000) },
    upstreams: [
      { name: 'h', url: hostile.url('/mcp'), call_timeout_ms: 30000, policy: policyH },
      { name: 's', command: stdioCommand(path.join(ctx.dir, `${name}-stdio.log`)), call_timeout_ms: 30000, policy: policyS },
    ],
  };
  const gw = await ctx.gateway(name, opts, { listeners: 2, admin: true });
  return { gw, opts, certs, policyH, policyS };
}

const reloadCount = (gw) => (gw.stderr().match(/configuration reloaded/g) ?? []).length;
const failCount = (gw) => (gw.stderr().match(/reload failed/g) ?? []).length;

/** One GET /healthz over TLS (a new connection each time); resolves with the status. */
function tlsHealth(gw, ca) {
  return new Promise((resolve, reject) => {
    const req = https.get({ host: '127.0.0.1', port: gw.tlsPort, path: '/healthz', ca, agent: false, timeout: T(5000) }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('timeout', () => req.destroy(new Error('TLS /healthz timed out')));
    req.on('error', reject);
  });
}

describe('3. SIGHUP under load drops nothing', () => {
  test('20 reloads while callers on every transport keep calling: every call gets its right answer', async () => {
    const { gw, opts, policyH } = await reloadGateway('reload-load');
    const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
    ctx.cleanup.add(() => agent.destroy());
    const plan = [...TRANSPORTS.flatMap((k) => [[k, 'h'], [k, 'h']]), ['streamable', 's'], ['ws', 's']];
    const clients = [];
    for (const [kind, up] of plan) clients.push({ c: await openClient(kind, { port: gw.plainPort, upstream: up, agent }), up });
    let stop = false;
    const stats = { ok: 0, wrong: [], failed: [] };
    const worker = async ({ c, up }, w) => {
      for (let i = 0; !stop; i++) {
        const text = `w${w}-${i}`;
        // now and then a call that is still with the upstream while a reload happens
        const slow = up === 'h' && i % 5 === 4;
        try {
          const a = await c.call(slow ? `${SLOW}_r` : 'echo', slow ? { ms: 150, text } : { text }, { timeout: T(15000) });
          const want = slow ? 'slept 150 ms' : text;
          if (textOf(a) === want) stats.ok++;
          else stats.wrong.push(`${c.kind}→${up} ${text}: ${JSON.stringify(a).slice(0, 300)}`);
        } catch (e) {
          stats.failed.push(`${c.kind}→${up} ${text}: ${e.kind}: ${e.message}`);
          if (stats.failed.length > 20) return;
        }
      }
    };
    const running = clients.map(worker);
    const t0 = Date.now();
    try {
      await H.waitUntil(() => stats.ok >= clients.length * 3 || stats.failed.length, { timeout: T(15000), what: 'the load to start' });
      for (let r = 0; r < 20 && !stats.failed.length; r++) {
        // every reload reads a changed policy file (a different reason for the denied tool)
        fs.writeFileSync(policyH, JSON.stringify({ version: '1', default: 'deny', tools: { echo: {}, [`${SLOW}_r`]: {}, denied: { action: 'deny', reason: `reload ${r}` } } }));
        const n = reloadCount(gw);
        const okBefore = stats.ok;
        process.kill(gw.proc.pid, 'SIGHUP');
        await H.waitUntil(() => reloadCount(gw) > n || failCount(gw) > 0 || gw.exit, { timeout: T(10000), what: `reload ${r + 1} to be logged` });
        assert.equal(failCount(gw), 0, `reload ${r + 1} failed: ${gw.stderr().split('\n').filter((l) => /reload/.test(l)).slice(-4).join(' | ')}`);
        A.assertAlive(gw, `after reload ${r + 1}`);
        // calls are answered between reloads (the load is really running through them)
        await H.waitUntil(() => stats.ok > okBefore + clients.length || stats.failed.length, { timeout: T(10000), what: `calls to go on after reload ${r + 1}` });
      }
    } finally {
      stop = true;
      await Promise.all(running);
    }
    const took = Date.now() - t0;
    assert.deepEqual(stats.failed, [], `calls that failed across the reloads (of ${stats.ok + stats.failed.length})`);
    assert.deepEqual(stats.wrong, [], 'calls answered with the wrong answer');
    assert.equal(reloadCount(gw), 20, 'twenty reloads were logged');
    const m = await gw.metrics();
    process.stderr.write(`# ${stats.ok} calls over ${clients.length} clients during 20 reloads in ${took} ms; none dropped\n`);
    const denied = await clients[0].c.call('denied', {});
    assert.equal(denied.error?.code, -32001, 'the last policy is the one in force');
    assert.match(JSON.stringify(denied.error.data ?? {}), /reload 19/, JSON.stringify(denied.error));
    assert.ok(m, 'metrics still served');
    for (const { c } of clients) await c.close();
    void opts;
  });
});

describe('4. a broken conf on SIGHUP leaves the old one serving and says why', () => {
  let g;
  before(async () => { g = await reloadGateway('reload-broken'); });

  /** SIGHUP with the files as the test left them; resolves with the log written since. */
  async function hup(what) {
    const from = g.gw.stderr().length;
    const n = reloadCount(g.gw);
    const f = failCount(g.gw);
    process.kill(g.gw.proc.pid, 'SIGHUP');
    await H.waitUntil(() => reloadCount(g.gw) > n || failCount(g.gw) > f || g.gw.exit, { timeout: T(5000), what: `the outcome of SIGHUP (${what}) in the log` });
    A.assertAlive(g.gw, `after SIGHUP with ${what}`);
    return g.gw.stderr().slice(from);
  }

  /** The old configuration still serves: plain and TLS, both upstreams, the old policy. */
  async function oldServes(what) {
    const agent = new http.Agent({ keepAlive: false });
    try {
      for (const up of ['h', 's']) {
        const c = await openClient('streamable', { port: g.gw.plainPort, upstream: up, agent });
        const a = await c.call('echo', { text: `${what}-${up}` });
        assert.equal(textOf(a), `${what}-${up}`, `after SIGHUP with ${what}: echo through ${up}: ${JSON.stringify(a)}`);
        const d = await c.call('denied', {});
        assert.equal(d.error?.code, -32001, `after SIGHUP with ${what}: the old policy still denies on ${up}`);
        await c.close();
      }
      assert.equal(await tlsHealth(g.gw, g.certs.caPem), 200, `after SIGHUP with ${what}: the TLS listener still serves with its old key`);
    } finally { agent.destroy(); }
  }

  test('a syntax error in the conf', async () => {
    const good = fs.readFileSync(g.gw.conf, 'utf8');
    fs.writeFileSync(g.gw.conf, good.replace(/limits = \{/, 'limits = {{ oops'));
    try {
      const log = await hup('a syntax error');
      assert.match(log, /reload failed/, log);
      assert.match(log, /reload error.*tollgate\.conf:\d+/, `the reason names the file and line: ${log}`);
      await oldServes('syntax');
    } finally { fs.writeFileSync(g.gw.conf, good); }
  });

  test('a policy file that is missing', async () => {
    const moved = `${g.policyS}.away`;
    fs.renameSync(g.policyS, moved);
    try {
      const log = await hup('a missing policy file');
      assert.match(log, /reload failed/, log);
      assert.ok(log.includes(path.basename(g.policyS)), `the reason names the policy file ${g.policyS}: ${log}`);
      await oldServes('nopolicy');
    } finally { fs.renameSync(moved, g.policyS); }
  });

  test('a listener TLS key that is not a key', async () => {
    const good = fs.readFileSync(g.certs.key);
    fs.writeFileSync(g.certs.key, '-----BEGIN EC PRIVATE KEY-----\nbm90IGEga2V5\n-----END EC PRIVATE KEY-----\n');
    try {
      const log = await hup('a bad TLS key');
      assert.match(log, /reload failed/, `a key that does not load fails the reload: ${log}`);
      assert.ok(log.includes(path.basename(g.certs.key)), `the reason names the key file: ${log}`);
      await oldServes('badkey');
    } finally { fs.writeFileSync(g.certs.key, good); }
  });

  test('an audit file that cannot be opened', async () => {
    const bad = path.join(ctx.dir, 'no-such-dir', 'audit.log');
    const good = fs.readFileSync(g.gw.conf, 'utf8');
    ctx.rewriteConf(g.gw, { ...g.opts, audit: { file: bad } });
    try {
      const log = await hup('an audit file in a missing directory');
      assert.match(log, /reload failed/, `an audit file that cannot be opened fails the reload, and the log says so: ${log}`);
      assert.ok(log.includes(bad), `the reason names the audit file ${bad}: ${log}`);
      await oldServes('badaudit');
    } finally { fs.writeFileSync(g.gw.conf, good); }
  });

  test('after the broken ones, a good conf reloads', async () => {
    const log = await hup('the good conf again');
    assert.match(log, /configuration reloaded/, log);
    await oldServes('good');
  });
});

// ---------------------------------------------------------------------------

describe('5. SIGUSR1 reopens the log and audit files', () => {
  test('rename the files, SIGUSR1: new lines go to new files at the old paths', async () => {
    const sub = path.join(ctx.dir, 'usr1');
    fs.mkdirSync(sub);
    const logFile = path.join(sub, 'tollgate.log');
    const auditFile = path.join(sub, 'audit.log');
    const conf = H.writeConf(sub, {
      log: { file: logFile },
      audit: { file: auditFile },
      upstreams: [{ name: 'h', url: hostile.url('/mcp'), default: true }],
    });
    // The log goes to a file, so the harness (which reads the ports from stderr) cannot start it.
    const argv = [...H.TOLLGATE_WRAP, H.tollgateBin(), '-c', conf];
    const child = spawn(argv[0], argv.slice(1), { cwd: H.REPO_ROOT, stdio: ['ignore', 'ignore', 'pipe'], detached: true });
    let err = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d) => { err += d; });
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    let done = false;
    ctx.cleanup.add(async () => { if (!done) { try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ } } });
    const read = (f) => (fs.existsSync(f) ? fs.readFileSync(f, 'utf8') : '');
    const port = Number((await H.waitUntil(() => /msg="?listening"?.*?port=(\d+)/.exec(read(logFile)), { timeout: T(10000), what: 'the listening line in the log file', detail: () => read(logFile) + err }))[1]);
    const c = await openClient('streamable', { port, upstream: 'h' });
    assert.equal(textOf(await c.call('echo', { text: 'before' })), 'before');
    await H.waitUntil(() => read(auditFile).includes('"echo"'), { timeout: T(5000), what: 'the first audit line' });

    fs.renameSync(logFile, `${logFile}.1`);
    fs.renameSync(auditFile, `${auditFile}.1`);
    process.kill(child.pid, 'SIGUSR1');
    await H.waitUntil(() => /log reopened/.test(read(logFile)), { timeout: T(5000), what: 'a new log file at the old path saying "log reopened"', detail: () => `new: ${read(logFile)} old tail: ${read(`${logFile}.1`).slice(-500)}` });
    const oldLog = read(`${logFile}.1`).length;
    const oldAudit = read(`${auditFile}.1`).length;
    assert.equal(textOf(await c.call('echo', { text: 'after' })), 'after');
    await H.waitUntil(() => read(auditFile).includes('"echo"'), { timeout: T(5000), what: 'the audit line of the call after SIGUSR1 in a new audit file', detail: () => `new: ${read(auditFile)}; old grew by ${read(`${auditFile}.1`).length - oldAudit}` });
    await c.close();
    // a line for a connection made after the reopen
    const c2 = await openClient('streamable', { port, upstream: 'h' });
    await c2.call('echo', { text: 'again' });
    await c2.close();
    assert.equal(read(`${auditFile}.1`).length, oldAudit, 'the renamed audit file got nothing more');
    assert.equal(read(`${logFile}.1`).length, oldLog, 'the renamed log file got nothing more');

    process.kill(child.pid, 'SIGTERM');
    const ex = await H.within(exited, T(10000), 'tollgate exit after SIGTERM');
    done = true;
    assert.equal(ex.code, 0, `exit after SIGTERM: ${JSON.stringify(ex)} ${err}`);
    assert.doesNotMatch(err, A.SANITIZER_RE, err);
    void net;
  });
});
