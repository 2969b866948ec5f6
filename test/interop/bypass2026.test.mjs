// The bypass suite for MCP 2026-07-28 requests: tricks that try to get a denied call past
// tollgate with the stateless era's headers and `_meta` claim, sent as raw bytes to every
// endpoint the CoWork OS stand-in is reachable through, with the stand-in's request log as the
// proof that nothing denied arrived.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/bypass2026.test.mjs
//
// Layout: TRICKS (a table: body, headers, session, and the exact outcome expected on each kind
// of endpoint) x ENDPOINTS (Streamable HTTP on /cowork-os/mcp and on the default /mcp; the
// legacy HTTP+SSE POST channel /cowork-os/messages and the default /messages; WebSocket
// /cowork-os/ws and the default /ws). The stand-in is an `initialize = "local"` upstream, so a
// 2026 request to it on a Streamable HTTP endpoint is served statelessly (the body's claim
// decides the era; every Mcp-* header must agree with the body, else 400/-32020). The SSE and
// WebSocket endpoints are 2025-era: a claim in a channel message changes nothing, headers (on
// the POST, or on the WebSocket upgrade) are not read, and the policy decides from the body.
//
// Denied at the stand-in (alice's policy below, default deny): every tools/call but echo, slow
// and execute_code with language "python"; the non-standard method shutdown. After every trick
// the stand-in log must show no denied call (whatever its id, framing or era), nothing that is
// not a well-formed POST /mcp, no client Mcp-* header passed upstream (nor a 2026 version); the
// reply must be exactly the one in the table; and a control echo on the same endpoint must be
// served with nothing left over from the trick.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import * as H from './lib/harness.mjs';

H.requireNodeModules();
const { default: WsClient } = await import('ws');

const ALICE = 'alice-' + H.randomToken(); // the restricted grant every trick is sent as
const ROOT = 'root-' + H.randomToken(); // a second grant whose policy allows everything
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const MODERN = '2026-07-28';
const LEGACY = H.PROTOCOL_VERSION; // 2025-06-18: the sessions the tricks are sent in
const BATCHING = '2025-03-26'; // the one version with JSON-RPC batches
const PV = 'io.modelcontextprotocol/protocolVersion';
const CAPS = 'io.modelcontextprotocol/clientCapabilities';
const META = { [PV]: MODERN, [CAPS]: {} };
const SHELL = { language: 'shell', code: 'rm -rf /' };
const PY = { language: 'python', code: 'print(1)' };
const GARBAGE_SID = 'AAAAAAAAAAAAAAAAAAAAAA';

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
const sids = {}; // Streamable HTTP 2025 sessions: alice (2025-06-18 and 2025-03-26) and root
const results = []; // { endpoint, trick, outcome, ok, note, arrived }

const logs = () => ({
  'tollgate process': gw?.status(),
  'tollgate stderr': gw?.stderr(),
  'stand-in log': standin && fs.existsSync(standin.logFile) ? fs.readFileSync(standin.logFile, 'utf8').slice(-6000) : undefined,
});

// ---------------------------------------------------------------------------
// The stand-in's log: what reached the upstream

const allRecords = () => standin.records();

/** Why one message the stand-in received is denied by alice's policy, or null. */
function deniedWhy(msg) {
  if (Array.isArray(msg)) {
    for (const m of msg) { const w = deniedWhy(m); if (w) return `batch element: ${w}`; }
    return null;
  }
  if (!msg || typeof msg !== 'object') return null;
  if (typeof msg.method === 'string' && msg.method.trim().toLowerCase() === 'shutdown') return `method ${JSON.stringify(msg.method)}`;
  if (msg.method !== 'tools/call') return null;
  const name = msg.params?.name;
  if (name === 'echo' || name === 'slow') return null;
  if (name === 'execute_code' && msg.params?.arguments?.language === 'python') return null;
  const lang = name === 'execute_code' ? ` language ${JSON.stringify(msg.params?.arguments?.language)}` : '';
  return `tools/call ${JSON.stringify(name)}${lang}${'id' in msg ? '' : ' (no id: a notification)'}`;
}

/** Everything wrong in stand-in log records (denied calls, odd requests, client headers copied up). */
function logViolations(records) {
  const out = [];
  for (const r of records) {
    if (r.event === 'client_error') { out.push(`stand-in got unparseable HTTP: ${r.code} ${r.message}`); continue; }
    if (r.event !== undefined) continue;
    if (r.unparsable) { out.push(`unparsable log line ${r.unparsable.slice(0, 200)}`); continue; }
    const where = `stand-in request #${r.seq} ${r.http?.method} ${r.http?.path} body=${String(r.body).slice(0, 300)}`;
    const w = deniedWhy(r.msg);
    if (w) out.push(`DENIED CALL ARRIVED ${w}: ${where}`);
    if (r.http && (r.http.method !== 'POST' || r.http.path !== '/mcp')) out.push(`unexpected request line: ${where}`);
    if (r.msg === null || typeof r.msg !== 'object') out.push(`non-JSON-object body: ${where}`);
    if (r.http && r.status === 401) out.push(`request without the gateway's credential: ${where}`);
    // A 2025 upstream hears 2025: no 2026 version, and no client Mcp-* header passed on.
    for (const [h, v] of Object.entries(r.http?.headers ?? {})) {
      if (h.startsWith('mcp-') && h !== 'mcp-protocol-version') out.push(`client header ${h}: ${v} passed to a 2025 upstream: ${where}`);
    }
    if (r.http?.headers?.['mcp-protocol-version'] === MODERN) out.push(`MCP-Protocol-Version ${MODERN} sent to a 2025 upstream: ${where}`);
  }
  return out;
}

// Proves the checker can fail: synthetic records that must be flagged, and allowed ones that pass.
function selfTestChecker() {
  const post = { method: 'POST', path: '/mcp', headers: {} };
  const bad = [
    { seq: 1, http: post, msg: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'execute_code', arguments: SHELL, _meta: META } } },
    { seq: 2, http: post, msg: { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'execut\u0435_code', arguments: SHELL } } },
    { seq: 3, http: post, msg: { jsonrpc: '2.0', method: 'tools/call', params: { name: 'run_command' } } },
    { seq: 4, http: post, msg: [{ jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'execute_code', arguments: { language: ['python'] } } }] },
    { seq: 5, http: post, msg: { jsonrpc: '2.0', id: 5, method: 'shutdown' } },
    { seq: 6, http: { ...post, headers: { 'mcp-name': 'echo' } }, msg: { jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'echo' } } },
    { seq: 6, http: { ...post, headers: { 'mcp-session-id': GARBAGE_SID } }, msg: { jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'echo' } } },
    { seq: 6, http: { ...post, headers: { 'mcp-protocol-version': MODERN } }, msg: { jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'echo' } } },
    { seq: 7, http: { ...post, path: '/mcp/x' }, msg: { jsonrpc: '2.0', id: 7, method: 'tools/list' } },
    { event: 'client_error', code: 'HPE_INVALID_METHOD', message: 'x' },
  ];
  for (const r of bad) assert.equal(logViolations([r]).length, 1, `the log checker flags ${JSON.stringify(r)}`);
  const good = [
    { seq: 8, http: { ...post, headers: { 'mcp-protocol-version': '2025-11-25' } }, status: 200, msg: { jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x' } } } },
    { seq: 9, http: post, status: 200, msg: { jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'execute_code', arguments: PY } } },
    { seq: 10, http: post, status: 200, msg: { jsonrpc: '2.0', id: 10, method: 'tools/list' } },
  ];
  assert.deepEqual(logViolations(good), [], 'the log checker passes allowed calls');
}

