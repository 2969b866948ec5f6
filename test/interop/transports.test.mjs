// Protocol edge cases of the client transports and the upstream transports (issue 4), with raw
// sockets, the `ws` package and fetch, one tollgate in front of server-everything (streamableHttp)
// and the CoWork OS stand-in over stdio (--noisy):
//   - WebSocket: the RFC 6455 handshake and its refusals (400/401/403/405/426), the browser token
//     convention (?access_token= on /ws only), then frames: text, fragmented with a ping between,
//     binary (1003), too big (1009), invalid JSON (-32700, connection kept), ping/pong, the close
//     handshake, and the session (a stdio child) ending with the connection;
//   - legacy HTTP+SSE: the endpoint event, 202 and `message` events, sessionId refusals (unknown,
//     another grant's, missing, wrong Content-Type), a stream that closed;
//   - keepalive comments on idle legacy SSE and Streamable HTTP GET streams, and when they come;
//   - Streamable HTTP resumability: STREAM-SEQ event ids, the 2025-11-25 priming event, GET with
//     Last-Event-ID after a dropped connection, live and after the call ended (nothing lost,
//     nothing repeated), unknown and malformed ids;
//   - stdio upstreams: noisy stdout skipped and logged, stderr logged, a crashed child (pending
//     call answered -32004, session gone, new child next time), a child that exits, DELETE kills
//     the child, warm pool, a command that does not exist, children gone after SIGTERM, no zombies;
//   - backpressure (a gateway of its own): readers that stop reading big answers on each client
//     transport cost bounded memory (VmRSS) and never stall another session; all arrives whole;
//   - SIGTERM while a WebSocket or legacy SSE client has stopped reading.
// The happy paths of every SDK client x upstream are in matrix.test.mjs.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/transports.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import * as H from './lib/harness.mjs';

H.requireNodeModules();
const { default: WebSocket } = await import('ws');

const cleanup = new H.Cleanup();
let dir;
let gw;
let ev; // server-everything streamableHttp
let fetchFn;
const A = 'alice-' + H.randomToken(); // grant alice
const B = 'bob-' + H.randomToken(); // grant bob
const BODY_BYTES = 65536;
const standinScript = path.join(H.TEST_DIR, 'fixtures', 'cowork-os', 'standin.mjs');
const TAG = `tgtransports-${process.pid}`;
// each stdio upstream's children are told apart by their --log file
const stLog = () => path.join(dir, `${TAG}-st.log`);
const warmLog = () => path.join(dir, `${TAG}-warm.log`);

const logs = () => ({
  'tollgate process': gw?.status(),
  'tollgate stderr': gw?.stderr(),
});
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

const authA = { Authorization: `Bearer ${A}` };
const authB = { Authorization: `Bearer ${B}` };
const base = () => `http://127.0.0.1:${gw.plainPort}`;

/** The value of a metric of gateway g now (0 when not exported). */
const metric = async (name, g = gw) => (await g.metrics())[name] ?? 0;
/** Waits until the gateway holds one more JSON-RPC request than `before` (a call in flight). */
const callHeld = (before, g = gw) => g.waitForMetric('tollgate_rpc_requests_total', (v) => v > before, { what: 'the call to reach the gateway' });

// ---------------------------------------------------------------------------
// Processes: the gateway's children

/** The gateway's direct children as [{pid, stat, args}] (ps --ppid). */
function childrenOf(ppid = gw.proc.pid) {
  let out = '';
  try {
    out = execFileSync('ps', ['-o', 'pid=,stat=,args=', '--ppid', String(ppid)], { encoding: 'utf8' });
  } catch (e) {
    if (e.status === 1) return []; // no such processes
    throw e;
  }
  return out.split('\n').filter((l) => l.trim()).map((l) => {
    const m = /^\s*(\d+)\s+(\S+)\s+(.*)$/.exec(l);
    return { pid: Number(m[1]), stat: m[2], args: m[3] };
  });
}
const stChildren = () => childrenOf().filter((c) => c.args.includes(stLog()));
const liveSt = () => stChildren().filter((c) => !c.stat.startsWith('Z'));
const zombies = () => childrenOf().filter((c) => c.stat.startsWith('Z'));

/** State letter of a pid (from /proc), or null when it no longer exists. */
function procState(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return s.slice(s.lastIndexOf(')') + 2).split(' ')[0];
  } catch { return null; }
}

function vmRssKiB(pid = gw.proc.pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}

// ---------------------------------------------------------------------------
// Raw HTTP over a socket: for handshakes whose every byte matters

/**
 * Sends `text` on a new TCP connection and reads one response head (and its Content-Length body).
 * Resolves { status, headers (lowercased, last wins), head, body, socket, rest } where rest holds
 * any bytes after the response (frames after a 101). The socket stays open unless `close`.
 */
function rawHttp(text, { port = gw.plainPort, timeout = 5000, close = true } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let done = false;
    const t = setTimeout(() => finish(new Error(`no complete response within ${timeout} ms; got ${JSON.stringify(buf.toString('latin1'))}`)), timeout);
    function finish(err, r) {
      if (done) return;
      done = true;
      clearTimeout(t);
      sock.removeAllListeners('data');
      if (close || err) sock.destroy();
      if (err) reject(err); else resolve(r);
    }
    function tryParse(ended) {
      const i = buf.indexOf('\r\n\r\n');
      if (i < 0) { if (ended) finish(new Error(`connection closed before a response head: ${JSON.stringify(buf.toString('latin1'))}`)); return; }
      const head = buf.subarray(0, i).toString('latin1');
      const lines = head.split('\r\n');
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0])?.[1]);
      const headers = {};
      const rawHeaders = [];
      for (const l of lines.slice(1)) {
        const k = l.indexOf(':');
        rawHeaders.push([l.slice(0, k), l.slice(k + 1).trim()]);
        headers[l.slice(0, k).toLowerCase()] = l.slice(k + 1).trim();
      }
      const bodyLen = status === 101 ? 0 : Number(headers['content-length'] ?? 0);
      if (buf.length < i + 4 + bodyLen && !ended) return;
      const body = buf.subarray(i + 4, i + 4 + bodyLen).toString('utf8');
      const rest = buf.subarray(i + 4 + bodyLen);
      finish(null, { status, headers, rawHeaders, head, body, socket: sock, rest });
    }
    sock.on('data', (d) => { buf = Buffer.concat([buf, d]); tryParse(false); });
    sock.on('end', () => tryParse(true));
    sock.on('error', (e) => finish(e));
    sock.write(text);
  });
}

const wsKey = () => randomBytes(16).toString('base64');
const wsAccept = (key) => createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');

function wsRequest(p, { key = wsKey(), version = '13', protocol = 'mcp', headers = {}, method = 'GET', upgrade = true } = {}) {
  const h = {
    Host: `127.0.0.1:${gw.plainPort}`,
    ...(upgrade ? { Upgrade: 'websocket', Connection: 'Upgrade' } : {}),
    ...(version != null ? { 'Sec-WebSocket-Version': version } : {}),
    ...(key != null ? { 'Sec-WebSocket-Key': key } : {}),
    ...(protocol != null ? { 'Sec-WebSocket-Protocol': protocol } : {}),
    ...headers,
  };
  return `${method} ${p} HTTP/1.1\r\n` + Object.entries(h).map(([k, v]) => `${k}: ${v}\r\n`).join('') + '\r\n';
}

/** One client frame (masked, as RFC 6455 requires of clients). */
function frame(opcode, payload = Buffer.alloc(0), { fin = true, mask = true } = {}) {
  payload = Buffer.from(payload);
  const n = payload.length;
  const hdr = [(fin ? 0x80 : 0) | opcode];
  if (n < 126) hdr.push((mask ? 0x80 : 0) | n);
  else if (n < 65536) hdr.push((mask ? 0x80 : 0) | 126, n >> 8, n & 255);
  else {
    hdr.push((mask ? 0x80 : 0) | 127);
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(BigInt(n));
    hdr.push(...b);
  }
  if (!mask) return Buffer.concat([Buffer.from(hdr), payload]);
  const key = randomBytes(4);
  const body = Buffer.from(payload);
  for (let i = 0; i < n; i++) body[i] ^= key[i & 3];
  return Buffer.concat([Buffer.from(hdr), key, body]);
}

/** Parses the server's (unmasked) frames from a growing buffer; returns [frames, rest]. */
function parseFrames(buf) {
  const frames = [];
  for (;;) {
    if (buf.length < 2) break;
    const fin = (buf[0] & 0x80) !== 0;
    const opcode = buf[0] & 0x0f;
    const masked = (buf[1] & 0x80) !== 0;
    let len = buf[1] & 0x7f;
    let off = 2;
    if (len === 126) { if (buf.length < 4) break; len = buf.readUInt16BE(2); off = 4; }
    else if (len === 127) { if (buf.length < 10) break; len = Number(buf.readBigUInt64BE(2)); off = 10; }
    if (masked) off += 4;
    if (buf.length < off + len) break;
    frames.push({ fin, opcode, masked, payload: buf.subarray(off, off + len) });
    buf = buf.subarray(off + len);
  }
  return [frames, buf];
}

