// Per-user credentials toward upstreams: grants[].upstream_headers (a grant's static credential for
// one upstream) and upstreams[].token_exchange (RFC 8693: the client's JWT exchanged for a token
// scoped to the upstream), on every client transport.
//
// The peers are the test's own: a recording MCP upstream (node:http) whose echo tool answers with
// the Authorization header it got, and an RFC 8693 token endpoint over https with a CA made here,
// built on `jose` (oidc-provider 9 has no built-in token-exchange grant, only registerGrantType
// for one's own): it checks client_secret_basic, the grant type and the subject token's signature,
// issuer and audience, and signs a new token for the subject with the audience and scope asked
// for. Every hit is counted per path.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/upcred.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import * as jose from 'jose';

import * as H from './lib/harness.mjs';
import { openClient, KINDS, textOf } from './lib/clients.mjs';

const ISSUER = 'https://idp.test/';
const CI_TOKEN = H.randomToken();
const OPS_TOKEN = H.randomToken();
const PLAIN_TOKEN = H.randomToken();
const CI_UPSTREAM = `ci-${H.randomToken(8)}`; // through ${TG_T_CI_UPSTREAM}
const OWN = `own-${H.randomToken(8)}`;       // the upstream's own Authorization
const CLIENT_SECRET = `s:${H.randomToken(12)}`;
const TX_AUDIENCE = 'https://xchg.test/';

const cleanup = new H.Cleanup();
let dir, gw, recorder, idp, userKey, idpKey, idpJwks, confOpts;
const hits = {}; // token endpoint hits per path
const seen = []; // every request the recorder got: { path, headers, msg }
const revoked = new Set(); // Authorization values /rev refuses

// ---------------------------------------------------------------------------
// The peers

/** A legacy HTTP+SSE upstream (2024-11-05) at /legacy: GET /legacy/sse is the stream, whose
 * endpoint event names /legacy/messages; answers go on the stream. */
const legacyStreams = [];
function legacy(req, res, msg) {
  if (req.method === 'GET' && req.url === '/legacy/sse') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.write('event: endpoint\ndata: /legacy/messages?s=1\n\n');
    legacyStreams.push(res);
    return;
  }
  res.writeHead(202);
  res.end();
  if (!msg || msg.id === undefined) return;
  let result = {};
  if (msg.method === 'initialize') {
    result = { protocolVersion: '2024-11-05', capabilities: { tools: {} }, serverInfo: { name: 'legacy', version: '1' } };
  } else if (msg.method === 'tools/call') {
    result = { content: [{ type: 'text', text: String(req.headers.authorization ?? '') }] };
  }
  for (const st of legacyStreams) {
    if (!st.writableEnded) st.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: msg.id, result })}\n\n`);
  }
}

function startRecorder() {
  const srv = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      let msg;
      try { msg = JSON.parse(body); } catch { msg = undefined; }
      const nauth = req.rawHeaders.filter((h, i) => i % 2 === 0 && h.toLowerCase() === 'authorization').length;
      seen.push({ path: req.url, method: req.method, headers: req.headers, nauth, msg });
      if (req.url.startsWith('/legacy')) { legacy(req, res, msg); return; }
      // /rev refuses a revoked token, /deny every token, with 401 (tools/call only)
      if (msg?.method === 'tools/call' && (req.url === '/deny' || (req.url === '/rev' && revoked.has(req.headers.authorization)))) {
        res.writeHead(401, { 'www-authenticate': 'Bearer error="invalid_token"' });
        res.end();
        return;
      }
      if (req.method !== 'POST') { res.writeHead(405); res.end(); return; }
      if (!msg || msg.id === undefined) { res.writeHead(202); res.end(); return; }
      let result = {};
      if (msg.method === 'initialize') {
        result = { protocolVersion: msg.params?.protocolVersion ?? '2025-06-18', capabilities: { tools: {} },
          serverInfo: { name: 'recorder', version: '1' } };
      } else if (msg.method === 'tools/list') {
        result = { tools: [{ name: 'echo', inputSchema: { type: 'object' } }] };
      } else if (msg.method === 'tools/call') {
        result = { content: [{ type: 'text', text: String(req.headers.authorization ?? '') }] };
      }
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'rec-session' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result }));
    });
  });
  return new Promise((r) => srv.listen(0, '127.0.0.1', () => {
    cleanup.add(() => new Promise((c) => { srv.closeAllConnections(); srv.close(c); }));
    r({ url: (name) => `http://127.0.0.1:${srv.address().port}/${name}` });
  }));
}

