// MCP 2026-07-28 requests. Every Mcp-* header is checked against the body first (400/-32020:
// a header never talks past the body). An upstream whose initialize tollgate answers itself
// (the CoWork OS stand-in, initialize = "local") is served statelessly: server/discover from the
// gateway, removed methods 404, everything else through the same policy, with 2026 results.
// An upstream whose initialize is forwarded (server-everything, 2025 only) is bridged: tollgate
// makes one upstream session per grant with its own initialize, holds the requests that come
// meanwhile, and answers server/discover with what the upstream declared.
//
//   node --test test/interop/era2026.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import { startEra2026 } from './lib/conformance2026.mjs';

H.requireNodeModules();

const cleanup = new H.Cleanup();
let dir;
let gw;
let standin;
let standin2; // a second stand-in, only for the reload test
let everything; // a 2025-only upstream with real sessions
let era; // the era2026 fixture, as a 2025 upstream (protocol = "2025")
let confOpts; // what the conf was written from
const TOKEN = 'client-' + H.randomToken();
const BOB = 'bob-' + H.randomToken();
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const MODERN = '2026-07-28';
const META = {
  'io.modelcontextprotocol/protocolVersion': MODERN,
  'io.modelcontextprotocol/clientCapabilities': {},
};

const logs = () => ({
  'tollgate stderr': gw?.stderr(),
  'stand-in log': standin && fs.existsSync(standin.logFile) ? fs.readFileSync(standin.logFile, 'utf8').slice(-4000) : undefined,
});
const test = (name, fn) => it(name, H.withLogs(logs, fn));
const url = (name = 'cowork') => `http://127.0.0.1:${gw.plainPort}/${name}/mcp`;
const upstreamCalls = () => standin.records().filter((r) => r.http && r.msg?.method === 'tools/call').length;

async function post(body, headers = {}, name = 'cowork', token = TOKEN) {
  const res = await fetch(url(name), {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      Authorization: `Bearer ${token}`, ...headers,
    },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, json, text };
}

const call = (name, args = {}) => ({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name, arguments: args, _meta: META } });
const std = (method, name) => ({ 'MCP-Protocol-Version': MODERN, 'Mcp-Method': method, ...(name ? { 'Mcp-Name': name } : {}) });

before(async () => {
  dir = H.makeTempDir(cleanup);
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  standin2 = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin2.log') });
  everything = await H.startEverything({ cleanup });
  era = await startEra2026({ cleanup }); // told to speak 2025 below: bridged like server-everything
  const deadPort = await H.freePort(); // nothing listens there
  const allowAll = path.join(dir, 'allow-all.json');
  fs.writeFileSync(allowAll, '{"version":"1","default":"allow","tools":{}}\n');
  const policy = path.join(dir, 'echo-only.json');
  fs.writeFileSync(policy, '{"version":"1","default":"deny","methods":["x/named"],"tools":{"echo":{},"slow":{}}}\n'); // execute_code: denied and hidden
  const headers = { Authorization: `Bearer ${UPSTREAM_TOKEN}` };
  confOpts = {
    listeners: [{}],
    limits: { listens_per_grant: 2, sse_keepalive_ms: 1000 }, // (the listen tests)
    admin: true, // /metrics: when a call is with the upstream
    grants: [{ name: 'alice', token_sha256: H.sha256hex(TOKEN) }, { name: 'bob', token_sha256: H.sha256hex(BOB) }],
    upstreams: [
      { name: 'cowork', url: standin.url, default: true, initialize: 'local', headers, policy },
      { name: 'sessionful', url: everything.url }, // initialize forwarded: bridged
      { name: 'as2025', url: era.url, protocol: '2025', policy: allowAll },
      { name: 'dead', url: `http://127.0.0.1:${deadPort}/mcp`, connect_timeout_ms: 2000 },
    ],
  };
  const conf = H.writeConf(dir, confOpts);
  gw = await H.startTollgate(conf, { cleanup, listeners: 1, admin: true });
});

