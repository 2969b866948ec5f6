// The bypass suite ("No way around it", issue 3 item 9): tricks that try to get a forbidden
// call past tollgate, sent as raw bytes through every client transport the gateway has, with
// the CoWork OS stand-in's request log as the proof that nothing forbidden arrived.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/bypass.test.mjs
//
// Layout: TRICKS (a table) x TRANSPORTS (a list of sender objects: Streamable HTTP, WebSocket
// and legacy HTTP+SSE, each with the same interface: open / send / control). Tricks that only
// make sense on one transport (HTTP framing, headers, URL paths) name it in `only`.
//
// Forbidden at the stand-in (alice's policy below): tools/call of run_command, delete_file,
// write_file or shutdown (the tool), execute_code with a language other than the string
// "python", and the non-standard method shutdown. After every trick the stand-in log must show
// none of these (checked on the parsed message of every request record, whatever its id or
// framing), the gateway must still serve a control echo, and the stand-in must have seen nothing
// that is not a well-formed POST /mcp (a sign of request smuggling into the upstream pool).
// Allowed control calls (echo, execute_code python) do arrive, so the log check can fail.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import zlib from 'node:zlib';
import * as H from './lib/harness.mjs';

H.requireNodeModules();

const ALICE = 'alice-' + H.randomToken(); // the restricted grant every trick is sent as
const ROOT = 'root-' + H.randomToken(); // a second grant whose policy allows everything
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const JSON_DEPTH = 64;
const FORBIDDEN_TOOLS = new Set(['run_command', 'delete_file', 'write_file', 'shutdown']);

const POLICY = {
  version: '1',
  default: 'deny',
  hide: ['delete_file'],
  tools: {
    echo: {},
    slow: {},
    execute_code: {
      rules: [{ name: 'python only', conditions: [{ path: 'args.language', op: 'eq', value: 'python' }], on_deny: 'only python' }],
    },
    run_command: { rules: [{ name: 'no shell', action: 'deny', on_deny: 'no shell' }] },
  },
};

const cleanup = new H.Cleanup();
let dir;
let gw;
let standin;
let rootSession; // a live session of grant root: a session id alice must not be able to use
const results = []; // { transport, trick, group, outcome, ok, note }

const logs = () => ({
  'tollgate process': gw?.status(),
  'tollgate stderr': gw?.stderr(),
  'stand-in log': standin && fs.existsSync(standin.logFile) ? fs.readFileSync(standin.logFile, 'utf8').slice(-6000) : undefined,
});

// ---------------------------------------------------------------------------
// The stand-in's log: what reached the upstream

const requestRecords = () => standin.records().filter((r) => r.event === undefined);
const allRecords = () => standin.records();

/** Why one message (a parsed JSON value the stand-in received) is forbidden, or null. */
function forbiddenWhy(msg) {
  if (Array.isArray(msg)) {
    for (const m of msg) { const w = forbiddenWhy(m); if (w) return `batch element: ${w}`; }
    return null;
  }
  if (!msg || typeof msg !== 'object') return null;
  const method = msg.method;
  if (typeof method === 'string' && method.trim().toLowerCase() === 'shutdown') return `method ${JSON.stringify(method)}`;
  if (method !== 'tools/call') return null;
  const name = msg.params?.name;
  if (typeof name === 'string' && FORBIDDEN_TOOLS.has(name)) return `tools/call ${name}${'id' in msg ? '' : ' (no id: a notification)'}`;
  if (name === 'execute_code') {
    const lang = msg.params?.arguments?.language;
    if (lang !== 'python') return `tools/call execute_code with language ${JSON.stringify(lang)}`;
  }
  return null;
}

/**
 * Everything wrong in stand-in log lines: forbidden calls, and anything that is not a well-formed
 * authorised POST /mcp with a JSON body (unparseable HTTP, odd paths, non-JSON bodies: signs that
 * client bytes went up raw).
 */
function logViolations(records) {
  const out = [];
  for (const r of records) {
    if (r.event === 'client_error') { out.push(`stand-in got unparseable HTTP: ${r.code} ${r.message}`); continue; }
    if (r.event !== undefined) continue;
    if (r.unparsable) { out.push(`unparsable log line ${r.unparsable.slice(0, 200)}`); continue; }
    const where = `stand-in request #${r.seq} ${r.http?.method} ${r.http?.path} body=${String(r.body).slice(0, 300)}`;
    const w = forbiddenWhy(r.msg);
    if (w) out.push(`FORBIDDEN ${w}: ${where}`);
    if (r.http && (r.http.method !== 'POST' || r.http.path !== '/mcp')) out.push(`unexpected request line: ${where}`);
    if (r.msg === null || typeof r.msg !== 'object') out.push(`non-JSON-object body: ${where}`);
    if (r.http && r.status === 401) out.push(`request without the gateway's credential: ${where}`);
  }
  return out;
}

// Proves the checker can fail: synthetic records that must be flagged.
function selfTestChecker() {
  const bad = [
    { seq: 1, http: { method: 'POST', path: '/mcp' }, msg: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'run_command', arguments: {} } } },
    { seq: 2, http: { method: 'POST', path: '/mcp' }, msg: { jsonrpc: '2.0', method: 'tools/call', params: { name: 'delete_file' } } },
    { seq: 3, http: { method: 'POST', path: '/mcp' }, msg: { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'execute_code', arguments: { language: ['python'] } } } },
    { seq: 4, http: { method: 'POST', path: '/mcp' }, msg: { jsonrpc: '2.0', id: 4, method: 'shutdown' } },
    { seq: 5, http: { method: 'POST', path: '/mcp' }, msg: [{ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'write_file' } }] },
    { seq: 6, http: { method: 'POST', path: '/mcp/x' }, msg: { jsonrpc: '2.0', id: 6, method: 'tools/list' } },
    { event: 'client_error', code: 'HPE_INVALID_METHOD', message: 'x' },
  ];
  for (const r of bad) assert.equal(logViolations([r]).length, 1, `the log checker flags ${JSON.stringify(r)}`);
  const good = [
    { seq: 7, http: { method: 'POST', path: '/mcp' }, status: 200, msg: { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x' } } } },
    { seq: 8, http: { method: 'POST', path: '/mcp' }, status: 200, msg: { jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'execute_code', arguments: { language: 'python', code: '1' } } } },
  ];
  assert.deepEqual(logViolations(good), [], 'the log checker passes allowed calls');
}

// ---------------------------------------------------------------------------
// Raw HTTP/1.1 on a socket

function parseOneResponse(buf) {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const head = buf.subarray(0, end).toString('latin1').split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(head[0]);
  if (!m) return { garbage: head[0], used: buf.length };
  const status = Number(m[1]);
  const headers = {};
  for (const line of head.slice(1)) {
    const i = line.indexOf(':');
    if (i > 0) {
      const k = line.slice(0, i).trim().toLowerCase();
      headers[k] = k in headers ? `${headers[k]}, ${line.slice(i + 1).trim()}` : line.slice(i + 1).trim();
    }
  }
  let rest = buf.subarray(end + 4);
  const base = end + 4;
  if (status === 204 || status === 304 || status < 200) return { status, headers, body: '', used: base };
  if (headers['content-length'] !== undefined) {
    const n = Number(headers['content-length']);
    if (rest.length < n) return null;
    return { status, headers, body: rest.subarray(0, n).toString('utf8'), used: base + n };
  }
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
    const chunks = [];
    let off = 0;
    for (;;) {
      const nl = rest.indexOf('\r\n', off);
      if (nl < 0) return null;
      const size = parseInt(rest.subarray(off, nl).toString('latin1'), 16);
      if (Number.isNaN(size)) return { status, headers, body: Buffer.concat(chunks).toString('utf8'), used: buf.length };
      if (rest.length < nl + 2 + size + 2) return null;
      if (size === 0) {
        const endt = rest.indexOf('\r\n', nl + 2);
        return { status, headers, body: Buffer.concat(chunks).toString('utf8'), used: base + (endt < 0 ? nl + 2 : endt + 2) };
      }
      chunks.push(rest.subarray(nl + 2, nl + 2 + size));
      off = nl + 2 + size + 2;
    }
  }
  return null; // until close
}

/**
 * Writes `bytes` on a fresh connection and collects up to `want` responses (or until the peer
 * closes or `timeout`). Returns { responses: [{status, headers, body}], closed, raw }.
 */
