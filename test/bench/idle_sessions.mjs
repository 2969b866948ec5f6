// idle_sessions.mjs — the client of test/bench/memory.sh: opens COUNT MCP sessions on one
// client transport of tollgate, leaves them idle, and closes them when told to.
//
//   node test/bench/idle_sessions.mjs --transport T --base URL --count N [--batch B]
//
//   T = http        Streamable HTTP: initialize + notifications/initialized, then the session
//                   keeps its keep-alive connection open, idle
//       http-close  the same, but each request on its own connection (Connection: close): the
//                   sessions live on in tollgate with no connection (what a session alone weighs)
//       http-get    Streamable HTTP with the session's GET stream open (on its one connection;
//                   needs an upstream that serves GET, and initialize = "forward")
//       sse         legacy HTTP+SSE: the GET /sse stream stays open; initialize and
//                   notifications/initialized are POSTed on a small shared keep-alive pool
//       ws          WebSocket (subprotocol mcp): the socket stays open
//   URL = http(s)://127.0.0.1:PORT/NAME (https: certificates are not checked: a throwaway one)
//
// Sessions are opened B at a time (default 200). Then it prints "READY <sessions> <ms>" and waits;
// a line "close" (or end of stdin) closes every connection, prints "CLOSED" and exits 0. Any
// failure prints "ERROR ..." and exits 1. One process holds every socket (ulimit -n must allow it).

import http from 'node:http';
import https from 'node:https';
import readline from 'node:readline';
import { WebSocket } from 'ws';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const transport = args.transport;
const base = new URL(args.base ?? '');
const count = Number(args.count ?? 10000);
const batch = Number(args.batch ?? 200);
const PROTO = '2025-06-18';
const tls = base.protocol === 'https:';
const mod = tls ? https : http;
const tlsOpts = tls ? { rejectUnauthorized: false } : {};

function fail(msg) {
  process.stdout.write(`ERROR ${msg}\n`);
  process.exit(1);
}
if (!['http', 'http-close', 'http-get', 'sse', 'ws'].includes(transport)) fail(`bad --transport ${transport}`);

const initBody = (id) =>
  JSON.stringify({
    jsonrpc: '2.0',
    id,
    method: 'initialize',
    params: { protocolVersion: PROTO, capabilities: {}, clientInfo: { name: 'idle-sessions', version: '1' } },
  });
const initializedBody = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' });

// Everything that must be closed at the end.
const sockets = new Set();
const agents = [];

// One HTTP request; resolves with { status, headers, body } once the whole answer is read,
// or with { status, headers, res } as soon as the head arrives when stream is set.
function request(path, { method = 'POST', headers = {}, body, agent, stream = false }) {
  return new Promise((resolve, reject) => {
    const req = mod.request(
      { host: base.hostname, port: base.port, path, method, headers, agent, ...tlsOpts },
      (res) => {
        if (stream) {
          resolve({ status: res.statusCode, headers: res.headers, res });
          return;
        }
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
        res.on('error', reject);
      },
    );
    req.on('socket', (s) => {
      if (sockets.has(s)) return; // a keep-alive socket reused
      sockets.add(s);
      s.once('close', () => sockets.delete(s));
    });
    req.on('error', reject);
    if (body !== undefined) req.end(body);
    else req.end();
  });
}

const jsonHeaders = (extra = {}) => ({
  'Content-Type': 'application/json',
  Accept: 'application/json, text/event-stream',
  ...extra,
});

// Reads SSE events from a response and hands each to onEvent(event, data).
function sseEvents(res, onEvent) {
  let buf = '';
  res.setEncoding('utf8');
  res.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let ev = '';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) ev = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) onEvent(ev, data.join('\n'));
    }
  });
}