function startIdp(certs) {
  const basic = 'Basic ' + Buffer.from(`${encodeURIComponent('tollgate')}:${encodeURIComponent(CLIENT_SECRET)}`).toString('base64');
  const srv = https.createServer({ cert: fs.readFileSync(certs.cert), key: fs.readFileSync(certs.key) }, (req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', async () => {
      const p = req.url;
      hits[p] = (hits[p] ?? 0) + 1;
      const send = (status, obj) => {
        res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
        res.end(JSON.stringify(obj));
      };
      if (req.method !== 'POST' || req.headers.authorization !== basic) return send(401, { error: 'invalid_client' });
      if (!String(req.headers['content-type']).startsWith('application/x-www-form-urlencoded')) return send(400, { error: 'invalid_request' });
      const f = new URLSearchParams(body);
      if (f.get('grant_type') !== 'urn:ietf:params:oauth:grant-type:token-exchange' ||
        f.get('subject_token_type') !== 'urn:ietf:params:oauth:token-type:access_token') return send(400, { error: 'invalid_request' });
      if (p === '/fail') return send(400, { error: 'invalid_grant', error_description: 'not for you' });
      if (p === '/slow') return; /* never answers */
      let sub;
      try {
        const { payload } = await jose.jwtVerify(f.get('subject_token'), userKey.publicKey, { issuer: ISSUER, audience: 'tollgate' });
        sub = payload.sub;
      } catch { return send(400, { error: 'invalid_grant' }); }
      const life = p === '/short' ? 2 : 300;
      const tok = await new jose.SignJWT({ scope: f.get('scope') ?? undefined, act: { sub: 'tollgate' } })
        .setProtectedHeader({ alg: 'ES256', kid: 'idp-1' })
        .setIssuer(ISSUER).setSubject(sub).setAudience(f.get('audience') ?? 'none')
        .setIssuedAt().setExpirationTime(`${life}s`).setJti(crypto.randomUUID())
        .sign(idpKey.privateKey);
      send(200, { access_token: tok, issued_token_type: 'urn:ietf:params:oauth:token-type:access_token',
        token_type: 'Bearer', expires_in: life, scope: f.get('scope') ?? undefined });
    });
  });
  return new Promise((r) => srv.listen(0, '127.0.0.1', () => {
    cleanup.add(() => new Promise((c) => { srv.closeAllConnections(); srv.close(c); }));
    r({ url: (p) => `https://127.0.0.1:${srv.address().port}${p}` });
  }));
}

/** A client JWT for sub, in grant `users`. */
const userToken = (sub) => new jose.SignJWT({ grp: 'users' })
  .setProtectedHeader({ alg: 'RS256', kid: 'user-1' })
  .setIssuer(ISSUER).setSubject(sub).setAudience('tollgate').setIssuedAt().setExpirationTime('5m')
  .setJti(crypto.randomUUID()).sign(userKey.privateKey);

const logs = () => ({ 'tollgate process': gw?.status(), 'tollgate stderr': gw?.stderr() });
const test = (name, fn) => it(name, H.withLogs(logs, fn));

/** A call of echo through `kind`: the Authorization the upstream saw, or the JSON-RPC error. */
async function echo(kind, upstream, token) {
  const c = await openClient(kind, { port: gw.plainPort, upstream, token });
  try {
    const a = await c.call('echo', {});
    return a.error ? { error: a.error } : { auth: textOf(a) };
  } finally {
    await c.close();
  }
}

/** No request the upstream got carries any of these secrets in any header. */
function neverSent(...secrets) {
  for (const r of seen) {
    assert.ok(r.nauth <= 1, `one Authorization header at most: ${r.path} got ${r.nauth}`);
    const all = JSON.stringify(r.headers);
    for (const s of secrets) assert.ok(!all.includes(s), `the upstream got a client credential on ${r.path}: ${all}`);
  }
}

