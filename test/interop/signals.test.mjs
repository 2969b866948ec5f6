// Signals in the MCP drafts' shapes (signals = "mcp-drafts"), through the CoWork OS stand-in:
//   1. a limited call (a token bucket of 1 per hour on execute_code) on every client transport
//      and era: -32023 with data.retryAfterMs, data.limit, data.remaining beside tollgate's own
//      data; on a plain Streamable HTTP response (2025 session and 2026-07-28 stateless) HTTP 429
//      with Retry-After, RateLimit-Limit and RateLimit-Remaining; on legacy SSE and WebSocket,
//      where no status can change, the JSON-RPC error alone
//   2. the default (an upstream with signals = "tollgate" under a top-level "mcp-drafts") keeps
//      -32002 and HTTP 200, with none of the draft's members or headers
//   3. what the official SDK client (StreamableHTTPClientTransport + Client.callTool) does with a
//      429 carrying -32023: recorded, and whether it retries (the gateway's access log counts the
//      POSTs)
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/signals.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as C from './lib/clients.mjs';

H.requireNodeModules();

const cleanup = new H.Cleanup();
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const upstreamHeaders = { Authorization: `Bearer ${UPSTREAM_TOKEN}` };
const EC_ARGS = (i) => ({ language: 'python', code: `print(${i})` });
const KINDS = ['streamable', 'stateless', 'sse', 'ws'];
const TOKENS = Object.fromEntries([...KINDS, 'raw25', 'raw26', 'sdk', 'sdksse', 'brake'].map((k) => [k, `${k}-${H.randomToken()}`]));
let dir;
let s;
let gw;
let port;
let agent;

const logs = () => ({ 'tollgate stderr': gw?.stderr(), 'stand-in log': s?.logFile && fs.existsSync(s.logFile) ? fs.readFileSync(s.logFile, 'utf8').slice(-3000) : undefined });
const test = (name, fn) => it(name, H.withLogs(logs, fn));

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-signals-');
  agent = new http.Agent({ keepAlive: true });
  cleanup.add(() => agent.destroy());
  s = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  const policy = path.join(dir, 'limited.json');
  fs.writeFileSync(policy, JSON.stringify({
    version: '1', default: 'allow',
    tools: {
      execute_code: { limits: [{ counter: 'ec_rate', window: 'hour', max: 1, scope: 'grant' }] },
      echo: { brake: { repeats: 1, within: '60s' } }, // the second identical echo is braked
    },
  }) + '\n');
  const up = (name, extra = {}) => ({ name, url: s.url, headers: upstreamHeaders, initialize: 'local', policy, ...extra });
  const conf = H.writeConf(dir, {
    log: { access: true },
    signals: 'mcp-drafts',
    grants: Object.entries(TOKENS).map(([name, t]) => ({ name, token_sha256: H.sha256hex(t) })),
    upstreams: [up('drafts', { default: true }), up('plain', { signals: 'tollgate' })],
  });
  gw = await H.startTollgate(conf, { cleanup });
  port = gw.plainPort;
});
after(() => cleanup.run());

/** The first call passes, the second is refused by the bucket: the second's answer. */
async function limitedAnswer(kind, upstream) {
  const c = await C.openClient(kind, { port, upstream, token: TOKENS[kind], agent });
  try {
    const first = await c.call('execute_code', EC_ARGS(1));
    assert.ok(first.result && !first.result.isError, `${kind} ${upstream}: first call ${JSON.stringify(first)}`);
    return await c.call('execute_code', EC_ARGS(2));
  } finally {
    await c.close();
  }
}

function assertDraftShape(e, what) {
  assert.equal(e?.code, -32023, `${what}: ${JSON.stringify(e)}`);
  assert.match(e.message, /execute_code is limited to/, what);
  const d = e.data;
  assert.ok(Number.isInteger(d?.retryAfterMs) && d.retryAfterMs > 0 && d.retryAfterMs <= 3600000, `${what}: retryAfterMs ${JSON.stringify(d)}`);
  assert.equal(d.limit, 1, `${what}: limit ${JSON.stringify(d)}`);
  assert.equal(d.remaining, 0, `${what}: remaining ${JSON.stringify(d)}`);
  // tollgate's own members stay beside the draft's
  assert.equal(d.tool, 'execute_code', what);
  assert.equal(d.counter, 'ec_rate', what);
  assert.equal(d.retry_after_ms, d.retryAfterMs, what);
}

function assertTollgateShape(e, what) {
  assert.equal(e?.code, -32002, `${what}: ${JSON.stringify(e)}`);
  assert.equal(e.data?.counter, 'ec_rate', what);
  for (const k of ['retryAfterMs', 'limit', 'remaining'])
    assert.ok(!(k in e.data), `${what}: no ${k} by default: ${JSON.stringify(e.data)}`);
}

