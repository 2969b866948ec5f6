// The official MCP TypeScript SDK client (StreamableHTTPClientTransport) through
// tollgate, plain and TLS, to @modelcontextprotocol/server-everything in
// streamableHttp mode.
//
//   node --test test/interop/everything.test.mjs
//   INTEROP_DIRECT=1 node --test test/interop/everything.test.mjs   # same client logic straight
//                                                                   # at server-everything (no gateway)

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import tls from 'node:tls';
import * as H from './lib/harness.mjs';

H.requireNodeModules(); // fails the file with 'npm ci --prefix test' when the packages are missing

// INTEROP_DIRECT=1 is a mode switch, not a way to pass: the same client logic against
// server-everything itself (a check of the tests, not of the gateway), where the gateway-only
// tests have nothing to test and are skipped. The gateway run (ctest sets TOLLGATE_BIN) refuses
// the switch, so it can never skip them.
const DIRECT = !['', '0', undefined].includes(process.env.INTEROP_DIRECT);
if (DIRECT && process.env.TOLLGATE_BIN) {
  throw new Error('INTEROP_DIRECT is set together with TOLLGATE_BIN: a run of the gateway would skip its gateway-only ' +
    'checks. Unset INTEROP_DIRECT to test the gateway, or TOLLGATE_BIN to check the tests against server-everything alone.');
}
const gatewayOnly = DIRECT ? 'INTEROP_DIRECT: no gateway in this run' : false;

const cleanup = new H.Cleanup();
let ev; // server-everything
let gw; // tollgate
let certs;
let fetchFn; // fetch that trusts the throwaway CA
let deadPort;

const logs = () => ({ 'tollgate process': gw?.status(), 'tollgate stderr': gw?.stderr(), 'server-everything output': ev?.output() });
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

before(async () => {
  const { types } = await H.loadSdk();
  void types;
  const dir = H.makeTempDir(cleanup);
  certs = H.makeCerts(dir);
  fetchFn = H.makeFetch({ ca: certs.caPem, cleanup });
  ev = await H.startEverything({ cleanup });
  if (DIRECT) return;
  deadPort = await H.freePort(); // nothing listens there
  const conf = H.writeConf(dir, {
    listeners: [{}, { tls: { cert: certs.cert, key: certs.key } }],
    grants: [{ name: 'local', anonymous: true }],
    upstreams: [
      { name: 'everything', url: ev.url, default: true },
      { name: 'dead', url: `http://127.0.0.1:${deadPort}/mcp`, connect_timeout_ms: 1000, call_timeout_ms: 2000 },
    ],
  });
  gw = await H.startTollgate(conf, { cleanup, listeners: 2 });
  assert.ok(gw.plainPort, 'a plain listener logged tls=false');
  assert.ok(gw.tlsPort, 'a TLS listener logged tls=true');
});

after(() => cleanup.run());

const TARGETS = DIRECT
  ? [{ label: 'direct to server-everything', url: () => ev.url }]
  : [
    { label: 'plain /everything/mcp', url: () => `http://127.0.0.1:${gw.plainPort}/everything/mcp` },
    { label: 'plain /mcp (default upstream)', url: () => `http://127.0.0.1:${gw.plainPort}/mcp` },
    { label: 'TLS /everything/mcp', url: () => `https://127.0.0.1:${gw.tlsPort}/everything/mcp` },
    { label: 'TLS /mcp via localhost', url: () => `https://localhost:${gw.tlsPort}/mcp` },
  ];