// ---------------------------------------------------------------------------

before(async () => {
  H.requireNodeModules();
  dir = H.makeTempDir(cleanup);
  const certs = H.makeCerts(dir);
  userKey = await jose.generateKeyPair('RS256', { extractable: true });
  idpKey = await jose.generateKeyPair('ES256', { extractable: true });
  idpJwks = { keys: [{ ...(await jose.exportJWK(idpKey.publicKey)), kid: 'idp-1', alg: 'ES256' }] };
  const jwksFile = path.join(dir, 'jwks.json');
  fs.writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...(await jose.exportJWK(userKey.publicKey)), kid: 'user-1', alg: 'RS256' }] }));
  const secretFile = path.join(dir, 'client.secret');
  fs.writeFileSync(secretFile, CLIENT_SECRET + '\n', { mode: 0o600 });
  recorder = await startRecorder();
  idp = await startIdp(certs);
  const exchange = (p, extra = {}) => ({
    token_endpoint: idp.url(p), client_id: 'tollgate', client_secret_file: secretFile,
    audience: TX_AUDIENCE, scope: 'tools:call', ca: certs.caCert, ...extra,
  });
  const up = (name, extra = {}) => ({ name, url: recorder.url(name), protocol: '2025', ...extra });
  confOpts = {
    admin: true,
    jwt: [{ issuer: ISSUER, audience: 'tollgate', jwks_file: jwksFile, grant_claim: 'grp' }],
    grants: [
      { name: 'users', issuers: [ISSUER] },
      { name: 'ci', token_sha256: H.sha256hex(CI_TOKEN),
        upstream_headers: { hdrs: { Authorization: 'Bearer ${TG_T_CI_UPSTREAM}', 'X-Grant': 'ci' },
          xchg: { Authorization: 'Bearer ${TG_T_CI_UPSTREAM}' }, legacy: { Authorization: 'Bearer ${TG_T_CI_UPSTREAM}' } } },
      { name: 'ops', token_sha256: H.sha256hex(OPS_TOKEN), upstream_headers: { hdrs: { 'X-Grant': 'ops' } } },
      { name: 'plain', token_sha256: H.sha256hex(PLAIN_TOKEN) },
    ],
    upstreams: [
      up('hdrs', { headers: { Authorization: `Bearer ${OWN}`, 'X-Own': 'own' } }),
      up('xchg', { token_exchange: exchange('/token') }),
      up('short', { token_exchange: exchange('/short') }),
      up('fail', { token_exchange: exchange('/fail') }),
      up('noca', { token_exchange: exchange('/noca', { ca: undefined }) }),
      { name: 'legacy', url: recorder.url('legacy/sse'), transport: 'sse', headers: { Authorization: `Bearer ${OWN}` } },
      up('rev', { token_exchange: exchange('/rev') }),
      up('deny', { token_exchange: exchange('/deny') }),
    ],
  };
  const conf = H.writeConf(dir, confOpts);
  gw = await H.startTollgate(conf, { cleanup, admin: true, env: { TG_T_CI_UPSTREAM: CI_UPSTREAM } });
});

after(async () => {
  if (gw) {
    await gw.stop();
    gw.assertNoSanitizerReport();
  }
  await cleanup.run();
});

