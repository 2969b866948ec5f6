// https:// upstreams (issue 10, item 2), against Node https servers (the hostile fixture with its
// `tls` option) and a throwaway CA made at test time (H.makeUpstreamCerts: a CA, a second unrelated
// one, a client CA; server certificates good, untrusted, for another name, for the IP as a DNS name
// only, expired; client certificates good and rogue):
//   - good: Streamable HTTP and legacy SSE upstreams over TLS end to end with the SDK client; a
//     large answer; no SNI for an IP host, tls.server_name sent as SNI; keep-alive (50 sequential
//     calls on at most pool.size TLS connections), concurrent calls on pool.size connections at
//     once; a pooled connection the upstream closed while idle (FIN or close_notify) is not reused
//   - mTLS: tls.cert/key, the upstream sees the certificate's subject
//   - verify = false: `tollgate -t` warns, calls work against an untrusted certificate
//   - refused, each -32004 with `upstream TLS handshake failed upstream=NAME host=... reason="..."`
//     in the log and no HTTP request at the upstream: wrong CA (named, and the system bundle), wrong
//     name (tls.server_name), an IP host whose certificate names another host or the IP only as a
//     DNS name, an expired certificate, a required client certificate missing, a client certificate
//     the upstream does not trust, a plain HTTP server, a server that never answers the ClientHello
//   - the refund rule: a call whose handshake failed never ran, so its rate-limit token comes back
//   - configuration errors of the tls group, by `tollgate -t`
//   - the gateway stays up, has no sanitizer report and exits 0 on SIGTERM
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/tls-upstream.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as A from './lib/attack.mjs';
import { startHostile } from '../fixtures/hostile/hostile.mjs';

H.requireNodeModules();

const ctx = A.makeContext('tollgate-tls-upstream-');
const test = ctx.test(it);
const POOL = 3; // pool.size of the keep-alive upstream
const N = 2; // rate limit of the refund tests: N calls per minute
let certs;
let gw;
const fx = {}; // the upstream fixtures, by role
const relay = {}; // TCP relays in front of some of them, by role
let silent; // a TCP server that accepts and never answers: { port, received: Buffer[] }

/** s as a literal inside a RegExp. */
const re = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * A TCP relay to 127.0.0.1:target that reads the TLS records the gateway sends (type, version,
 * length) and counts them by type: { port, types: Map(type -> count), bytes }. 23 is
 * application_data: a request, encrypted; a refused handshake must show none.
 */
