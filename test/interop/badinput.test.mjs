// Bad input gets the documented HTTP status (and, where the MCP layer answers,
// a JSON-RPC error body), and the next client is still served.
//
//   node --test test/interop/badinput.test.mjs
//
// Raw sockets for what fetch cannot send (broken request lines, oversized
// heads and bodies), node:http for the rest. After every case a normal SDK
// client does a full initialize + tools/call echo.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import * as H from './lib/harness.mjs';

H.requireNodeModules(); // fails the file with 'npm ci --prefix test' when the packages are missing

const HEADER_BYTES = 4096;
const BODY_BYTES = 65536;
const HEADER_TIMEOUT_MS = 2000;
const ALICE = 'alice-' + H.randomToken();
const BOB = 'bob-' + H.randomToken();

const cleanup = new H.Cleanup();
let ev;
let gw;
let f; // node:http based fetch
let alice; // a raw session of grant alice: { sessionId, headers }

const logs = () => ({ 'tollgate process': gw?.status(), 'tollgate stderr': gw?.stderr() });
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};
const url = (p = '/everything/mcp') => `http://127.0.0.1:${gw.plainPort}${p}`;
const auth = (tok = ALICE) => ({ authorization: `Bearer ${tok}` });
// What the gateway sent upstream, from its own counter: the upstream's log lines arrive when its
// stdout is read, so a line of the test before could land after a test took its count.
const upstreamPosts = async () => (await gw.metrics()).tollgate_upstream_calls_total;

before(async () => {
  const dir = H.makeTempDir(cleanup);
  ev = await H.startEverything({ cleanup });
  const conf = H.writeConf(dir, {
    listeners: [{}],
    limits: { header_bytes: HEADER_BYTES, body_bytes: BODY_BYTES, header_timeout_ms: HEADER_TIMEOUT_MS },
    grants: [
      { name: 'alice', token_sha256: H.sha256hex(ALICE) },
      { name: 'bob', token_sha256: H.sha256hex(BOB) },
    ],
    upstreams: [{ name: 'everything', url: ev.url, default: true }],
    admin: true,
  });
  gw = await H.startTollgate(conf, { cleanup, admin: true });
  f = H.makeFetch({ cleanup, keepAlive: false });
  alice = await H.rawInitialize(f, url(), auth());
  assert.ok(alice.sessionId, 'session for grant alice');
});

after(() => cleanup.run());

// ---------------------------------------------------------------------------
// helpers

/** Parses what arrived on a raw socket as one HTTP/1.1 response. */
function parseResponse(buf) {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return { complete: false };
  const head = buf.subarray(0, end).toString('latin1').split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(head[0]);
  if (!m) return { complete: false, garbage: head[0] };
  const status = Number(m[1]);
  const headers = {};
  for (const line of head.slice(1)) {
    const i = line.indexOf(':');
    if (i > 0) {
      const k = line.slice(0, i).trim().toLowerCase();
      const v = line.slice(i + 1).trim();
      headers[k] = k in headers ? `${headers[k]}, ${v}` : v;
    }
  }
  let rest = buf.subarray(end + 4);
  if (status === 204 || status === 304 || status < 200) return { complete: true, status, headers, body: '' };
  if (headers['content-length'] !== undefined) {
    const n = Number(headers['content-length']);
    return { complete: rest.length >= n, status, headers, body: rest.subarray(0, n).toString('utf8') };
  }
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
    const chunks = [];
    for (;;) {
      const nl = rest.indexOf('\r\n');
      if (nl < 0) return { complete: false, status, headers, body: Buffer.concat(chunks).toString('utf8') };
      const size = parseInt(rest.subarray(0, nl).toString('latin1'), 16);
      if (Number.isNaN(size)) return { complete: true, status, headers, body: Buffer.concat(chunks).toString('utf8'), badChunk: true };
      if (size === 0) return { complete: true, status, headers, body: Buffer.concat(chunks).toString('utf8') };
      if (rest.length < nl + 2 + size + 2) return { complete: false, status, headers, body: Buffer.concat(chunks).toString('utf8') };
      chunks.push(rest.subarray(nl + 2, nl + 2 + size));
      rest = rest.subarray(nl + 2 + size + 2);
    }
  }
  return { complete: false, untilClose: true, status, headers, body: rest.toString('utf8') };
}

