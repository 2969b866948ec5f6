// MCP 2026-07-28 requests, before the bridge between the eras: tollgate serves 2025 sessions,
// and answers a 2026-era request (classified by its body) with 400/-32022 listing the 2025
// versions it serves, after checking every Mcp-* header against the body (400/-32020). The
// official SDK 2.4.0 client in `auto` mode then falls back to initialize and works; pinned to
// 2026-07-28 it fails with a clear error; and nothing of a 2026 request reaches the upstream.
//
//   node --test test/interop/era2026.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import * as H from './lib/harness.mjs';

H.requireNodeModules();

const cleanup = new H.Cleanup();
let dir;
let gw;
let standin;
const TOKEN = 'client-' + H.randomToken();
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
const url = () => `http://127.0.0.1:${gw.plainPort}/cowork/mcp`;
const upstreamCalls = () => standin.records().filter((r) => r.http && r.msg?.method === 'tools/call').length;

async function post(body, headers = {}) {
  const res = await fetch(url(), {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      Authorization: `Bearer ${TOKEN}`, ...headers,
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
  const conf = H.writeConf(dir, {
    listeners: [{}],
    grants: [{ name: 'alice', token_sha256: H.sha256hex(TOKEN) }],
    upstreams: [{
      name: 'cowork', url: standin.url, default: true, initialize: 'local',
      headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` },
    }],
  });
  gw = await H.startTollgate(conf, { cleanup, listeners: 1 });
});

after(() => cleanup.run());

describe('2026-07-28 requests before the bridge', () => {
  test('server/discover, as the SDK probes: 400/-32022 listing the 2025 versions served', async () => {
    const r = await post({ jsonrpc: '2.0', id: 'server-discover-probe-1', method: 'server/discover', params: { _meta: META } },
      std('server/discover'));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json?.id, 'server-discover-probe-1');
    assert.equal(r.json?.error?.code, -32022, r.text);
    assert.deepEqual(r.json.error.data, { supported: ['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'], requested: MODERN });
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
    for (const [what, body, headers] of cases) {
      const r = await post(body, headers);
      assert.equal(r.status, 400, `${what}: ${r.text}`);
      assert.equal(r.json?.error?.code, -32020, `${what}: ${r.text}`);
    }
    // Whitespace around a value is not part of it, and a matching base64 name is accepted as far
    // as the headers go (then -32022: the era is not served yet).
    for (const name of ['  echo ', '=?base64?ZWNobw==?=']) {
      const r = await post(call('echo'), std('tools/call', name));
      assert.equal(r.json?.error?.code, -32022, `Mcp-Name ${JSON.stringify(name)}: ${r.text}`);
    }
    // A 2026 request carrying a 2025 session id is still a 2026 request: it reaches nothing.
    const s = await post(call('echo'), { ...std('tools/call', 'echo'), 'Mcp-Session-Id': 'AAAAAAAAAAAAAAAAAAAAAA' });
    assert.equal(s.json?.error?.code, -32022, s.text);
    assert.equal(upstreamCalls(), before, 'no 2026 request reached the upstream');
  });

  test('a 2026 claim without clientCapabilities -> 400/-32602', async () => {
    const r = await post({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN } } },
      std('tools/list'));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json?.error?.code, -32602, r.text);
  });

  test('the SDK 2.4.0 client in auto mode falls back to initialize and works', async () => {
    const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    const client = new Client({ name: 'era-auto', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    const transport = new StreamableHTTPClientTransport(new URL(url()), { requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } } });
    cleanup.add(() => client.close().catch(() => {}));
    await client.connect(transport);
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === 'echo'), JSON.stringify(tools.map((t) => t.name)));
    const r = await client.callTool({ name: 'echo', arguments: { text: 'auto fell back' } });
    assert.equal(H.resultText(r), 'auto fell back');
    await client.close();
  });

  test('the SDK 2.4.0 client pinned to 2026-07-28 fails to connect, with the version error', async () => {
    const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    const client = new Client({ name: 'era-pin', version: '1.0.0' }, { versionNegotiation: { mode: { pin: MODERN } } });
    const transport = new StreamableHTTPClientTransport(new URL(url()), { requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } } });
    cleanup.add(() => client.close().catch(() => {}));
    await assert.rejects(client.connect(transport), (e) => {
      assert.match(String(e?.message ?? e) + JSON.stringify(e?.data ?? {}), /2026-07-28|-32022|version/i, String(e));
      return true;
    });
  });
});