describe('grants[].upstream_headers', () => {
  for (const kind of KINDS) {
    test(`${kind}: each grant's requests carry its own headers; the client's token never goes upstream`, async () => {
      const from = seen.length;
      assert.deepEqual(await echo(kind, 'hdrs', CI_TOKEN), { auth: `Bearer ${CI_UPSTREAM}` });
      assert.deepEqual(await echo(kind, 'hdrs', OPS_TOKEN), { auth: `Bearer ${OWN}` }, 'no Authorization of its own: the upstream\'s');
      const jwt = await userToken('alice');
      assert.deepEqual(await echo(kind, 'hdrs', jwt), { auth: `Bearer ${OWN}` });
      const mine = seen.slice(from).filter((r) => r.msg?.method === 'tools/call');
      assert.equal(mine.length, 3);
      assert.equal(mine[0].headers['x-grant'], 'ci');
      assert.equal(mine[1].headers['x-grant'], 'ops');
      assert.equal(mine[2].headers['x-grant'], undefined);
      for (const r of mine) assert.equal(r.headers['x-own'], 'own', 'the upstream\'s other headers stay');
      // every request the grant's session made (initialize, notifications too) carried them
      for (const r of seen.slice(from)) {
        if (r.headers['x-grant'] === 'ci') assert.equal(r.headers.authorization, `Bearer ${CI_UPSTREAM}`);
      }
      neverSent(CI_TOKEN, OPS_TOKEN, jwt);
    });
  }

  test('a legacy HTTP+SSE upstream: the stream and every post carry the grant\'s headers', async () => {
    const from = seen.length;
    assert.deepEqual(await echo('streamable', 'legacy', CI_TOKEN), { auth: `Bearer ${CI_UPSTREAM}` });
    const mine = seen.slice(from).filter((r) => r.path.startsWith('/legacy'));
    assert.ok(mine.some((r) => r.method === 'GET'), 'the event stream was opened');
    for (const r of mine) assert.equal(r.headers.authorization, `Bearer ${CI_UPSTREAM}`, `${r.method} ${r.path}`);
    assert.deepEqual(await echo('ws', 'legacy', OPS_TOKEN), { auth: `Bearer ${OWN}` });
    neverSent(CI_TOKEN, OPS_TOKEN);
  });
});