describe('rate limits in the shape of the MCP rate-limited error draft (SEP-3304)', () => {
  for (const kind of KINDS) {
    test(`${kind}: -32023 with retryAfterMs, limit, remaining; the default upstream keeps -32002`, async () => {
      assertDraftShape((await limitedAnswer(kind, 'drafts')).error, `${kind} drafts`);
      assertTollgateShape((await limitedAnswer(kind, 'plain')).error, `${kind} plain`);
    });
  }

  for (const [era, name] of [['2025-06-18 session', 'raw25'], ['2026-07-28 stateless', 'raw26']]) {
    test(`Streamable HTTP, ${era}: HTTP 429 with Retry-After, RateLimit-Limit, RateLimit-Remaining`, async () => {
      for (const upstream of ['drafts', 'plain']) {
        const base = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${TOKENS[name]}` };
        let headers = base;
        const url = `/${upstream}/mcp`;
        const meta = name === 'raw26' ? { _meta: C.META } : {};
        if (name === 'raw25') {
          const r = await C.request(agent, port, 'POST', url, base, JSON.stringify(H.initializeBody(1)));
          assert.equal(r.status, 200, r.text);
          headers = { ...base, 'mcp-protocol-version': '2025-06-18', 'mcp-session-id': r.headers['mcp-session-id'] };
          await C.request(agent, port, 'POST', url, headers, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
        } else {
          headers = { ...base, 'mcp-protocol-version': C.MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'execute_code' };
        }
        const call = (i) => C.request(agent, port, 'POST', url, headers,
          JSON.stringify({ jsonrpc: '2.0', id: i, method: 'tools/call', params: { name: 'execute_code', arguments: EC_ARGS(i), ...meta } }));
        const ok = await call(1);
        assert.equal(ok.status, 200, ok.text);
        const r = await call(2);
        const e = C.messagesOf(r)[0]?.error;
        if (upstream === 'drafts') {
          assert.equal(r.status, 429, `${upstream}: ${r.status} ${r.text}`);
          assert.match(String(r.headers['content-type']), /application\/json/);
          assertDraftShape(e, `${era} ${upstream}`);
          assert.equal(r.headers['retry-after'], String(Math.ceil(e.data.retryAfterMs / 1000)), JSON.stringify(r.headers));
          assert.equal(r.headers['ratelimit-limit'], '1');
          assert.equal(r.headers['ratelimit-remaining'], '0');
        } else {
          assert.equal(r.status, 200, `${upstream}: ${r.status} ${r.text}`);
          assertTollgateShape(e, `${era} ${upstream}`);
          for (const h of ['retry-after', 'ratelimit-limit', 'ratelimit-remaining'])
            assert.equal(r.headers[h], undefined, `${upstream}: no ${h} by default`);
        }
      }
    });
  }
});

describe('a brake in the same shape: no counter, so no limit or remaining', () => {
  test('Streamable HTTP 2025: 429 with Retry-After only, -32023 with retryAfterMs and rule "brake"', async () => {
    const base = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${TOKENS.brake}` };
    const r0 = await C.request(agent, port, 'POST', '/drafts/mcp', base, JSON.stringify(H.initializeBody(1)));
    const headers = { ...base, 'mcp-protocol-version': '2025-06-18', 'mcp-session-id': r0.headers['mcp-session-id'] };
    await C.request(agent, port, 'POST', '/drafts/mcp', headers, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    const echo = (id) => C.request(agent, port, 'POST', '/drafts/mcp', headers,
      JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'echo', arguments: { text: 'again' } } }));
    assert.equal((await echo(1)).status, 200);
    const r = await echo(2);
    const e = C.messagesOf(r)[0]?.error;
    assert.equal(r.status, 429, r.text);
    assert.equal(e?.code, -32023, r.text);
    assert.equal(e.data.rule, 'brake', r.text);
    assert.ok(e.data.retryAfterMs > 0 && e.data.retryAfterMs <= 60000 && e.data.retryAfterMs === e.data.retry_after_ms, r.text);
    assert.ok(!('limit' in e.data) && !('remaining' in e.data), `nothing made up: ${r.text}`);
    assert.equal(r.headers['retry-after'], String(Math.ceil(e.data.retryAfterMs / 1000)));
    assert.equal(r.headers['ratelimit-limit'], undefined);
    assert.equal(r.headers['ratelimit-remaining'], undefined);
  });
});

