// HTTP/1.1 pipelining to an upstream (`upstreams[].pool.pipeline`) with real peers:
//   - the SDK client through tollgate to real SDK upstreams with `pool = { size = 2; pipeline = 8; }`:
//     the CoWork OS stand-in over HTTP (`initialize = "local"`) and server-everything
//     (streamableHttp); 8 clients x 40 concurrent echo calls each, every answer its own call's, the
//     upstream reached over at most pool.size connections, and a TCP relay in front of each
//     upstream that counts the requests arriving in one read (more than one: they were pipelined);
//   - a streaming call (server-everything's long-running operation, with progress) while other
//     calls run: all complete, and calls made once the stream is being read are not queued behind it;
//   - faults, with a raw `net` upstream of the test's own that logs every request it reads:
//     (a) it closes the connection with several pipelined requests unanswered: each of those calls
//     is -32004, and each request arrived once (never sent again); (b) it answers the first with
//     `Connection: close` and closes: the requests behind it are sent again and all succeed, each
//     processed once; (c) a client leaves while its request heads the line: the calls behind it get
//     their own answers, the connection stays pooled and the next call succeeds on it;
//     (d)-(k) a client leaving mid-line, timeouts, an answer cut half way, Connection: close with an
//     abandoned call behind it, 103 interim answers, a body ended by the close, an event stream at
//     the head of the line given up; (i) a reload; calls abandoned at random among pipelined ones;
//   - the refund rule: a pipelined call that failed after it was written keeps its rate-limit token.
//
//   node --test test/interop/pipeline.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as A from './lib/attack.mjs';

H.requireNodeModules();

const ctx = A.makeContext('tollgate-pipeline-');
const test = ctx.test(it);
const POOL = { size: 2, pipeline: 8, queue_timeout_ms: 60000 };
const CLIENTS = 8;
const CALLS = 40; // per client, all in flight at once
const LIMIT = 2; // the rate limit of the refund test: LIMIT calls per minute
let gw;
let standin;
let jittery;
let everything;
let raw; // the test's own upstream
const relay = {}; // TCP relays in front of the SDK upstreams, by upstream name
let auditFile;

// ---------------------------------------------------------------------------
// A TCP relay that counts what the gateway sends: connections, and per read how many HTTP request
// lines arrived in it. Under pool.pipeline = 1 a connection never carries a second request before
// the first one's answer, so a read holding two requests proves they were pipelined.

const REQUEST_LINE = /(?:POST|GET|DELETE) \/\S* HTTP\/1\.1\r\n/g;

