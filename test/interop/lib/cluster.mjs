// A real cluster for the interop tests (issue 12, item 5): one Debian redis-server, N tollgate
// instances made from one generated conf each (same grants, upstreams, policies and cluster
// secret; their own `instance` name), and Debian's haproxy in front of them, all on loopback and
// on ports picked at test time. Every process started here is stopped by the Cleanup it is given.
//
//   const c = await startCluster({ cleanup, dir, n: 3, conf: { grants, upstreams }, cluster: {...} });
//   c.url('cowork-os')           the HAProxy frontend, http://127.0.0.1:P/cowork-os/mcp
//   c.instances[i].url(up)       instance i directly
//   c.redis.stop()/cont()/kill()/restart()/command('KEYS', '*')
//   c.kill(i), c.hup(i), c.waitReady(i), c.metrics(i), c.haproxy.waitServer(name, 'UP'|'DOWN')
//
// The HAProxy configuration is the one docs/cluster.md shows: plain POSTs round-robin, GET streams
// hashed on Mcp-Session-Id, legacy SSE (/sse, /messages) on the client's address, health checks on
// each instance's /readyz (admin listener), and a connection refused retried on another instance
// (nothing was sent, so nothing can be forwarded twice).

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import * as H from './harness.mjs';

// ---------------------------------------------------------------------------
// RESP: just enough of Redis's protocol to look at keys and to ping

function encodeCommand(args) {
  let s = `*${args.length}\r\n`;
  for (const a of args) {
    const b = Buffer.from(String(a));
    s += `$${b.length}\r\n${b.toString('binary')}\r\n`;
  }
  return Buffer.from(s, 'binary');
}

/** Parses one RESP value at buf[off]; returns {value, end} or null when incomplete. */
function parseResp(buf, off = 0) {
  const nl = buf.indexOf('\r\n', off);
  if (nl < 0) return null;
  const type = String.fromCharCode(buf[off]);
  const line = buf.toString('utf8', off + 1, nl);
  const next = nl + 2;
  switch (type) {
    case '+': return { value: line, end: next };
    case '-': return { value: new Error(line), end: next };
    case ':': return { value: Number(line), end: next };
    case '$': {
      const n = Number(line);
      if (n < 0) return { value: null, end: next };
      if (buf.length < next + n + 2) return null;
      return { value: buf.toString('utf8', next, next + n), end: next + n + 2 };
    }
    case '*': {
      const n = Number(line);
      if (n < 0) return { value: null, end: next };
      const out = [];
      let p = next;
      for (let i = 0; i < n; i++) {
        const r = parseResp(buf, p);
        if (!r) return null;
        out.push(r.value);
        p = r.end;
      }
      return { value: out, end: p };
    }
    default: throw new Error(`RESP: unexpected type byte ${JSON.stringify(type)}`);
  }
}

/** Sends one command on a fresh connection; resolves with the reply (an Error value for -ERR). */
export function redisCommand(port, args, { timeout = 2000, password } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: '127.0.0.1', port });
    let buf = Buffer.alloc(0);
    const want = password ? 2 : 1;
    const replies = [];
    const t = setTimeout(() => { sock.destroy(); reject(new Error(`redis ${args[0]}: no answer within ${timeout} ms`)); }, timeout);
    sock.on('connect', () => {
      if (password) sock.write(encodeCommand(['AUTH', password]));
      sock.write(encodeCommand(args));
    });
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const r = parseResp(buf);
        if (!r) break;
        replies.push(r.value);
        buf = buf.subarray(r.end);
      }
      if (replies.length >= want) {
        clearTimeout(t);
        sock.destroy();
        resolve(replies[want - 1]);
      }
    });
    sock.on('error', (e) => { clearTimeout(t); reject(e); });
  });
}

// ---------------------------------------------------------------------------
// redis-server

/**
 * Starts Debian's redis-server in the foreground on a free 127.0.0.1 port, without persistence.
 * Returns { port, addr, proc, log(), stop() (SIGSTOP), cont() (SIGCONT), kill() (SIGKILL, waits
 * for the exit), restart() (same port, empty data set), command(...args), shutdown() }.
 */