/** A raw WebSocket after a successful handshake: frames in, `ended` when the TCP connection ends. */
async function rawWs(p, opts = {}) {
  const key = wsKey();
  const r = await rawHttp(wsRequest(p, { key, headers: authA, ...opts }), { close: false });
  assert.equal(r.status, 101, `handshake on ${p}: ${r.head}\n${r.body}`);
  const sock = r.socket;
  const frames = [];
  const waiters = [];
  let buf = r.rest;
  let endedFlag = false;
  const ended = new Promise((resolve) => sock.once('close', () => { endedFlag = true; resolve(); wake(); }));
  sock.on('error', () => {});
  function wake() { for (const w of waiters.splice(0)) w(); }
  function feed(d) {
    buf = Buffer.concat([buf, d]);
    const [f, rest] = parseFrames(buf);
    buf = rest;
    if (f.length) { frames.push(...f); wake(); }
  }
  sock.on('data', feed);
  if (buf.length) feed(Buffer.alloc(0));
  return {
    sock, frames, ended, get closed() { return endedFlag; },
    send: (b) => sock.write(b),
    /** Next frame (consumed) matching pred within timeout; throws on timeout. */
    async next(pred = () => true, timeout = 5000) {
      const deadline = Date.now() + timeout;
      for (;;) {
        const i = frames.findIndex(pred);
        if (i >= 0) return frames.splice(i, 1)[0];
        if (endedFlag || Date.now() >= deadline) {
          throw new Error(`no matching frame within ${timeout} ms (connection ${endedFlag ? 'ended' : 'open'}); frames: ` +
            JSON.stringify(frames.map((f) => ({ op: f.opcode, p: f.payload.toString('utf8').slice(0, 200) }))));
        }
        await Promise.race([new Promise((res) => waiters.push(res)), H.sleep(Math.max(1, deadline - Date.now()))]);
      }
    },
  };
}
const closeCode = (f) => (f.payload.length >= 2 ? f.payload.readUInt16BE(0) : null);
const textFrame = (obj) => frame(1, typeof obj === 'string' ? obj : JSON.stringify(obj));
const jsonOf = (f) => JSON.parse(f.payload.toString('utf8'));

// ---------------------------------------------------------------------------
// WebSocket through the `ws` package

/** Opens a `ws` client; resolves { ws, inbox: messages (parsed), next(pred), closed: Promise<{code,reason}> }. */
function openWs(p, { headers = authA, protocols = ['mcp'] } = {}) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${gw.plainPort}${p}`, protocols, { headers, perMessageDeflate: false });
    const inbox = [];
    const waiters = [];
    const closed = new Promise((res) => ws.on('close', (code, reason) => { res({ code, reason: reason.toString() }); for (const w of waiters.splice(0)) w(); }));
    ws.on('message', (data, isBinary) => {
      let m;
      try { m = JSON.parse(data.toString('utf8')); } catch { m = { unparsable: data.toString('utf8'), isBinary }; }
      inbox.push(m);
      for (const w of waiters.splice(0)) w();
    });
    ws.on('error', reject);
    ws.on('open', () => {
      ws.removeListener('error', reject);
      ws.on('error', () => {});
      resolve({
        ws, inbox, closed,
        send: (obj) => ws.send(typeof obj === 'string' ? obj : JSON.stringify(obj)),
        async next(pred, timeout = 5000) {
          const deadline = Date.now() + timeout;
          for (;;) {
            const i = inbox.findIndex(pred);
            if (i >= 0) return inbox.splice(i, 1)[0];
            if (ws.readyState === WebSocket.CLOSED || Date.now() >= deadline) {
              throw new Error(`no matching message within ${timeout} ms (readyState ${ws.readyState}); got ${JSON.stringify(inbox).slice(0, 1000)}`);
            }
            await Promise.race([new Promise((res) => waiters.push(res)), H.sleep(Math.max(1, deadline - Date.now()))]);
          }
        },
      });
    });
  });
}

const byId = (id) => (m) => m.id === id && (m.result !== undefined || m.error !== undefined);

async function wsInitialize(c, id = 'init-1') {
  c.send(H.initializeBody(id, '2025-06-18'));
  const r = await c.next(byId(id));
  assert.ok(r.result, `initialize answered: ${JSON.stringify(r)}`);
  c.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  return r;
}

// ---------------------------------------------------------------------------
// SSE over node:http, read as it arrives (the raw text too, for comments)

function parseSseBlock(block) {
  const ev = { event: 'message', data: null, comments: [] };
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (line === '') continue;
    if (line.startsWith(':')) { ev.comments.push(line); continue; }
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? '' : line.slice(i + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') ev.event = value;
    else if (field === 'id') ev.id = value;
    else if (field === 'retry') ev.retry = value;
  }
  if (data.length) ev.data = data.join('\n');
  return ev;
}

/**
 * Opens an HTTP request whose answer is read as an SSE stream.
 * Resolves once the head arrived: { status, headers, events (non-comment blocks, in order), raw,
 * next(pred, timeout), body() (whole text once ended), ended, close(), req, res }.
 */
function openStream(url, { method = 'GET', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request({
      host: u.hostname, port: u.port, path: u.pathname + u.search, method, agent: false,
      headers: { ...(body != null ? { 'content-length': Buffer.byteLength(body) } : {}), ...headers },
    }, (res) => {
      res.setEncoding('utf8');
      const s = {
        status: res.statusCode, headers: res.headers, events: [], raw: '', req, res, consumed: 0,
        endedFlag: false,
      };
      const waiters = [];
      let pending = '';
      const wake = () => { for (const w of waiters.splice(0)) w(); };
      s.ended = new Promise((r) => {
        res.on('end', () => { s.endedFlag = true; r(); wake(); });
        res.on('close', () => { s.endedFlag = true; r(); wake(); });
        res.on('error', () => { s.endedFlag = true; r(); wake(); });
      });
      res.on('data', (d) => {
        s.raw += d;
        pending += d;
        for (;;) {
          const m = /\r?\n\r?\n/.exec(pending);
          if (!m) break;
          const block = pending.slice(0, m.index);
          pending = pending.slice(m.index + m[0].length);
          const ev = parseSseBlock(block);
          if (ev.data !== null || ev.id !== undefined || ev.retry !== undefined) s.events.push(ev);
        }
        wake();
      });
      /** The next event not yet returned by next() (in order), within timeout. */
      s.next = async (timeout = 5000) => {
        const deadline = Date.now() + timeout;
        for (;;) {
          if (s.consumed < s.events.length) return s.events[s.consumed++];
          if (s.endedFlag || Date.now() >= deadline) {
            throw new Error(`no further SSE event within ${timeout} ms (stream ${s.endedFlag ? 'ended' : 'open'}); raw so far: ${JSON.stringify(s.raw.slice(-1500))}`);
          }
          await Promise.race([new Promise((r) => waiters.push(r)), H.sleep(Math.max(1, deadline - Date.now()))]);
        }
      };
      s.close = () => { req.destroy(); res.destroy(); };
      s.body = async () => { await s.ended; return s.raw; };
      resolve(s);
    });
    req.on('error', reject);
    req.end(body);
  });
}

// ---------------------------------------------------------------------------

before(async () => {
  dir = H.makeTempDir(cleanup);
  ev = await H.startEverything({ cleanup });
  const allowShutdown = path.join(dir, 'allow-shutdown.json');
  fs.writeFileSync(allowShutdown, JSON.stringify({ version: '1', default: 'allow', methods: ['shutdown'] }) + '\n');
  // nocmd's program exists when the conf is loaded (a missing one refuses the conf) and is gone
  // once the gateway runs: a command that disappears later.
  fs.writeFileSync(path.join(dir, 'no-such-program'), '#!/bin/sh\nexit 1\n', { mode: 0o755 });
  const conf = H.writeConf(dir, {
    admin: true, // /metrics: how far a call got, instead of guessing with a sleep
    limits: { body_bytes: BODY_BYTES, sse_keepalive_ms: 1000 },
    grants: [
      { name: 'alice', token_sha256: H.sha256hex(A) },
      { name: 'bob', token_sha256: H.sha256hex(B) },
    ],
    upstreams: [
      { name: 'ev', url: ev.url },
      {
        name: 'st', default: true, policy: allowShutdown,
        command: [process.execPath, standinScript, '--stdio', '--noisy', '--log', stLog()],
      },
      { name: 'warm', warm: 1, command: [process.execPath, standinScript, '--stdio', '--log', warmLog()] },
      { name: 'nocmd', command: [path.join(dir, 'no-such-program'), '--stdio'] },
      { name: 'capped', max_children: 2, command: [process.execPath, standinScript, '--stdio', '--log', path.join(dir, 'capped.log')] },
    ],
  });
  gw = await H.startTollgate(conf, { cleanup, admin: true });
  fs.unlinkSync(path.join(dir, 'no-such-program'));
  fetchFn = H.makeFetch({ cleanup });
});

after(() => cleanup.run());

// ---------------------------------------------------------------------------

describe('WebSocket handshake (GET /NAME/ws)', () => {
  test('without subprotocol "mcp": 400 with a JSON-RPC error', async () => {
    for (const protocol of [null, 'foo', 'mcpx', 'mcp2, json']) {
      const r = await rawHttp(wsRequest('/st/ws', { protocol, headers: authA }));
      assert.equal(r.status, 400, `Sec-WebSocket-Protocol ${protocol}: ${r.head}\n${r.body}`);
      assert.equal(JSON.parse(r.body).error?.code, -32600, r.body);
      assert.ok(!/sec-websocket-accept/i.test(r.head), 'no accept key on a refusal');
    }
  });

  test('"foo, mcp": 101 that echoes exactly "mcp" and the right Sec-WebSocket-Accept', async () => {
    const key = wsKey();
    const r = await rawHttp(wsRequest('/st/ws', { key, protocol: 'foo, mcp', headers: authA }));
    assert.equal(r.status, 101, r.head);
    assert.equal(r.headers['sec-websocket-protocol'], 'mcp', r.head);
    assert.equal(r.rawHeaders.filter(([k]) => /^sec-websocket-protocol$/i.test(k)).length, 1, r.head);
    assert.equal(r.headers['sec-websocket-accept'], wsAccept(key), r.head);
    assert.match(r.headers.upgrade ?? '', /^websocket$/i, r.head);
    assert.match(r.headers.connection ?? '', /upgrade/i, r.head);
  });

  test('wrong Sec-WebSocket-Version: 400 naming version 13', async () => {
    for (const version of ['8', '12', null]) {
      const r = await rawHttp(wsRequest('/st/ws', { version, headers: authA }));
      assert.equal(r.status, 400, `version ${version}: ${r.head}`);
      assert.equal(r.headers['sec-websocket-version'], '13', `version ${version}: ${r.head}`);
    }
  });

  test('a bad Sec-WebSocket-Key: 400', async () => {
    for (const key of [null, '', 'short', 'AAAAAAAAAAAAAAAAAAAAAA', randomBytes(15).toString('base64'), randomBytes(17).toString('base64'), '!!!!!!!!!!!!!!!!!!!!!!==']) {
      const r = await rawHttp(wsRequest('/st/ws', { key, headers: authA }));
      assert.equal(r.status, 400, `key ${JSON.stringify(key)}: ${r.head}`);
    }
  });

  test('a method other than GET: 405', async () => {
    for (const method of ['POST', 'PUT', 'DELETE']) {
      const r = await rawHttp(wsRequest('/st/ws', { method, headers: { ...authA, 'Content-Length': '0' } }));
      assert.equal(r.status, 405, `${method}: ${r.head}`);
      assert.match(r.headers.allow ?? '', /GET/, r.head);
    }
  });

  test('a plain GET without Upgrade: 426 Upgrade Required', async () => {
    const r = await rawHttp(wsRequest('/st/ws', { upgrade: false, headers: authA }));
    assert.equal(r.status, 426, r.head);
    assert.match(r.headers.upgrade ?? '', /websocket/i, r.head);
    const f = await fetchFn(`${base()}/st/ws`, { headers: authA });
    assert.equal(f.status, 426);
    await f.text();
  });

  test('auth: missing or wrong token 401; ?access_token= works on /ws only', async () => {
    const none = await rawHttp(wsRequest('/st/ws', {}));
    assert.equal(none.status, 401, none.head);
    assert.match(none.headers['www-authenticate'] ?? '', /^Bearer /, none.head);
    const wrong = await rawHttp(wsRequest('/st/ws', { headers: { Authorization: 'Bearer nope-' + H.randomToken() } }));
    assert.equal(wrong.status, 401, wrong.head);
    const wrongQ = await rawHttp(wsRequest(`/st/ws?access_token=nope-${H.randomToken()}`, {}));
    assert.equal(wrongQ.status, 401, wrongQ.head);

    const key = wsKey();
    const q = await rawHttp(wsRequest(`/st/ws?access_token=${encodeURIComponent(A)}`, { key }), { close: false });
    assert.equal(q.status, 101, q.head);
    assert.equal(q.headers['sec-websocket-accept'], wsAccept(key));
    q.socket.destroy();
    // the default upstream's /ws takes it too
    const d = await rawHttp(wsRequest(`/ws?x=1&access_token=${encodeURIComponent(A)}`, {}));
    assert.equal(d.status, 101, d.head);

    // the convention is refused everywhere else
    const body = JSON.stringify(H.initializeBody(1));
    for (const p of ['/st/mcp', '/mcp', '/ev/mcp']) {
      const r = await H.postRaw(fetchFn, `${base()}${p}?access_token=${encodeURIComponent(A)}`, body);
      assert.equal(r.status, 401, `POST ${p}?access_token=: HTTP ${r.status} ${r.text}`);
    }
    const s = await openStream(`${base()}/st/sse?access_token=${encodeURIComponent(A)}`, { headers: { accept: 'text/event-stream' } });
    s.close();
    assert.equal(s.status, 401, 'GET /st/sse?access_token= is refused');
  });

  test('a foreign Origin: 403', async () => {
    for (const origin of ['http://evil.example', 'null', 'https://127.0.0.1.evil.example']) {
      const r = await rawHttp(wsRequest('/st/ws', { headers: { ...authA, Origin: origin } }));
      assert.equal(r.status, 403, `Origin ${origin}: ${r.head}`);
    }
    const ok = await rawHttp(wsRequest('/st/ws', { headers: { ...authA, Origin: `http://127.0.0.1:${gw.plainPort}` } }));
    assert.equal(ok.status, 101, `loopback Origin: ${ok.head}`);
  });
});