async function startRelay(targetPort) {
  const r = { conns: [], reads: [], sockets: new Set() };
  const srv = net.createServer((down) => {
    const c = { id: r.conns.length, requests: 0, toolsCalls: 0, methods: new Set() };
    r.conns.push(c);
    const up = net.connect(targetPort, '127.0.0.1');
    for (const s of [down, up]) { r.sockets.add(s); s.on('error', () => {}); s.on('close', () => r.sockets.delete(s)); }
    down.on('data', (d) => {
      const text = d.toString('latin1');
      const lines = text.match(REQUEST_LINE) ?? [];
      const calls = (text.match(/"method":"tools\/call"/g) ?? []).length;
      for (const l of lines) c.methods.add(l.split(' ')[0]);
      c.requests += lines.length;
      c.toolsCalls += calls;
      r.reads.push({ conn: c.id, requests: lines.length, calls });
      up.write(d);
    });
    up.on('data', (d) => down.write(d));
    down.on('end', () => up.end());
    up.on('end', () => down.end());
    down.on('close', () => up.destroy());
    up.on('close', () => down.destroy());
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  r.port = srv.address().port;
  r.url = `http://127.0.0.1:${r.port}/mcp`;
  /** Connections that carried a tools/call. */
  r.callConns = () => r.conns.filter((c) => c.toolsCalls > 0);
  /** Reads of the relay from `from` on: how many held 1, 2, ... requests. */
  r.histogram = (from = 0) => {
    const h = {};
    for (const x of r.reads.slice(from)) if (x.requests) h[x.requests] = (h[x.requests] ?? 0) + 1;
    return h;
  };
  r.maxPerRead = (from = 0) => Math.max(0, ...r.reads.slice(from).map((x) => x.requests));
  ctx.cleanup.add(() => new Promise((resolve) => {
    for (const s of r.sockets) s.destroy();
    srv.close(() => resolve());
  }));
  return r;
}

// ---------------------------------------------------------------------------
// The raw upstream: HTTP/1.1 over `net`, so that the test decides, per connection, when requests
// are answered, dropped or answered with `Connection: close`. Every tools/call it reads is logged
// in `received` ({conn, text}); every one it answers in `processed`. A plan armed with arm() is
// taken by the connection that reads the next tools/call:
//   { kind: 'drop', n }         once n requests were read on it, close it, none answered
//   { kind: 'close-first', n }  once n were read, answer the first with Connection: close and close
//                               (with `wait`: not before plan.release())
//   { kind: 'partial-first', n } once n were read, write half of the first answer and close
//   { kind: 'hints', n }        once n were read, answer each after a 103 Early Hints interim response
//   { kind: 'eof-first', n }    once n were read, answer the first with a body ended by the close
//   { kind: 'hold', n }         answer nothing until plan.release(); then all in order
// Other connections answer each request as soon as it is read (in order).

async function startRawUpstream() {
  const u = { received: [], processed: [], conns: 0, plan: null, sockets: new Set() };
  const respond = (c, req, { close = false } = {}) => {
    let body;
    if (req.json?.id === undefined) {
      c.sock.write('HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    const m = req.json.method;
    let result = {};
    if (m === 'tools/call') {
      const text = String(req.json.params?.arguments?.text);
      u.processed.push({ conn: c.id, text });
      if (text.startsWith('err-')) {
        body = JSON.stringify({ jsonrpc: '2.0', id: req.json.id, error: { code: -32000, message: `refused ${text}` } });
        c.sock.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
        return;
      }
      result = { content: [{ type: 'text', text }] };
    } else if (m === 'tools/list') {
      result = { tools: [{ name: 'echo', inputSchema: { type: 'object' } }] };
    }
    body = JSON.stringify({ jsonrpc: '2.0', id: req.json.id, result });
    c.sock.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
      (close ? 'Connection: close\r\n' : '') + '\r\n' + body);
  };
  const step = (c) => {
    const p = c.plan;
    if (c.dead) return;
    if (p?.kind === 'drop') {
      if (c.pending.length >= p.n) { c.dead = true; p.fired = true; c.sock.destroy(); }
      return;
    }
    if (p?.kind === 'partial-first') {
      if (c.pending.length >= p.n) {
        // Half of the first answer, then the connection ends.
        c.dead = true;
        p.fired = true;
        const req = c.pending.shift();
        const text = String(req.json.params?.arguments?.text);
        const body = JSON.stringify({ jsonrpc: '2.0', id: req.json.id, result: { content: [{ type: 'text', text }] } });
        c.sock.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n` +
          body.slice(0, body.length >> 1));
        c.sock.end();
      }
      return;
    }
    if (p?.kind === 'close-first') {
      if (p.wait && !p.released) return;
      if (c.pending.length >= p.n) {
        c.dead = true;
        p.fired = true;
        respond(c, c.pending.shift(), { close: true });
        c.pending = [];
        c.sock.end();
      }
      return;
    }
    if (p?.kind === 'stream-first' && !p.released) {
      // The first request's answer is an event stream that never ends: its head and one event once
      // n requests were read (so that the others were written behind it); the others are never answered.
      if (!p.streaming && c.pending.length >= p.n) { // once the others are written behind it
        p.streaming = c.pending.shift();
        const ev = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'streaming' } });
        const chunk = `event: message\ndata: ${ev}\n\n`;
        c.sock.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n' +
          `${Buffer.byteLength(chunk).toString(16)}\r\n${chunk}\r\n`);

      }
      return;
    }
    if (p?.kind === 'hints') {
      if (c.pending.length < p.n) return;
      c.plan = null;
      for (; c.pending.length;) {
        c.sock.write('HTTP/1.1 103 Early Hints\r\nLink: </hint>; rel=preload\r\n\r\n');
        respond(c, c.pending.shift());
      }
      return;
    }
    if (p?.kind === 'eof-first') {
      if (c.pending.length < p.n) return;
      c.dead = true;
      p.fired = true;
      const req = c.pending.shift();
      const text = String(req.json.params?.arguments?.text);
      u.processed.push({ conn: c.id, text });
      const body = JSON.stringify({ jsonrpc: '2.0', id: req.json.id, result: { content: [{ type: 'text', text }] } });
      c.sock.end(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n${body}`); // no length: the body ends at the close
      return;
    }
    if (p?.kind === 'hold' && !p.released) return;
    while (c.pending.length) respond(c, c.pending.shift());
  };
  const srv = net.createServer((sock) => {
    const c = { id: u.conns++, sock, buf: Buffer.alloc(0), pending: [], plan: null, dead: false, reads: 0, closed: false };
    u.sockets.add(sock);
    sock.on('error', () => {});
    sock.on('close', () => { c.closed = true; u.sockets.delete(sock); });
    sock.on('data', (d) => {
      if (c.dead) return;
      c.buf = Buffer.concat([c.buf, d]);
      c.reads++;
      for (;;) {
        const i = c.buf.indexOf('\r\n\r\n');
        if (i < 0) break;
        const head = c.buf.subarray(0, i).toString('latin1');
        assert.ok(!/\r\ntransfer-encoding:/i.test(head), `the raw upstream reads Content-Length bodies only: ${head}`);
        const n = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        if (c.buf.length < i + 4 + n) break;
        const text = c.buf.subarray(i + 4, i + 4 + n).toString('utf8');
        c.buf = c.buf.subarray(i + 4 + n);
        let json;
        try { json = JSON.parse(text); } catch { json = null; }
        const req = { head, json };
        if (json?.method === 'tools/call') {
          u.received.push({ conn: c.id, text: String(json.params?.arguments?.text) });
          if (u.plan && (!c.plan || c.plan.released)) { c.plan = u.plan; u.plan = null; c.plan.conn = c; }
        }
        c.pending.push(req);
      }
      step(c);
    });
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  u.port = srv.address().port;
  u.url = `http://127.0.0.1:${u.port}/mcp`;
  u.arm = (plan) => {
    u.plan = plan;
    plan.release = () => { plan.released = true; if (plan.conn) step(plan.conn); };
    return plan;
  };
  u.receivedOf = (text) => u.received.filter((r) => r.text === text);
  u.processedOf = (text) => u.processed.filter((r) => r.text === text);
  ctx.cleanup.add(() => new Promise((resolve) => {
    for (const s of u.sockets) s.destroy();
    srv.close(() => resolve());
  }));
  return u;
}

// ---------------------------------------------------------------------------

const auditLines = () => (fs.existsSync(auditFile) ? fs.readFileSync(auditFile, 'utf8') : '')
  .split('\n').filter(Boolean).map((l) => JSON.parse(l));

/** The gateway's pipelining counters: calls sent upstream, calls pipelined, request writes. */
async function pipeCounters() {
  const m = await gw.metrics();
  return {
    calls: m.tollgate_upstream_calls_total ?? 0,
    pipelined: m.tollgate_upstream_pipelined_total ?? 0,
    writes: m.tollgate_upstream_request_writes_total ?? 0,
  };
}
const delta = (a, b) => Object.fromEntries(Object.keys(a).map((k) => [k, b[k] - a[k]]));

/** A raw 2025 session on /UP/mcp (initialize answered by the gateway). */
async function session(up) {
  const url = A.mcpUrl(gw, up);
  const s = await H.rawInitialize(ctx.fetch, url);
  return { url, headers: s.headers };
}

/** POSTs a call on a connection of its own; returns the request, which the test can destroy. */
function leavingCall(s, id, text) {
  const body = JSON.stringify(A.call(id, 'echo', { text }));
  const req = http.request(s.url, {
    method: 'POST', agent: false,
    headers: { ...H.MCP_HEADERS, ...s.headers, 'content-length': Buffer.byteLength(body) },
  });
  req.on('error', () => {});
  req.end(body);
  return req;
}

const clientGone = () => auditLines().filter((l) => l.outcome === 'client_gone').length;

/** n SDK clients on /UP/mcp, each with its own connections to the gateway. */
const sdkClients = (up, n) => Promise.all(Array.from({ length: n }, (_, i) =>
  H.connectClient(A.mcpUrl(gw, up), { fetch: H.makeFetch({ cleanup: ctx.cleanup }), cleanup: ctx.cleanup, name: `pipe-${i}` })));

/**
 * CLIENTS x CALLS echo calls in flight at once, each with its own text (in argument `arg`); returns the mismatches
 * (answers that are not their own call's) and the texts sent.
 */
async function echoStorm(clients, tag, arg, expect) {
  const texts = [];
  const wrong = [];
  await Promise.all(clients.map((c, ci) => Promise.all(Array.from({ length: CALLS }, async (_, i) => {
    const text = `${tag}-${ci}-${i}-${H.randomToken(6)}`;
    texts.push(text);
    const got = H.resultText(await c.client.callTool({ name: 'echo', arguments: { [arg]: text } }, undefined, { timeout: 60000 }));
    if (got !== expect(text)) wrong.push({ sent: text, got });
  }))));
  return { texts, wrong };
}

before(async () => {
  ctx.init();
  auditFile = path.join(ctx.dir, 'audit.jsonl');
  standin = await H.startStandin({ cleanup: ctx.cleanup, logFile: path.join(ctx.dir, 'standin.log') });
  everything = await H.startEverything({ cleanup: ctx.cleanup });
  raw = await startRawUpstream();
  relay.cowork = await startRelay(standin.port);
  // A second stand-in whose answers take a random 0..30 ms, for calls abandoned at random.
  jittery = await H.startStandin({ cleanup: ctx.cleanup, logFile: path.join(ctx.dir, 'standin-jitter.log'), extraArgs: ['--jitter-ms', '30'] });
  relay.everything = await startRelay(everything.port);
  ctx.extraLogs['stand-in output'] = () => standin.output();
  ctx.extraLogs['raw upstream'] = () => JSON.stringify({ received: raw.received.slice(-40), processed: raw.processed.slice(-40) });
  const limited = ctx.writePolicy('limited.json', {
    version: '1', default: 'deny',
    tools: { echo: { limits: [{ counter: 'pipe_refund', window: 'minute', max: LIMIT }] } },
  });
  const control = ctx.writePolicy('control.json', {
    version: '1', default: 'deny',
    tools: { echo: { limits: [{ counter: 'pipe_refund_control', window: 'minute', max: LIMIT }] } },
  });
  const local = { initialize: 'local', protocol: '2025' };
  gw = await ctx.gateway('pipe', {
    admin: true,
    audit: { file: auditFile },
    upstreams: [
      { name: 'cowork', url: relay.cowork.url, headers: { Authorization: `Bearer ${standin.token}` }, initialize: 'local', pool: POOL },
      { name: 'everything', url: relay.everything.url, pool: POOL },
      { name: 'jitter', url: jittery.url, headers: { Authorization: `Bearer ${jittery.token}` }, initialize: 'local', pool: POOL },
      // One connection, so that every call in flight rides it.
      { name: 'raw', url: raw.url, ...local, call_timeout_ms: 20000, pool: { size: 1, pipeline: 8 } },
      { name: 'rawlim', url: raw.url, ...local, call_timeout_ms: 20000, pool: { size: 1, pipeline: 8 }, policy: limited },
      { name: 'rawctl', url: raw.url, ...local, call_timeout_ms: 20000, pool: { size: 1, pipeline: 8 }, policy: control },
      { name: 'rawto', url: raw.url, ...local, call_timeout_ms: 1000, pool: { size: 1, pipeline: 8 } },
    ],
  }, { admin: true });
});

after(async () => {
  const s = ctx.summary();
  try { await ctx.cleanup.run(); } finally { if (s) process.stderr.write(`# ${s}\n`); }
});

// ---------------------------------------------------------------------------

describe('real SDK upstreams with pool = { size = 2; pipeline = 8; }', () => {
  test(`CoWork OS stand-in (initialize = "local"): ${CLIENTS} clients x ${CALLS} concurrent calls, each answer its own, at most pool.size connections, requests pipelined`, async (t) => {
    const clients = await sdkClients('cowork', CLIENTS);
    const from = relay.cowork.reads.length;
    const m0 = await pipeCounters();
    const { texts, wrong } = await echoStorm(clients, 'cw', 'text', (s) => s);
    assert.deepEqual(wrong, [], 'every answer is its own call\'s');
    const seen = new Map();
    for (const r of standin.records()) {
      if (r.msg?.method === 'tools/call') {
        const s = r.msg.params?.arguments?.text;
        seen.set(s, (seen.get(s) ?? 0) + 1);
      }
    }
    for (const s of texts) if (seen.get(s) !== 1) assert.fail(`the stand-in processed ${s} ${seen.get(s) ?? 0} times`);
    const conns = standin.records().filter((r) => r.event === 'connection').length;
    assert.ok(relay.cowork.conns.length <= POOL.size, `the relay saw ${relay.cowork.conns.length} connections (pool.size ${POOL.size})`);
    assert.equal(conns, relay.cowork.conns.length, 'the stand-in saw the relay\'s connections');
    const hist = relay.cowork.histogram(from);
    const d = delta(m0, await pipeCounters());
    t.diagnostic(`requests per read of the upstream connection: ${JSON.stringify(hist)}; gateway: ${JSON.stringify(d)} (${(d.calls / d.writes).toFixed(2)} calls per write)`);
    assert.ok(d.pipelined > 0 && d.writes < d.calls, `the gateway counted pipelined calls and fewer writes than calls: ${JSON.stringify(d)}`);
    assert.ok(relay.cowork.maxPerRead(from) >= 2, `several requests arrived in one read (pipelined): ${JSON.stringify(hist)}`);
    await Promise.all(clients.map((c) => c.close()));
  });

  test(`server-everything (streamableHttp): ${CLIENTS} clients x ${CALLS} concurrent calls, each answer its own, calls on at most pool.size connections`, async (t) => {
    const clients = await sdkClients('everything', CLIENTS);
    const from = relay.everything.reads.length;
    const m0 = await pipeCounters();
    const { wrong } = await echoStorm(clients, 'ev', 'message', (s) => `Echo: ${s}`);
    assert.deepEqual(wrong, [], 'every answer is its own call\'s');
    const callConns = relay.everything.callConns();
    const hist = relay.everything.histogram(from);
    const d = delta(m0, await pipeCounters());
    t.diagnostic(`gateway: ${JSON.stringify(d)} (${(d.calls / d.writes).toFixed(2)} calls per write)`);
    assert.ok(d.pipelined > 0 && d.writes < d.calls, `the gateway counted pipelined calls and fewer writes than calls: ${JSON.stringify(d)}`);
    t.diagnostic(`connections: ${relay.everything.conns.length} (${callConns.length} with calls; methods ${JSON.stringify(relay.everything.conns.map((c) => [...c.methods]))}); requests per read: ${JSON.stringify(hist)}`);
    assert.ok(callConns.length <= POOL.size, `calls rode ${callConns.length} connections (pool.size ${POOL.size})`);
    assert.ok(relay.everything.maxPerRead(from) >= 2, `several requests arrived in one read (pipelined): ${JSON.stringify(hist)}`);
    await Promise.all(clients.map((c) => c.close()));
  });

  test('calls abandoned at random (every third cancelled by its client after 0..30 ms) among pipelined ones: every other call gets its own answer, the pool keeps working', async (t) => {
    const clients = await sdkClients('jitter', 4);
    let aborted = 0;
    const wrong = [];
    let served = 0;
    await Promise.all(clients.map((c, ci) => Promise.all(Array.from({ length: CALLS }, async (_, i) => {
      const text = `jit-${ci}-${i}-${H.randomToken(4)}`;
      const ac = new AbortController();
      if (i % 3 === 0) setTimeout(() => ac.abort('test'), Math.floor(Math.random() * 30));
      try {
        const got = H.resultText(await c.client.callTool({ name: 'echo', arguments: { text } }, undefined, { timeout: 60000, signal: ac.signal }));
        served++;
        if (got !== text) wrong.push({ sent: text, got });
      } catch (e) {
        if (!ac.signal.aborted) throw e;
        aborted++;
      }
    }))));
    t.diagnostic(`${served} answered, ${aborted} abandoned`);
    assert.deepEqual(wrong, [], 'every answer is its own call\'s');
    assert.ok(aborted > 0, 'some calls were abandoned');
    const after = await clients[0].client.callTool({ name: 'echo', arguments: { text: 'jit-after' } });
    assert.equal(H.resultText(after), 'jit-after');
    await Promise.all(clients.map((c) => c.close()));
    A.assertAlive(gw);
  });

  test('a streaming call (long-running operation with progress) while other calls run: all complete; calls made once the stream is read are not queued behind it', async (t) => {
    const clients = await sdkClients('everything', 4);
    const [streamer, ...others] = clients;
    const t0 = Date.now();
    let firstProgress;
    const progressed = new Promise((resolve) => { firstProgress = resolve; });
    const progress = [];
    const longOp = streamer.client.callTool(
      { name: 'trigger-long-running-operation', arguments: { duration: 3, steps: 3 } }, undefined,
      { timeout: 60000, onprogress: (p) => { progress.push(p); firstProgress(Date.now() - t0); } },
    ).then((r) => ({ r, at: Date.now() - t0 }));
    // Calls made together with it: some may join its connection before its answer is known to be
    // a stream, and wait for it (not past their timeout). Few, so that its connection keeps room
    // for more than pool.pipeline calls: the late ones below must not take it.
    const early = others.flatMap((c, ci) => Array.from({ length: 1 }, (_, i) => {
      const text = `early-${ci}-${i}`;
      return c.client.callTool({ name: 'echo', arguments: { message: text } }, undefined, { timeout: 60000 })
        .then((r) => ({ text, got: H.resultText(r), at: Date.now() - t0 }));
    }));
    const progressAt = await H.within(progressed, 30000, 'the first progress notification');
    // More than pool.pipeline at once: with the other connection full, a pool that let a call join
    // the stream's connection would make it wait for the stream's end.
    const late = others.flatMap((c, ci) => Array.from({ length: 10 }, (_, i) => {
      const text = `late-${ci}-${i}`;
      return c.client.callTool({ name: 'echo', arguments: { message: text } }, undefined, { timeout: 60000 })
        .then((r) => ({ text, got: H.resultText(r), at: Date.now() - t0 }));
    }));
    const [lr, er, la] = await Promise.all([longOp, Promise.all(early), Promise.all(late)]);
    assert.deepEqual(progress.map((p) => p.progress), [1, 2, 3], 'the stream relayed its progress');
    assert.match(H.resultText(lr.r), /Long running operation completed/);
    for (const x of [...er, ...la]) assert.equal(x.got, `Echo: ${x.text}`);
    const lateAfter = la.filter((x) => x.at >= lr.at);
    t.diagnostic(`first progress at ${progressAt} ms, stream done at ${lr.at} ms; early calls done after it: ${er.filter((x) => x.at >= lr.at).length}/${er.length}; late calls done after it: ${lateAfter.length}/${la.length}`);
    assert.deepEqual(lateAfter.map((x) => x.text), [], 'no call made while the stream was being read waited for its end');
    await Promise.all(clients.map((c) => c.close()));
  });
});

describe('faults on a pipelined connection (a raw upstream of the test\'s own, pool.size 1)', () => {
  const N = 6;

  test(`(a) the upstream closes with ${N} pipelined requests unanswered: each call is -32004, each request arrived once`, async () => {
    const s = await session('raw');
    const plan = raw.arm({ kind: 'drop', n: N });
    const texts = Array.from({ length: N }, (_, i) => `drop-${i}-${H.randomToken(4)}`);
    const answers = await Promise.all(texts.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`d${i}`, 'echo', { text }))));
    assert.ok(plan.fired, 'the upstream read all of them on one connection before closing it');
    assert.deepEqual(answers.map((a) => a.error?.code ?? H.resultText(a.result)), Array(N).fill(-32004), JSON.stringify(answers));
    await H.quietFor(300); // nothing is sent again afterwards
    for (const text of texts) assert.equal(raw.receivedOf(text).length, 1, `${text} arrived ${raw.receivedOf(text).length} times`);
    assert.equal(new Set(texts.map((x) => raw.receivedOf(x)[0].conn)).size, 1, 'all on one connection');
    // The pool goes on: the next call is served on a new connection.
    const a = await A.rpc(ctx.fetch, s.url, s, A.call('after-a', 'echo', { text: 'after-drop' }));
    assert.equal(H.resultText(a.result), 'after-drop');
  });

  test(`(b) the upstream answers the first of ${N} with Connection: close: the others are sent again once and all succeed, each processed once`, async () => {
    const s = await session('raw');
    const plan = raw.arm({ kind: 'close-first', n: N });
    const texts = Array.from({ length: N }, (_, i) => `cc-${i}-${H.randomToken(4)}`);
    const answers = await Promise.all(texts.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`c${i}`, 'echo', { text }))));
    assert.ok(plan.fired, 'the upstream read all of them on one connection');
    assert.deepEqual(answers.map((a) => a.error?.code ?? H.resultText(a.result)), texts, 'every call got its own answer');
    const first = plan.conn.id;
    for (const text of texts) {
      assert.equal(raw.processedOf(text).length, 1, `${text} processed ${raw.processedOf(text).length} times`);
      const rec = raw.receivedOf(text);
      assert.equal(rec[0].conn, first, `${text} was first written on the closing connection`);
      assert.ok(rec.length <= 2 && rec.slice(1).every((r) => r.conn !== first), `${text} sent again at most once, elsewhere: ${JSON.stringify(rec)}`);
    }
    const resent = texts.filter((x) => raw.receivedOf(x).length === 2);
    assert.equal(resent.length, N - 1, `the ${N - 1} behind the closing answer were sent again: ${JSON.stringify(resent)}`);
  });

  test('(c) a client leaves while its request heads the line: the calls behind it get their own answers, the connection stays pooled', async () => {
    const s = await session('raw');
    const M = 4;
    const plan = raw.arm({ kind: 'hold', n: M });
    const goneBefore = clientGone();
    // The head of the line: a request of its own whose client the test destroys.
    const headText = `head-${H.randomToken(4)}`;
    const headReq = leavingCall(s, 'head', headText);
    await H.waitUntil(() => raw.receivedOf(headText).length === 1, { what: 'the head request at the upstream' });
    const texts = Array.from({ length: M - 1 }, (_, i) => `behind-${i}-${H.randomToken(4)}`);
    const answers = Promise.all(texts.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`b${i}`, 'echo', { text }))));
    await H.waitUntil(() => plan.conn?.pending.length === M, { what: `${M} requests pipelined on one connection`, detail: () => plan.conn?.pending.length });
    headReq.destroy();
    await H.waitUntil(() => clientGone() > goneBefore, { what: 'the gateway to see the client gone (audit outcome client_gone)' });
    plan.release();
    const got = await answers;
    assert.deepEqual(got.map((a) => a.error?.code ?? H.resultText(a.result)), texts, 'every call behind the gone one got its own answer');
    assert.equal(raw.processedOf(headText).length, 1, 'the gone call\'s answer was read (and dropped)');
    const a = await A.rpc(ctx.fetch, s.url, s, A.call('after-c', 'echo', { text: 'after-gone' }));
    assert.equal(H.resultText(a.result), 'after-gone');
    assert.equal(raw.processedOf('after-gone')[0].conn, plan.conn.id, 'the next call rode the same pooled connection');
    A.assertAlive(gw);
  });

  test('(d) a client leaves while its request is in the middle of the line: the calls before and after it get their own answers', async () => {
    const s = await session('raw');
    const plan = raw.arm({ kind: 'hold', n: 3 });
    const goneBefore = clientGone();
    const [t1, t2, t3] = ['first', 'middle', 'last'].map((x) => `${x}-${H.randomToken(4)}`);
    const a1 = A.rpc(ctx.fetch, s.url, s, A.call('m1', 'echo', { text: t1 }));
    await H.waitUntil(() => raw.receivedOf(t1).length === 1, { what: 'the first request at the upstream' });
    const mid = leavingCall(s, 'm2', t2);
    await H.waitUntil(() => raw.receivedOf(t2).length === 1, { what: 'the middle request at the upstream' });
    const a3 = A.rpc(ctx.fetch, s.url, s, A.call('m3', 'echo', { text: t3 }));
    await H.waitUntil(() => plan.conn?.pending.length === 3, { what: '3 requests pipelined on one connection', detail: () => plan.conn?.pending.length });
    mid.destroy();
    await H.waitUntil(() => clientGone() > goneBefore, { what: 'the gateway to see the client gone' });
    plan.release();
    assert.equal(H.resultText((await a1).result), t1);
    assert.equal(H.resultText((await a3).result), t3);
    const a = await A.rpc(ctx.fetch, s.url, s, A.call('after-d', 'echo', { text: 'after-middle' }));
    assert.equal(H.resultText(a.result), 'after-middle');
    assert.equal(raw.processedOf('after-middle')[0].conn, plan.conn.id, 'the next call rode the same pooled connection');
    A.assertAlive(gw);
  });

  test('(e) every call on a connection times out (call_timeout_ms) with its answer unread: the connection is closed, the next call gets a new one', async () => {
    const s = await session('rawto');
    const plan = raw.arm({ kind: 'hold', n: 3 });
    const texts = Array.from({ length: 3 }, (_, i) => `to-${i}-${H.randomToken(4)}`);
    const answers = await Promise.all(texts.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`t${i}`, 'echo', { text }))));
    assert.deepEqual(answers.map((a) => a.error?.code ?? 'result'), Array(3).fill(-32004), JSON.stringify(answers));
    assert.equal(plan.conn.pending.length, 3, 'all three were pipelined on one connection');
    await H.waitUntil(() => plan.conn.closed, { what: 'the gateway to close the connection left with only abandoned requests' });
    const a = await A.rpc(ctx.fetch, s.url, s, A.call('after-e', 'echo', { text: 'after-timeouts' }));
    assert.equal(H.resultText(a.result), 'after-timeouts');
    assert.notEqual(raw.processedOf('after-timeouts')[0].conn, plan.conn.id, 'on a new connection');
    for (const text of texts) assert.equal(raw.receivedOf(text).length, 1, `${text} was not sent again`);
    A.assertAlive(gw);
  });
});

