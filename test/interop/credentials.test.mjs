// Credentials that end, end everything opened with them: on every client transport (a 2025
// Streamable HTTP session's GET stream, a 2026-07-28 subscriptions/listen, a WebSocket, a legacy
// SSE stream), a reload that rotates or removes a static token, removes a grant, changes its
// tls_subject or its issuers ends the streams that credential opened at once, and a JWT's exp ends
// them when it passes (a timer per stream). A message on a channel whose credential ended is
// refused and never forwarded, even before the client's side has closed; a legacy /messages POST
// for a stream ended so gets 401 with the reason; a 2025 session's next request with the old
// credential gets 401.
//
// Upstreams: server-everything (2025 sessions and their GET streams), the era2026 fixture as a
// 2025 upstream (list changes for listens) and the CoWork OS stand-in (its initialize answered by
// tollgate) behind the channels.
// Keys, tokens and certificates are made at test time.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/credentials.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import * as H from './lib/harness.mjs';
import { startEra2026 } from './lib/conformance2026.mjs';

H.requireNodeModules();
const { default: WsWebSocket } = await import('ws');

const ISSUER = 'https://idp.test';
const OTHER_ISSUER = 'https://other-idp.test';
const AUDIENCE = 'tollgate';
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const MODERN = '2026-07-28';
const META = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };
const SUB_ID = 'io.modelcontextprotocol/subscriptionId';

const cleanup = new H.Cleanup();
let dir;
let rsa; // the issuer's key
let certs; // the TLS listener's
let cc; // client certificates: alice (CN=alice), bob
let standin;
let era;
let everything;
let gw;
let grants; // the current grants, rewritten by each reload
let writeConf; // () => writes the conf from `grants`

const logs = () => ({ 'tollgate stderr': gw?.stderr(), 'stand-in output': standin?.output?.() });
const test = (name, fn) => it(name, H.withLogs(logs, fn));

// ---------------------------------------------------------------------------
// Tokens

const b64u = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
const nowS = () => Math.floor(Date.now() / 1000);
function jwt(sub, claims = {}) {
  const input = `${b64u({ alg: 'RS256', typ: 'JWT', kid: 'k1' })}.${b64u({
    iss: ISSUER, aud: AUDIENCE, sub, iat: nowS(), exp: nowS() + 300, ...claims })}`;
  return `${input}.${crypto.sign('sha256', Buffer.from(input), rsa.privateKey).toString('base64url')}`;
}
const bearer = (t) => ({ Authorization: `Bearer ${t}` });

// ---------------------------------------------------------------------------
// One client of each transport. `who`: { headers } for the plain listener, or { cert } (a client
// certificate from makeClientCerts) for the mTLS one. Each open* resolves once its stream is
// established, with a promise of its end.

function endpoint(who) {
  if (who.cert) {
    const fetchFn = H.makeFetch({ ca: certs.caPem, cert: fs.readFileSync(who.cert.cert), key: fs.readFileSync(who.cert.key), cleanup });
    return { fetchFn, base: `https://127.0.0.1:${gw.tlsPort}`, ws: `wss://127.0.0.1:${gw.tlsPort}`, headers: {} };
  }
  return { fetchFn: H.makeFetch({ cleanup }), base: `http://127.0.0.1:${gw.plainPort}`, ws: `ws://127.0.0.1:${gw.plainPort}`, headers: who.headers };
}

/** Reads an SSE body: next() gives the next JSON-RPC message (null at the end); rest() all until the end. */
function sseReader(res) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let done = false;
  const next = async () => {
    for (;;) {
      const end = buf.indexOf('\n\n');
      if (end >= 0) {
        const one = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const d = /^data: (.*)$/m.exec(one);
        if (d && d[1]) return { event: /^event: (.*)$/m.exec(one)?.[1] ?? 'message', data: d[1] };
        continue;
      }
      if (done) return null;
      const r = await reader.read();
      if (r.done) done = true;
      else buf += dec.decode(r.value, { stream: true });
    }
  };
  const rest = () => {
    const p = (async () => {
      const all = [];
      for (let e; (e = await next()) !== null;) all.push(e);
      return all;
    })();
    p.catch(() => {}); // a stream the test leaves open is cut when the gateway stops
    return p;
  };
  return { next, rest };
}