describe('WebSocket frames and session', () => {
  test('text frames: initialize and a tool call are answered, one message per frame', async () => {
    const c = await openWs('/st/ws');
    try {
      const init = await wsInitialize(c);
      assert.equal(init.jsonrpc, '2.0');
      c.send({ jsonrpc: '2.0', id: 'echo-1', method: 'tools/call', params: { name: 'echo', arguments: { text: 'über ws ✓' } } });
      const r = await c.next(byId('echo-1'));
      assert.equal(H.resultText(r.result), 'über ws ✓', JSON.stringify(r));
    } finally { c.ws.terminate(); }
  });

  test('a fragmented text message (continuation frames) is reassembled and answered', async () => {
    const w = await rawWs('/st/ws');
    try {
      const msg = JSON.stringify(H.initializeBody('frag-init', '2025-06-18'));
      const parts = [msg.slice(0, 10), msg.slice(10, 40), msg.slice(40)];
      w.send(frame(1, parts[0], { fin: false }));
      w.send(frame(0, parts[1], { fin: false }));
      w.send(frame(9, 'between')); // a control frame may come between fragments
      w.send(frame(0, parts[2], { fin: true }));
      const pong = await w.next((f) => f.opcode === 10);
      assert.equal(pong.payload.toString(), 'between');
      const f = await w.next((f) => f.opcode === 1);
      assert.ok(f.fin, 'the answer is one frame');
      assert.ok(!f.masked, 'server frames are not masked');
      const m = jsonOf(f);
      assert.equal(m.id, 'frag-init');
      assert.ok(m.result?.serverInfo, f.payload.toString());
    } finally { w.sock.destroy(); }
  });

  test('invalid JSON in a frame: a -32700 error frame, and the connection stays usable', async () => {
    const c = await openWs('/st/ws');
    try {
      await wsInitialize(c);
      c.send('{"jsonrpc":"2.0","id":1,"method":');
      const e = await c.next((m) => m.error);
      assert.equal(e.error.code, -32700, JSON.stringify(e));
      assert.equal(e.id, null);
      c.send('{"jsonrpc":"2.0","id":2,"id":3,"method":"tools/list"}'); // duplicate key: not strict JSON
      const e2 = await c.next((m) => m.error);
      assert.equal(e2.error.code, -32700, JSON.stringify(e2));
      c.send({ jsonrpc: '2.0', id: 'after', method: 'tools/call', params: { name: 'echo', arguments: { text: 'still usable' } } });
      const r = await c.next(byId('after'));
      assert.equal(H.resultText(r.result), 'still usable');
      assert.equal(c.ws.readyState, WebSocket.OPEN);
    } finally { c.ws.terminate(); }
  });

  test('a client ping gets a pong with the same payload; an unsolicited pong is ignored', async () => {
    const c = await openWs('/st/ws');
    try {
      const pong = new Promise((resolve) => c.ws.once('pong', (d) => resolve(d.toString())));
      c.ws.ping(Buffer.from('are-you-there'));
      assert.equal(await Promise.race([pong, H.sleep(10000).then(() => 'timeout')]), 'are-you-there');
      c.ws.pong(Buffer.from('unsolicited'));
      await wsInitialize(c, 'init-after-pong');
      assert.equal(c.ws.readyState, WebSocket.OPEN);
    } finally { c.ws.terminate(); }
  });

  test('a binary frame: close frame with 1003, then the connection ends', async () => {
    const w = await rawWs('/st/ws');
    w.send(frame(2, Buffer.from(JSON.stringify(H.initializeBody(1)))));
    const f = await w.next((f) => f.opcode === 8);
    assert.equal(closeCode(f), 1003, `close payload ${f.payload.toString('hex')}`);
    const t0 = Date.now();
    w.send(frame(8, f.payload.subarray(0, 2))); // complete the close handshake
    await Promise.race([w.ended, H.sleep(10000)]);
    assert.ok(w.closed, 'the gateway ended the TCP connection');
    // RFC 6455 7.1.1: once it has sent and received a Close frame, the server closes the TCP connection
    // (well before the 2 s linger timer that would close it otherwise; margin for a loaded machine)
    assert.ok(Date.now() - t0 < 1500, `the TCP connection ended ${Date.now() - t0} ms after the client's close frame completed the handshake`);
    // and with the ws package
    const c = await openWs('/st/ws');
    c.ws.send(Buffer.from('{"jsonrpc":"2.0","id":1,"method":"ping"}'), { binary: true });
    const cl = await Promise.race([c.closed, H.sleep(10000).then(() => ({ code: 'timeout' }))]);
    assert.equal(cl.code, 1003);
  });

  test(`a message over limits.body_bytes (${BODY_BYTES}): close with 1009, also when fragmented`, async () => {
    const c = await openWs('/st/ws');
    c.ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x'.repeat(BODY_BYTES + 10) } } }));
    const cl = await Promise.race([c.closed, H.sleep(10000).then(() => ({ code: 'timeout' }))]);
    assert.equal(cl.code, 1009);

    const w = await rawWs('/st/ws');
    const half = 'y'.repeat(BODY_BYTES / 2 + 100);
    w.send(frame(1, half, { fin: false }));
    w.send(frame(0, half, { fin: false }));
    const f = await w.next((f) => f.opcode === 8);
    assert.equal(closeCode(f), 1009, `close payload ${f.payload.toString('hex')}`);
    w.sock.destroy();

    // just under the limit is fine
    const ok = await openWs('/st/ws');
    try {
      await wsInitialize(ok);
      const text = 'z'.repeat(BODY_BYTES - 200);
      ok.send({ jsonrpc: '2.0', id: 'big-ok', method: 'tools/call', params: { name: 'echo', arguments: { text } } });
      const r = await ok.next(byId('big-ok'));
      assert.equal(H.resultText(r.result).length, text.length);
    } finally { ok.ws.terminate(); }
  });

  test('the client\'s close frame gets a close frame back and the TCP connection ends', async () => {
    const w = await rawWs('/st/ws');
    w.send(textFrame(H.initializeBody('c1', '2025-06-18')));
    await w.next((f) => f.opcode === 1);
    const payload = Buffer.concat([Buffer.from([0x03, 0xe8]), Buffer.from('bye')]); // 1000 "bye"
    w.send(frame(8, payload));
    const f = await w.next((f) => f.opcode === 8);
    assert.equal(closeCode(f), 1000, `close payload ${f.payload.toString('hex')}`);
    await Promise.race([w.ended, H.sleep(10000)]);
    assert.ok(w.closed, 'the gateway closed the TCP connection after the close handshake');
    // the ws package sees a clean close
    const c = await openWs('/st/ws');
    c.ws.close(1000, 'done');
    const cl = await Promise.race([c.closed, H.sleep(10000).then(() => ({ code: 'timeout' }))]);
    assert.equal(cl.code, 1000);
  });

  test('closing the WebSocket ends the session: its stdio child is reaped', async () => {
    const before = new Set(liveSt().map((c) => c.pid));
    const c = await openWs('/st/ws');
    await wsInitialize(c);
    c.send({ jsonrpc: '2.0', id: 'e', method: 'tools/call', params: { name: 'echo', arguments: { text: 'x' } } });
    await c.next(byId('e'));
    const mine = liveSt().filter((x) => !before.has(x.pid));
    assert.equal(mine.length, 1, `one new stdio child for the session: ${JSON.stringify(childrenOf())}`);
    c.ws.terminate(); // TCP gone, no close frame
    const gone = await H.waitFor(() => procState(mine[0].pid) === null, { timeout: 5000 });
    assert.ok(gone, `child ${mine[0].pid} still there (state ${procState(mine[0].pid)}) 5 s after its WebSocket closed`);
    // A child that just exited is reaped on tollgate's next loop turn: wait for that, not a snapshot.
    await H.waitFor(() => zombies().length === 0, { timeout: 10000 });
    assert.deepEqual(zombies(), [], 'tollgate reaps every child it started');
  });
});

