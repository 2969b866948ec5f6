// Issue 10, item 4: every limit enforced, on every transport, with a clean error and the gateway
// serving on. What attack-limits.test.mjs (max_connections 503, EMFILE, RLIMIT_NOFILE),
// attack-memory.test.mjs (output_high_water, output_total_bytes), badinput.test.mjs (header and
// body bytes, header timeout on one socket), era2026.test.mjs (listens_per_grant) and
// matrix.test.mjs (max_sessions per cell) already hold is not repeated here.
//   1. slow clients: 2,000 of them across Streamable HTTP (a head, or a body, a byte at a time),
//      legacy SSE (the GET /sse head) and WebSocket (a frame after the upgrade) are all cut off
//      (limits.header_timeout_ms; after the upgrade the WebSocket ping: 30 s, then 30 s for the
//      pong, fixed in ws_channel.c), their descriptors go back to the baseline, and a normal
//      session is served throughout
//   2. limits.sessions_per_grant on every transport (Streamable HTTP, legacy SSE, WebSocket) and
//      for 2026-07-28 stateless requests (which share one bridged session per grant and
//      upstream): refused with the documented 429, and a closed session frees room
//   3. peer-chosen sizes: a huge Content-Length, chunk size, WebSocket frame length, Mcp-Session-Id,
//      id, header count or JSON depth from a client; a huge Content-Length, chunk, SSE event, head,
//      JSON depth from an HTTP upstream; a huge stdout line from a stdio child. Each is a clean
//      error for that request or connection, and the gateway serves the next one.
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/limits.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as A from './lib/attack.mjs';
import { startHostile } from '../fixtures/hostile/hostile.mjs';

H.requireNodeModules();

const ctx = A.makeContext('tollgate-limits-');
const test = ctx.test(it);
const MiB = 1048576;
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

