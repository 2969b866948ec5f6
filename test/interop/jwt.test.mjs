// JWT bearer tokens through tollgate, with the official SDK client and the
// CoWork OS stand-in behind it (initialize = "local").
//
// Everything is made at test time: two RSA-2048 keys (one for RS256, one for
// PS256), a P-256 key and a 32-byte HMAC secret (node:crypto), a JWKS with
// their public parts and the oct key, and every token, signed here as a
// compact JWS (ES256 as raw r||s, PS256 with a 32-byte salt). The issuer lists
// RS256, ES256 and PS256; HS256 is not listed for it, so the oct key only
// shows that an HMAC token is refused by its alg even with the right secret.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/jwt.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import * as H from './lib/harness.mjs';

const ISSUER = 'https://idp.test';
const ISSUER_B = 'https://other-idp.test/'; // a second issuer (same keys): it names only its own grant, dave
const AUDIENCE = 'tollgate';
const SKEW_S = 60;
const PUBLIC_URL = 'https://gw.example';
const STATIC_TOKEN = H.randomToken();
const UPSTREAM_TOKEN = H.randomToken();

// The tool sets of the per-grant policies (the stand-in has many more).
const ALICE_TOOLS = ['echo', 'execute_code'];
const BOB_TOOLS = ['echo', 'run_command'];

const cleanup = new H.Cleanup();
let dir;
let standin;
let gw; // JWT issuer, base URL from the Host header
let gwPublic; // the same with public_url
let fetchFn;
let keys;
let confOpts; // (file, extra) -> the conf options of the gateways above

// ---------------------------------------------------------------------------
// Keys and tokens

function makeKeys() {
  const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const rsaPss = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const ec = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const hmac = crypto.randomBytes(32);
  const jwks = {
    keys: [
      { ...rsa.publicKey.export({ format: 'jwk' }), kid: 'rsa-1', alg: 'RS256', use: 'sig' },
      { ...ec.publicKey.export({ format: 'jwk' }), kid: 'ec-1', alg: 'ES256', use: 'sig' },
      { ...rsaPss.publicKey.export({ format: 'jwk' }), kid: 'ps-1', alg: 'PS256', use: 'sig' },
      { kty: 'oct', k: hmac.toString('base64url'), kid: 'hs-1', alg: 'HS256', use: 'sig' },
    ],
  };
  for (const k of jwks.keys) assert.equal(k.d, undefined, 'no private part in the JWKS');
  return {
    rsa, rsaPss, ec, hmac, jwks,
    rsaPublicPem: rsa.publicKey.export({ type: 'spki', format: 'pem' }),
  };
}

const b64u = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
const nowS = () => Math.floor(Date.now() / 1000);

const SIGNERS = {
  RS256: (data) => crypto.sign('sha256', data, keys.rsa.privateKey),
  ES256: (data) => crypto.sign('sha256', data, { key: keys.ec.privateKey, dsaEncoding: 'ieee-p1363' }),
  PS256: (data) => crypto.sign('sha256', data,
    { key: keys.rsaPss.privateKey, padding: crypto.constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 }),
  HS256: (data) => crypto.createHmac('sha256', keys.hmac).update(data).digest(),
};
const KIDS = { RS256: 'rsa-1', ES256: 'ec-1', PS256: 'ps-1', HS256: 'hs-1' };

/** A compact JWS of header and payload, signed by sign(bytes) -> Buffer (or no signature). */
function jws(header, payload, sign) {
  const input = `${b64u(header)}.${b64u(payload)}`;
  return `${input}.${sign ? sign(Buffer.from(input)).toString('base64url') : ''}`;
}

/**
 * A token for `sub` (default alice), signed with alg's key from the JWKS.
 * claims override the defaults (undefined removes one); kid: null leaves it out.
 */
function token({ alg = 'RS256', kid, sub = 'alice', claims = {}, header = {}, sign } = {}) {
  const now = nowS();
  const payload = { iss: ISSUER, aud: AUDIENCE, sub, iat: now, exp: now + 300, ...claims };
  for (const k of Object.keys(payload)) if (payload[k] === undefined) delete payload[k];
  const h = { alg, typ: 'JWT', ...header };
  const k = kid === undefined ? KIDS[alg] : kid;
  if (k !== null) h.kid = k;
  return jws(h, payload, sign ?? SIGNERS[alg]);
}

const bearer = (t) => ({ Authorization: `Bearer ${t}` });

// ---------------------------------------------------------------------------
// Helpers

const logs = () => ({
  'tollgate process': gw?.status(),
  'tollgate stderr': gw?.stderr(),
  'tollgate (public_url) stderr': gwPublic?.stderr(),
  'stand-in output': standin?.output(),
});
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