async function streamableSession(i) {
  const path = `${base.pathname}/mcp`;
  let agent;
  if (transport === 'http-close') agent = false;
  else {
    agent = new mod.Agent({ keepAlive: true, maxSockets: 1 });
    agents.push(agent);
  }
  const conn = transport === 'http-close' ? { Connection: 'close' } : {};
  const r1 = await request(path, { headers: jsonHeaders(conn), body: initBody(1), agent });
  if (r1.status !== 200 || !r1.body.includes('"result"')) fail(`session ${i}: initialize: HTTP ${r1.status} ${r1.body.slice(0, 200)}`);
  const sid = r1.headers['mcp-session-id'];
  if (!sid) fail(`session ${i}: no Mcp-Session-Id`);
  const h = { 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': PROTO, ...conn };
  const r2 = await request(path, { headers: jsonHeaders(h), body: initializedBody, agent });
  if (r2.status !== 202 && r2.status !== 200) fail(`session ${i}: notifications/initialized: HTTP ${r2.status}`);
  if (transport === 'http-get') {
    const r3 = await request(path, {
      method: 'GET',
      headers: { Accept: 'text/event-stream', 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': PROTO },
      agent,
      stream: true,
    });
    if (r3.status !== 200) fail(`session ${i}: GET stream: HTTP ${r3.status}`);
    r3.res.on('data', () => {});
    r3.res.on('end', () => fail(`session ${i}: the GET stream ended`));
  }
}

const postAgent = new mod.Agent({ keepAlive: true, maxSockets: 32 });
agents.push(postAgent);

async function sseSession(i) {
  const r = await request(`${base.pathname}/sse`, {
    method: 'GET',
    headers: { Accept: 'text/event-stream' },
    agent: false,
    stream: true,
  });
  if (r.status !== 200) fail(`session ${i}: GET /sse: HTTP ${r.status}`);
  let endpoint;
  let gotEndpoint, gotInit;
  const endpointP = new Promise((res) => (gotEndpoint = res));
  const initP = new Promise((res) => (gotInit = res));
  sseEvents(r.res, (ev, data) => {
    if (ev === 'endpoint') {
      endpoint = data.startsWith('http') ? new URL(data).pathname + new URL(data).search : data;
      gotEndpoint();
    } else if (data.includes('"id":1') && data.includes('"result"')) gotInit();
  });
  r.res.on('end', () => fail(`session ${i}: the SSE stream ended`));
  await endpointP;
  const p1 = await request(endpoint, { headers: jsonHeaders(), body: initBody(1), agent: postAgent });
  if (p1.status !== 202) fail(`session ${i}: POST initialize: HTTP ${p1.status} ${p1.body}`);
  await initP;
  const p2 = await request(endpoint, { headers: jsonHeaders(), body: initializedBody, agent: postAgent });
  if (p2.status !== 202) fail(`session ${i}: POST notifications/initialized: HTTP ${p2.status}`);
}

async function wsSession(i) {
  const url = `${tls ? 'wss' : 'ws'}://${base.host}${base.pathname}/ws`;
  const ws = new WebSocket(url, 'mcp', { perMessageDeflate: false, ...tlsOpts });
  await new Promise((res, rej) => {
    ws.once('open', res);
    ws.once('error', rej);
    ws.once('unexpected-response', (_q, resp) => rej(new Error(`HTTP ${resp.statusCode}`)));
  });
  if (ws.protocol !== 'mcp') fail(`session ${i}: subprotocol "${ws.protocol}"`);
  sockets.add(ws);
  const inited = new Promise((res) =>
    ws.on('message', (m) => {
      const s = m.toString();
      if (s.includes('"id":1') && s.includes('"result"')) res();
    }),
  );
  ws.send(initBody(1));
  await inited;
  ws.send(initializedBody);
  ws.on('close', (code) => {
    if (!closing) fail(`session ${i}: the WebSocket closed (${code})`);
  });
}

let closing = false;
const open = { http: streamableSession, 'http-close': streamableSession, 'http-get': streamableSession, sse: sseSession, ws: wsSession }[transport];

const t0 = Date.now();
for (let i = 0; i < count; i += batch) {
  const n = Math.min(batch, count - i);
  try {
    await Promise.all(Array.from({ length: n }, (_, k) => open(i + k)));
  } catch (e) {
    fail(`sessions ${i}..${i + n - 1}: ${e.message}`);
  }
  if ((i / batch) % 10 === 9) process.stderr.write(`  ${i + n} sessions open\n`);
}
// The POST pool of legacy SSE is not per session: let it go, so only the streams stay.
if (transport === 'sse') postAgent.destroy();
process.stdout.write(`READY ${count} ${Date.now() - t0}\n`);

function closeAll() {
  if (closing) return;
  closing = true;
  for (const s of sockets) {
    if (s instanceof WebSocket) s.terminate();
    else s.destroy();
  }
  for (const a of agents) a.destroy();
  process.stdout.write('CLOSED\n');
  setTimeout(() => process.exit(0), 100);
}
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (l) => {
  if (l.trim() === 'close') closeAll();
});
rl.on('close', closeAll);
