// DPoP (RFC 9449) through tollgate: DPoP-bound JWTs (cnf.jkt) made here with jose, each request
// carrying a fresh proof signed by the client's own key, on Streamable HTTP (raw and through the
// official SDK client with a fetch that signs each request), the WebSocket upgrade and the legacy
// SSE GET and its /messages posts; and every refusal: a proof for another URL or method, a replayed
// jti, an old iat, a wrong ath, a key that is not the token's cnf.jkt, a bound token sent as a
// bearer token, no proof at all. A refusal is 401 with WWW-Authenticate: DPoP error=... and never
// reaches the upstream.
//
// Two gateways: "optional" (its URL from the Host header) and "required" (public_url
// https://gw.example, so proofs name that URL whatever address the client connected to). Last, a
// real OpenID provider (oidc-provider, test/fixtures/oidc) issues a DPoP-bound client_credentials
// token for a proof of the client's key, and that token works through tollgate with proofs.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/dpop.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import * as jose from 'jose';

import * as H from './lib/harness.mjs';
import { makeIdpKeys, startIdp } from './lib/oidc.mjs';

const ISSUER = 'https://idp.test/';
const AUDIENCE = 'tollgate';
const PUBLIC_URL = 'https://gw.example';
const STATIC_TOKEN = H.randomToken();
const UPSTREAM_TOKEN = H.randomToken();

const cleanup = new H.Cleanup();
let dir;
let standin;
let gw; // jwt[].dpop = "optional"
let gwReq; // jwt[].dpop = "required", public_url
let fetchFn;
let idp; // { es: {privateKey}, rs: {privateKey} }
let client; // the client's DPoP key: { privateKey, jwk, jkt }
let clientRsa;
let stranger; // another key pair
let jwksFile; // the IdP's public keys

const nowS = () => Math.floor(Date.now() / 1000);

async function dpopKey(alg) {
  const { publicKey, privateKey } = await jose.generateKeyPair(alg, { extractable: true });
  const jwk = await jose.exportJWK(publicKey);
  return { alg, privateKey, jwk, jkt: await jose.calculateJwkThumbprint(jwk, 'sha256') };
}

/** An access token for alice from the IdP; jkt binds it (cnf.jkt), undefined leaves it a bearer token. */
async function accessToken({ jkt, alg = 'ES256', sub = 'alice', exp = nowS() + 300 } = {}) {
  const payload = { sub, ...(jkt ? { cnf: { jkt } } : {}) };
  return new jose.SignJWT(payload)
    .setProtectedHeader({ alg, typ: 'at+jwt', kid: alg === 'ES256' ? 'es-1' : 'rs-1' })
    .setIssuer(ISSUER).setAudience(AUDIENCE).setIssuedAt().setExpirationTime(exp)
    .sign(alg === 'ES256' ? idp.es.privateKey : idp.rs.privateKey);
}

const ath = (tok) => crypto.createHash('sha256').update(tok).digest('base64url');

/** A DPoP proof by key (its public jwk in the header) for htm and htu, bound to tok (ath). */
async function proof(key, htm, htu, tok, { jti = crypto.randomUUID(), iat = nowS(), athOf = tok, jwk = key.jwk } = {}) {
  return new jose.SignJWT({ htm, htu, jti, iat, ath: ath(athOf) })
    .setProtectedHeader({ alg: key.alg, typ: 'dpop+jwt', jwk })
    .sign(key.privateKey);
}

const base = (g = gw) => `http://127.0.0.1:${g.plainPort}`;
const mcpUrl = (g = gw) => `${base(g)}/cowork-os/mcp`;
const dpopHeaders = (tok, p) => ({ Authorization: `DPoP ${tok}`, DPoP: p });
const standinCount = () => standin.records().length;

const logs = () => ({
  'tollgate (optional) stderr': gw?.stderr(),
  'tollgate (required) stderr': gwReq?.stderr(),
  'stand-in output': standin?.output(),
});
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