const base = (g = gw) => `http://127.0.0.1:${g.plainPort}`;
const gatewayUrl = (name = 'cowork-os', g = gw) => `${base(g)}/${name}/mcp`;
const metadataPath = (name = 'cowork-os') => `/.well-known/oauth-protected-resource/${name}/mcp`;

/** The auth-params of a `WWW-Authenticate: Bearer k="v", ...` header. */
function parseWwwAuth(h) {
  assert.ok(h, 'a WWW-Authenticate header');
  const m = /^Bearer\s+(.*)$/i.exec(h);
  assert.ok(m, `WWW-Authenticate uses the Bearer scheme: ${h}`);
  const params = {};
  const re = /\s*([A-Za-z_][A-Za-z0-9_-]*)="((?:[^"\\]|\\.)*)"\s*(?:,|$)/y;
  let p;
  while (re.lastIndex < m[1].length && (p = re.exec(m[1]))) {
    assert.equal(params[p[1]], undefined, `auth-param ${p[1]} appears once: ${h}`);
    params[p[1]] = p[2].replace(/\\(.)/g, '$1');
  }
  assert.equal(re.lastIndex, m[1].length, `WWW-Authenticate parses as quoted auth-params: ${h}`);
  return params;
}

/** Number of stand-in records so far (to prove a refused request never reached it). */
const standinCount = () => standin.records().length;

/**
 * POSTs an initialize with `tok` (undefined: no Authorization) and asserts a 401.
 * Returns { r, params } with the parsed WWW-Authenticate auth-params.
 */
async function expect401(tok, { url = gatewayUrl(), metadata = `${base()}${metadataPath()}`, headers = {},
  body = H.initializeBody(1) } = {}) {
  const seen = standinCount();
  const r = await H.postRaw(fetchFn, url, body, { ...(tok === undefined ? {} : bearer(tok)), ...headers });
  assert.equal(r.status, 401, `HTTP ${r.status} ${r.text}`);
  const params = parseWwwAuth(r.headers.get('www-authenticate'));
  assert.equal(params.realm, 'tollgate');
  assert.equal(params.resource_metadata, metadata, 'resource_metadata names the metadata URL');
  assert.equal(r.messages[0]?.error?.code, -32600, `JSON-RPC error body: ${r.text}`);
  assert.ok(!r.headers.get('mcp-session-id'), 'no session for a refused request');
  assert.equal(standinCount(), seen, 'a refused request never reaches the upstream');
  return { r, params };
}

/** Asserts a 401 with error="invalid_token" and the given error_description (a string or a list of allowed ones). */
async function expectInvalid(tok, description, opts) {
  const { r, params } = await expect401(tok, opts);
  assert.equal(params.error, 'invalid_token', `error= of ${r.headers.get('www-authenticate')}`);
  if (Array.isArray(description)) {
    assert.ok(description.includes(params.error_description),
      `error_description "${params.error_description}" is one of ${JSON.stringify(description)}`);
  } else {
    assert.equal(params.error_description, description);
  }
  return { r, params };
}

async function connect(tok, url = gatewayUrl()) {
  return H.connectClient(url, { fetch: fetchFn, headers: bearer(tok), cleanup });
}

const toolNames = async (client) => (await client.listTools()).tools.map((t) => t.name).sort();

async function expectDenied(client, name, args) {
  const { types } = await H.loadSdk();
  let err;
  try { await client.callTool({ name, arguments: args }); } catch (e) { err = e; }
  assert.ok(err instanceof types.McpError, `${name} must be refused, got ${err ?? 'a result'}`);
  assert.equal(err.code, -32001, `${name}: code ${err.code}: ${err.message}`);
}

// ---------------------------------------------------------------------------
// Setup