/** A raw 2025-06-18 session on /UP/mcp (headers for later requests). */
async function session(gw, up, extra = {}) {
  const url = A.mcpUrl(gw, up);
  const r = await H.postRaw(ctx.fetch, url, H.initializeBody(1), extra);
  assert.equal(r.status, 200, `initialize on /${up}/mcp: HTTP ${r.status} ${r.text}`);
  const headers = { ...extra, 'mcp-session-id': r.headers.get('mcp-session-id'), 'mcp-protocol-version': '2025-06-18' };
  const n = await H.postRaw(ctx.fetch, url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
  assert.ok(n.status === 202 || n.status === 200, `initialized: ${n.status}`);
  return { url, headers };
}

async function echoWorks(gw, s, what, text = 'served') {
  const a = await A.rpc(ctx.fetch, s.url, s, A.call(`e-${Math.random()}`, 'echo', { text }));
  assert.equal(H.resultText(a.result), text, `${what}: ${JSON.stringify(a).slice(0, 300)}`);
}

/** Writes `text` on a new connection and collects everything until the gateway closes it (or timeout). */
async function exchange(port, text, { timeout = 10000 } = {}) {
  const s = await A.rawSocket(port);
  if (text) s.sock.write(text);
  await H.waitFor(() => s.closed, { timeout, interval: 20 });
  const closed = s.closed;
  s.sock.destroy();
  const buf = Buffer.concat(s.chunks);
  return { closed, buf, text: buf.toString('latin1'), responses: A.parseResponses(buf) };
}

/** The 101 handshake of an MCP WebSocket on /UP/ws; resolves with the raw socket after it. */
async function wsUpgrade(port, up, extraHeaders = '') {
  const s = await A.rawSocket(port);
  s.sock.write(`GET /${up}/ws HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
    `Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mcp\r\n${extraHeaders}\r\n`);
  await H.waitFor(() => s.closed || s.text().includes('\r\n\r\n'), { timeout: 10000, interval: 10 });
  const head = s.text().split('\r\n\r\n')[0];
  s.status = Number(head.split(' ')[1]);
  s.headLen = Buffer.byteLength(head, 'latin1') + 4;
  return s;
}

/** A masked client frame (RFC 6455 §5.2). `len` overrides the payload length field. */
function wsFrame(opcode, payload, { fin = true, len } = {}) {
  const p = Buffer.from(payload);
  const n = len ?? p.length;
  let hdr;
  if (n < 126) hdr = Buffer.from([(fin ? 0x80 : 0) | opcode, 0x80 | n]);
  else if (n < 65536) { hdr = Buffer.alloc(4); hdr[0] = (fin ? 0x80 : 0) | opcode; hdr[1] = 0x80 | 126; hdr.writeUInt16BE(n, 2); }
  else { hdr = Buffer.alloc(10); hdr[0] = (fin ? 0x80 : 0) | opcode; hdr[1] = 0x80 | 127; hdr.writeBigUInt64BE(BigInt(n), 2); }
  const mask = Buffer.from([0x11, 0x22, 0x33, 0x44]);
  const body = Buffer.from(p.map((b, i) => b ^ mask[i % 4]));
  return Buffer.concat([hdr, mask, body]);
}

/** Server frames (unmasked) in a buffer: [{opcode, payload}]. */
function wsParse(buf) {
  const out = [];
  let o = 0;
  while (buf.length - o >= 2) {
    let n = buf[o + 1] & 0x7f;
    let h = 2;
    if (n === 126) { if (buf.length - o < 4) break; n = buf.readUInt16BE(o + 2); h = 4; }
    else if (n === 127) { if (buf.length - o < 10) break; n = Number(buf.readBigUInt64BE(o + 2)); h = 10; }
    if (buf.length - o < h + n) break;
    out.push({ opcode: buf[o] & 0x0f, payload: buf.subarray(o + h, o + h + n) });
    o += h + n;
  }
  return out;
}

// ---------------------------------------------------------------------------
// 1. Slow clients

describe('1. 2,000 slow clients on three transports are cut off and their descriptors released', () => {
  const HEADER_TIMEOUT = 1500;
  const N_HEAD = 700; // POST /h/mcp, the head a byte at a time
  const N_BODY = 300; // POST /h/mcp, a whole head, then the body a byte at a time
  const N_SSE = 500;  // GET /h/sse, the head a byte at a time
  const N_WS = 500;   // upgraded on /h/ws, then a frame a byte at a time
  let gw;
  let wsClients = [];
  let wsStart;
  let baseline;
  let normal;

  /** Opens n sockets (in batches, the listen backlog is finite) that write `first` at once. */
  async function openMany(n, first) {
    const out = [];
    for (let i = 0; i < n; i += 100) {
      const batch = await Promise.all(Array.from({ length: Math.min(100, n - i) }, async () => {
        const s = await A.rawSocket(gw.plainPort);
        if (first) s.sock.write(first);
        return s;
      }));
      out.push(...batch);
    }
    return out;
  }

  /** Every 400 ms, one more byte of `rest` on each open socket, never the last. */
  function dribble(socks, rest) {
    let k = 0;
    const t = setInterval(() => {
      if (k >= rest.length - 1) return;
      const b = rest.subarray(k, k + 1);
      k++;
      for (const s of socks) if (!s.closed) s.sock.write(b);
    }, 400);
    ctx.cleanup.add(() => clearInterval(t));
    return () => clearInterval(t);
  }

  before(async () => {
    gw = await ctx.gateway('slow', {
      limits: { header_timeout_ms: HEADER_TIMEOUT, idle_timeout_ms: 60000, max_connections: 5000 },
      upstreams: [{ name: 'h', url: hostile.url('/mcp'), initialize: 'local' }],
    });
    normal = await session(gw, 'h');
    await echoWorks(gw, normal, 'the normal session before');
    baseline = A.fdCount(gw.proc.pid);
    // The WebSocket ones first: after the upgrade only the ping timer can cut them (30 s + 30 s).
    wsStart = Date.now();
    for (let i = 0; i < N_WS; i += 50) {
      wsClients.push(...await Promise.all(Array.from({ length: Math.min(50, N_WS - i) }, () => wsUpgrade(gw.plainPort, 'h'))));
    }
    const bad = wsClients.filter((s) => s.status !== 101);
    assert.equal(bad.length, 0, `every WebSocket upgraded: ${bad.slice(0, 3).map((s) => s.text().slice(0, 200)).join(' | ')}`);
    const frame = wsFrame(1, JSON.stringify({ jsonrpc: '2.0', id: 'slow', method: 'ping', params: { pad: 'x'.repeat(90) } }));
    dribble(wsClients, frame);
  });

  test('Streamable HTTP heads and bodies and legacy SSE heads, a byte at a time: each cut off with 408 within header_timeout_ms', async () => {
    const host = `Host: 127.0.0.1:${gw.plainPort}\r\n`;
    const head = Buffer.from(`POST /h/mcp HTTP/1.1\r\n${host}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n` +
      `Mcp-Session-Id: ${normal.headers['mcp-session-id']}\r\nMCP-Protocol-Version: 2025-06-18\r\nX-Pad: ${'p'.repeat(200)}\r\n\r\n`);
    const body = Buffer.from(JSON.stringify(A.call('slow-body', 'echo', { text: 'y'.repeat(200) })));
    const bodyHead = `POST /h/mcp HTTP/1.1\r\n${host}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n` +
      `Mcp-Session-Id: ${normal.headers['mcp-session-id']}\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: ${body.length}\r\n\r\n`;
    const sseHead = Buffer.from(`GET /h/sse HTTP/1.1\r\n${host}Accept: text/event-stream\r\nX-Pad: ${'p'.repeat(200)}\r\n\r\n`);
    const t0 = Date.now();
    const heads = await openMany(N_HEAD, head.subarray(0, 1));
    const bodies = await openMany(N_BODY, Buffer.concat([Buffer.from(bodyHead), body.subarray(0, 1)]));
    const sses = await openMany(N_SSE, sseHead.subarray(0, 1));
    const opened = Date.now() - t0;
    const stops = [dribble(heads, head.subarray(1)), dribble(bodies, body.subarray(1)), dribble(sses, sseHead.subarray(1))];
    const all = [...heads, ...bodies, ...sses];
    try {
      // Meanwhile the normal session is served, more than once.
      for (let i = 0; i < 3; i++) {
        const c0 = Date.now();
        await echoWorks(gw, normal, `normal call ${i} among ${all.length + wsClients.length} slow clients`);
        process.stderr.write(`# normal call ${i} among the slow clients: ${Date.now() - c0} ms\n`);
      }
      const cut = await H.waitFor(() => all.every((s) => s.closed), { timeout: opened + HEADER_TIMEOUT + 15000, interval: 100 });
      const open = all.filter((s) => !s.closed).length;
      assert.ok(cut, `${open} of ${all.length} slow HTTP clients still open ${Date.now() - t0} ms after the first connected ` +
        `(header_timeout_ms ${HEADER_TIMEOUT})`);
      process.stderr.write(`# ${all.length} slow HTTP/SSE clients opened in ${opened} ms, all cut off ${Date.now() - t0} ms after the first\n`);
      const statuses = {};
      for (const s of all) {
        const st = A.parseResponses(Buffer.concat(s.chunks))[0]?.status ?? 'none';
        statuses[st] = (statuses[st] ?? 0) + 1;
      }
      // A client whose 408 crossed its reset may see none; the rest must see 408 (never a 200).
      assert.ok(!statuses[200] && (statuses[408] ?? 0) >= all.length * 0.9, `answers to the slow clients: ${JSON.stringify(statuses)}`);
    } finally {
      for (const f of stops) f();
      for (const s of all) s.sock.destroy();
    }
    await echoWorks(gw, normal, 'the normal session after the slow HTTP clients');
    A.assertAlive(gw);
  });

  test('upgraded WebSockets dribbling a frame are cut off by the ping timeout; every descriptor returns to the baseline', async () => {
    // The gateway pings 30 s after the upgrade and closes 30 s later: a client in the middle of
    // a frame cannot answer. 75 s bounds it.
    const cut = await H.waitFor(() => wsClients.every((s) => s.closed), { timeout: Math.max(1000, wsStart + 75000 - Date.now()), interval: 200 });
    const open = wsClients.filter((s) => !s.closed).length;
    assert.ok(cut, `${open} of ${wsClients.length} slow WebSocket clients still open ${Date.now() - wsStart} ms after their upgrade`);
    process.stderr.write(`# ${wsClients.length} slow WebSocket clients cut off ${Date.now() - wsStart} ms after the upgrades began\n`);
    const pings = wsClients.filter((s) => wsParse(Buffer.concat(s.chunks).subarray(s.headLen)).some((f) => f.opcode === 9)).length;
    assert.ok(pings >= wsClients.length * 0.9, `the gateway pinged them first (${pings} of ${wsClients.length} saw a ping)`);
    for (const s of wsClients) s.sock.destroy();
    const back = await H.waitFor(() => A.fdCount(gw.proc.pid) <= baseline, { timeout: 10000, interval: 100 });
    assert.ok(back, `tollgate holds ${A.fdCount(gw.proc.pid)} descriptors after every slow client went; ${baseline} before them`);
    await echoWorks(gw, normal, 'the normal session at the end');
    await A.stopAndCheck(gw);
  });
});

