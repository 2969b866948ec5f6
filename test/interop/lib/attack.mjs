// Helpers shared by the attack battery (attack*.test.mjs): gateways with their failure context,
// raw sockets that reset, raw JSON-RPC over fetch, process figures from /proc, and a witness of
// the gateway's one-second tick. Built on lib/harness.mjs.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import http from 'node:http';
import * as H from './harness.mjs';

export const HOSTILE = path.join(H.TEST_DIR, 'fixtures', 'hostile', 'hostile.mjs');
export const SANITIZER_RE = /ERROR: (AddressSanitizer|LeakSanitizer)|AddressSanitizer|LeakSanitizer|runtime error/;

/** A test context: one cleanup, a temp dir, the gateways started, their logs on failure. */
export function makeContext(prefix) {
  const cleanup = new H.Cleanup();
  const ctx = { cleanup, dir: null, gws: {}, extraLogs: {}, fetch: null, current: null };
  ctx.init = () => {
    ctx.dir = H.makeTempDir(cleanup, prefix);
    ctx.fetch = H.makeFetch({ cleanup });
  };
  // A failing test shows the gateways it started, and the shared ones (started in a before hook).
  ctx.logs = () => {
    const o = {};
    for (const [k, g] of Object.entries(ctx.gws)) {
      if (g.owner !== undefined && g.owner !== ctx.current) continue;
      o[`tollgate[${k}] process`] = g.status();
      o[`tollgate[${k}] stderr`] = g.stderr();
    }
    for (const [k, f] of Object.entries(ctx.extraLogs)) o[k] = typeof f === 'function' ? f() : f;
    return o;
  };
  /** it() whose failure message carries every gateway's state and stderr tail. */
  ctx.test = (it) => (name, opts, fn) => {
    if (typeof opts === 'function') { fn = opts; opts = {}; }
    const body = H.withLogs(ctx.logs, fn);
    return it(name, opts, async (t) => {
      ctx.current = name;
      try { return await body(t); } finally { ctx.current = null; }
    });
  };
  /** One line per gateway for the end of the run: its state and the sanitizer's summary if any. */
  ctx.summary = () => Object.entries(ctx.gws).map(([k, g]) => {
    const d = sanitizerDigest(g.stderr());
    return `tollgate[${k}]: ${g.status()}${d ? ' | ' + d.split('\n').filter((l) => /SUMMARY|ERROR:/.test(l)).join(' | ') : ''}`;
  }).join('\n');
  /**
   * Writes conf `opts` under dir/name and starts tollgate on it. startOpts.prlimit ("SOFT:HARD")
   * starts it under `prlimit --nofile=...` (the harness spawns $TOLLGATE_BIN, so a wrapper
   * script that execs prlimit, which execs tollgate: the pid is tollgate's).
   */
  ctx.gateway = async (name, opts, startOpts = {}) => {
    const sub = path.join(ctx.dir, name);
    fs.mkdirSync(sub, { recursive: true });
    const conf = H.writeConf(sub, opts);
    const { prlimit, ...rest } = startOpts;
    let p;
    if (prlimit) {
      const wrapper = path.join(sub, 'tollgate-prlimit.sh');
      fs.writeFileSync(wrapper, `#!/bin/sh\nexec prlimit --nofile=${prlimit} -- ${JSON.stringify(H.tollgateBin())} "$@"\n`, { mode: 0o755 });
      const saved = process.env.TOLLGATE_BIN;
      process.env.TOLLGATE_BIN = wrapper; // read synchronously at the start of startTollgate
      try { p = H.startTollgate(conf, { cleanup, listeners: 1, ...rest }); } finally {
        if (saved === undefined) delete process.env.TOLLGATE_BIN; else process.env.TOLLGATE_BIN = saved;
      }
    } else {
      p = H.startTollgate(conf, { cleanup, listeners: 1, ...rest });
    }
    const gw = await p;
    gw.owner = ctx.current ?? undefined;
    cleanup.add(() => fs.writeFileSync(path.join(sub, 'tollgate.stderr'), gw.stderr()));
    gw.conf = conf;
    gw.dir = sub;
    gw.opts = opts;
    ctx.gws[name] = gw;
    return gw;
  };
  /** Rewrites gw's conf file with new opts (same path, so a reload reads it). */
  ctx.rewriteConf = (gw, opts) => {
    H.writeConf(gw.dir, opts);
    gw.opts = opts;
  };
  ctx.writePolicy = (name, obj) => {
    const f = path.join(ctx.dir, name);
    fs.writeFileSync(f, JSON.stringify(obj) + '\n');
    return f;
  };
  return ctx;
}