// ---------------------------------------------------------------------------

describe('legacy HTTP+SSE (GET /NAME/sse, POST /NAME/messages)', () => {
  const sseHeaders = { ...authA, accept: 'text/event-stream' };
  const post = (url, body, headers = authA, ct = 'application/json') => fetchFn(url, {
    method: 'POST', headers: { 'content-type': ct, ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body),
  }).then(async (r) => ({ status: r.status, text: await r.text(), headers: r.headers }));

  async function openLegacy(p = '/st/sse', headers = sseHeaders) {
    const s = await openStream(`${base()}${p}`, { headers });
    assert.equal(s.status, 200, `GET ${p}: HTTP ${s.status}`);
    assert.match(s.headers['content-type'] ?? '', /^text\/event-stream/);
    const e = await s.next();
    assert.equal(e.event, 'endpoint', JSON.stringify(e));
    return { s, endpoint: e.data };
  }

  test('the first event is `endpoint` naming /NAME/messages?sessionId=<22 chars>; /sse names /messages', async () => {
    const a = await openLegacy('/st/sse');
    assert.match(a.endpoint, /^\/st\/messages\?sessionId=[A-Za-z0-9_-]{22}$/);
    a.s.close();
    const d = await openLegacy('/sse');
    assert.match(d.endpoint, /^\/messages\?sessionId=[A-Za-z0-9_-]{22}$/);
    d.s.close();
  });

  test('a POST gets 202 and its reply comes as `event: message`; grants, ids and Content-Type are checked', async () => {
    const { s, endpoint } = await openLegacy('/st/sse');
    try {
      const url = `${base()}${endpoint}`;
      const r = await post(url, H.initializeBody('sse-init', '2024-11-05'));
      assert.equal(r.status, 202, r.text);
      const m = await s.next();
      assert.equal(m.event, 'message');
      const init = JSON.parse(m.data);
      assert.equal(init.id, 'sse-init');
      assert.ok(init.result?.serverInfo, m.data);
      assert.equal((await post(url, { jsonrpc: '2.0', method: 'notifications/initialized' })).status, 202);
      assert.equal((await post(url, { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'echo', arguments: { text: 'sse' } } })).status, 202);
      const m2 = await s.next();
      assert.equal(m2.event, 'message');
      assert.equal(H.resultText(JSON.parse(m2.data).result), 'sse');

      const sid = new URL(url).searchParams.get('sessionId');
      const made = sid.startsWith('A') ? 'B' + sid.slice(1) : 'A' + sid.slice(1);
      const unknown = await post(`${base()}/st/messages?sessionId=${made}`, { jsonrpc: '2.0', id: 8, method: 'tools/list' });
      assert.equal(unknown.status, 404, `made-up sessionId: ${unknown.text}`);
      const other = await post(url, { jsonrpc: '2.0', id: 9, method: 'tools/list' }, authB);
      assert.equal(other.status, 404, `bob with alice's sessionId: ${other.text}`);
      const otherUp = await post(`${base()}/ev/messages?sessionId=${sid}`, { jsonrpc: '2.0', id: 10, method: 'tools/list' });
      assert.equal(otherUp.status, 404, `alice's sessionId on another upstream: ${otherUp.text}`);
      const missing = await post(`${base()}/st/messages`, { jsonrpc: '2.0', id: 11, method: 'tools/list' });
      assert.equal(missing.status, 400, `no sessionId: ${missing.text}`);
      const empty = await post(`${base()}/st/messages?sessionId=`, { jsonrpc: '2.0', id: 12, method: 'tools/list' });
      assert.ok([400, 404].includes(empty.status), `empty sessionId: ${empty.status} ${empty.text}`);
      const ct = await post(url, { jsonrpc: '2.0', id: 13, method: 'tools/list' }, authA, 'text/plain');
      assert.equal(ct.status, 415, `Content-Type text/plain: ${ct.text}`);
      const noauth = await post(url, { jsonrpc: '2.0', id: 14, method: 'tools/list' }, {});
      assert.equal(noauth.status, 401, noauth.text);
      // none of those reached the session's stream; it still works
      assert.equal((await post(url, { jsonrpc: '2.0', id: 15, method: 'tools/call', params: { name: 'echo', arguments: { text: 'after' } } })).status, 202);
      const m3 = await s.next();
      assert.deepEqual([JSON.parse(m3.data).id, H.resultText(JSON.parse(m3.data).result)], [15, 'after'],
        `the next message event is the answer to id 15: ${m3.data.slice(0, 300)}`);
    } finally { s.close(); }
  });

  test('invalid JSON in a POST: 400, a -32700 error on the stream, and the session goes on', async () => {
    const { s, endpoint } = await openLegacy('/st/sse');
    try {
      const url = `${base()}${endpoint}`;
      const r = await post(url, '{"jsonrpc":"2.0",');
      assert.equal(r.status, 400, r.text);
      const e = await s.next(2000);
      const m = JSON.parse(e.data);
      assert.equal(e.event, 'message');
      assert.equal(m.error?.code, -32700, e.data);
      assert.equal(m.id, null, e.data);
      assert.equal((await post(url, H.initializeBody('after-bad', '2024-11-05'))).status, 202);
      assert.equal(JSON.parse((await s.next()).data).id, 'after-bad');
    } finally { s.close(); }
  });

  test('after the GET stream closed, POSTs to its sessionId get 404 and the child is reaped', async () => {
    const before = new Set(liveSt().map((c) => c.pid));
    const { s, endpoint } = await openLegacy('/st/sse');
    const url = `${base()}${endpoint}`;
    assert.equal((await post(url, H.initializeBody('i', '2024-11-05'))).status, 202);
    await s.next();
    const mine = liveSt().filter((x) => !before.has(x.pid));
    assert.equal(mine.length, 1, `one stdio child: ${JSON.stringify(childrenOf())}`);
    s.close();
    const r = await H.waitFor(async () => {
      const x = await post(url, { jsonrpc: '2.0', id: 2, method: 'tools/list' });
      return x.status === 404 ? x : null;
    }, { timeout: 10000, interval: 100 });
    assert.ok(r, 'POST after the stream closed: expected 404');
    assert.ok(await H.waitFor(() => procState(mine[0].pid) === null, { timeout: 5000 }),
      `child ${mine[0].pid} still there (state ${procState(mine[0].pid)}) after its SSE stream closed`);
  });
});

// ---------------------------------------------------------------------------