after(() => cleanup.run());

describe('2026-07-28 requests', () => {
  test('server/discover for a bridged 2025 upstream: the versions served and what its initialize declared', async () => {
    const r = await post({ jsonrpc: '2.0', id: 'server-discover-probe-1', method: 'server/discover', params: { _meta: META } },
      std('server/discover'), 'sessionful');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json?.id, 'server-discover-probe-1');
    const res = r.json?.result;
    assert.equal(res?.resultType, 'complete', r.text);
    assert.deepEqual(res.supportedVersions, [MODERN]);
    assert.equal(res.ttlMs, 0);
    assert.equal(res.cacheScope, 'private');
    // server-everything declares tools, resources (subscribe), prompts (each listChanged), logging
    // and completions: what tollgate relays is there, list changes and subscribe as declared (a
    // listen takes them from the upstream session's GET stream, its resources subscribed to with
    // resources/subscribe), and logging (setLevel is gone) is not. The tasks extension is the
    // gateway's own (a call parked for approval is a task for a client that declares it).
    assert.deepEqual(res.capabilities, {
      tools: { listChanged: true }, resources: { listChanged: true, subscribe: true },
      prompts: { listChanged: true }, completions: {},
      extensions: { 'io.modelcontextprotocol/tasks': {} },
    });
    assert.equal(res._meta?.['io.modelcontextprotocol/serverInfo']?.name, 'tollgate/sessionful');
  });

  test('bridged: concurrent first requests of a grant wait for one upstream initialize, then all run', async () => {
    const before = (await gw.metrics())['tollgate_upstream_calls_total'] ?? 0;
    const rs = await Promise.all([1, 2, 3, 4, 5].map((i) =>
      post({ jsonrpc: '2.0', id: i, method: 'tools/call', params: { name: 'echo', arguments: { message: `m${i}` }, _meta: META } },
        std('tools/call', 'echo'), 'sessionful', BOB)));
    rs.forEach((r, i) => {
      assert.equal(r.status, 200, r.text);
      const res = r.json?.result ?? H.parseSse(r.text).map((e) => JSON.parse(e.data)).find((m) => m.id === i + 1)?.result;
      assert.equal(res?.resultType, 'complete', r.text);
      assert.match(H.resultText(res), new RegExp(`m${i + 1}`), r.text);
    });
    const after = (await gw.metrics())['tollgate_upstream_calls_total'];
    // one initialize, one notifications/initialized, five calls: no second upstream session
    assert.equal(after - before, 7, `upstream calls ${before} -> ${after}`);
  });

  test('bridged: an upstream that cannot be reached gives -32004 with the reason, and the next request tries again', async () => {
    for (let i = 0; i < 2; i++) {
      const r = await post(call('echo', { message: 'x' }), std('tools/call', 'echo'), 'dead');
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json?.error?.code, -32004, r.text);
      assert.match(r.json.error.message, /upstream session unavailable/, r.text);
    }
    // The reason in words, as the OS says it, never a bare errno value (err=-111).
    await gw.waitForLog(/upstream protocol probe failed.*upstream=dead .*error="connection refused"/);
    const lines = gw.stderr().split('\n').filter((l) => l.includes('upstream=dead'));
    assert.ok(lines.some((l) => /upstream connect failed.*error="connection refused"/.test(l)), lines.join('\n'));
    assert.ok(!lines.some((l) => /\b(err|rc|status)=-\d/.test(l)), lines.join('\n'));
  });

  test('bridged: subscriptions/listen on a 2025 upstream session: acknowledged first, list changes tagged with the listen id', async () => {
    const ac = new AbortController();
    cleanup.add(() => ac.abort());
    const res = await fetch(url('as2025'), {
      method: 'POST', signal: ac.signal,
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${BOB}`,
        ...std('subscriptions/listen') },
      body: JSON.stringify({ jsonrpc: '2.0', id: 'L1', method: 'subscriptions/listen',
        params: { notifications: { toolsListChanged: true, resourceSubscriptions: ['file:///x'] }, _meta: META } }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /text\/event-stream/);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    const next = async () => {
      for (;;) {
        const end = buf.indexOf('\n\n');
        if (end >= 0) {
          const one = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const d = /^data: (.*)$/m.exec(one);
          if (d) return JSON.parse(d[1]);
          continue;
        }
        const { value, done } = await reader.read();
        if (done) throw new Error('the listen stream ended');
        buf += dec.decode(value, { stream: true });
      }
    };
    const ack = await next();
    assert.equal(ack.method, 'notifications/subscriptions/acknowledged', JSON.stringify(ack));
    assert.equal(ack.params._meta['io.modelcontextprotocol/subscriptionId'], 'L1');
    assert.equal(ack.params.notifications.toolsListChanged, true);
    assert.deepEqual(ack.params.notifications.resourceSubscriptions, ['file:///x'], 'subscribed to on the upstream session');
    // The upstream session's GET stream is opened for it; a tool change then reaches the listen.
    // Until the upstream session's GET stream is attached a change can go unheard: change the
    // tools again until one arrives, with one read pending throughout (no event is lost to it).
    let changed;
    const pending = next().then((m) => { changed = m; });
    await H.waitUntil(async () => {
      if (changed !== undefined)
        return true;
      const r = await post(call('notify_change', {}), std('tools/call', 'notify_change'), 'as2025', BOB);
      assert.equal(r.status, 200, r.text);
      await Promise.race([pending, H.sleep(500)]);
      return changed !== undefined;
    }, { timeout: 15000, interval: 10, what: 'notifications/tools/list_changed on the listen stream' });
    assert.equal(changed.method, 'notifications/tools/list_changed', JSON.stringify(changed));
    assert.equal(changed.params._meta['io.modelcontextprotocol/subscriptionId'], 'L1');
    // A resource it subscribed to changes: resources/updated, tagged; one it did not: nothing.
    const r = await post(call('touch_resource', { uri: 'file:///other' }), std('tools/call', 'touch_resource'), 'as2025', BOB);
    assert.equal(r.json?.error, undefined, r.text);
    const r2 = await post(call('touch_resource', { uri: 'file:///x' }), std('tools/call', 'touch_resource'), 'as2025', BOB);
    assert.equal(r2.json?.error, undefined, r2.text);
    let upd = await next();
    while (upd.method === 'notifications/tools/list_changed') upd = await next(); // (a late one from the loop above)
    assert.equal(upd.method, 'notifications/resources/updated', JSON.stringify(upd));
    assert.equal(upd.params.uri, 'file:///x', 'only the resource this listen asked for');
    assert.equal(upd.params._meta['io.modelcontextprotocol/subscriptionId'], 'L1');
    ac.abort();
  });

  test('tollgate -t says that scope "session" counts per grant for stateless requests', () => {
    const pol = path.join(dir, 'session-scope.json');
    fs.writeFileSync(pol, JSON.stringify({ version: '1', default: 'allow', tools: { echo: { limits: [{ counter: 'e', window: 'minute', max: 3, scope: 'session' }] } } }));
    const side = H.makeTempDir(cleanup); // not the running gateway's conf
    const conf = H.writeConf(side, { ...confOpts, upstreams: [{ ...confOpts.upstreams[0], policy: pol }] });
    const r = spawnSync(H.tollgateBin(), ['-t', '-c', conf], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr + r.stdout);
    assert.match(r.stdout, /upstream cowork: 1 counter\(s\) with scope "session" count per grant for stateless \(2026-07-28\) requests/);
    const plain = spawnSync(H.tollgateBin(), ['-t', '-c', H.writeConf(H.makeTempDir(cleanup), confOpts)], { encoding: 'utf8' });
    assert.equal(plain.status, 0, plain.stderr + plain.stdout);
    assert.doesNotMatch(plain.stdout, /scope "session"/);
  });

  test('listens: keepalive comments on an idle one, and at most limits.listens_per_grant per grant and upstream', async () => {
    const open = async () => {
      const ac = new AbortController();
      cleanup.add(() => ac.abort());
      const res = await fetch(url('as2025'), {
        method: 'POST', signal: ac.signal,
        headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${TOKEN}`,
          ...std('subscriptions/listen') },
        body: JSON.stringify({ jsonrpc: '2.0', id: 'K', method: 'subscriptions/listen', params: { notifications: { toolsListChanged: true }, _meta: META } }),
      });
      return { res, ac };
    };
    const a = await open();
    assert.equal(a.res.status, 200);
    const reader = a.res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    while (!buf.includes(': keepalive')) { // limits.sse_keepalive_ms = 1000 here
      const { value, done } = await reader.read();
      assert.ok(!done, buf);
      buf += dec.decode(value, { stream: true });
    }
    const b = await open();
    assert.equal(b.res.status, 200);
    const c = await open();
    assert.equal(c.res.status, 429, 'the third listen of alice on as2025 (limits.listens_per_grant = 2)');
    const body = await c.res.json();
    assert.equal(body.error.code, -32004);
    assert.match(body.error.message, /listens_per_grant/);
    a.ac.abort();
    b.ac.abort();
    // Once they are gone, a listen is served again.
    await H.waitUntil(async () => {
      const d = await open();
      d.ac.abort();
      return d.res.status === 200;
    }, { what: 'a listen served after the others ended' });
  });

  test('server/discover for a local-initialize upstream: answered by the gateway, private, not cached', async () => {
    const r = await post({ jsonrpc: '2.0', id: 'd', method: 'server/discover', params: { _meta: META } }, std('server/discover'));
    assert.equal(r.status, 200, r.text);
    const res = r.json?.result;
    assert.equal(res?.resultType, 'complete', r.text);
    assert.deepEqual(res.supportedVersions, [MODERN]);
    assert.equal(res.ttlMs, 0);
    assert.equal(res.cacheScope, 'private');
    assert.ok(res.capabilities?.tools, r.text);
    assert.equal(res._meta?.['io.modelcontextprotocol/serverInfo']?.name, 'tollgate/cowork');
  });

  test('headers never talk past the body: Mcp-Name naming another tool, base64 variants, duplicates, case -> -32020', async () => {
    const before = upstreamCalls();
    const cases = [
      ['Mcp-Name of an allowed tool over a body calling another', call('execute_code'), std('tools/call', 'echo')],
      ['base64 Mcp-Name of another tool', call('execute_code'), std('tools/call', '=?base64?ZWNobw==?=')],
      ['broken base64', call('echo'), std('tools/call', '=?base64?ZW*obw==?=')],
      ['upper-case marker', call('echo'), std('tools/call', '=?BASE64?ZWNobw==?=')],
      ['comma-joined names', call('echo'), std('tools/call', 'echo, execute_code')],
      ['Mcp-Method in another case', call('echo'), { ...std('tools/call', 'echo'), 'Mcp-Method': 'Tools/Call' }],
      ['a version header that disagrees with _meta', call('echo'), { ...std('tools/call', 'echo'), 'MCP-Protocol-Version': '2025-11-25' }],
      ['no Mcp-Name', call('echo'), std('tools/call')],
      ['no Mcp-Method', call('echo'), { 'MCP-Protocol-Version': MODERN, 'Mcp-Name': 'echo' }],
    ];
    for (const name of ['cowork', 'sessionful']) {
      for (const [what, body, headers] of cases) {
        const r = await post(body, headers, name);
        assert.equal(r.status, 400, `${name}, ${what}: ${r.text}`);
        assert.equal(r.json?.error?.code, -32020, `${name}, ${what}: ${r.text}`);
      }
    }
    assert.equal(upstreamCalls(), before, 'no refused request reached the upstream');
  });

  test('a stateless tools/call through the policy: echo runs, execute_code is denied (-32001) and never sent', async () => {
    const before = upstreamCalls();
    for (const name of ['  echo ', '=?base64?ZWNobw==?=', 'echo']) { // whitespace and base64 forms of the same name
      const r = await post(call('echo', { text: 'stateless' }), std('tools/call', name));
      assert.equal(r.status, 200, `Mcp-Name ${JSON.stringify(name)}: ${r.text}`);
      assert.equal(r.json?.id, 7);
      assert.equal(r.json?.result?.resultType, 'complete', r.text);
      assert.equal(H.resultText(r.json.result), 'stateless');
    }
    assert.equal(upstreamCalls(), before + 3);
    const d = await post(call('execute_code', { language: 'python', code: '1' }), std('tools/call', 'execute_code'));
    assert.equal(d.status, 200, d.text);
    assert.equal(d.json?.error?.code, -32001, d.text);
    assert.equal(upstreamCalls(), before + 3, 'the denied call never reached the upstream');
    // A 2026 request carrying a 2025 session id is still served statelessly (the id is ignored).
    const s = await post(call('echo', { text: 'x' }), { ...std('tools/call', 'echo'), 'Mcp-Session-Id': 'AAAAAAAAAAAAAAAAAAAAAA' });
    assert.equal(s.json?.result?.resultType, 'complete', s.text);
  });

  test('two stateless calls of one grant with the same id, at once: both answered', async () => {
    // The first is still with the upstream (slow) when the second, with the same id, arrives.
    const sent = (await gw.metrics()).tollgate_upstream_calls_total ?? 0;
    const slow = post({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'slow', arguments: { seconds: 1 }, _meta: META } },
      std('tools/call', 'slow'));
    await gw.waitForMetric('tollgate_upstream_calls_total', (v) => v > sent, { what: 'the slow call to be with the upstream' });
    const b = await post({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text: 'second' }, _meta: META } },
      std('tools/call', 'echo'));
    assert.equal(H.resultText(b.json?.result), 'second', b.text);
    const a = await slow;
    assert.equal(a.json?.result?.resultType, 'complete', a.text);
  });

  test('tools/list: hidden tools filtered, a complete, private, uncached result', async () => {
    const r = await post({ jsonrpc: '2.0', id: 'l', method: 'tools/list', params: { _meta: META } }, std('tools/list'));
    assert.equal(r.status, 200, r.text);
    const res = r.json?.result;
    assert.deepEqual(res?.tools?.map((t) => t.name).sort(), ['echo', 'slow'], r.text);
    assert.equal(res.resultType, 'complete');
    assert.equal(res.ttlMs, 0);
    assert.equal(res.cacheScope, 'private');
  });

  test('a non-standard method the policy does not name -> 404/-32601 (as a server answers an unknown method), never sent; one it names is forwarded', async () => {
    const sent = (method) => standin.records().filter((r) => r.http && r.msg?.method === method).length;
    const r = await post({ jsonrpc: '2.0', id: 'u', method: 'unknown/method', params: { _meta: META } }, std('unknown/method'));
    assert.equal(r.status, 404, r.text);
    assert.equal(r.json?.id, 'u', r.text);
    assert.equal(r.json?.error?.code, -32601, r.text);
    assert.equal(sent('unknown/method'), 0, 'the refused method never reached the upstream');
    // "methods": ["x/named"] in the policy: the policy decides, and it is forwarded (the stand-in
    // itself answers -32601, but only after it received it).
    const before = sent('x/named');
    const n = await post({ jsonrpc: '2.0', id: 'n', method: 'x/named', params: { _meta: META } }, std('x/named'));
    assert.equal(n.json?.id, 'n', n.text);
    assert.notEqual(n.json?.error?.code, -32001, n.text);
    assert.equal(sent('x/named'), before + 1, `x/named reached the upstream: ${n.text}`);
  });

  test('removed methods -> 404/-32601; a claim without clientCapabilities -> 400/-32602', async () => {
    for (const method of ['ping', 'initialize', 'logging/setLevel', 'resources/subscribe']) {
      const r = await post({ jsonrpc: '2.0', id: 1, method, params: { _meta: META } }, std(method));
      assert.equal(r.status, 404, `${method}: ${r.text}`);
      assert.equal(r.json?.error?.code, -32601, `${method}: ${r.text}`);
    }
    const r = await post({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN } } },
      std('tools/list'));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json?.error?.code, -32602, r.text);
  });

  test('the SDK 2.4.0 client pinned to 2026-07-28: discover, list, call, and the policy', async () => {
    const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    const client = new Client({ name: 'era-pin', version: '1.0.0' }, { versionNegotiation: { mode: { pin: MODERN } } });
    const transport = new StreamableHTTPClientTransport(new URL(url()), { requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } } });
    cleanup.add(() => client.close().catch(() => {}));
    await client.connect(transport);
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ['echo', 'slow']);
    const r = await client.callTool({ name: 'echo', arguments: { text: 'pinned 2026' } });
    assert.equal(H.resultText(r), 'pinned 2026');
    await assert.rejects(client.callTool({ name: 'execute_code', arguments: { language: 'python', code: '1' } }),
      (e) => { assert.match(String(e?.message ?? e), /denied|not allowed|-32001|policy/i, String(e)); return true; });
    await client.close();
  });

  test('the SDK 2.4.0 client in auto mode probes, finds 2026-07-28 served, and works', async () => {
    const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    const client = new Client({ name: 'era-auto', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    const transport = new StreamableHTTPClientTransport(new URL(url()), { requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } } });
    cleanup.add(() => client.close().catch(() => {}));
    await client.connect(transport); // cowork: initialize = "local", served in the 2026 era
    const r = await client.callTool({ name: 'echo', arguments: { text: 'auto' } });
    assert.equal(H.resultText(r), 'auto');
    await client.close();
  });

  test('bridged: server-everything\'s elicitation/create reaches a pinned 2026 client as input_required, its retry answers it', async () => {
    const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    const client = new Client({ name: 'era-elicit', version: '1.0.0' },
      { versionNegotiation: { mode: { pin: MODERN } }, capabilities: { elicitation: {} } });
    let asked = 0;
    client.setRequestHandler('elicitation/create', async (req) => {
      asked++;
      assert.ok(req.params?.requestedSchema?.properties?.name, JSON.stringify(req.params));
      return { action: 'accept', content: { name: 'Ada Lovelace', check: true, email: 'ada@example.com', integer: 7, number: 1.5, untitledSingleSelectEnum: 'option1', titledSingleSelectEnum: 'value1', legacyTitledEnum: 'opt1', untitledMultipleSelectEnum: ['option1'], titledMultipleSelectEnum: ['value1'] } };
    });
    const transport = new StreamableHTTPClientTransport(new URL(url('sessionful')), { requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } } });
    cleanup.add(() => client.close().catch(() => {}));
    await client.connect(transport);
    const r = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} }, undefined, { timeout: 30000 });
    assert.equal(asked, 1, 'the client was asked once, through input_required');
    assert.match(H.resultText(r), /Ada Lovelace/, JSON.stringify(r));
    await gw.waitForLog(/server request held for a 2026 client's retry/);
    await client.close();
  });

  test('bridged: a retry naming a held call with another grant\'s envelope is refused, the held call is untouched', async () => {
    // bob asks for the elicitation; alice replays bob's requestState: it was sealed for bob.
    const first = await post({ jsonrpc: '2.0', id: 40, method: 'tools/call', params: { name: 'trigger-elicitation-request', arguments: {},
      _meta: { ...META, 'io.modelcontextprotocol/clientCapabilities': { elicitation: {} } } } },
    std('tools/call', 'trigger-elicitation-request'), 'sessionful', BOB);
    assert.equal(first.status, 200, first.text);
    const res = first.json?.result ?? H.parseSse(first.text).map((e) => JSON.parse(e.data)).find((m) => m.id === 40)?.result;
    assert.equal(res?.resultType, 'input_required', first.text);
    const state = res.requestState;
    const retry = (token) => post({ jsonrpc: '2.0', id: 41, method: 'tools/call', params: { name: 'trigger-elicitation-request', arguments: {},
      inputResponses: { 'input-1': { action: 'decline' } }, requestState: state,
      _meta: { ...META, 'io.modelcontextprotocol/clientCapabilities': { elicitation: {} } } } },
    std('tools/call', 'trigger-elicitation-request'), 'sessionful', token);
    const foreign = await retry(TOKEN);
    assert.equal(foreign.json?.error?.code, -32602, foreign.text);
    const own = await retry(BOB);
    const done = own.json ?? H.parseSse(own.text).map((e) => JSON.parse(e.data)).find((m) => m.id === 41);
    assert.equal(done?.id, 41, own.text);
    assert.ok(done.result, own.text); // the held call answered bob's retry (declined)
  });

  test('the SDK 2.4.0 client pinned to 2026-07-28 through the bridge to server-everything: list, call, prompt, resource', async () => {
    const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    const client = new Client({ name: 'era-pin2', version: '1.0.0' }, { versionNegotiation: { mode: { pin: MODERN } } });
    const transport = new StreamableHTTPClientTransport(new URL(url('sessionful')), { requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } } });
    cleanup.add(() => client.close().catch(() => {}));
    await client.connect(transport);
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === 'echo'), JSON.stringify(tools.map((t) => t.name)));
    const r = await client.callTool({ name: 'echo', arguments: { message: 'bridged' } });
    assert.match(H.resultText(r), /bridged/);
    const { prompts } = await client.listPrompts();
    assert.ok(prompts.length > 0);
    const { resources } = await client.listResources();
    assert.ok(resources.length > 0);
    const rr = await client.readResource({ uri: resources[0].uri });
    assert.ok(rr.contents.length > 0);
    await client.close();
  });

  test('a reload that moves the upstreams: a grant\'s stateless session stays with its own upstream', async () => {
    const ok = await post(call('echo', { text: 'before' }), std('tools/call', 'echo'));
    assert.equal(H.resultText(ok.json?.result), 'before', ok.text);
    // A new upstream first: "cowork" moves from index 0 to 1, and "fresh" takes index 0.
    const headers = { Authorization: `Bearer ${UPSTREAM_TOKEN}` };
    const policy = confOpts.upstreams[0].policy;
    H.writeConf(dir, {
      ...confOpts,
      upstreams: [{ name: 'fresh', url: standin2.url, initialize: 'local', headers, policy }, ...confOpts.upstreams],
    });
    const n = (gw.stderr().match(/configuration reloaded/g) ?? []).length;
    process.kill(gw.proc.pid, 'SIGHUP');
    assert.ok(await H.waitFor(() => (gw.stderr().match(/configuration reloaded/g) ?? []).length > n, { timeout: 5000 }),
      'tollgate logged "configuration reloaded"');
    const calls2 = () => standin2.records().filter((r) => r.http && r.msg?.method === 'tools/call').length;
    const c1 = upstreamCalls(), c2 = calls2();
    const f = await post(call('echo', { text: 'to fresh' }), std('tools/call', 'echo'), 'fresh');
    assert.equal(H.resultText(f.json?.result), 'to fresh', f.text);
    const c = await post(call('echo', { text: 'to cowork' }), std('tools/call', 'echo'), 'cowork');
    assert.equal(H.resultText(c.json?.result), 'to cowork', c.text);
    await H.waitFor(() => calls2() > c2 && upstreamCalls() > c1, { timeout: 5000 });
    assert.equal(calls2(), c2 + 1, 'the call to "fresh" reached its own stand-in');
    assert.equal(upstreamCalls(), c1 + 1, 'the call to "cowork" reached its own stand-in');
  });
});