/** The auth-params of `WWW-Authenticate: DPoP k="v", ...`. */
function parseDpopChallenge(h) {
  assert.ok(h, 'a WWW-Authenticate header');
  const m = /^DPoP\s+(.*)$/.exec(h);
  assert.ok(m, `WWW-Authenticate uses the DPoP scheme: ${h}`);
  const params = {};
  const re = /\s*([A-Za-z_][A-Za-z0-9_-]*)="((?:[^"\\]|\\.)*)"\s*(?:,|$)/y;
  let p;
  while (re.lastIndex < m[1].length && (p = re.exec(m[1]))) params[p[1]] = p[2];
  assert.equal(re.lastIndex, m[1].length, `WWW-Authenticate parses as quoted auth-params: ${h}`);
  return params;
}

/** POSTs an initialize with headers; asserts 401, the DPoP challenge's error and description, nothing forwarded. */
async function expectRefused(headers, error, description, { url = mcpUrl(), algs = 'ES256 RS256' } = {}) {
  const seen = standinCount();
  const r = await H.postRaw(fetchFn, url, H.initializeBody(1), headers);
  assert.equal(r.status, 401, `HTTP ${r.status} ${r.text}`);
  const params = parseDpopChallenge(r.headers.get('www-authenticate'));
  assert.equal(params.error, error, r.headers.get('www-authenticate'));
  assert.equal(params.error_description, description);
  assert.equal(params.algs, algs);
  assert.equal(r.messages[0]?.error?.code, -32600, r.text);
  assert.equal(standinCount(), seen, 'a refused request never reaches the upstream');
  return r;
}

/** A fetch for the SDK client that signs a fresh proof for every request it makes. */
function dpopFetch(tok, key, { rewrite } = {}) {
  return async (url, init = {}) => {
    const u = new URL(String(url));
    const htu = rewrite ? rewrite(u) : `${u.origin}${u.pathname}`;
    const headers = new Headers(init.headers ?? {});
    headers.set('authorization', `DPoP ${tok}`);
    headers.set('dpop', await proof(key, (init.method ?? 'GET').toUpperCase(), htu, tok));
    return fetchFn(url, { ...init, headers });
  };
}