describe('keepalive comments on idle SSE streams (limits.sse_keepalive_ms = 1000)', () => {
  const KA = /^: ?keepalive\r?\n\r?\n/gm;
  /** Resolves the time (Date.now()) the first keepalive comment of stream `s` arrived. */
  const firstKeepalive = (s, timeout) => H.waitFor(() => (s.raw.match(KA) ? Date.now() : null), { timeout, interval: 10 });

  test('legacy SSE and the Streamable HTTP GET stream get them, the first about one interval after the last write', async () => {
    // A keepalive is due sse_keepalive_ms after the last write and the gateway checks once a second,
    // so the first one may come up to 2 s after the stream opened. Open the streams measured just
    // after a keepalive arrived elsewhere (a check just ran), so that the next-but-one check is the due one.
    const a = await openStream(`${base()}/st/sse`, { headers: { ...authA, accept: 'text/event-stream' } });
    const sess = await H.rawInitialize(fetchFn, `${base()}/ev/mcp`, authA);
    try {
      assert.ok(await firstKeepalive(a, 4000), `a keepalive on an idle legacy SSE stream within 4 s: ${JSON.stringify(a.raw)}`);
      const t0 = Date.now();
      const b = await openStream(`${base()}/st/sse`, { headers: { ...authA, accept: 'text/event-stream' } });
      const g = await openStream(`${base()}/ev/mcp`, { headers: { ...sess.headers, accept: 'text/event-stream' } });
      try {
        assert.equal(b.status, 200);
        assert.equal(g.status, 200, g.raw);
        const [tb, tg] = await Promise.all([firstKeepalive(b, 4000), firstKeepalive(g, 4000)]);
        assert.ok(tb && tg, `keepalives within 4 s: legacy ${JSON.stringify(b.raw)}; GET ${JSON.stringify(g.raw)}`);
        const late = [['legacy SSE', tb - t0], ['GET stream', tg - t0]].filter(([, ms]) => ms > 2500);
        assert.deepEqual(late, [], 'first keepalive later than 2.5 s after the stream opened (due at 2 s at the latest); ' +
          'is a write made from a timer callback held until the next loop wakeup?');
        // another keepalive on the first stream (one is due every second)
        await H.waitUntil(() => (a.raw.match(KA) ?? []).length >= 2,
          { timeout: 5000, what: 'a second keepalive on the first stream', detail: () => JSON.stringify(a.raw) });
      } finally { b.close(); g.close(); }
    } finally { a.close(); }
  });
});

// ---------------------------------------------------------------------------