// ---------------------------------------------------------------------------
// Raw HTTP/1.1: one request per connection (Connection: close), headers exactly as given

/** Writes bytes on a fresh connection, reads until the server closes; resolves the raw reply. */
function rawExchange(bytes, { timeout = 8000 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(gw.plainPort, '127.0.0.1');
    const chunks = [];
    let done = false;
    const finish = (extra) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ buf: Buffer.concat(chunks), ...extra });
    };
    const timer = setTimeout(() => finish({ timedOut: true }), timeout);
    sock.on('data', (d) => chunks.push(d));
    sock.on('end', () => finish({}));
    sock.on('close', () => finish({}));
    sock.on('error', (e) => finish({ socketError: e.code }));
    sock.on('connect', () => sock.write(bytes));
  });
}

/** Parses one HTTP/1.1 response (Content-Length, chunked, or delimited by close). */
function parseResponse(buf) {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]);
  if (!m) return null;
  const headers = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  let body = buf.subarray(end + 4);
  if (headers['content-length'] !== undefined) {
    body = body.subarray(0, Number(headers['content-length']));
  } else if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
    const parts = [];
    let off = 0;
    for (;;) {
      const nl = body.indexOf('\r\n', off);
      if (nl < 0) break;
      const size = parseInt(body.subarray(off, nl).toString('latin1'), 16);
      if (!(size > 0)) break;
      parts.push(body.subarray(nl + 2, nl + 2 + size));
      off = nl + 2 + size + 2;
    }
    body = Buffer.concat(parts);
  }
  return { status: Number(m[1]), headers, body: body.toString('utf8') };
}

/** The JSON-RPC messages of a response body (JSON or SSE). */
function messagesOf(r) {
  if (!r?.body) return [];
  const ct = r.headers['content-type'] ?? '';
  if (/text\/event-stream/.test(ct)) {
    return H.parseSse(r.body).map((e) => { try { return JSON.parse(e.data); } catch { return { unparsable: e.data }; } });
  }
  if (!/application\/json/.test(ct)) return []; // the legacy SSE POST's "202 Accepted" (text/plain)
  try { return [JSON.parse(r.body)]; } catch { return [{ unparsable: r.body.slice(0, 200) }]; }
}

/** A POST with exactly these header lines ([name, value] pairs: duplicates and case kept). */
async function rawPost(p, body, pairs, token = ALICE) {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body), 'utf8');
  const head = `POST ${p} HTTP/1.1\r\nHost: 127.0.0.1:${gw.plainPort}\r\nAuthorization: Bearer ${token}\r\n` +
    'Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n' +
    pairs.map(([k, v]) => `${k}: ${v}\r\n`).join('') + `Content-Length: ${b.length}\r\nConnection: close\r\n\r\n`;
  const raw = await rawExchange(Buffer.concat([Buffer.from(head, 'latin1'), b]));
  const r = parseResponse(raw.buf);
  if (!r) return { status: 0, headers: {}, body: '', messages: [], note: raw.timedOut ? 'timed out' : `no HTTP response: ${raw.buf.toString('latin1').slice(0, 200)}` };
  return { ...r, messages: messagesOf(r) };
}

// ---------------------------------------------------------------------------
// Outcomes: one exact string per reply, compared with the table.
//   Streamable HTTP: "STATUS ANSWERS"            e.g. "400 -32020", "200 -32001", "200 [-32001,result]"
//   legacy SSE POST: "STATUS [body:ANSWERS] stream:ANSWERS"   e.g. "202 stream:-32001"
//   WebSocket:       "ws ANSWERS"                e.g. "ws -32001"
// ANSWERS: each JSON-RPC answer as its error code or "result", comma-joined; a batch reply as
// [..] in request-id order; "none" when nothing answered.

function answer(m) {
  if (Array.isArray(m)) {
    const items = [...m].sort((a, b) => String(a?.id).localeCompare(String(b?.id)));
    return `[${items.map(answer).join(',')}]`;
  }
  if (m && typeof m === 'object' && 'error' in m) return String(m.error?.code);
  if (m && typeof m === 'object' && 'result' in m) return 'result';
  return m?.unparsable !== undefined ? 'unparsable' : '?';
}
const isAnswer = (m) => Array.isArray(m) || (m && typeof m === 'object' && ('result' in m || 'error' in m));
const answers = (ms) => ms.filter(isAnswer).map(answer).join(',') || 'none';

/** The ids a body asks answers for (JSON text of each); [] for notifications and unparsable bodies. */
function idsOf(body) {
  let v;
  try { v = typeof body === 'string' ? JSON.parse(body) : body; } catch { return []; }
  const one = (m) => (m && typeof m === 'object' && !Array.isArray(m) && 'method' in m && 'id' in m ? [JSON.stringify(m.id)] : []);
  return Array.isArray(v) ? v.flatMap(one) : one(v);
}

// ---------------------------------------------------------------------------
// Channels (legacy SSE, WebSocket): messages arrive on one stream; a send collects the answers
// that arrive after it until every id it asked for is answered (or an id-null error, a batch
// reply, the stream's end); a body with no id waits NO_ID_WINDOW_MS for an error.

const NO_ID_WINDOW_MS = 600;
const ANSWER_TIMEOUT_MS = 6000;

function makeInbox() {
  const box = { msgs: [], closed: null, wake: new Set() };
  box.push = (m) => { box.msgs.push(m); for (const f of box.wake) f(); };
  box.close = (info) => { box.closed = info; for (const f of box.wake) f(); };
  box.collect = (mark, ids) => new Promise((resolve) => {
    const got = () => box.msgs.slice(mark).filter(isAnswer);
    let timer;
    const done = (timedOut) => {
      clearTimeout(timer);
      box.wake.delete(check);
      resolve({ got: got(), timedOut, closed: box.closed });
    };
    function check() {
      const g = got();
      const answered = new Set(g.flatMap((m) => (Array.isArray(m) ? m : [m]).map((x) => JSON.stringify(x?.id))));
      const nullErr = g.some((m) => !Array.isArray(m) && m.error && (m.id === null || m.id === undefined));
      if (box.closed || nullErr || g.some(Array.isArray) || (ids.length > 0 && ids.every((i) => answered.has(i)))) done(false);
    }
    timer = setTimeout(() => done(ids.length > 0), ids.length ? ANSWER_TIMEOUT_MS : NO_ID_WINDOW_MS);
    box.wake.add(check);
    check();
  });
  return box;
}

/**
 * Handshake headers for a WebSocket client from [name, value] pairs. node:http folds header names
 * (a later "MCP-NAME" would replace "Mcp-Name"), so a name repeated in any case becomes an array
 * under its first spelling: every value is sent, each on a line of its own.
 */
function headerObject(pairs) {
  const o = {};
  for (const [k, v] of pairs) {
    const have = Object.keys(o).find((n) => n.toLowerCase() === k.toLowerCase());
    if (have) o[have] = [].concat(o[have], v); else o[k] = v;
  }
  return o;
}

const sessionPair = (which, ep) => {
  if (!which) return [];
  const v = { own: sids.alice?.[ep.path], root: sids.root, root0326: sids.root0326, garbage: GARBAGE_SID, ownroot: `${sids.alice?.[ep.path]}, ${sids.root}` }[which];
  assert.ok(v, `a session id for "${which}"`);
  return [['Mcp-Session-Id', v]];
};

// ---------------------------------------------------------------------------
// Endpoints. open() -> ctx; send(ctx, trick) -> { outcome, messages, note }; control(ctx, label).