for (const target of TARGETS) {
  describe(`server-everything: ${target.label}`, () => {
    let sdk;
    let conn; // { client, transport }
    const seen = { sampling: [], elicitation: [], roots: 0, logging: [] };
    const ROOT_URI = 'file:///tmp/tollgate-interop-root';

    before(async () => {
      sdk = await H.loadSdk();
      const T = sdk.types;
      conn = await H.connectClient(target.url(), {
        fetch: fetchFn,
        cleanup,
        capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } },
        handlers: [
          [T.CreateMessageRequestSchema, async (req) => {
            seen.sampling.push(req.params);
            return { model: 'interop-model', role: 'assistant', content: { type: 'text', text: 'sampled-answer-7f3a' } };
          }],
          [T.ElicitRequestSchema, async (req) => {
            seen.elicitation.push(req.params);
            return { action: 'accept', content: { name: 'Ada Lovelace', check: true, integer: 7 } };
          }],
          [T.ListRootsRequestSchema, async () => {
            seen.roots++;
            return { roots: [{ uri: ROOT_URI, name: 'interop root' }] };
          }],
        ],
        notificationHandlers: [
          [T.LoggingMessageNotificationSchema, async (n) => { seen.logging.push(n.params); }],
        ],
      });
    });

    after(async () => { await conn?.close(); });

    test('initialize: server info, capabilities, gateway-owned session id', async () => {
      const info = conn.client.getServerVersion();
      assert.equal(info?.name, 'mcp-servers/everything');
      const caps = conn.client.getServerCapabilities();
      assert.ok(caps?.tools, 'tools capability');
      assert.ok(caps?.prompts, 'prompts capability');
      assert.ok(caps?.resources, 'resources capability');
      const sid = conn.transport.sessionId;
      assert.ok(sid, 'an Mcp-Session-Id was issued on the initialize response');
      assert.ok(['2025-03-26', '2025-06-18', '2025-11-25'].includes(conn.transport.protocolVersion),
        `negotiated protocol version ${conn.transport.protocolVersion}`);
      if (!DIRECT) {
        // 128-bit random base64url from the gateway, not the upstream's UUID.
        assert.match(sid, /^[A-Za-z0-9_-]{22,}$/, `gateway session id looks like 128-bit base64url: ${sid}`);
        assert.doesNotMatch(sid, /^[0-9a-f]{8}-[0-9a-f]{4}-/, 'the upstream (UUID) session id must not be shown to the client');
      }
    });

    test('tools/list', async () => {
      const { tools } = await conn.client.listTools();
      const names = tools.map((t) => t.name);
      for (const n of ['echo', 'get-sum', 'trigger-long-running-operation', 'trigger-sampling-request',
        'trigger-elicitation-request', 'get-roots-list']) {
        assert.ok(names.includes(n), `tools/list contains ${n}; got ${names.join(', ')}`);
      }
      const echo = tools.find((t) => t.name === 'echo');
      assert.equal(echo.inputSchema?.type, 'object');
      assert.ok(echo.inputSchema?.properties?.message, 'echo schema kept intact');
    });

    test('tools/call echo (UTF-8 intact)', async () => {
      const msg = 'héllo ✓ 🚀 "quoted" \\ back\nslash';
      const r = await conn.client.callTool({ name: 'echo', arguments: { message: msg } });
      assert.equal(H.resultText(r), `Echo: ${msg}`);
      const s = await conn.client.callTool({ name: 'get-sum', arguments: { a: 19, b: 23 } });
      assert.match(H.resultText(s), /42/);
    });

    test('long-running tool: progress notifications relayed as they happen', async () => {
      const progress = [];
      const t0 = Date.now();
      const r = await conn.client.callTool(
        { name: 'trigger-long-running-operation', arguments: { duration: 2, steps: 4 } },
        undefined,
        { onprogress: (p) => progress.push({ ...p, at: Date.now() - t0 }), timeout: 30000 },
      );
      const done = Date.now() - t0;
      assert.match(H.resultText(r), /Long running operation completed/);
      assert.ok(progress.length >= 1, 'onprogress fired at least once');
      assert.equal(progress.length, 4, `four progress notifications (got ${JSON.stringify(progress)})`);
      assert.deepEqual(progress.map((p) => p.progress), [1, 2, 3, 4]);
      assert.equal(progress[0].total, 4);
      // Streaming, not buffered to the end: the first step (at ~0.5 s) arrives well before the result (~2 s).
      assert.ok(progress[0].at < done - 700,
        `first progress at ${progress[0].at} ms should arrive well before the result at ${done} ms`);
    });

    test('sampling round trip (server -> client sampling/createMessage)', async () => {
      const before = seen.sampling.length;
      const r = await conn.client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'say hi', maxTokens: 20 } },
        undefined, { timeout: 30000 });
      assert.equal(seen.sampling.length, before + 1, 'client sampling handler was called once');
      const req = seen.sampling.at(-1);
      assert.equal(req.maxTokens, 20);
      assert.match(req.messages?.[0]?.content?.text ?? '', /say hi/);
      const text = H.resultText(r);
      assert.match(text, /sampled-answer-7f3a/, `tool result reflects the client's sampling answer: ${text}`);
      assert.match(text, /interop-model/);
    });

    test('elicitation round trip (server -> client elicitation/create)', async () => {
      const before = seen.elicitation.length;
      const r = await conn.client.callTool({ name: 'trigger-elicitation-request', arguments: {} }, undefined, { timeout: 30000 });
      assert.equal(seen.elicitation.length, before + 1, 'client elicitation handler was called once');
      assert.ok(seen.elicitation.at(-1).requestedSchema?.properties?.name, 'requestedSchema relayed');
      const text = H.resultText(r);
      assert.match(text, /Name: Ada Lovelace/, `tool result reflects the elicitation answer: ${text}`);
      assert.match(text, /Favorite Integer: 7/);
    });

    test('roots: server-initiated roots/list on the GET stream, then get-roots-list', async () => {
      // server-everything asks for roots ~350 ms after notifications/initialized,
      // unrelated to any request: it can only arrive over the standalone GET stream.
      const got = await H.waitFor(() => seen.roots > 0, { timeout: 5000 });
      assert.ok(got, 'the client received a roots/list request from the server');
      const r = await conn.client.callTool({ name: 'get-roots-list', arguments: {} });
      assert.match(H.resultText(r), new RegExp(ROOT_URI.replace(/[/.]/g, '\\$&')));
    });

    test('logging: setLevel and notifications/message on the GET stream', async () => {
      await conn.client.setLoggingLevel('debug');
      const before = seen.logging.length;
      const on = await conn.client.callTool({ name: 'toggle-simulated-logging', arguments: {} });
      assert.match(H.resultText(on), /Started simulated/);
      try {
        const got = await H.waitFor(() => seen.logging.length > before, { timeout: 5000 });
        assert.ok(got, 'a notifications/message log message arrived');
        const m = seen.logging.at(-1);
        assert.ok(m.level && m.data !== undefined, `log message shape: ${JSON.stringify(m)}`);
      } finally {
        const off = await conn.client.callTool({ name: 'toggle-simulated-logging', arguments: {} });
        assert.match(H.resultText(off), /Stopped simulated/);
      }
    });

    test('resources/list, resources/templates/list, resources/read', async () => {
      const { resources } = await conn.client.listResources();
      const doc = resources.find((r) => r.uri.startsWith('demo://resource/static/document/'));
      assert.ok(doc, `a static document resource is listed: ${resources.map((r) => r.uri).join(', ')}`);
      const rd = await conn.client.readResource({ uri: doc.uri });
      assert.equal(rd.contents[0].uri, doc.uri);
      assert.ok(rd.contents[0].text.length > 0, 'document text returned');
      const { resourceTemplates } = await conn.client.listResourceTemplates();
      assert.ok(resourceTemplates.some((t) => t.uriTemplate.includes('demo://resource/dynamic/text/')));
      const dyn = await conn.client.readResource({ uri: 'demo://resource/dynamic/text/3' });
      assert.match(dyn.contents[0].text, /^Resource 3: This is a plaintext resource/);
      const blob = await conn.client.readResource({ uri: 'demo://resource/dynamic/blob/5' });
      assert.match(Buffer.from(blob.contents[0].blob, 'base64').toString(), /^Resource 5: This is a base64 blob/);
    });

    test('prompts/list, prompts/get', async () => {
      const { prompts } = await conn.client.listPrompts();
      const names = prompts.map((p) => p.name);
      assert.ok(names.includes('simple-prompt') && names.includes('args-prompt'), names.join(', '));
      const simple = await conn.client.getPrompt({ name: 'simple-prompt' });
      assert.equal(simple.messages[0].content.text, 'This is a simple prompt without arguments.');
      const args = await conn.client.getPrompt({ name: 'args-prompt', arguments: { city: 'Zürich', state: 'ZH' } });
      assert.equal(args.messages[0].content.text, "What's weather in Zürich, ZH?");
    });

    test('completion/complete', async () => {
      const r = await conn.client.complete({
        ref: { type: 'ref/prompt', name: 'completable-prompt' },
        argument: { name: 'department', value: 'Eng' },
      });
      assert.deepEqual(r.completion.values, ['Engineering']);
    });

    test('ping', async () => {
      const r = await conn.client.ping();
      assert.deepEqual(r, {});
    });

    test('concurrent calls on one session each get their own answer', async () => {
      const n = 20;
      const rs = await Promise.all(Array.from({ length: n }, (_, i) =>
        conn.client.callTool({ name: 'echo', arguments: { message: `concurrent-${i}` } })));
      rs.forEach((r, i) => assert.equal(H.resultText(r), `Echo: concurrent-${i}`));
    });

    test('cancellation: client aborts a long call, session keeps working', async () => {
      const ac = new AbortController();
      let progressed = 0;
      const p = conn.client.callTool(
        { name: 'trigger-long-running-operation', arguments: { duration: 3, steps: 6 } },
        undefined,
        { signal: ac.signal, onprogress: () => { progressed++; if (progressed === 1) ac.abort('interop cancel'); } },
      );
      await assert.rejects(p, 'the aborted call rejects on the client');
      assert.ok(progressed >= 1);
      const r = await conn.client.callTool({ name: 'echo', arguments: { message: 'after-cancel' } });
      assert.equal(H.resultText(r), 'Echo: after-cancel');
    });

    test('DELETE ends the session (terminateSession)', async () => {
      const sid = conn.transport.sessionId;
      const pv = conn.transport.protocolVersion;
      assert.ok(sid);
      const before = (ev.output().match(/Received session termination request/g) ?? []).length;
      await conn.transport.terminateSession();
      assert.equal(conn.transport.sessionId, undefined, 'session terminated (DELETE answered 2xx)');
      // The old session id is now unknown.
      const r = await H.postRaw(fetchFn, target.url(), { jsonrpc: '2.0', id: 99, method: 'ping' },
        { 'mcp-session-id': sid, 'mcp-protocol-version': pv });
      if (DIRECT) assert.ok([400, 404].includes(r.status), `status ${r.status}`);
      else assert.equal(r.status, 404, `request on a deleted session: expected 404, got ${r.status} ${r.text}`);
      // The upstream session was ended too.
      const ended = await H.waitFor(() =>
        (ev.output().match(/Received session termination request/g) ?? []).length > before, { timeout: 3000 });
      assert.ok(ended, 'server-everything received the DELETE for the upstream session');
      await conn.close();
    });
  });
}