describe('upstreams[].token_exchange (RFC 8693)', () => {
  test('two subjects get two tokens for the upstream; a cached token is reused, the client\'s never sent', async () => {
    const before = hits['/token'] ?? 0;
    const alice = await userToken('alice');
    const bob = await userToken('bob');
    const a1 = await echo('streamable', 'xchg', alice);
    const b1 = await echo('streamable', 'xchg', bob);
    assert.ok(a1.auth && b1.auth, JSON.stringify({ a1, b1 }));
    assert.notEqual(a1.auth, b1.auth);
    const ta = jose.decodeJwt(a1.auth.replace(/^Bearer /, ''));
    const tb = jose.decodeJwt(b1.auth.replace(/^Bearer /, ''));
    assert.equal(ta.sub, 'alice');
    assert.equal(tb.sub, 'bob');
    assert.equal(ta.aud, TX_AUDIENCE);
    assert.equal(ta.scope, 'tools:call');
    await jose.jwtVerify(a1.auth.replace(/^Bearer /, ''), jose.createLocalJWKSet(idpJwks), { audience: TX_AUDIENCE });
    assert.equal((hits['/token'] ?? 0) - before, 2, 'one exchange per subject (initialize and call share it)');
    // alice again, with another JWT and on every transport: the cached token, no new exchange
    for (const kind of KINDS) {
      const again = await echo(kind, 'xchg', await userToken('alice'));
      assert.equal(again.auth, a1.auth, `${kind}: the cached token`);
    }
    assert.equal((hits['/token'] ?? 0) - before, 2);
    const m = H.parseMetrics(await (await fetch(`http://127.0.0.1:${gw.adminPort}/metrics`)).text());
    assert.ok(m['tollgate_token_exchanges_total{result="ok"}'] >= 2, JSON.stringify(m));
    assert.ok(m.tollgate_token_exchange_hits_total >= 4);
    assert.ok(m.tollgate_token_exchange_cached >= 2);
    neverSent(alice, bob);
  });

  test('concurrent calls of one subject share one exchange', async () => {
    const before = hits['/token'] ?? 0;
    const carol = await userToken('carol');
    const all = await Promise.all(Array.from({ length: 6 }, () => echo('ws', 'xchg', carol)));
    for (const r of all) assert.equal(r.auth, all[0].auth, JSON.stringify(r));
    assert.equal((hits['/token'] ?? 0) - before, 1);
  });

  test('a token is exchanged again once it nears its expiry', async () => {
    const before = hits['/short'] ?? 0;
    const dave = await userToken('dave');
    const first = await echo('streamable', 'short', dave);
    assert.equal((await echo('streamable', 'short', dave)).auth, first.auth, 'reused while fresh');
    assert.equal((hits['/short'] ?? 0) - before, 1);
    const t0 = Date.now();
    // expires_in 2: fresh for 1.5 s (a quarter of its life is the margin), then exchanged again
    let next;
    await H.waitUntil(async () => {
      next = await echo('streamable', 'short', dave);
      return next.auth !== first.auth;
    }, { timeout: H.scaled(10000), interval: 200, what: 'a new token after expiry' });
    assert.ok(Date.now() - t0 >= 1000, 'not before the margin');
    assert.equal((hits['/short'] ?? 0) - before, 2);
    assert.equal(jose.decodeJwt(next.auth.replace(/^Bearer /, '')).sub, 'dave');
  });

  test('a failed exchange answers -32004 with the reason and nothing reaches the upstream', async () => {
    const eve = await userToken('eve');
    for (const kind of KINDS) {
      const from = seen.length;
      const r = await echo(kind, 'fail', eve).catch((e) => ({ thrown: e }));
      const err = r.error ?? r.thrown;
      assert.ok(err, `${kind}: refused: ${JSON.stringify(r)}`);
      if (r.error) {
        assert.equal(r.error.code, -32004);
        assert.match(r.error.message, /token exchange failed: the endpoint answered HTTP 400 \(invalid_grant\)/);
        assert.ok(!r.error.message.includes('not for you'), 'the endpoint\'s description is not relayed');
      }
      assert.equal(seen.slice(from).filter((x) => x.path === '/fail').length, 0, `${kind}: the upstream saw nothing`);
    }
    assert.ok(hits['/fail'] >= 1);
  });

  for (const kind of KINDS) {
    test(`${kind}: a token the upstream refuses (401) is dropped at once; the call goes again with a new one`, async () => {
      const sub = `rev-${kind}`;
      const before = hits['/rev'] ?? 0;
      const first = await echo(kind, 'rev', await userToken(sub));
      assert.ok(first.auth, JSON.stringify(first));
      assert.equal((await echo(kind, 'rev', await userToken(sub))).auth, first.auth, 'cached');
      assert.equal((hits['/rev'] ?? 0) - before, 1);
      revoked.add(first.auth);
      const from = seen.length;
      const again = await echo(kind, 'rev', await userToken(sub));
      assert.ok(again.auth && again.auth !== first.auth, JSON.stringify(again));
      assert.equal(jose.decodeJwt(again.auth.replace(/^Bearer /, '')).sub, sub);
      assert.equal((hits['/rev'] ?? 0) - before, 2, 'one new exchange');
      const calls = seen.slice(from).filter((r) => r.path === '/rev' && r.msg?.method === 'tools/call');
      assert.deepEqual(calls.map((r) => r.headers.authorization), [first.auth, again.auth]);
      // the new token is the cached one now
      assert.equal((await echo(kind, 'rev', await userToken(sub))).auth, again.auth);
      assert.equal((hits['/rev'] ?? 0) - before, 2);
    });
  }

  test('an upstream that refuses every token: -32004 after exactly two attempts, on every transport', async () => {
    for (const kind of KINDS) {
      const before = hits['/deny'] ?? 0;
      const from = seen.length;
      const r = await echo(kind, 'deny', await userToken(`deny-${kind}`));
      assert.ok(r.error, `${kind}: ${JSON.stringify(r)}`);
      assert.equal(r.error.code, -32004);
      assert.match(r.error.message, /upstream deny answered HTTP 401/);
      assert.equal(seen.slice(from).filter((x) => x.path === '/deny' && x.msg?.method === 'tools/call').length, 2,
        `${kind}: two attempts`);
      assert.equal((hits['/deny'] ?? 0) - before, 2, `${kind}: one exchange per attempt`);
    }
    const m = H.parseMetrics(await (await fetch(`http://127.0.0.1:${gw.adminPort}/metrics`)).text());
    assert.ok(m.tollgate_token_exchange_refused_total >= 12, JSON.stringify(m));
  });

  test('the token endpoint\'s certificate is checked: without its CA the exchange fails', async () => {
    const from = seen.length;
    const r = await echo('streamable', 'noca', await userToken('frank')).catch((e) => ({ thrown: e }));
    assert.ok(r.error || r.thrown, JSON.stringify(r));
    if (r.error) {
      assert.equal(r.error.code, -32004);
      assert.match(r.error.message, /token exchange failed/);
    }
    assert.equal(hits['/noca'] ?? 0, 0, 'no request reached the endpoint');
    assert.equal(seen.slice(from).filter((x) => x.path === '/noca').length, 0);
  });

  test('a static-token grant: its upstream_headers if it has them, else -32004', async () => {
    const ci = await echo('streamable', 'xchg', CI_TOKEN);
    assert.deepEqual(ci, { auth: `Bearer ${CI_UPSTREAM}` });
    const from = seen.length;
    const plain = await echo('streamable', 'xchg', PLAIN_TOKEN).catch((e) => ({ thrown: e }));
    const e = plain.error ?? plain.thrown;
    assert.ok(e, JSON.stringify(plain));
    if (plain.error) {
      assert.equal(plain.error.code, -32004);
      assert.match(plain.error.message, /credential is not a JWT/);
    }
    // (ci's session may still be ending: its DELETE comes when it comes)
    assert.equal(seen.slice(from).filter((x) => x.path === '/xchg' && x.method === 'POST').length, 0);
    neverSent(CI_TOKEN, PLAIN_TOKEN);
  });
});

