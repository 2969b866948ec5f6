// Scope step-up (MCP 2025-11-25 authorization) and RFC 8707 resource audiences through tollgate,
// with the CoWork OS stand-in behind it (initialize = "local").
//
// The policy requires the scope "deploy" for echo. A token without it still sees echo in
// tools/list, and calling it gets:
//   - Streamable HTTP (2025 session and 2026-07-28 stateless): HTTP 403 with
//     WWW-Authenticate: Bearer error="insufficient_scope", scope="deploy", resource_metadata="…"
//     and the JSON-RPC error -32005 carrying the same;
//   - WebSocket and legacy SSE, where no status can change: the JSON-RPC error -32005 with
//     error.data = { error, scope, resource_metadata, www_authenticate, tool }.
// A token with the scope works. The issuer has no jwt[].audience: a token's aud must name the
// route's resource (public_url + /NAME/mcp); another route's is refused. The RFC 9728 metadata
// lists the issuer and the scopes the route's policy mentions. Last, a real OpenID provider
// (oidc-provider, test/fixtures/oidc/) issues client_credentials JWTs for the route's resource
// indicator, with and without the scope, and they are used through tollgate.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/scopes.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import * as H from './lib/harness.mjs';
import { makeIdpKeys, startIdp } from './lib/oidc.mjs';

H.requireNodeModules();
const { default: WebSocket } = await import('ws');

const ISSUER = 'https://idp.test/';
const PUBLIC_URL = 'https://gw.example';
const RESOURCE = `${PUBLIC_URL}/cowork-os/mcp`;
const METADATA = `${PUBLIC_URL}/.well-known/oauth-protected-resource/cowork-os/mcp`;
const CHALLENGE = `Bearer error="insufficient_scope", scope="deploy", resource_metadata="${METADATA}"`;
const UPSTREAM_TOKEN = H.randomToken();
const CI_TOKEN = H.randomToken(); // a static token whose grant has scopes = [ "deploy" ]
const PLAIN_TOKEN = H.randomToken(); // a static token whose grant has none
const MODERN = '2026-07-28';

const cleanup = new H.Cleanup();
let dir;
let standin;
let gw;
let fetchFn;
let rsa;

const b64u = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');

/** An RS256 token for alice; claims override the defaults (undefined removes one). */
function token(claims = {}) {
  const now = Math.floor(Date.now() / 1000);
  const payload = { iss: ISSUER, aud: RESOURCE, sub: 'alice', iat: now, exp: now + 300, ...claims };
  for (const k of Object.keys(payload)) if (payload[k] === undefined) delete payload[k];
  const input = `${b64u({ alg: 'RS256', typ: 'JWT', kid: 'k1' })}.${b64u(payload)}`;
  return `${input}.${crypto.sign('sha256', Buffer.from(input), rsa.privateKey).toString('base64url')}`;
}
const bearer = (t) => ({ Authorization: `Bearer ${t}` });

const logs = () => ({ 'tollgate stderr': gw?.stderr(), 'stand-in output': standin?.output() });
const test = (name, fn) => it(name, H.withLogs(logs, fn));
const base = () => `http://127.0.0.1:${gw.plainPort}`;
const echoCalls = (text) => standin.records().filter((x) => x.msg?.method === 'tools/call' &&
  x.msg.params?.arguments?.text === text).length;
const callEcho = (id, text) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'echo', arguments: { text } } });

/** The -32005 error a refused call gets, with its data, wherever it comes. */
function assertScopeError(msg, id) {
  assert.equal(msg?.id, id, JSON.stringify(msg));
  assert.equal(msg?.error?.code, -32005, JSON.stringify(msg));
  assert.match(msg.error.message, /scope/i);
  assert.deepEqual(msg.error.data, {
    error: 'insufficient_scope', scope: 'deploy', resource_metadata: METADATA, www_authenticate: CHALLENGE, tool: 'echo',
  });
}