const initBody = (id, v) => H.initializeBody(id, v);
let ctlSeq = 0;

function mcpEndpoint(p) {
  return {
    name: `streamable-http ${p}`, kind: 'mcp', path: p,
    async open() { return { ep: this }; },
    async send(ctx, t) {
      const pairs = [...(t.headers ?? []), ...sessionPair(t.session, this)];
      if (t.proto) {
        // a 2025 session of its own, initialized asking for t.proto; the trick's headers say the rest
        const init = await rawPost(p, initBody(1, t.proto), []);
        assert.equal(init.messages[0]?.result?.protocolVersion, t.negotiated ?? t.proto, `initialize asking for ${t.proto}: ${init.body}`);
        assert.ok(init.headers['mcp-session-id'], init.body);
        pairs.push(['Mcp-Session-Id', init.headers['mcp-session-id']]);
      }
      const r = await rawPost(p, t.body, pairs);
      const a = r.messages.length === 1 && Array.isArray(r.messages[0]) ? answer(r.messages[0]) : answers(r.messages);
      return { outcome: `${r.status} ${a}`, messages: r.messages, note: r.note };
    },
    // A stateless 2026 echo on this endpoint, and the 2025 session still served.
    async control(ctx, label) {
      const text = `control ${++ctlSeq} after ${label}`;
      const r = await rawPost(p, { jsonrpc: '2.0', id: 'ctl', method: 'tools/call', params: { name: 'echo', arguments: { text }, _meta: META } }, STD('echo'));
      assert.equal(r.status, 200, `control 2026 echo after "${label}": ${r.body}`);
      assert.equal(r.messages.length, 1, `one answer to the control: ${r.body}`);
      assert.equal(r.messages[0]?.result?.resultType, 'complete', r.body);
      assert.equal(H.resultText(r.messages[0].result), text);
      const s = await rawPost(p, { jsonrpc: '2.0', id: 'ctl2', method: 'tools/call', params: { name: 'echo', arguments: { text } } },
        [['Mcp-Session-Id', sids.alice[p]], ['MCP-Protocol-Version', LEGACY]]);
      assert.equal(H.resultText(s.messages[0]?.result), text, `control 2025 echo after "${label}": ${s.status} ${s.body}`);
    },
  };
}

function sseEndpoint(ssePath) {
  return {
    name: `legacy-sse POST of ${ssePath}`, kind: 'sse', path: ssePath,
    async connect(proto = LEGACY, negotiated = proto) {
      const ac = new AbortController();
      cleanup.add(() => ac.abort());
      const res = await fetch(`http://127.0.0.1:${gw.plainPort}${ssePath}`, {
        headers: { authorization: `Bearer ${ALICE}`, accept: 'text/event-stream' }, signal: ac.signal,
      });
      assert.equal(res.status, 200, `GET ${ssePath}`);
      const box = makeInbox();
      let gotEndpoint;
      const endpointP = new Promise((resolve) => { gotEndpoint = resolve; });
      const ctx = { ep: this, box, ac, endpoint: null };
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
              if (ev.event === 'endpoint') { ctx.endpoint = ev.data; gotEndpoint(); continue; }
              let msg;
              try { msg = JSON.parse(ev.data); } catch { msg = { unparsable: ev.data.slice(0, 200) }; }
              box.push(msg);
            }
          }
        } catch { /* aborted */ }
        box.close({ code: 'stream ended' });
        gotEndpoint();
      })();
      await endpointP;
      assert.ok(ctx.endpoint, `${ssePath}: an endpoint event`);
      const init = await this.post(ctx, initBody('init', proto), []);
      assert.equal(init.got[0]?.result?.protocolVersion, negotiated, `legacy SSE initialize asking for ${proto}: ${JSON.stringify(init)}`);
      await this.post(ctx, { jsonrpc: '2.0', method: 'notifications/initialized' }, []);
      return ctx;
    },
    async post(ctx, body, pairs) {
      const mark = ctx.box.msgs.length;
      const r = await rawPost(ctx.endpoint, body, pairs);
      const c = await ctx.box.collect(mark, idsOf(body));
      return { status: r.status, bodyMessages: r.messages, ...c };
    },
    async open() { return this.connect(); },
    async send(ctx, t) {
      let c = ctx;
      if (t.proto) c = await this.connect(t.proto, t.negotiated ?? t.proto);
      if (c.box.closed) throw new Error(`${ssePath}: the stream ended before the trick`);
      const r = await this.post(c, t.body, [...(t.headers ?? []), ...sessionPair(t.session, mcpEndpoints[0])]);
      const parts = [String(r.status)];
      if (r.bodyMessages.length) parts.push(`body:${answers(r.bodyMessages)}`);
      parts.push(`stream:${answers(r.got)}`);
      if (r.timedOut) parts.push('(timed out)');
      // a session of its own: its control comes after the stand-in log is read, then it ends
      const after = c === ctx ? undefined : async () => { await this.control(c, t.name); c.ac.abort(); };
      return { outcome: parts.join(' '), messages: [...r.bodyMessages, ...r.got], after };
    },
    async control(ctx, label) {
      const text = `control ${++ctlSeq} after ${label}`;
      const mark = ctx.box.msgs.length;
      const r = await this.post(ctx, { jsonrpc: '2.0', id: 'ctl', method: 'tools/call', params: { name: 'echo', arguments: { text } } }, []);
      assert.equal(r.status, 202, `control POST after "${label}"`);
      const got = ctx.box.msgs.slice(mark).filter(isAnswer);
      assert.deepEqual(got.map(answer), ['result'], `the control's answer, and nothing left over from the trick: ${JSON.stringify(got).slice(0, 400)}`);
      assert.equal(H.resultText(got[0].result), text);
    },
  };
}

function wsEndpoint(p) {
  return {
    name: `websocket ${p}`, kind: 'ws', path: p,
    async connect(pairs = [], proto = LEGACY, negotiated = proto) {
      const ws = new WsClient(`ws://127.0.0.1:${gw.plainPort}${p}`, 'mcp', {
        headers: { authorization: `Bearer ${ALICE}`, ...headerObject(pairs) }, maxPayload: 1 << 20,
      });
      const box = makeInbox();
      const opened = await new Promise((resolve) => {
        ws.once('open', () => resolve({}));
        ws.once('unexpected-response', (req, res) => resolve({ refused: res.statusCode }));
        ws.once('error', (e) => resolve({ refused: e.message }));
      });
      if (opened.refused !== undefined) return { refused: opened.refused };
      ws.on('error', () => {});
      ws.on('message', (d) => {
        let m;
        try { m = JSON.parse(String(d)); } catch { m = { unparsable: String(d).slice(0, 200) }; }
        box.push(m);
      });
      ws.on('close', (code, reason) => box.close({ code, reason: String(reason) }));
      cleanup.add(() => ws.terminate());
      const ctx = { ep: this, ws, box };
      const init = await this.exchange(ctx, initBody('init', proto));
      assert.equal(init.got[0]?.result?.protocolVersion, negotiated, `WebSocket initialize asking for ${proto}: ${JSON.stringify(init)}`);
      ws.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
      return ctx;
    },
    async exchange(ctx, body) {
      const mark = ctx.box.msgs.length;
      ctx.ws.send(typeof body === 'string' ? body : JSON.stringify(body));
      return ctx.box.collect(mark, idsOf(body));
    },
    async close(ctx) {
      if (ctx.box.closed) return;
      const closed = new Promise((resolve) => ctx.ws.once('close', resolve));
      ctx.ws.close(1000);
      await closed;
    },
    async open() { return this.connect(); },
    // A trick with headers sends them on the upgrade of a connection of its own: the only
    // place a WebSocket client has headers.
    async send(ctx, t) {
      const pairs = [...(t.headers ?? []), ...sessionPair(t.session, mcpEndpoints[0])];
      let c = ctx;
      if (pairs.length || t.proto) {
        c = await this.connect(pairs, t.proto ?? LEGACY, t.negotiated ?? t.proto ?? LEGACY);
        if (c.refused !== undefined) return { outcome: `ws handshake refused ${c.refused}`, messages: [] };
      }
      if (c.box.closed) throw new Error(`${p}: the connection closed before the trick`);
      const r = await this.exchange(c, t.body);
      let outcome = `ws ${answers(r.got)}`;
      if (r.closed) outcome += ` closed ${r.closed.code}`;
      if (r.timedOut) outcome += ' (timed out)';
      const after = c === ctx ? undefined : async () => { await this.control(c, t.name); await this.close(c); };
      return { outcome, messages: r.got, after };
    },
    async control(ctx, label) {
      const text = `control ${++ctlSeq} after ${label}`;
      const mark = ctx.box.msgs.length;
      await this.exchange(ctx, { jsonrpc: '2.0', id: 'ctl', method: 'tools/call', params: { name: 'echo', arguments: { text } } });
      const got = ctx.box.msgs.slice(mark).filter(isAnswer);
      assert.deepEqual(got.map(answer), ['result'], `the control's answer, and nothing left over from the trick: ${JSON.stringify(got).slice(0, 400)}`);
      assert.equal(H.resultText(got[0].result), text);
    },
  };
}