describe('raw Streamable HTTP details', () => {
  const url = () => (DIRECT ? ev.url : `http://127.0.0.1:${gw.plainPort}/everything/mcp`);

  test('request ids come back exactly as sent (string, big integer, zero)', async () => {
    const s = await H.rawInitialize(fetchFn, url());
    const cases = [
      ['"id-ü-\\u00e9-1"', (t) => /"id"\s*:\s*"(id-ü-é-1|id-ü-\\u00e9-1)"/.test(t)],
      ['12345678901234567890', (t) => /"id"\s*:\s*12345678901234567890\b/.test(t)],
      ['0', (t) => /"id"\s*:\s*0\b/.test(t)],
      ['-7', (t) => /"id"\s*:\s*-7\b/.test(t)],
    ];
    for (const [idText, check] of cases) {
      // The SDK server refuses ids beyond 2^53 itself; through the gateway the upstream sees the gateway's id.
      if (idText === '12345678901234567890' && DIRECT) continue;
      const body = `{"jsonrpc":"2.0","id":${idText},"method":"tools/call","params":{"name":"echo","arguments":{"message":"id-check"}}}`;
      const r = await H.postRaw(fetchFn, url(), body, s.headers);
      assert.equal(r.status, 200, `id ${idText}: HTTP ${r.status} ${r.text}`);
      assert.ok(check(r.text), `id ${idText} must come back unchanged; body: ${r.text}`);
      const resp = r.messages.find((m) => 'result' in m || 'error' in m);
      assert.match(JSON.stringify(resp?.result ?? resp?.error), /Echo: id-check/);
    }
  });

  test('initialize response carries Mcp-Session-Id; notification gets 202', async () => {
    const r = await H.postRaw(fetchFn, url(), H.initializeBody(5));
    assert.equal(r.status, 200);
    const sid = r.headers.get('mcp-session-id');
    assert.ok(sid, 'Mcp-Session-Id header on the initialize response');
    assert.equal(r.messages[0]?.id, 5);
    assert.ok(r.messages[0]?.result?.protocolVersion);
    const n = await H.postRaw(fetchFn, url(), { jsonrpc: '2.0', method: 'notifications/initialized' },
      { 'mcp-session-id': sid, 'mcp-protocol-version': r.messages[0].result.protocolVersion });
    assert.equal(n.status, 202, `notification: HTTP ${n.status} ${n.text}`);
    assert.equal(n.text, '', '202 has an empty body');
    const d = await fetchFn(url(), { method: 'DELETE', headers: { 'mcp-session-id': sid, 'mcp-protocol-version': r.messages[0].result.protocolVersion } });
    await d.text();
    assert.ok(d.status >= 200 && d.status < 300, `DELETE: HTTP ${d.status}`);
  });

  test('sessions are independent: a response only reaches the session that asked', { skip: gatewayOnly }, async () => {
    const a = await H.connectClient(url(), { fetch: fetchFn, cleanup });
    const b = await H.connectClient(url(), { fetch: fetchFn, cleanup });
    assert.notEqual(a.transport.sessionId, b.transport.sessionId);
    const rs = await Promise.all([
      ...Array.from({ length: 10 }, (_, i) => a.client.callTool({ name: 'echo', arguments: { message: `a${i}` } })),
      ...Array.from({ length: 10 }, (_, i) => b.client.callTool({ name: 'echo', arguments: { message: `b${i}` } })),
    ]);
    rs.forEach((r, i) => assert.equal(H.resultText(r), `Echo: ${i < 10 ? `a${i}` : `b${i - 10}`}`));
    await a.close();
    await b.close();
  });
});