export async function startRedis({ cleanup, dir, timeout = 10000 } = {}) {
  const port = await H.freePort();
  const r = {
    port, addr: `127.0.0.1:${port}`, proc: null, paused: false, out: '',
    log: () => r.out,
    command: (...args) => redisCommand(port, args),
  };
  const spawnIt = async () => {
    const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '',
      '--appendonly', 'no', '--dir', dir, '--protected-mode', 'no'], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    r.proc = child;
    r.paused = false;
    const ready = new Promise((resolve) => {
      const on = (d) => { r.out += d; if (/Ready to accept connections/.test(r.out.slice(r.mark))) resolve('ready'); };
      child.stdout.setEncoding('utf8');
      child.stderr.setEncoding('utf8');
      child.stdout.on('data', on);
      child.stderr.on('data', on);
    });
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    r.mark = r.out.length;
    let timer;
    const res = await Promise.race([ready, exited, new Promise((resolve) => { timer = setTimeout(() => resolve('timeout'), timeout); })]);
    clearTimeout(timer);
    if (res !== 'ready') {
      throw new Error(`redis-server did not start on port ${port} (${typeof res === 'string' ? res : JSON.stringify(res)}):\n${r.out}`);
    }
    // ready means listening; PING proves it answers
    const pong = await redisCommand(port, ['PING']);
    if (pong !== 'PONG') throw new Error(`redis-server: PING answered ${pong}`);
  };
  const signal = (sig) => { try { process.kill(r.proc.pid, sig); } catch { /* gone */ } };
  r.stop = () => { signal('SIGSTOP'); r.paused = true; };
  r.cont = () => { signal('SIGCONT'); r.paused = false; };
  r.kill = async () => {
    const child = r.proc;
    if (child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((resolve) => child.once('exit', resolve));
    if (r.paused) r.cont();
    signal('SIGKILL');
    await gone;
  };
  r.restart = async () => { await r.kill(); await spawnIt(); };
  r.shutdown = async () => {
    if (!r.proc) return;
    if (r.paused) r.cont();
    await H.stopChild(r.proc, 2000);
  };
  cleanup?.add(() => r.shutdown());
  await spawnIt();
  return r;
}

// ---------------------------------------------------------------------------
// haproxy

/**
 * The HAProxy configuration in front of `servers` ([{name, port, adminPort}]): see docs/cluster.md,
 * where it is shown in full with a comment on every choice.
 */
export function haproxyConfig({ port, statsPort, servers }) {
  const srv = (opts) => servers.map((s) =>
    `  server ${s.name} 127.0.0.1:${s.port} check port ${s.adminPort} inter 300ms fall 1 rise 1${opts}`).join('\n');
  return `# written by test/interop/lib/cluster.mjs (the configuration docs/cluster.md shows)
global
  maxconn 2000

defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  timeout tunnel 1h
  timeout http-keep-alive 10s
  retries 3
  retry-on conn-failure
  option redispatch 1
  option httpchk
  http-check send meth GET uri /readyz
  http-check expect status 200

frontend mcp
  bind 127.0.0.1:${port}
  acl legacy_sse path_end /sse /messages
  acl stream method GET
  use_backend tollgate_by_client if legacy_sse
  use_backend tollgate_by_session if stream
  default_backend tollgate_any

backend tollgate_any
  balance roundrobin
${srv('')}

backend tollgate_by_session
  balance hdr(Mcp-Session-Id)
  hash-type consistent
${srv('')}

backend tollgate_by_client
  balance source
  hash-type consistent
${srv('')}

frontend stats
  bind 127.0.0.1:${statsPort}
  stats enable
  stats uri /stats
`;
}

function httpGet(port, p, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: p, agent: false, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.setTimeout(5000, () => req.destroy(new Error(`GET ${p}: no answer within 5 s`)));
  });
}

/**
 * Starts haproxy in the foreground (-db) with haproxyConfig(); resolves once every server is UP.
 * Returns { port, statsPort, cfgFile, proc, log(), servers() ({name: status} of tollgate_any),
 * waitServer(name, status), stop() }.
 */
