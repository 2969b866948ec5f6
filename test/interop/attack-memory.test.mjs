// The hostile review's attack battery (issue 7), part 3: memory a client can pin.
//   7a. one connection, one session, 40 pipelined resources/read of a 2 MiB resource, nothing
//       read: every answer is queued (today +106 MiB); the queue must stop near
//       limits.output_high_water (the next pipelined request waits until the output drains)
//   7b. a WebSocket client that never reads and sends ~96 MiB of pings: every pong is queued
//       (today +90 MiB); reading must stop while the output is over the high-water mark
//   7c. a process-wide gauge of buffered output bytes on /metrics, and a total budget for it:
//         metric     tollgate_output_buffered_bytes      (PROPOSED NAME, chosen by this test)
//         directive  limits.output_total_bytes           (PROPOSED NAME, chosen by this test)
//       many connections each holding up to the high-water mark cannot add up beyond the total
// Each gateway here runs with ASAN_OPTIONS quarantine_size_mb=1 (as in transports.test.mjs): by
// default ASan keeps up to 256 MiB of freed blocks mapped, and RSS would show that instead of
// what tollgate holds. Part 1 (crashes) is attack.test.mjs, part 2 (limits) attack-limits.test.mjs.
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/attack-memory.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import * as H from './lib/harness.mjs';
import * as A from './lib/attack.mjs';
import { startHostile } from '../fixtures/hostile/hostile.mjs';

H.requireNodeModules();

const ctx = A.makeContext('tollgate-attack-memory-');
const test = ctx.test(it);
const ADMIN = 'admin-' + H.randomToken();
const ASAN = { ASAN_OPTIONS: 'detect_leaks=1:abort_on_error=0:quarantine_size_mb=1' };
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

const rssMiB = (gw) => A.vmRssKiB(gw.proc.pid) / 1024;