before(async () => {
  H.requireNodeModules();
  dir = H.makeTempDir(cleanup);
  idp = { es: await jose.generateKeyPair('ES256', { extractable: true }),
    rs: await jose.generateKeyPair('RS256', { extractable: true, modulusLength: 2048 }) };
  client = await dpopKey('ES256');
  clientRsa = await dpopKey('RS256');
  stranger = await dpopKey('ES256');
  const jwks = { keys: [
    { ...(await jose.exportJWK(idp.es.publicKey)), kid: 'es-1', alg: 'ES256', use: 'sig' },
    { ...(await jose.exportJWK(idp.rs.publicKey)), kid: 'rs-1', alg: 'RS256', use: 'sig' },
  ] };
  jwksFile = path.join(dir, 'jwks.json');
  fs.writeFileSync(jwksFile, JSON.stringify(jwks) + '\n');
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  const opts = (file, dpop, extra = {}) => ({
    file,
    listeners: [{}],
    jwt: [{ issuer: ISSUER, audience: AUDIENCE, jwks_file: jwksFile, dpop, dpop_window_s: 30, skew_s: 30 }],
    grants: [
      { name: 'alice', issuers: [ISSUER] },
      { name: 'carol', token_sha256: H.sha256hex(STATIC_TOKEN) },
    ],
    upstreams: [{ name: 'cowork-os', url: standin.url, default: true, initialize: 'local',
      headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` } }],
    ...extra,
  });
  gw = await H.startTollgate(H.writeConf(dir, opts('optional.conf', 'optional')), { cleanup, listeners: 1 });
  gwReq = await H.startTollgate(H.writeConf(dir, opts('required.conf', 'required', { public_url: PUBLIC_URL })),
    { cleanup, listeners: 1 });
  fetchFn = H.makeFetch({ cleanup });
});

after(() => cleanup.run());

describe('a DPoP-bound token with a fresh proof per request', () => {
  test('Streamable HTTP: initialize and a tools/call, each with its own proof; the upstream sees neither', async () => {
    const tok = await accessToken({ jkt: client.jkt });
    const url = mcpUrl();
    const init = await H.postRaw(fetchFn, url, H.initializeBody(1), dpopHeaders(tok, await proof(client, 'POST', url, tok)));
    assert.equal(init.status, 200, init.text);
    const h = { 'mcp-session-id': init.headers.get('mcp-session-id'), 'mcp-protocol-version': H.PROTOCOL_VERSION };
    const call = { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo', arguments: { text: 'dpop hello' } } };
    const r = await H.postRaw(fetchFn, url, call, { ...h, ...dpopHeaders(tok, await proof(client, 'POST', url, tok)) });
    assert.equal(r.status, 200, r.text);
    assert.equal(H.resultText(r.messages[0]?.result), 'dpop hello');
    const seen = standin.records().filter((x) => x.msg?.params?.arguments?.text === 'dpop hello');
    assert.equal(seen.length, 1);
    assert.equal(seen[0].http.headers.authorization, `Bearer ${UPSTREAM_TOKEN}`, 'the client token is not passed through');
    assert.equal(seen[0].http.headers.dpop, undefined, 'the proof is not passed through');
  });

  test('the official SDK client, its fetch signing each request (RS256 token, RS256 proof key)', async () => {
    const tok = await accessToken({ jkt: clientRsa.jkt, alg: 'RS256' });
    const { Client, StreamableHTTPClientTransport } = await H.loadSdk();
    const transport = new StreamableHTTPClientTransport(new URL(mcpUrl()), { fetch: dpopFetch(tok, clientRsa) });
    const c = new Client({ name: 'dpop-interop', version: '1.0.0' }, { capabilities: {} });
    await c.connect(transport);
    cleanup.add(() => c.close().catch(() => {}));
    const r = await c.callTool({ name: 'echo', arguments: { text: 'sdk dpop' } });
    assert.equal(H.resultText(r), 'sdk dpop');
    assert.ok((await c.listTools()).tools.length > 0);
    await c.close();
  });

  test('WebSocket: the upgrade carries a proof for GET on its http URL; a proof naming ws:// is refused', async () => {
    const { default: WsWebSocket } = await import('ws');
    const tok = await accessToken({ jkt: client.jkt });
    const open = (p) => new Promise((resolve) => {
      const headers = p === undefined ? { Authorization: `DPoP ${tok}` } : dpopHeaders(tok, p);
      const w = new WsWebSocket(`ws://127.0.0.1:${gw.plainPort}/cowork-os/ws`, 'mcp', { headers });
      w.on('open', () => resolve({ status: 101, w }));
      w.on('unexpected-response', (req, res) => {
        res.resume();
        res.on('end', () => { w.terminate(); resolve({ status: res.statusCode, www: res.headers['www-authenticate'] }); });
      });
      w.on('error', (e) => resolve({ status: 0, error: e }));
    });
    const ok = await open(await proof(client, 'GET', `${base()}/cowork-os/ws`, tok));
    assert.equal(ok.status, 101, `WebSocket upgrade: ${ok.status} ${ok.www ?? ok.error ?? ''}`);
    cleanup.add(() => ok.w.terminate());
    const answer = new Promise((resolve) => ok.w.on('message', (m) => resolve(JSON.parse(String(m)))));
    ok.w.send(JSON.stringify(H.initializeBody(1)));
    assert.equal((await answer).result?.serverInfo !== undefined, true, 'initialize answered over the WebSocket');
    ok.w.terminate();
    for (const [p, why] of [
      [await proof(client, 'GET', `ws://127.0.0.1:${gw.plainPort}/cowork-os/ws`, tok), 'DPoP proof htu does not match the request URL'],
      [await proof(client, 'POST', `${base()}/cowork-os/ws`, tok), 'DPoP proof htm does not match the request method'],
      [await proof(client, 'GET', `${base()}/cowork-os/mcp`, tok), 'DPoP proof htu does not match the request URL'],
    ]) {
      const seen = standinCount();
      const r = await open(p);
      assert.equal(r.status, 401, `WebSocket upgrade: ${r.status}`);
      const params = parseDpopChallenge(r.www);
      assert.equal(params.error, 'invalid_dpop_proof');
      assert.equal(params.error_description, why);
      assert.equal(standinCount(), seen);
    }
    const noProof = await open(undefined);
    assert.equal(noProof.status, 401);
    assert.equal(parseDpopChallenge(noProof.www).error_description, 'a DPoP proof is required');
  });

  test('legacy SSE: the GET carries a proof, and so does each /messages post', async () => {
    const tok = await accessToken({ jkt: client.jkt });
    const sseUrl = `${base()}/cowork-os/sse`;
    const refused = await fetchFn(sseUrl, { headers: { accept: 'text/event-stream',
      ...dpopHeaders(tok, await proof(client, 'GET', `${base()}/cowork-os/mcp`, tok)) } });
    assert.equal(refused.status, 401, await refused.text());
    assert.equal(parseDpopChallenge(refused.headers.get('www-authenticate')).error_description,
      'DPoP proof htu does not match the request URL');
    const r = await fetchFn(sseUrl, { headers: { accept: 'text/event-stream',
      ...dpopHeaders(tok, await proof(client, 'GET', sseUrl, tok)) } });
    assert.equal(r.status, 200);
    const reader = r.body.getReader();
    let text = '';
    while (!/event: endpoint\r?\ndata: [^\r\n]+\r?\n/.test(text)) {
      const { value, done } = await reader.read();
      assert.ok(!done, `ended before the endpoint event: ${text}`);
      text += Buffer.from(value).toString();
    }
    const endpoint = /data: ([^\r\n]+)/.exec(text.slice(text.indexOf('event: endpoint')))[1];
    const postUrl = `${base()}${endpoint}`;
    const htu = `${base()}${endpoint.split('?')[0]}`;
    const without = await H.postRaw(fetchFn, postUrl, H.initializeBody(1), { Authorization: `DPoP ${tok}` });
    assert.equal(without.status, 401, without.text);
    const ok = await H.postRaw(fetchFn, postUrl, H.initializeBody(1), dpopHeaders(tok, await proof(client, 'POST', htu, tok)));
    assert.equal(ok.status, 202, ok.text);
    while (!text.includes('"serverInfo"')) {
      const { value, done } = await reader.read();
      assert.ok(!done, `ended before the answer: ${text}`);
      text += Buffer.from(value).toString();
    }
    await reader.cancel();
  });
});