before(async () => {
  H.requireNodeModules();
  dir = H.makeTempDir(cleanup);
  keys = makeKeys();
  const jwksFile = path.join(dir, 'jwks.json');
  fs.writeFileSync(jwksFile, JSON.stringify(keys.jwks, null, 2) + '\n');
  const policy = (tools) => {
    const f = path.join(dir, `policy-${tools.join('-')}.json`);
    fs.writeFileSync(f, JSON.stringify({
      version: '1', default: 'deny',
      tools: Object.fromEntries(tools.map((t) => [t, { action: 'allow' }])),
    }) + '\n');
    return f;
  };
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  const opts = (file, extra = {}) => ({
    file,
    listeners: [{}],
    jwt: [
      { issuer: ISSUER, audience: AUDIENCE, jwks_file: jwksFile, grant_claim: 'sub', skew_s: SKEW_S,
        algorithms: ['RS256', 'ES256', 'PS256'] },
      { issuer: ISSUER_B, audience: AUDIENCE, jwks_file: jwksFile },
    ],
    grants: [
      { name: 'alice', issuers: [ISSUER], policies: [{ upstream: 'cowork-os', policy: policy(ALICE_TOOLS) }] },
      { name: 'bob', issuers: [ISSUER], policies: [{ upstream: 'cowork-os', policy: policy(BOB_TOOLS) }] },
      { name: 'carol', token_sha256: H.sha256hex(STATIC_TOKEN) },
      { name: 'dave', issuers: [ISSUER_B], policies: [{ upstream: 'cowork-os', policy: policy(BOB_TOOLS) }] },
    ],
    upstreams: [{
      name: 'cowork-os', url: standin.url, default: true, initialize: 'local',
      headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` },
    }],
    ...extra,
  });
  confOpts = opts;
  gw = await H.startTollgate(H.writeConf(dir, opts('tollgate.conf')), { cleanup, listeners: 1 });
  gwPublic = await H.startTollgate(H.writeConf(dir, opts('tollgate-public.conf', { public_url: PUBLIC_URL })),
    { cleanup, listeners: 1 });
  fetchFn = H.makeFetch({ cleanup });
});

after(() => cleanup.run());

// ---------------------------------------------------------------------------

describe('valid JWTs name the grant; its policy applies', () => {
  for (const alg of ['RS256', 'ES256', 'PS256']) {
    test(`${alg}: alice connects with the SDK and calls a tool her policy allows`, async () => {
      const c = await connect(token({ alg }));
      assert.ok(c.transport.sessionId, 'Mcp-Session-Id issued');
      const r = await c.client.callTool({ name: 'echo', arguments: { text: `hello via ${alg}` } });
      assert.equal(H.resultText(r), `hello via ${alg}`);
      const calls = standin.records().filter((x) => x.msg?.method === 'tools/call' && x.msg.params?.arguments?.text === `hello via ${alg}`);
      assert.equal(calls.length, 1, 'the call reached the stand-in');
      assert.equal(calls[0].http.headers.authorization, `Bearer ${UPSTREAM_TOKEN}`, 'upstream got the gateway-held credential, not the JWT');
      assert.deepEqual(c.errors.map(String), []);
      await c.close();
    });
  }

  test('without a kid every key that suits the alg is tried (RS256, ES256, PS256)', async () => {
    for (const alg of ['RS256', 'ES256', 'PS256']) {
      const c = await connect(token({ alg, kid: null }));
      assert.equal(H.resultText(await c.client.callTool({ name: 'echo', arguments: { text: alg } })), alg);
      await c.close();
    }
  });

  test('alice and bob see their own tool sets in tools/list, and are refused the other\'s tools', async () => {
    const alice = await connect(token({ alg: 'ES256', sub: 'alice' }));
    const bob = await connect(token({ alg: 'RS256', sub: 'bob' }));
    assert.deepEqual(await toolNames(alice.client), [...ALICE_TOOLS].sort());
    assert.deepEqual(await toolNames(bob.client), [...BOB_TOOLS].sort());
    await expectDenied(alice.client, 'run_command', { command: 'id' });
    await expectDenied(bob.client, 'execute_code', { language: 'python', code: 'print(1)' });
    const r = await bob.client.callTool({ name: 'echo', arguments: { text: 'bob here' } });
    assert.equal(H.resultText(r), 'bob here');
    const leaked = standin.records().filter((x) => x.msg?.method === 'tools/call' &&
      ['run_command', 'execute_code'].includes(x.msg.params?.name));
    assert.deepEqual(leaked, [], 'denied calls never reached the stand-in');
    await alice.close();
    await bob.close();
  });

  test('a static-token grant works alongside the JWT grants (upstream policy: everything)', async () => {
    const c = await connect(STATIC_TOKEN);
    const names = await toolNames(c.client);
    for (const n of ['echo', 'execute_code', 'run_command', 'slow', 'resend.send_email']) {
      assert.ok(names.includes(n), `carol sees ${n}; got ${names.join(', ')}`);
    }
    assert.equal(H.resultText(await c.client.callTool({ name: 'echo', arguments: { text: 'carol' } })), 'carol');
    await c.close();
    await expectInvalid(STATIC_TOKEN + 'x', 'invalid token');
  });

  test('a JWT also works on /mcp (the default upstream)', async () => {
    const c = await connect(token({ alg: 'PS256' }), `${base()}/mcp`);
    assert.deepEqual(await toolNames(c.client), [...ALICE_TOOLS].sort());
    await c.close();
  });

  test('aud may be an array holding the audience', async () => {
    const c = await connect(token({ claims: { aud: ['other', AUDIENCE] } }));
    assert.equal(H.resultText(await c.client.callTool({ name: 'echo', arguments: { text: 'aud[]' } })), 'aud[]');
    await c.close();
  });

  test(`exp and nbf within skew_s (${SKEW_S} s) are accepted`, async () => {
    const now = nowS();
    for (const claims of [{ exp: now - 20 }, { nbf: now + 20 }, { iat: now + 20 }]) {
      const c = await connect(token({ claims }));
      assert.ok(c.transport.sessionId, `accepted: ${JSON.stringify(claims)}`);
      await c.close();
    }
  });

  test('the token is checked on every request, not only at initialize', async () => {
    const c = await connect(token({ alg: 'RS256' }));
    const h = { 'mcp-session-id': c.transport.sessionId, 'mcp-protocol-version': c.transport.protocolVersion };
    const list = { jsonrpc: '2.0', id: 7, method: 'tools/list' };
    // a fresh token for the same grant carries on the session
    const ok = await H.postRaw(fetchFn, gatewayUrl(), list, { ...h, ...bearer(token({ alg: 'PS256' })) });
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(ok.messages[0]?.result?.tools?.map((t) => t.name).sort(), [...ALICE_TOOLS].sort());
    // an expired one does not
    await expectInvalid(token({ claims: { exp: nowS() - 3600 } }), 'expired', { body: list, headers: h });
    // bob's valid token on alice's session: 404 like an unknown session
    const other = await H.postRaw(fetchFn, gatewayUrl(), list, { ...h, ...bearer(token({ sub: 'bob' })) });
    assert.equal(other.status, 404, `bob on alice's session: HTTP ${other.status} ${other.text}`);
    await c.close();
  });
});

describe('refused tokens: 401 with error="invalid_token" and the reason', () => {
  test('the SDK client gets the 401 when connecting with a bad token', async () => {
    const { StreamableHTTPError } = await H.loadSdk();
    let err;
    try { await connect(token({ claims: { exp: nowS() - 3600 } })); } catch (e) { err = e; }
    assert.ok(err instanceof StreamableHTTPError, `StreamableHTTPError expected, got ${err}`);
    assert.equal(err.code, 401, String(err));
  });

  test('expired (exp in the past beyond the skew) → "expired"', async () => {
    for (const alg of ['RS256', 'ES256', 'PS256']) {
      await expectInvalid(token({ alg, claims: { exp: nowS() - SKEW_S - 60 } }), 'expired');
    }
  });

  test('nbf (or iat) in the future beyond the skew → "not yet valid"', async () => {
    await expectInvalid(token({ claims: { nbf: nowS() + 3600 } }), 'not yet valid');
    await expectInvalid(token({ claims: { iat: nowS() + 3600 } }), 'not yet valid');
  });

  test('no exp → refused', async () => {
    const { params } = await expectInvalid(token({ claims: { exp: undefined } }), ['malformed token', 'expired']);
    assert.ok(params.error_description);
  });

  test('wrong audience → "wrong audience"', async () => {
    await expectInvalid(token({ claims: { aud: 'someone-else' } }), 'wrong audience');
    await expectInvalid(token({ claims: { aud: ['someone-else', 'tollgate2'] } }), 'wrong audience');
    await expectInvalid(token({ claims: { aud: undefined } }), 'wrong audience');
  });

  test('wrong issuer → "wrong issuer"', async () => {
    await expectInvalid(token({ claims: { iss: 'https://evil.test' } }), 'wrong issuer');
    await expectInvalid(token({ claims: { iss: `${ISSUER}/` } }), 'wrong issuer');
    await expectInvalid(token({ claims: { iss: undefined } }), 'wrong issuer');
  });

  test('tampered payload (sub changed to bob, not re-signed) → "bad signature"', async () => {
    for (const alg of ['RS256', 'ES256', 'PS256']) {
      const [h, , s] = token({ alg, sub: 'alice' }).split('.');
      const now = nowS();
      const forged = b64u({ iss: ISSUER, aud: AUDIENCE, sub: 'bob', iat: now, exp: now + 300 });
      await expectInvalid(`${h}.${forged}.${s}`, 'bad signature');
    }
  });

  test('signed by another key with the same kid → "bad signature"', async () => {
    const other = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    await expectInvalid(token({
      alg: 'ES256',
      sign: (d) => crypto.sign('sha256', d, { key: other.privateKey, dsaEncoding: 'ieee-p1363' }),
    }), 'bad signature');
  });

  test('an ES256 signature in ASN.1 DER instead of raw r||s is refused', async () => {
    const t = token({ alg: 'ES256', sign: (d) => crypto.sign('sha256', d, keys.ec.privateKey) });
    await expectInvalid(t, ['bad signature', 'malformed token']);
  });

  test('alg "none" → refused', async () => {
    // unsigned, as an attacker would send it
    await expectInvalid(jws({ alg: 'none', typ: 'JWT' }, { iss: ISSUER, aud: AUDIENCE, sub: 'alice', exp: nowS() + 300 }),
      ['unsupported alg', 'malformed token']);
    // with a signature part that is not empty, the alg alone is the reason
    await expectInvalid(token({ header: { alg: 'none' } }), 'unsupported alg');
    await expectInvalid(token({ header: { alg: 'None' } }), 'unsupported alg');
    await expectInvalid(token({ header: { alg: 'HS512' } }), 'unsupported alg');
  });

  test('HS256, not listed for this issuer: refused even with the right secret, and with a public key (alg confusion)', async () => {
    const notAllowed = 'algorithm HS256 is not allowed for this issuer';
    await expectInvalid(token({ alg: 'HS256' }), notAllowed);
    await expectInvalid(token({ alg: 'HS256', kid: null }), notAllowed);
    const confused = (d) => crypto.createHmac('sha256', keys.rsaPublicPem).update(d).digest();
    await expectInvalid(token({ alg: 'HS256', kid: null, sign: confused }), notAllowed);
    await expectInvalid(token({ alg: 'HS256', kid: 'rsa-1', sign: confused }), notAllowed);
    // and the RSA key's DER form, for good measure
    const der = keys.rsa.publicKey.export({ type: 'spki', format: 'der' });
    await expectInvalid(token({ alg: 'HS256', kid: 'rsa-1', sign: (d) => crypto.createHmac('sha256', der).update(d).digest() }),
      notAllowed);
  });

  test('PS256 with node\'s default (longest) salt, or signed with the RS256 key, → refused', async () => {
    const maxSalt = (d) => crypto.sign('sha256', d, { key: keys.rsaPss.privateKey, padding: crypto.constants.RSA_PKCS1_PSS_PADDING });
    await expectInvalid(token({ alg: 'PS256', sign: maxSalt }), 'bad signature');
    // rsa-1 is published for RS256 only
    const withRs = (d) => crypto.sign('sha256', d,
      { key: keys.rsa.privateKey, padding: crypto.constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 });
    await expectInvalid(token({ alg: 'PS256', kid: 'rsa-1', sign: withRs }), 'unknown key');
  });

  test('an unknown kid → "unknown key"', async () => {
    await expectInvalid(token({ alg: 'RS256', kid: 'nope' }), 'unknown key');
  });

  test('a token naming no configured grant → "the token names no configured grant"', async () => {
    await expectInvalid(token({ sub: 'mallory' }), 'the token names no configured grant');
    await expectInvalid(token({ alg: 'ES256', sub: 'ALICE' }), 'the token names no configured grant');
  });

  test('a token naming a grant not bound to its issuer → "the token\'s issuer may not use the grant it names"', async () => {
    const refused = "the token's issuer may not use the grant it names";
    await expectInvalid(token({ sub: 'dave' }), refused); // ISSUER naming ISSUER_B's grant
    await expectInvalid(token({ sub: 'alice', claims: { iss: ISSUER_B } }), refused); // and the other way
    await expectInvalid(token({ alg: 'ES256', sub: 'carol' }), refused); // a static-token grant lists no issuer
    // on a live session of alice's, too: the token is checked on every request
    const c = await connect(token());
    const h = { 'mcp-session-id': c.transport.sessionId, 'mcp-protocol-version': c.transport.protocolVersion };
    await expectInvalid(token({ sub: 'alice', claims: { iss: ISSUER_B } }), refused,
      { body: { jsonrpc: '2.0', id: 9, method: 'tools/list' }, headers: h });
    await c.close();
    // the second issuer names its own grant
    const d = await connect(token({ sub: 'dave', claims: { iss: ISSUER_B } }));
    assert.deepEqual(await toolNames(d.client), [...BOB_TOOLS].sort());
    await d.close();
  });

  test('and on a WebSocket upgrade (/ws) and a legacy SSE GET (/sse): 401 with the same reason', async () => {
    const { default: WsWebSocket } = await import('ws');
    const refused = "the token's issuer may not use the grant it names";
    const wrong = token({ sub: 'dave' });
    const seen = standinCount();
    const ws = await new Promise((resolve) => {
      const w = new WsWebSocket(`ws://127.0.0.1:${gw.plainPort}/cowork-os/ws`, 'mcp', { headers: bearer(wrong) });
      w.on('open', () => { w.terminate(); resolve({ status: 101 }); });
      w.on('unexpected-response', (req, res) => {
        res.resume();
        res.on('end', () => { w.terminate(); resolve({ status: res.statusCode, www: res.headers['www-authenticate'] }); });
      });
      w.on('error', (e) => resolve({ status: 0, error: e }));
    });
    assert.equal(ws.status, 401, `WebSocket upgrade: ${ws.status} ${ws.error ?? ''}`);
    assert.equal(parseWwwAuth(ws.www).error_description, refused);
    const sse = await fetchFn(`${base()}/cowork-os/sse`, { headers: { accept: 'text/event-stream', ...bearer(wrong) } });
    const text = await sse.text();
    assert.equal(sse.status, 401, `GET /sse: HTTP ${sse.status} ${text}`);
    assert.equal(parseWwwAuth(sse.headers.get('www-authenticate')).error_description, refused);
    assert.equal(standinCount(), seen, 'a refused request never reaches the upstream');
  });

  test('no grant claim → "missing grant claim"', async () => {
    await expectInvalid(token({ claims: { sub: undefined } }), 'missing grant claim');
    await expectInvalid(token({ claims: { sub: '' } }), 'missing grant claim');
    await expectInvalid(token({ claims: { sub: 42 } }), 'missing grant claim');
  });

  test('garbage shaped like a JWT → "malformed token"', async () => {
    await expectInvalid('a.b.c', 'malformed token');
    await expectInvalid(`${b64u({ alg: 'RS256' })}.e30.${'A'.repeat(10)}=`, 'malformed token');
  });

  test('missing Authorization → 401 with resource_metadata and no error=', async () => {
    const { r, params } = await expect401(undefined);
    assert.equal(params.error, undefined, `no error= without a token: ${r.headers.get('www-authenticate')}`);
    assert.equal(params.error_description, undefined);
  });
});

describe('RFC 9728 protected-resource metadata', () => {
  test('the resource_metadata URL from the 401 serves the metadata', async () => {
    const { params } = await expect401(undefined);
    const url = new URL(params.resource_metadata);
    assert.equal(url.origin, base());
    const res = await fetchFn(url, { headers: { accept: 'application/json' } });
    const text = await res.text();
    assert.equal(res.status, 200, `GET ${url}: HTTP ${res.status} ${text}`);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    const m = JSON.parse(text);
    assert.equal(m.resource, gatewayUrl());
    assert.deepEqual(m.authorization_servers, [ISSUER, ISSUER_B]);
    assert.deepEqual(m.bearer_methods_supported, ['header']);
    assert.equal(typeof m.resource_name, 'string');
  });

  test('the SDK finds the metadata from the 401 and accepts its resource for the server URL', async () => {
    const auth = await import('@modelcontextprotocol/sdk/client/auth.js');
    const { checkResourceAllowed } = await import('@modelcontextprotocol/sdk/shared/auth-utils.js');
    const res = await fetchFn(gatewayUrl(), {
      method: 'POST', headers: { ...H.MCP_HEADERS, ...bearer(token({ claims: { exp: 1 } })) },
      body: JSON.stringify(H.initializeBody(1)),
    });
    await res.text();
    assert.equal(res.status, 401);
    const www = auth.extractWWWAuthenticateParams(res);
    assert.equal(www.error, 'invalid_token');
    assert.equal(www.resourceMetadataUrl?.href, `${base()}${metadataPath()}`);
    const m = await auth.discoverOAuthProtectedResourceMetadata(gatewayUrl(), { resourceMetadataUrl: www.resourceMetadataUrl }, fetchFn);
    assert.deepEqual(m.authorization_servers, [ISSUER, ISSUER_B]);
    assert.ok(checkResourceAllowed({ requestedResource: gatewayUrl(), configuredResource: m.resource }),
      `the SDK accepts resource ${m.resource} for ${gatewayUrl()}`);
    // path-aware discovery from the server URL alone finds the same document
    const d = await auth.discoverOAuthProtectedResourceMetadata(gatewayUrl(), {}, fetchFn);
    assert.deepEqual(d, m);
  });

  test('on /mcp the 401 leads to metadata whose resource the SDK accepts for /mcp', async () => {
    const auth = await import('@modelcontextprotocol/sdk/client/auth.js');
    const { checkResourceAllowed } = await import('@modelcontextprotocol/sdk/shared/auth-utils.js');
    const server = `${base()}/mcp`;
    const res = await fetchFn(server, { method: 'POST', headers: H.MCP_HEADERS, body: JSON.stringify(H.initializeBody(1)) });
    await res.text();
    assert.equal(res.status, 401);
    const www = auth.extractWWWAuthenticateParams(res);
    assert.ok(www.resourceMetadataUrl, 'resource_metadata on /mcp');
    const m = await auth.discoverOAuthProtectedResourceMetadata(server, { resourceMetadataUrl: www.resourceMetadataUrl }, fetchFn);
    assert.ok(checkResourceAllowed({ requestedResource: server, configuredResource: m.resource }),
      `resource_metadata ${www.resourceMetadataUrl} has resource ${m.resource}, which the SDK refuses for ${server} ` +
      '(RFC 9728 §3.3: the resource must be the URL the metadata path was derived from)');
  });

  test('the base URL comes from the Host header (and only a plain host[:port] is used)', async () => {
    const get = async (host) => {
      const res = await fetchFn(`${base()}${metadataPath()}`, { headers: { host } });
      const text = await res.text();
      assert.equal(res.status, 200, `Host ${host}: HTTP ${res.status} ${text}`);
      return JSON.parse(text);
    };
    assert.equal((await get('mcp.example.com:8443')).resource, 'http://mcp.example.com:8443/cowork-os/mcp');
    assert.equal((await get('evil.test/x"y')).resource, `${base()}/cowork-os/mcp`, 'an odd Host falls back to the listener address');
    const r = await H.postRaw(fetchFn, gatewayUrl(), H.initializeBody(1), { host: 'mcp.example.com:8443' });
    assert.equal(r.status, 401);
    assert.equal(parseWwwAuth(r.headers.get('www-authenticate')).resource_metadata,
      `http://mcp.example.com:8443${metadataPath()}`);
  });

  test('an unknown upstream and look-alike paths get 404', async () => {
    const wrong = [];
    for (const p of [
      metadataPath('nope'),
      '/.well-known/oauth-protected-resourcex/cowork-os/mcp',
      '/.well-known/oauth-protected-resource-cowork-os/mcp',
      '/.well-known/oauth-protected-resourcex/mcp',
      '/.well-known/oauth-protected-resource/cowork-os/mcpx',
    ]) {
      const res = await fetchFn(`${base()}${p}`);
      const text = await res.text();
      if (res.status !== 404) wrong.push(`GET ${p}: HTTP ${res.status} ${text}`);
    }
    assert.deepEqual(wrong, []);
    // the bare well-known path (shorter than the prefix the router skips) answers without harm
    for (const p of ['/.well-known/oauth-protected-resource', '/.well-known/oauth-protected-resource?/x', '/.well-known/oauth-protected-resource/']) {
      const res = await fetchFn(`${base()}${p}`);
      await res.text();
      assert.ok([200, 404].includes(res.status), `GET ${p}: HTTP ${res.status}`);
    }
    gw.assertNoSanitizerReport();
  });

  test(`with public_url = "${PUBLIC_URL}", resource_metadata and resource use it`, async () => {
    const pub = { url: gatewayUrl('cowork-os', gwPublic), metadata: `${PUBLIC_URL}${metadataPath()}` };
    await expectInvalid(token({ claims: { aud: 'x' } }), 'wrong audience', pub);
    const { params } = await expect401(undefined, pub);
    assert.equal(params.error, undefined);
    // the document is served locally but names the public URL, whatever the Host
    for (const headers of [{}, { host: 'mcp.example.com:8443' }]) {
      const res = await fetchFn(`${base(gwPublic)}${metadataPath()}`, { headers });
      const text = await res.text();
      assert.equal(res.status, 200, `HTTP ${res.status} ${text}`);
      const m = JSON.parse(text);
      assert.equal(m.resource, `${PUBLIC_URL}/cowork-os/mcp`);
      assert.deepEqual(m.authorization_servers, [ISSUER, ISSUER_B]);
    }
    // and a valid token still works there
    const c = await connect(token({ alg: 'ES256', sub: 'bob' }), gatewayUrl('cowork-os', gwPublic));
    assert.deepEqual(await toolNames(c.client), [...BOB_TOOLS].sort());
    await c.close();
  });
});

// ---------------------------------------------------------------------------
// Long-lived channels (WebSocket, legacy SSE) end with the credential that opened them.

/** A WebSocket on /ws with token; resolves once open, with a promise of its close {code, reason}. */
async function openWs(g, tok) {
  const { default: WsWebSocket } = await import('ws');
  const w = new WsWebSocket(`ws://127.0.0.1:${g.plainPort}/cowork-os/ws`, 'mcp', { headers: bearer(tok) });
  const closed = new Promise((resolve) => w.on('close', (code, reason) => resolve({ code, reason: String(reason) })));
  await new Promise((resolve, reject) => {
    w.on('open', resolve);
    w.on('unexpected-response', (req, res) => reject(new Error(`WebSocket upgrade: HTTP ${res.statusCode}`)));
    w.on('error', reject);
  });
  cleanup.add(() => w.terminate());
  return { w, closed };
}

/** A legacy SSE stream on /sse with token; resolves once its endpoint event came, with a promise of its end. */
async function openSse(g, tok) {
  const r = await fetchFn(`${base(g)}/cowork-os/sse`, { headers: { accept: 'text/event-stream', ...bearer(tok) } });
  assert.equal(r.status, 200, `GET /sse: HTTP ${r.status}`);
  const reader = r.body.getReader();
  let text = '';
  while (!text.includes('event: endpoint')) {
    const { value, done } = await reader.read();
    assert.ok(!done, `the stream ended before its endpoint event: ${text}`);
    text += Buffer.from(value).toString();
  }
  const ended = (async () => {
    for (;;) {
      const { done } = await reader.read();
      if (done) return 'ended';
    }
  })();
  return { ended };
}

const within = (p, ms, what) => Promise.race([p,
  new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), H.scaled(ms)))]);

