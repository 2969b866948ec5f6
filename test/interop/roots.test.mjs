// Pinned roots (upstreams[].roots, grants[].roots): the operator, not the client, says which
// folders a server may touch.
//
// The official filesystem server (@modelcontextprotocol/server-filesystem, over stdio, started
// with no folders of its own) takes its allowed folders from its client's roots: it asks
// roots/list once initialized and again on every notifications/roots/list_changed. Behind
// tollgate with roots pinned to folder A, a client that offers roots [B] can list and read in A
// only, never in B; its roots/list handler is never called; its list_changed goes nowhere. A
// client that declares no roots at all (the MCP Inspector CLI) still gets a server working in A,
// because the initialize the server sees declares roots; so does a client behind mcp-remote, and a
// 2026-07-28 client. A grant's roots override the upstream's.
// Without roots pinned, the client's roots reach the server as before.
//
// The same holds on the other paths a roots/list takes, with the dual-era fixture's
// test_input_required_result_list_roots tool (it asks for roots and answers "Roots: <uris>"): a
// 2025 session (a real server request on the call's stream), a 2026-07-28 client (an
// input_required round the gateway answers itself at the retry), and a 2025 client of a
// 2026-07-28-only server (the gateway's own input round).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import * as H from './lib/harness.mjs';
import { startEra2026 } from './lib/conformance2026.mjs';

const FS_SERVER = path.join(H.NODE_MODULES, '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js');
const INSPECTOR = path.join(H.NODE_MODULES, '.bin', 'mcp-inspector-cli');
const REMOTE = path.join(H.NODE_MODULES, 'mcp-remote', 'dist', 'proxy.js');
const HOSTILE = path.join(H.TEST_DIR, 'fixtures', 'hostile', 'hostile.mjs');
const CAROL = H.randomToken();

const cleanup = new H.Cleanup();
let gw, dir, A, B, C, dual, strict, writeConf;
const url = (name) => `http://127.0.0.1:${gw.plainPort}/${name}/mcp`;
const logs = () => ({ 'tollgate stderr': gw?.stderr(), 'dual fixture': dual?.output(), 'strict fixture': strict?.output() });
const test = (name, fn) => it(name, H.withLogs(logs, fn));

function folder(name) {
  const d = path.join(dir, name);
  fs.mkdirSync(d);
  fs.writeFileSync(path.join(d, `${name}.txt`), `in ${name}`);
  return fs.realpathSync(d); /* what the server reports: symlinks resolved */
}
const uri = (d) => pathToFileURL(d).href;

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-roots-');
  A = folder('a');
  B = folder('b');
  C = folder('c');
  dual = await startEra2026({ cleanup });
  strict = await startEra2026({ cleanup, args: ['--legacy', 'reject'] });
  const fsCommand = [process.execPath, FS_SERVER]; /* no folders: only roots give it any */
  writeConf = (openRoots) => H.writeConf(dir, {
    admin: true,
    grants: [
      { name: 'local', anonymous: true },
      { name: 'carol', token_sha256: H.sha256hex(CAROL), roots: [uri(C)] },
    ],
    upstreams: [
      { name: 'fs', command: fsCommand, roots: [uri(A)] },
      { name: 'open', command: fsCommand, ...(openRoots ? { roots: openRoots } : {}) },
      { name: 'dual', url: dual.url, roots: [uri(A)] },
      { name: 'strict', url: strict.url, roots: [uri(A)] },
      { name: 'odd', command: [process.execPath, HOSTILE, '--stdio'], roots: [uri(A)] },
    ],
  });
  gw = await H.startTollgate(writeConf(null), { cleanup, admin: true });
});

after(async () => {
  await cleanup.run();
  gw?.assertNoSanitizerReport();
});

/** list_allowed_directories through the MCP Inspector CLI (no roots capability), as text. */
async function inspectorAllowed(target) {
  const r = await new Promise((resolve, reject) => {
    const child = spawn(INSPECTOR, ['--cli', target, '--transport', 'http', '--method', 'tools/call',
      '--tool-name', 'list_allowed_directories'], {
      // Inspector CLI 1.0.3 imports its package.json as "../package.json" if that exists from
      // the working directory, else "../../package.json" (its monorepo layout, not npm's).
      cwd: path.join(H.TEST_DIR, 'interop'), stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '', stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => { stdout += d; });
    child.stderr.setEncoding('utf8').on('data', (d) => { stderr += d; });
    const t = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`inspector did not end\n${stderr}`)); }, H.scaled(60000));
    child.on('error', reject);
    child.on('close', (code) => { clearTimeout(t); resolve({ code, stdout, stderr }); });
  });
  assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
  return JSON.parse(r.stdout).content.map((c) => c.text).join('\n');
}

async function rootsAnswered() {
  const res = await fetch(`http://127.0.0.1:${gw.adminPort}/metrics`);
  return H.parseMetrics(await res.text()).tollgate_roots_answered_total;
}