describe('refused: 401 WWW-Authenticate: DPoP, never forwarded', () => {
  test('a proof for another URL, another method, a replayed jti, an old iat, a wrong ath, another key', async () => {
    const tok = await accessToken({ jkt: client.jkt });
    const url = mcpUrl();
    const bad = 'invalid_dpop_proof';
    await expectRefused(dpopHeaders(tok, await proof(client, 'POST', `${base()}/other/mcp`, tok)), bad,
      'DPoP proof htu does not match the request URL');
    await expectRefused(dpopHeaders(tok, await proof(client, 'POST', `http://127.0.0.2:${gw.plainPort}/cowork-os/mcp`, tok)),
      bad, 'DPoP proof htu does not match the request URL');
    await expectRefused(dpopHeaders(tok, await proof(client, 'GET', url, tok)), bad,
      'DPoP proof htm does not match the request method');
    const once = await proof(client, 'POST', url, tok);
    const first = await H.postRaw(fetchFn, url, H.initializeBody(1), dpopHeaders(tok, once));
    assert.equal(first.status, 200, first.text);
    await expectRefused(dpopHeaders(tok, once), bad, 'DPoP proof jti was used already');
    await expectRefused(dpopHeaders(tok, await proof(client, 'POST', url, tok, { iat: nowS() - 300 })), bad,
      'DPoP proof iat is outside the accepted window');
    await expectRefused(dpopHeaders(tok, await proof(client, 'POST', url, tok, { iat: nowS() + 300 })), bad,
      'DPoP proof iat is outside the accepted window');
    await expectRefused(dpopHeaders(tok, await proof(client, 'POST', url, tok, { athOf: `${tok}x` })), bad,
      'DPoP proof ath does not match the access token');
    await expectRefused(dpopHeaders(tok, await proof(stranger, 'POST', url, tok)), bad,
      "DPoP proof key does not match the token's cnf.jkt");
    // the header shows the bound key but the stranger signed it
    await expectRefused(dpopHeaders(tok, await proof(stranger, 'POST', url, tok, { jwk: client.jwk })), bad,
      'DPoP proof signature is invalid');
    const priv = await jose.exportJWK(client.privateKey);
    await expectRefused(dpopHeaders(tok, await proof(client, 'POST', url, tok, { jwk: priv })), bad,
      'DPoP proof jwk holds private key material');
  });

  test('a bound token sent as a bearer token (with or without a proof), without a proof, twice a proof', async () => {
    const tok = await accessToken({ jkt: client.jkt });
    const url = mcpUrl();
    const asBearer = 'the token is DPoP-bound (cnf.jkt): send it with the DPoP scheme and a proof';
    await expectRefused({ Authorization: `Bearer ${tok}` }, 'invalid_token', asBearer);
    await expectRefused({ Authorization: `Bearer ${tok}`, DPoP: await proof(client, 'POST', url, tok) }, 'invalid_token',
      asBearer);
    await expectRefused({ Authorization: `DPoP ${tok}` }, 'invalid_dpop_proof', 'a DPoP proof is required');
    const p1 = await proof(client, 'POST', url, tok);
    const p2 = await proof(client, 'POST', url, tok);
    const seen = standinCount();
    // two DPoP header lines (fetch would fold them into one): written by hand
    const body = JSON.stringify(H.initializeBody(1));
    const raw = await new Promise((resolve, reject) => {
      const s = net.connect(gw.plainPort, '127.0.0.1', () => s.end(
        `POST /cowork-os/mcp HTTP/1.1\r\nHost: 127.0.0.1:${gw.plainPort}\r\nContent-Type: application/json\r\n` +
        `Accept: application/json, text/event-stream\r\nAuthorization: DPoP ${tok}\r\nDPoP: ${p1}\r\nDPoP: ${p2}\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`));
      let text = '';
      s.on('data', (d) => { text += d; });
      s.on('end', () => resolve(text));
      s.on('error', reject);
    });
    assert.match(raw, /^HTTP\/1\.1 401 /, raw);
    const www = /^WWW-Authenticate: (.*)$/mi.exec(raw)?.[1]?.trim();
    assert.equal(parseDpopChallenge(www).error_description, 'more than one DPoP header');
    assert.equal(standinCount(), seen);
  });

  test('an unbound token: a bearer token where DPoP is optional, refused by the DPoP scheme; a static token never by DPoP', async () => {
    const tok = await accessToken();
    const r = await H.postRaw(fetchFn, mcpUrl(), H.initializeBody(1), { Authorization: `Bearer ${tok}` });
    assert.equal(r.status, 200, r.text);
    await expectRefused(dpopHeaders(tok, await proof(client, 'POST', mcpUrl(), tok)), 'invalid_token',
      'the token is not DPoP-bound (no cnf.jkt)');
    const st = await H.postRaw(fetchFn, mcpUrl(), H.initializeBody(1), { Authorization: `Bearer ${STATIC_TOKEN}` });
    assert.equal(st.status, 200, st.text);
    const sd = await H.postRaw(fetchFn, mcpUrl(), H.initializeBody(1),
      dpopHeaders(STATIC_TOKEN, await proof(client, 'POST', mcpUrl(), STATIC_TOKEN)));
    assert.equal(sd.status, 401, sd.text);
    // a static token on a keep-alive connection is remembered; the DPoP scheme still is not
    const again = await H.postRaw(fetchFn, mcpUrl(), H.initializeBody(1),
      dpopHeaders(STATIC_TOKEN, await proof(client, 'POST', mcpUrl(), STATIC_TOKEN)));
    assert.equal(again.status, 401, again.text);
  });
});