/**
 * Sends `head` on a fresh connection, then (after a pause that lets an early
 * answer arrive first) `body`, and collects one response. Write errors after an
 * early answer (EPIPE/ECONNRESET) are expected and ignored.
 */
function rawExchange(head, body, { timeout = 5000, pauseMs = 150 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(gw.plainPort, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let done = false;
    const t0 = Date.now();
    const finish = (extra) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      const r = parseResponse(buf);
      resolve({ ...r, ...extra, raw: buf.toString('latin1').slice(0, 2000), ms: Date.now() - t0 });
    };
    const timer = setTimeout(() => finish({ timedOut: true }), timeout);
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (parseResponse(buf).complete) finish({});
    });
    sock.on('error', (e) => finish({ socketError: e.code }));
    sock.on('end', () => finish({ closed: true }));
    sock.on('connect', async () => {
      sock.write(head, () => {});
      if (body !== undefined) {
        // a grace window, not a synchronisation: an early answer (413 on the head) usually comes
        // first, and when it does not the body goes out and the same answer is expected
        await H.quietFor(pauseMs);
        if (!done && !sock.destroyed) sock.write(body, () => {});
      }
    });
  });
}

function describeRaw(r) {
  return r.status ? `HTTP ${r.status} ${JSON.stringify(r.headers)} ${r.body?.slice(0, 300)}`
    : `no response (${r.socketError ?? (r.timedOut ? 'timeout' : 'closed')}) raw=${JSON.stringify(r.raw)}`;
}

/**
 * Asserts the JSON-RPC error body {"jsonrpc":"2.0","id":null,"error":{"code":…,"message":…}}.
 * `reqId`: when the refused request carried a readable id, answering with that id is as
 * correct as null (JSON-RPC 2.0 asks for null only when the id could not be determined).
 */
function assertJsonRpcError(r, code, what, reqId) {
  const ct = r.headers?.['content-type'] ?? '';
  assert.match(ct, /^application\/json/i, `${what}: Content-Type of the error body (${describeRaw(r)})`);
  let j;
  try { j = JSON.parse(r.body); } catch { assert.fail(`${what}: body is not JSON: ${r.body}`); }
  assert.equal(j.jsonrpc, '2.0', `${what}: jsonrpc member: ${r.body}`);
  assert.ok('id' in j && (j.id === null || (reqId !== undefined && j.id === reqId)),
    `${what}: id must be null${reqId !== undefined ? ` or ${JSON.stringify(reqId)}` : ''}: ${r.body}`);
  assert.equal(typeof j.error?.code, 'number', `${what}: error.code: ${r.body}`);
  assert.equal(typeof j.error?.message, 'string', `${what}: error.message: ${r.body}`);
  if (code !== undefined) {
    const codes = Array.isArray(code) ? code : [code];
    assert.ok(codes.includes(j.error.code), `${what}: error.code ${j.error.code}, expected ${codes.join(' or ')}`);
  }
  return j;
}

/** fetch-based request returning the same shape as rawExchange. */
async function req(method, path, { headers = {}, body } = {}) {
  const res = await f(url(path), { method, headers, body });
  const text = await res.text();
  const h = {};
  res.headers.forEach((v, k) => { h[k] = v; });
  return { status: res.status, headers: h, body: text };
}

const postJson = (body, headers = {}, path) => req('POST', path, {
  headers: { ...H.MCP_HEADERS, ...auth(), ...headers },
  body: typeof body === 'string' ? body : JSON.stringify(body),
});

/** A normal client is still served: SDK initialize + echo + DELETE. */
async function assertServed(label) {
  const c = await H.connectClient(url(), { fetch: H.makeFetch({ cleanup }), headers: auth() });
  try {
    const r = await c.client.callTool({ name: 'echo', arguments: { message: `served after ${label}` } });
    assert.equal(H.resultText(r), `Echo: served after ${label}`);
    await c.transport.terminateSession();
  } finally {
    await c.close();
  }
}

const reqLine = (path = '/everything/mcp') => `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${gw.plainPort}\r\n`;
const mcpHead = (extra = '') => `${reqLine()}Authorization: Bearer ${ALICE}\r\nContent-Type: application/json\r\n` +
  `Accept: application/json, text/event-stream\r\n${extra}`;