// ---------------------------------------------------------------------------
// 2. Sessions per grant

describe('2. limits.sessions_per_grant on every transport and era; a closed session frees room', () => {
  const CAP = 2;
  const TOKEN_A = 'tok-a-' + H.randomToken();
  let gw;
  const auth = { authorization: `Bearer ${TOKEN_A}` };

  before(async () => {
    gw = await ctx.gateway('sessions', {
      limits: { sessions_per_grant: CAP },
      grants: [{ name: 'a', token_sha256: H.sha256hex(TOKEN_A) }],
      upstreams: [
        { name: 'h', url: hostile.url('/mcp'), initialize: 'local' },
        { name: 'h2', url: hostile.url('/mcp'), initialize: 'local' },
      ],
    });
  });

  const refusedRight = (status, text, what) => {
    assert.equal(status, 429, `${what}: HTTP ${status} ${text.slice(0, 300)}`);
    const m = JSON.parse(text.slice(text.indexOf('{')));
    assert.equal(m.error?.code, -32600, `${what}: ${text}`);
    assert.match(m.error.message, /sessions_per_grant/, what);
  };

  /** A legacy SSE stream on /UP/sse: resolves once its endpoint event came; close() ends it. */
  async function sseOpen(up) {
    const s = await A.rawSocket(gw.plainPort);
    s.sock.write(`GET /${up}/sse HTTP/1.1\r\nHost: 127.0.0.1:${gw.plainPort}\r\nAccept: text/event-stream\r\nAuthorization: Bearer ${TOKEN_A}\r\n\r\n`);
    await H.waitFor(() => s.closed || /event: ?endpoint/.test(s.text()) || /^HTTP\/1\.1 [45]/.test(s.text()) && s.text().includes('}'), { timeout: 5000, interval: 10 });
    const t = s.text();
    const [res] = A.parseResponses(Buffer.concat(s.chunks));
    return { status: Number(t.split(' ')[1]), text: t, body: res?.body ?? '', close: () => s.sock.destroy(), s };
  }

  /** Waits until a new 2025 Streamable HTTP session can be made, then ends it (DELETE). */
  async function roomAgain(what) {
    await H.waitUntil(async () => {
      const r = await H.postRaw(ctx.fetch, A.mcpUrl(gw, 'h'), H.initializeBody(1), auth);
      const sid = r.headers.get('mcp-session-id');
      if (r.status === 200 && sid) {
        const d = await ctx.fetch(A.mcpUrl(gw, 'h'), { method: 'DELETE', headers: { ...auth, 'mcp-session-id': sid, 'mcp-protocol-version': '2025-06-18' } });
        await d.text();
        return true;
      }
      return false;
    }, { what });
  }

  test('Streamable HTTP: the third initialize is 429 -32600 (sessions_per_grant); a DELETE frees a slot', async () => {
    const a = await session(gw, 'h', auth);
    const b = await session(gw, 'h2', auth); // the cap is per grant, across upstreams
    const r = await H.postRaw(ctx.fetch, A.mcpUrl(gw, 'h'), H.initializeBody(1), auth);
    refusedRight(r.status, r.text, 'the third Streamable HTTP session');
    const d = await ctx.fetch(a.url, { method: 'DELETE', headers: a.headers });
    assert.ok(d.status === 200 || d.status === 204, `DELETE: ${d.status}`);
    await d.text();
    const c = await session(gw, 'h', auth);
    for (const s of [b, c]) (await ctx.fetch(s.url, { method: 'DELETE', headers: s.headers })).text();
    await roomAgain('a session again after both DELETEs');
  });

  test('legacy SSE: the third GET /sse is 429 -32600 (sessions_per_grant); closing a stream frees a slot', async () => {
    const a = await sseOpen('h');
    const b = await sseOpen('h2');
    assert.equal(a.status, 200, a.text);
    assert.equal(b.status, 200, b.text);
    const c = await sseOpen('h');
    refusedRight(c.status, c.body, 'the third SSE stream');
    c.close();
    a.close();
    await H.waitUntil(async () => {
      const d = await sseOpen('h');
      d.close();
      return d.status === 200;
    }, { what: 'an SSE stream served once one closed' });
    b.close();
    await roomAgain('a session again after the SSE streams closed');
  });

  test('WebSocket: the third upgrade is 429 -32600 (sessions_per_grant); closing a socket frees a slot', async () => {
    const hdr = `Authorization: Bearer ${TOKEN_A}\r\n`;
    const a = await wsUpgrade(gw.plainPort, 'h', hdr);
    const b = await wsUpgrade(gw.plainPort, 'h2', hdr);
    assert.equal(a.status, 101, a.text());
    assert.equal(b.status, 101, b.text());
    const c = await wsUpgrade(gw.plainPort, 'h', hdr);
    await H.waitFor(() => c.closed || A.parseResponses(Buffer.concat(c.chunks)).length > 0, { timeout: 5000 });
    const [res] = A.parseResponses(Buffer.concat(c.chunks));
    assert.ok(res, `an answer to the third upgrade: ${c.text()}`);
    refusedRight(res.status, res.body, 'the third WebSocket');
    c.sock.destroy();
    a.sock.destroy();
    await H.waitUntil(async () => {
      const d = await wsUpgrade(gw.plainPort, 'h', hdr);
      d.sock.destroy();
      return d.status === 101;
    }, { what: 'a WebSocket served once one closed' });
    b.sock.destroy();
    await roomAgain('a session again after the WebSockets closed');
  });

  test('2026-07-28 stateless requests share one bridged session per grant and upstream: refused while 2025 sessions fill the cap, served once one ends', async () => {
    const META = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
    const call2026 = (up, id) => H.postRaw(ctx.fetch, A.mcpUrl(gw, up), {
      jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'echo', arguments: { text: id }, _meta: META },
    }, { ...auth, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'echo' });
    const a = await session(gw, 'h', auth);
    const b = await session(gw, 'h', auth);
    const r = await call2026('h2', 'refused');
    refusedRight(r.status, r.text, 'a stateless call while two 2025 sessions fill the cap');
    (await ctx.fetch(a.url, { method: 'DELETE', headers: a.headers })).text();
    for (let i = 0; i < 5; i++) {
      const ok = await call2026('h2', `ok-${i}`);
      assert.equal(ok.status, 200, ok.text);
      assert.equal(H.resultText(A.answerOf(ok, `ok-${i}`)?.result), `ok-${i}`, ok.text);
    }
    // The five calls took one slot (the bridged session): with b, the cap is reached.
    const third = await H.postRaw(ctx.fetch, A.mcpUrl(gw, 'h'), H.initializeBody(1), auth);
    refusedRight(third.status, third.text, 'a 2025 session beside b and the bridged session');
    (await ctx.fetch(b.url, { method: 'DELETE', headers: b.headers })).text();
    await roomAgain('a 2025 session once b ended');
    await A.stopAndCheck(gw);
  });
});