describe('jwt[].dpop = "required", behind public_url', () => {
  test('proofs name the public URL; the address the client reached is not it; unbound tokens are refused', async () => {
    const tok = await accessToken({ jkt: client.jkt });
    const url = mcpUrl(gwReq);
    const ok = await H.postRaw(fetchFn, url, H.initializeBody(1),
      dpopHeaders(tok, await proof(client, 'POST', `${PUBLIC_URL}/cowork-os/mcp`, tok)));
    assert.equal(ok.status, 200, ok.text);
    const spelled = await H.postRaw(fetchFn, url, H.initializeBody(1),
      dpopHeaders(tok, await proof(client, 'POST', 'HTTPS://GW.EXAMPLE:443/cowork-os/mcp?x=1', tok)));
    assert.equal(spelled.status, 200, `the same URL once normalised: ${spelled.text}`);
    await expectRefused(dpopHeaders(tok, await proof(client, 'POST', url, tok)), 'invalid_dpop_proof',
      'DPoP proof htu does not match the request URL', { url });
    const plain = await accessToken();
    await expectRefused({ Authorization: `Bearer ${plain}` }, 'invalid_token',
      "this issuer's tokens must be DPoP-bound: send a bound token with the DPoP scheme and a proof", { url });
    // RFC 9728: the metadata says DPoP is required and which proof algorithms are taken
    const meta = await (await fetchFn(`${base(gwReq)}/.well-known/oauth-protected-resource/cowork-os/mcp`)).json();
    assert.deepEqual(meta.dpop_signing_alg_values_supported, ['ES256', 'RS256']);
    assert.equal(meta.dpop_bound_access_tokens_required, true);
    const metaOpt = await (await fetchFn(`${base()}/.well-known/oauth-protected-resource/cowork-os/mcp`)).json();
    assert.equal(metaOpt.dpop_bound_access_tokens_required, false);
    // a static token is not a JWT: the issuer's rule is not its
    const st = await H.postRaw(fetchFn, url, H.initializeBody(1), { Authorization: `Bearer ${STATIC_TOKEN}` });
    assert.equal(st.status, 200, st.text);
  });
});