async function session(gw, up) {
  const url = A.mcpUrl(gw, up);
  const r = await H.postRaw(ctx.fetch, url, H.initializeBody(1));
  assert.equal(r.status, 200, `initialize on /${up}/mcp: HTTP ${r.status} ${r.text}`);
  const headers = { 'mcp-session-id': r.headers.get('mcp-session-id'), 'mcp-protocol-version': '2025-06-18' };
  const n = await H.postRaw(ctx.fetch, url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
  assert.ok(n.status === 202 || n.status === 200, `initialized: ${n.status}`);
  return { url, headers };
}

/** `count` resources/read requests of big://SIZE_MIB, back to back as one write (HTTP/1.1 pipelining). */
function pipelined(gw, s, count, sizeMiB, tag) {
  let text = '';
  for (let i = 0; i < count; i++) {
    text += A.httpText('POST', new URL(s.url).pathname, {
      host: `127.0.0.1:${gw.plainPort}`,
      headers: { ...H.MCP_HEADERS, ...s.headers },
      body: JSON.stringify({ jsonrpc: '2.0', id: `${tag}-${i}`, method: 'resources/read', params: { uri: `big://${sizeMiB}` } }),
    });
  }
  return text;
}

/** Resumes a paused raw socket and waits for `count` whole responses (or its end). */
async function readAll(sock, count, timeout = 90000) {
  sock.sock.resume();
  await H.waitFor(() => sock.closed || A.parseResponses(Buffer.concat(sock.chunks)).length >= count, { timeout, interval: 100 });
  return A.parseResponses(Buffer.concat(sock.chunks));
}

async function echoWorks(gw, what) {
  const s = await session(gw, 'h');
  const a = await A.rpc(ctx.fetch, s.url, s, A.call('e', 'echo', { text: 'served' }));
  assert.equal(H.resultText(a.result), 'served', `${what}: ${JSON.stringify(a)}`);
}

async function metrics(gw) {
  const r = await A.admin(ctx.fetch, gw, 'GET', '/metrics', ADMIN);
  assert.equal(r.status, 200, r.text);
  return r.text;
}

// ---------------------------------------------------------------------------

describe('7a. HTTP/1.1 pipelining: a connection that reads nothing cannot queue answers without bound', () => {
  test('40 pipelined resources/read of 2 MiB, nothing read: RSS grows < 24 MiB (output_high_water 1 MiB); all 40 arrive once read', async () => {
    const N = 40;
    const gw = await ctx.gateway('pipeline', {
      upstreams: [{ name: 'h', url: hostile.url('/mcp') }],
    }, { env: ASAN });
    const s = await session(gw, 'h');
    await A.rpc(ctx.fetch, s.url, s, { jsonrpc: '2.0', id: 'warm', method: 'resources/read', params: { uri: 'big://2' } });
    const rss0 = rssMiB(gw);
    const reads0 = hostile.resourceReads;
    const sock = await A.rawSocket(gw.plainPort, { paused: true });
    sock.sock.write(pipelined(gw, s, N, 2, 'p'));
    // the upstream has answered what the gateway asked for: the count stops moving
    const asked = (await A.settled(() => hostile.resourceReads, { quietMs: 800, timeout: 30000 })) - reads0;
    await A.settled(() => Math.round(rssMiB(gw)), { quietMs: 600, timeout: 10000 });
    const grown = rssMiB(gw) - rss0;
    process.stderr.write(`# 7a pipelining: ${N} x 2 MiB requested, ${asked} forwarded while unread, RSS +${grown.toFixed(1)} MiB\n`);
    A.assertAlive(gw);
    assert.ok(grown < 24, `tollgate's RSS grew by ${grown.toFixed(1)} MiB for one connection that reads nothing ` +
      `(${asked} of ${N} pipelined 2 MiB answers taken from the upstream; limits.output_high_water 1 MiB)`);
    await echoWorks(gw, 'another session while one connection is stalled');
    const got = await readAll(sock, N);
    sock.sock.destroy();
    assert.equal(got.length, N, `all ${N} pipelined answers arrive once the client reads (got ${got.length})`);
    for (const [i, r] of got.entries()) {
      const m = JSON.parse(r.body);
      assert.equal(m.id, `p-${i}`, 'in order');
      assert.equal(m.result?.contents?.[0]?.text?.length, 2 * MiB, `answer ${i} whole`);
    }
    await A.stopAndCheck(gw);
  });
});

// ---------------------------------------------------------------------------

describe('7b. WebSocket: a client that never reads cannot make the gateway queue pongs without bound', () => {
  /** One masked client frame. */
  function frame(opcode, payload) {
    const n = payload.length;
    assert.ok(n < 126);
    const key = randomBytes(4);
    const body = Buffer.from(payload);
    for (let i = 0; i < n; i++) body[i] ^= key[i & 3];
    return Buffer.concat([Buffer.from([0x80 | opcode, 0x80 | n]), key, body]);
  }

  test('~96 MiB of 125-byte pings, nothing read: RSS grows < 24 MiB, the gateway goes on serving', async () => {
    const gw = await ctx.gateway('ws-pings', {
      upstreams: [{ name: 'h', url: hostile.url('/mcp') }],
    }, { env: ASAN });
    const key = randomBytes(16).toString('base64');
    const sock = await A.rawSocket(gw.plainPort);
    sock.sock.write(A.httpText('GET', '/h/ws', {
      host: `127.0.0.1:${gw.plainPort}`,
      headers: { upgrade: 'websocket', connection: 'Upgrade', 'sec-websocket-version': '13', 'sec-websocket-key': key, 'sec-websocket-protocol': 'mcp' },
    }));
    assert.ok(await H.waitFor(() => sock.text().includes('\r\n\r\n'), { timeout: 5000 }), 'handshake answered');
    assert.match(sock.text(), /^HTTP\/1\.1 101 /, sock.text());
    assert.ok(sock.text().includes(createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64')));
    sock.sock.pause(); // never read again
    // one chunk: 8,000 pings of 125 bytes (131 bytes each on the wire, ~1 MiB); the same chunk again and again
    const ping = frame(0x9, Buffer.alloc(125, 0x61));
    const chunk = Buffer.concat(Array(8000).fill(ping));
    const rss0 = rssMiB(gw);
    let sent = 0;
    let stalled = false;
    while (sent < 96 * MiB && !sock.closed) {
      if (!sock.sock.write(chunk)) {
        // the gateway stopped reading (or is slow): wait for the socket to drain, at most 3 s
        const drained = await Promise.race([once(sock.sock, 'drain').then(() => true), H.sleep(3000).then(() => false)]);
        if (!drained) { stalled = true; break; }
      }
      sent += chunk.length;
    }
    await A.settled(() => Math.round(rssMiB(gw)), { quietMs: 800, timeout: 20000 });
    const grown = rssMiB(gw) - rss0;
    process.stderr.write(`# 7b WebSocket pings: ${(sent / MiB).toFixed(0)} MiB of pings sent${stalled ? ' (then tollgate stopped reading)' : ''}, ` +
      `RSS +${grown.toFixed(1)} MiB\n`);
    A.assertAlive(gw);
    assert.ok(grown < 24, `tollgate's RSS grew by ${grown.toFixed(1)} MiB queueing pongs for a WebSocket client that never reads ` +
      `(${(sent / MiB).toFixed(0)} MiB of pings; limits.output_high_water 1 MiB)`);
    await echoWorks(gw, 'another client while the WebSocket is stalled');
    sock.sock.destroy();
    await A.stopAndCheck(gw);
  });
});

// ---------------------------------------------------------------------------

describe('7c. output buffered across the process: a gauge and a total budget (proposed names)', () => {
  const GAUGE = /^tollgate_output_buffered_bytes(\{[^}]*\})? /; // PROPOSED metric name

  test('/metrics exposes tollgate_output_buffered_bytes: > 0 while a client stalls, ~0 once it has read', async () => {
    const gw = await ctx.gateway('gauge', {
      admin: { token_sha256: H.sha256hex(ADMIN) },
      upstreams: [{ name: 'h', url: hostile.url('/mcp') }],
    }, { admin: true, env: ASAN });
    const s = await session(gw, 'h');
    const before = await metrics(gw);
    assert.match(before, /^# TYPE tollgate_output_buffered_bytes gauge$/m,
      'a gauge tollgate_output_buffered_bytes (proposed name: bytes queued to clients, all connections) in /metrics');
    const sock = await A.rawSocket(gw.plainPort, { paused: true });
    sock.sock.write(pipelined(gw, s, 8, 2, 'g')); // 16 MiB: more than the kernel's socket buffers take
    await A.settled(() => hostile.resourceReads, { quietMs: 800, timeout: 30000 });
    const held = A.metric(await metrics(gw), GAUGE);
    process.stderr.write(`# 7c gauge: ${(held / MiB).toFixed(2)} MiB buffered for a stalled client\n`);
    assert.ok(held > 0, `the gauge shows the bytes waiting for the stalled client: ${held}`);
    const got = await readAll(sock, 8);
    sock.sock.destroy();
    assert.equal(got.length, 8);
    const after = await H.waitFor(async () => {
      const v = A.metric(await metrics(gw), GAUGE);
      return v < 65536 ? v + 1 : 0;
    }, { timeout: 5000 });
    assert.ok(after, 'the gauge falls back once the client has read everything');
    await A.stopAndCheck(gw);
  });

  test('limits.output_total_bytes (4 MiB) bounds the sum over connections even when each may hold 16 MiB', async () => {
    // 6 connections that read nothing, each with 128 pipelined reads of 64 KiB (8 MiB each, more
    // than the kernel keeps): output_high_water = 16 MiB alone would let them hold ~24 MiB
    // together; the total budget must keep the sum near 4 MiB (a little over: answers are never
    // split, and several may complete at once).
    const CONNS = 6;
    const PER = 128;
    const TOTAL = 4 * MiB;
    const gw = await ctx.gateway('budget', {
      admin: { token_sha256: H.sha256hex(ADMIN) },
      limits: { output_high_water: 16 * MiB, output_total_bytes: TOTAL }, // output_total_bytes: PROPOSED directive
      upstreams: [{ name: 'h', url: hostile.url('/mcp') }],
    }, { admin: true, env: ASAN });
    const s = await session(gw, 'h');
    const rss0 = rssMiB(gw);
    const socks = [];
    for (let c = 0; c < CONNS; c++) {
      const sock = await A.rawSocket(gw.plainPort, { paused: true });
      sock.sock.write(pipelined(gw, s, PER, 0.0625, `c${c}`));
      socks.push(sock);
    }
    const reads0 = hostile.resourceReads;
    await A.settled(() => hostile.resourceReads, { quietMs: 800, timeout: 30000 });
    const held = A.metric(await metrics(gw), GAUGE);
    const grown = rssMiB(gw) - rss0;
    process.stderr.write(`# 7c budget: ${CONNS} stalled connections, ${hostile.resourceReads - reads0} answers taken, ` +
      `${(held / MiB).toFixed(2)} MiB buffered (budget ${TOTAL / MiB} MiB), RSS +${grown.toFixed(1)} MiB\n`);
    assert.ok(held !== undefined, 'the gauge tollgate_output_buffered_bytes is in /metrics');
    assert.ok(held <= TOTAL + MiB, `buffered output ${(held / MiB).toFixed(2)} MiB exceeds limits.output_total_bytes ${TOTAL / MiB} MiB by more than 1 MiB`);
    assert.ok(grown < 24, `RSS +${grown.toFixed(1)} MiB`);
    await echoWorks(gw, 'a new client while the budget is spent');
    for (const [c, sock] of socks.entries()) {
      const got = await readAll(sock, PER);
      sock.sock.destroy();
      assert.equal(got.length, PER, `connection ${c}: all ${PER} answers arrive once it reads (got ${got.length})`);
    }
    await A.stopAndCheck(gw);
  });
});