function rawHttp(port, bytes, { want = 1, timeout = 4000 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    const responses = [];
    let done = false;
    const finish = (extra = {}) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      // whatever is left, when the server closed: a body delimited by close
      if (buf.length && extra.closed) {
        const end = buf.indexOf('\r\n\r\n');
        const m = /^HTTP\/1\.[01] (\d{3})/.exec(buf.toString('latin1'));
        if (m && end >= 0) responses.push({ status: Number(m[1]), headers: {}, body: buf.subarray(end + 4).toString('utf8'), byClose: true });
      }
      resolve({ responses, ...extra, leftover: buf.toString('latin1').slice(0, 500) });
    };
    const timer = setTimeout(() => finish({ timedOut: true }), timeout);
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const r = parseOneResponse(buf);
        if (!r) break;
        if (r.garbage !== undefined) { responses.push({ garbage: r.garbage }); buf = Buffer.alloc(0); break; }
        responses.push({ status: r.status, headers: r.headers, body: r.body });
        buf = buf.subarray(r.used);
      }
      if (responses.length >= want) finish({});
    });
    sock.on('error', (e) => finish({ socketError: e.code }));
    sock.on('end', () => finish({ closed: true }));
    sock.on('connect', () => sock.write(bytes, () => {}));
  });
}

/** JSON-RPC messages in an HTTP response body (JSON or SSE). */
function messagesOf(r) {
  const ct = r.headers?.['content-type'] ?? '';
  if (!r.body) return [];
  if (/text\/event-stream/.test(ct)) {
    return H.parseSse(r.body).map((e) => { try { return JSON.parse(e.data); } catch { return { unparsable: e.data }; } });
  }
  try { const j = JSON.parse(r.body); return Array.isArray(j) ? j : [j]; } catch { return [{ unparsable: r.body.slice(0, 200) }]; }
}

// ---------------------------------------------------------------------------
// Transports. Each one: name; open(token) -> ctx (a live MCP session of that grant);
// send(ctx, bytes, {headers}) -> Reply; ctx.http (only for HTTP-based transports) gives
// raw-socket access for tricks that play with framing.
//
// Reply = { summary: 'HTTP 400 -32700' | 'rpc -32001' | '202 (no reply)' | 'RESULT' | ...,
//           refused: bool, success: bool, messages: [...] }

function classifyHttp(r) {
  if (!r) return { summary: 'no response', refused: true, success: false, messages: [] };
  if (r.garbage !== undefined) return { summary: `garbage ${JSON.stringify(r.garbage).slice(0, 60)}`, refused: true, success: false, messages: [] };
  const messages = messagesOf(r);
  const success = messages.some((m) => m && typeof m === 'object' && 'result' in m);
  const errs = messages.filter((m) => m && m.error).map((m) => m.error.code);
  let summary = `HTTP ${r.status}`;
  if (errs.length) summary += ` ${errs.join(',')}`;
  if (r.status === 202) summary = '202 (no reply)';
  if (success) summary = `HTTP ${r.status} RESULT`;
  const refused = !success && (r.status >= 400 || errs.length > 0);
  return { summary, refused, success, messages, status: r.status, jsonRpcError: errs.length > 0 };
}

const streamableHttp = {
  name: 'streamable-http',
  fetch: null,
  url(p = '/cowork-os/mcp') { return `http://127.0.0.1:${gw.plainPort}${p}`; },
  async open(token = ALICE, protocolVersion) {
    const f = this.fetch ??= H.makeFetch({ cleanup, keepAlive: true });
    const auth = { authorization: `Bearer ${token}` };
    let s;
    if (protocolVersion) {
      const r = await H.postRaw(f, this.url(), H.initializeBody(1, protocolVersion), auth);
      if (r.status !== 200) throw new Error(`initialize ${protocolVersion}: ${r.status} ${r.text}`);
      const h = { ...auth, 'mcp-protocol-version': r.messages[0].result.protocolVersion, 'mcp-session-id': r.headers.get('mcp-session-id') };
      s = { sessionId: h['mcp-session-id'], protocolVersion: h['mcp-protocol-version'], headers: h };
    } else {
      s = await H.rawInitialize(f, this.url(), auth);
    }
    return { ...s, token, transport: this };
  },
  /** The whole head of a POST on this session (CRLF-terminated header lines, no blank line). */
  head(ctx, { path = '/cowork-os/mcp', version = '1.1', extra = '', contentType = 'application/json', session = true } = {}) {
    return `POST ${path} HTTP/${version}\r\nHost: 127.0.0.1:${gw.plainPort}\r\n` +
      `Authorization: Bearer ${ctx.token}\r\n` +
      (contentType === null ? '' : `Content-Type: ${contentType}\r\n`) +
      'Accept: application/json, text/event-stream\r\n' +
      (session ? `Mcp-Session-Id: ${ctx.sessionId}\r\nMCP-Protocol-Version: ${ctx.protocolVersion}\r\n` : '') +
      extra;
  },
  async send(ctx, bytes, opts = {}) {
    const b = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes, 'utf8');
    const r = await rawHttp(gw.plainPort, Buffer.concat([
      Buffer.from(this.head(ctx, opts) + `Content-Length: ${b.length}\r\nConnection: close\r\n\r\n`, 'latin1'), b]));
    return classifyHttp(r.responses[0]);
  },
  async raw(bytes, opts) {
    return rawHttp(gw.plainPort, bytes, opts);
  },
};

// --- Message transports (WebSocket, legacy HTTP+SSE): one session, replies matched to sends.
// A send waits for the responses its bytes ask for (the ids of the requests in it, parsed with
// JSON.parse), or an error with id null (what a message that cannot be decoded gets); a message
// with no request in it waits a short window for an error, else it is '(no reply)'. When a
// trick reuses an id that is in flight, an error goes to the newest send with that id and a
// result to the oldest (so an id reuse refused at once is told apart from the call that runs).
// A connection or stream the gateway closed is reopened (a new session) at the next send.

const { default: WsClient } = await import('ws');
const NO_REPLY_WINDOW_MS = 600;
const REPLY_TIMEOUT_MS = 6000;

/** What `bytes` asks for: { ids: [JSON text of each request id], batch } or { ids: [] }. */
function expectedReplies(bytes) {
  let v;
  try { v = JSON.parse(Buffer.isBuffer(bytes) ? bytes.toString('utf8') : bytes); } catch { return { ids: [] }; }
  const reqId = (m) => (m && typeof m === 'object' && !Array.isArray(m) && 'method' in m && 'id' in m ? [JSON.stringify(m.id)] : []);
  if (Array.isArray(v)) return { ids: v.flatMap(reqId), batch: true };
  return { ids: reqId(v) };
}

/** Inbox of one session: incoming messages dealt to waiting sends. */
function makeInbox() {
  const box = { waiters: [], stray: [], closed: null };
  box.deliver = (msg) => {
    const items = Array.isArray(msg) ? msg : [msg];
    if (Array.isArray(msg)) {
      const w = box.waiters.find((x) => x.batch && !x.done) ?? box.waiters.find((x) => !x.done);
      if (w) { w.got.push(...items); w.arrayReply = true; w.check(); return; }
    }
    for (const m of items) {
      if (!m || typeof m !== 'object' || !('result' in m || 'error' in m)) { box.stray.push(m); continue; } // server notifications/requests
      const key = JSON.stringify(m.id);
      let cands = box.waiters.filter((x) => !x.done && x.pending.has(key));
      if (!cands.length && (m.id === null || m.id === undefined)) cands = box.waiters.filter((x) => !x.done);
      if (!cands.length) { box.stray.push(m); continue; }
      const w = 'error' in m ? cands[cands.length - 1] : cands[0];
      w.pending.delete(key);
      w.got.push(m);
      w.check();
    }
  };
  box.onClose = (info) => {
    box.closed = info;
    for (const w of box.waiters) if (!w.done) w.finish();
  };
  /** Registers a waiter before the bytes go out; resolves { got, closed, timedOut }. */
  box.wait = (exp) => {
    const w = { pending: new Set(exp.ids), batch: exp.batch, got: [], done: false };
    const p = new Promise((resolve) => {
      const limit = exp.ids.length ? REPLY_TIMEOUT_MS : NO_REPLY_WINDOW_MS;
      let quiet;
      w.finish = (timedOut = false) => {
        if (w.done) return;
        w.done = true;
        clearTimeout(w.timer);
        clearTimeout(quiet);
        box.waiters.splice(box.waiters.indexOf(w), 1);
        resolve({ got: w.got, closed: box.closed, timedOut });
      };
      w.check = () => {
        // done when every request got its response, when an array (batch reply) or an id-null error
        // arrived, or when a send with nothing to wait for got its first error
        const nullErr = w.got.some((m) => m?.error && (m.id === null || m.id === undefined));
        if (w.pending.size === 0 || w.arrayReply || nullErr) {
          clearTimeout(quiet);
          // a batch reply or an id-null error may have company: a 150 ms negative window for stragglers
          quiet = setTimeout(() => w.finish(), exp.batch || nullErr ? 150 : 0);
        }
      };
      w.timer = setTimeout(() => w.finish(w.pending.size > 0), limit);
    });
    box.waiters.push(w);
    if (box.closed) w.finish();
    return p;
  };
  return box;
}