// ---------------------------------------------------------------------------

describe('HTTP layer', () => {
  test('broken request line -> 400', async () => {
    for (const head of [
      'THIS IS NOT HTTP\r\n\r\n',
      'POST /mcp HTTP/1.1 trailing-junk\r\nHost: 127.0.0.1\r\n\r\n',
      '\x00\x01\x02\x03\r\n\r\n',
      'POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon in this header line\r\n\r\n',
      'POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 12abc\r\n\r\n',
    ]) {
      const r = await rawExchange(head);
      assert.equal(r.status, 400, `${JSON.stringify(head)}: expected 400, got ${describeRaw(r)}`);
    }
    await assertServed('broken request lines');
  });

  test(`oversized headers (> limits.header_bytes = ${HEADER_BYTES}) -> 431`, async () => {
    const r = await rawExchange(`${mcpHead()}X-Pad: ${'a'.repeat(HEADER_BYTES * 2)}\r\nContent-Length: 2\r\n\r\n{}`);
    assert.equal(r.status, 431, describeRaw(r));
    // many small headers adding up
    const many = Array.from({ length: 200 }, (_, i) => `X-H${i}: ${'b'.repeat(40)}\r\n`).join('');
    const r2 = await rawExchange(`${mcpHead()}${many}Content-Length: 2\r\n\r\n{}`);
    assert.equal(r2.status, 431, describeRaw(r2));
    await assertServed('oversized headers');
  });

  test('a request head that never completes is cut off after limits.header_timeout_ms', async () => {
    const r = await rawExchange(`${reqLine()}X-Slow: 1\r\n`, undefined, { timeout: HEADER_TIMEOUT_MS + 4000 });
    assert.ok(!r.timedOut, `connection still open ${r.ms} ms after a partial head (header_timeout_ms ${HEADER_TIMEOUT_MS})`);
    assert.ok(r.ms >= HEADER_TIMEOUT_MS - 500, `closed after ${r.ms} ms, not before the timeout`);
    if (r.status) assert.equal(r.status, 408, describeRaw(r));
    await assertServed('header timeout');
  });

  test('PUT and PATCH -> 405', async () => {
    for (const method of ['PUT', 'PATCH']) {
      const r = await req(method, '/everything/mcp', { headers: { ...H.MCP_HEADERS, ...auth() }, body: '{}' });
      assert.equal(r.status, 405, `${method}: ${describeRaw(r)}`);
      assert.ok(r.headers.allow, `${method}: 405 carries an Allow header (${JSON.stringify(r.headers)})`);
    }
    await assertServed('PUT');
  });

  test('unknown upstream path -> 404', async () => {
    const r = await postJson(H.initializeBody(), {}, '/no-such-upstream/mcp');
    assert.equal(r.status, 404, describeRaw(r));
    await assertServed('unknown path');
  });
});