/** The sanitizer report in a stderr text, cut to its headline, first frames and summary; '' if none. */
export function sanitizerDigest(err) {
  const lines = err.split('\n');
  const i = lines.findIndex((l) => SANITIZER_RE.test(l));
  if (i < 0) return '';
  const out = [lines[i]];
  let frames = 0;
  for (let j = i + 1; j < lines.length && out.length < 40; j++) {
    const l = lines[j];
    if (/^\s+#\d+ /.test(l)) { if (frames++ < 8) out.push(l); continue; }
    if (/freed by|previously allocated|^SUMMARY|READ of|WRITE of|is located/.test(l)) { out.push(l); frames = 0; }
  }
  return out.join('\n');
}

/** Fails unless the gateway is still running and has reported nothing to a sanitizer. */
export function assertAlive(gw, what = '') {
  const d = sanitizerDigest(gw.stderr());
  assert.ok(gw.exit === null && !d, `tollgate ${gw.status()} ${what}\n${d || gw.stderr().split('\n').slice(-30).join('\n')}`);
}

/**
 * Stops the gateway now (SIGTERM) and checks its exit: code 0, no sanitizer report in stderr.
 * The harness's cleanup does the same at the end of the file; a test that starts a gateway of
 * its own stops it with this so that a crash is charged to that test.
 */
export async function stopAndCheck(gw) {
  const crashed = gw.exit && !gw.stopping ? gw.status() : null;
  const r = await gw.stop();
  const d = sanitizerDigest(gw.stderr());
  assert.ok(!d, 'tollgate stderr has a sanitizer report:\n' + d);
  assert.equal(crashed, null, `tollgate ${crashed}`);
  assert.equal(r.code, 0, `tollgate exit after SIGTERM: code ${r.code}, signal ${r.signal}`);
}

export const base = (gw) => `http://127.0.0.1:${gw.plainPort}`;
export const mcpUrl = (gw, up) => `${base(gw)}/${up}/mcp`;

/** Admin API request; returns {status, json, text}. */
export async function admin(fetchFn, gw, method, p, token) {
  const h = token ? { authorization: `Bearer ${token}` } : {};
  const res = await fetchFn(`http://127.0.0.1:${gw.adminPort}${p}`, { method, headers: h });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text };
}

/** One sample of a Prometheus text body: value of the first line matching re, or undefined. */
export function metric(text, re) {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = re.exec(line);
    if (m) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return undefined;
}

/** A tools/call body. */
export const call = (id, name, args = {}) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

/** The JSON-RPC message answering `id` in a postRaw result, or undefined. */
export const answerOf = (r, id) => r.messages.find((m) => m && m.id === id && ('result' in m || 'error' in m));

/** POSTs a request and returns its JSON-RPC answer (throws with the HTTP text when none). */
export async function rpc(fetchFn, url, sess, body) {
  const r = await H.postRaw(fetchFn, url, body, sess.headers);
  const a = answerOf(r, body.id);
  assert.ok(a, `no JSON-RPC answer to ${JSON.stringify(body).slice(0, 200)}: HTTP ${r.status} ${r.text.slice(0, 500)}`);
  return a;
}

/** A raw HTTP/1.1 request text. */
export function httpText(method, p, { host, headers = {}, body } = {}) {
  const h = { host, ...headers };
  if (body != null) h['content-length'] = Buffer.byteLength(body);
  return `${method} ${p} HTTP/1.1\r\n` + Object.entries(h).map(([k, v]) => `${k}: ${v}\r\n`).join('') + '\r\n' + (body ?? '');
}

/**
 * Connects, writes `text`, then resets the connection at once (RST: SO_LINGER 0).
 * Resolves false when the connection could not be made (nobody listens any more).
 */
export async function sendAndReset(port, text) {
  const s = net.connect(port, '127.0.0.1');
  const ok = await new Promise((resolve) => {
    s.once('connect', () => resolve(true));
    s.once('error', () => resolve(false));
  });
  s.on('error', () => {});
  if (!ok) return false;
  s.write(text);
  s.resetAndDestroy();
  if (!s.closed) await once(s, 'close');
  return true;
}