const mcpEndpoints = [mcpEndpoint('/cowork-os/mcp'), mcpEndpoint('/mcp')];
const ENDPOINTS = [...mcpEndpoints, sseEndpoint('/cowork-os/sse'), sseEndpoint('/sse'), wsEndpoint('/cowork-os/ws'), wsEndpoint('/ws')];

// ---------------------------------------------------------------------------
// Message and header builders

/** A 2026 tools/call: params.name, arguments, the claim in _meta (or `meta`; null: no _meta), more params. */
const tc = (name, args = SHELL, { id = 1, meta = META, extra = {} } = {}) =>
  ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, ...(meta === null ? {} : { _meta: meta }), ...extra } });
const EXEC = () => tc('execute_code');
const b64 = (s) => `=?base64?${Buffer.from(s, 'utf8').toString('base64')}?=`;
const V = ['MCP-Protocol-Version', MODERN];
const M = ['Mcp-Method', 'tools/call'];
const N = (v) => ['Mcp-Name', v];
/** The standard headers of a 2026 tools/call naming `name`. */
const STD = (name) => [V, M, N(name)];
const HOMOGLYPH = 'execut\u0435_code'; // Cyrillic е
const latin1 = (s) => Buffer.from(s, 'utf8').toString('latin1'); // raw UTF-8 bytes in a header line

// What a Streamable HTTP endpoint answers, and what the channels answer (their policy decides).
const DENY = { sse: '202 stream:-32001', ws: 'ws -32001' };
const x = (mcp, ch = DENY) => ({ mcp, ...ch });
const MISMATCH = x('400 -32020');
const DECIDED = x('200 -32001');
const NO_CLAIM = x('400 -32602'); // a 2026 MCP-Protocol-Version over a body without a (valid) claim
const INVALID = (c) => x(`400 ${c}`, { sse: `400 body:-32600 stream:${c}`, ws: `ws ${c}` }); // refused by the strict decoder

/** The echo record the stand-in received during a trick (for `harmless` tricks). */
const echoesIn = (records) => records.filter((r) => r.msg?.method === 'tools/call' && r.msg.params?.name === 'echo');

// ---------------------------------------------------------------------------
// The tricks. `body`: an object (sent as JSON) or a raw string; `headers`: [name, value] pairs
// sent as they are (on the POST, or on the WebSocket upgrade); `session`: an Mcp-Session-Id to
// add (own: alice's 2025 session on that endpoint, root: the allow-all grant's, root0326: its
// 2025-03-26 one, garbage, ownroot: alice's and root's comma-joined); `proto`: sent in a 2025 session of its own, initialized asking for that
// version (`negotiated`: the version the gateway agrees to, if another); `expect`: the exact
// outcome per endpoint kind; `check(records, kind)`: more about what reached the stand-in.