describe('Streamable HTTP resumability (server-everything, 2025-11-25)', () => {
  let sess; // { sessionId, headers }
  const mcp = () => `${base()}/ev/mcp`;

  before(async () => {
    const r = await H.postRaw(fetchFn, mcp(), H.initializeBody(1, '2025-11-25'), authA);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.messages[0]?.result?.protocolVersion, '2025-11-25', r.text);
    const sid = r.headers.get('mcp-session-id');
    sess = { sessionId: sid, headers: { ...authA, 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' } };
    const n = await H.postRaw(fetchFn, mcp(), { jsonrpc: '2.0', method: 'notifications/initialized' }, sess.headers);
    assert.equal(n.status, 202, n.text);
  });

  const longCall = (id, duration, steps) => JSON.stringify({
    jsonrpc: '2.0', id, method: 'tools/call',
    params: { name: 'trigger-long-running-operation', arguments: { duration, steps }, _meta: { progressToken: `pt-${id}` } },
  });
  const postStream = (body) => openStream(mcp(), { method: 'POST', headers: { ...H.MCP_HEADERS, ...sess.headers }, body });
  const resume = (lastId, extra = {}) => openStream(mcp(), {
    headers: { ...sess.headers, accept: 'text/event-stream', 'last-event-id': lastId, ...extra },
  });
  const ID_RE = /^([0-9a-fA-F]+)-(\d+)$/;

  async function dropAfterTwo(id, duration, steps) {
    const s = await postStream(longCall(id, duration, steps));
    assert.equal(s.status, 200);
    assert.match(s.headers['content-type'] ?? '', /^text\/event-stream/);
    const prime = await s.next();
    const got = [await s.next(), await s.next()];
    s.close();
    return { prime, got };
  }

  test('event ids are STREAM-SEQ; the first event primes (id, retry, empty data); a dropped stream resumes with Last-Event-ID', async () => {
    const { prime, got } = await dropAfterTwo('long-1', 3, 6);
    assert.match(prime.id ?? '', ID_RE, `priming event: ${JSON.stringify(prime)}`);
    assert.ok(prime.data === null || prime.data === '', `priming event has empty data: ${JSON.stringify(prime)}`);
    assert.match(prime.retry ?? '', /^\d+$/, `priming event carries retry: ${JSON.stringify(prime)}`);
    const stream = ID_RE.exec(prime.id)[1];
    let seq = Number(ID_RE.exec(prime.id)[2]);
    for (const e of got) {
      const m = ID_RE.exec(e.id ?? '');
      assert.ok(m, `event id ${e.id}`);
      assert.equal(m[1], stream, 'one stream id for the whole answer');
      assert.ok(Number(m[2]) > seq, `sequence increases: ${e.id} after seq ${seq}`);
      seq = Number(m[2]);
      assert.equal(JSON.parse(e.data).method, 'notifications/progress', e.data);
    }
    const progressSeen = got.map((e) => JSON.parse(e.data).params.progress);
    assert.deepEqual(progressSeen, [1, 2]);

    const r = await resume(got[1].id);
    assert.equal(r.status, 200, `resume: HTTP ${r.status} ${r.raw}`);
    assert.match(r.headers['content-type'] ?? '', /^text\/event-stream/);
    const body = await Promise.race([r.body(), H.sleep(8000).then(() => { r.close(); return null; })]);
    assert.ok(body !== null, `the resumed stream ended after the result; so far: ${r.raw}`);
    const evs = r.events.filter((e) => e.data);
    const msgs = evs.map((e) => JSON.parse(e.data));
    const progress = msgs.filter((m) => m.method === 'notifications/progress').map((m) => m.params.progress);
    assert.deepEqual(progress, [3, 4, 5, 6], `remaining progress, none repeated: ${body}`);
    const results = msgs.filter((m) => m.id === 'long-1');
    assert.equal(results.length, 1, body);
    assert.match(H.resultText(results[0].result), /Long running operation completed/);
    assert.equal(msgs.at(-1).id, 'long-1', 'the result comes last');
    for (const e of evs) {
      const m = ID_RE.exec(e.id ?? '');
      assert.ok(m && m[1] === stream && Number(m[2]) > seq, `event id ${e.id} continues stream ${stream} after seq ${seq}`);
      seq = Number(m[2]);
    }
  });

  test('resuming after the call already ended replays the rest from the buffer', async () => {
    const done = await metric('tollgate_upstream_latency_seconds_count');
    const { got } = await dropAfterTwo('long-2', 1, 4);
    // the call ends while no client is attached: its upstream request completes (and is timed)
    await gw.waitForMetric('tollgate_upstream_latency_seconds_count', (v) => v > done, { what: 'the dropped call to end upstream' });
    const r = await resume(got[1].id);
    assert.equal(r.status, 200, r.raw);
    const body = await Promise.race([r.body(), H.sleep(5000).then(() => { r.close(); return null; })]);
    assert.ok(body !== null, `the replay ends: ${r.raw}`);
    const msgs = r.events.filter((e) => e.data).map((e) => JSON.parse(e.data));
    assert.deepEqual(msgs.filter((m) => m.method === 'notifications/progress').map((m) => m.params.progress), [3, 4], body);
    assert.equal(msgs.filter((m) => m.id === 'long-2').length, 1, body);
    // a second resume of the same point gives the same rest again (it is a replay buffer)
    const again = await resume(got[1].id);
    assert.equal(again.status, 200);
    await Promise.race([again.body(), H.sleep(10000)]);
    again.close();
    assert.equal(again.events.filter((e) => e.data).length, msgs.length, again.raw);
  });

  test('an unknown Last-Event-ID: 404; a malformed one: 400; another session\'s stream: 404', async () => {
    for (const id of ['ffffffffffff-1', '0-0', '123abc-99999']) {
      const r = await resume(id);
      await r.body();
      assert.equal(r.status, 404, `Last-Event-ID ${id}: HTTP ${r.status} ${r.raw}`);
    }
    for (const id of ['zzz', '12', '-5', 'abc-1x', 'g1-1', '1-2-3', 'x'.repeat(200)]) {
      const r = await resume(id);
      await r.body();
      assert.equal(r.status, 400, `Last-Event-ID ${JSON.stringify(id)}: HTTP ${r.status} ${r.raw}`);
    }
    // a stream of this session, asked for from a second session of the same grant
    const { got } = await dropAfterTwo('long-3', 1, 4);
    const other = await H.rawInitialize(fetchFn, mcp(), authA);
    const r = await openStream(mcp(), { headers: { ...other.headers, accept: 'text/event-stream', 'last-event-id': got[1].id } });
    await r.body();
    assert.equal(r.status, 404, `another session's stream: HTTP ${r.status} ${r.raw}`);
  });

  test('Last-Event-ID that is not exactly HEX-DIGITS (empty part, sign, space, 0x): 400', async () => {
    // strtoull() takes leading blanks, a sign and "0x", and an empty digit string ends at once
    const bad = [];
    // (a leading blank is HTTP's optional whitespace, not part of the value: not tried)
    for (const id of ['abc-', '-1', '+1-1', '0x1-1', '1-+2', '1- 2', '1--2']) {
      const r = await resume(id);
      await r.body();
      if (r.status !== 400) bad.push(`${JSON.stringify(id)} -> ${r.status}`);
    }
    assert.deepEqual(bad, [], 'malformed Last-Event-ID values not refused with 400');
  });

});

// ---------------------------------------------------------------------------

describe('stdio upstreams', () => {
  const mcp = (name = 'st') => `${base()}/${name}/mcp`;

  async function initSt(name = 'st') {
    const s = await H.rawInitialize(fetchFn, mcp(name), authA);
    assert.ok(s.sessionId);
    return s;
  }
  const call = (s, id, name, args, upstream = 'st') => H.postRaw(fetchFn, mcp(upstream),
    { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } }, s.headers);
  const del = (s, upstream = 'st') => fetchFn(mcp(upstream), { method: 'DELETE', headers: s.headers }).then(async (r) => ({ status: r.status, text: await r.text() }));
  const deleted = async (s, upstream) => {
    const r = await del(s, upstream);
    assert.ok(r.status === 200 || r.status === 204, `DELETE: HTTP ${r.status} ${r.text}`);
  };

  test('`max_children = 2`: a third session of another grant gets no child while the two are fresh (-32004, counted), and one is started again once a session ends', async () => {
    const a = await initSt('capped');
    const b = await initSt('capped');
    const ok = await call(a, 1, 'echo', { text: 'a' }, 'capped');
    assert.equal(H.resultText(ok.messages[0]?.result), 'a', ok.text);
    const hits = (await gw.metrics())['tollgate_limit_hits_total{limit="max_children"}'] ?? 0;
    // The third initialize needs a child: alice's two sessions were used less than
    // limits.stdio_evict_idle_ms (60 s) ago, so bob gets -32004, and no session is made. (Alice
    // would take her own longest-idle session's child: stdio.test.mjs.)
    const third = await H.postRaw(fetchFn, mcp('capped'), H.initializeBody(1), authB);
    assert.match(third.text, /-32004/, third.text);
    assert.equal(third.headers.get('mcp-session-id'), null, 'no session without a child');
    await gw.waitForLog(/max_children reached.*upstream=capped/);
    assert.equal((await gw.metrics())['tollgate_limit_hits_total{limit="max_children"}'], hits + 1);
    await deleted(a, 'capped');
    await H.waitUntil(async () => {
      const d = await H.rawInitialize(fetchFn, mcp('capped'), authA).catch(() => null);
      if (!d?.sessionId) return false;
      const rr = await call(d, 3, 'echo', { text: 'd' }, 'capped');
      await deleted(d, 'capped');
      return H.resultText(rr.messages[0]?.result) === 'd';
    }, { what: 'a child for a new session once one ended' });
    await deleted(b, 'capped');
  });

  test('`warm = 1`: a child exists before any session', async () => {
    const warm = childrenOf().filter((c) => c.args.includes(warmLog()) && !c.stat.startsWith('Z'));
    assert.equal(warm.length, 1, `children: ${JSON.stringify(childrenOf())}`);
    // a session takes the warm child; another is started for the next one
    const s = await initSt('warm');
    const r = await call(s, 1, 'echo', { text: 'warm' }, 'warm');
    assert.equal(H.resultText(r.messages[0]?.result), 'warm', r.text);
    const pids = H.waitFor(() => {
      const w = childrenOf().filter((c) => c.args.includes(warmLog()) && !c.stat.startsWith('Z'));
      return w.length === 2 ? w : null;
    }, { timeout: 3000 });
    assert.ok(await pids, `the used warm child and a fresh one: ${JSON.stringify(childrenOf())}`);
    assert.ok((await pids).some((c) => c.pid === warm[0].pid), 'the session runs on the warm child');
    await deleted(s, 'warm');
  });

  test('noisy stdout lines are skipped and logged; stderr lines are logged; calls still work', async () => {
    const from = gw.stderr().length; // this session's child's lines, not an earlier one's
    const s = await initSt();
    const r = await call(s, 'noisy-1', 'echo', { text: 'through the noise' });
    assert.equal(H.resultText(r.messages[0]?.result), 'through the noise', r.text);
    // the child chatters on stdout every 250 ms and warns on stderr at its start
    await gw.waitForLog(/not JSON-RPC; skipped.*upstream=st/, { from, what: 'noisy stdout lines logged as skipped' });
    await gw.waitForLog(/not JSON-RPC; skipped.*(Health check|No jobs due|Tool catalog)/, { from, what: 'the skipped line shown in the log' });
    await gw.waitForLog(/upstream stderr.*upstream=st.*token expires in 3 days/, { from, what: "the child's stderr line in the log" });
    const r2 = await call(s, 'noisy-2', 'echo', { text: 'again' });
    assert.equal(H.resultText(r2.messages[0]?.result), 'again');
    await deleted(s);
  });

  test('a crashed child: the pending call gets -32004, the session is gone, the next initialize gets a new child', async () => {
    const before = new Set(liveSt().map((c) => c.pid));
    const s = await initSt();
    const mine = liveSt().filter((x) => !before.has(x.pid));
    assert.equal(mine.length, 1, `one new child: ${JSON.stringify(childrenOf())}`);
    const pid = mine[0].pid;
    const held = await metric('tollgate_rpc_requests_total');
    const t0 = Date.now();
    const pending = call(s, 'slow-1', 'slow', { seconds: 20 });
    await callHeld(held); // pending in the gateway before the child dies
    process.kill(pid, 'SIGKILL');
    const r = await Promise.race([pending, H.sleep(5000).then(() => null)]);
    assert.ok(r, 'the pending call was answered within 5 s of the crash (not a hang)');
    assert.ok(Date.now() - t0 < 5000);
    const m = r.messages.find((x) => x.id === 'slow-1');
    assert.equal(m?.error?.code, -32004, `HTTP ${r.status} ${r.text}`);
    assert.equal(m.error.data?.upstream, 'st', r.text);
    const after = await H.postRaw(fetchFn, mcp(), { jsonrpc: '2.0', id: 2, method: 'tools/list' }, s.headers);
    assert.equal(after.status, 404, `the session after its child died: HTTP ${after.status} ${after.text}`);
    assert.ok(await H.waitFor(() => procState(pid) === null, { timeout: 3000 }), `the dead child ${pid} is reaped (state ${procState(pid)})`);
    const s2 = await initSt();
    const fresh = liveSt().filter((x) => !before.has(x.pid));
    assert.equal(fresh.length, 1, JSON.stringify(childrenOf()));
    assert.notEqual(fresh[0].pid, pid, 'a new child');
    assert.equal(H.resultText((await call(s2, 3, 'echo', { text: 'new child' })).messages[0]?.result), 'new child');
    await deleted(s2);
  });

  test('a child that exits by itself (`shutdown`, allowed by policy) ends the session', async () => {
    const before = new Set(liveSt().map((c) => c.pid));
    const s = await initSt();
    const pid = liveSt().find((x) => !before.has(x.pid))?.pid;
    assert.ok(pid);
    const r = await H.postRaw(fetchFn, mcp(), { jsonrpc: '2.0', id: 'sd', method: 'shutdown' }, s.headers);
    assert.deepEqual(r.messages[0]?.result, {}, `shutdown reached the stand-in: ${r.text}`);
    assert.ok(await H.waitFor(() => procState(pid) === null, { timeout: 3000 }), `child ${pid} exited and was reaped`);
    const after = await H.postRaw(fetchFn, mcp(), { jsonrpc: '2.0', id: 2, method: 'tools/list' }, s.headers);
    assert.equal(after.status, 404, `HTTP ${after.status} ${after.text}`);
  });

  test('DELETE of the session kills its child; no zombies', async () => {
    const before = new Set(liveSt().map((c) => c.pid));
    const s = await initSt();
    const pid = liveSt().find((x) => !before.has(x.pid))?.pid;
    assert.ok(pid, JSON.stringify(childrenOf()));
    const held = await metric('tollgate_rpc_requests_total');
    const pending = call(s, 'slow-del', 'slow', { seconds: 20 }).catch((e) => ({ error: e }));
    await callHeld(held); // the call is pending when the DELETE comes
    await deleted(s);
    assert.ok(await H.waitFor(() => procState(pid) === null, { timeout: 4000 }),
      `child ${pid} still there (state ${procState(pid)}) 4 s after DELETE (stdin closed, SIGTERM, SIGKILL after 2 s)`);
    const r = await Promise.race([pending, H.sleep(10000).then(() => null)]);
    assert.ok(r, 'the call pending at DELETE was ended');
    // A child that just exited is reaped on tollgate's next loop turn: wait for that, not a snapshot.
    await H.waitFor(() => zombies().length === 0, { timeout: 10000 });
    assert.deepEqual(zombies(), [], 'tollgate reaps every child it started');
  });

  test('a `command` removed after start: initialize gets -32004 and tollgate keeps serving', async () => {
    const r = await H.postRaw(fetchFn, mcp('nocmd'), H.initializeBody(1), authA);
    const m = r.messages[0];
    assert.equal(m?.error?.code, -32004, `HTTP ${r.status} ${r.text}`);
    assert.equal(m.error.data?.upstream, 'nocmd', r.text);
    assert.equal(gw.exit, null, 'tollgate is running');
    const s = await initSt();
    assert.equal(H.resultText((await call(s, 1, 'echo', { text: 'ok' })).messages[0]?.result), 'ok');
    await deleted(s);
    // A child that just exited is reaped on tollgate's next loop turn: wait for that, not a snapshot.
    await H.waitFor(() => zombies().length === 0, { timeout: 10000 });
    assert.deepEqual(zombies(), [], 'tollgate reaps every child it started');
  });

  test('after SIGTERM to tollgate no child remains, and none is a zombie', async () => {
    // a second gateway, signalled alone (not its process group), with a warm child and two sessions
    const d = H.makeTempDir(cleanup, 'tollgate-transports-term-');
    const logF = path.join(d, `${TAG}-term.log`);
    const conf = H.writeConf(d, {
      grants: [{ name: 'local', anonymous: true }],
      upstreams: [{ name: 'st', warm: 1, command: [process.execPath, standinScript, '--stdio', '--noisy', '--log', logF] }],
    });
    const gw2 = await H.startTollgate(conf, { cleanup });
    const url = `http://127.0.0.1:${gw2.plainPort}/st/mcp`;
    const s1 = await H.rawInitialize(fetchFn, url);
    await H.rawInitialize(fetchFn, url);
    const ws2 = await new Promise((resolve, reject) => {
      const w = new WebSocket(`ws://127.0.0.1:${gw2.plainPort}/st/ws`, ['mcp']);
      w.on('open', () => resolve(w));
      w.on('error', reject);
    });
    ws2.on('error', () => {});
    ws2.send(JSON.stringify(H.initializeBody(1)));
    const pending = H.postRaw(fetchFn, url, { jsonrpc: '2.0', id: 's', method: 'tools/call', params: { name: 'slow', arguments: { seconds: 30 } } }, s1.headers).catch((e) => e);
    const kids = await H.waitFor(() => {
      const k = childrenOf(gw2.proc.pid).filter((c) => c.args.includes(logF));
      return k.length >= 4 ? k : null;
    }, { timeout: 4000 });
    assert.ok(kids, `2 sessions + 1 WebSocket + 1 warm = 4 children: ${JSON.stringify(childrenOf(gw2.proc.pid))}`);
    gw2.stopping = true;
    const exited = new Promise((resolve) => gw2.proc.once('exit', (code, signal) => resolve({ code, signal })));
    process.kill(gw2.proc.pid, 'SIGTERM');
    const ex = await Promise.race([exited, H.sleep(8000).then(() => null)]);
    assert.ok(ex, 'tollgate exited within 8 s of SIGTERM');
    assert.equal(ex.code, 0, `exit ${JSON.stringify(ex)}`);
    await pending;
    ws2.terminate();
    const left = kids.map((k) => ({ pid: k.pid, state: procState(k.pid) })).filter((k) => k.state !== null);
    assert.deepEqual(left, [], 'children still present after tollgate exited (Z = not reaped by tollgate)');
    gw2.assertNoSanitizerReport();
  });
});