/** A connected raw socket (paused unless told otherwise) that collects what it is sent. */
export async function rawSocket(port, { paused = false } = {}) {
  const s = net.connect(port, '127.0.0.1');
  s.on('error', () => {});
  await once(s, 'connect');
  const o = { sock: s, chunks: [], bytes: 0, closed: false };
  s.on('data', (d) => { o.chunks.push(d); o.bytes += d.length; });
  s.on('close', () => { o.closed = true; });
  if (paused) s.pause();
  o.text = () => Buffer.concat(o.chunks).toString('latin1');
  return o;
}

/** Parses consecutive HTTP/1.1 responses with Content-Length bodies out of a buffer. */
export function parseResponses(buf) {
  const out = [];
  let off = 0;
  for (;;) {
    const i = buf.indexOf('\r\n\r\n', off);
    if (i < 0) break;
    const head = buf.subarray(off, i).toString('latin1');
    const cl = /\r\ncontent-length: *(\d+)/i.exec(head);
    const n = cl ? Number(cl[1]) : 0;
    if (buf.length < i + 4 + n) break;
    out.push({ status: Number(head.split(' ')[1]), head, body: buf.subarray(i + 4, i + 4 + n).toString('utf8') });
    off = i + 4 + n;
  }
  return out;
}

export function vmRssKiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}

/** utime + stime of a process, in clock ticks (usually 1/100 s). */
export function cpuTicks(pid) {
  const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]); // fields 14 and 15 of stat(5)
}

export const CLK_TCK = (() => {
  try { return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100; } catch { return 100; }
})();

/**
 * Open file descriptors of a process; with `below`, only those numbered under it (RLIMIT_NOFILE
 * bounds the numbers of new descriptors: one inherited as, say, 251 takes no slot under 64).
 */
export function fdCount(pid, below = Infinity) {
  try { return fs.readdirSync(`/proc/${pid}/fd`).filter((f) => Number(f) < below).length; } catch { return -1; }
}

/** The soft and hard RLIMIT_NOFILE of a running process, from /proc/PID/limits. */
export function nofile(pid) {
  const m = /Max open files\s+(\S+)\s+(\S+)/.exec(fs.readFileSync(`/proc/${pid}/limits`, 'utf8'));
  const n = (v) => (v === 'unlimited' ? Infinity : Number(v));
  return { soft: n(m[1]), hard: n(m[2]) };
}

/**
 * Waits until `value()` has stayed the same for `quietMs` (polled every `interval`), at most
 * `timeout`; returns the last value. For "the upstream has answered what it will": the count of
 * answers stops moving.
 */
export async function settled(value, { quietMs = 600, interval = 150, timeout = 20000 } = {}) {
  const deadline = Date.now() + timeout;
  let last = value();
  let since = Date.now();
  while (Date.now() < deadline) {
    await H.sleep(interval);
    const v = value();
    if (v !== last) { last = v; since = Date.now(); } else if (Date.now() - since >= quietMs) break;
  }
  return last;
}

/**
 * A witness of the gateway's one-second tick: a legacy SSE client stream on /UP/sse; every
 * `: keepalive` comment on it was written by a tick (limits.sse_keepalive_ms = 1000 needed).
 * ticks(n) resolves once n more comments arrived (false after timeout).
 */
export async function tickWitness(gw, up, headers = {}) {
  const res = await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: gw.plainPort, path: `/${up}/sse`, method: 'GET', agent: false,
      headers: { accept: 'text/event-stream', ...headers } }, resolve);
    req.on('error', reject);
    req.end();
  });
  assert.equal(res.statusCode, 200, `GET /${up}/sse for the tick witness`);
  res.setEncoding('utf8');
  let raw = '';
  res.on('data', (d) => { raw += d; });
  res.on('error', () => {});
  const count = () => (raw.match(/^: ?keepalive/gm) ?? []).length;
  return {
    count,
    async ticks(n, timeout = 6000) {
      const want = count() + n;
      return H.waitFor(() => count() >= want, { timeout, interval: 50 });
    },
    close() { res.destroy(); },
  };
}