const TRICKS = [
  // --- Mcp-Name / Mcp-Method naming something else than the body
  { group: 'name', name: 'Mcp-Name: echo over a body calling execute_code', body: EXEC(), headers: STD('echo'), expect: MISMATCH },
  { group: 'name', name: 'Mcp-Name: slow over a body calling run_command', body: tc('run_command', { command: 'id' }), headers: STD('slow'), expect: MISMATCH },
  { group: 'name', name: 'Mcp-Method: tools/list over tools/call', body: EXEC(), headers: [V, ['Mcp-Method', 'tools/list'], N('execute_code')], expect: MISMATCH },
  { group: 'name', name: 'Mcp-Method: tools/list and no Mcp-Name over tools/call', body: EXEC(), headers: [V, ['Mcp-Method', 'tools/list']], expect: MISMATCH },
  { group: 'name', name: 'Mcp-Method: server/discover over tools/call', body: EXEC(), headers: [V, ['Mcp-Method', 'server/discover']], expect: MISMATCH },
  { group: 'name', name: 'Mcp-Name missing', body: EXEC(), headers: [V, M], expect: MISMATCH },
  { group: 'name', name: 'Mcp-Method missing', body: EXEC(), headers: [V, N('execute_code')], expect: MISMATCH },
  { group: 'name', name: 'headers that agree: the policy decides', body: EXEC(), headers: STD('execute_code'), expect: DECIDED },

  // --- =?base64?...?= values
  { group: 'base64', name: 'Mcp-Name: valid base64 of echo', body: EXEC(), headers: STD(b64('echo')), expect: MISMATCH },
  { group: 'base64', name: 'Mcp-Name: valid base64 of execute_code (the denied name)', body: EXEC(), headers: STD(b64('execute_code')), expect: DECIDED },
  { group: 'base64', name: 'Mcp-Method: valid base64 of tools/call', body: EXEC(), headers: [V, ['Mcp-Method', b64('tools/call')], N('execute_code')], expect: DECIDED },
  { group: 'base64', name: 'Mcp-Method: valid base64 of tools/list', body: EXEC(), headers: [V, ['Mcp-Method', b64('tools/list')], N('execute_code')], expect: MISMATCH },
  { group: 'base64', name: 'MCP-Protocol-Version: base64 of 2026-07-28', body: EXEC(), headers: [['MCP-Protocol-Version', b64(MODERN)], M, N('execute_code')], expect: DECIDED },
  { group: 'base64', name: 'broken base64 (a * in it)', body: EXEC(), headers: STD('=?base64?ZXhlY3V0ZV9jb2R*?='), expect: MISMATCH },
  // Only the canonical encoding decodes: a stray "=" or spaces would let one value be written
  // several ways (mbedtls alone takes them).
  { group: 'base64', name: 'a stray "=" after a complete encoding: not canonical', body: EXEC(), headers: STD('=?base64?ZXhlY3V0ZV9jb2Rl=?='), expect: MISMATCH },
  { group: 'base64', name: 'broken base64 (one character short)', body: EXEC(), headers: STD('=?base64?ZXhlY3V0ZV9jb2R?='), expect: MISMATCH },
  { group: 'base64', name: 'base64url alphabet (- and _) where base64 has + and /', body: tc('execute_code', SHELL, { id: 1 }), headers: STD('=?base64?ZXhlY3V0ZV9jb2Rl_-?='), expect: MISMATCH },
  { group: 'base64', name: 'no end marker', body: EXEC(), headers: STD('=?base64?ZXhlY3V0ZV9jb2Rl'), expect: MISMATCH },
  { group: 'base64', name: 'empty encoding =?base64??=', body: EXEC(), headers: STD('=?base64??='), expect: MISMATCH },
  { group: 'base64', name: 'upper-case marker =?BASE64? with the denied name', body: EXEC(), headers: STD('=?BASE64?ZXhlY3V0ZV9jb2Rl?='), expect: MISMATCH },
  { group: 'base64', name: 'mixed-case marker =?Base64? with echo', body: EXEC(), headers: STD('=?Base64?ZWNobw==?='), expect: MISMATCH },
  { group: 'base64', name: 'space inside the encoding (ZXhl Y3V0...)', body: EXEC(), headers: STD('=?base64?ZXhl Y3V0ZV9jb2Rl?='), expect: MISMATCH },
  { group: 'base64', name: 'tab inside the encoding', body: EXEC(), headers: STD('=?base64?ZXhlY3V0\tZV9jb2Rl?='), expect: MISMATCH },
  { group: 'base64', name: 'space after the marker (=?base64? ZXhl...)', body: EXEC(), headers: STD('=?base64? ZXhlY3V0ZV9jb2Rl?='), expect: MISMATCH },
  // mbedtls_base64_decode allows spaces at the end of its input: the decoded value is the
  // denied name, which the body states too, so the policy decides.
  { group: 'base64', name: 'space before the end marker (...Rl ?=): not canonical', body: EXEC(), headers: STD('=?base64?ZXhlY3V0ZV9jb2Rl  ?='), expect: MISMATCH },
  { group: 'base64', name: 'whitespace around the value (optional whitespace)', body: EXEC(), headers: STD(' \t=?base64?ZXhlY3V0ZV9jb2Rl?= \t'), expect: DECIDED },
  { group: 'base64', name: 'whitespace around a plain echo', body: EXEC(), headers: STD('  echo  '), expect: MISMATCH },
  { group: 'base64', name: 'base64 of "execute_code\\0"', body: EXEC(), headers: STD(b64('execute_code\0')), expect: MISMATCH },
  { group: 'base64', name: 'base64 of " execute_code" (edge whitespace inside the encoding)', body: EXEC(), headers: STD(b64(' execute_code')), expect: MISMATCH },
  { group: 'base64', name: 'base64 of "echo\\0execute_code"', body: EXEC(), headers: STD(b64('echo\0execute_code')), expect: MISMATCH },
  { group: 'base64', name: 'base64 of the base64 of execute_code (decoded once only)', body: EXEC(), headers: STD(b64(b64('execute_code'))), expect: MISMATCH },
  { group: 'base64', name: 'a tool literally named =?base64?ZWNobw==?=, Mcp-Name: that literal (decodes to echo)', body: tc('=?base64?ZWNobw==?='),
    headers: STD('=?base64?ZWNobw==?='), expect: MISMATCH },
  { group: 'base64', name: 'a tool literally named =?base64?ZWNobw==?=, Mcp-Name: its base64: the policy decides (not listed)', body: tc('=?base64?ZWNobw==?='),
    headers: STD(b64('=?base64?ZWNobw==?=')), expect: DECIDED },

  // --- duplicates and comma-joined values
  { group: 'dup', name: 'Mcp-Name twice (echo, execute_code)', body: EXEC(), headers: [V, M, N('echo'), N('execute_code')], expect: MISMATCH },
  { group: 'dup', name: 'Mcp-Name twice (execute_code, echo)', body: EXEC(), headers: [V, M, N('execute_code'), N('echo')], expect: MISMATCH },
  { group: 'dup', name: 'Mcp-Name twice, the same value', body: EXEC(), headers: [V, M, N('execute_code'), N('execute_code')], expect: MISMATCH },
  { group: 'dup', name: 'Mcp-Method twice', body: EXEC(), headers: [V, M, M, N('execute_code')], expect: MISMATCH },
  { group: 'dup', name: 'MCP-Protocol-Version twice', body: EXEC(), headers: [V, V, M, N('execute_code')], expect: MISMATCH },
  { group: 'dup', name: 'Mcp-Name comma-joined "echo, execute_code"', body: EXEC(), headers: STD('echo, execute_code'), expect: MISMATCH },
  { group: 'dup', name: 'Mcp-Name comma-joined "execute_code,execute_code"', body: EXEC(), headers: STD('execute_code,execute_code'), expect: MISMATCH },
  { group: 'dup', name: 'Mcp-Method comma-joined "tools/call, tools/call"', body: EXEC(), headers: [V, ['Mcp-Method', 'tools/call, tools/call'], N('execute_code')], expect: MISMATCH },
  { group: 'dup', name: 'MCP-Protocol-Version comma-joined', body: EXEC(), headers: [['MCP-Protocol-Version', `${MODERN}, ${MODERN}`], M, N('execute_code')], expect: MISMATCH },

  // --- case: values are case-sensitive, header names are not
  { group: 'case', name: 'Mcp-Method: Tools/Call', body: EXEC(), headers: [V, ['Mcp-Method', 'Tools/Call'], N('execute_code')], expect: MISMATCH },
  { group: 'case', name: 'Mcp-Method: TOOLS/CALL', body: EXEC(), headers: [V, ['Mcp-Method', 'TOOLS/CALL'], N('execute_code')], expect: MISMATCH },
  { group: 'case', name: 'Mcp-Name: EXECUTE_CODE', body: EXEC(), headers: STD('EXECUTE_CODE'), expect: MISMATCH },
  { group: 'case', name: 'header names in lower case: the same headers, the policy decides', body: EXEC(),
    headers: [['mcp-protocol-version', MODERN], ['mcp-method', 'tools/call'], ['mcp-name', 'execute_code']], expect: DECIDED },
  { group: 'case', name: 'header names in upper and mixed case: the same headers, the policy decides', body: EXEC(),
    headers: [['MCP-PROTOCOL-VERSION', MODERN], ['MCP-METHOD', 'tools/call'], ['mCp-NaMe', 'execute_code']], expect: DECIDED },
  { group: 'case', name: 'Mcp-Name and MCP-NAME (execute_code, echo): one header given twice', body: EXEC(),
    headers: [V, M, N('execute_code'), ['MCP-NAME', 'echo']], expect: MISMATCH },
  { group: 'case', name: 'mcp-name: echo (odd-case name, allowed value)', body: EXEC(), headers: [V, M, ['mcp-name', 'echo']], expect: MISMATCH },

  // --- MCP-Protocol-Version against _meta
  { group: 'version', name: '2025-11-25 header over a 2026 body', body: EXEC(), headers: [['MCP-Protocol-Version', '2025-11-25'], M, N('execute_code')], expect: MISMATCH },
  { group: 'version', name: 'no version header over a 2026 body', body: EXEC(), headers: [M, N('execute_code')], expect: MISMATCH },
  { group: 'version', name: '2026 header over a claimless body', body: tc('execute_code', SHELL, { meta: null }), headers: STD('execute_code'), expect: NO_CLAIM },
  { group: 'version', name: '2026 header over a claimless body, in alice\'s 2025 session', body: tc('execute_code', SHELL, { meta: null }), headers: STD('execute_code'), session: 'own', expect: NO_CLAIM },
  { group: 'version', name: '2026 header over a claimless body, with root\'s session id', body: tc('execute_code', SHELL, { meta: null }), headers: STD('execute_code'), session: 'root', expect: NO_CLAIM },
  { group: 'version', name: 'an unknown 2026-era version (2099-01-01) in both', body: tc('execute_code', SHELL, { meta: { ...META, [PV]: '2099-01-01' } }),
    headers: [['MCP-Protocol-Version', '2099-01-01'], M, N('execute_code')], expect: x('400 -32022') },
  { group: 'version', name: 'a claimed version with a trailing space ("2026-07-28 "), plain header', body: tc('execute_code', SHELL, { meta: { ...META, [PV]: `${MODERN} ` } }),
    headers: STD('execute_code'), expect: MISMATCH },
  { group: 'version', name: 'a claimed version with a trailing space, header base64 of it', body: tc('execute_code', SHELL, { meta: { ...META, [PV]: `${MODERN} ` } }),
    headers: [['MCP-Protocol-Version', b64(`${MODERN} `)], M, N('execute_code')], expect: x('400 -32022') },
  { group: 'version', name: 'a 2025 version claimed in _meta (2025-11-25 in both)', body: tc('execute_code', SHELL, { meta: { ...META, [PV]: '2025-11-25' } }),
    headers: [['MCP-Protocol-Version', '2025-11-25'], M, N('execute_code')], expect: x('400 -32022') },

  // --- a modern request with a legacy Mcp-Session-Id: ignored, the grant of the token decides
  { group: 'session', name: 'alice\'s own 2025 session id', body: EXEC(), headers: STD('execute_code'), session: 'own', expect: DECIDED },
  { group: 'session', name: 'root\'s session id (an allow-all grant)', body: EXEC(), headers: STD('execute_code'), session: 'root', expect: DECIDED },
  { group: 'session', name: 'a garbage session id', body: EXEC(), headers: STD('execute_code'), session: 'garbage', expect: DECIDED },
  { group: 'session', name: 'own and root\'s comma-joined', body: EXEC(), headers: STD('execute_code'), session: 'ownroot', expect: DECIDED },
  // A session initialized asking for 2026-07-28 gets the latest 2025 version; its requests with
  // the claim are stateless on Streamable HTTP and 2025 on the channels, decided either way.
  { group: 'session', name: 'a session initialized asking for 2026-07-28, then the claim and 2026 headers', body: EXEC(), headers: STD('execute_code'),
    proto: MODERN, negotiated: '2025-11-25', expect: DECIDED },
  { group: 'session', name: 'a session initialized asking for 2026-07-28, then the claim with only a 2026 version header', body: EXEC(),
    headers: [V], proto: MODERN, negotiated: '2025-11-25', expect: MISMATCH },
  // The claim inside a 2025 session's request (a 2025 client's headers): the body is 2026, so
  // its headers must be 2026 ones.
  { group: 'session', name: 'the claim inside alice\'s 2025 session request (2025 headers)', body: EXEC(),
    headers: [['MCP-Protocol-Version', LEGACY]], session: 'own', expect: MISMATCH },
  { group: 'session', name: 'the claim inside alice\'s 2025 session request (no version header)', body: EXEC(), session: 'own', expect: MISMATCH },
  { group: 'session', name: 'the claim inside a request on root\'s 2025 session (2025 headers)', body: EXEC(),
    headers: [['MCP-Protocol-Version', LEGACY]], session: 'root', expect: MISMATCH },

  // --- the _meta claim itself
  { group: 'meta', name: 'duplicate _meta keys (claim, then a plain _meta)',
    body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":${JSON.stringify(SHELL)},"_meta":${JSON.stringify(META)},"_meta":{}}}`,
    headers: STD('execute_code'), expect: INVALID(-32700) },
  { group: 'meta', name: 'duplicate protocolVersion keys inside _meta',
    body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":${JSON.stringify(SHELL)},"_meta":{"${PV}":"${MODERN}","${PV}":"2025-11-25","${CAPS}":{}}}}`,
    headers: STD('execute_code'), expect: INVALID(-32700) },
  { group: 'meta', name: 'duplicate protocolVersion keys, one spelled with \\/',
    body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":${JSON.stringify(SHELL)},"_meta":{"${PV}":"${MODERN}","${PV.replace('/', '\\/')}":"2025-11-25","${CAPS}":{}}}}`,
    headers: STD('execute_code'), expect: INVALID(-32700) },
  { group: 'meta', name: 'protocolVersion and PROTOCOLVERSION (case twins) inside _meta',
    body: tc('execute_code', SHELL, { meta: { ...META, 'io.modelcontextprotocol/PROTOCOLVERSION': '2025-11-25' } }),
    headers: STD('execute_code'), expect: INVALID(-32600) },
  { group: 'meta', name: 'the claim at the top level, beside params',
    body: { ...tc('execute_code', SHELL, { meta: null }), _meta: META }, headers: STD('execute_code'), expect: INVALID(-32600) },
  { group: 'meta', name: 'the claim inside params.arguments._meta',
    body: tc('execute_code', { ...SHELL, _meta: META }, { meta: null }), headers: STD('execute_code'), expect: NO_CLAIM },
  { group: 'meta', name: 'the claim nested in params._meta._meta',
    body: tc('execute_code', SHELL, { meta: { _meta: META } }), headers: STD('execute_code'), expect: NO_CLAIM },
  { group: 'meta', name: 'the claim keys straight in params',
    body: tc('execute_code', SHELL, { meta: null, extra: META }), headers: STD('execute_code'), expect: NO_CLAIM },
  { group: 'meta', name: 'protocolVersion as a number', body: tc('execute_code', SHELL, { meta: { ...META, [PV]: 20260728 } }),
    headers: STD('execute_code'), expect: NO_CLAIM },
  { group: 'meta', name: 'protocolVersion null', body: tc('execute_code', SHELL, { meta: { ...META, [PV]: null } }),
    headers: STD('execute_code'), expect: NO_CLAIM },
  { group: 'meta', name: 'clientCapabilities missing', body: tc('execute_code', SHELL, { meta: { [PV]: MODERN } }),
    headers: STD('execute_code'), expect: NO_CLAIM },
  { group: 'meta', name: 'clientCapabilities as an array', body: tc('execute_code', SHELL, { meta: { [PV]: MODERN, [CAPS]: [] } }),
    headers: STD('execute_code'), expect: NO_CLAIM },
  { group: 'meta', name: '_meta as a string', body: tc('execute_code', SHELL, { meta: JSON.stringify(META) }),
    headers: STD('execute_code'), expect: NO_CLAIM },
  { group: 'meta', name: 'the claim key in another case only (ProtocolVersion)',
    body: tc('execute_code', SHELL, { meta: { 'io.modelcontextprotocol/ProtocolVersion': MODERN, [CAPS]: {} } }),
    headers: STD('execute_code'), expect: NO_CLAIM },

  // --- batches: never stateless; element by element in a 2025-03-26 session
  { group: 'batch', name: 'a 2026 batch [denied, allowed] with 2026 headers, no session',
    body: [EXEC(), tc('echo', { text: 'batch-ok' }, { id: 2 })], headers: STD('echo'),
    expect: x('400 -32600', { sse: '400 body:-32600 stream:-32600', ws: 'ws -32600' }) },
  { group: 'batch', name: 'a 2026 batch [denied, allowed] in a 2025-03-26 session, Mcp-Name: echo: element by element',
    body: [EXEC(), tc('echo', { text: 'batch-ok' }, { id: 2 })], headers: [['MCP-Protocol-Version', BATCHING], M, N('echo')], proto: BATCHING,
    expect: x('200 [-32001,result]', { sse: '202 stream:[-32001,result]', ws: 'ws [-32001,result]' }),
    check: (recs) => assert.equal(echoesIn(recs).length, 1, 'the allowed element reached the stand-in') },
  { group: 'batch', name: 'a 2026 batch [denied, allowed] on root\'s 2025-03-26 session (an allow-all grant)',
    body: [EXEC(), tc('echo', { text: 'batch-ok' }, { id: 2 })], headers: [['MCP-Protocol-Version', BATCHING]], session: 'root0326',
    expect: x('404 -32600', { sse: '400 body:-32600 stream:-32600', ws: 'ws -32600' }) },
  { group: 'batch', name: 'a 2026 batch [allowed, denied] in a 2025-03-26 session, no Mcp-* headers',
    body: [tc('echo', { text: 'batch-ok' }, { id: 2 }), EXEC()], headers: [['MCP-Protocol-Version', BATCHING]], proto: BATCHING,
    expect: x('200 [-32001,result]', { sse: '202 stream:[-32001,result]', ws: 'ws [-32001,result]' }),
    check: (recs) => assert.equal(echoesIn(recs).length, 1, 'the allowed element reached the stand-in') },

  // --- params.name smuggling against the header
  { group: 'smuggle', name: 'body "execute\\u005fcode", Mcp-Name: echo',
    body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute\\u005fcode","arguments":${JSON.stringify(SHELL)},"_meta":${JSON.stringify(META)}}}`,
    headers: STD('echo'), expect: MISMATCH },
  { group: 'smuggle', name: 'body "execute\\u005fcode", Mcp-Name: execute_code (the decoded name)',
    body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute\\u005fcode","arguments":${JSON.stringify(SHELL)},"_meta":${JSON.stringify(META)}}}`,
    headers: STD('execute_code'), expect: DECIDED },
  { group: 'smuggle', name: 'body "\\u0065xecute_code" fully escaped start, Mcp-Name: echo',
    body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\\u0065\\u0078ecute_code","arguments":${JSON.stringify(SHELL)},"_meta":${JSON.stringify(META)}}}`,
    headers: STD('echo'), expect: MISMATCH },
  { group: 'smuggle', name: 'homoglyph body "executе_code", Mcp-Name: echo', body: tc(HOMOGLYPH), headers: STD('echo'), expect: MISMATCH },
  { group: 'smuggle', name: 'homoglyph body, Mcp-Name: execute_code (ASCII)', body: tc(HOMOGLYPH), headers: STD('execute_code'), expect: MISMATCH },
  { group: 'smuggle', name: 'homoglyph body, Mcp-Name: its base64: the policy decides (not listed)', body: tc(HOMOGLYPH), headers: STD(b64(HOMOGLYPH)), expect: DECIDED },
  { group: 'smuggle', name: 'homoglyph body, Mcp-Name: raw UTF-8 (not base64-encoded)', body: tc(HOMOGLYPH), headers: STD(latin1(HOMOGLYPH)), expect: MISMATCH },
  { group: 'smuggle', name: 'fullwidth low line "execute＿code", Mcp-Name: its base64', body: tc('execute\uff3fcode'), headers: STD(b64('execute\uff3fcode')), expect: DECIDED },
  { group: 'smuggle', name: 'zero-width space "execute\\u200b_code", Mcp-Name: execute_code', body: tc('execute\u200b_code'), headers: STD('execute_code'), expect: MISMATCH },
  { group: 'smuggle', name: 'duplicate params.name (echo, execute_code), Mcp-Name: echo',
    body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"execute_code","arguments":${JSON.stringify({ ...SHELL, text: 'x' })},"_meta":${JSON.stringify(META)}}}`,
    headers: STD('echo'), expect: INVALID(-32700) },
  { group: 'smuggle', name: 'case twin params.Name: execute_code beside name: echo, Mcp-Name: echo',
    body: tc('echo', { ...SHELL, text: 'x' }, { extra: { Name: 'execute_code' } }), headers: STD('echo'), expect: INVALID(-32600) },

  // --- MRTR fields on a call to the stand-in, which never asks for input
  { group: 'mrtr', name: 'a forged requestState on the denied call', body: tc('execute_code', SHELL, { extra: { requestState: 'eyJmb3JnZWQiOnRydWV9' } }),
    headers: STD('execute_code'), expect: x('200 -32602') },
  { group: 'mrtr', name: 'a forged requestState and inputResponses on the denied call',
    body: tc('execute_code', SHELL, { extra: { requestState: 'AAAA' + 'A'.repeat(60), inputResponses: { 'input-1': { action: 'accept', content: {} } } } }),
    headers: STD('execute_code'), expect: x('200 -32602') },
  { group: 'mrtr', name: 'requestState as a number', body: tc('execute_code', SHELL, { extra: { requestState: 1 } }),
    headers: STD('execute_code'), expect: x('200 -32602') },
  { group: 'mrtr', name: 'requestState empty', body: tc('execute_code', SHELL, { extra: { requestState: '' } }),
    headers: STD('execute_code'), expect: x('200 -32602') },
  { group: 'mrtr', name: 'inputResponses without requestState on the denied call: dropped, then decided',
    body: tc('execute_code', SHELL, { extra: { inputResponses: { 'input-1': { action: 'accept', content: { ok: true } } } } }),
    headers: STD('execute_code'), expect: DECIDED },
  { group: 'mrtr', name: 'inputResponses as an array, without requestState, on the denied call',
    body: tc('execute_code', SHELL, { extra: { inputResponses: [{ action: 'accept' }] } }), headers: STD('execute_code'), expect: DECIDED },
  {
    group: 'mrtr', name: 'inputResponses without requestState on an allowed echo: dropped before the upstream', harmless: true,
    body: tc('echo', { text: 'mrtr' }, { extra: { inputResponses: { 'input-1': { action: 'accept', content: {} } } } }),
    headers: STD('echo'), expect: x('200 result', { sse: '202 stream:result', ws: 'ws result' }),
    check: (recs, kind) => {
      const [e] = echoesIn(recs);
      assert.ok(e, 'the echo reached the stand-in');
      if (kind === 'mcp') assert.equal(e.msg.params.inputResponses, undefined, `inputResponses dropped: ${e.body}`);
    },
  },
  {
    group: 'mrtr', name: 'a forged requestState on an allowed echo', harmless: true,
    body: tc('echo', { text: 'mrtr' }, { extra: { requestState: 'eyJmb3JnZWQiOnRydWV9' } }),
    headers: STD('echo'), expect: x('200 -32602', { sse: '202 stream:result', ws: 'ws result' }),
    check: (recs, kind) => {
      if (kind === 'mcp') assert.deepEqual(echoesIn(recs), [], 'a refused retry never reaches the stand-in');
    },
  },

  // --- other shapes
  { group: 'envelope', name: 'a 2026 tools/call without an id (a notification)', body: { ...EXEC(), id: undefined }, headers: STD('execute_code'),
    expect: x('400 -32600', { sse: '202 stream:-32600', ws: 'ws -32600' }) },
  { group: 'envelope', name: 'two JSON values: an allowed 2026 echo, then the denied call', body: JSON.stringify(tc('echo', { text: 'a' })) + JSON.stringify(EXEC()),
    headers: STD('echo'), expect: INVALID(-32700) },
  { group: 'envelope', name: 'Mcp-Param-Language: python over the shell call (not a marked argument: not the decision)', body: EXEC(),
    headers: [...STD('execute_code'), ['Mcp-Param-Language', 'python']], expect: DECIDED },
  { group: 'envelope', name: 'run_command with agreeing headers', body: tc('run_command', { command: 'id' }), headers: STD('run_command'), expect: DECIDED },
  { group: 'envelope', name: 'the hidden delete_file with agreeing headers', body: tc('delete_file', { path: '/etc/passwd' }), headers: STD('delete_file'), expect: DECIDED },
  { group: 'envelope', name: 'the non-standard method shutdown as a 2026 request',
    body: { jsonrpc: '2.0', id: 1, method: 'shutdown', params: { _meta: META } }, headers: [V, ['Mcp-Method', 'shutdown']],
    expect: x('404 -32601') }, // what a 2026 server answers an unknown method; the channels' 2025 sessions keep -32001
];

// ---------------------------------------------------------------------------

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-bypass2026-');
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  const policy = path.join(dir, 'bypass-policy.json');
  fs.writeFileSync(policy, JSON.stringify(POLICY, null, 2) + '\n');
  const allowAll = path.join(dir, 'root-allow-all.json');
  fs.writeFileSync(allowAll, '{"version":"1","default":"allow"}\n');
  const conf = H.writeConf(dir, {
    listeners: [{}],
    admin: true,
    limits: { body_bytes: 1 << 20 },
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
  const f = H.makeFetch({ cleanup, keepAlive: true });
  const url = (p) => `http://127.0.0.1:${gw.plainPort}${p}`;
  sids.alice = {};
  for (const ep of mcpEndpoints) {
    sids.alice[ep.path] = (await H.rawInitialize(f, url(ep.path), { authorization: `Bearer ${ALICE}` })).sessionId;
  }
  sids.root = (await H.rawInitialize(f, url('/cowork-os/mcp'), { authorization: `Bearer ${ROOT}` })).sessionId;
  const r0326 = await H.postRaw(f, url('/cowork-os/mcp'), initBody(1, BATCHING), { authorization: `Bearer ${ROOT}` });
  assert.equal(r0326.messages[0]?.result?.protocolVersion, BATCHING, r0326.text);
  sids.root0326 = r0326.headers.get('mcp-session-id');
  for (const v of [...Object.values(sids.alice), sids.root, sids.root0326]) assert.ok(v, 'a session id');
});

