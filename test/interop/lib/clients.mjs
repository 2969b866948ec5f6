// Small MCP clients over each client transport tollgate serves, with one interface, for tests and
// measuring tools that need many calls at once on keep-alive connections (drain.test.mjs,
// test/bench/stall.mjs, test/bench/soak.mjs). Node standard library plus the `ws` package.
//
//   const c = await openClient(kind, { port, upstream, token, agent });
//   const answer = await c.call('echo', { text: 'x' });   // the JSON-RPC answer message
//   await c.call('echo', null, { raw: '{"text":"x","n":1e0}' }); // the arguments as this exact JSON text
//   const list = await c.request('tools/list', {});        // any request method, same answer shape
//                                                           // (c.rpc is the same function)
//   await c.close();
//
// kind: 'streamable' (2025 session: initialize, Mcp-Session-Id), 'stateless' (2026-07-28: _meta
// and the Mcp-* headers on every request, no session), 'sse' (legacy GET /NAME/sse + POST
// /NAME/messages), 'ws' (GET /NAME/ws, subprotocol mcp). Every answer is the JSON-RPC message whose
// id is the call's; a transport failure rejects the call's promise with an Error whose `kind` is
// 'http' (with `status`), 'closed' (the stream or socket ended first) or 'timeout'.

import http from 'node:http';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'package.json'));
let WebSocketClass;
function wsClass() {
  WebSocketClass ??= require('ws');
  return WebSocketClass;
}

export const MODERN = '2026-07-28';
export const META = {
  'io.modelcontextprotocol/protocolVersion': MODERN,
  'io.modelcontextprotocol/clientCapabilities': {},
};

const fail = (kind, message, extra = {}) => Object.assign(new Error(message), { kind, ...extra });

/** One HTTP request on `agent`; resolves { status, headers, text }. */
export function request(agent, port, method, p, headers = {}, body, { timeout = 30000 } = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (body != null) h['content-length'] = Buffer.byteLength(body);
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers: h, agent }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', (e) => reject(fail('closed', `${method} ${p}: response broke: ${e.message}`)));
      res.on('aborted', () => reject(fail('closed', `${method} ${p}: response aborted`)));
    });
    req.setTimeout(timeout, () => req.destroy(fail('timeout', `${method} ${p}: no answer within ${timeout} ms`)));
    req.on('error', (e) => reject(e.kind ? e : fail('closed', `${method} ${p}: ${e.code ?? ''} ${e.message}`, { code: e.code })));
    req.end(body ?? undefined);
  });
}

/** The JSON-RPC messages of a JSON or SSE body. */
export function messagesOf(r) {
  const ct = String(r.headers['content-type'] ?? '');
  if (ct.includes('text/event-stream')) {
    const out = [];
    for (const block of r.text.split(/\r?\n\r?\n/)) {
      const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, ''));
      if (!data.length) continue;
      try { out.push(JSON.parse(data.join('\n'))); } catch { out.push({ unparsable: data.join('\n') }); }
    }
    return out;
  }
  if (!r.text) return [];
  try { const j = JSON.parse(r.text); return Array.isArray(j) ? j : [j]; } catch { return [{ unparsable: r.text.slice(0, 200) }]; }
}

const isAnswer = (id) => (m) => m && m.id === id && ('result' in m || 'error' in m);
const initBody = (id, protocolVersion) => ({
  jsonrpc: '2.0', id, method: 'initialize',
  params: { protocolVersion, capabilities: {}, clientInfo: { name: 'tollgate-ops', version: '1.0.0' } },
});

let seq = 0;
const nextId = (kind) => `${kind}-${process.pid}-${++seq}`;

// A request's text; with `raw` (tools/call), params.arguments is that JSON text as it is (its key
// order, number spelling and spacing), for tests of what makes two calls the same.
const RAW = '\u0000raw-arguments\u0000';
function requestText(id, method, params, raw) {
  const p = raw == null ? params : { ...params, arguments: RAW };
  const text = JSON.stringify({ jsonrpc: '2.0', id, method, params: p });
  return raw == null ? text : text.replace(JSON.stringify(RAW), () => raw);
}