export async function startHaproxy({ cleanup, dir, servers, timeout = 15000 }) {
  const port = await H.freePort();
  const statsPort = await H.freePort();
  const cfgFile = path.join(dir, 'haproxy.cfg');
  fs.writeFileSync(cfgFile, haproxyConfig({ port, statsPort, servers }));
  const child = spawn('haproxy', ['-db', '-f', cfgFile], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { out += d; });
  const hp = {
    port, statsPort, cfgFile, proc: child,
    log: () => out,
    stop: () => H.stopChild(child, 2000),
    /** {server name: status} for one backend, from the stats page's CSV. */
    async servers(backend = 'tollgate_any') {
      const r = await httpGet(statsPort, '/stats;csv;norefresh');
      if (r.status !== 200) throw new Error(`haproxy stats: HTTP ${r.status}`);
      const lines = r.body.split('\n').filter(Boolean);
      const cols = lines[0].replace(/^# /, '').split(',');
      const ix = (c) => cols.indexOf(c);
      const o = {};
      for (const l of lines.slice(1)) {
        const f = l.split(',');
        if (f[ix('pxname')] === backend && !['BACKEND', 'FRONTEND'].includes(f[ix('svname')])) o[f[ix('svname')]] = f[ix('status')];
      }
      return o;
    },
    async waitServer(name, status, { backend = 'tollgate_any', timeout: t = 10000 } = {}) {
      let last;
      await H.waitUntil(async () => {
        if (child.exitCode !== null) throw new Error(`haproxy exited:\n${out}`);
        try { last = await hp.servers(backend); } catch (e) { last = String(e); return false; }
        return typeof last === 'object' && String(last[name]).startsWith(status);
      }, { timeout: H.scaled(t), what: `haproxy to see ${name} ${status} in ${backend}`, detail: () => JSON.stringify(last) });
    },
  };
  cleanup?.add(() => hp.stop());
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const up = (async () => {
    for (const backend of ['tollgate_any', 'tollgate_by_session', 'tollgate_by_client']) {
      for (const s of servers) await hp.waitServer(s.name, 'UP', { backend, timeout });
    }
    return 'up';
  })();
  up.catch(() => {});
  const r = await Promise.race([up, exited]);
  if (r !== 'up') throw new Error(`haproxy exited early (${JSON.stringify(r)}):\n${out}\n--- cfg ---\n${fs.readFileSync(cfgFile, 'utf8')}`);
  return hp;
}

// ---------------------------------------------------------------------------
// The cluster

/** A 32-byte secret file (mode 0600), the same for every instance. */
export function writeSecret(dir, name = 'cluster.key') {
  const f = path.join(dir, name);
  fs.writeFileSync(f, randomBytes(32), { mode: 0o600 });
  return f;
}

/**
 * Starts redis (unless `redis: false`), n instances and haproxy.
 *   conf:    writeConf() options shared by every instance (grants, upstreams, admin, limits, ...)
 *   cluster: the `cluster` group's directives beyond redis, secret_file, key_prefix and instance
 *            (which are filled in); `cluster: false` leaves the group out (plain instances, each
 *            with its own memory: the harness without the cluster core).
 *   adminToken: the admin bearer token (admin.token_sha256 is set from it)
 * Returns { redis, instances: [gw...], haproxy, url(up), instanceUrl(i, up), kill(i), hup(i),
 * waitReady(i), metrics(i), clusterMetrics(i), admin(i, method, path), reconfigure(i, clusterDirectives), logs() }.
 */
export async function startCluster({ cleanup, dir, n = 3, conf = {}, cluster = {}, adminToken, names = ['a', 'b', 'c', 'd', 'e'] } = {}) {
  const c = { instances: [], redis: null, haproxy: null, adminToken };
  const useCluster = cluster !== false;
  if (useCluster) {
    c.redis = await startRedis({ cleanup, dir });
    c.secretFile = writeSecret(dir);
    c.keyPrefix = `tollgate-test-${randomBytes(4).toString('hex')}:`;
  }
  c.confOf = (name, more = {}) => {
    const sub = path.join(dir, `instance-${name}`);
    fs.mkdirSync(sub, { recursive: true });
    return H.writeConf(sub, {
      ...conf,
      admin: { ...(typeof conf.admin === 'object' ? conf.admin : {}), ...(adminToken ? { token_sha256: H.sha256hex(adminToken) } : {}) },
      cluster: useCluster ? {
        redis: c.redis.addr,
        key_prefix: c.keyPrefix,
        secret_file: c.secretFile,
        on_unavailable: 'deny',
        timeout_ms: 250,
        backoff_ms: 100,
        backoff_max_ms: 1000,
        instance: name,
        ...cluster,
        ...more,
      } : undefined,
    });
  };
  c.start = async (name) => {
    const file = c.confOf(name);
    const gw = await H.startTollgate(file, { cleanup, listeners: 1, admin: true });
    gw.name = name;
    gw.conf = file;
    gw.url = (up) => `http://127.0.0.1:${gw.plainPort}/${up}/mcp`;
    return gw;
  };
  c.instances = await Promise.all(names.slice(0, n).map((name) => c.start(name)));
  for (let i = 0; i < n; i++) await waitReady(c.instances[i]);
  c.haproxy = await startHaproxy({
    cleanup, dir,
    servers: c.instances.map((g) => ({ name: g.name, port: g.plainPort, adminPort: g.adminPort })),
  });
  c.url = (up) => `http://127.0.0.1:${c.haproxy.port}/${up}/mcp`;
  c.instanceUrl = (i, up) => c.instances[i].url(up);
  c.waitReady = (i) => waitReady(c.instances[i]);
  c.metrics = (i) => c.instances[i].metrics({ token: adminToken });
  /** The instance's metrics whose name starts with tollgate_cluster_ (names may still change). */
  c.clusterMetrics = async (i) => {
    const m = await c.metrics(i);
    return Object.fromEntries(Object.entries(m).filter(([k]) => k.startsWith('tollgate_cluster_')));
  };
  /** Admin API on instance i: {status, json, text}. */
  c.admin = async (i, method, p, { headers = {}, body } = {}) => {
    const g = c.instances[i];
    const res = await fetch(`http://127.0.0.1:${g.adminPort}${p}`, {
      method, headers: { authorization: `Bearer ${adminToken}`, ...headers }, body,
    });
    const text = await res.text();
    let json;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    return { status: res.status, json, text };
  };
  /**
   * SIGKILL instance i (under load: no drain, its connections just die); resolves after its exit.
   * The harness's cleanup would call that a crash: it is told this one was meant.
   */
  c.kill = async (i) => {
    const g = c.instances[i];
    g.stopping = true;
    const gone = new Promise((resolve) => (g.proc.exitCode !== null || g.proc.signalCode !== null ? resolve() : g.proc.once('exit', resolve)));
    try { process.kill(g.proc.pid, 'SIGKILL'); } catch { /* gone */ }
    await gone;
    g.killed = true;
    g.stop = async () => ({ code: 0, signal: null }); // killed on purpose; the sanitizer check in cleanup still runs
  };
  /** SIGHUP instance i and wait for its "configuration reloaded" log line. */
  c.hup = async (i) => {
    const g = c.instances[i];
    const from = g.stderr().length;
    process.kill(g.proc.pid, 'SIGHUP');
    await g.waitForLog(/configuration reloaded|reload(ed)? (ok|done)/i, { from, what: 'the reload line' });
  };
  /** Rewrites instance i's conf with `more` in its cluster group, then SIGHUPs it (see hup). */
  c.reconfigure = async (i, more) => {
    c.confOf(c.instances[i].name, more);
    await c.hup(i);
  };
  c.logs = () => {
    const o = {};
    for (const g of c.instances) {
      o[`tollgate[${g.name}] process`] = g.status();
      o[`tollgate[${g.name}] stderr`] = g.stderr();
    }
    if (c.haproxy) o.haproxy = c.haproxy.log();
    if (c.redis) o.redis = c.redis.log();
    return o;
  };
  return c;
}

/** Waits until the instance's /readyz (admin listener) answers 200. */
export async function waitReady(gw, { timeout = 10000 } = {}) {
  let last;
  await H.waitUntil(async () => {
    if (gw.exit) throw new Error(`tollgate[${gw.name}] ${gw.status()}`);
    try { last = await httpGet(gw.adminPort, '/readyz'); } catch (e) { last = { error: String(e) }; return false; }
    return last.status === 200;
  }, { timeout: H.scaled(timeout), what: `tollgate[${gw.name}] /readyz 200`, detail: () => JSON.stringify(last) });
}