/** A 2025 session on sessionful and its GET stream. */
async function openGet(who) {
  const ep = endpoint(who);
  const url = `${ep.base}/sessionful/mcp`;
  const s = await H.rawInitialize(ep.fetchFn, url, ep.headers);
  const res = await ep.fetchFn(url, { headers: { ...s.headers, accept: 'text/event-stream' } });
  assert.equal(res.status, 200, `GET stream: HTTP ${res.status}`);
  const sse = sseReader(res);
  return { kind: 'GET stream', session: s, url, ep, ended: sse.rest() };
}

/** A 2026-07-28 subscriptions/listen on as2025, once acknowledged. */
async function openListen(who, id = 'L-' + crypto.randomBytes(4).toString('hex')) {
  const ep = endpoint(who);
  const res = await ep.fetchFn(`${ep.base}/as2025/mcp`, {
    method: 'POST',
    headers: { ...H.MCP_HEADERS, ...ep.headers, 'MCP-Protocol-Version': MODERN, 'Mcp-Method': 'subscriptions/listen' },
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'subscriptions/listen',
      params: { notifications: { toolsListChanged: true }, _meta: META } }),
  });
  assert.equal(res.status, 200, `listen: HTTP ${res.status}`);
  const sse = sseReader(res);
  const ack = JSON.parse((await sse.next()).data);
  assert.equal(ack.method, 'notifications/subscriptions/acknowledged', JSON.stringify(ack));
  return { kind: 'listen', id, ended: sse.rest() };
}

/** A WebSocket on /cowork/ws, once open. */
async function openWs(who) {
  const ep = endpoint(who);
  const opts = who.cert ? { ca: certs.caPem, cert: fs.readFileSync(who.cert.cert), key: fs.readFileSync(who.cert.key) }
    : { headers: ep.headers };
  const w = new WsWebSocket(`${ep.ws}/cowork/ws`, 'mcp', opts);
  const closed = new Promise((resolve) => w.on('close', (code, reason) => resolve({ code, reason: String(reason) })));
  await new Promise((resolve, reject) => {
    w.on('open', resolve);
    w.on('unexpected-response', (req, res) => reject(new Error(`WebSocket upgrade: HTTP ${res.statusCode}`)));
    w.on('error', reject);
  });
  cleanup.add(() => w.terminate());
  return { kind: 'WebSocket', w, ended: closed };
}

/** A legacy SSE stream on /cowork/sse, once its endpoint event came. */
async function openSse(who) {
  const ep = endpoint(who);
  const res = await ep.fetchFn(`${ep.base}/cowork/sse`, { headers: { accept: 'text/event-stream', ...ep.headers } });
  assert.equal(res.status, 200, `GET /sse: HTTP ${res.status}`);
  const sse = sseReader(res);
  const first = await sse.next();
  assert.equal(first?.event, 'endpoint', JSON.stringify(first));
  return { kind: 'legacy SSE', messages: `${ep.base}${first.data}`, ep, ended: sse.rest() };
}

async function openAll(who) {
  return { get: await openGet(who), listen: await openListen(who), ws: await openWs(who), sse: await openSse(who) };
}