// ---------------------------------------------------------------------------

describe('backpressure', () => {
  // A gateway of its own whose ASan quarantine is 1 MiB: by default ASan keeps up to 256 MiB of
  // freed blocks mapped, and RSS would show that instead of what tollgate holds.
  let bgw;
  let bfetch;
  const burl = () => `http://127.0.0.1:${bgw.plainPort}/st/mcp`;
  const rss = () => vmRssKiB(bgw.proc.pid);
  const echo = (sess, i) => H.postRaw(bfetch, burl(),
    { jsonrpc: '2.0', id: `o${i}`, method: 'tools/call', params: { name: 'echo', arguments: { text: `o${i}` } } }, sess.headers);
  const bigCall = (id, mib) => JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'big', arguments: { mib } } });

  before(async () => {
    const d = H.makeTempDir(cleanup, 'tollgate-transports-bp-');
    const conf = H.writeConf(d, {
      grants: [{ name: 'alice', token_sha256: H.sha256hex(A) }],
      upstreams: [{ name: 'st', command: [process.execPath, standinScript, '--stdio'] }],
    });
    bgw = await H.startTollgate(conf, {
      cleanup, env: { ASAN_OPTIONS: 'detect_leaks=1:abort_on_error=0:quarantine_size_mb=1' },
    });
    bfetch = H.makeFetch({ cleanup });
  });

  /** POSTs on a raw socket that is not read until read() is called. */
  function stalledPost(headers, body) {
    const sock = net.connect(bgw.plainPort, '127.0.0.1');
    sock.pause();
    sock.on('error', () => {});
    const h = { ...H.MCP_HEADERS, ...headers, host: `127.0.0.1:${bgw.plainPort}`, 'content-length': Buffer.byteLength(body) };
    sock.write(`POST /st/mcp HTTP/1.1\r\n${Object.entries(h).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n${body}`);
    return {
      sock,
      /** Resumes reading; resolves { status, contentType, body } once the whole Content-Length body is in. */
      read(timeout = 60000) {
        return new Promise((resolve, reject) => {
          const chunks = [];
          let got = 0;
          let need = null;
          let head = null;
          const t = setTimeout(() => { sock.destroy(); reject(new Error(`incomplete answer after ${timeout} ms: ${got} bytes, head ${head}`)); }, timeout);
          sock.on('data', (d) => {
            chunks.push(d);
            got += d.length;
            if (need === null) {
              const all = Buffer.concat(chunks);
              const i = all.indexOf('\r\n\r\n');
              if (i < 0) return;
              head = all.subarray(0, i).toString('latin1');
              const cl = /\r\ncontent-length: *(\d+)/i.exec(head);
              if (!cl) { clearTimeout(t); sock.destroy(); reject(new Error(`answer without Content-Length: ${head}`)); return; }
              need = i + 4 + Number(cl[1]);
            }
            if (got >= need) {
              clearTimeout(t);
              sock.destroy();
              const all = Buffer.concat(chunks);
              const i = all.indexOf('\r\n\r\n');
              resolve({ status: Number(head.split(' ')[1]), head, body: all.subarray(i + 4, need).toString('utf8') });
            }
          });
          sock.on('close', () => { if (need === null || got < need) { clearTimeout(t); reject(new Error(`connection closed after ${got} bytes: ${head}`)); } });
          sock.resume();
        });
      },
    };
  }

  /** Calls echo on `sess` every `every` ms for `ms`; returns the latencies (ms). */
  async function keepCalling(sess, ms, every = 100) {
    const lat = [];
    const end = Date.now() + ms;
    for (let i = 0; Date.now() < end; i++) {
      const t = Date.now();
      const r = await echo(sess, i);
      lat.push(Date.now() - t);
      assert.equal(H.resultText(r.messages[0]?.result), `o${i}`, r.text);
      await H.sleep(every); // pacing (a call every `every` ms), not a wait for anything
    }
    return lat;
  }

  test('10 answers of 8 MiB to Streamable HTTP readers that stopped: the child is paused, memory stays bounded, another session is served, all arrives whole', async () => {
    // 8 MiB per connection: more than the kernel's socket buffers take (tcp_wmem max 4 MiB)
    const N = 10;
    const MIB = 8;
    const slow = await H.rawInitialize(bfetch, burl(), authA);
    const other = await H.rawInitialize(bfetch, burl(), authA);
    await echo(slow, 0);
    const rss0 = rss();
    const posts = Array.from({ length: N }, (_, i) => stalledPost(slow.headers, bigCall(`big-${i}`, MIB)));
    let answers = [];
    try {
      const lat = await keepCalling(other, 3000);
      const grown = (rss() - rss0) / 1024;
      process.stderr.write(`# backpressure: Streamable HTTP, ${N} x ${MIB} MiB unread: RSS +${grown.toFixed(1)} MiB; other session: ${lat.length} calls, max ${Math.max(...lat)} ms\n`);
      assert.ok(Math.max(...lat) < 1000, `the other session's calls while the readers stall: ${lat.join(',')} ms`);
      assert.ok(grown < 24, `tollgate's RSS grew by ${grown.toFixed(1)} MiB while ${N * MIB} MiB of answers waited for readers that stopped (limits.output_high_water 1 MiB)`);
    } finally {
      answers = await Promise.all(posts.map((p) => p.read()));
    }
    for (const [i, a] of answers.entries()) {
      assert.equal(a.status, 200, a.head);
      const m = JSON.parse(a.body);
      assert.equal(m.id, `big-${i}`);
      assert.equal(H.resultText(m.result).length, MIB * 1048576, `answer ${i} whole`);
    }
  });

  test('40 answers of 1 MiB on a WebSocket that stopped reading: memory stays bounded, all arrive in full', async () => {
    const N = 40;
    const other = await H.rawInitialize(bfetch, burl(), authA);
    const ws = new WebSocket(`ws://127.0.0.1:${bgw.plainPort}/st/ws`, ['mcp'], { headers: authA, perMessageDeflate: false, maxPayload: 0 });
    await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
    ws.on('error', () => {});
    const got = new Map();
    ws.on('message', (d) => { const m = JSON.parse(d.toString('utf8')); got.set(m.id, m); });
    try {
      ws.send(JSON.stringify(H.initializeBody('i', '2025-06-18')));
      assert.ok(await H.waitFor(() => got.has('i'), { timeout: 5000 }), 'initialize answered');
      ws.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
      const rss0 = rss();
      ws._socket.pause(); // stop reading; the gateway's writes back up
      for (let i = 0; i < N; i++) ws.send(bigCall(`w${i}`, 1));
      try {
        const lat = await keepCalling(other, 3000);
        const grown = (rss() - rss0) / 1024;
        process.stderr.write(`# backpressure: WebSocket, ${N} x 1 MiB unread: RSS +${grown.toFixed(1)} MiB; other session max ${Math.max(...lat)} ms\n`);
        assert.ok(Math.max(...lat) < 1000, `the other session's calls: ${lat.join(',')} ms`);
        assert.ok(grown < 12, `tollgate's RSS grew by ${grown.toFixed(1)} MiB while ${N} MiB of answers waited for a WebSocket client that stopped reading (limits.output_high_water 1 MiB)`);
      } finally { ws._socket.resume(); }
      assert.ok(await H.waitFor(() => got.size === N + 1, { timeout: 60000 }), `all ${N} answers arrived: ${got.size - 1}`);
      for (let i = 0; i < N; i++) assert.equal(H.resultText(got.get(`w${i}`)?.result).length, 1048576, `answer w${i}`);
    } finally { ws.terminate(); }
  });

  test('40 answers of 1 MiB on a legacy SSE stream that stopped reading: memory stays bounded, all arrive in full', async () => {
    const N = 40;
    const other = await H.rawInitialize(bfetch, burl(), authA);
    const s = await openStream(`http://127.0.0.1:${bgw.plainPort}/st/sse`, { headers: { ...authA, accept: 'text/event-stream' } });
    try {
      const ep = (await s.next()).data;
      const post = (b) => bfetch(`http://127.0.0.1:${bgw.plainPort}${ep}`, {
        method: 'POST', headers: { ...authA, 'content-type': 'application/json' }, body: typeof b === 'string' ? b : JSON.stringify(b),
      }).then(async (r) => { await r.text(); return r.status; });
      assert.equal(await post(H.initializeBody('i', '2024-11-05')), 202);
      assert.equal(JSON.parse((await s.next()).data).id, 'i');
      assert.equal(await post({ jsonrpc: '2.0', method: 'notifications/initialized' }), 202);
      const rss0 = rss();
      s.res.pause();
      try {
        for (let i = 0; i < N; i++) assert.equal(await post(bigCall(`s${i}`, 1)), 202);
        const lat = await keepCalling(other, 3000);
        const grown = (rss() - rss0) / 1024;
        process.stderr.write(`# backpressure: legacy SSE, ${N} x 1 MiB unread: RSS +${grown.toFixed(1)} MiB; other session max ${Math.max(...lat)} ms\n`);
        assert.ok(Math.max(...lat) < 1000, `the other session's calls: ${lat.join(',')} ms`);
        assert.ok(grown < 12, `tollgate's RSS grew by ${grown.toFixed(1)} MiB while ${N} MiB of answers waited for an SSE client that stopped reading (limits.output_high_water 1 MiB)`);
      } finally { s.res.resume(); }
      const done = await H.waitFor(() => s.events.filter((e) => e.event === 'message').length >= N + 1, { timeout: 60000 });
      assert.ok(done, `all ${N} answers arrived: ${s.events.length}`);
      const msgs = s.events.filter((e) => e.event === 'message').map((e) => JSON.parse(e.data)).filter((m) => String(m.id).startsWith('s'));
      assert.deepEqual(msgs.map((m) => m.id).sort(), Array.from({ length: N }, (_, i) => `s${i}`).sort());
      for (const m of msgs) assert.equal(H.resultText(m.result).length, 1048576, `answer ${m.id}`);
    } finally { s.close(); }
  });

  // The other session's worst call is measured and reported, not bounded: today the whole 50 MiB
  // line is parsed on the loop in one go, which stalls every session for a while (over 2 s on a
  // busy machine under ASan; a later hardening issue parses it incrementally). What is asserted
  // is what must hold whatever the machine's load: every call of the other session succeeds, the
  // stalled reader gets every byte right, and memory is bounded and given back.
  test('one 50 MiB answer to a reader that stopped: another session is served, it arrives whole, memory is given back', async (t) => {
    const MIB = 50;
    const slow = await H.rawInitialize(bfetch, burl(), authA);
    const other = await H.rawInitialize(bfetch, burl(), authA);
    const rss0 = rss();
    const p = stalledPost(slow.headers, bigCall('huge', MIB));
    const lat = await keepCalling(other, 3000); // asserts each answer
    const held = (rss() - rss0) / 1024;
    const a = await p.read();
    assert.equal(a.status, 200, a.head);
    const text = H.resultText(JSON.parse(a.body).result);
    assert.equal(text.length, MIB * 1048576, 'the whole answer arrived');
    const unit = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/\n'; // what the stand-in's `big` repeats
    const want = unit.repeat(Math.ceil(text.length / unit.length)).slice(0, text.length);
    if (text !== want) {
      let i = 0;
      while (text[i] === want[i]) i++;
      assert.fail(`the answer's bytes differ from the stand-in's at offset ${i}: ${JSON.stringify(text.slice(i, i + 40))}`);
    }
    // memory is given back once the answer is delivered (polled: the allocator returns it when it does)
    let afterAnswer;
    await H.waitFor(() => { afterAnswer = (rss() - rss0) / 1024; return afterAnswer < 12; }, { timeout: 5000, interval: 100 });
    const kids = () => childrenOf(bgw.proc.pid).filter((c) => !c.stat.startsWith('Z')).length;
    const before = kids();
    const d = await bfetch(burl(), { method: 'DELETE', headers: slow.headers });
    await d.text();
    await H.waitFor(() => kids() < before, { timeout: 5000, interval: 50 }); // the session's child is gone
    const afterDelete = (rss() - rss0) / 1024;
    const stall = Math.max(...lat);
    const report = `one ${MIB} MiB answer unread: RSS +${held.toFixed(1)} MiB while held, ` +
      `+${afterAnswer.toFixed(1)} MiB once delivered, +${afterDelete.toFixed(1)} MiB after DELETE; ` +
      `other session: ${lat.length} calls, worst ${stall} ms (the stall of parsing the line on the loop)`;
    t.diagnostic(report);
    process.stderr.write(`# backpressure: ${report}\n`);
    // A single message is held whole (limits.response_bytes bounds it); more than twice its size is not bounded.
    assert.ok(held < 2.5 * MIB, `RSS +${held.toFixed(1)} MiB while one ${MIB} MiB answer waited`);
    assert.ok(lat.length >= 2, `the other session was served during the 3 s, not only after: ${lat.join(',')} ms`);
    assert.ok(afterAnswer < 12, `RSS still +${afterAnswer.toFixed(1)} MiB 5 s after the ${MIB} MiB answer was delivered (the session keeps its largest line buffer?); +${afterDelete.toFixed(1)} MiB after DELETE`);
  });
});