/** An SDK 1.x client that offers roots [offered] (with listChanged) and counts roots/list calls. */
async function rootsClient(name, offered, { token } = {}) {
  const { types } = await H.loadSdk();
  const asked = { n: 0 };
  const c = await H.connectClient(url(name), {
    cleanup,
    headers: token ? { Authorization: `Bearer ${token}` } : undefined,
    capabilities: { roots: { listChanged: true } },
    handlers: [[types.ListRootsRequestSchema, async () => {
      asked.n++;
      return { roots: offered.map((d) => ({ uri: uri(d), name: path.basename(d) })) };
    }]],
  });
  return { ...c, asked };
}

/** An SDK 2.x client pinned to 2026-07-28 that offers roots [B] and counts roots/list calls. */
async function rootsClient2026(name) {
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const client = new Client({ name: 'roots-2026', version: '1.0.0' }, {
    capabilities: { roots: { listChanged: true } },
    versionNegotiation: { mode: { pin: '2026-07-28' } },
  });
  const asked = { n: 0 };
  client.setRequestHandler('roots/list', async () => {
    asked.n++;
    return { roots: [{ uri: uri(B) }] };
  });
  cleanup.add(() => client.close().catch(() => {}));
  await client.connect(new StreamableHTTPClientTransport(new URL(url(name))));
  return { client, asked };
}

const tool = async (client, name, args = {}) => client.callTool({ name, arguments: args });
const allowed = async (client) => H.resultText(await tool(client, 'list_allowed_directories'));

describe('pinned roots, the filesystem server over stdio', () => {
  test('a client offering roots [B] lists and reads in A only; it is never asked for its roots', async () => {
    const { client, asked } = await rootsClient('fs', [B]);
    await H.waitUntil(async () => (await allowed(client)).includes(A), { what: 'the server working in A' });
    const dirs = await allowed(client);
    assert.ok(!dirs.includes(B), dirs);
    assert.equal(H.resultText(await tool(client, 'read_text_file', { path: path.join(A, 'a.txt') })), 'in a');
    const listing = H.resultText(await tool(client, 'list_directory', { path: A }));
    assert.match(listing, /a\.txt/);
    for (const p of [path.join(B, 'b.txt'), B]) {
      const r = await tool(client, p === B ? 'list_directory' : 'read_text_file', { path: p });
      assert.equal(r.isError, true, `${p}: ${JSON.stringify(r)}`);
      assert.match(H.resultText(r), /Access denied|outside allowed/i);
      assert.doesNotMatch(H.resultText(r), /in b/);
    }
    assert.equal(asked.n, 0, 'the client\'s roots/list handler is never called');
  });

  test('the client\'s notifications/roots/list_changed goes nowhere: the server never asks again', async () => {
    const { client, asked } = await rootsClient('fs', [B]);
    await H.waitUntil(async () => (await allowed(client)).includes(A), { what: 'the server working in A' });
    const before = await rootsAnswered();
    assert.ok(before >= 1, `the server's roots/list was answered by the gateway (${before})`);
    await client.sendRootsListChanged();
    // The server would ask at once, before it answers the next call on the same pipe.
    const dirs = await allowed(client);
    assert.ok(dirs.includes(A) && !dirs.includes(B), dirs);
    assert.equal(await rootsAnswered(), before, 'no roots/list followed the client\'s list_changed');
    assert.equal(asked.n, 0);
  });

  test('a client that declares no roots (the MCP Inspector CLI) gets a server working in exactly A', async () => {
    // Each run is a new session; the server sets its folders a moment after it is initialized
    // (it asks, then resolves them), so an early run may see none yet, never B.
    await H.waitUntil(async () => {
      const text = await inspectorAllowed(url('fs'));
      assert.ok(!text.includes(B), text);
      return text.includes(A);
    }, { what: 'the Inspector CLI seeing A' });
  });

  test('through mcp-remote (stdio to Streamable HTTP): the client\'s roots never reach the server', async () => {
    const { types } = await H.loadSdk();
    const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
    const client = new (await H.loadSdk()).Client({ name: 'roots-remote', version: '1.0.0' },
      { capabilities: { roots: { listChanged: true } } });
    let asked = 0;
    client.setRequestHandler(types.ListRootsRequestSchema, async () => {
      asked++;
      return { roots: [{ uri: uri(B) }] };
    });
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [REMOTE, url('fs'), '--transport', 'http-only', '--allow-http', '--silent'],
      env: { ...process.env, MCP_REMOTE_CONFIG_DIR: path.join(dir, 'mcp-remote') },
      stderr: 'pipe',
    });
    cleanup.add(() => client.close().catch(() => {}));
    await client.connect(transport);
    await H.waitUntil(async () => (await allowed(client)).includes(A), { what: 'the server working in A' });
    await client.sendRootsListChanged();
    const dirs = await allowed(client);
    assert.ok(dirs.includes(A) && !dirs.includes(B), dirs);
    const r = await tool(client, 'read_text_file', { path: path.join(B, 'b.txt') });
    assert.equal(r.isError, true, JSON.stringify(r));
    assert.equal(asked, 0);
  });

  test('a 2026-07-28 client of the stdio server: the server still gets exactly A', async () => {
    const { client, asked } = await rootsClient2026('fs');
    await H.waitUntil(async () => {
      const dirs = H.resultText(await client.callTool({ name: 'list_allowed_directories', arguments: {} }));
      assert.ok(!dirs.includes(B), dirs);
      return dirs.includes(A);
    }, { what: 'the server working in A' });
    assert.equal(asked.n, 0);
  });

  test('a grant\'s roots override the upstream\'s', async () => {
    const { client, asked } = await rootsClient('fs', [B], { token: CAROL });
    await H.waitUntil(async () => (await allowed(client)).includes(C), { what: 'the server working in C' });
    const dirs = await allowed(client);
    assert.ok(!dirs.includes(A) && !dirs.includes(B), dirs);
    assert.equal(asked.n, 0);
  });

  test('without roots pinned, the client\'s roots reach the server as before', async () => {
    const { client, asked } = await rootsClient('open', [B]);
    // Its first roots/list may come before the client's stream is open (then it is refused); the
    // client's list_changed makes it ask again once the stream is there.
    await H.waitUntil(async () => {
      await client.sendRootsListChanged();
      return (await allowed(client)).includes(B);
    }, { what: 'the server working in the client\'s root B' });
    assert.ok(asked.n >= 1, 'the client was asked');
  });
});