describe('long-lived channels end with their credential', () => {
  test('a JWT whose exp (plus the issuer\'s skew) passes ends its WebSocket (1008) and its SSE stream', async () => {
    // valid for about two more seconds: exp + skew_s is the last moment the gateway takes it
    const soon = () => token({ claims: { exp: nowS() - SKEW_S + 2 } });
    const ws = await openWs(gw, soon());
    const sse = await openSse(gw, soon());
    const lasting = await openWs(gw, token()); // exp 300 s away: stays
    // exp far beyond any clock (the verifier caps it): its timer must not overflow, the channel stays
    const far = await openWs(gw, token({ claims: { exp: 1e16 } }));
    const c = await within(ws.closed, 8000, 'the WebSocket closing at exp');
    assert.equal(c.code, 1008, `close code: ${JSON.stringify(c)}`);
    assert.match(c.reason, /expired/);
    assert.equal(await within(sse.ended, 8000, 'the SSE stream ending at exp'), 'ended');
    assert.equal(lasting.w.readyState, 1, 'a channel whose token has not expired stays open');
    assert.equal(far.w.readyState, 1, 'a channel whose token expires in the far future stays open');
    lasting.w.close();
    far.w.close();
    await lasting.closed;
    await far.closed;
  });

  test('a reload that rotates a static token ends its WebSocket (1008) and its SSE stream, one that drops a grant\'s issuer its JWT channels; other channels stay', async () => {
    const conf = (grantsEdit) => {
      const o = confOpts('tollgate-reload.conf');
      o.grants = grantsEdit(o.grants);
      return o;
    };
    const same = (gs) => gs;
    const g = await H.startTollgate(H.writeConf(dir, conf(same)), { cleanup, listeners: 1 });
    const carolWs = await openWs(g, STATIC_TOKEN);
    const carolSse = await openSse(g, STATIC_TOKEN);
    const alice = await openWs(g, token());
    // a reload that changes nothing of theirs keeps them all
    const reloaded = async () => {
      const n = (g.stderr().match(/configuration reloaded/g) ?? []).length;
      process.kill(g.proc.pid, 'SIGHUP');
      await H.waitUntil(() => (g.stderr().match(/configuration reloaded/g) ?? []).length > n || g.exit,
        { timeout: 5000, what: 'the reload in the log' });
    };
    await reloaded();
    const NEW_TOKEN = H.randomToken();
    H.writeConf(dir, conf((gs) => gs.map((x) => (x.name === 'carol' ? { ...x, token_sha256: H.sha256hex(NEW_TOKEN) } : x))));
    await reloaded();
    const c = await within(carolWs.closed, 5000, "carol's WebSocket closing after the reload");
    assert.equal(c.code, 1008, `close code: ${JSON.stringify(c)}`);
    assert.match(c.reason, /credential/);
    assert.equal(await within(carolSse.ended, 5000, "carol's SSE stream ending after the reload"), 'ended');
    assert.equal(alice.w.readyState, 1, "alice's channel (her grant unchanged) stays open");
    // the new token opens a channel again
    const again = await openWs(g, NEW_TOKEN);
    again.w.close();
    await again.closed;
    // a grant that no longer lists the issuer of the JWT that opened the channel: it ends too
    const bob = await openWs(g, token({ sub: 'bob' }));
    H.writeConf(dir, conf((gs) => gs.map((x) => (x.name === 'carol' ? { ...x, token_sha256: H.sha256hex(NEW_TOKEN) }
      : x.name === 'alice' ? { ...x, issuers: [ISSUER_B] } : x))));
    await reloaded();
    const a = await within(alice.closed, 5000, "alice's WebSocket closing after her grant dropped its issuer");
    assert.equal(a.code, 1008, `close code: ${JSON.stringify(a)}`);
    assert.equal(bob.w.readyState, 1, "bob's channel (his grant unchanged) stays open");
    // stopping with a JWT's channel (and its timer) still open: it closes 1001, nothing leaks
    assert.equal(g.status(), 'running');
    const r = await g.stop();
    assert.equal((await bob.closed).code, 1001);
    assert.equal(r.code, 0, `exit: ${JSON.stringify(r)}\n${g.stderr()}`);
    g.assertNoSanitizerReport();
  });
});

describe('after all that', () => {
  test('the gateways are still running and logged no sanitizer report', async () => {
    for (const g of [gw, gwPublic]) {
      assert.equal(g.status(), 'running');
      g.assertNoSanitizerReport();
    }
  });
});