// ---------------------------------------------------------------------------
// 3. Peer-chosen sizes

describe('3. sizes a client chooses: a clean refusal of that request or connection, then service', () => {
  const BODY = 256 * 1024;
  const HEAD = 16384;
  let gw;
  let s;
  let pathMcp;

  before(async () => {
    gw = await ctx.gateway('sizes-client', {
      limits: { body_bytes: BODY, header_bytes: HEAD, json_depth: 32 },
      upstreams: [{ name: 'h', url: hostile.url('/mcp'), initialize: 'local' }],
    });
    s = await session(gw, 'h');
    pathMcp = new URL(s.url).pathname;
  });

  const hdrs = () => ({ ...H.MCP_HEADERS, ...s.headers });
  const head = (extra = {}) => `POST ${pathMcp} HTTP/1.1\r\nHost: 127.0.0.1:${gw.plainPort}\r\n` +
    Object.entries({ ...hdrs(), ...extra }).map(([k, v]) => `${k}: ${v}\r\n`).join('') + '\r\n';

  async function refused(text, status, what) {
    const r = await exchange(gw.plainPort, text);
    const [res] = r.responses;
    assert.ok(res, `${what}: an HTTP answer (closed ${r.closed}): ${r.text.slice(0, 300)}`);
    assert.equal(res.status, status, `${what}: ${res.head}\n${res.body.slice(0, 300)}`);
    if (res.body) assert.ok(JSON.parse(res.body).error, `${what}: a JSON-RPC error body: ${res.body.slice(0, 300)}`);
    assert.ok(r.closed, `${what}: the connection is closed after the refusal`);
    A.assertAlive(gw, what);
    await echoWorks(gw, s, `served after ${what}`);
    return res;
  }

  for (const cl of ['1000000000000000', '18446744073709551615', '99999999999999999999999999']) {
    test(`Content-Length: ${cl}: refused before any body is read`, async () => {
      const r = await exchange(gw.plainPort, head({ 'content-length': cl }) + '{"jsonrpc"');
      const [res] = r.responses;
      assert.ok(res, `an answer: ${r.text.slice(0, 300)}`);
      assert.ok(res.status === 413 || res.status === 400, `413 (or 400 for a length past 2^64): ${res.head}`);
      assert.ok(r.closed, 'closed after the refusal');
      A.assertAlive(gw);
      await echoWorks(gw, s, 'served after the huge Content-Length');
    });
  }

  test('a chunk size of 2^60: 413 with a JSON-RPC error, nothing allocated for it', async () => {
    const rss0 = A.vmRssKiB(gw.proc.pid);
    await refused(head({ 'transfer-encoding': 'chunked' }) + '1000000000000000\r\n' + 'x'.repeat(300000), 413, 'a chunk of 2^60 bytes');
    assert.ok(A.vmRssKiB(gw.proc.pid) - rss0 < 64 * 1024, 'RSS grew less than 64 MiB');
  });

  test('chunk sizes that overflow (17 hex digits) or are not hex: 400', async () => {
    await refused(head({ 'transfer-encoding': 'chunked' }) + '10000000000000000\r\nxx\r\n0\r\n\r\n', 400, 'a chunk size past 2^64');
  });

  test(`100 headers (over the 64 the gateway keeps) and an Mcp-Session-Id over header_bytes (${HEAD}): 431`, async () => {
    const many = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`x-h${i}`, 'v']));
    await refused(head({ ...many, 'content-length': 2 }) + '{}', 431, '100 headers');
    await refused(head({ 'mcp-session-id': 's'.repeat(HEAD * 2), 'content-length': 2 }) + '{}', 431, 'a 32 KiB Mcp-Session-Id');
  });

  test('an Mcp-Session-Id under header_bytes but of no session (8 KiB): a clean 404, not a crash', async () => {
    const body = JSON.stringify(A.call('sid', 'echo', { text: 'x' }));
    const r = await exchange(gw.plainPort, head({ 'mcp-session-id': 'S'.repeat(8192), 'content-length': Buffer.byteLength(body), connection: 'close' }) + body);
    const [res] = r.responses;
    assert.ok(res && res.status >= 400 && res.status < 500, `a 4xx: ${r.text.slice(0, 300)}`);
    A.assertAlive(gw);
    await echoWorks(gw, s, 'served after an 8 KiB unknown session id');
  });

  test(`an id of ${BODY / 1024 - 2} KiB (just under body_bytes) is restored in the answer; one over it is 413`, async () => {
    const id = 'i'.repeat(BODY - 2048);
    const a = await A.rpc(ctx.fetch, s.url, s, A.call(id, 'echo', { text: 'long id' }));
    assert.equal(a.id, id);
    assert.equal(H.resultText(a.result), 'long id');
    const big = JSON.stringify(A.call('i'.repeat(BODY + 10), 'echo', {}));
    await refused(head({ 'content-length': Buffer.byteLength(big) }) + big, 413, 'an id over body_bytes');
  });

  test('JSON nested 100,000 deep (within body_bytes, json_depth 32): a -32700/-32600 error, the gateway serves on', async () => {
    const body = `{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{"name":"echo","arguments":{"d":${'['.repeat(100000)}${']'.repeat(100000)}}}}`;
    const r = await exchange(gw.plainPort, head({ 'content-length': Buffer.byteLength(body), connection: 'close' }) + body);
    const [res] = r.responses;
    assert.ok(res, `an answer: ${r.text.slice(0, 300)}`);
    const m = JSON.parse(res.body);
    assert.ok(m.error && (m.error.code === -32700 || m.error.code === -32600), `a parse error: ${res.status} ${res.body.slice(0, 300)}`);
    A.assertAlive(gw);
    await echoWorks(gw, s, 'served after deep JSON');
  });

  test('WebSocket frame lengths of 2^62 and of body_bytes + 1, and fragments adding up past body_bytes: close 1009, the gateway serves on', async () => {
    for (const [what, bytes] of [
      ['a 2^62-byte frame', Buffer.concat([wsFrame(1, 'x'.repeat(10), { len: 2 ** 62 }).subarray(0, 14), Buffer.alloc(4096, 0x78)])],
      ['a frame of body_bytes + 1', wsFrame(1, 'y'.repeat(BODY + 1))],
      ['fragments adding up past body_bytes', Buffer.concat([
        ...Array.from({ length: 5 }, (_, i) => wsFrame(i === 0 ? 1 : 0, 'z'.repeat(BODY / 4), { fin: false })),
        wsFrame(0, 'z', { fin: true })])],
    ]) {
      const w = await wsUpgrade(gw.plainPort, 'h');
      assert.equal(w.status, 101, w.text());
      w.sock.write(bytes);
      await H.waitFor(() => w.closed || wsParse(Buffer.concat(w.chunks).subarray(w.headLen)).some((f) => f.opcode === 8), { timeout: 10000 });
      const close = wsParse(Buffer.concat(w.chunks).subarray(w.headLen)).find((f) => f.opcode === 8);
      assert.ok(close, `${what}: a close frame (socket closed: ${w.closed})`);
      assert.equal(close.payload.readUInt16BE(0), 1009, `${what}: close code`);
      w.sock.destroy();
      A.assertAlive(gw, what);
    }
    await echoWorks(gw, s, 'served after the oversized WebSocket frames');
    await A.stopAndCheck(gw);
  });
});