/** Every stream of `all` ends, each as its transport ends one, with `why` as the reason. */
async function expectAllEnded(all, why, ms = 5000) {
  const t = H.scaled(ms);
  await H.within(all.get.ended, t, 'the GET stream ending');
  const listen = await H.within(all.listen.ended, t, 'the listen ending');
  const last = JSON.parse(listen.at(-1)?.data ?? 'null');
  assert.equal(last?.id, all.listen.id, `a listen ends with its result: ${JSON.stringify(listen)}`);
  assert.equal(last.result?.resultType, 'complete', JSON.stringify(last));
  assert.equal(last.result?._meta?.[SUB_ID], all.listen.id, JSON.stringify(last));
  const ws = await H.within(all.ws.ended, t, 'the WebSocket closing');
  assert.equal(ws.code, 1008, `WebSocket close: ${JSON.stringify(ws)}`);
  assert.match(ws.reason, why);
  await H.within(all.sse.ended, t, 'the legacy SSE stream ending');
}

/** Rewrites the conf from `grants` and reloads; resolves once the gateway logged the reload. */
async function reload(edit) {
  grants = edit(grants);
  writeConf();
  const n = (gw.stderr().match(/configuration reloaded/g) ?? []).length;
  process.kill(gw.proc.pid, 'SIGHUP');
  await H.waitUntil(() => (gw.stderr().match(/configuration reloaded/g) ?? []).length > n || gw.exit,
    { timeout: H.scaled(5000), what: 'the reload in the log' });
}
const setGrant = (name, change) => (gs) => gs.map((g) => (g.name === name ? { ...g, ...change } : g));

/** POSTs a JSON-RPC message to a legacy SSE stream's endpoint. */
async function postMessage(stream, headers, body = { jsonrpc: '2.0', id: 5, method: 'tools/list' }) {
  return H.postRaw(stream.ep.fetchFn, stream.messages, body, headers);
}

function wwwAuthDescription(r) {
  return /error_description="([^"]*)"/.exec(r.headers.get('www-authenticate') ?? '')?.[1];
}

// ---------------------------------------------------------------------------

const TOKENS = { carol: H.randomToken(), erin: H.randomToken(), frank: H.randomToken(), gina: H.randomToken(), hank: H.randomToken() };

before(async () => {
  dir = H.makeTempDir(cleanup);
  rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwks = path.join(dir, 'jwks.json');
  fs.writeFileSync(jwks, JSON.stringify({ keys: [{ ...rsa.publicKey.export({ format: 'jwk' }), kid: 'k1', alg: 'RS256', use: 'sig' }] }));
  certs = H.makeCerts(dir);
  cc = H.makeClientCerts(dir);
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  era = await startEra2026({ cleanup });
  everything = await H.startEverything({ cleanup });
  grants = [
    { name: 'carol', token_sha256: H.sha256hex(TOKENS.carol) }, // rotated
    { name: 'erin', token_sha256: H.sha256hex(TOKENS.erin) },   // removed
    { name: 'frank', token_sha256: H.sha256hex(TOKENS.frank) }, // rotated under a raw WebSocket
    { name: 'gina', token_sha256: H.sha256hex(TOKENS.gina) },   // never changes: her streams stay
    { name: 'hank', token_sha256: H.sha256hex(TOKENS.hank) },   // rotated under a streaming POST answer
    { name: 'alice', issuers: [ISSUER] },                       // JWTs: loses her issuer; exp
    { name: 'ann', issuers: [ISSUER] },                         // JWTs: exp
    { name: 'mtls', tls_subject: 'alice' },                     // alice's certificate: tls_subject changes
  ];
  writeConf = () => H.writeConf(dir, {
    listeners: [{}, { tls: { cert: certs.cert, key: certs.key, client_ca: cc.ca.cert } }],
    jwt: [{ issuer: ISSUER, audience: AUDIENCE, jwks_file: jwks, grant_claim: 'sub', skew_s: 0 },
      { issuer: OTHER_ISSUER, audience: AUDIENCE, jwks_file: jwks }],
    grants,
    upstreams: [
      { name: 'cowork', url: standin.url, default: true, initialize: 'local', headers: bearer(UPSTREAM_TOKEN) },
      { name: 'as2025', url: era.url, protocol: '2025' },
      { name: 'sessionful', url: everything.url }, // its GET stream answers at once
    ],
  });
  gw = await H.startTollgate(writeConf(), { cleanup, listeners: 2 });
});

