// The official MCP SDK client through tollgate to the CoWork OS stand-in over HTTP
// (test/fixtures/cowork-os/standin.mjs): the gateway answers initialize itself,
// injects the upstream's bearer token (which the client never sees), sets the
// upstream's own Host, refuses CoWork's non-standard `shutdown`, and keeps its
// pooled upstream connections within the pool size.
//
//   node --test test/interop/cowork.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import * as H from './lib/harness.mjs';

H.requireNodeModules(); // fails the file with 'npm ci --prefix test' when the packages are missing

const cleanup = new H.Cleanup();
let dir;
let gw;
let standin; // the stand-in behind upstreams "cowork-os" and "cowork-slow"
let poolStandin; // a second stand-in only for the pool test (its own connection log)
let queueStandin; // a third one for the queue-deadline and idle-timeout tests
let baseFetch;
const CLIENT_TOKEN = 'client-' + H.randomToken(); // the client's own credential for the gateway
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken(); // CoWork's token, held by the gateway only
const POOL_SIZE = 4;

// Everything the client received: response headers and bodies, for the "never saw the token" check.
const received = [];
function recordingFetch(inner) {
  return async (url, init) => {
    const res = await inner(url, init);
    const entry = { url: String(url), status: res.status, headers: [...res.headers.entries()], body: '', ended: true };
    received.push(entry);
    if (!res.body) return res;
    entry.ended = false;
    const [a, b] = res.body.tee();
    (async () => {
      const dec = new TextDecoder();
      try { for await (const chunk of b) entry.body += dec.decode(chunk, { stream: true }); } catch { /* aborted */ }
      entry.ended = true;
    })();
    return new Response(a, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

const logs = () => ({
  'tollgate process': gw?.status(),
  'tollgate stderr': gw?.stderr(),
  'stand-in output': standin?.output(),
  'stand-in log': standin && fs.existsSync(standin.logFile) ? fs.readFileSync(standin.logFile, 'utf8').slice(-6000) : undefined,
});
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

const httpRecords = (s) => s.records().filter((r) => r.http);
const gatewayUrl = (name = 'cowork-os') => `http://127.0.0.1:${gw.plainPort}/${name}/mcp`;
const clientHeaders = { Authorization: `Bearer ${CLIENT_TOKEN}` };

before(async () => {
  H.requireNodeModules();
  dir = H.makeTempDir(cleanup);
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  poolStandin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin-pool.log') });
  queueStandin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin-queue.log') });
  const upstreamHeaders = { Authorization: `Bearer ${UPSTREAM_TOKEN}` };
  const conf = H.writeConf(dir, {
    listeners: [{}],
    admin: true, // /metrics: when a call went upstream
    grants: [{ name: 'alice', token_sha256: H.sha256hex(CLIENT_TOKEN) }],
    upstreams: [
      { name: 'cowork-os', url: standin.url, default: true, headers: upstreamHeaders, initialize: 'local' },
      {
        name: 'cowork-slow', url: standin.url, headers: upstreamHeaders, initialize: 'local',
        connect_timeout_ms: 1000, call_timeout_ms: 1000,
      },
      {
        name: 'cowork-pool', url: poolStandin.url, headers: upstreamHeaders, initialize: 'local',
        pool: { size: POOL_SIZE },
      },
      {
        name: 'cowork-queue', url: queueStandin.url, headers: upstreamHeaders, initialize: 'local',
        pool: { size: 1, queue: 8, queue_timeout_ms: 500, idle_timeout_ms: 1000 },
      },
    ],
  });
  gw = await H.startTollgate(conf, { cleanup, listeners: 1, admin: true });
  baseFetch = recordingFetch(H.makeFetch({ cleanup }));
});

after(() => cleanup.run());

describe('CoWork OS stand-in through tollgate (initialize = "local")', () => {
  let conn;

  test('sanity: the stand-in itself refuses initialize over HTTP', async () => {
    const r = await H.postRaw(H.makeFetch({ cleanup, keepAlive: false }), standin.url, H.initializeBody(1),
      { Authorization: `Bearer ${UPSTREAM_TOKEN}` });
    assert.equal(r.status, 200);
    assert.equal(r.messages[0]?.error?.code, -32600, r.text);
  });

  test('the SDK client connects: the gateway answers initialize', async () => {
    const before = httpRecords(standin).length;
    conn = await H.connectClient(gatewayUrl(), { fetch: baseFetch, headers: clientHeaders, cleanup });
    assert.ok(conn.transport.sessionId, 'Mcp-Session-Id issued by the gateway');
    const caps = conn.client.getServerCapabilities();
    assert.ok(caps?.tools, `tools capability advertised: ${JSON.stringify(caps)}`);
    const inits = httpRecords(standin).slice(before).filter((r) => r.msg?.method === 'initialize');
    assert.equal(inits.length, 0, 'initialize was answered by the gateway, not sent to the stand-in');
  });

  test('tools/list passes CoWork tools through, dotted names unchanged', async () => {
    const { tools } = await conn.client.listTools();
    const names = tools.map((t) => t.name);
    for (const n of ['echo', 'slow', 'execute_code', 'run_command', 'resend.send_email', 'discord.delete_channel']) {
      assert.ok(names.includes(n), `tools/list contains ${n}; got ${names.join(', ')}`);
    }
    const ec = tools.find((t) => t.name === 'execute_code');
    assert.deepEqual(ec.inputSchema.required, ['language', 'code']);
    assert.ok(httpRecords(standin).some((r) => r.msg?.method === 'tools/list'), 'tools/list reached the stand-in');
  });

  test('tools/call echo', async () => {
    const r = await conn.client.callTool({ name: 'echo', arguments: { text: 'hello through tollgate ✓' } });
    assert.equal(H.resultText(r), 'hello through tollgate ✓');
    const f = await conn.client.callTool({ name: 'fail', arguments: { message: 'boom' } });
    assert.equal(f.isError, true, 'tool failures stay results with isError');
  });

  test('resources/read passes through', async () => {
    const r = await conn.client.readResource({ uri: 'cowork://workspaces' });
    assert.equal(r.contents[0].uri, 'cowork://workspaces');
    assert.match(r.contents[0].text, /Acme Marketing/);
  });

  test('every upstream request carried the gateway-held token and the upstream\'s own Host', async () => {
    const recs = httpRecords(standin);
    assert.ok(recs.length >= 3, `the stand-in saw requests (${recs.length})`);
    for (const r of recs) {
      const where = `stand-in request #${r.seq} ${r.http.method} ${r.http.path} ${r.body.slice(0, 120)}`;
      assert.equal(r.http.headers.authorization, `Bearer ${UPSTREAM_TOKEN}`, `${where}: authorization`);
      assert.equal(r.http.headers.host, `127.0.0.1:${standin.port}`, `${where}: host`);
      assert.ok(!r.http.headers.origin, `${where}: no Origin sent upstream (got ${r.http.headers.origin})`);
      assert.equal(r.http.method, 'POST', `${where}: only POST reaches CoWork's single endpoint`);
      assert.equal(r.http.path, '/mcp', where);
      assert.ok(r.status === 200 || r.status === 202, `${where}: the stand-in answered ${r.status}`);
    }
    const raw = fs.readFileSync(standin.logFile, 'utf8');
    assert.ok(!raw.includes(CLIENT_TOKEN), "the client's own credential is not forwarded upstream");
    assert.ok(!raw.includes(conn.transport.sessionId), "the client's gateway session id is not forwarded upstream");
  });

  test('the client never saw the upstream token', async () => {
    // every response body recorded to its end (the tees finish after the client read its copy)
    await H.waitUntil(() => received.every((e) => e.ended), {
      what: 'every recorded response body to end',
      detail: () => received.filter((e) => !e.ended).map((e) => `${e.url} HTTP ${e.status}`).join(', '),
    });
    assert.ok(received.length > 0);
    for (const e of received) {
      const text = JSON.stringify(e.headers) + e.body;
      assert.ok(!text.includes(UPSTREAM_TOKEN), `response to ${e.url} (HTTP ${e.status}) leaks the upstream token: ${text.slice(0, 500)}`);
    }
  });

  test('shutdown from the client is refused with -32001 and never reaches the stand-in', async () => {
    const { types } = await H.loadSdk();
    // 1. through the SDK
    let err;
    try {
      await conn.client.request({ method: 'shutdown', params: {} }, types.EmptyResultSchema);
    } catch (e) { err = e; }
    assert.ok(err, 'shutdown must fail');
    assert.ok(err instanceof types.McpError, `McpError expected, got ${err}`);
    assert.equal(err.code, -32001, `error code ${err.code}: ${err.message}`);
    assert.ok(err.data?.reason, `error.data.reason explains: ${JSON.stringify(err.data)}`);
    // 2. raw, with the session headers, as a request and as a notification, without params
    const h = {
      ...clientHeaders,
      'mcp-session-id': conn.transport.sessionId,
      'mcp-protocol-version': conn.transport.protocolVersion,
    };
    const r = await H.postRaw(baseFetch, gatewayUrl(), '{"jsonrpc":"2.0","id":"sd-1","method":"shutdown"}', h);
    assert.equal(r.status, 200, `raw shutdown: HTTP ${r.status} ${r.text}`);
    const m = r.messages.find((x) => x.id === 'sd-1');
    assert.ok(m?.error, `a JSON-RPC error answers id "sd-1": ${r.text}`);
    assert.equal(m.error.code, -32001);
    const n = await H.postRaw(baseFetch, gatewayUrl(), '{"jsonrpc":"2.0","method":"shutdown"}', h);
    assert.ok([202, 400, 200].includes(n.status), `shutdown notification: HTTP ${n.status} ${n.text}`);
    await H.quietFor(300); // negative check: no shutdown reaches the stand-in late
    const sd = standin.records().filter((x) => x.msg?.method === 'shutdown' || x.event === 'exit');
    assert.equal(sd.length, 0, `shutdown reached the stand-in: ${JSON.stringify(sd)}`);
    assert.equal(standin.proc.exitCode, null, 'the stand-in is still running');
    const again = await conn.client.callTool({ name: 'echo', arguments: { text: 'still here' } });
    assert.equal(H.resultText(again), 'still here');
  });

  test('an upstream call that exceeds call_timeout_ms gets -32004', async () => {
    const { types } = await H.loadSdk();
    const c = await H.connectClient(gatewayUrl('cowork-slow'), { fetch: baseFetch, headers: clientHeaders, cleanup });
    const t0 = Date.now();
    let err;
    try {
      await c.client.callTool({ name: 'slow', arguments: { seconds: 4 } }, undefined, { timeout: 15000 });
    } catch (e) { err = e; }
    const took = Date.now() - t0;
    assert.ok(err instanceof types.McpError, `McpError expected, got ${err}`);
    assert.equal(err.code, -32004, `code ${err.code}: ${err.message}`);
    assert.equal(err.data?.upstream, 'cowork-slow', `error.data: ${JSON.stringify(err.data)}`);
    assert.ok(took < 3500, `answered after the 1 s call timeout, not after the tool finished (${took} ms)`);
    const ok = await c.client.callTool({ name: 'echo', arguments: { text: 'after timeout' } });
    assert.equal(H.resultText(ok), 'after timeout');
    await c.close();
  });

  test('no transport errors on the client', async () => {
    assert.deepEqual(conn.errors.map(String), []);
  });

  test('DELETE ends the gateway session; CoWork gets no DELETE', async () => {
    const sid = conn.transport.sessionId;
    const pv = conn.transport.protocolVersion;
    await conn.transport.terminateSession();
    assert.equal(conn.transport.sessionId, undefined);
    const r = await H.postRaw(baseFetch, gatewayUrl(), { jsonrpc: '2.0', id: 9, method: 'tools/list' },
      { ...clientHeaders, 'mcp-session-id': sid, 'mcp-protocol-version': pv });
    assert.equal(r.status, 404, `request on the deleted session: HTTP ${r.status} ${r.text}`);
    assert.ok(httpRecords(standin).every((x) => x.http.method === 'POST'), 'only POSTs reached the stand-in');
    await conn.close();
  });
});

describe('upstream connection pool', () => {
  test(`1,000 sequential calls use at most pool.size = ${POOL_SIZE} upstream connections`, async () => {
    const c = await H.connectClient(gatewayUrl('cowork-pool'), { fetch: H.makeFetch({ cleanup }), headers: clientHeaders, cleanup });
    for (let i = 0; i < 1000; i++) {
      const r = await c.client.callTool({ name: 'echo', arguments: { text: `n${i}` } });
      if (H.resultText(r) !== `n${i}`) assert.fail(`call ${i}: got ${JSON.stringify(r)}`);
    }
    const recs = poolStandin.records();
    const conns = recs.filter((r) => r.event === 'connection');
    const calls = recs.filter((r) => r.msg?.method === 'tools/call');
    assert.equal(calls.length, 1000, 'all 1,000 calls reached the stand-in');
    assert.ok(conns.length <= POOL_SIZE, `the stand-in saw ${conns.length} TCP connections (pool size ${POOL_SIZE})`);
    await c.close();
  });

  test('concurrent calls from several sessions still stay within the pool size', async () => {
    const clients = await Promise.all(Array.from({ length: 4 }, () =>
      H.connectClient(gatewayUrl('cowork-pool'), { fetch: H.makeFetch({ cleanup }), headers: clientHeaders, cleanup })));
    await Promise.all(clients.map(async (c, ci) => {
      const pending = [];
      for (let i = 0; i < 50; i++) {
        pending.push(c.client.callTool({ name: 'echo', arguments: { text: `c${ci}-${i}` } }).then((r) => {
          assert.equal(H.resultText(r), `c${ci}-${i}`);
        }));
        if (pending.length >= 4) await Promise.all(pending.splice(0));
      }
      await Promise.all(pending);
    }));
    const conns = poolStandin.records().filter((r) => r.event === 'connection');
    assert.ok(conns.length <= POOL_SIZE, `the stand-in saw ${conns.length} TCP connections (pool size ${POOL_SIZE})`);
    await Promise.all(clients.map((c) => c.close()));
  });
});

describe('upstream pool queue and idle timeout', () => {
  test('a call queued behind a busy pool (size 1) fails with -32004 after queue_timeout_ms', async () => {
    const { types } = await H.loadSdk();
    const a = await H.connectClient(gatewayUrl('cowork-queue'), { fetch: H.makeFetch({ cleanup }), headers: clientHeaders, cleanup });
    const b = await H.connectClient(gatewayUrl('cowork-queue'), { fetch: H.makeFetch({ cleanup }), headers: clientHeaders, cleanup });
    const sent = (await gw.metrics())['tollgate_upstream_calls_total'];
    const slow = a.client.callTool({ name: 'slow', arguments: { seconds: 2.5 } }, undefined, { timeout: 15000 });
    // the slow call holds the only pooled connection once it is sent (it takes the connection then)
    await gw.waitForMetric('tollgate_upstream_calls_total', (v) => v > sent, { what: 'the slow call to be sent upstream' });
    const t0 = Date.now();
    let err;
    try {
      await b.client.callTool({ name: 'echo', arguments: { text: 'queued' } }, undefined, { timeout: 15000 });
    } catch (e) { err = e; }
    const took = Date.now() - t0;
    assert.ok(err instanceof types.McpError, `McpError expected, got ${err}`);
    assert.equal(err.code, -32004, `code ${err.code}: ${err.message}`);
    assert.ok(took >= 400 && took < 2000, `refused after the 500 ms queue deadline, not before or after the slow call (${took} ms)`);
    assert.equal(H.resultText(await slow), 'slept 2.5 s', 'the call holding the connection completes');
    const calls = queueStandin.records().filter((r) => r.msg?.method === 'tools/call');
    assert.ok(!calls.some((r) => r.msg.params?.arguments?.text === 'queued'), 'the timed-out queued call never reached the upstream');
    // with the connection free again, b is served
    assert.equal(H.resultText(await b.client.callTool({ name: 'echo', arguments: { text: 'now' } })), 'now');
    await a.close();
    await b.close();
  });

  test('an idle pooled connection is closed after pool.idle_timeout_ms', async () => {
    const c = await H.connectClient(gatewayUrl('cowork-queue'), { fetch: H.makeFetch({ cleanup }), headers: clientHeaders, cleanup });
    assert.equal(H.resultText(await c.client.callTool({ name: 'echo', arguments: { text: 'idle-1' } })), 'idle-1');
    const last = queueStandin.records().filter((r) => r.msg?.params?.arguments?.text === 'idle-1').at(-1);
    assert.ok(last, 'the call reached the stand-in');
    const closed = await H.waitFor(() => queueStandin.records().some((r) => r.event === 'connection_closed' && r.conn === last.conn),
      { timeout: 4000 });
    assert.ok(closed, `upstream connection ${last.conn} was still open 4 s after its last use (idle_timeout_ms 1000)`);
    // and a new call opens a fresh connection
    assert.equal(H.resultText(await c.client.callTool({ name: 'echo', arguments: { text: 'idle-2' } })), 'idle-2');
    await c.close();
  });
});