describe('more faults on a pipelined connection', () => {
  test('(g) the upstream closes half way through the first answer: every call written on it is -32004, none sent again', async () => {
    const s = await session('raw');
    const plan = raw.arm({ kind: 'partial-first', n: 4 });
    const texts = Array.from({ length: 4 }, (_, i) => `half-${i}-${H.randomToken(4)}`);
    const answers = await Promise.all(texts.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`g${i}`, 'echo', { text }))));
    assert.ok(plan.fired);
    assert.deepEqual(answers.map((a) => a.error?.code ?? H.resultText(a.result)), Array(4).fill(-32004), JSON.stringify(answers));
    await H.quietFor(300);
    for (const x of texts) assert.equal(raw.receivedOf(x).length, 1, `${x} not sent again`);
    const a = await A.rpc(ctx.fetch, s.url, s, A.call('after-g', 'echo', { text: 'after-half' }));
    assert.equal(H.resultText(a.result), 'after-half');
    A.assertAlive(gw);
  });

  test('(h) Connection: close on the first answer with a call behind it whose client left: that one is not sent again, the others are', async () => {
    const s = await session('raw');
    const plan = raw.arm({ kind: 'close-first', n: 3, wait: true });
    const goneBefore = clientGone();
    const [t1, t2, t3] = ['h-first', 'h-gone', 'h-last'].map((x) => `${x}-${H.randomToken(4)}`);
    const a1 = A.rpc(ctx.fetch, s.url, s, A.call('h1', 'echo', { text: t1 }));
    await H.waitUntil(() => raw.receivedOf(t1).length === 1, { what: 'the first request at the upstream' });
    const gone = leavingCall(s, 'h2', t2);
    await H.waitUntil(() => raw.receivedOf(t2).length === 1, { what: 'the second request at the upstream' });
    const a3 = A.rpc(ctx.fetch, s.url, s, A.call('h3', 'echo', { text: t3 }));
    await H.waitUntil(() => plan.conn?.pending.length === 3, { what: '3 requests pipelined on one connection' });
    gone.destroy();
    await H.waitUntil(() => clientGone() > goneBefore, { what: 'the gateway to see the client gone' });
    plan.release();
    assert.equal(H.resultText((await a1).result), t1);
    assert.equal(H.resultText((await a3).result), t3);
    await H.quietFor(300);
    assert.equal(raw.receivedOf(t2).length, 1, 'the gone client\'s call was not sent again');
    assert.equal(raw.processedOf(t2).length, 0, 'nor processed');
    assert.equal(raw.receivedOf(t3).length, 2, 'the live one behind was sent again');
    assert.equal(raw.processedOf(t3).length, 1, 'and processed once');
    A.assertAlive(gw);
  });

  test('(j) each answer after a 103 Early Hints interim response: every call gets its own answer (an interim response is no answer)', async () => {
    const s = await session('raw');
    raw.arm({ kind: 'hints', n: 4 });
    const texts = Array.from({ length: 4 }, (_, i) => `hint-${i}-${H.randomToken(4)}`);
    const answers = await Promise.all(texts.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`j${i}`, 'echo', { text }))));
    assert.deepEqual(answers.map((a) => a.error?.code ?? H.resultText(a.result)), texts);
    for (const x of texts) assert.equal(raw.receivedOf(x).length, 1, `${x} sent once`);
  });

  test('(k) the first answer\'s body ends at the close (no length): it is answered, the others are sent again once and processed once', async () => {
    const s = await session('raw');
    const plan = raw.arm({ kind: 'eof-first', n: 4 });
    const texts = Array.from({ length: 4 }, (_, i) => `eof-${i}-${H.randomToken(4)}`);
    const answers = await Promise.all(texts.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`k${i}`, 'echo', { text }))));
    assert.ok(plan.fired);
    assert.deepEqual(answers.map((a) => a.error?.code ?? H.resultText(a.result)), texts);
    for (const x of texts) assert.equal(raw.processedOf(x).length, 1, `${x} processed once`);
    assert.deepEqual(texts.map((x) => raw.receivedOf(x).length), [1, 2, 2, 2], 'the ones behind the close sent again once');
    A.assertAlive(gw);
  });
});