function classifyMessages({ got, closed, timedOut }, extra = {}) {
  const messages = got;
  const success = messages.some((m) => m && typeof m === 'object' && 'result' in m);
  const errs = messages.filter((m) => m && m.error).map((m) => m.error.code);
  let summary = success ? 'RESULT' : errs.length ? `rpc ${errs.join(',')}` : '(no reply)';
  if (closed) summary += ` + closed ${closed.code ?? ''}${closed.reason ? ` "${closed.reason}"` : ''}`;
  if (timedOut) summary += ' (timed out waiting)';
  if (extra.prefix) summary = `${extra.prefix} ${summary}`;
  const refused = !success && (errs.length > 0 || !!closed || (extra.status >= 400));
  return { summary, refused, success, messages, status: extra.status, jsonRpcError: errs.length > 0 };
}

const websocket = {
  name: 'websocket',
  url(p = '/cowork-os/ws') { return `ws://127.0.0.1:${gw.plainPort}${p}`; },
  async connect(ctx) {
    const ws = new WsClient(this.url(), 'mcp', { headers: { authorization: `Bearer ${ctx.token}` }, maxPayload: 64 << 20 });
    const box = makeInbox();
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('unexpected-response', (req, res) => reject(new Error(`WebSocket handshake: HTTP ${res.statusCode}`)));
      ws.once('error', reject);
    });
    ws.on('error', () => { /* reported through close */ });
    ws.on('message', (d, binary) => {
      let m;
      try { m = JSON.parse(String(d)); } catch { m = { unparsable: String(d).slice(0, 200), binary }; }
      box.deliver(m);
    });
    ws.on('close', (code, reason) => box.onClose({ code, reason: String(reason) }));
    ctx.ws = ws;
    ctx.box = box;
    const init = box.wait({ ids: ['"init"'] });
    ws.send(JSON.stringify(H.initializeBody('init', ctx.protocolVersion ?? H.PROTOCOL_VERSION)));
    const r = await init;
    const res = r.got[0]?.result;
    if (!res) throw new Error(`WebSocket initialize: ${JSON.stringify(r)}`);
    ctx.protocolVersion = res.protocolVersion;
    ws.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    cleanup.add(() => ws.terminate());
  },
  async open(token = ALICE, protocolVersion) {
    const ctx = { token, protocolVersion, transport: this, reopened: 0 };
    await this.connect(ctx);
    return ctx;
  },
  async send(ctx, bytes) {
    let note;
    if (ctx.box.closed) {
      note = `reopened after close ${ctx.box.closed.code}`;
      ctx.reopened++;
      await this.connect(ctx);
    }
    const b = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes, 'utf8');
    const p = ctx.box.wait(expectedReplies(b));
    ctx.ws.send(b, { binary: false }); // a text frame, whatever the bytes (invalid UTF-8 included)
    const r = classifyMessages(await p);
    if (note) r.note = note;
    return r;
  },
};

const legacySse = {
  name: 'legacy-sse',
  fetch: null,
  base() { return `http://127.0.0.1:${gw.plainPort}`; },
  async connect(ctx) {
    const f = this.fetch ??= H.makeFetch({ cleanup, keepAlive: true });
    const auth = { authorization: `Bearer ${ctx.token}` };
    const ac = new AbortController();
    const res = await f(`${this.base()}/cowork-os/sse`, { headers: { ...auth, accept: 'text/event-stream' }, signal: ac.signal });
    if (res.status !== 200) throw new Error(`GET /cowork-os/sse: HTTP ${res.status} ${await res.text()}`);
    const box = makeInbox();
    let endpoint;
    let gotEndpoint;
    const endpointP = new Promise((resolve) => { gotEndpoint = resolve; });
    (async () => {
      const dec = new TextDecoder();
      let buf = '';
      try {
        for await (const chunk of res.body) {
          buf += dec.decode(chunk, { stream: true });
          let m;
          while ((m = /\r?\n\r?\n/.exec(buf))) {
            const ev = H.parseSse(buf.slice(0, m.index + m[0].length))[0];
            buf = buf.slice(m.index + m[0].length);
            if (!ev) continue;
            if (ev.event === 'endpoint') { endpoint = new URL(ev.data, this.base()).href; gotEndpoint(); continue; }
            let msg;
            try { msg = JSON.parse(ev.data); } catch { msg = { unparsable: ev.data.slice(0, 200) }; }
            box.deliver(msg);
          }
        }
      } catch { /* aborted */ }
      box.onClose({ code: 'stream ended' });
      gotEndpoint();
    })();
    await endpointP;
    if (!endpoint) throw new Error('legacy SSE: no endpoint event');
    ctx.abort = ac;
    ctx.box = box;
    ctx.endpoint = endpoint;
    ctx.auth = auth;
    cleanup.add(() => ac.abort());
    const r = await this.post(ctx, Buffer.from(JSON.stringify(H.initializeBody('init', ctx.protocolVersion ?? H.PROTOCOL_VERSION))));
    const res2 = r.messages[0]?.result;
    if (!res2) throw new Error(`legacy SSE initialize: ${r.summary} ${JSON.stringify(r.messages)}`);
    ctx.protocolVersion = res2.protocolVersion;
    await this.post(ctx, Buffer.from(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' })));
  },
  async post(ctx, b) {
    const p = ctx.box.wait(expectedReplies(b));
    const res = await this.fetch(ctx.endpoint, { method: 'POST', headers: { ...ctx.auth, 'content-type': 'application/json' }, body: b });
    const text = await res.text();
    if (res.status !== 202) {
      // refused at the HTTP level: the answer is in the body (and nothing is on the stream)
      let body = [];
      try { const j = JSON.parse(text); body = Array.isArray(j) ? j : [j]; } catch { /* not JSON */ }
      const late = await Promise.race([p, H.quietFor(150).then(() => null)]); // negative window: nothing should follow on the stream
      return classifyMessages({ got: [...body, ...(late?.got ?? [])], closed: null, timedOut: false }, { status: res.status, prefix: `HTTP ${res.status}` });
    }
    return classifyMessages(await p, { prefix: '202 +' });
  },
  async open(token = ALICE, protocolVersion) {
    const ctx = { token, protocolVersion, transport: this, reopened: 0 };
    await this.connect(ctx);
    return ctx;
  },
  async send(ctx, bytes) {
    let note;
    if (ctx.box.closed) {
      note = 'reopened after the stream ended';
      ctx.reopened++;
      await this.connect(ctx);
    }
    const r = await this.post(ctx, Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes, 'utf8'));
    if (note) r.note = note;
    return r;
  },
};

const TRANSPORTS = [streamableHttp, websocket, legacySse];

// ---------------------------------------------------------------------------
// Message builders

const call = (name, args, id = 1, extra = {}) => JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args }, ...extra });
const RUN = { command: 'rm -rf /' };
const SHELL = { language: 'shell', code: 'rm -rf /' };
const PY = { language: 'python', code: 'print(1)' };
const bytes = (...parts) => Buffer.concat(parts.map((p) => (Buffer.isBuffer(p) ? p : Buffer.from(p, 'utf8'))));
const B = (...b) => Buffer.from(b);

/**
 * A batch reply: refused as a whole (4xx), or answered element by element where only the
 * allowed echo (text "batch-ok") may carry a result; every other element must be an error.
 */
function judgeBatch(r) {
  if (!r.success) return r;
  const parts = [];
  let bad = false;
  for (const m of r.messages) {
    if (m && 'result' in m) {
      const okEcho = m.result?.content?.[0]?.text === 'batch-ok' || /^slept \d/.test(m.result?.content?.[0]?.text ?? '');
      parts.push(`${JSON.stringify(m.id)}:${okEcho ? 'allowed-result' : 'RESULT'}`);
      if (!okEcho) bad = true;
    } else {
      parts.push(`${JSON.stringify(m?.id)}:${m?.error?.code ?? '?'}`);
    }
  }
  return { summary: `HTTP ${r.status} per element [${parts.join(' ')}]`, refused: !bad, success: bad, messages: r.messages, status: r.status, jsonRpcError: true };
}