after(async () => {
  if (results.length) {
    const w0 = Math.max(...results.map((r) => r.endpoint.length));
    const w1 = Math.max(...results.map((r) => r.trick.length));
    const lines = [`bypass2026: ${TRICKS.length} tricks x ${ENDPOINTS.length} endpoints: ${results.filter((r) => r.ok).length}/${results.length} held ` +
      '(up = requests the stand-in received during the trick, before the controls)',
      `${'endpoint'.padEnd(w0)}  ${'trick'.padEnd(w1)}  verdict  up  outcome`];
    for (const r of results) {
      lines.push(`${r.endpoint.padEnd(w0)}  ${r.trick.padEnd(w1)}  ${r.ok ? 'held   ' : 'FAILED '}  ${String(r.arrived ?? '?').padStart(2)}  ${r.outcome}${r.note ? `  -- ${r.note.slice(0, 400)}` : ''}`);
    }
    process.stdout.write(lines.join('\n') + '\n');
  }
  await cleanup.run();
});

describe('the log checker', () => {
  it('flags denied records and passes allowed ones', () => selfTestChecker());
  it('every trick names its outcome on every kind of endpoint', () => {
    for (const t of TRICKS) {
      for (const k of ['mcp', 'sse', 'ws']) assert.equal(typeof t.expect?.[k], 'string', `${t.name}: expect.${k}`);
    }
  });
});