async function streamableClient({ port, upstream, token, agent, stateless }) {
  agent ??= new http.Agent({ keepAlive: true });
  const url = `/${upstream}/mcp`;
  const base = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
  if (token) base.authorization = `Bearer ${token}`;
  let headers = base;
  if (!stateless) {
    const r = await request(agent, port, 'POST', url, base, JSON.stringify(initBody('init', '2025-06-18')));
    if (r.status !== 200) throw fail('http', `initialize: HTTP ${r.status} ${r.text.slice(0, 200)}`, { status: r.status });
    const pv = messagesOf(r)[0]?.result?.protocolVersion ?? '2025-06-18';
    headers = { ...base, 'mcp-protocol-version': pv, 'mcp-session-id': r.headers['mcp-session-id'] };
    const n = await request(agent, port, 'POST', url, headers, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    if (n.status !== 202 && n.status !== 200) throw fail('http', `initialized: HTTP ${n.status}`, { status: n.status });
  }
  const client = {
    kind: stateless ? 'stateless' : 'streamable',
    sessionId: headers['mcp-session-id'],
    async request(method, p = {}, { timeout = 30000, raw } = {}) {
      const id = nextId('s');
      const params = stateless ? { ...p, _meta: { ...META, ...(p._meta ?? {}) } } : p; // the caller's _meta wins
      let h = headers;
      if (stateless) {
        h = { ...headers, 'mcp-protocol-version': MODERN, 'mcp-method': method };
        const named = method === 'tools/call' || method === 'prompts/get' ? p.name : method === 'resources/read' ? p.uri : undefined;
        if (named !== undefined) h['mcp-name'] = named;
      }
      const r = await request(agent, port, 'POST', url, h, requestText(id, method, params, raw), { timeout });
      const a = messagesOf(r).find(isAnswer(id));
      if (!a) throw fail('http', `${method}: HTTP ${r.status} without an answer: ${r.text.slice(0, 300)}`, { status: r.status, text: r.text });
      return a;
    },
    call(name, args = {}, opts = {}) {
      return client.request('tools/call', { name, arguments: args }, opts);
    },
    async close() {
      if (!stateless && headers['mcp-session-id']) {
        try { await request(agent, port, 'DELETE', url, headers, null, { timeout: 3000 }); } catch { /* gone */ }
      }
    },
  };
  client.rpc = client.request;
  return client;
}

/** Calls waiting for their answer on a stream, by id. */
function pendingTable(kind) {
  const waiting = new Map();
  return {
    add(id, timeout) {
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => { waiting.delete(id); reject(fail('timeout', `${kind}: no answer to ${id} within ${timeout} ms`)); }, timeout);
        waiting.set(id, { resolve, reject, t });
      });
    },
    answer(m) {
      const w = m && waiting.get(m.id);
      if (!w || !('result' in m || 'error' in m)) return false;
      waiting.delete(m.id);
      clearTimeout(w.t);
      w.resolve(m);
      return true;
    },
    closeAll(why) {
      for (const [id, w] of waiting) { clearTimeout(w.t); w.reject(fail('closed', `${kind}: ${why} before the answer to ${id}`)); }
      waiting.clear();
    },
    get size() { return waiting.size; },
  };
}