before(async () => {
  dir = H.makeTempDir(cleanup);
  rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwksFile = path.join(dir, 'jwks.json');
  fs.writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...rsa.publicKey.export({ format: 'jwk' }), kid: 'k1', alg: 'RS256', use: 'sig' }] }));
  const policy = path.join(dir, 'deploy.json');
  fs.writeFileSync(policy, JSON.stringify({
    version: '1', default: 'deny', tools: { echo: { action: 'allow', scopes: ['deploy'] }, slow: { action: 'allow' } },
  }));
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  const headers = { Authorization: `Bearer ${UPSTREAM_TOKEN}` };
  gw = await H.startTollgate(H.writeConf(dir, {
    listeners: [{}],
    public_url: PUBLIC_URL,
    jwt: [{ issuer: ISSUER, jwks_file: jwksFile }], // no audience: aud must name the route's resource
    grants: [
      { name: 'alice', issuers: [ISSUER] },
      { name: 'ci', token_sha256: H.sha256hex(CI_TOKEN), scopes: ['deploy'] },
      { name: 'plain', token_sha256: H.sha256hex(PLAIN_TOKEN) },
    ],
    upstreams: [
      { name: 'cowork-os', url: standin.url, default: true, initialize: 'local', headers, policy },
      { name: 'second', url: standin.url, initialize: 'local', headers, policy },
    ],
  }), { cleanup, listeners: 1 });
  fetchFn = H.makeFetch({ cleanup });
});

after(() => cleanup.run());

describe('Streamable HTTP: 403 insufficient_scope, then a token with the scope', () => {
  test('2025 session: the tool is listed, the call gets 403 and the exact WWW-Authenticate, nothing is forwarded', async () => {
    const url = `${base()}/cowork-os/mcp`;
    const s = await H.rawInitialize(fetchFn, url, bearer(token({ scope: 'read' })));
    const list = await H.postRaw(fetchFn, url, { jsonrpc: '2.0', id: 2, method: 'tools/list' }, s.headers);
    assert.equal(list.status, 200, list.text);
    assert.deepEqual(list.messages[0].result.tools.map((t) => t.name).sort(), ['echo', 'slow']);
    const r = await H.postRaw(fetchFn, url, callEcho(3, 'no scope'), s.headers);
    assert.equal(r.status, 403, r.text);
    assert.equal(r.headers.get('www-authenticate'), CHALLENGE);
    assertScopeError(r.messages[0], 3);
    assert.equal(echoCalls('no scope'), 0, 'a refused call never reaches the upstream');
    // stepped up: a token with the scope carries on the same session
    const ok = await H.postRaw(fetchFn, url, callEcho(4, 'stepped up'),
      { ...s.headers, ...bearer(token({ scope: 'read deploy' })) });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(H.resultText(ok.messages[0].result), 'stepped up');
  });

  test('the SDK client sees the 403 on the call, and works with a token whose scp holds the scope', async () => {
    const { StreamableHTTPError } = await H.loadSdk();
    const url = `${base()}/cowork-os/mcp`;
    const c = await H.connectClient(url, { fetch: fetchFn, headers: bearer(token()), cleanup });
    assert.ok((await c.client.listTools()).tools.some((t) => t.name === 'echo'), 'echo is listed without the scope');
    let err;
    try { await c.client.callTool({ name: 'echo', arguments: { text: 'sdk' } }); } catch (e) { err = e; }
    assert.ok(err instanceof StreamableHTTPError || /403|scope/i.test(String(err)), `refused: ${err}`);
    await c.close();
    const d = await H.connectClient(url, { fetch: fetchFn, headers: bearer(token({ scp: ['deploy'] })), cleanup });
    assert.equal(H.resultText(await d.client.callTool({ name: 'echo', arguments: { text: 'sdk ok' } })), 'sdk ok');
    await d.close();
  });

  test('2026-07-28 stateless request: 403 with the same challenge; with the scope it runs', async () => {
    const meta = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };
    const h = { 'MCP-Protocol-Version': MODERN, 'Mcp-Method': 'tools/call', 'Mcp-Name': 'echo' };
    const body = (text) => ({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'echo', arguments: { text }, _meta: meta } });
    const url = `${base()}/cowork-os/mcp`;
    const r = await H.postRaw(fetchFn, url, body('modern no'), { ...h, ...bearer(token()) });
    assert.equal(r.status, 403, r.text);
    assert.equal(r.headers.get('www-authenticate'), CHALLENGE);
    assertScopeError(r.messages[0], 9);
    const ok = await H.postRaw(fetchFn, url, body('modern yes'), { ...h, ...bearer(token({ scope: 'deploy' })) });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(H.resultText(ok.messages.find((m) => m.id === 9)?.result), 'modern yes');
  });

  test('static tokens: a grant with scopes = [ "deploy" ] may call; one without gets 403', async () => {
    const url = `${base()}/cowork-os/mcp`;
    const ci = await H.rawInitialize(fetchFn, url, bearer(CI_TOKEN));
    const ok = await H.postRaw(fetchFn, url, callEcho(5, 'ci'), ci.headers);
    assert.equal(H.resultText(ok.messages[0]?.result), 'ci', ok.text);
    const plain = await H.rawInitialize(fetchFn, url, bearer(PLAIN_TOKEN));
    const r = await H.postRaw(fetchFn, url, callEcho(6, 'plain'), plain.headers);
    assert.equal(r.status, 403, r.text);
    assert.equal(r.headers.get('www-authenticate'), CHALLENGE);
  });
});