describe('upstream down', () => {
  test('a client of an unreachable upstream gets JSON-RPC error -32004', { skip: gatewayOnly }, async () => {
    const url = `http://127.0.0.1:${gw.plainPort}/dead/mcp`;
    const t0 = Date.now();
    const r = await H.postRaw(fetchFn, url, H.initializeBody(3));
    const err = r.messages[0]?.error;
    assert.ok(err, `expected a JSON-RPC error body, got HTTP ${r.status}: ${r.text}`);
    assert.equal(err.code, -32004, `error code: ${JSON.stringify(err)}`);
    assert.equal(r.messages[0].id, 3, 'the error answers the request id');
    assert.equal(err.data?.upstream, 'dead', `error.data.upstream: ${JSON.stringify(err.data)}`);
    assert.ok(Date.now() - t0 < 8000, 'answered within the connect timeout');
    // ... and the SDK client sees it as an MCP error on connect.
    const { McpError } = (await H.loadSdk()).types;
    await assert.rejects(H.connectClient(url, { fetch: fetchFn }), (e) => e instanceof McpError && e.code === -32004);
    // The gateway keeps serving the live upstream.
    const ok = await H.connectClient(`http://127.0.0.1:${gw.plainPort}/everything/mcp`, { fetch: fetchFn, cleanup });
    assert.equal(H.resultText(await ok.client.callTool({ name: 'echo', arguments: { message: 'alive' } })), 'Echo: alive');
    await ok.close();
  });
});