describe('3. a batch (2025-03-26) collects every answer before sending: bounded like any other output', () => {
  test('40 resources/read of 2 MiB in one batch, nothing read: RSS grows < 24 MiB (output_high_water 1 MiB, output_total_bytes 4 MiB)', async () => {
    const N = 40;
    const gw = await ctx.gateway('batch', {
      limits: { output_high_water: MiB, output_total_bytes: 4 * MiB, inflight_per_session: 64 },
      upstreams: [{ name: 'h', url: hostile.url('/mcp') }],
    }, { env: { ASAN_OPTIONS: 'detect_leaks=1:abort_on_error=0:quarantine_size_mb=1' } });
    const url = A.mcpUrl(gw, 'h');
    const init = await H.postRaw(ctx.fetch, url, H.initializeBody(1, '2025-03-26'));
    assert.equal(init.status, 200, init.text);
    const headers = { 'mcp-session-id': init.headers.get('mcp-session-id'), 'mcp-protocol-version': '2025-03-26' };
    await H.postRaw(ctx.fetch, url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
    const s = { url, headers };
    await A.rpc(ctx.fetch, url, s, { jsonrpc: '2.0', id: 'warm', method: 'resources/read', params: { uri: 'big://2' } });
    const rss0 = A.vmRssKiB(gw.proc.pid) / 1024;
    const reads0 = hostile.resourceReads;
    const batch = JSON.stringify(Array.from({ length: N }, (_, i) => ({ jsonrpc: '2.0', id: `b-${i}`, method: 'resources/read', params: { uri: 'big://2' } })));
    const sock = await A.rawSocket(gw.plainPort, { paused: true });
    sock.sock.write(A.httpText('POST', '/h/mcp', { host: `127.0.0.1:${gw.plainPort}`, headers: { ...H.MCP_HEADERS, ...headers }, body: batch }));
    const asked = (await A.settled(() => hostile.resourceReads, { quietMs: 800, timeout: 30000 })) - reads0;
    await A.settled(() => Math.round(A.vmRssKiB(gw.proc.pid) / 1024), { quietMs: 600, timeout: 10000 });
    const grown = A.vmRssKiB(gw.proc.pid) / 1024 - rss0;
    process.stderr.write(`# a batch of ${N} x 2 MiB: ${asked} forwarded while unread, RSS +${grown.toFixed(1)} MiB\n`);
    A.assertAlive(gw);
    const other = await session(gw, 'h');
    await echoWorks(gw, other, 'another session while the batch is unread');
    sock.sock.destroy();
    assert.ok(grown < 24, `tollgate's RSS grew by ${grown.toFixed(1)} MiB for one batch whose client reads nothing ` +
      `(${asked} of ${N} 2 MiB answers taken from the upstream; output_high_water 1 MiB, output_total_bytes 4 MiB)`);
    await A.stopAndCheck(gw);
  });
});

describe('3. sizes an upstream chooses: the call gets a clean error, the gateway serves the next one', () => {
  const RESP = 1 * MiB;
  let gw;
  let raw;
  let script = () => '';
  const sess = {};

  /** A raw HTTP upstream: every request is answered with what script(bodyText) returns (string or Buffer or function(sock)). */
  async function rawUpstream() {
    const srv = net.createServer((sock) => {
      sock.on('error', () => {});
      let buf = Buffer.alloc(0);
      sock.on('data', (d) => {
        buf = Buffer.concat([buf, d]);
        for (;;) {
          const i = buf.indexOf('\r\n\r\n');
          if (i < 0) return;
          const h = buf.subarray(0, i).toString('latin1');
          const n = Number(/\r\ncontent-length: *(\d+)/i.exec(h)?.[1] ?? 0);
          if (buf.length < i + 4 + n) return;
          const body = buf.subarray(i + 4, i + 4 + n).toString('utf8');
          buf = buf.subarray(i + 4 + n);
          let msg = {};
          try { msg = JSON.parse(body); } catch { /* not JSON */ }
          const out = script(msg, sock);
          if (typeof out === 'string' || Buffer.isBuffer(out)) sock.write(out);
        }
      });
    });
    srv.listen(0, '127.0.0.1');
    await once(srv, 'listening');
    ctx.cleanup.add(() => new Promise((r) => srv.close(r)));
    return { port: srv.address().port, srv };
  }

  const jsonAnswer = (obj) => {
    const b = JSON.stringify(obj);
    return `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`;
  };

  before(async () => {
    raw = await rawUpstream();
    const big = path.join(ctx.dir, 'bigline.mjs');
    // A stdio child that answers tools/call "huge" with a line of 3 MiB (over response_bytes 1 MiB),
    // then echoes everything else.
    fs.writeFileSync(big, [
      "import readline from 'node:readline';",
      "const rl = readline.createInterface({ input: process.stdin });",
      "const out = (o) => process.stdout.write(JSON.stringify(o) + '\\n');",
      "rl.on('line', (l) => {",
      "  let m; try { m = JSON.parse(l); } catch { return; }",
      "  if (m.id === undefined) return;",
      "  if (m.method === 'initialize') return out({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'bigline', version: '1' } } });",
      "  if (m.method === 'tools/call' && m.params.name === 'huge') return process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: 'h'.repeat(3 * 1048576) }] } }) + '\\n');",
      "  if (m.method === 'tools/call') return out({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: m.params.arguments?.text ?? 'ok' }] } });",
      "  out({ jsonrpc: '2.0', id: m.id, result: {} });",
      "});",
    ].join('\n') + '\n');
    gw = await ctx.gateway('sizes-upstream', {
      limits: { response_bytes: RESP, json_depth: 32 },
      upstreams: [
        { name: 'raw', url: `http://127.0.0.1:${raw.port}/mcp`, initialize: 'local', call_timeout_ms: 4000 },
        { name: 'lsse', url: hostile.url('/sse'), transport: 'sse', call_timeout_ms: 10000 },
        { name: 'st', command: [process.execPath, big], call_timeout_ms: 4000 },
      ],
    });
    for (const up of ['raw', 'lsse', 'st']) sess[up] = await session(gw, up);
  });

  const echoAnswer = (m) => jsonAnswer({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: m.params?.arguments?.text ?? 'ok' }] } });

  /** One call on `up` whose answer is scripted by `fn`; expects a JSON-RPC error, then a normal call works. */
  async function cleanError(up, fn, what, { within = 6000 } = {}) {
    script = (m, sock) => (m.method === 'tools/call' && m.params?.name === 'bad' ? fn(m, sock) : echoAnswer(m));
    const rss0 = A.vmRssKiB(gw.proc.pid);
    const t0 = Date.now();
    const r = await H.postRaw(ctx.fetch, sess[up].url, A.call(`bad-${Date.now()}`, 'bad', {}), sess[up].headers);
    const ms = Date.now() - t0;
    const m = r.messages.find((x) => x && x.id !== undefined);
    assert.ok(m?.error && typeof m.error.code === 'number' && !m.result, `${what}: a JSON-RPC error, got HTTP ${r.status} ${r.text.slice(0, 300)}`);
    assert.ok(ms < within, `${what}: answered in ${ms} ms`);
    process.stderr.write(`# ${what}: ${m.error.code} ${m.error.message} (${ms} ms)\n`);
    A.assertAlive(gw, what);
    assert.ok(A.vmRssKiB(gw.proc.pid) - rss0 < 128 * 1024, `${what}: RSS grew less than 128 MiB`);
    script = (mm) => echoAnswer(mm);
    await echoWorks(gw, sess[up], `served after ${what}`);
    return m;
  }

  test('an upstream Content-Length of 10^15, then more bytes than response_bytes: an error at response_bytes, not at the length', async () => {
    await cleanError('raw', (m, sock) => {
      sock.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000000000000\r\n\r\n{"jsonrpc":"2.0","id":' + JSON.stringify(m.id) + ',"result":{"t":"');
      sock.write('x'.repeat(2 * RESP));
    }, 'a Content-Length of 10^15');
  });

  test('an upstream chunk size of 2^60 with more than response_bytes behind it: an error', async () => {
    await cleanError('raw', (m, sock) => {
      sock.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n');
      sock.write('x'.repeat(2 * RESP));
    }, 'a chunk of 2^60');
  });

  test('an upstream SSE event larger than response_bytes (a Streamable HTTP answer as text/event-stream): an error', async () => {
    await cleanError('raw', (m, sock) => {
      sock.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n');
      const ev = `data: {"jsonrpc":"2.0","id":${JSON.stringify(m.id)},"result":{"t":"${'e'.repeat(2 * RESP)}"}}\n\n`;
      sock.write(`${Buffer.byteLength(ev).toString(16)}\r\n${ev}\r\n`);
    }, 'an SSE event of 2 MiB');
  });

  test('an upstream head that never ends (4 MiB of headers): the call times out with an error, memory stays flat', async () => {
    await cleanError('raw', (m, sock) => {
      sock.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n');
      for (let i = 0; i < 64; i++) sock.write(`X-Pad-${i}: ${'p'.repeat(65536)}\r\n`);
    }, 'a 4 MiB upstream head', { within: 8000 });
  });

  test('an upstream answer nested 100,000 deep (json_depth 32): an error', async () => {
    await cleanError('raw', (m) => {
      const b = `{"jsonrpc":"2.0","id":${JSON.stringify(m.id)},"result":{"content":[],"d":${'['.repeat(100000)}${']'.repeat(100000)}}}`;
      return `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`;
    }, 'a 100,000-deep upstream answer');
  });

  test('a legacy SSE upstream event larger than response_bytes: an error', async () => {
    // hostile's "big" tool answers arguments.mib MiB; 2 MiB is over response_bytes (1 MiB).
    const t0 = Date.now();
    const r = await H.postRaw(ctx.fetch, sess.lsse.url, A.call('big-sse', 'big', { mib: 2 }), sess.lsse.headers);
    const m = A.answerOf(r, 'big-sse');
    assert.ok(m?.error, `an error for a 2 MiB SSE event: HTTP ${r.status} ${r.text.slice(0, 300)}`);
    process.stderr.write(`# a 2 MiB legacy SSE event: ${m.error.code} ${m.error.message} (${Date.now() - t0} ms)\n`);
    A.assertAlive(gw);
    await echoWorks(gw, sess.lsse, 'the same legacy SSE session served after a 2 MiB event');
    const s2 = await session(gw, 'lsse');
    await echoWorks(gw, s2, 'a new legacy SSE session served after a 2 MiB event');
  });

  test('a stdio stdout line of 3 MiB (over response_bytes): the call gets an error, the child and the gateway serve on', async () => {
    const t0 = Date.now();
    const r = await H.postRaw(ctx.fetch, sess.st.url, A.call('huge-line', 'huge', {}), sess.st.headers);
    const m = A.answerOf(r, 'huge-line');
    assert.ok(m?.error, `an error for a 3 MiB stdout line: HTTP ${r.status} ${r.text.slice(0, 300)}`);
    process.stderr.write(`# a 3 MiB stdio line: ${m.error.code} ${m.error.message} (${Date.now() - t0} ms)\n`);
    A.assertAlive(gw);
    await echoWorks(gw, sess.st, 'the same stdio session served after the long line');
    await A.stopAndCheck(gw);
  });
});