describe('an event stream at the head of a pipelined line', () => {
  // A client leaving a stream does not end it (Streamable HTTP: it may resume), and a cancel for it
  // waits in the pool queue behind it (pool.size 1); its call_timeout_ms is what gives it up here.
  test('(f) it times out: the connection is closed, the calls written behind it end with -32004 and are not sent again; the next call gets a new connection', async (t) => {
    const s = await session('rawto');
    const plan = raw.arm({ kind: 'stream-first', n: 3 });
    const streamText = `stream-${H.randomToken(4)}`;
    const t0 = Date.now();
    const stream = H.postRaw(ctx.fetch, s.url, A.call('f0', 'echo', { text: streamText }), s.headers);
    await H.waitUntil(() => raw.receivedOf(streamText).length === 1, { what: 'the streaming request at the upstream' });
    const texts = ['f1', 'f2'].map((x) => `${x}-${H.randomToken(4)}`);
    const behind = Promise.all(texts.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`f${i + 1}`, 'echo', { text }))));
    const sr = await stream;
    const got = await behind;
    await H.waitUntil(() => plan.conn.closed, { what: 'the gateway to close the connection' });
    t.diagnostic(`stream ended after ${Date.now() - t0} ms: ${sr.text.slice(0, 300).replace(/\n/g, ' | ')}`);
    assert.ok(plan.streaming, 'the stream\'s head was sent with the others written behind it');
    assert.equal(sr.messages.find((m) => m.id === 'f0')?.error?.code, -32004, `the stream's call timed out: ${sr.text}`);
    assert.deepEqual(got.map((a) => a.error?.code ?? H.resultText(a.result)), [-32004, -32004],
      `written behind a stream that was given up: ${JSON.stringify(got)}`);
    await H.quietFor(300);
    for (const x of [streamText, ...texts]) assert.equal(raw.receivedOf(x).length, 1, `${x} not sent again`);
    const a = await A.rpc(ctx.fetch, s.url, s, A.call('after-f', 'echo', { text: 'after-stream' }));
    assert.equal(H.resultText(a.result), 'after-stream');
    assert.notEqual(raw.processedOf('after-stream')[0].conn, plan.conn.id, 'on a new connection');
    A.assertAlive(gw);
  });
});