// ---------------------------------------------------------------------------
// The tricks. `body`: raw message bytes (or fn(ctx) -> bytes) sent through each transport.
// `run(tx, ctx)`: a custom trick returning a Reply (or { replies: [...] }). `expect`:
//   'refuse'  (default) the reply is a refusal: an HTTP 4xx and/or a JSON-RPC error, no result;
//   'noexec'  no success result (a 202 is fine: notifications and responses get no answer);
//   'harmless' the gateway may forward it, because what it decided on and forwards is an
//             allowed call; the stand-in log is the proof that nothing forbidden went with it.
// `only`: transports the trick applies to.

const TRICKS = [
  // --- tool names
  { group: 'name', name: 'unicode escape run\\u005fcommand', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run\\u005fcommand","arguments":{"command":"id"}}}' },
  { group: 'name', name: 'fully escaped name \\u0072\\u0075\\u006e...', body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"${[...'delete_file'].map((c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0')).join('')}","arguments":{"path":"x"}}}` },
  { group: 'name', name: 'trailing space "run_command "', body: call('run_command ', RUN) },
  { group: 'name', name: 'leading space / tab', body: call('\trun_command', RUN) },
  { group: 'name', name: 'different case "Run_Command"', body: call('Run_Command', RUN) },
  { group: 'name', name: 'upper case "DELETE_FILE"', body: call('DELETE_FILE', { path: 'x' }) },
  { group: 'name', name: 'NUL inside "run_command\\u0000"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command\\u0000","arguments":{"command":"id"}}}' },
  { group: 'name', name: 'NUL splice "echo\\u0000run_command"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo\\u0000run_command","arguments":{"text":"x"}}}' },
  { group: 'name', name: 'homoglyph (Cyrillic о) "run_cоmmand"', body: call('run_c\u043emmand', RUN) },
  { group: 'name', name: 'fullwidth low line "run＿command"', body: call('run\uff3fcommand', RUN) },
  { group: 'name', name: 'zero-width space "run\\u200b_command"', body: call('run\u200b_command', RUN) },
  { group: 'name', name: 'invalid UTF-8 byte in the name', body: bytes('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command', B(0xff), '","arguments":{"command":"id"}}}') },
  { group: 'name', name: 'overlong UTF-8 "_" (C1 9F)', body: bytes('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run', B(0xc1, 0x9f), 'command","arguments":{"command":"id"}}}') },
  { group: 'name', name: 'overlong 3-byte "_" (E0 81 9F)', body: bytes('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run', B(0xe0, 0x81, 0x9f), 'command","arguments":{"command":"id"}}}') },
  { group: 'name', name: 'lone surrogate "\\ud800" in the name', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command\\ud800","arguments":{"command":"id"}}}' },
  { group: 'name', name: 'UTF-8-encoded surrogate (ED A0 80) in the name', body: bytes('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command', B(0xed, 0xa0, 0x80), '","arguments":{"command":"id"}}}') },
  { group: 'name', name: 'name as array ["run_command"]', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["run_command"],"arguments":{"command":"id"}}}' },
  { group: 'name', name: 'tool named "shutdown"', body: call('shutdown', {}) },
  { group: 'name', name: 'hidden tool delete_file, plain', body: call('delete_file', { path: '/etc/passwd' }) },
  { group: 'name', name: 'write_file (not listed, default deny)', body: call('write_file', { path: 'x', content: 'y' }) },

  // --- duplicate members
  { group: 'dup', name: 'duplicate "name" (allowed first)', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"run_command","arguments":{"command":"id","text":"x"}}}' },
  { group: 'dup', name: 'duplicate "name" (forbidden first)', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","name":"echo","arguments":{"command":"id","text":"x"}}}' },
  { group: 'dup', name: 'duplicate "name" spelled "n\\u0061me"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","n\\u0061me":"run_command","arguments":{"command":"id","text":"x"}}}' },
  { group: 'dup', name: 'duplicate "arguments"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"python","code":"1"},"arguments":{"language":"shell","code":"rm -rf /"}}}' },
  { group: 'dup', name: 'duplicate "language"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"python","code":"1","language":"shell"}}}' },
  { group: 'dup', name: 'duplicate "language" spelled "l\\u0061nguage"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"python","code":"1","l\\u0061nguage":"shell"}}}' },
  { group: 'dup', name: 'duplicate "method"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'dup', name: 'duplicate "method" spelled "m\\u0065thod"', body: '{"jsonrpc":"2.0","id":1,"method":"ping","m\\u0065thod":"shutdown"}' },
  { group: 'dup', name: 'duplicate "params"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}},"params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'dup', name: 'duplicate "id"', body: '{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'dup', name: 'key with NUL "name\\u0000" beside "name"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name\\u0000":"run_command","name":"echo","arguments":{"command":"id","text":"x"}}}' },
  { group: 'dup', name: 'duplicate "jsonrpc"', body: '{"jsonrpc":"2.0","jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"delete_file","arguments":{"path":"x"}}}' },

  // --- params shape
  { group: 'params', name: 'params as array ["run_command", {...}]', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["run_command",{"command":"id"}]}' },
  { group: 'params', name: 'params nested {"params":{"params":{...}}}', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"params":{"name":"run_command","arguments":{"command":"id"}}}}' },
  { group: 'params', name: 'arguments as array', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":["shell","rm -rf /"]}}' },
  { group: 'params', name: 'arguments null', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":null}}' },
  { group: 'params', name: 'name missing, _meta.name = run_command', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"name":"run_command"},"arguments":{"command":"id"}}}' },
  { group: 'params', name: '_meta.arguments says python, arguments say shell', body: call('execute_code', SHELL, 1, {}).replace('"arguments"', '"_meta":{"arguments":{"language":"python"}},"arguments"') },
  {
    group: 'params', name: '_meta carries run_command beside an allowed echo', expect: 'harmless',
    body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"meta"},"_meta":{"name":"run_command","arguments":{"command":"id"},"progressToken":"t"}}}',
    check: (reply) => assert.ok(reply.success, `echo with _meta: ${reply.summary}`),
  },
  {
    // A case-insensitive upstream decoder (Go encoding/json: last match wins) would see
    // run_command/delete_file: the gateway refuses keys that differ only in case.
    group: 'params', name: 'case-variant keys "NAME"/"Name" beside "name" (Go-style case-insensitive decoders)',
    body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","Name":"run_command","NAME":"delete_file","arguments":{"text":"case"}}}',
  },
  {
    group: 'lang', name: 'case-variant "Language":"shell" beside "language":"python"',
    body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"python","code":"1","Language":"shell","LANGUAGE":"shell"}}}',
  },
  { group: 'params', name: 'extra top-level member "tool":"run_command"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","tool":"run_command","params":{"name":"echo","arguments":{"text":"x"}}}' },
  { group: 'params', name: 'extra top-level "result" beside method', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id"}},"result":{}}' },

  // --- language (execute_code condition)
  { group: 'lang', name: 'language "javascript" (plain)', body: call('execute_code', { language: 'javascript', code: 'x' }) },
  { group: 'lang', name: 'language ["python"]', body: call('execute_code', { language: ['python'], code: 'x' }) },
  { group: 'lang', name: 'language {"value":"python"}', body: call('execute_code', { language: { value: 'python' }, code: 'x' }) },
  { group: 'lang', name: 'language "Python"', body: call('execute_code', { language: 'Python', code: 'x' }) },
  { group: 'lang', name: 'language "python " (trailing space)', body: call('execute_code', { language: 'python ', code: 'x' }) },
  { group: 'lang', name: 'language "python\\u0000shell"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"python\\u0000shell","code":"x"}}}' },
  { group: 'lang', name: 'language missing', body: call('execute_code', { code: 'x' }) },
  { group: 'lang', name: 'language null', body: call('execute_code', { language: null, code: 'x' }) },
  { group: 'lang', name: 'language true', body: call('execute_code', { language: true, code: 'x' }) },

  // --- numbers and depth
  { group: 'json', name: 'NaN in arguments', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"shell","code":"x","timeout_seconds":NaN}}}' },
  { group: 'json', name: 'Infinity / -Infinity in arguments', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id","timeout":Infinity,"t2":-Infinity}}}' },
  { group: 'json', name: '1e999 in arguments (forbidden call)', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"shell","code":"x","timeout_seconds":1e999}}}' },
  { group: 'json', name: 'huge integer id and argument', body: '{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id","timeout":123456789012345678901234567890}}}' },
  { group: 'json', name: 'hex / leading-zero / plus numbers', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id","a":0x10,"b":012,"c":+1}}}' },
  { group: 'json', name: `nesting deeper than json_depth (${JSON_DEPTH * 3})`, body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id","deep":${'['.repeat(JSON_DEPTH * 3)}${']'.repeat(JSON_DEPTH * 3)}}}}` },
  { group: 'json', name: 'very deep nesting (100k levels)', body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"deep":${'{"a":'.repeat(100000)}1${'}'.repeat(100000)}}}}` },
  { group: 'json', name: 'single-quoted strings / unquoted keys', body: "{jsonrpc:'2.0',id:1,method:'tools/call',params:{name:'run_command',arguments:{command:'id'}}}" },
  { group: 'json', name: 'comments inside JSON', body: '{"jsonrpc":"2.0","id":1,/* x */"method":"tools/call","params":{"name":"run_command",// y\n"arguments":{"command":"id"}}}' },
  { group: 'json', name: 'trailing comma', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id"},},}' },

  {
    group: 'json', name: 'what arrives is what was decided (escapes, big/odd numbers, -0, unicode)', expect: 'harmless',
    run: async (tx, ctx) => {
      const body = '{"jsonrpc":"2.0","id":"rt","method":"tools/call","params":{"name":"ex\\u0065cute_code","arguments":' +
        '{"language":"pyth\\u006fn","code":"print(\\"\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\u2028\\")","timeout_seconds":1e999,' +
        '"n1":-0,"n2":1E+2,"n3":123456789012345678901234567890,"n4":0.1e-400,"n5":-1.5e308,"deep":' +
        '[[[[[[[[[[{"a":[{"b":null}]}]]]]]]]]]],"k\\u0000ey":1}}}';
      const r = await tx.send(ctx, body.replace(',"k\\u0000ey":1', ''));
      assert.ok(r.success, `the python call is allowed: ${r.summary}`);
      const got = requestRecords().filter((x) => x.msg?.params?.name === 'execute_code').at(-1);
      const sent = JSON.parse(body.replace(',"k\\u0000ey":1', ''));
      // compared on the raw body (the log's msg went through JSON.stringify, which turns -0 into 0)
      assert.deepEqual(JSON.parse(got.body).params, sent.params, `the stand-in got the params the gateway decided on: ${got.body}`);
      return r;
    },
  },

  // --- method
  { group: 'method', name: 'method "Tools/call"', body: '{"jsonrpc":"2.0","id":1,"method":"Tools/call","params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'method', name: 'method "tools/call " (trailing space)', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call ","params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'method', name: 'method "tools/call\\u0000"', body: '{"jsonrpc":"2.0","id":1,"method":"tools/call\\u0000","params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'method', name: 'method "tools\\/call" (escaped solidus)', body: '{"jsonrpc":"2.0","id":1,"method":"tools\\/call","params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'method', name: 'method as number', body: '{"jsonrpc":"2.0","id":1,"method":1,"params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'method', name: 'method as array ["tools/call"]', body: '{"jsonrpc":"2.0","id":1,"method":["tools/call"],"params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'method', name: 'method "shutdown"', body: '{"jsonrpc":"2.0","id":1,"method":"shutdown"}' },
  { group: 'method', name: 'method "Shutdown" / "shutdown " ', run: async (tx, ctx) => ({ replies: [await tx.send(ctx, '{"jsonrpc":"2.0","id":1,"method":"Shutdown"}'), await tx.send(ctx, '{"jsonrpc":"2.0","id":2,"method":"shutdown "}')] }) },
  { group: 'method', name: 'notification "shutdown" (no id)', expect: 'noexec', body: '{"jsonrpc":"2.0","method":"shutdown"}' },
  { group: 'method', name: 'method "notifications/tools/call"', expect: 'noexec', body: '{"jsonrpc":"2.0","method":"notifications/tools/call","params":{"name":"run_command","arguments":{"command":"id"}}}' },

  // --- envelope
  { group: 'envelope', name: 'notification tools/call run_command (no id)', expect: 'noexec', body: '{"jsonrpc":"2.0","method":"tools/call","params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'envelope', name: 'notification tools/call execute_code shell (no id)', expect: 'noexec', body: JSON.stringify({ jsonrpc: '2.0', method: 'tools/call', params: { name: 'execute_code', arguments: SHELL } }) },
  { group: 'envelope', name: '"id": null', body: '{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'envelope', name: '"id" as object / bool', run: async (tx, ctx) => ({ replies: [
    await tx.send(ctx, '{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id"}}}'),
    await tx.send(ctx, '{"jsonrpc":"2.0","id":true,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id"}}}')] }) },
  { group: 'envelope', name: '"jsonrpc":"1.0"', body: '{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id"}}}' },
  { group: 'envelope', name: '"jsonrpc" missing / 2 (number)', run: async (tx, ctx) => ({ replies: [
    await tx.send(ctx, '{"id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id"}}}'),
    await tx.send(ctx, '{"jsonrpc":2.0,"id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"id"}}}')] }) },
  {
    group: 'envelope', name: 'client "response" whose result looks like tools/call', expect: 'noexec',
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, result: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'run_command', arguments: RUN } } }),
  },
  {
    group: 'envelope', name: 'client "error" response with tools/call in data', expect: 'noexec',
    body: JSON.stringify({ jsonrpc: '2.0', id: 'x', error: { code: 1, message: 'm', data: { method: 'tools/call', params: { name: 'delete_file', arguments: { path: 'x' } } } } }),
  },
  { group: 'envelope', name: 'response and request in one object (result + method)', body: JSON.stringify({ jsonrpc: '2.0', id: 1, result: {}, method: 'tools/call', params: { name: 'run_command', arguments: RUN } }) },
  { group: 'envelope', name: 'JSON primitive / string body containing a call', body: JSON.stringify(call('run_command', RUN)) },

  // --- bodies with more than one value
  { group: 'body', name: 'batch [allowed, forbidden]', body: `[${call('echo', { text: 'b1' }, 1)},${call('run_command', RUN, 2)}]` },
  { group: 'body', name: 'batch with only forbidden', body: `[${call('run_command', RUN, 1)},${call('execute_code', SHELL, 2)}]` },
  { group: 'body', name: 'batch after whitespace / BOM', run: async (tx, ctx) => ({ replies: [
    await tx.send(ctx, ` \r\n\t[${call('run_command', RUN, 1)}]`),
    await tx.send(ctx, bytes(B(0xef, 0xbb, 0xbf), `[${call('run_command', RUN, 1)}]`))] }) },
  { group: 'body', name: 'nested batch [[forbidden]]', body: `[[${call('run_command', RUN, 1)}]]` },
  {
    group: 'body', name: 'batch with MCP-Protocol-Version: 2025-03-26 on a 2025-06-18 session', only: ['streamable-http'],
    run: async (tx, ctx) => tx.send({ ...ctx, protocolVersion: '2025-03-26' }, `[${call('echo', { text: 'b' }, 1)},${call('run_command', RUN, 2)}]`),
  },
  { group: 'body', name: 'two JSON values: allowed then forbidden', body: call('echo', { text: 'a' }) + call('run_command', RUN) },
  { group: 'body', name: 'two JSON values separated by newline', body: call('echo', { text: 'a' }) + '\n' + call('delete_file', { path: 'x' }) },
  { group: 'body', name: 'JSON followed by junk', body: call('run_command', RUN) + 'junk' },
  { group: 'body', name: 'JSON followed by NUL bytes', body: bytes(call('run_command', RUN), B(0, 0, 0)) },
  { group: 'body', name: 'UTF-8 BOM before the body', body: bytes(B(0xef, 0xbb, 0xbf), call('run_command', RUN)) },
  { group: 'body', name: 'UTF-16LE body', body: Buffer.from(call('run_command', RUN), 'utf16le') },
  { group: 'body', name: 'empty body', body: '' },

  // --- batches on a 2025-03-26 session (the only version with batching): element by element
  ...[
    ['[allowed, forbidden, forbidden]', () => [call('echo', { text: 'batch-ok' }, 1), call('run_command', RUN, 2), call('execute_code', SHELL, 3)]],
    ['only forbidden', () => [call('run_command', RUN, 1), call('delete_file', { path: 'x' }, 2), call('write_file', { path: 'x', content: 'y' }, 3)]],
    ['[allowed, forbidden] with the same id', () => [call('echo', { text: 'batch-ok' }, 1), call('run_command', RUN, 1)]],
    ['[forbidden, allowed] with the same id', () => [call('run_command', RUN, 1), call('echo', { text: 'batch-ok' }, 1)]],
    ['a notification tools/call inside', () => [JSON.stringify({ jsonrpc: '2.0', method: 'tools/call', params: { name: 'run_command', arguments: RUN } }), call('echo', { text: 'batch-ok' }, 1)]],
    ['nested [[forbidden]]', () => [`[${call('run_command', RUN, 1)}]`, call('echo', { text: 'batch-ok' }, 2)]],
    ['empty []', () => []],
    ['invalid elements ("x", 5, null, {})', () => ['"x"', '5', 'null', '{}', call('echo', { text: 'batch-ok' }, 1)]],
    ['initialize + forbidden', () => [JSON.stringify(H.initializeBody(1, '2025-03-26')), call('run_command', RUN, 2)]],
    ['method shutdown inside', () => ['{"jsonrpc":"2.0","id":1,"method":"shutdown"}', call('echo', { text: 'batch-ok' }, 2)]],
    ['a client response + forbidden', () => ['{"jsonrpc":"2.0","id":1,"result":{"method":"tools/call","params":{"name":"run_command"}}}', call('run_command', RUN, 2)]],
    ['escaped duplicate key in an element', () => ['{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","n\\u0061me":"run_command","arguments":{"text":"batch-ok"}}}']],
    ['lone surrogate in an element', () => [call('echo', { text: 'batch-ok' }, 1), '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_command\\udfff","arguments":{}}}']],
    ['60 forbidden elements', () => Array.from({ length: 60 }, (_, i) => call(i % 2 ? 'run_command' : 'execute_code', i % 2 ? RUN : SHELL, i + 1))],
    ['in-flight id reused inside one batch (slow id 9, shell id 9)', () => [call('slow', { seconds: 1 }, 9), call('execute_code', SHELL, 9)]],
  ].map(([what, elements]) => ({
    group: 'batch', name: `2025-03-26 batch: ${what}`,
    run: async (tx, ctx) => {
      ctx.s0326 ??= await tx.open(ALICE, '2025-03-26');
      const r = await tx.send(ctx.s0326, `[${elements().join(',')}]`);
      return judgeBatch(r);
    },
  })),

  // --- Content-Type
  ...[
    ['text/plain', 'text/plain'],
    ['application/json; charset=utf-16', 'application/json; charset=utf-16'],
    ['multipart/form-data', 'multipart/form-data; boundary=x'],
    ['application/x-www-form-urlencoded', 'application/x-www-form-urlencoded'],
    ['text/plain, application/json (a list)', 'text/plain, application/json'],
    ['application/json-seq', 'application/json-seq'],
    ['missing', null],
  ].map(([what, ct]) => ({
    group: 'content-type', name: `Content-Type ${what}`, only: ['streamable-http'],
    run: async (tx, ctx) => tx.send(ctx, call('run_command', RUN), { contentType: ct }),
  })),
  {
    group: 'content-type', name: 'two Content-Type headers (json + text/plain)', only: ['streamable-http'],
    run: async (tx, ctx) => tx.send(ctx, call('run_command', RUN), { extra: 'Content-Type: text/plain\r\n' }),
  },
  {
    group: 'content-type', name: 'Content-Encoding: gzip', only: ['streamable-http'],
    run: async (tx, ctx) => tx.send(ctx, zlib.gzipSync(call('run_command', RUN)), { extra: 'Content-Encoding: gzip\r\n' }),
  },

  // --- HTTP framing
  {
    group: 'http', name: 'Content-Length and Transfer-Encoding together', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const allowed = call('echo', { text: 'cl-te' });
      const forbidden = call('run_command', RUN);
      const chunked = `${Buffer.byteLength(forbidden).toString(16)}\r\n${forbidden}\r\n0\r\n\r\n`;
      const a = await tx.raw(`${tx.head(ctx)}Content-Length: ${Buffer.byteLength(allowed)}\r\nTransfer-Encoding: chunked\r\n\r\n${chunked}`);
      const b = await tx.raw(`${tx.head(ctx)}Transfer-Encoding: chunked\r\nContent-Length: ${Buffer.byteLength(chunked)}\r\n\r\n${chunked}`);
      return { replies: [classifyHttp(a.responses[0]), classifyHttp(b.responses[0])] };
    },
  },
  {
    group: 'http', name: 'chunked with chunk extensions', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const f = call('run_command', RUN);
      const a = f.slice(0, 20);
      const b = f.slice(20);
      const r = await tx.raw(`${tx.head(ctx)}Transfer-Encoding: chunked\r\n\r\n${a.length.toString(16)};ext="1";x=y\r\n${a}\r\n${b.length.toString(16)};foo\r\n${b}\r\n0\r\n\r\n`);
      return classifyHttp(r.responses[0]);
    },
  },
  {
    group: 'http', name: 'obfuscated Transfer-Encoding ("chunked , identity", "xchunked", "Chunked")', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const f = call('run_command', RUN);
      const chunked = `${Buffer.byteLength(f).toString(16)}\r\n${f}\r\n0\r\n\r\n`;
      const replies = [];
      for (const te of ['chunked , identity', 'xchunked', 'Chunked', ' chunked']) {
        const r = await tx.raw(`${tx.head(ctx)}Transfer-Encoding: ${te}\r\n\r\n${chunked}`);
        replies.push(classifyHttp(r.responses[0]));
      }
      return { replies };
    },
  },
  {
    group: 'http', name: 'two different Content-Length headers', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const allowed = call('echo', { text: 'cl' });
      const forbidden = call('run_command', RUN);
      const r = await tx.raw(`${tx.head(ctx)}Content-Length: ${allowed.length}\r\nContent-Length: ${allowed.length + forbidden.length}\r\n\r\n${allowed}${forbidden}`, { want: 2 });
      return { replies: r.responses.length ? r.responses.map(classifyHttp) : [classifyHttp(null)] };
    },
  },
  {
    group: 'http', name: 'Content-Length shorter than the body (rest = a forbidden request)', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const allowed = call('echo', { text: 'short-cl' });
      const forbidden = call('run_command', RUN);
      const r = await tx.raw(`${tx.head(ctx)}Content-Length: ${allowed.length}\r\n\r\n${allowed}${forbidden}`, { want: 2, timeout: 2000 });
      const replies = r.responses.map(classifyHttp);
      // the first (allowed) request may be served; whatever follows must not be a success
      return { replies: replies.slice(1).length ? replies.slice(1) : [classifyHttp(null)], note: `first: ${replies[0]?.summary}` };
    },
  },
  {
    group: 'http', name: 'smuggled request in a JSON string (upstream pool desync)', only: ['streamable-http'], expect: 'harmless',
    run: async (tx, ctx) => {
      const smuggled = call('run_command', { command: 'smuggled' });
      const text = `x"}}\r\n\r\nPOST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${UPSTREAM_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`;
      const r = await tx.send(ctx, call('echo', { text }));
      assert.ok(r.success, `the echo itself is allowed: ${r.summary}`);
      return r;
    },
  },
  {
    group: 'http', name: 'smuggled request after a chunked body (trailer section)', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const allowed = call('echo', { text: 'trailer' });
      const forbidden = call('run_command', RUN);
      const r = await tx.raw(`${tx.head(ctx)}Transfer-Encoding: chunked\r\n\r\n${allowed.length.toString(16)}\r\n${allowed}\r\n0\r\nX-Trailer: 1\r\n\r\n` +
        `${tx.head(ctx)}Content-Length: ${forbidden.length}\r\n\r\n${forbidden}`, { want: 2 });
      const replies = r.responses.map(classifyHttp);
      return { replies: replies.slice(1).length ? replies.slice(1) : [classifyHttp(null)], note: `first: ${replies[0]?.summary}` };
    },
  },
  {
    group: 'http', name: 'pipelining: denied, then forbidden, then allowed on one connection', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const one = (b) => `${tx.head(ctx)}Content-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`;
      const r = await tx.raw(one(call('run_command', RUN, 1)) + one(call('execute_code', SHELL, 2)) + one(call('echo', { text: 'pipelined' }, 3)), { want: 3 });
      const replies = r.responses.map(classifyHttp);
      assert.equal(replies.length, 3, `three answers on one connection: ${JSON.stringify(r).slice(0, 500)}`);
      assert.ok(replies[2].success, `the third (allowed) request is served: ${replies[2].summary}`);
      return { replies: replies.slice(0, 2) };
    },
  },
  {
    group: 'http', name: 'GET with a tools/call body', only: ['streamable-http'], expect: 'noexec',
    run: async (tx, ctx) => {
      const b = call('run_command', RUN);
      const head = tx.head(ctx).replace(/^POST /, 'GET ').replace('Accept: application/json, text/event-stream', 'Accept: text/event-stream');
      const r = await tx.raw(`${head}Content-Length: ${b.length}\r\n\r\n${b}`, { timeout: 1000 });
      return classifyHttp(r.responses[0]);
    },
  },
  {
    group: 'http', name: 'DELETE with a tools/call body (throwaway session)', only: ['streamable-http'], expect: 'noexec',
    run: async (tx) => {
      const s = await tx.open(ALICE);
      const b = call('run_command', RUN);
      const r = await tx.raw(`${tx.head(s).replace(/^POST /, 'DELETE ')}Content-Length: ${b.length}\r\n\r\n${b}`);
      return classifyHttp(r.responses[0]);
    },
  },
  {
    group: 'http', name: 'PUT / PATCH with a tools/call body', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const b = call('run_command', RUN);
      const replies = [];
      for (const m of ['PUT', 'PATCH']) {
        const r = await tx.raw(`${tx.head(ctx).replace(/^POST /, `${m} `)}Content-Length: ${b.length}\r\n\r\n${b}`);
        replies.push(classifyHttp(r.responses[0]));
      }
      return { replies };
    },
  },
  {
    group: 'http', name: 'Expect: 100-continue', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const b = call('run_command', RUN);
      const r = await tx.raw(`${tx.head(ctx)}Expect: 100-continue\r\nContent-Length: ${b.length}\r\n\r\n${b}`, { want: 2, timeout: 1500 });
      const finals = r.responses.filter((x) => !(x.status >= 100 && x.status < 200));
      return classifyHttp(finals[0]);
    },
  },
  {
    group: 'http', name: 'chunk size overflow / leading zeros', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const f = call('run_command', RUN);
      const a = await tx.raw(`${tx.head(ctx)}Transfer-Encoding: chunked\r\n\r\n10000000000000000${f.length.toString(16)}\r\n${f}\r\n0\r\n\r\n`);
      const b = await tx.raw(`${tx.head(ctx)}Transfer-Encoding: chunked\r\n\r\n0000${f.length.toString(16)}\r\n${f}\r\n0\r\n\r\n`);
      return { replies: [classifyHttp(a.responses[0]), classifyHttp(b.responses[0])] };
    },
  },
  {
    group: 'http', name: 'HTTP/1.0 request', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const b = call('run_command', RUN);
      const r = await tx.raw(`${tx.head(ctx, { version: '1.0' })}Content-Length: ${b.length}\r\n\r\n${b}`);
      return classifyHttp(r.responses[0]);
    },
  },
  {
    group: 'http', name: 'HTTP/0.9 / HTTP/2 preface', only: ['streamable-http'],
    run: async (tx) => {
      const a = await tx.raw('POST /cowork-os/mcp\r\n\r\n' + call('run_command', RUN), { timeout: 1500 });
      const b = await tx.raw('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', { timeout: 1500 });
      return { replies: [classifyHttp(a.responses[0]), classifyHttp(b.responses[0])] };
    },
  },
  {
    group: 'http', name: 'obs-fold header continuation', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const b = call('run_command', RUN);
      const head = tx.head(ctx, { contentType: 'text/plain' }).replace('Content-Type: text/plain\r\n', 'Content-Type: text/plain\r\n application/json\r\n');
      const r = await tx.raw(`${head}X-Folded: a\r\n b\r\nContent-Length: ${b.length}\r\n\r\n${b}`);
      return classifyHttp(r.responses[0]);
    },
  },
  {
    group: 'http', name: 'bare LF line endings', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const b = call('run_command', RUN);
      const r = await tx.raw(`${tx.head(ctx)}Content-Length: ${b.length}\r\n\r\n`.replace(/\r\n/g, '\n') + b);
      return classifyHttp(r.responses[0]);
    },
  },
  {
    group: 'http', name: 'space before colon / NUL in a header', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const b = call('run_command', RUN);
      const a = await tx.raw(`${tx.head(ctx)}Content-Length : ${b.length}\r\n\r\n${b}`);
      const c = await tx.raw(`${tx.head(ctx)}X-Nul: a\0b\r\nContent-Length: ${b.length}\r\n\r\n${b}`);
      return { replies: [classifyHttp(a.responses[0]), classifyHttp(c.responses[0])] };
    },
  },

  // --- sessions and ids
  {
    group: 'session', name: 'duplicate Mcp-Session-Id headers (own, then root\'s)', only: ['streamable-http'],
    run: async (tx, ctx) => {
      const b = call('run_command', RUN);
      const a = await tx.raw(`${tx.head(ctx)}Mcp-Session-Id: ${rootSession.sessionId}\r\nContent-Length: ${b.length}\r\n\r\n${b}`);
      const head2 = tx.head(ctx).replace(`Mcp-Session-Id: ${ctx.sessionId}\r\n`, `Mcp-Session-Id: ${rootSession.sessionId}\r\nMcp-Session-Id: ${ctx.sessionId}\r\n`);
      const c = await tx.raw(`${head2}Content-Length: ${b.length}\r\n\r\n${b}`);
      return { replies: [classifyHttp(a.responses[0]), classifyHttp(c.responses[0])] };
    },
  },
  {
    group: 'session', name: 'another grant\'s session id (root\'s, allow-all policy)', only: ['streamable-http'],
    run: async (tx, ctx) => tx.send({ ...ctx, sessionId: rootSession.sessionId }, call('run_command', RUN)),
  },
  {
    group: 'session', name: 'root\'s session id, comma-joined with own', only: ['streamable-http'],
    run: async (tx, ctx) => tx.send({ ...ctx, sessionId: `${rootSession.sessionId}, ${ctx.sessionId}` }, call('run_command', RUN)),
  },
  {
    group: 'session', name: 'root\'s token, twice Authorization (alice then root)', only: ['streamable-http'],
    run: async (tx, ctx) => tx.send({ ...ctx, sessionId: rootSession.sessionId }, call('run_command', RUN), { extra: `Authorization: Bearer ${ROOT}\r\n` }),
  },
  {
    group: 'session', name: 'no session id at all', only: ['streamable-http'],
    run: async (tx, ctx) => tx.send(ctx, call('run_command', RUN), { session: false }),
  },
  {
    group: 'session', name: 'initialize carrying a forbidden tools/call-shaped params', expect: 'noexec',
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: H.PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'x', version: '1' }, name: 'run_command', arguments: RUN } }),
  },
  {
    group: 'session', name: 'reusing an id that is in flight (slow id 5, then id 5 again)',
    run: async (tx, ctx) => {
      const sent = await upstreamCalls();
      const slow = tx.send(ctx, call('slow', { seconds: 1 }, 5));
      await slowSent(sent);
      const again = await tx.send(ctx, call('echo', { text: 'same id' }, 5));
      const forbidden = await tx.send(ctx, call('execute_code', SHELL, 5));
      const s = await slow;
      assert.ok(s.success, `the slow call itself completes: ${s.summary}`);
      assert.ok(again.refused && !again.success, `an allowed call reusing in-flight id 5 is refused: ${again.summary}`);
      return { replies: [again, forbidden] };
    },
  },
  {
    group: 'session', name: 'notifications/cancelled naming another session\'s in-flight id', expect: 'noexec',
    run: async (tx, ctx) => {
      const other = await tx.open(ALICE); // the victim: same grant, another session
      const before = requestRecords().length;
      const sent = await upstreamCalls();
      const slow = tx.send(other, call('slow', { seconds: 1 }, 7));
      await slowSent(sent);
      const r = await tx.send(ctx, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 7, reason: 'not yours' } }));
      const s = await slow;
      assert.ok(s.success, `the victim's call completed: ${s.summary}`);
      const cancels = requestRecords().slice(before).filter((x) => x.msg?.method === 'notifications/cancelled');
      assert.deepEqual(cancels.map((x) => x.body), [], 'a cancellation of another session\'s call never reaches the upstream');
      // control: the owner cancelling its own call is forwarded (so the check above can fail)
      const sent2 = await upstreamCalls();
      const own = tx.send(other, call('slow', { seconds: 1 }, 8));
      await slowSent(sent2);
      await tx.send(other, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 8 } }));
      await own;
      const ownCancels = requestRecords().slice(before).filter((x) => x.msg?.method === 'notifications/cancelled');
      assert.equal(ownCancels.length, 1, 'the owner\'s own cancellation does reach the upstream (control)');
      return r;
    },
  },

  // --- URL paths
  ...['/cowork-os/mcp/../mcp', '/cowork-os/../cowork-os/mcp', '//mcp', '//cowork-os/mcp', '/cowork-os/mcp?x=1', '/mcp?tool=run_command',
    '/cowork-os/%2e%2e/cowork-os/mcp', '/%63owork-os/mcp', '/COWORK-OS/mcp', '/cowork-os/mcp/', '/cowork-os/MCP', '/cowork-os/mcp#frag',
    '/cowork-os/mcp%00', `http://127.0.0.1:PORT/cowork-os/mcp`, '*'].map((p) => ({
    group: 'url', name: `path ${p}`, only: ['streamable-http'],
    run: async (tx, ctx) => tx.send(ctx, call('run_command', RUN), { path: p.replace('PORT', String(gw.plainPort)) }),
  })),
];

