// The official SDK client's OAuth flow, end to end, against a real OpenID provider
// (oidc-provider, test/fixtures/oidc/idp.mjs) through tollgate:
//
//   client ──POST /mcp──▶ tollgate: 401, WWW-Authenticate resource_metadata=…
//   client ──GET RFC 9728 metadata──▶ tollgate: resource, authorization_servers = [the IdP]
//   client ──RFC 8414 / OpenID discovery, then client_credentials with resource=…──▶ IdP
//   client ──POST /mcp, Bearer <JWT for that resource>──▶ tollgate ──▶ CoWork OS stand-in
//
// tollgate learns the IdP's keys by discovery (jwt[].discovery) over https with the test's CA,
// checks aud against the route's resource (RFC 8707: public_url + /mcp, no jwt[].audience), and
// counts each client (the token's sub) apart inside one grant. Nothing is mocked: the SDK's own
// ClientCredentialsProvider drives the flow.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/oauth-sdk.test.mjs

import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import * as H from './lib/harness.mjs';
import { makeIdpKeys, startIdp } from './lib/oidc.mjs';

const cleanup = new H.Cleanup();
let dir, certs, idp, gw, port, fetchFn, standin;
const GRANT = 'agents';

describe('the SDK client authorizes through tollgate against a real OpenID provider', () => {
  before(async () => {
    H.requireNodeModules();
    dir = H.makeTempDir(cleanup, 'tollgate-oauth-sdk-');
    certs = H.makeCerts(dir);
    port = await H.freePort();
    const resource = `http://127.0.0.1:${port}/mcp`;
    idp = await startIdp({
      cleanup, dir, certs, keys: makeIdpKeys('sdk'),
      clients: [
        { client_id: 'agent-a', client_secret: 'agent-a-secret', scope: 'tools' },
        { client_id: 'agent-b', client_secret: 'agent-b-secret', scope: 'tools' },
      ],
      resources: { [resource]: { scope: 'tools' }, [`http://127.0.0.1:${port}/other/mcp`]: { scope: 'tools' } },
    });
    const UPSTREAM_TOKEN = H.randomToken();
    standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN });
    const policy = path.join(dir, 'policy.json');
    // Each client may call echo twice: a per-subject limit, so the two clients count apart.
    fs.writeFileSync(policy, JSON.stringify({
      version: '1', default: 'deny',
      tools: { echo: { limits: [{ counter: 'echo_per_client', window: 'hour', max: 2, scope: 'subject' }] } },
    }));
    const conf = H.writeConf(dir, {
      listeners: [{ port }],
      public_url: `http://127.0.0.1:${port}`,
      jwt: [{ issuer: idp.issuer, discovery: true, ca: certs.caCert, grant: GRANT }],
      grants: [{ name: GRANT, issuers: [idp.issuer] }],
      upstreams: [
        { name: 'cowork', default: true, url: standin.url, initialize: 'local', headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` }, policy },
        { name: 'other', url: standin.url, initialize: 'local', headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` }, policy },
      ],
    });
    gw = await H.startTollgate(conf, { cleanup });
    fetchFn = H.makeFetch({ ca: certs.caPem, cleanup });
  });
  after(() => cleanup.run());

  async function connect(clientId) {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    const { ClientCredentialsProvider } = await import('@modelcontextprotocol/sdk/client/auth-extensions.js');
    const authProvider = new ClientCredentialsProvider({
      clientId, clientSecret: `${clientId}-secret`, expectedIssuer: idp.issuer, scope: 'tools',
    });
    const url = new URL(`http://127.0.0.1:${port}/mcp`);
    const connectOnce = async () => {
      const transport = new StreamableHTTPClientTransport(url, { authProvider, fetch: fetchFn });
      const client = new Client({ name: clientId, version: '1.0.0' }, { capabilities: {} });
      await client.connect(transport);
      return client;
    };
    let client;
    try {
      client = await connectOnce();
    } catch (e) {
      // The SDK answers a 401 by running the flow; the connect that met it ends with
      // UnauthorizedError once the tokens are saved, and the next connect carries them.
      if (!/Unauthorized/i.test(`${e?.name} ${e?.message}`)) throw e;
      client = await connectOnce();
    }
    cleanup.add(() => client.close().catch(() => {}));
    return { client, authProvider };
  }

  test('discovery, client_credentials for the route\'s resource, and a tool call', async () => {
    const since = idp.requests.length;
    const { client, authProvider } = await connect('agent-a');
    const tokens = authProvider.tokens();
    assert.ok(tokens?.access_token, 'the SDK holds an access token');
    const claims = JSON.parse(Buffer.from(tokens.access_token.split('.')[1], 'base64url').toString());
    assert.equal(claims.aud, `http://127.0.0.1:${port}/mcp`, 'the token is for the route tollgate named as resource');
    assert.equal(claims.sub, 'agent-a');
    // the client went to the IdP tollgate's metadata named, for a token
    assert.ok(idp.requests.slice(since).some((r) => r.method === 'POST' && /token/.test(r.path)), 'a token request reached the IdP');
    const r = await client.callTool({ name: 'echo', arguments: { text: 'hello through oauth' } });
    assert.equal(r.isError ?? false, false);
    assert.match(H.resultText(r), /hello through oauth/);
  });

  test('two clients of one grant are counted apart (scope: subject)', async () => {
    const a = (await connect('agent-a')).client; // a's first call was in the test above
    const b = (await connect('agent-b')).client;
    const r2 = await a.callTool({ name: 'echo', arguments: { text: 'a2' } });
    assert.equal(r2.isError ?? false, false);
    await assert.rejects(a.callTool({ name: 'echo', arguments: { text: 'a3' } }), /rate|limit/i,
      'agent-a has spent its two calls');
    for (const t of ['b1', 'b2']) {
      const r = await b.callTool({ name: 'echo', arguments: { text: t } });
      assert.equal(r.isError ?? false, false, `agent-b's own budget: ${t}`);
    }
  });

  test('a token the IdP issued for another route is refused on this one (RFC 8707 audience)', async () => {
    const post = (route, token) => fetchFn(`http://127.0.0.1:${port}${route}`, {
      method: 'POST',
      headers: { ...H.MCP_HEADERS, authorization: `Bearer ${token}` },
      body: JSON.stringify(H.initializeBody(1)),
    });
    const t = await idp.tokenResponse({ resource: `http://127.0.0.1:${port}/other/mcp`, client_id: 'agent-a', client_secret: 'agent-a-secret', scope: 'tools' });
    assert.ok(t.access_token, JSON.stringify(t));
    const wrong = await post('/mcp', t.access_token);
    await wrong.text();
    assert.equal(wrong.status, 401, 'a token for /other/mcp is not one for /mcp');
    assert.match(wrong.headers.get('www-authenticate') ?? '', /wrong audience/);
    const right = await post('/other/mcp', t.access_token);
    await right.text();
    assert.equal(right.status, 200, 'and it is one for /other/mcp');
  });
});