describe('TLS listener', () => {
  const handshake = (opts) => new Promise((resolve) => {
    const s = tls.connect({ host: '127.0.0.1', port: gw.tlsPort, ca: certs.caPem, servername: 'localhost', ...opts }, () => {
      const r = { ok: true, protocol: s.getProtocol(), cipher: s.getCipher() };
      s.end();
      resolve(r);
    });
    s.on('error', (e) => resolve({ ok: false, error: e.code ?? e.message }));
    s.setTimeout(5000, () => { s.destroy(); resolve({ ok: false, error: 'timeout' }); });
  });

  test('negotiates TLS 1.2+ with an ECDHE AEAD suite and a certificate for 127.0.0.1', { skip: gatewayOnly }, async () => {
    const r = await handshake({});
    assert.ok(r.ok, `handshake failed: ${r.error}`);
    assert.ok(['TLSv1.2', 'TLSv1.3'].includes(r.protocol), r.protocol);
    if (r.protocol === 'TLSv1.2') {
      assert.match(r.cipher.name, /^ECDHE-/, `key exchange: ${r.cipher.name}`);
      assert.match(r.cipher.name, /GCM|CHACHA20|CCM/, `AEAD: ${r.cipher.name}`);
    }
  });

  test('refuses CBC-only and pre-1.2 clients', { skip: gatewayOnly }, async () => {
    const cbc = await handshake({ maxVersion: 'TLSv1.2', ciphers: 'ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES128-SHA:AES128-SHA256' });
    assert.equal(cbc.ok, false, `CBC suites must be refused, negotiated ${JSON.stringify(cbc)}`);
    const old = await handshake({ minVersion: 'TLSv1', maxVersion: 'TLSv1.1', ciphers: 'DEFAULT@SECLEVEL=0' });
    assert.equal(old.ok, false, `TLS < 1.2 must be refused, negotiated ${JSON.stringify(old)}`);
    // and the listener still works afterwards
    const again = await handshake({});
    assert.ok(again.ok, `handshake after refusals: ${again.error}`);
  });

  test('a plain HTTP request on the TLS port does not get an MCP answer', { skip: gatewayOnly }, async () => {
    const r = await H.postRaw(H.makeFetch({ cleanup }), `http://127.0.0.1:${gw.tlsPort}/mcp`, H.initializeBody())
      .catch((e) => ({ error: e }));
    assert.ok(r.error || r.status >= 400, `plain text on TLS port answered ${r.status}`);
  });
});