describe('reload', () => {
  test('the next call carries what the new configuration says: new headers, a new exchange for a new audience', async () => {
    confOpts.grants[1].upstream_headers.hdrs['X-Grant'] = 'ci-2';
    confOpts.upstreams[1].token_exchange.audience = 'https://xchg2.test/';
    H.writeConf(dir, confOpts);
    const n = (gw.stderr().match(/configuration reloaded/g) ?? []).length;
    process.kill(gw.proc.pid, 'SIGHUP');
    await H.waitUntil(() => (gw.stderr().match(/configuration reloaded/g) ?? []).length > n || gw.exit,
      { timeout: H.scaled(5000), what: 'the reload in the log' });
    const from = seen.length;
    assert.deepEqual(await echo('streamable', 'hdrs', CI_TOKEN), { auth: `Bearer ${CI_UPSTREAM}` });
    const calls = seen.slice(from).filter((r) => r.msg?.method === 'tools/call');
    assert.equal(calls.at(-1).headers['x-grant'], 'ci-2');
    const before = hits['/token'] ?? 0;
    const r = await echo('streamable', 'xchg', await userToken('alice'));
    assert.equal(jose.decodeJwt(r.auth.replace(/^Bearer /, '')).aud, 'https://xchg2.test/');
    assert.equal((hits['/token'] ?? 0) - before, 1, 'the old audience\'s token is not used');
  });
});

describe('shutdown', () => {
  test('a gateway stopped while calls wait for an exchange answers them and exits cleanly', async () => {
    const o = { ...confOpts, file: 'slow.conf', admin: false, grants: [confOpts.grants[0]],
      upstreams: [{ ...confOpts.upstreams[1], name: 'slow', token_exchange: { ...confOpts.upstreams[1].token_exchange,
        token_endpoint: idp.url('/slow') } }] };
    const g = await H.startTollgate(H.writeConf(dir, o), { cleanup });
    const tok = await userToken('gina');
    // the initialize waits for the exchange, which never ends
    const pending = H.connectClient(`http://127.0.0.1:${g.plainPort}/slow/mcp`, { headers: { Authorization: `Bearer ${tok}` }, cleanup })
      .then((c) => ({ c }), (err) => ({ err }));
    await H.waitUntil(() => (hits['/slow'] ?? 0) >= 1, { what: 'the exchange reached the endpoint' });
    const r = await g.stop();
    assert.equal(r.code, 0, `exit ${JSON.stringify(r)}\n${g.stderr().slice(-6000)}`);
    g.assertNoSanitizerReport();
    const p = await pending;
    assert.ok(p.err, 'the waiting initialize did not succeed');
  });
});