async function startRelay(target) {
  const r = { types: new Map(), bytes: 0, sockets: new Set() };
  const srv = net.createServer((down) => {
    const up = net.connect(target, '127.0.0.1');
    r.sockets.add(down);
    r.sockets.add(up);
    let pending = Buffer.alloc(0);
    down.on('data', (d) => {
      r.bytes += d.length;
      pending = Buffer.concat([pending, d]);
      while (pending.length >= 5) {
        const len = pending.readUInt16BE(3);
        if (pending.length < 5 + len) break;
        r.types.set(pending[0], (r.types.get(pending[0]) ?? 0) + 1);
        pending = pending.subarray(5 + len);
      }
      up.write(d);
    });
    up.on('data', (d) => down.write(d));
    const done = () => { down.destroy(); up.destroy(); };
    for (const s of [down, up]) {
      s.on('error', () => {});
      s.on('close', () => { r.sockets.delete(s); done(); });
    }
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  r.port = srv.address().port;
  r.stop = () => new Promise((resolve) => { for (const x of r.sockets) x.destroy(); srv.close(() => resolve()); });
  return r;
}

/** A TCP server that accepts connections, keeps what it is sent and never answers. */
async function startSilent() {
  const s = { received: [], sockets: new Set() };
  const srv = net.createServer((sock) => {
    s.sockets.add(sock);
    sock.on('data', (d) => s.received.push(d));
    sock.on('error', () => {});
    sock.on('close', () => s.sockets.delete(sock));
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  s.port = srv.address().port;
  s.stop = () => new Promise((resolve) => { for (const x of s.sockets) x.destroy(); srv.close(() => resolve()); });
  return s;
}

before(async () => {
  ctx.init();
  certs = H.makeUpstreamCerts(ctx.dir);
  const c = certs;
  const serve = async (role, tls) => {
    fx[role] = await (tls ? startHostile({ tls }) : startHostile());
    ctx.cleanup.add(() => fx[role].stop());
  };
  const good = { key: c.server.key, cert: c.server.cert };
  const mtls = { ...good, ca: c.clientCa.cert, requestCert: true };
  await serve('good', good);
  await serve('sni', good);
  await serve('pool', good);
  await serve('idle', good);
  await serve('mtls', mtls);
  await serve('insecure', { key: c.untrusted.key, cert: c.untrusted.cert });
  await serve('control', good);
  await serve('wrongName', good);
  await serve('untrusted', { key: c.untrusted.key, cert: c.untrusted.cert });
  await serve('expired', { key: c.expired.key, cert: c.expired.cert });
  await serve('otherName', { key: c.otherName.key, cert: c.otherName.cert });
  await serve('ipAsDns', { key: c.ipAsDns.key, cert: c.ipAsDns.cert });
  await serve('mnone', mtls);
  await serve('mrogue', mtls);
  await serve('refund', { key: c.untrusted.key, cert: c.untrusted.cert });
  await serve('plain', null);
  await serve('reload', good);
  await serve('pipe', good);
  silent = await startSilent();
  ctx.cleanup.add(() => silent.stop());
  // The refused upstreams and the control are reached through a relay that reads the records sent.
  for (const role of ['control', 'wrongName', 'untrusted', 'expired', 'otherName', 'ipAsDns', 'mnone', 'mrogue', 'refund', 'plain']) {
    relay[role] = await startRelay(fx[role].port);
    ctx.cleanup.add(() => relay[role].stop());
  }
  const via = (role, p = '/mcp') => `https://127.0.0.1:${relay[role].port}${p}`;

  const ca = c.ca.cert;
  const limited = (counter) => ({ limits: [{ counter, window: 'minute', max: N }] });
  const refundPolicy = ctx.writePolicy('refund.json', { version: '1', default: 'deny', tools: { echo_refund: limited('tls_refund') } });
  const controlPolicy = ctx.writePolicy('control.json', { version: '1', default: 'deny', tools: { echo_control: limited('tls_control') } });
  // Refused upstreams: initialize answered by the gateway and the era fixed, so the one thing that
  // goes upstream is the call under test.
  const local = { initialize: 'local', protocol: '2025' };
  // A handshake's crypto runs on the loop: under valgrind the probes of all these upstreams at the
  // start take seconds, so the connect timeout (which covers the handshake) is long but for `hang`.
  const slow = { connect_timeout_ms: 20000 };
  gw = await ctx.gateway('tls', {
    upstreams: [
      { name: 's', url: fx.good.url('/mcp'), tls: { ca }, ...slow },
      { name: 'lsse', url: fx.good.url('/sse'), transport: 'sse', tls: { ca }, ...slow },
      { name: 'sn', url: fx.sni.url('/mcp'), tls: { ca, server_name: 'localhost' }, ...slow },
      { name: 'p', url: fx.pool.url('/mcp'), tls: { ca }, pool: { size: POOL }, ...slow },
      { name: 'pp', url: fx.pipe.url('/mcp'), tls: { ca }, pool: { size: 1, pipeline: 8 }, ...slow },
      { name: 'idle', url: fx.idle.url('/mcp'), tls: { ca }, ...slow },
      { name: 'mok', url: fx.mtls.url('/mcp'), tls: { ca, cert: c.client.cert, key: c.client.key }, ...slow },
      { name: 'ins', url: fx.insecure.url('/mcp'), tls: { verify: false }, ...slow },
      { name: 'ctl', url: via('control'), tls: { ca }, policy: controlPolicy, ...local, ...slow },
      { name: 'wn', url: via('wrongName'), tls: { ca, server_name: 'wrong.example' }, ...local, ...slow },
      { name: 'wca', url: via('untrusted'), tls: { ca }, ...local, ...slow },
      { name: 'sys', url: via('untrusted'), ...local, ...slow }, // no tls group: the system bundle
      { name: 'wcafwd', url: via('untrusted'), tls: { ca }, ...slow }, // initialize forwarded
      { name: 'exp', url: via('expired'), tls: { ca }, ...local, ...slow },
      { name: 'ipname', url: via('otherName'), tls: { ca }, ...local, ...slow },
      { name: 'ipdns', url: via('ipAsDns'), tls: { ca }, ...local, ...slow },
      { name: 'mnone', url: via('mnone'), tls: { ca }, ...local, ...slow },
      { name: 'mrogue', url: via('mrogue'), tls: { ca, cert: c.rogueClient.cert, key: c.rogueClient.key }, ...local, ...slow },
      { name: 'plainhttp', url: via('plain'), tls: { ca }, ...local, ...slow },
      { name: 'hang', url: `https://127.0.0.1:${silent.port}/mcp`, tls: { ca }, connect_timeout_ms: 500, ...local },
      // backoff_ms 0: every call of the refund test really tries the handshake
      { name: 'refund', url: via('refund'), tls: { ca }, backoff_ms: 0, policy: refundPolicy, ...local, ...slow },
    ],
  });
});
after(async () => {
  process.stderr.write(`gateways started by this file:\n${ctx.summary().replace(/^/gm, '  ')}\n`);
  await ctx.cleanup.run();
});

const sdk = (up) => H.connectClient(A.mcpUrl(gw, up), { fetch: ctx.fetch, cleanup: ctx.cleanup });
const echo = async (client, text, name = 'echo') => H.resultText(await client.callTool({ name, arguments: { text } }));

/** A raw 2025-06-18 session on /UP/mcp (initialize answered locally for the refused upstreams). */
async function session(up) {
  const url = A.mcpUrl(gw, up);
  const s = await H.rawInitialize(ctx.fetch, url);
  return { url, headers: s.headers };
}

// ---------------------------------------------------------------------------

describe('https:// upstreams that verify: served end to end, pooled, kept alive', () => {
  test('Streamable HTTP over TLS (IP host, tls.ca): initialize, tools/list, tools/call with the SDK client; TLS 1.2; no SNI for an IP', async () => {
    const { client, close } = await sdk('s');
    const tools = (await client.listTools()).tools.map((t) => t.name);
    assert.ok(tools.includes('echo') && tools.includes('sleep'), `tools/list from the upstream: ${tools}`);
    assert.equal(await echo(client, 'over tls'), 'over tls');
    await close();
    const seen = fx.good.records.filter((r) => r.transport === 'streamable').map((r) => r.msg?.method);
    assert.ok(seen.includes('initialize') && seen.includes('tools/list') && seen.includes('tools/call'),
      `the upstream saw the session over https: ${seen}`);
    assert.ok(fx.good.tlsSessions.length >= 1, 'the upstream counted its TLS connections');
    for (const t of fx.good.tlsSessions) {
      assert.equal(t.servername, false, `no SNI for an IP literal (RFC 6066 3): ${JSON.stringify(t)}`);
      assert.equal(t.protocol, 'TLSv1.2');
      assert.equal(t.subject, null, 'no client certificate was configured, none was sent');
    }
    assert.deepEqual(fx.good.tlsErrors, [], 'no handshake failed on the upstream side');
  });

  test('legacy SSE (transport = "sse") over TLS: the GET stream and the POSTs it names, with the SDK client', async () => {
    const { client, close } = await sdk('lsse');
    const tools = (await client.listTools()).tools.map((t) => t.name);
    assert.ok(tools.includes('echo'), `tools/list over the legacy SSE link: ${tools}`);
    assert.equal(await echo(client, 'legacy over tls'), 'legacy over tls');
    await close();
    const calls = fx.good.records.filter((r) => r.transport === 'sse' && r.msg?.method === 'tools/call');
    assert.equal(calls.length, 1, 'the call went over the legacy SSE link');
    assert.equal(calls[0].msg.params.arguments.text, 'legacy over tls');
  });

  test('a 3 MiB answer arrives whole (many TLS records, many reads)', async () => {
    const { client, close } = await sdk('s');
    const r = await client.callTool({ name: 'big', arguments: { mib: 3 } });
    const text = H.resultText(r);
    assert.equal(text.length, 3 * 1048576, 'the whole text');
    assert.ok(/^x+$/.test(text), 'nothing but the upstream\'s bytes');
    await close();
  });

  test('tls.server_name = "localhost" is sent as SNI (and checked: the certificate names localhost)', async () => {
    const { client, close } = await sdk('sn');
    assert.equal(await echo(client, 'sni'), 'sni');
    await close();
    assert.ok(fx.sni.tlsSessions.length >= 1, 'the upstream counted its TLS connections');
    for (const t of fx.sni.tlsSessions) assert.equal(t.servername, 'localhost', JSON.stringify(t));
  });

  /** The most POSTs the upstream had in flight at once, from its httpLog entries since `from`. */
  const peakPosts = (f, from = 0) => {
    const ev = [];
    for (const e of f.httpLog.slice(from)) {
      if (e.method !== 'POST') continue;
      ev.push([e.start, 1], [e.end ?? Infinity, -1]);
    }
    ev.sort((a, b) => a[0] - b[0] || a[1] - b[1]); // an end before a start at the same ms
    let n = 0;
    let peak = 0;
    for (const [, d] of ev) { n += d; peak = Math.max(peak, n); }
    return peak;
  };
  /** The upstream connections (fixture numbering) that carried a POST, since httpLog entry `from`. */
  const postConns = (f, from = 0) => new Set(f.httpLog.slice(from).filter((e) => e.method === 'POST').map((e) => e.conn));

  test(`keep-alive: 50 sequential calls travel on at most pool.size (${POOL}) TLS connections`, async (t) => {
    const { client, close } = await sdk('p');
    const from = fx.pool.httpLog.length;
    for (let i = 0; i < 50; i++) assert.equal(await echo(client, `seq ${i}`), `seq ${i}`);
    await close();
    const calls = fx.pool.records.filter((r) => r.msg?.method === 'tools/call').length;
    assert.equal(calls, 50);
    const conns = postConns(fx.pool, from);
    t.diagnostic(`50 sequential calls on ${conns.size} connection(s); ${fx.pool.requests} HTTP requests in all on ` +
      `${fx.pool.tlsSessions.length} TLS connections (${fx.pool.connections} TCP; the session's GET stream has its own)`);
    assert.ok(conns.size <= POOL, `the 50 calls used ${conns.size} connections (pool.size ${POOL})`);
    assert.equal(fx.pool.tlsSessions.length, new Set(fx.pool.httpLog.map((e) => e.conn)).size,
      'every TLS connection carried HTTP (no handshake wasted)');
    assert.equal(fx.pool.connections, fx.pool.tlsSessions.length, 'every TCP connection was a TLS session');
  });

  test(`concurrent calls: ${2 * POOL} at once run ${POOL} at a time on ${POOL} TLS connections, all answered`, async (t) => {
    const { client, close } = await sdk('p');
    await echo(client, 'warm'); // the session's own requests done before the burst
    const from = fx.pool.httpLog.length;
    const ms = 800;
    const answers = await Promise.all(Array.from({ length: 2 * POOL }, () =>
      client.callTool({ name: 'sleep', arguments: { ms } }).then(H.resultText)));
    assert.deepEqual(answers, Array(2 * POOL).fill(`slept ${ms} ms`));
    await close();
    const burst = postConns(fx.pool, from);
    const all = postConns(fx.pool);
    const peak = peakPosts(fx.pool, from);
    t.diagnostic(`peak of calls in flight at the upstream ${peak}; the burst on ${burst.size} connections; ` +
      `${all.size} connections carried POSTs in all, ${fx.pool.tlsSessions.length} TLS connections with the GET streams`);
    assert.equal(peak, POOL, 'the upstream had pool.size calls in flight at once, no more');
    assert.equal(burst.size, POOL, `the burst used pool.size connections: ${[...burst]}`);
    assert.ok(all.size <= POOL, `connections that carried calls, since the start: ${all.size} (pool.size ${POOL})`);
  });

  test('pipelining over TLS (pool.size 1, pipeline 8): concurrent calls ride one TLS connection, several in flight at the upstream at once, each answer its own', async (t) => {
    const { client, close } = await sdk('pp');
    await echo(client, 'warm'); // the session's own requests done before the burst
    const from = fx.pipe.httpLog.length;
    const ms = 400;
    const sleeps = await Promise.all(Array.from({ length: 8 }, () =>
      client.callTool({ name: 'sleep', arguments: { ms } }).then(H.resultText)));
    assert.deepEqual(sleeps, Array(8).fill(`slept ${ms} ms`));
    const texts = Array.from({ length: 40 }, (_, i) => `pipelined over TLS ${i} ${'x'.repeat(i * 7)}`);
    assert.deepEqual(await Promise.all(texts.map((x) => echo(client, x))), texts, 'every answer reached its own call');
    await close();
    const conns = postConns(fx.pipe, from);
    const peak = peakPosts(fx.pipe, from);
    t.diagnostic(`48 calls on ${conns.size} connection(s), peak of calls in flight at the upstream ${peak}`);
    assert.equal(conns.size, 1, `the calls rode one TLS connection: ${[...conns]}`);
    assert.ok(peak >= 2, `pipelined requests were in flight together at the upstream (peak ${peak}); one at a time without pipelining`);
  });

  for (const how of ['destroy', 'end']) {
    test(`a pooled TLS connection the upstream closed while idle (${how === 'end' ? 'close_notify + FIN' : 'FIN, no close_notify'}) is not reused: the next call works`, async () => {
      const { client, close } = await sdk('idle');
      assert.equal(await echo(client, `before ${how}`), `before ${how}`);
      const n0 = fx.idle.tlsSessions.length;
      assert.ok(fx.idle.sockets.size >= 1, 'a kept-alive connection is open');
      for (const s of fx.idle.sockets) s[how]();
      await H.waitUntil(() => fx.idle.sockets.size === 0, { what: 'the upstream closed its connections' });
      assert.equal(await echo(client, `after ${how}`), `after ${how}`);
      assert.ok(fx.idle.tlsSessions.length > n0, 'the call after the close came on a new TLS connection');
      await close();
    });
  }
});

describe('mTLS and verify = false', () => {
  test('tls.cert/key: the upstream that requires a client certificate sees its subject, and serves', async () => {
    const { client, close } = await sdk('mok');
    assert.equal(await echo(client, 'mtls'), 'mtls');
    await close();
    assert.ok(fx.mtls.tlsSessions.length >= 1);
    for (const t of fx.mtls.tlsSessions) {
      assert.equal(t.authorized, true, `the client certificate chains to the upstream's client CA: ${JSON.stringify(t)}`);
      assert.equal(t.subject?.CN, 'tollgate-gateway', JSON.stringify(t));
    }
  });

  test('verify = false: `tollgate -t` and the start print the warning; calls work against an untrusted certificate', async () => {
    const r = spawnSync(H.tollgateBin(), ['-t', '-c', gw.conf], { encoding: 'utf8', timeout: 20000 });
    assert.equal(r.status, 0, `tollgate -t: ${r.stdout}${r.stderr}`);
    const warn = /:\d+: upstreams\.ins\.tls\.verify: false: the upstream's certificate is not checked/;
    assert.match(r.stdout, warn, `tollgate -t prints the warning: ${r.stdout}${r.stderr}`);
    assert.equal((r.stdout.match(/verify: false/g) ?? []).length, 1, 'one warning, for the one upstream with verify = false');
    assert.match(gw.stderr(), warn, 'the running gateway printed it at start');
    const { client, close } = await sdk('ins');
    assert.equal(await echo(client, 'unchecked'), 'unchecked');
    await close();
    assert.equal(fx.insecure.calls('echo').length, 1, 'the call reached the upstream with the untrusted certificate');
  });
});

// ---------------------------------------------------------------------------

const refusals = [
  { up: 'wca', fx: 'untrusted', what: 'a certificate from a CA other than tls.ca',
    reason: /certificate verification failed: The certificate is not correctly signed by the trusted CA/, alert: /UNKNOWN_CA/ },
  { up: 'sys', fx: 'untrusted', what: 'no tls.ca: the system bundle does not hold the throwaway CA',
    reason: /certificate verification failed: The certificate is not correctly signed by the trusted CA/, alert: /UNKNOWN_CA/ },
  { up: 'wn', fx: 'wrongName', host: 'wrong.example', what: 'tls.server_name = "wrong.example", which the certificate does not name',
    reason: /certificate verification failed: The certificate Common Name \(CN\) does not match with the expected CN/, alert: /BAD_CERTIFICATE/ },
  { up: 'exp', fx: 'expired', what: 'an expired certificate (2020-01-01 to 2020-02-01)',
    reason: /certificate verification failed: The certificate validity has expired/, alert: /CERTIFICATE_EXPIRED/ },
  { up: 'ipname', fx: 'otherName', what: 'an IP host, a certificate for other.example only',
    reason: /certificate verification failed: The certificate Common Name \(CN\) does not match with the expected CN/, alert: /BAD_CERTIFICATE/ },
  { up: 'ipdns', fx: 'ipAsDns', what: 'an IP host, a certificate naming the IP as CN and DNS name but not as iPAddress',
    reason: /certificate verification failed: The certificate Common Name \(CN\) does not match with the expected CN/, alert: /BAD_CERTIFICATE/ },
  { up: 'mnone', fx: 'mnone', what: 'the upstream requires a client certificate, none is configured',
    reason: /A fatal alert message was received from our peer/, serverError: /PEER_DID_NOT_RETURN_A_CERTIFICATE/ },
  // Node refuses a client certificate that does not chain to its CA after its side of the
  // handshake, by closing the socket (no alert): the gateway sees the close before the Finished.
  { up: 'mrogue', fx: 'mrogue', what: 'a client certificate from a CA the upstream does not trust',
    reason: /the upstream closed the connection|A fatal alert message was received from our peer/ },
  { up: 'plainhttp', fx: 'plain', what: 'https:// to a plain HTTP server', reason: /\S/ },
];

describe('refused handshakes: -32004 to the client, the reason in the log, nothing sent', () => {
  for (const c of refusals) {
    test(`${c.what} (upstream ${c.up})`, async () => {
      const f = fx[c.fx];
      const s = await session(c.up);
      const from = gw.stderr().length;
      const conns0 = f.connections;
      const a = await A.rpc(ctx.fetch, s.url, s, A.call(`refused-${c.up}`, 'echo', { text: 'must not arrive' }));
      assert.equal(a.error?.code, -32004, `the client gets -32004: ${JSON.stringify(a)}`);
      assert.equal(a.error?.data?.upstream, c.up, JSON.stringify(a));
      const m = await gw.waitForLog(new RegExp(`msg="upstream TLS handshake failed" upstream=${c.up} host=${re(c.host ?? '127.0.0.1')} reason="([^"]*)"`),
        { from, what: `the handshake failure of ${c.up} in the log` });
      assert.match(m[1], c.reason, `the reason logged: ${m[1]}`);
      assert.ok(f.connections > conns0, 'the gateway did connect to the upstream');
      if (c.alert) {
        await H.waitUntil(() => f.tlsErrors.some((e) => c.alert.test(e.code)),
          { what: `the upstream to receive the alert ${c.alert}`, detail: () => JSON.stringify(f.tlsErrors) });
      }
      if (c.serverError) {
        await H.waitUntil(() => f.tlsErrors.some((e) => c.serverError.test(e.code)),
          { what: `the upstream to fail the handshake with ${c.serverError}`, detail: () => JSON.stringify(f.tlsErrors) });
      }
      if (c.fx !== 'plain') assert.equal(f.tlsSessions.length, 0, `no TLS session was established: ${JSON.stringify(f.tlsSessions)}`);
      await H.quietFor(100); // a request written after a failed handshake would be seen within this
      assert.equal(f.requests, 0, `no HTTP request reached the upstream: ${JSON.stringify(f.records)}`);
      assert.equal(f.records.length, 0);
      const types = relay[c.fx].types;
      assert.ok((types.get(22) ?? 0) > 0, `the gateway sent handshake records: ${[...types]}`);
      assert.equal(types.get(23) ?? 0, 0, `no application_data record left the gateway: ${[...types]}`);
    });
  }

  test('initialize forwarded (no initialize = "local") to an upstream whose certificate fails: the client\'s initialize gets -32004', async () => {
    const from = gw.stderr().length;
    const r = await H.postRaw(ctx.fetch, A.mcpUrl(gw, 'wcafwd'), H.initializeBody(1));
    const a = A.answerOf(r, 1);
    assert.equal(a?.error?.code, -32004, `HTTP ${r.status} ${r.text}`);
    await gw.waitForLog(/msg="upstream TLS handshake failed" upstream=wcafwd host=127\.0\.0\.1 reason="certificate verification failed: The certificate is not correctly signed by the trusted CA"/, { from });
    assert.equal(fx.untrusted.requests, 0, 'nothing reached the upstream');
  });

  test('a server that accepts TCP and never answers the ClientHello: "TLS handshake timed out" at connect_timeout_ms, -32004, only the ClientHello sent', async () => {
    const s = await session('hang');
    const from = gw.stderr().length;
    const t0 = Date.now();
    const a = await A.rpc(ctx.fetch, s.url, s, A.call('refused-hang', 'echo', { text: 'must not arrive' }));
    const took = Date.now() - t0;
    assert.equal(a.error?.code, -32004, JSON.stringify(a));
    await gw.waitForLog(/msg="upstream TLS handshake timed out" upstream=hang timeout_ms=500/, { from });
    assert.ok(took >= 450, `answered after the connect timeout, not before: ${took} ms`);
    const got = Buffer.concat(silent.received);
    assert.ok(got.length > 0 && got[0] === 0x16, `a TLS handshake record (0x16) was all it received: ${got.subarray(0, 16).toString('hex')}`);
    assert.ok(!got.includes(Buffer.from('tools/call')) && !got.includes(Buffer.from('POST')), 'no request bytes in the clear');
  });
});

describe('the refund rule: a call whose handshake failed never ran', () => {
  test(`control: on a good https upstream, ${N} calls per minute pass and call ${N + 1} is rate limited (-32002)`, async () => {
    const s = await session('ctl');
    const codes = [];
    for (let i = 0; i < N + 1; i++) {
      const a = await A.rpc(ctx.fetch, s.url, s, A.call(`ctl-${i}`, 'echo_control', { text: `c${i}` }));
      codes.push(a.error?.code ?? H.resultText(a.result));
    }
    assert.deepEqual(codes, [...Array.from({ length: N }, (_, i) => `c${i}`), -32002], `the limit holds: ${codes}`);
    assert.ok((relay.control.types.get(23) ?? 0) >= N, `the relay sees the calls as application_data records: ${[...relay.control.types]}`);
  });

  test(`${N + 1} calls whose handshake failed are all -32004, never -32002: each token came back`, async () => {
    const s = await session('refund');
    const from = gw.stderr().length;
    const codes = [];
    for (let i = 0; i < N + 1; i++) {
      const a = await A.rpc(ctx.fetch, s.url, s, A.call(`refund-${i}`, 'echo_refund', { text: 'x' }));
      codes.push(a.error?.code ?? 'result');
    }
    assert.deepEqual(codes, Array(N + 1).fill(-32004), `refunded, so never rate limited: ${codes}`);
    // The log's own thread writes the lines: the last may come after the last answer.
    const failed = () => (gw.stderr().slice(from).match(/msg="upstream TLS handshake failed" upstream=refund /g) ?? []).length;
    await H.waitUntil(() => failed() >= N + 1, { what: `${N + 1} "upstream TLS handshake failed" lines`, detail: failed });
    assert.equal(failed(), N + 1, 'each call tried its own handshake (backoff_ms = 0)');
    assert.equal(fx.refund.requests, 0, 'nothing reached the upstream');
    assert.equal(relay.refund.types.get(23) ?? 0, 0, `no application_data record left the gateway: ${[...relay.refund.types]}`);
  });
});

describe('tls configuration errors (tollgate -t)', () => {
  const conf = (name, ups) => H.writeConf(fs.mkdtempSync(path.join(ctx.dir, 'conf-')), { upstreams: [{ name, ...ups }] });
  const check = (file) => spawnSync(H.tollgateBin(), ['-t', '-c', file], { encoding: 'utf8', timeout: 20000 });
  const cases = [
    { what: 'a tls group on an http:// upstream', ups: () => ({ url: 'http://127.0.0.1:9/mcp', tls: { ca: certs.ca.cert } }), err: /tls: is for https:\/\/ upstreams/ },
    { what: 'cert without key', ups: () => ({ url: 'https://127.0.0.1:9/mcp', tls: { ca: certs.ca.cert, cert: certs.client.cert } }), err: /cert and key go together/ },
    { what: 'a CA file that does not exist', ups: () => ({ url: 'https://127.0.0.1:9/mcp', tls: { ca: path.join(ctx.dir, 'nope.crt') } }), err: /nope\.crt/ },
    { what: 'a CA file that is not PEM', ups: () => ({ url: 'https://127.0.0.1:9/mcp', tls: { ca: gw.conf } }), err: /tls/ },
    { what: 'a key that does not match the certificate', ups: () => ({ url: 'https://127.0.0.1:9/mcp', tls: { ca: certs.ca.cert, cert: certs.client.cert, key: certs.rogueClient.key } }), err: /do not match/ },
    { what: 'verify = false beside a ca', ups: () => ({ url: 'https://127.0.0.1:9/mcp', tls: { ca: certs.ca.cert, verify: false } }), err: /ca: has no use with verify = false/ },
    { what: 'a server_name that is not a host name', ups: () => ({ url: 'https://127.0.0.1:9/mcp', tls: { ca: certs.ca.cert, server_name: 'a b/c' } }), err: /server_name: "a b\/c" is not a host name/ },
    { what: 'an unknown member', ups: () => ({ url: 'https://127.0.0.1:9/mcp', tls: { ca: certs.ca.cert, cipher: 'x' } }), err: /cipher/ },
  ];
  for (const c of cases) {
    test(`${c.what}: refused with FILE:LINE and the reason`, () => {
      const r = check(conf('bad', c.ups()));
      assert.notEqual(r.status, 0, `tollgate -t accepted it: ${r.stdout}${r.stderr}`);
      assert.match(r.stderr + r.stdout, /tollgate\.conf:\d+: /, r.stderr);
      assert.match(r.stderr + r.stdout, c.err, r.stderr);
      assert.ok(!A.SANITIZER_RE.test(r.stderr), r.stderr);
    });
  }
  test('a good https upstream with mTLS and server_name passes', () => {
    const r = check(conf('ok', { url: 'https://127.0.0.1:9/mcp', tls: { ca: certs.ca.cert, cert: certs.client.cert, key: certs.client.key, server_name: 'localhost' } }));
    assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  });
});

describe('reload (SIGHUP) with https:// upstreams', () => {
  // An upstream keeps its runtime (pool, idle connections, legacy SSE link) across a reload when
  // its name and URL stay; the TLS state of those connections was set up with the TLS client
  // context of the conf that was current when they were made. The first conf lives on (the
  // listeners hold it), so the case that matters is a connection made under a reloaded conf,
  // used after the next reload.
  test('TLS connections made under a reloaded conf still carry calls after the next reload (pool and legacy SSE link)', async () => {
    const opts = {
      upstreams: [
        { name: 'r', url: fx.reload.url('/mcp'), tls: { ca: certs.ca.cert }, connect_timeout_ms: 20000 },
        { name: 'rsse', url: fx.reload.url('/sse'), transport: 'sse', tls: { ca: certs.ca.cert }, connect_timeout_ms: 20000 },
      ],
    };
    const g = await ctx.gateway('reload', opts);
    const url = (up) => A.mcpUrl(g, up);
    const reload = async () => {
      const from = g.stderr().length;
      process.kill(g.proc.pid, 'SIGHUP');
      await g.waitForLog(/msg="configuration reloaded"/, { from });
    };
    const { client, close } = await H.connectClient(url('r'), { fetch: ctx.fetch, cleanup: ctx.cleanup });
    assert.equal(await echo(client, 'conf 1'), 'conf 1');
    await reload();
    // Drop the connections made under conf 1: the next ones are made under conf 2.
    for (const x of fx.reload.sockets) x.destroy();
    await H.waitUntil(() => fx.reload.sockets.size === 0, { what: 'the upstream closed its connections' });
    const n1 = fx.reload.tlsSessions.length;
    assert.equal(await echo(client, 'conf 2'), 'conf 2');
    const lsse = await H.connectClient(url('rsse'), { fetch: ctx.fetch, cleanup: ctx.cleanup });
    assert.equal(await echo(lsse.client, 'sse conf 2'), 'sse conf 2');
    assert.ok(fx.reload.tlsSessions.length > n1, 'new TLS connections were made under conf 2');
    const n2 = fx.reload.tlsSessions.length;
    await reload(); // conf 2 is released here
    assert.equal(await echo(client, 'conf 3'), 'conf 3');
    assert.equal(await echo(lsse.client, 'sse conf 3'), 'sse conf 3');
    A.assertAlive(g, 'after the second reload');
    process.stderr.write(`# reload: ${fx.reload.tlsSessions.length - n2} new TLS connections after the second reload\n`);
    await close();
    await lsse.close();
    await A.stopAndCheck(g);
  });
});

describe('the gateway after all of it', () => {
  test('alive, no sanitizer report, exits 0 on SIGTERM', async () => {
    A.assertAlive(gw);
    await A.stopAndCheck(gw);
  });
});