describe('SIGTERM while a client has stopped reading', () => {
  /** A gateway of its own, a client of `kind` that stopped reading with answers waiting, then SIGTERM to tollgate alone. */
  async function stalledTerm(kind) {
    const d = H.makeTempDir(cleanup, 'tollgate-transports-stall-');
    const conf = H.writeConf(d, {
      admin: true,
      grants: [{ name: 'local', anonymous: true }],
      upstreams: [{ name: 'st', command: [process.execPath, standinScript, '--stdio'] }],
    });
    const g = await H.startTollgate(conf, { cleanup, admin: true });
    const origin = `http://127.0.0.1:${g.plainPort}`;
    let resume;
    let drop;
    if (kind === 'WebSocket') {
      const ws = new WebSocket(`ws://127.0.0.1:${g.plainPort}/st/ws`, ['mcp'], { perMessageDeflate: false });
      await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
      ws.on('error', () => {});
      const got = [];
      ws.on('message', (m) => got.push(m));
      ws.send(JSON.stringify(H.initializeBody(1)));
      assert.ok(await H.waitFor(() => got.length === 1, { timeout: 5000 }));
      ws.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
      ws._socket.pause();
      for (let i = 0; i < 10; i++) ws.send(JSON.stringify({ jsonrpc: '2.0', id: 10 + i, method: 'tools/call', params: { name: 'big', arguments: { mib: 2 } } }));
      resume = () => ws._socket.resume();
      drop = () => ws.terminate();
    } else {
      const s = await openStream(`${origin}/st/sse`, { headers: { accept: 'text/event-stream' } });
      const ep = (await s.next()).data;
      const post = (b) => fetchFn(`${origin}${ep}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) }).then((r) => r.text());
      await post(H.initializeBody(1, '2024-11-05'));
      await s.next();
      await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
      s.res.pause();
      for (let i = 0; i < 10; i++) await post({ jsonrpc: '2.0', id: 10 + i, method: 'tools/call', params: { name: 'big', arguments: { mib: 2 } } });
      resume = () => s.res.resume();
      drop = () => s.close();
    }
    // the answers back up: the gateway pauses the child at limits.output_high_water
    await g.waitForMetric('tollgate_limit_hits_total{limit="output_high_water"}', (v) => v > 0,
      { what: 'the answers to back up to the high-water mark' });
    g.stopping = true;
    const exited = new Promise((resolve) => g.proc.once('exit', (code, signal) => resolve({ code, signal })));
    const t0 = Date.now();
    process.kill(g.proc.pid, 'SIGTERM');
    const ex = await Promise.race([exited, H.sleep(5000).then(() => null)]);
    const took = Date.now() - t0;
    let after = '';
    if (!ex) {
      resume(); // let it finish, so that the rest of the file is not disturbed
      const ex2 = await Promise.race([exited, H.sleep(5000).then(() => null)]);
      after = ex2 ? `; it exited (${JSON.stringify(ex2)}) once the client read again` : '; still running after the client read again';
    }
    drop();
    assert.ok(ex, `tollgate had not exited ${took} ms after SIGTERM (limits.drain_timeout_ms = 1000) while a ${kind} client had stopped reading${after}; ` +
      `log: ${g.stderr().split('\n').filter((l) => /draining|stopped|closing/.test(l)).join(' | ')}`);
    assert.equal(ex.code, 0);
  }

  test('a WebSocket client that stopped reading does not keep tollgate from exiting', () => stalledTerm('WebSocket'));
  test('a legacy SSE client that stopped reading does not keep tollgate from exiting', () => stalledTerm('legacy SSE'));
});