describe('pinned roots on the other paths a roots/list takes', () => {
  const LIST_ROOTS = 'test_input_required_result_list_roots';

  test('a 2025 session: the server request on the call\'s stream is answered by the gateway', async () => {
    const { client, asked } = await rootsClient('dual', [B]);
    const text = H.resultText(await tool(client, LIST_ROOTS));
    assert.equal(text, `Roots: ${uri(A)}`);
    assert.equal(asked.n, 0);
  });

  test('a 2025 client of a 2026-07-28-only server: the gateway\'s input round takes the pinned roots', async () => {
    const { client, asked } = await rootsClient('strict', [B]);
    const text = H.resultText(await tool(client, LIST_ROOTS));
    assert.equal(text, `Roots: ${uri(A)}`);
    assert.equal(asked.n, 0);
  });

  test('a 2026-07-28 client: the input_required round carries the pinned roots, the client is never asked', async () => {
    for (const name of ['dual', 'strict']) {
      const { client, asked } = await rootsClient2026(name);
      const r = await client.callTool({ name: LIST_ROOTS, arguments: {} });
      assert.equal(H.resultText(r), `Roots: ${uri(A)}`, `${name}: ${JSON.stringify(r)}`);
      assert.equal(asked.n, 0, name);
    }
  });
});

describe('pinned roots, a server that asks oddly', () => {
  // A roots/list with id null, or as a notification, is neither answered with the pins nor
  // relayed: the client sees no roots/list at all, and the well-formed one gets the pins.
  test('id null and no id: dropped; the request with an id: the pinned roots', async () => {
    const s = await H.rawInitialize(fetch, url('odd'), {});
    const r = await H.postRaw(fetch, url('odd'), { jsonrpc: '2.0', id: 2, method: 'tools/call',
      params: { name: 'sample', arguments: { method: 'roots/list', odd: true } } }, s.headers);
    assert.equal(r.status, 200, r.text);
    const relayed = r.messages.filter((m) => m.method === 'roots/list');
    assert.deepEqual(relayed, [], `the client was sent ${JSON.stringify(relayed)}`);
    const answer = r.messages.find((m) => m.id === 2);
    assert.deepEqual(JSON.parse(answer.result.content[0].text).result, { roots: [{ uri: uri(A) }] });
  });
});

describe('pinned roots added by a reload', () => {
  // The server of a session that began before the pins holds its client's roots; the reload
  // tells it that the roots changed (notifications/roots/list_changed), so it asks again and
  // gets the pins. Without that, the client's roots stayed until the session ended.
  test('a running session\'s server is told, asks again, and works in the pinned folder only', async () => {
    const { client, asked } = await rootsClient('open', [B]);
    await H.waitUntil(async () => { // as above: the first roots/list may come before the stream
      await client.sendRootsListChanged();
      return (await allowed(client)).includes(B);
    }, { what: 'the server working in B' });
    const before = asked.n;
    writeConf([uri(A)]);
    const n = (gw.stderr().match(/configuration reloaded/g) ?? []).length;
    process.kill(gw.proc.pid, 'SIGHUP');
    await H.waitUntil(() => (gw.stderr().match(/configuration reloaded/g) ?? []).length > n,
      { what: 'tollgate logged "configuration reloaded"' });
    await H.waitUntil(async () => { const d = await allowed(client); return d.includes(A) && !d.includes(B); },
      { what: 'the server working in A, not B, after the reload' });
    assert.equal(asked.n, before, 'the client was not asked again: the pins answered');
    await client.close();
  });
});