async function sseClient({ port, upstream, token, agent }) {
  agent ??= new http.Agent({ keepAlive: true });
  const auth = token ? { authorization: `Bearer ${token}` } : {};
  const pend = pendingTable('sse');
  let endpoint;
  let gotEndpoint;
  const endpointP = new Promise((resolve, reject) => { gotEndpoint = { resolve, reject }; });
  let closed = false;
  let closedWhy = '';
  const req = http.request({ host: '127.0.0.1', port, method: 'GET', path: `/${upstream}/sse`, headers: { ...auth, accept: 'text/event-stream' }, agent: false });
  const ended = (why) => {
    if (closed) return;
    closed = true;
    closedWhy = why;
    gotEndpoint.reject(fail('closed', `sse: ${why} before the endpoint event`));
    pend.closeAll(`the stream ended (${why})`);
  };
  req.on('error', (e) => ended(e.message));
  req.on('response', (res) => {
    if (res.statusCode !== 200) { ended(`HTTP ${res.statusCode}`); res.resume(); return; }
    res.setEncoding('utf8');
    let buf = '';
    res.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i).replace(/^\r?\n\r?\n/, '');
        let event = 'message';
        const data = [];
        for (const line of block.split(/\r?\n/)) {
          if (line.startsWith('event:')) event = line.slice(6).trim();
          else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
        }
        if (!data.length) continue;
        if (event === 'endpoint') { endpoint = data.join('\n'); gotEndpoint.resolve(); continue; }
        try { pend.answer(JSON.parse(data.join('\n'))); } catch { /* not JSON: not an answer */ }
      }
    });
    res.on('end', () => ended('the server ended the stream'));
    res.on('close', () => ended('the connection closed'));
  });
  req.end();
  await endpointP;
  const post = async (body, text) => {
    const r = await request(agent, port, 'POST', endpoint, { ...auth, 'content-type': 'application/json' }, text ?? JSON.stringify(body));
    if (r.status !== 202) throw fail('http', `POST ${endpoint}: HTTP ${r.status} ${r.text.slice(0, 200)}`, { status: r.status, text: r.text });
  };
  const send = async (body, timeout, text) => {
    const p = pend.add(body.id, timeout);
    try { await post(body, text); } catch (e) { p.catch(() => {}); pend.answer({ id: body.id, error: {} }); throw e; }
    return p;
  };
  const init = await send(initBody('init', '2024-11-05'), 10000);
  if (!init.result) throw fail('http', `sse initialize: ${JSON.stringify(init)}`);
  await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  const client = {
    kind: 'sse',
    get closed() { return closed; },
    get closedWhy() { return closedWhy; },
    request(method, params = {}, { timeout = 30000, raw } = {}) {
      const id = nextId('e');
      return send({ id }, timeout, requestText(id, method, params, raw));
    },
    call(name, args = {}, opts = {}) {
      return client.request('tools/call', { name, arguments: args }, opts);
    },
    async close() { req.destroy(); },
  };
  client.rpc = client.request;
  return client;
}

async function wsClient({ port, upstream, token }) {
  const WebSocket = wsClass();
  const pend = pendingTable('ws');
  const ws = new WebSocket(`ws://127.0.0.1:${port}/${upstream}/ws`, ['mcp'], {
    headers: token ? { authorization: `Bearer ${token}` } : {}, perMessageDeflate: false, maxPayload: 0,
  });
  let closed = false;
  let closedWhy = '';
  ws.on('message', (data) => { try { pend.answer(JSON.parse(data.toString('utf8'))); } catch { /* not JSON */ } });
  ws.on('close', (code, reason) => { closed = true; closedWhy = `close ${code} ${reason}`; pend.closeAll(`the WebSocket closed (${code} ${reason})`); });
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', (e) => reject(fail('closed', `ws: ${e.message}`)));
    ws.once('unexpected-response', (q, res) => reject(fail('http', `ws handshake: HTTP ${res.statusCode}`, { status: res.statusCode })));
  });
  ws.on('error', () => {});
  const send = (body, timeout, text) => {
    if (closed) return Promise.reject(fail('closed', `ws: closed (${closedWhy})`));
    const p = pend.add(body.id, timeout);
    ws.send(text ?? JSON.stringify(body));
    return p;
  };
  const init = await send(initBody('init', '2025-06-18'), 10000);
  if (!init.result) throw fail('http', `ws initialize: ${JSON.stringify(init)}`);
  ws.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
  const client = {
    kind: 'ws',
    get closed() { return closed; },
    get closedWhy() { return closedWhy; },
    request(method, params = {}, { timeout = 30000, raw } = {}) {
      const id = nextId('w');
      return send({ id }, timeout, requestText(id, method, params, raw));
    },
    call(name, args = {}, opts = {}) {
      return client.request('tools/call', { name, arguments: args }, opts);
    },
    async close() {
      if (closed) return;
      ws.close();
      await Promise.race([new Promise((r) => ws.once('close', r)), new Promise((r) => setTimeout(r, 2000))]);
      ws.terminate();
    },
  };
  client.rpc = client.request;
  return client;
}

export const KINDS = ['streamable', 'stateless', 'sse', 'ws'];

/** Opens a client of `kind` (see the top of the file) to tollgate's `port`, upstream `upstream`. */
export function openClient(kind, opts) {
  switch (kind) {
    case 'streamable': return streamableClient(opts);
    case 'stateless': return streamableClient({ ...opts, stateless: true });
    case 'sse': return sseClient(opts);
    case 'ws': return wsClient(opts);
    default: throw new Error(`openClient: unknown kind ${kind}`);
  }
}

/** The text of a tools/call answer's result, or undefined when it is an error. */
export const textOf = (a) => a?.result?.content?.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