// ---------------------------------------------------------------------------
// Running one trick

function judge(trick, reply) {
  const expect = trick.expect ?? 'refuse';
  const replies = reply.replies ?? [reply];
  const summary = replies.map((r) => r.summary).join(' / ') + (reply.note ? ` [${reply.note}]` : '');
  for (const r of replies) {
    if (expect === 'refuse') {
      assert.ok(!r.success, `${trick.name}: got a success result: ${JSON.stringify(r.messages).slice(0, 400)}`);
      assert.ok(r.refused, `${trick.name}: expected a refusal (HTTP 4xx or a JSON-RPC error), got ${r.summary} ${JSON.stringify(r.messages).slice(0, 300)}`);
      if (r.status >= 400 && r.status !== 404 && r.messages.length) {
        assert.ok(r.jsonRpcError, `${trick.name}: an HTTP ${r.status} carries a JSON-RPC error: ${JSON.stringify(r.messages).slice(0, 300)}`);
      }
    } else if (expect === 'noexec') {
      assert.ok(!r.success, `${trick.name}: got a success result: ${JSON.stringify(r.messages).slice(0, 400)}`);
    }
  }
  return summary;
}

/** Requests tollgate has sent upstream so far (/metrics). */
const upstreamCalls = async () => (await gw.metrics())['tollgate_upstream_calls_total'];
/** Waits until a call sent after the count `before` is on its way upstream: it is in flight at the gateway. */
const slowSent = (before) => gw.waitForMetric('tollgate_upstream_calls_total', (v) => v > before, { what: 'the slow call to be sent upstream' });

