// An issuer's keys fetched at run time (jwt[].jwks_url, jwt[].discovery) against a real OpenID
// provider: oidc-provider (test/fixtures/oidc/idp.mjs) on loopback https with a CA made here.
//
//   - discovery through openid-configuration (issuer with a path), and through the RFC 8414
//     document when openid-configuration answers 404; jwks_url direct; a client_credentials JWT
//     access token for a resource indicator accepted through tollgate on Streamable HTTP (SDK)
//   - rotation: the IdP restarted with a new key set; a token with the new kid works on its first
//     request (one refetch), a token with the old kid stops once the refetched set lacks it
//   - refresh honours Cache-Control max-age (seen in the IdP's request log), clamped by
//     refresh_min_s
//   - bad input from a small https server of this file's own: garbage, a JWKS over 1 MiB, one that
//     never answers, a redirect, keys of the wrong type, a discovery document naming another
//     issuer. Each keeps the last good set and is counted in /metrics; before the first good set
//     the issuer's tokens get 401 and /readyz says why.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/idp.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';

import * as H from './lib/harness.mjs';
import { makeIdpKeys, startIdp } from './lib/oidc.mjs';

const RES = 'https://gw.test/mcp';
const UPSTREAM_TOKEN = H.randomToken();

const cleanup = new H.Cleanup();
let dir;
let certs;
let standin;
let fetchFn;
const gws = [];

const logs = () => Object.fromEntries(gws.map((g, i) => [`tollgate ${i} stderr`, g.stderr()]));
const test = (name, fn) => it(name, H.withLogs(logs, fn));

before(async () => {
  H.requireNodeModules();
  dir = H.makeTempDir(cleanup);
  certs = H.makeCerts(dir);
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  fetchFn = H.makeFetch({ cleanup });
});
after(() => cleanup.run());