describe('MCP layer', () => {
  const bigCall = () => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { message: 'x'.repeat(BODY_BYTES + 10) } } });
  const sessionHead = () => mcpHead(`Mcp-Session-Id: ${alice.sessionId}\r\nMCP-Protocol-Version: ${alice.protocolVersion}\r\n`);

  test(`oversized body with Content-Length (> limits.body_bytes = ${BODY_BYTES}) -> 413 with a JSON-RPC error`, async () => {
    const big = bigCall();
    const before = await upstreamPosts();
    const r = await rawExchange(`${sessionHead()}Content-Length: ${big.length}\r\n\r\n`, big);
    assert.equal(r.status, 413, describeRaw(r));
    assertJsonRpcError(r, undefined, '413 (Content-Length)');
    assert.equal(await upstreamPosts(), before, 'nothing was forwarded upstream');
    await assertServed('oversized body (Content-Length)');
  });

  test(`oversized chunked body (> limits.body_bytes = ${BODY_BYTES}) -> 413 with a JSON-RPC error`, async () => {
    const big = bigCall();
    const before = await upstreamPosts();
    const chunked = big.match(/.{1,8192}/gs).map((c) => `${Buffer.byteLength(c).toString(16)}\r\n${c}\r\n`).join('') + '0\r\n\r\n';
    const r = await rawExchange(`${sessionHead()}Transfer-Encoding: chunked\r\n\r\n`, chunked);
    assert.equal(r.status, 413, describeRaw(r));
    assertJsonRpcError(r, undefined, '413 (chunked)');
    assert.equal(await upstreamPosts(), before, 'nothing was forwarded upstream');
    await assertServed('oversized body (chunked)');
  });

  test('a body just under limits.body_bytes is served', async () => {
    const ok = JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo', arguments: { message: 'y'.repeat(BODY_BYTES - 200) } } });
    const r = await postJson(ok, alice.headers);
    assert.equal(r.status, 200, `a ${ok.length}-byte body is within the limit: ${describeRaw(r)}`);
    assert.ok(r.body.includes('y'.repeat(1000)), 'the echo came back');
  });

  test('invalid JSON -> 400 with JSON-RPC error -32700', async () => {
    const before = await upstreamPosts();
    for (const body of ['{"jsonrpc":"2.0","id":1,"method":', 'not json at all', '', '{"jsonrpc":"2.0","id":1,"method":"ping"}}']) {
      const r = await postJson(body, alice.headers);
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${describeRaw(r)}`);
      assertJsonRpcError(r, -32700, `invalid JSON ${JSON.stringify(body)}`);
    }
    assert.equal(await upstreamPosts(), before, 'nothing was forwarded upstream');
    await assertServed('invalid JSON');
  });

  test('JSON that is not what it seems is refused, not forwarded (strict decoding)', async () => {
    const before = await upstreamPosts();
    const cases = {
      'duplicate keys': '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"get-env","arguments":{"message":"x"}}}',
      'trailing bytes': '{"jsonrpc":"2.0","id":1,"method":"ping"} x',
      'lone surrogate': '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"\\ud800"}}}',
      'invalid UTF-8': Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}}}')]),
      'nesting deeper than json_depth': `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"x","deep":${'['.repeat(200)}${']'.repeat(200)}}}}`,
      'NaN number': '{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
    };
    for (const [what, body] of Object.entries(cases)) {
      const r = await postJson(body, alice.headers);
      assert.equal(r.status, 400, `${what}: ${describeRaw(r)}`);
      assertJsonRpcError(r, [-32700, -32600], what);
    }
    assert.equal(await upstreamPosts(), before, 'none of them was forwarded upstream');
    await assertServed('strict decoding');
  });

  test('wrong Content-Type -> 415', async () => {
    for (const ct of ['text/plain', 'application/x-www-form-urlencoded']) {
      const r = await req('POST', '/everything/mcp', {
        headers: { ...alice.headers, accept: H.MCP_HEADERS.accept, 'content-type': ct },
        body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
      });
      assert.equal(r.status, 415, `${ct}: ${describeRaw(r)}`);
      assertJsonRpcError(r, undefined, `415 ${ct}`);
    }
    // parameters on the right media type are fine
    const ok = await req('POST', '/everything/mcp', {
      headers: { ...alice.headers, accept: H.MCP_HEADERS.accept, 'content-type': 'application/json; charset=utf-8' },
      body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
    });
    assert.equal(ok.status, 200, `application/json; charset=utf-8: ${describeRaw(ok)}`);
    await assertServed('wrong Content-Type');
  });

  test('Accept without application/json and text/event-stream -> 406', async () => {
    for (const accept of ['text/html', 'application/json', 'text/event-stream']) {
      const r = await req('POST', '/everything/mcp', {
        headers: { ...alice.headers, 'content-type': 'application/json', accept },
        body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
      });
      assert.equal(r.status, 406, `Accept: ${accept}: ${describeRaw(r)}`);
      assertJsonRpcError(r, undefined, `406 Accept: ${accept}`);
    }
    await assertServed('bad Accept');
  });

  test('POST without a session id on a non-initialize request -> 400', async () => {
    const r = await postJson({ jsonrpc: '2.0', id: 1, method: 'tools/list' }, { 'mcp-protocol-version': alice.protocolVersion });
    assert.equal(r.status, 400, describeRaw(r));
    assertJsonRpcError(r, undefined, 'no session', 1);
    await assertServed('missing session id');
  });

  test('unknown Mcp-Session-Id -> 404; another grant\'s session id -> 404', async () => {
    const unknown = Buffer.from(H.randomToken(16), 'base64url').toString('base64url');
    const r = await postJson({ jsonrpc: '2.0', id: 1, method: 'tools/list' },
      { 'mcp-session-id': unknown, 'mcp-protocol-version': alice.protocolVersion });
    assert.equal(r.status, 404, `unknown session: ${describeRaw(r)}`);
    assertJsonRpcError(r, undefined, 'unknown session', 1);
    const g = await req('GET', '/everything/mcp', { headers: { ...auth(), accept: 'text/event-stream', 'mcp-session-id': unknown } });
    assert.equal(g.status, 404, `GET on an unknown session: ${describeRaw(g)}`);
    const d = await req('DELETE', '/everything/mcp', { headers: { ...auth(), 'mcp-session-id': unknown } });
    assert.equal(d.status, 404, `DELETE of an unknown session: ${describeRaw(d)}`);
    // alice's live session presented with bob's token
    const b = await postJson({ jsonrpc: '2.0', id: 1, method: 'tools/list' },
      { ...alice.headers, ...auth(BOB) });
    assert.equal(b.status, 404, `alice's session with bob's token: ${describeRaw(b)}`);
    assertJsonRpcError(b, undefined, 'foreign grant session', 1);
    // ... and alice's session is untouched
    const a = await postJson({ jsonrpc: '2.0', id: 2, method: 'tools/list' }, alice.headers);
    assert.equal(a.status, 200, `alice's own session still works: ${describeRaw(a)}`);
    await assertServed('unknown session');
  });

  test('unsupported MCP-Protocol-Version -> 400', async () => {
    const r = await postJson({ jsonrpc: '2.0', id: 1, method: 'tools/list' },
      { ...alice.headers, 'mcp-protocol-version': '1999-01-01' });
    assert.equal(r.status, 400, describeRaw(r));
    assertJsonRpcError(r, undefined, 'bad protocol version', 1);
    await assertServed('bad protocol version');
  });

  test('foreign Origin -> 403; a loopback Origin is fine', async () => {
    const before = await upstreamPosts();
    const r = await postJson(H.initializeBody(), { origin: 'https://evil.example' });
    assert.equal(r.status, 403, `Origin https://evil.example: ${describeRaw(r)}`);
    assertJsonRpcError(r, undefined, 'foreign Origin');
    const r2 = await postJson({ jsonrpc: '2.0', id: 1, method: 'tools/list' }, { ...alice.headers, origin: 'http://evil.example:8080' });
    assert.equal(r2.status, 403, `Origin on a session request: ${describeRaw(r2)}`);
    // DNS rebinding shape: a foreign Origin, even though Host is loopback
    const r3 = await postJson(H.initializeBody(), { origin: 'http://attacker.example', host: `127.0.0.1:${gw.plainPort}` });
    assert.equal(r3.status, 403, describeRaw(r3));
    assert.equal(await upstreamPosts(), before, 'nothing was forwarded upstream');
    const ok = await postJson(H.initializeBody(), { origin: `http://127.0.0.1:${gw.plainPort}` });
    assert.equal(ok.status, 200, `loopback Origin: ${describeRaw(ok)}`);
    const ok2 = await postJson(H.initializeBody(), { origin: 'http://localhost' });
    assert.equal(ok2.status, 200, `Origin http://localhost: ${describeRaw(ok2)}`);
    await assertServed('foreign Origin');
  });

  test('missing or wrong bearer token -> 401 with WWW-Authenticate: Bearer', async () => {
    const before = await upstreamPosts();
    const variants = {
      'no Authorization': {},
      'wrong token': { authorization: 'Bearer not-the-token' },
      'right token, wrong scheme': { authorization: `Basic ${Buffer.from(`x:${ALICE}`).toString('base64')}` },
      'token with a suffix': { authorization: `Bearer ${ALICE}x` },
      'empty bearer': { authorization: 'Bearer ' },
    };
    for (const [what, h] of Object.entries(variants)) {
      const r = await req('POST', '/everything/mcp', {
        headers: { ...H.MCP_HEADERS, ...h },
        body: JSON.stringify(H.initializeBody()),
      });
      assert.equal(r.status, 401, `${what}: ${describeRaw(r)}`);
      assert.match(r.headers['www-authenticate'] ?? '', /^Bearer\b/, `${what}: WWW-Authenticate header: ${JSON.stringify(r.headers)}`);
      assertJsonRpcError(r, undefined, `401 ${what}`);
    }
    // a live session id does not replace the token
    const s = await req('POST', '/everything/mcp', {
      headers: { ...H.MCP_HEADERS, 'mcp-session-id': alice.sessionId, 'mcp-protocol-version': alice.protocolVersion },
      body: '{"jsonrpc":"2.0","id":3,"method":"tools/list"}',
    });
    assert.equal(s.status, 401, `session id without token: ${describeRaw(s)}`);
    assert.equal(await upstreamPosts(), before, 'nothing was forwarded upstream');
    await assertServed('401');
  });

  test('chunked trailer fields are never headers: no token, session or Origin from a trailer; too long -> 431', async () => {
    const before = await upstreamPosts();
    const chunk = (body) => `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n`;
    const list = '{"jsonrpc":"2.0","id":7,"method":"tools/list"}';
    const base = `${reqLine()}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n` +
      `MCP-Protocol-Version: ${alice.protocolVersion}\r\nTransfer-Encoding: chunked\r\n`;
    // the bearer token only in the trailer: unauthenticated
    const r1 = await rawExchange(`${base}Mcp-Session-Id: ${alice.sessionId}\r\n\r\n`,
      `${chunk(list)}Authorization: Bearer ${ALICE}\r\n\r\n`);
    assert.equal(r1.status, 401, `token in the trailer: ${describeRaw(r1)}`);
    assertJsonRpcError(r1, undefined, 'token in the trailer');
    // the session id only in the trailer: no session selected
    const r2 = await rawExchange(`${base}Authorization: Bearer ${ALICE}\r\n\r\n`,
      `${chunk(list)}Mcp-Session-Id: ${alice.sessionId}\r\n\r\n`);
    assert.equal(r2.status, 400, `session id in the trailer: ${describeRaw(r2)}`);
    assertJsonRpcError(r2, undefined, 'session id in the trailer', 7);
    assert.equal(await upstreamPosts(), before, 'nothing was forwarded upstream');
    // a foreign Origin in the trailer is not the request's Origin: the head decides (served)
    const r3 = await rawExchange(`${base}Authorization: Bearer ${ALICE}\r\nMcp-Session-Id: ${alice.sessionId}\r\n\r\n`,
      `${chunk(list)}Origin: https://evil.example\r\nAuthorization: Bearer ${BOB}\r\n\r\n`);
    assert.equal(r3.status, 200, `Origin and another token in the trailer: ${describeRaw(r3)}`);
    // trailers count against limits.header_bytes with the head
    const r4 = await rawExchange(`${base}Authorization: Bearer ${ALICE}\r\nMcp-Session-Id: ${alice.sessionId}\r\n\r\n`,
      `${chunk(list)}X-Pad: ${'p'.repeat(HEADER_BYTES)}\r\n\r\n`);
    assert.equal(r4.status, 431, `trailer over header_bytes: ${describeRaw(r4)}`);
    await assertServed('chunked trailers');
  });

  test('a burst of bad requests on one keep-alive connection, then a good client', async () => {
    // Pipelined junk after a valid request on the same socket must not confuse the gateway.
    const good = '{"jsonrpc":"2.0","id":1,"method":"ping"}';
    const head = `${mcpHead(`Mcp-Session-Id: ${alice.sessionId}\r\nMCP-Protocol-Version: ${alice.protocolVersion}\r\n`)}Content-Length: ${good.length}\r\n\r\n${good}`;
    const r = await rawExchange(head + 'GARBAGE GARBAGE\r\n\r\n', undefined, { timeout: 3000 });
    assert.equal(r.status, 200, `the valid first request is answered: ${describeRaw(r)}`);
    await assertServed('pipelined junk');
  });
});

describe('after all that', () => {
  test('the gateway is still up and did not report sanitizer errors', async () => {
    assert.equal(gw.proc.exitCode, null, `tollgate still running: ${gw.status()}`);
    gw.assertNoSanitizerReport();
    await assertServed('everything');
  });
});