async function control(tx, ctx, label) {
  const r = await tx.send(ctx, call('echo', { text: `control after ${label}` }, 'ctl'));
  assert.ok(r.success, `control echo after "${label}" is served: ${r.summary} ${JSON.stringify(r.messages).slice(0, 300)}`);
  assert.equal(r.messages[0]?.result?.content?.[0]?.text, `control after ${label}`);
}

// ---------------------------------------------------------------------------

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-bypass-');
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  const policy = path.join(dir, 'bypass-policy.json');
  fs.writeFileSync(policy, JSON.stringify(POLICY, null, 2) + '\n');
  const allowAll = path.join(dir, 'root-allow-all.json');
  fs.writeFileSync(allowAll, '{"version":"1","default":"allow"}\n');
  const conf = H.writeConf(dir, {
    listeners: [{}],
    admin: true, // /metrics: when a call is in flight
    limits: { json_depth: JSON_DEPTH, body_bytes: 1 << 20 },
    grants: [
      { name: 'alice', token_sha256: H.sha256hex(ALICE) },
      { name: 'root', token_sha256: H.sha256hex(ROOT), policies: [{ upstream: 'cowork-os', policy: allowAll }] },
    ],
    upstreams: [{
      name: 'cowork-os', url: standin.url, default: true, initialize: 'local', policy,
      headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` },
    }],
  });
  gw = await H.startTollgate(conf, { cleanup, admin: true });
});

after(async () => {
  if (results.length) {
    const w1 = Math.max(...results.map((r) => r.trick.length), 5);
    const w0 = Math.max(...results.map((r) => r.transport.length), 9);
    const lines = [`bypass suite: ${results.filter((r) => r.ok).length}/${results.length} tricks held ` +
      '(up = requests the stand-in received during the trick, before the control echo)',
      `${'transport'.padEnd(w0)}  ${'trick'.padEnd(w1)}  verdict  up  outcome`];
    for (const r of results) {
      const outcome = r.outcome.replace(/(-?\d+)(?:,\1){3,}/g, (m, c) => `${c} x${m.split(',').length}`);
      lines.push(`${r.transport.padEnd(w0)}  ${r.trick.padEnd(w1)}  ${r.ok ? 'held   ' : 'FAILED '}  ${String(r.arrived ?? '?').padStart(2)}  ${outcome}${r.note ? `  -- ${r.note.slice(0, 400)}` : ''}`);
    }
    process.stdout.write(lines.join('\n') + '\n');
  }
  await cleanup.run();
});

describe('the log checker', () => {
  it('flags forbidden records and passes allowed ones', () => selfTestChecker());
});

for (const tx of TRANSPORTS) {
  describe(`bypass tricks over ${tx.name}`, () => {
    let ctx;

    before(async () => {
      ctx = await tx.open(ALICE);
      rootSession ??= await tx.open(ROOT);
    });

    it('controls: allowed calls arrive, a plainly forbidden call is refused', H.withLogs(logs, async () => {
      const before = requestRecords().length;
      const echo = await tx.send(ctx, call('echo', { text: 'hello' }, 1));
      assert.ok(echo.success, `echo: ${echo.summary}`);
      const py = await tx.send(ctx, call('execute_code', PY, 2));
      assert.ok(py.success, `execute_code python: ${py.summary}`);
      const run = await tx.send(ctx, call('run_command', RUN, 3));
      assert.equal(run.messages[0]?.error?.code, -32001, `run_command denied with -32001: ${run.summary}`);
      const js = await tx.send(ctx, call('execute_code', { language: 'javascript', code: 'x' }, 4));
      assert.equal(js.messages[0]?.error?.code, -32001, `execute_code javascript denied: ${js.summary}`);
      const seen = requestRecords().slice(before);
      assert.ok(seen.some((r) => r.msg?.params?.name === 'echo'), 'the echo reached the stand-in');
      assert.ok(seen.some((r) => r.msg?.params?.name === 'execute_code' && r.msg.params.arguments.language === 'python'),
        'execute_code python reached the stand-in');
      assert.deepEqual(logViolations(allRecords()), [], 'nothing forbidden so far');
    }));

    for (const trick of TRICKS) {
      if (trick.only && !trick.only.includes(tx.name)) continue;
      it(`[${trick.group}] ${trick.name}`, H.withLogs(logs, async () => {
        const mark = allRecords().length;
        let outcome = '?';
        let ok = false;
        let note;
        let arrived;
        try {
          const reply = trick.run ? await trick.run(tx, ctx) : await tx.send(ctx, typeof trick.body === 'function' ? trick.body(ctx) : trick.body);
          outcome = (reply.replies ?? [reply]).map((r) => r.summary).join(' / ');
          note = reply.note ?? trick.note;
          judge(trick, reply);
          trick.check?.(reply);
          const during = allRecords().slice(mark);
          arrived = during.filter((r) => r.event === undefined).length;
          const bad = logViolations(during);
          if (bad.length) {
            outcome += ' + REACHED UPSTREAM';
            note = bad.join(' | ');
          }
          assert.deepEqual(bad, [], `${trick.name}: reached the stand-in`);
          await control(tx, ctx, trick.name);
          ok = true;
        } finally {
          if (!ok && !note) note = 'assertion failed';
          results.push({ transport: tx.name, trick: `[${trick.group}] ${trick.name}`, outcome, ok, note, arrived });
        }
      }));
    }

    it('at the end: nothing forbidden in the whole stand-in log, the controls are there, tollgate is healthy', H.withLogs(logs, async () => {
      const recs = requestRecords();
      assert.ok(recs.filter((r) => r.msg?.params?.name === 'echo').length >= TRICKS.length / 2, 'control echoes reached the stand-in');
      assert.deepEqual(logViolations(allRecords()), [], 'the stand-in log has nothing forbidden');
      assert.equal(gw.proc.exitCode, null, `tollgate still running: ${gw.status()}`);
      gw.assertNoSanitizerReport();
    }));
  });
}