/** The conf of a gateway whose jwt[] is jwt (grant "alice" takes every issuer in it). */
function gatewayConf(name, jwt) {
  return H.writeConf(dir, {
    file: `${name}.conf`,
    listeners: [{}],
    admin: true,
    jwt: jwt.map((j) => ({ audience: RES, grant_claim: 'grant', ca: certs.caCert, ...j })),
    grants: [{ name: 'alice', issuers: jwt.map((j) => j.issuer) }],
    upstreams: [{ name: 'cowork-os', url: standin.url, default: true, initialize: 'local',
      headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` } }],
  });
}

async function gateway(name, jwt) {
  const file = gatewayConf(name, jwt);
  const g = await H.startTollgate(file, { cleanup, listeners: 1, admin: true });
  g.url = `http://127.0.0.1:${g.plainPort}/mcp`;
  gws.push(g);
  return g;
}

const bearer = (t) => ({ Authorization: `Bearer ${t}` });
const init = (g, tok) => H.postRaw(fetchFn, g.url, H.initializeBody(), bearer(tok));
const readyz = async (g) => {
  const r = await fetchFn(`http://127.0.0.1:${g.plainPort}/readyz`);
  return { status: r.status, body: await r.json() };
};
const waitReady = (g) => H.waitUntil(async () => (await readyz(g)).status === 200, { what: '/readyz 200' });
const metric = (issuer, name, extra = '') => `tollgate_${name}{issuer="${issuer}"${extra}}`;

describe('keys from the IdP', () => {
  test('discovery (openid-configuration, issuer with a path): a client_credentials JWT works through the SDK', async () => {
    const idp = await startIdp({ cleanup, dir, certs, name: 'idp-disc', keys: makeIdpKeys('d1'), issuerPath: '/tenant-a',
      resources: { [RES]: { scope: 'read' } }, extraClaims: { grant: 'alice' } });
    const g = await gateway('disc', [{ issuer: idp.issuer, discovery: true }]);
    await waitReady(g);
    assert.ok(idp.count((r) => r.path === '/.well-known/openid-configuration' && r.status === 200) >= 1);
    assert.ok(idp.count((r) => r.path === '/jwks') >= 1);
    const tok = await idp.token({ resource: RES, scope: 'read' });
    const c = await H.connectClient(g.url, { fetch: fetchFn, headers: bearer(tok), cleanup });
    const r = await c.client.callTool({ name: 'echo', arguments: { text: 'via discovery' } });
    assert.equal(H.resultText(r), 'via discovery');
    await c.close();
    const m = await g.metrics();
    assert.equal(m[metric(idp.issuer, 'jwks_fetches_total', ',result="ok"')], 1);
    assert.equal(m[metric(idp.issuer, 'jwks_keys')], 2);
  });

  test('discovery falls back to RFC 8414 (path inserted after the well-known segment) on a 404', async () => {
    const idp = await startIdp({ cleanup, dir, certs, name: 'idp-8414', keys: makeIdpKeys('r1'), issuerPath: '/t2',
      hideOpenidConfiguration: true, resources: { [RES]: { scope: 'read' } }, extraClaims: { grant: 'alice' } });
    const g = await gateway('rfc8414', [{ issuer: idp.issuer, discovery: true }]);
    await waitReady(g);
    assert.ok(idp.count((r) => r.path === '/.well-known/openid-configuration' && r.status === 404) >= 1);
    assert.ok(idp.count((r) => r.path === '/.well-known/oauth-authorization-server' && r.status === 200) >= 1,
      JSON.stringify(idp.requests));
    const tok = await idp.token({ resource: RES, scope: 'read' });
    assert.equal((await init(g, tok)).status, 200);
  });

  test('jwks_url direct; rotation: a new kid works on its first request, the old one stops', async () => {
    const idp = await startIdp({ cleanup, dir, certs, name: 'idp-rot', keys: makeIdpKeys('a1'),
      resources: { [RES]: { scope: 'read' } }, extraClaims: { grant: 'alice' }, jwksCacheControl: 'max-age=3600' });
    const g = await gateway('rotate', [{ issuer: idp.issuer, jwks_url: idp.url('/jwks'), refresh_min_s: 1 }]);
    await waitReady(g);
    const old = await idp.token({ resource: RES });
    assert.equal((await init(g, old)).status, 200);
    await idp.restart({ keys: makeIdpKeys('a2') });
    const fresh = await idp.token({ resource: RES });
    assert.equal(JSON.parse(Buffer.from(fresh.split('.')[0], 'base64url')).kid, 'a2-rsa');
    const since = idp.requests.length;
    // refresh_min_s is 1: the first fetch may be younger than that; the first try may be refused.
    await H.waitUntil(async () => (await init(g, fresh)).status === 200, { what: 'the new kid accepted' });
    assert.equal(idp.requests.slice(since).filter((r) => r.path === '/jwks').length, 1, 'exactly one refetch');
    const r = await init(g, old);
    assert.equal(r.status, 401);
    assert.match(r.headers.get('www-authenticate'), /unknown key/);
    const m = await g.metrics();
    assert.ok(m[metric(idp.issuer, 'jwks_refetches_total')] >= 1);
    assert.ok(m[metric(idp.issuer, 'jwks_unknown_kid_total')] >= 2);
  });

  test('a new kid works on the very first request once refresh_min_s has passed (the request waits for the refetch)', async () => {
    const idp = await startIdp({ cleanup, dir, certs, name: 'idp-wait', keys: makeIdpKeys('w1'),
      resources: { [RES]: { scope: 'read' } }, extraClaims: { grant: 'alice' }, jwksCacheControl: 'max-age=3600' });
    const g = await gateway('wait', [{ issuer: idp.issuer, jwks_url: idp.url('/jwks'), refresh_min_s: 1 }]);
    await waitReady(g);
    const firstFetch = Date.now();
    await idp.restart({ keys: makeIdpKeys('w2') });
    const fresh = await idp.token({ resource: RES });
    const left = 1100 - (Date.now() - firstFetch);
    if (left > 0) await H.sleep(left); // refresh_min_s since the first fetch, no more
    const since = idp.requests.length;
    assert.equal((await init(g, fresh)).status, 200, 'the first request with the new kid');
    assert.equal(idp.requests.slice(since).filter((r) => r.path === '/jwks').length, 1);
  });

  test('a reload that keeps issuer, source and ca keeps the keys (no refetch); a changed source fetches anew', async () => {
    const idp = await startIdp({ cleanup, dir, certs, name: 'idp-reload', keys: makeIdpKeys('l1'),
      resources: { [RES]: { scope: 'read' } }, extraClaims: { grant: 'alice' }, jwksCacheControl: 'max-age=3600' });
    const jwt = (extra) => [{ issuer: idp.issuer, jwks_url: idp.url('/jwks'), refresh_min_s: 1, ...extra }];
    const g = await gateway('reload', jwt({}));
    await waitReady(g);
    const tok = await idp.token({ resource: RES });
    const fetches = () => idp.count((r) => r.path.startsWith('/jwks'));
    const before = fetches();
    const reloaded = async () => {
      const n = (g.stderr().match(/configuration reloaded/g) ?? []).length;
      process.kill(g.proc.pid, 'SIGHUP');
      await H.waitUntil(() => (g.stderr().match(/configuration reloaded/g) ?? []).length > n || g.exit,
        { what: 'the reload in the log' });
    };
    gatewayConf('reload', jwt({ refresh_max_s: 7200, fetch_timeout_ms: 3000 }));
    await reloaded();
    assert.equal((await init(g, tok)).status, 200, 'the held keys verify at once after the reload');
    assert.equal((await readyz(g)).status, 200);
    assert.equal(fetches(), before, 'no refetch');
    gatewayConf('reload', jwt({ jwks_url: idp.url('/jwks?v=2') }));
    await reloaded();
    await idp.waitForRequest((r) => r.path === '/jwks?v=2', { since: 0 });
    await waitReady(g);
    assert.equal((await init(g, tok)).status, 200);
  });

  test('refresh honours Cache-Control max-age, clamped to refresh_min_s', async () => {
    const idp = await startIdp({ cleanup, dir, certs, name: 'idp-age', keys: makeIdpKeys('m1'),
      resources: { [RES]: { scope: 'read' } }, jwksCacheControl: 'public, max-age=2' });
    await gateway('maxage', [{ issuer: idp.issuer, jwks_url: idp.url('/jwks'), refresh_min_s: 1, refresh_max_s: 60 }]);
    await idp.waitForRequest((r) => r.path === '/jwks', { since: 0 });
    const t0 = Date.now();
    await idp.waitForRequest((r) => r.path === '/jwks', { since: idp.requests.length });
    const t1 = Date.now();
    assert.ok(t1 - t0 >= 1500 && t1 - t0 < 6000, `refetched after ${t1 - t0} ms, max-age=2`);

    const idp2 = await startIdp({ cleanup, dir, certs, name: 'idp-age2', keys: makeIdpKeys('m2'),
      resources: { [RES]: { scope: 'read' } }, jwksCacheControl: 'max-age=0' });
    await gateway('maxage2', [{ issuer: idp2.issuer, jwks_url: idp2.url('/jwks'), refresh_min_s: 2, refresh_max_s: 60 }]);
    await idp2.waitForRequest((r) => r.path === '/jwks', { since: 0 });
    const u0 = Date.now();
    await idp2.waitForRequest((r) => r.path === '/jwks', { since: idp2.requests.length });
    assert.ok(Date.now() - u0 >= 1700, `max-age=0 clamped to refresh_min_s=2: ${Date.now() - u0} ms`);
  });
});

// ---------------------------------------------------------------------------
// Bad input from our own https server

function rsaSigner() {
  const { publicKey, privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = { ...publicKey.export({ format: 'jwk' }), kid: 'own-1', alg: 'RS256', use: 'sig' };
  const sign = (iss) => {
    const now = Math.floor(Date.now() / 1000);
    const b = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
    const input = `${b({ alg: 'RS256', typ: 'JWT', kid: 'own-1' })}.${b({ iss, aud: RES, sub: 'x', grant: 'alice', iat: now, exp: now + 300 })}`;
    return `${input}.${crypto.sign('sha256', Buffer.from(input), privateKey).toString('base64url')}`;
  };
  return { jwks: { keys: [jwk] }, sign };
}

async function badServer() {
  const s = { mode: 'good', hits: 0 };
  const signer = rsaSigner();
  s.sign = signer.sign;
  const server = https.createServer({ cert: fs.readFileSync(certs.cert), key: fs.readFileSync(certs.key) }, (req, res) => {
    const p = new URL(req.url, 'https://x').pathname;
    if (p === '/always-garbage') { res.end('<html>not json'); return; }
    if (p === '/mismatch/.well-known/openid-configuration') {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ issuer: `${s.origin}/someone-else`, jwks_uri: `${s.origin}/jwks` }));
      return;
    }
    if (p !== '/jwks') { res.statusCode = 404; res.end(); return; }
    s.hits++;
    const json = (v) => { res.setHeader('content-type', 'application/json'); res.setHeader('cache-control', 'max-age=1'); res.end(JSON.stringify(v)); };
    switch (s.mode) {
      case 'good': json(signer.jwks); break;
      case 'garbage': res.end('{"keys": [ this is not json'); break;
      case 'huge': json({ keys: signer.jwks.keys, pad: 'x'.repeat(1100 * 1024) }); break;
      case 'hang': break; // never answers
      case 'redirect': res.statusCode = 302; res.setHeader('location', 'https://elsewhere.test/jwks'); res.end(); break;
      case 'wrongtype': json({ keys: [{ kty: 'OKP', crv: 'Ed25519', x: crypto.randomBytes(32).toString('base64url'), kid: 'ed' },
        { ...signer.jwks.keys[0], use: 'enc', alg: 'RSA-OAEP', kid: 'enc' }] }); break;
      case 'mixed': json({ keys: [signer.jwks.keys[0],
        { kty: 'OKP', crv: 'Ed25519', x: crypto.randomBytes(32).toString('base64url'), kid: 'ed' },
        { kty: 'oct', k: crypto.randomBytes(32).toString('base64url'), kid: 'hs' },
        { ...signer.jwks.keys[0], use: 'enc', alg: 'RSA-OAEP', kid: 'enc' },
        { ...signer.jwks.keys[0], alg: 'RS512', kid: 'rs512' }] }); break;
      default: res.statusCode = 500; res.end();
    }
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  s.origin = `https://127.0.0.1:${server.address().port}`;
  cleanup.add(() => { server.closeAllConnections(); server.close(); });
  return s;
}

describe('bad input keeps the last good set, is counted, and /readyz says why before the first', () => {
  test('garbage, over 1 MiB, no answer, a redirect, keys of the wrong type', async () => {
    const s = await badServer();
    const issuer = `${s.origin}/own`;
    const g = await gateway('bad', [{ issuer, jwks_url: `${s.origin}/jwks`, refresh_min_s: 1, fetch_timeout_ms: 500 }]);
    await waitReady(g);
    const tok = s.sign(issuer);
    assert.equal((await init(g, tok)).status, 200);
    const cases = [
      ['garbage', /the JWKS is not JSON/],
      ['huge', /answer over 1048576 bytes/],
      ['hang', /timed out/],
      ['redirect', /redirect \(302\) to https:\/\/elsewhere\.test\/jwks refused/],
      ['wrongtype', /no key tollgate can verify with/],
    ];
    for (const [mode, re] of cases) {
      const failed = (await g.metrics())[metric(issuer, 'jwks_fetches_total', ',result="failed"')] ?? 0;
      const from = g.stderr().length;
      s.mode = mode;
      await g.waitForMetric(metric(issuer, 'jwks_fetches_total', ',result="failed"'), (v) => v > failed,
        { what: `a failed fetch (${mode})` });
      await g.waitForLog(re, { from, what: `the ${mode} reason` });
      assert.equal((await init(g, tok)).status, 200, `${mode}: the last good set stays`);
      assert.equal((await readyz(g)).status, 200, `${mode}: still ready (a good set is held)`);
      assert.equal((await g.metrics())[metric(issuer, 'jwks_keys')], 1);
    }
    s.mode = 'good';
  });

  test('a set with unusable keys: the usable one works; each skipped key is counted by reason and logged once per fetch', async () => {
    const s = await badServer();
    s.mode = 'mixed';
    const issuer = `${s.origin}/mixed`;
    const g = await gateway('mixed', [{ issuer, jwks_url: `${s.origin}/jwks`, refresh_min_s: 1 }]);
    await waitReady(g);
    assert.equal((await init(g, s.sign(issuer))).status, 200);
    const m = await g.metrics();
    assert.equal(m[metric(issuer, 'jwks_keys')], 1);
    const skipped = (reason) => m[metric(issuer, 'jwks_keys_skipped_total', `,reason="${reason}"`)];
    for (const reason of ['okp', 'oct', 'use', 'alg']) assert.ok(skipped(reason) >= 1, `${reason}: ${JSON.stringify(m)}`);
    assert.equal(skipped('curve'), 0);
    assert.equal(skipped('kty'), 0);
    const lines = () => g.stderr().split('\n').filter((l) => /issuer keys skipped/.test(l));
    await H.waitUntil(() => lines().length >= 1, { what: 'the skipped keys in the log' });
    assert.match(lines()[0], /skipped=4/);
    assert.match(lines()[0], /ed:okp hs:oct enc:use rs512:alg/);
    // the next fetch (max-age=1, refresh_min_s 1) logs and counts again, once
    const fetched = m[metric(issuer, 'jwks_fetches_total', ',result="ok"')];
    await g.waitForMetric(metric(issuer, 'jwks_fetches_total', ',result="ok"'), (v) => v > fetched, { what: 'a refetch' });
    const m2 = await g.metrics();
    const n = m2[metric(issuer, 'jwks_fetches_total', ',result="ok"')];
    assert.equal(m2[metric(issuer, 'jwks_keys_skipped_total', ',reason="okp"')], n);
    const l = lines().length; // each fetch logs before it is counted: one more may be on its way
    assert.ok(l >= n && l <= n + 1, `one line per fetch: ${l} lines, ${n} fetches`);
  });

  test('before the first good set: 401 and /readyz names the issuer and why (garbage, discovery naming another issuer)', async () => {
    const s = await badServer();
    const garbage = `${s.origin}/g`;
    const mismatch = `${s.origin}/mismatch`;
    const g = await gateway('nokeys', [
      { issuer: garbage, jwks_url: `${s.origin}/always-garbage`, refresh_min_s: 1 },
      { issuer: mismatch, discovery: true, refresh_min_s: 1 },
    ]);
    await g.waitForMetric(metric(mismatch, 'jwks_fetches_total', ',result="failed"'), (v) => v >= 1);
    await g.waitForMetric(metric(garbage, 'jwks_fetches_total', ',result="failed"'), (v) => v >= 1);
    const rz = await readyz(g);
    assert.equal(rz.status, 503);
    assert.match(rz.body.reason, new RegExp(`issuer ${garbage}: the issuer's keys are not fetched yet: JWKS ${s.origin}/always-garbage: the JWKS is not JSON`));
    assert.match(rz.body.reason, /the discovery document names issuer https:\/\/127\.0\.0\.1:\d+\/someone-else, not the configured one/);
    const r = await init(g, s.sign(garbage));
    assert.equal(r.status, 401);
    assert.match(r.headers.get('www-authenticate'), /error_description="the issuer's keys are not fetched yet: /);
    const admin = await fetchFn(`http://127.0.0.1:${g.adminPort}/readyz`);
    assert.equal(admin.status, 503);
  });
});

describe('conf', () => {
  test('tollgate -t fetches nothing', async () => {
    const s = await badServer();
    const file = H.writeConf(dir, {
      file: 'dry.conf', listeners: [{}],
      jwt: [{ issuer: `${s.origin}/own`, audience: RES, jwks_url: `${s.origin}/jwks`, ca: certs.caCert }],
      grants: [{ name: 'alice', issuers: [`${s.origin}/own`] }],
      upstreams: [{ name: 'cowork-os', url: standin.url, default: true }],
    });
    const { execFileSync } = await import('node:child_process');
    execFileSync(H.tollgateBin(), ['-t', '-c', file], { stdio: 'pipe' });
    assert.equal(s.hits, 0);
  });
});