describe('the official SDK client and a 429 carrying -32023', () => {
  test('Client.callTool rejects; recorded: what it raises and whether it sends the call again', async () => {
    const c = await H.connectClient(`http://127.0.0.1:${port}/drafts/mcp`, { headers: { Authorization: `Bearer ${TOKENS.sdk}` }, cleanup });
    const r1 = await c.client.callTool({ name: 'execute_code', arguments: EC_ARGS(1) });
    assert.ok(!r1.isError, JSON.stringify(r1));
    const posts = () => (gw.stderr().match(/method=POST path="\/drafts\/mcp" status=429 [^\n]*grant=sdk/g) ?? []).length;
    const before429 = posts();
    let err;
    try {
      await c.client.callTool({ name: 'execute_code', arguments: EC_ARGS(2) });
    } catch (e) {
      err = e;
    }
    assert.ok(err, 'callTool rejects on a 429');
    // What the SDK raises: not an McpError with the JSON-RPC code and data, but the transport's
    // StreamableHTTPError for a non-2xx status: its code is the HTTP status (429), its message
    // "Streamable HTTP error: Error POSTing to endpoint: " and the body's text (the -32023 error
    // as a string). A client reads retryAfterMs only by parsing that text.
    const { types } = await H.loadSdk();
    const record = { name: err.constructor?.name, isMcpError: err instanceof types.McpError, code: err.code, message: String(err.message).slice(0, 300) };
    process.stderr.write(`SDK callTool on a 429 + -32023: ${JSON.stringify(record)}\n`);
    assert.equal(record.isMcpError, false, JSON.stringify(record));
    assert.equal(record.name, 'StreamableHTTPError', JSON.stringify(record));
    assert.equal(err.code, 429, JSON.stringify(record));
    assert.match(err.message, /Error POSTing to endpoint: .*"code":-32023.*"retryAfterMs":\d+/, JSON.stringify(record));
    await H.waitUntil(() => posts() >= before429 + 1, { what: 'the 429 in the access log' });
    await H.sleep(300); // a retry would come at once or after Retry-After (3600 s here): none within
    assert.equal(posts(), before429 + 1, 'the SDK sent the limited call once: no retry of a 429');
    await c.close();
  });

  test('on legacy SSE (no status to change) the SDK raises an McpError with -32023 and its data', async () => {
    const { Client, types } = await H.loadSdk();
    const { SSEClientTransport } = await import('@modelcontextprotocol/sdk/client/sse.js');
    const auth = { Authorization: `Bearer ${TOKENS.sdksse}` };
    const client = new Client({ name: 'tollgate-signals', version: '1.0.0' }, { capabilities: {} });
    await client.connect(new SSEClientTransport(new URL(`http://127.0.0.1:${port}/drafts/sse`), { fetch, requestInit: { headers: auth } }));
    cleanup.add(() => client.close().catch(() => {}));
    assert.ok(!(await client.callTool({ name: 'execute_code', arguments: EC_ARGS(1) })).isError);
    const err = await client.callTool({ name: 'execute_code', arguments: EC_ARGS(2) }).then(() => undefined, (e) => e);
    assert.ok(err instanceof types.McpError, `an McpError: ${err?.stack ?? err}`);
    assert.equal(err.code, -32023);
    assert.ok(err.data?.retryAfterMs > 0 && err.data.limit === 1 && err.data.remaining === 0, JSON.stringify(err.data));
    await client.close();
  });
});

describe('tool failures (SEP-3313): an upstream\'s _meta toolFailure passes as it was written', () => {
  const KEY = 'io.modelcontextprotocol/toolFailure';
  // Members in no sorted order, a float, a nested object, escapes and non-ASCII: what a gateway
  // that rebuilt the object would change.
  const FAILURE = { class: 'transient', retryable: true, retryAfterMs: 1500, score: 0.25, detail: 'quota "west" \\ é ✓\u2028', cause: { z: 1, a: [null, false] } };
  const text = JSON.stringify({ [KEY]: FAILURE });
  const args = { toolFailure: FAILURE };

  for (const kind of KINDS) {
    test(`${kind}: result._meta toolFailure unchanged, with signals "mcp-drafts" and "tollgate"`, async () => {
      for (const upstream of ['drafts', 'plain']) {
        const c = await C.openClient(kind, { port, upstream, token: TOKENS[kind], agent });
        try {
          const a = await c.call('fail', args);
          assert.equal(a.result?.isError, true, `${kind} ${upstream}: ${JSON.stringify(a)}`);
          assert.equal(JSON.stringify(a.result._meta && { [KEY]: a.result._meta[KEY] }), text, `${kind} ${upstream}: ${JSON.stringify(a.result)}`);
        } finally {
          await c.close();
        }
      }
    });
  }

  for (const [era, name] of [['2025-06-18 session', 'raw25'], ['2026-07-28 stateless', 'raw26']]) {
    test(`Streamable HTTP, ${era}: the answer's bytes hold the upstream's _meta text`, async () => {
      const base = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${TOKENS[name]}` };
      let headers;
      const meta = name === 'raw26' ? { _meta: C.META } : {};
      if (name === 'raw25') {
        const r = await C.request(agent, port, 'POST', '/drafts/mcp', base, JSON.stringify(H.initializeBody(1)));
        headers = { ...base, 'mcp-protocol-version': '2025-06-18', 'mcp-session-id': r.headers['mcp-session-id'] };
        await C.request(agent, port, 'POST', '/drafts/mcp', headers, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
      } else {
        headers = { ...base, 'mcp-protocol-version': C.MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'fail' };
      }
      const r = await C.request(agent, port, 'POST', '/drafts/mcp', headers,
        JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'fail', arguments: args, ...meta } }));
      assert.equal(r.status, 200, r.text);
      assert.ok(r.text.includes(text.slice(1, -1)), `the upstream's bytes ${text} in: ${r.text}`);
    });
  }
});