describe('the refund rule on a pipelined connection', () => {
  test(`control: ${LIMIT} pipelined calls the upstream answers with a JSON-RPC error are refunded: call ${LIMIT + 1} passes`, async () => {
    const s = await session('rawctl');
    const refunds = async () => (await gw.metrics())['tollgate_refunds_total'] ?? 0;
    const refundsBefore = await refunds();
    const plan = raw.arm({ kind: 'hold', n: LIMIT });
    const texts = Array.from({ length: LIMIT }, (_, i) => `err-${i}-${H.randomToken(4)}`);
    const pending = Promise.all(texts.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`e${i}`, 'echo', { text }))));
    await H.waitUntil(() => plan.conn?.pending.length === LIMIT, { what: `${LIMIT} requests pipelined on one connection` });
    plan.release();
    const answers = await pending;
    assert.deepEqual(answers.map((a) => a.error?.message), texts.map((x) => `refused ${x}`), 'each its own error');
    assert.equal(await refunds(), refundsBefore + LIMIT, 'each refund counted');
    const next = await A.rpc(ctx.fetch, s.url, s, A.call('e-next', 'echo', { text: 'ctl-next' }));
    assert.equal(H.resultText(next.result), 'ctl-next', `refunded, so the next call passes: ${JSON.stringify(next)}`);
  });

  test(`${LIMIT} pipelined calls written and then lost with the connection are -32004 and keep their tokens: call ${LIMIT + 1} is rate limited (-32002)`, async () => {
    const s = await session('rawlim');
    const refunds = async () => (await gw.metrics())['tollgate_refunds_total'] ?? 0;
    const refundsBefore = await refunds();
    const plan = raw.arm({ kind: 'drop', n: LIMIT });
    const texts = Array.from({ length: LIMIT }, (_, i) => `lim-${i}-${H.randomToken(4)}`);
    const answers = await Promise.all(texts.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`l${i}`, 'echo', { text }))));
    assert.ok(plan.fired, 'both were written on one connection');
    assert.deepEqual(answers.map((a) => a.error?.code ?? 'result'), Array(LIMIT).fill(-32004));
    const third = await A.rpc(ctx.fetch, s.url, s, A.call('l-next', 'echo', { text: 'lim-next' }));
    assert.equal(third.error?.code, -32002, `not refunded, so the next call is rate limited: ${JSON.stringify(third)}`);
    assert.equal(raw.receivedOf('lim-next').length, 0, 'the limited call never reached the upstream');
    assert.equal(await refunds(), refundsBefore, 'tollgate_refunds_total did not move');
    const lines = await H.waitUntil(() => {
      const l = auditLines().filter((x) => x.upstream === 'rawlim' && x.outcome);
      return l.length >= LIMIT && l;
    }, { what: 'the audit lines of the lost calls' });
    assert.deepEqual(lines.map((l) => l.outcome), Array(LIMIT).fill('unavailable'), 'audited as unavailable (kept: they may have run)');
  });
});