for (const ep of ENDPOINTS) {
  describe(`2026-07-28 bypass tricks on ${ep.name}`, () => {
    let ctx;
    before(async () => { ctx = await ep.open(); });

    it('controls: the allowed 2026 calls arrive (the claim stripped on Streamable HTTP), the denied one is refused', H.withLogs(logs, async () => {
      const mark = allRecords().length;
      const send = (t) => ep.send(ctx, t);
      const want = (mcp, ch) => (ep.kind === 'mcp' ? mcp : ep.kind === 'sse' ? `202 stream:${ch}` : `ws ${ch}`);
      const echo = await send({ name: 'control echo', body: tc('echo', { text: 'hello' }), headers: STD('echo') });
      assert.equal(echo.outcome, want('200 result', 'result'), JSON.stringify(echo.messages));
      assert.equal(H.resultText(echo.messages[0]?.result), 'hello');
      if (ep.kind === 'mcp') assert.equal(echo.messages[0].result.resultType, 'complete', 'a 2026 result');
      const py = await send({ name: 'control python', body: tc('execute_code', PY), headers: STD('execute_code') });
      assert.equal(py.outcome, want('200 result', 'result'), JSON.stringify(py.messages));
      const shell = await send({ name: 'control shell', body: EXEC(), headers: STD('execute_code') });
      assert.equal(shell.outcome, want('200 -32001', '-32001'), JSON.stringify(shell.messages));
      assert.equal(shell.messages[0]?.error?.data?.rule, 'python only', JSON.stringify(shell.messages));
      const seen = allRecords().slice(mark).filter((r) => r.event === undefined);
      assert.ok(seen.some((r) => r.msg?.params?.name === 'echo'), 'the echo reached the stand-in');
      assert.ok(seen.some((r) => r.msg?.params?.name === 'execute_code' && r.msg.params.arguments.language === 'python'),
        'execute_code python reached the stand-in');
      const claims = seen.filter((r) => r.msg?.params?._meta?.[PV] !== undefined);
      if (ep.kind === 'mcp') assert.deepEqual(claims.map((r) => r.body), [], 'a 2025 upstream never hears the 2026 claim');
      assert.deepEqual(logViolations(allRecords()), [], 'nothing denied so far');
      await ep.control(ctx, 'the controls');
    }));

    for (const trick of TRICKS) {
      it(`[${trick.group}] ${trick.name}`, H.withLogs(logs, async () => {
        const mark = allRecords().length;
        let outcome = '?';
        let ok = false;
        let note;
        let arrived;
        try {
          const r = await ep.send(ctx, trick);
          outcome = r.outcome;
          note = r.note;
          const during = allRecords().slice(mark);
          arrived = during.filter((x) => x.event === undefined).length;
          const bad = logViolations(during);
          if (bad.length) {
            outcome += ' + REACHED THE STAND-IN';
            note = bad.join(' | ');
          }
          assert.deepEqual(bad, [], `${trick.name}: a denied call reached the stand-in`);
          assert.equal(outcome, trick.expect[ep.kind], `${trick.name}: the reply (${JSON.stringify(r.messages).slice(0, 400)})`);
          if (!trick.harmless && !trick.check) assert.equal(arrived, 0, `${trick.name}: nothing reached the stand-in`);
          trick.check?.(during, ep.kind);
          await r.after?.();
          await ep.control(ctx, trick.name);
          ok = true;
        } finally {
          if (!ok && !note) note = 'assertion failed';
          results.push({ endpoint: ep.name, trick: `[${trick.group}] ${trick.name}`, outcome, ok, note, arrived });
        }
      }));
    }

    it('at the end: nothing denied in the whole stand-in log, tollgate is healthy', H.withLogs(logs, async () => {
      assert.deepEqual(logViolations(allRecords()), [], 'the stand-in log has nothing denied');
      assert.equal(gw.proc.exitCode, null, `tollgate still running: ${gw.status()}`);
      gw.assertNoSanitizerReport();
    }));
  });
}