after(() => cleanup.run());

describe('a reload that no longer takes a credential ends every stream it opened', () => {
  test('a rotated static token: the GET stream and the legacy SSE stream end, the listen gets its result, the WebSocket closes 1008; the session\'s next request with the old token gets 401; a message to the ended legacy stream gets 401 with the reason', async () => {
    const carol = await openAll({ headers: bearer(TOKENS.carol) });
    const gina = await openAll({ headers: bearer(TOKENS.gina) });
    const NEW = H.randomToken();
    await reload(setGrant('carol', { token_sha256: H.sha256hex(NEW) }));
    await expectAllEnded(carol, /credential no longer valid/);
    // the 2025 session: the old token is refused, a new one for the same grant carries on
    const list = { jsonrpc: '2.0', id: 9, method: 'tools/list' };
    const old = await H.postRaw(carol.get.ep.fetchFn, carol.get.url, list, carol.get.session.headers);
    assert.equal(old.status, 401, `old token: HTTP ${old.status} ${old.text}`);
    const fresh = await H.postRaw(carol.get.ep.fetchFn, carol.get.url, list, { ...carol.get.session.headers, ...bearer(NEW) });
    assert.equal(fresh.status, 200, `new token: HTTP ${fresh.status} ${fresh.text}`);
    // the legacy stream's endpoint: 401 with the reason, whichever token comes
    for (const tok of [NEW, TOKENS.carol]) {
      const r = await postMessage(carol.sse, bearer(tok));
      assert.equal(r.status, 401, `POST /messages: HTTP ${r.status} ${r.text}`);
    }
    const r = await postMessage(carol.sse, bearer(NEW));
    assert.equal(wwwAuthDescription(r), 'credential no longer valid', r.headers.get('www-authenticate'));
    assert.match(r.messages[0]?.error?.message ?? '', /credential that opened this stream ended/, r.text);
    // gina's streams (her grant unchanged) stay
    assert.equal(gina.ws.w.readyState, 1, "gina's WebSocket stays open");
    const still = await postMessage(gina.sse, bearer(TOKENS.gina));
    assert.equal(still.status, 202, `gina's legacy stream takes messages: HTTP ${still.status} ${still.text}`);
    gina.ws.w.close();
    await gina.ws.ended;
  });

  test('a POST answer that streams (a long-running tool\'s progress) ends at the reload, without its answer', async () => {
    const ep = endpoint({ headers: bearer(TOKENS.hank) });
    const url = `${ep.base}/sessionful/mcp`;
    const s = await H.rawInitialize(ep.fetchFn, url, ep.headers);
    const res = await ep.fetchFn(url, {
      method: 'POST', headers: { ...H.MCP_HEADERS, ...s.headers },
      body: JSON.stringify({ jsonrpc: '2.0', id: 41, method: 'tools/call', params: {
        name: 'trigger-long-running-operation', arguments: { duration: 20, steps: 20 }, _meta: { progressToken: 'p41' } } }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    const sse = sseReader(res);
    const first = JSON.parse((await sse.next()).data);
    assert.equal(first.method, 'notifications/progress', JSON.stringify(first));
    await reload(setGrant('hank', { token_sha256: H.sha256hex(H.randomToken()) }));
    const rest = await H.within(sse.rest(), H.scaled(5000), 'the streaming answer ending');
    assert.deepEqual(rest.map((e) => JSON.parse(e.data)).filter((m) => m.id === 41), [], 'no answer after the credential ended');
  });

  test('a removed grant ends its streams on every transport', async () => {
    const erin = await openAll({ headers: bearer(TOKENS.erin) });
    await reload((gs) => gs.filter((g) => g.name !== 'erin'));
    await expectAllEnded(erin, /credential no longer valid/);
  });

  test('a grant that no longer lists the issuer of a JWT ends the streams that JWT opened', async () => {
    const alice = await openAll({ headers: bearer(jwt('alice')) });
    const ann = await openWs({ headers: bearer(jwt('ann')) });
    await reload(setGrant('alice', { issuers: [OTHER_ISSUER] }));
    await expectAllEnded(alice, /credential no longer valid/);
    assert.equal(ann.w.readyState, 1, "ann's WebSocket (her grant unchanged) stays open");
    ann.w.close();
    await ann.ended;
  });

  test('a changed tls_subject ends the streams opened with that client certificate (WebSocket, legacy SSE, GET stream, listen)', async () => {
    const viaCert = await openAll({ cert: cc.alice });
    await reload(setGrant('mtls', { tls_subject: 'bob' }));
    await expectAllEnded(viaCert, /credential no longer valid/);
    // and the certificate no longer opens one
    await assert.rejects(openWs({ cert: cc.alice }), /HTTP 401/);
  });
});

describe('a JWT ends its streams at its exp', () => {
  test('every transport: the GET stream and the legacy SSE stream end, the listen gets its result, the WebSocket closes 1008; a message to the legacy stream then gets 401 "token expired"', async () => {
    // skew_s = 0: exp is when the gateway stops taking it; far enough for the streams to open first
    const exp = nowS() + Math.max(4, Math.ceil(H.scaled(4000) / 1000));
    const ann = await openAll({ headers: bearer(jwt('ann', { exp })) });
    const lasting = await openWs({ headers: bearer(jwt('ann')) }); // exp 300 s away: stays
    await expectAllEnded(ann, /token expired/, 12000);
    assert.ok(nowS() >= exp, 'not before exp');
    const r = await postMessage(ann.sse, bearer(jwt('ann')));
    assert.equal(r.status, 401, `POST /messages: HTTP ${r.status} ${r.text}`);
    assert.equal(wwwAuthDescription(r), 'token expired');
    assert.equal(lasting.w.readyState, 1, 'a stream whose token has not expired stays open');
    lasting.w.close();
    await lasting.ended;
  });
});

// ---------------------------------------------------------------------------
// A WebSocket client that keeps sending after the gateway's close frame (the window before the
// close lands): raw frames over a socket, so that nothing answers the close for it.

async function rawWs(port, urlPath, headers) {
  const sock = net.connect(port, '127.0.0.1');
  cleanup.add(() => sock.destroy());
  await new Promise((resolve, reject) => { sock.once('connect', resolve); sock.once('error', reject); });
  const key = crypto.randomBytes(16).toString('base64');
  sock.write(`GET ${urlPath} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
    `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mcp\r\n` +
    Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('') + '\r\n');
  let buf = Buffer.alloc(0);
  let head = null;
  const frames = [];
  let wake = () => {};
  sock.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    if (head === null) {
      const at = buf.indexOf('\r\n\r\n');
      if (at < 0) return;
      head = buf.subarray(0, at).toString();
      buf = buf.subarray(at + 4);
    }
    for (;;) {
      if (buf.length < 2) break;
      let len = buf[1] & 0x7f;
      let off = 2;
      if (len === 126) { if (buf.length < 4) break; len = buf.readUInt16BE(2); off = 4; }
      else if (len === 127) { if (buf.length < 10) break; len = Number(buf.readBigUInt64BE(2)); off = 10; }
      if (buf.length < off + len) break;
      frames.push({ opcode: buf[0] & 0x0f, payload: buf.subarray(off, off + len) });
      buf = buf.subarray(off + len);
    }
    wake();
  });
  sock.on('close', () => wake());
  const waitFor = async (pred, what, ms = H.scaled(5000)) => H.within((async () => {
    for (;;) {
      const f = frames.find(pred);
      if (f) return f;
      if (sock.destroyed) throw new Error(`the connection closed before ${what}`);
      await new Promise((r) => { wake = r; });
    }
  })(), ms, what);
  const frame = (opcode, payload) => {
    const mask = crypto.randomBytes(4);
    const n = payload.length;
    const hdr = n < 126 ? Buffer.from([0x80 | opcode, 0x80 | n])
      : Buffer.concat([Buffer.from([0x80 | opcode, 0x80 | 126]), Buffer.from([n >> 8, n & 0xff])]);
    const body = Buffer.from(payload.map((b, i) => b ^ mask[i & 3]));
    sock.write(Buffer.concat([hdr, mask, body]));
  };
  await H.waitUntil(() => head !== null, { timeout: H.scaled(5000), what: 'the upgrade answer' });
  assert.match(head, /^HTTP\/1\.1 101 /, head);
  return {
    send: (msg) => frame(0x1, Buffer.from(JSON.stringify(msg))),
    close: (code) => frame(0x8, Buffer.from([code >> 8, code & 0xff])),
    message: (pred, what) => waitFor((f) => f.opcode === 1 && pred(JSON.parse(f.payload.toString())), what)
      .then((f) => JSON.parse(f.payload.toString())),
    closeFrame: (what, ms) => waitFor((f) => f.opcode === 8, what, ms),
  };
}

describe('a message on a channel whose credential ended is refused', () => {
  test('a WebSocket frame sent after the reload, while the close handshake is under way, never reaches the upstream', async () => {
    const c = await rawWs(gw.plainPort, '/cowork/ws', bearer(TOKENS.frank));
    c.send(H.initializeBody(1));
    await c.message((m) => m.id === 1, 'the initialize answer');
    c.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    const marker = 'after-close-' + crypto.randomBytes(4).toString('hex');
    const seen = () => standin.records().filter((r) => r.msg?.method === 'tools/call' && JSON.stringify(r.msg).includes(marker));
    // before: a call goes through (so the one below would too, but for the credential)
    c.send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo', arguments: { text: `${marker}-before` } } });
    await c.message((m) => m.id === 2, 'the answer before the reload');
    const from = gw.stderr().length;
    await reload(setGrant('frank', { token_sha256: H.sha256hex(H.randomToken()) }));
    const close = await c.closeFrame('the close frame');
    assert.equal(close.payload.readUInt16BE(0), 1008, `close code of ${close.payload.toString()}`);
    c.send({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'echo', arguments: { text: `${marker}-after` } } });
    await gw.waitForLog(/message refused: the credential that opened its channel ended/, { from, timeout: 5000 });
    c.close(1000);
    assert.deepEqual(seen().map((r) => r.msg.params.arguments.text), [`${marker}-before`], 'only the call before the reload reached the upstream');
  });

  test('and one sent after the JWT that opened it expired (the close under way) never reaches the upstream either', async () => {
    const exp = nowS() + Math.max(2, Math.ceil(H.scaled(2000) / 1000));
    const c = await rawWs(gw.plainPort, '/cowork/ws', bearer(jwt('ann', { exp })));
    c.send(H.initializeBody(1));
    await c.message((m) => m.id === 1, 'the initialize answer');
    c.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    const marker = 'after-exp-' + crypto.randomBytes(4).toString('hex');
    const from = gw.stderr().length;
    const close = await c.closeFrame('the close frame at exp', H.scaled(5000) + (exp - nowS()) * 1000);
    assert.equal(close.payload.readUInt16BE(0), 1008);
    assert.match(close.payload.subarray(2).toString(), /token expired/);
    c.send({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'echo', arguments: { text: marker } } });
    await gw.waitForLog(/message refused: the credential that opened its channel ended.*token expired/, { from, timeout: 5000 });
    c.close(1000);
    assert.deepEqual(standin.records().filter((r) => JSON.stringify(r.msg ?? {}).includes(marker)), [],
      'the call after exp never reached the upstream');
  });
});

describe('after all that', () => {
  test('the gateway is still running and logged no sanitizer report', async () => {
    assert.equal(gw.status(), 'running');
    gw.assertNoSanitizerReport();
  });
});