describe('reload with calls pipelined', () => {
  test('(i) SIGHUP turning pipelining off while calls are pipelined and unanswered: they all get their own answers, and calls after it are served', async () => {
    const s = await session('raw');
    const N = 4;
    const plan = raw.arm({ kind: 'hold', n: N });
    const texts = Array.from({ length: N }, (_, i) => `rl-${i}-${H.randomToken(4)}`);
    const pending = Promise.all(texts.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`r${i}`, 'echo', { text }))));
    await H.waitUntil(() => plan.conn?.pending.length === N, { what: `${N} requests pipelined on one connection` });
    const opts = gw.opts;
    ctx.rewriteConf(gw, { ...opts, upstreams: opts.upstreams.map((u) => (u.name === 'raw' ? { ...u, pool: { size: 1, pipeline: 1 } } : u)) });
    const from = gw.stderr().length;
    process.kill(gw.proc.pid, 'SIGHUP');
    await gw.waitForLog(/msg="configuration reloaded"/, { from });
    plan.release();
    assert.deepEqual((await pending).map((a) => a.error?.code ?? H.resultText(a.result)), texts, 'each its own answer');
    const after = Array.from({ length: 6 }, (_, i) => `rl-after-${i}`);
    const got = await Promise.all(after.map((text, i) => A.rpc(ctx.fetch, s.url, s, A.call(`ra${i}`, 'echo', { text }))));
    assert.deepEqual(got.map((a) => a.error?.code ?? H.resultText(a.result)), after);
    A.assertAlive(gw);
  });
});