describe('channels: a JSON-RPC error -32005 with the challenge in error.data', () => {
  test('WebSocket: refused without the scope (the tool still listed), served with it', async () => {
    const run = (tok) => new Promise((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${gw.plainPort}/cowork-os/ws`, ['mcp'], { headers: bearer(tok), perMessageDeflate: false });
      const got = new Map();
      ws.on('error', reject);
      ws.on('message', (d) => {
        const m = JSON.parse(d.toString());
        got.set(m.id, m);
        if (m.id === 'i') {
          ws.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
          ws.send(JSON.stringify({ jsonrpc: '2.0', id: 'l', method: 'tools/list' }));
        } else if (m.id === 'l') {
          ws.send(JSON.stringify(callEcho('c', 'over ws')));
        } else if (m.id === 'c') {
          ws.close();
          resolve(got);
        }
      });
      ws.on('open', () => ws.send(JSON.stringify(H.initializeBody('i'))));
    });
    const no = await run(token({ scope: 'read' }));
    assert.ok(no.get('l').result.tools.some((t) => t.name === 'echo'), 'echo is listed');
    assertScopeError(no.get('c'), 'c');
    assert.equal(echoCalls('over ws'), 0);
    const yes = await run(token({ scope: 'deploy' }));
    assert.equal(H.resultText(yes.get('c').result), 'over ws');
  });

  test('legacy SSE: the POST is accepted and the stream carries the error; a POST with a stepped-up token works', async () => {
    const first = token();
    const events = [];
    let wake = () => {};
    const next = async (pred) => {
      for (;;) {
        const i = events.findIndex(pred);
        if (i >= 0) return events.splice(i, 1)[0];
        await H.within(new Promise((r) => { wake = r; }), 5000, 'the next SSE event');
      }
    };
    const req = http.get(`${base()}/cowork-os/sse`, { headers: { ...bearer(first), accept: 'text/event-stream' } });
    cleanup.add(() => req.destroy());
    req.on('response', (res) => {
      res.setEncoding('utf8');
      let pending = '';
      res.on('data', (d) => {
        pending += d;
        let m;
        while ((m = /\r?\n\r?\n/.exec(pending))) {
          const block = pending.slice(0, m.index);
          pending = pending.slice(m.index + m[0].length);
          const ev = { event: 'message', data: '' };
          for (const line of block.split(/\r?\n/)) {
            if (line.startsWith('event:')) ev.event = line.slice(6).trim();
            else if (line.startsWith('data:')) ev.data += line.slice(5).trim();
          }
          if (ev.data) events.push(ev);
        }
        wake();
      });
    });
    const endpoint = (await next((e) => e.event === 'endpoint')).data;
    const post = async (body, tok = first) => {
      const r = await fetchFn(`${base()}${endpoint}`, {
        method: 'POST', headers: { 'content-type': 'application/json', ...bearer(tok) }, body: JSON.stringify(body),
      });
      await r.text();
      return r.status;
    };
    const msg = async (id) => JSON.parse((await next((e) => e.event === 'message' && JSON.parse(e.data).id === id)).data);
    assert.equal(await post(H.initializeBody('i', '2024-11-05')), 202);
    await msg('i');
    assert.equal(await post({ jsonrpc: '2.0', method: 'notifications/initialized' }), 202);
    assert.equal(await post(callEcho('c', 'over sse')), 202);
    assertScopeError(await msg('c'), 'c');
    assert.equal(echoCalls('over sse'), 0);
    assert.equal(await post(callEcho('d', 'sse stepped up'), token({ scope: 'deploy' })), 202);
    assert.equal(H.resultText((await msg('d')).result), 'sse stepped up');
    req.destroy();
  });
});

describe('RFC 8707: aud names the route\'s resource', () => {
  test('aud = this route\'s resource URL is accepted; another route\'s, or none, is refused with 401', async () => {
    const url = `${base()}/cowork-os/mcp`;
    const ok = await H.postRaw(fetchFn, url, H.initializeBody(1), bearer(token({ aud: [RESOURCE, 'x'] })));
    assert.equal(ok.status, 200, ok.text);
    for (const aud of [`${PUBLIC_URL}/second/mcp`, 'tollgate', `${RESOURCE}/`, undefined]) {
      const r = await H.postRaw(fetchFn, url, H.initializeBody(1), bearer(token({ aud })));
      assert.equal(r.status, 401, `aud ${aud}: ${r.text}`);
      assert.match(r.headers.get('www-authenticate'), /error="invalid_token", error_description="wrong audience"/);
      assert.match(r.headers.get('www-authenticate'), new RegExp(`resource_metadata="${METADATA}"`));
    }
    // the other route takes its own, on every transport path of it (its resource is /second/mcp)
    const second = await H.postRaw(fetchFn, `${base()}/second/mcp`, H.initializeBody(1),
      bearer(token({ aud: `${PUBLIC_URL}/second/mcp` })));
    assert.equal(second.status, 200, second.text);
    const sse = await fetchFn(`${base()}/second/sse`, { headers: { ...bearer(token()), accept: 'text/event-stream' } });
    assert.equal(sse.status, 401, 'the cowork-os resource on /second/sse');
    await sse.body?.cancel();
  });
});

describe('RFC 9728 metadata', () => {
  test('lists the issuer and the scopes the route\'s policy mentions', async () => {
    const r = await fetchFn(`${base()}/.well-known/oauth-protected-resource/cowork-os/mcp`);
    assert.equal(r.status, 200);
    const m = await r.json();
    assert.equal(m.resource, RESOURCE);
    assert.deepEqual(m.authorization_servers, [ISSUER]);
    assert.deepEqual(m.scopes_supported, ['deploy']);
  });
});

describe('a real OpenID provider (oidc-provider): client_credentials tokens for the resource indicator', () => {
  test('a token for the route without "deploy" gets 403 on echo; one asked with scope=deploy calls it', async () => {
    const odir = H.makeTempDir(cleanup, 'tollgate-oidc-');
    const certs = H.makeCerts(odir);
    const keys = makeIdpKeys('k1');
    const idp = await startIdp({ cleanup, dir: odir, certs, keys, resources: { [RESOURCE]: { scope: 'deploy read' } } });
    cleanup.add(() => idp.stop());
    // tollgate reads the provider's public keys from a file (the private members left out)
    const pub = { keys: keys.keys.map(({ d, p, q, dp, dq, qi, ...k }) => k) };
    const jwksFile = path.join(odir, 'idp-public.json');
    fs.writeFileSync(jwksFile, JSON.stringify(pub));
    const policy = path.join(odir, 'deploy.json');
    fs.writeFileSync(policy, JSON.stringify({ version: '1', default: 'deny', tools: { echo: { scopes: ['deploy'] } } }));
    // client_credentials: the token's sub is the client's id, which names the grant
    const g = await H.startTollgate(H.writeConf(odir, {
      listeners: [{}],
      public_url: PUBLIC_URL,
      jwt: [{ issuer: idp.issuer, jwks_file: jwksFile }],
      grants: [{ name: 'tollgate-test', issuers: [idp.issuer] }],
      upstreams: [{ name: 'cowork-os', url: standin.url, default: true, initialize: 'local',
        headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` }, policy }],
    }), { cleanup, listeners: 1 });
    const url = `http://127.0.0.1:${g.plainPort}/cowork-os/mcp`;
    const read = await idp.token({ resource: RESOURCE, scope: 'read' });
    const claims = JSON.parse(Buffer.from(read.split('.')[1], 'base64url'));
    assert.equal(claims.aud, RESOURCE, 'the provider made the token for the resource indicator');
    assert.equal(claims.scope, 'read');
    const s = await H.rawInitialize(fetchFn, url, bearer(read));
    const r = await H.postRaw(fetchFn, url, callEcho(1, 'idp read'), s.headers);
    assert.equal(r.status, 403, r.text);
    assert.equal(r.headers.get('www-authenticate'), CHALLENGE);
    const deploy = await idp.token({ resource: RESOURCE, scope: 'deploy' });
    const ok = await H.postRaw(fetchFn, url, callEcho(2, 'idp deploy'), { ...s.headers, ...bearer(deploy) });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(H.resultText(ok.messages[0].result), 'idp deploy');
    assert.equal(echoCalls('idp read'), 0);
    assert.equal(echoCalls('idp deploy'), 1);
  });
});