describe('a real OpenID provider (oidc-provider, features.dPoP)', () => {
  test('a DPoP-bound client_credentials token from the provider works through tollgate with a proof, not as a bearer token', async () => {
    const odir = H.makeTempDir(cleanup, 'tollgate-oidc-');
    const certs = H.makeCerts(odir);
    const keys = makeIdpKeys('k1');
    const resource = `${PUBLIC_URL}/cowork-os/mcp`;
    const idp = await startIdp({ cleanup, dir: odir, certs, keys, alg: 'ES256', resources: { [resource]: { scope: 'read' } } });
    const pub = { keys: keys.keys.map(({ d, p, q, dp, dq, qi, ...k }) => k) };
    const jwksFile = path.join(odir, 'idp-public.json');
    fs.writeFileSync(jwksFile, JSON.stringify(pub));
    const g = await H.startTollgate(H.writeConf(odir, {
      listeners: [{}],
      public_url: PUBLIC_URL,
      jwt: [{ issuer: idp.issuer, jwks_file: jwksFile, dpop: 'required' }], // aud: the route's resource
      grants: [{ name: 'tollgate-test', issuers: [idp.issuer] }], // client_credentials: sub is the client
      upstreams: [{ name: 'cowork-os', url: standin.url, default: true, initialize: 'local',
        headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` } }],
    }), { cleanup, listeners: 1 });
    // The token request carries a proof of the client's key (no ath: there is no token yet).
    const tokenProof = await new jose.SignJWT({ htm: 'POST', htu: idp.url('/token'), jti: crypto.randomUUID(), iat: nowS() })
      .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk: client.jwk }).sign(client.privateKey);
    const answer = await idp.tokenResponse({ resource, scope: 'read', dpop: tokenProof });
    assert.equal(answer.token_type, 'DPoP', JSON.stringify(answer));
    const tok = answer.access_token;
    const claims = JSON.parse(Buffer.from(tok.split('.')[1], 'base64url'));
    assert.equal(claims.cnf?.jkt, client.jkt, 'the provider bound the token to the client key');
    assert.equal(claims.aud, resource);
    const url = mcpUrl(g);
    const ok = await H.postRaw(fetchFn, url, H.initializeBody(1), dpopHeaders(tok, await proof(client, 'POST', resource, tok)));
    assert.equal(ok.status, 200, ok.text);
    const h = { 'mcp-session-id': ok.headers.get('mcp-session-id'), 'mcp-protocol-version': H.PROTOCOL_VERSION };
    const call = { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo', arguments: { text: 'from the idp' } } };
    const r = await H.postRaw(fetchFn, url, call, { ...h, ...dpopHeaders(tok, await proof(client, 'POST', resource, tok)) });
    assert.equal(r.status, 200, r.text);
    assert.equal(H.resultText(r.messages[0]?.result), 'from the idp');
    // the same token as a bearer token, or with a proof by another key: refused, not forwarded
    await expectRefused({ Authorization: `Bearer ${tok}` }, 'invalid_token',
      'the token is DPoP-bound (cnf.jkt): send it with the DPoP scheme and a proof', { url, algs: 'ES256 RS256' });
    await expectRefused(dpopHeaders(tok, await proof(stranger, 'POST', resource, tok)), 'invalid_dpop_proof',
      "DPoP proof key does not match the token's cnf.jkt", { url });
    await idp.stop();
  });
});

describe('the verified-JWT cache (jwt[].cache_entries)', () => {
  test('a token sent again is served from the cache, but not once its exp has passed, nor after a reload that revokes it', async () => {
    const cdir = H.makeTempDir(cleanup, 'tollgate-jwtcache-');
    const write = (grants) => H.writeConf(cdir, {
      file: 'cache.conf', listeners: [{}], admin: true,
      jwt: [{ issuer: ISSUER, audience: AUDIENCE, jwks_file: jwksFile, skew_s: 0 }],
      grants,
      upstreams: [{ name: 'cowork-os', url: standin.url, default: true, initialize: 'local',
        headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` } }],
    });
    const confFile = write([{ name: 'alice', issuers: [ISSUER] }]);
    const g = await H.startTollgate(confFile, { cleanup, listeners: 1, admin: true });
    const url = mcpUrl(g);
    const post = (tok) => H.postRaw(fetchFn, url, H.initializeBody(1), { Authorization: `Bearer ${tok}` });
    const tok = await accessToken({ alg: 'ES256' });
    for (let i = 0; i < 3; i++) assert.equal((await post(tok)).status, 200);
    let m = await g.metrics();
    assert.equal(m.tollgate_jwt_cache_misses, 1, JSON.stringify(m));
    assert.equal(m.tollgate_jwt_cache_hits, 2);
    assert.equal(m.tollgate_jwt_cache_entries, 1);
    // A token that expires in a moment: served from the cache until then, refused as expired after.
    const soon = await accessToken({ exp: nowS() + 2 });
    assert.equal((await post(soon)).status, 200);
    const refused = await H.waitUntil(async () => {
      const r = await post(soon);
      return r.status === 401 ? r : null;
    }, { timeout: H.scaled(10000), interval: 200, what: 'the expired token refused' });
    assert.match(refused.headers.get('www-authenticate'), /error_description="expired"/);
    // A reload that removes the grant: the cached token is judged by the new configuration.
    assert.equal((await post(tok)).status, 200);
    write([{ name: 'bob', issuers: [ISSUER] }]);
    const n = (g.stderr().match(/configuration reloaded/g) ?? []).length;
    process.kill(g.proc.pid, 'SIGHUP');
    await H.waitUntil(() => (g.stderr().match(/configuration reloaded/g) ?? []).length > n,
      { timeout: H.scaled(5000), what: 'the reload in the log' });
    const after = await post(tok);
    assert.equal(after.status, 401, after.text);
    assert.match(after.headers.get('www-authenticate'), /the token names no configured grant/);
    m = await g.metrics();
    assert.equal(m.tollgate_jwt_cache_hits, 0, 'a reload starts from an empty cache');
  });
});
