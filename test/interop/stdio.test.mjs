// stdio upstreams, as the first clients a user tries see them:
//   1. a child starts with a clean environment: PATH, HOME, LANG, LC_* and TZ from the gateway's,
//      what upstreams[].env sets and what upstreams[].env_pass names; never the gateway's own
//      variables (COWORK_TOKEN, a token the conf reads through ${VAR}, ASAN_OPTIONS, …). Seen
//      through the SDK client and the MCP Inspector CLI.
//   2. clients that never end their sessions (the SDK and the Inspector CLI send no DELETE) do not
//      lock a grant out at upstreams[].max_children: the longest-idle session of the same grant
//      whose client is gone gives up its child at once (its next request gets 404), one whose
//      client still holds a stream (mcp-remote's GET stream) or another grant's only once idle
//      limits.stdio_evict_idle_ms, a session with a call in flight never; counted in
//      tollgate_stdio_evictions_total. mcp-remote's sessions (GET streams open) keep their children
//      while fresh, give them up once idle, and its grant is served again.
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/stdio.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import * as H from './lib/harness.mjs';

H.requireNodeModules();

const FIXTURE = path.join(H.REPO_ROOT, 'test', 'fixtures', 'stdio-env', 'server.mjs');
const INSPECTOR_BUILD = path.join(H.NODE_MODULES, '@modelcontextprotocol', 'inspector-cli', 'build');
const TOKEN_A = H.randomToken();
const TOKEN_B = H.randomToken();
const TOKEN_C = H.randomToken();
const EVICT_IDLE_MS = H.scaled(4000);

const cleanup = new H.Cleanup();
let dir;
let gw;
const fetchFn = (...a) => fetch(...a);
let current = 'envy'; // the upstream the helpers below talk to
const url = (up = current) => `http://127.0.0.1:${gw.plainPort}/${up}/mcp`;
const bearer = (t) => ({ authorization: `Bearer ${t}` });

/** The Inspector CLI (1.0.3) against the gateway: one method, then it exits without DELETE. It
 * reads its package.json relative to the working directory, hence cwd. */
function inspector(token, ...args) {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [path.join(INSPECTOR_BUILD, 'index.js'), url(), '--transport', 'http',
      '--header', `Authorization: Bearer ${token}`, ...args], { cwd: INSPECTOR_BUILD, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    p.on('error', reject);
    p.on('exit', (code) => resolve({ code, out, err }));
  });
}

const toolText = (r) => JSON.parse(r.out).content.map((c) => c.text).join('');

/** A raw request on an existing session: { status, messages }. */
const onSession = (s, body) => H.postRaw(fetchFn, url(), body, s.headers);
const callBody = (id, name, args = {}) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

async function rawSession(token) {
  return H.rawInitialize(fetchFn, url(), bearer(token));
}

async function pidOf(s) {
  const r = await onSession(s, callBody(`pid-${Math.random()}`, 'pid'));
  assert.equal(r.status, 200, `pid: HTTP ${r.status} ${r.text}`);
  return Number(r.messages[0].result.content[0].text);
}

const evictions = async (reason, up = current) =>
  (await gw.metrics())[`tollgate_stdio_evictions_total{upstream="${up}",reason="${reason}"}`];

/** mcp-remote (0.15.1) as a desktop app runs it: a stdio MCP server to its client, which here is
 * this test writing JSON-RPC lines to its stdin. request() resolves with the answer. */
function mcpRemote(target, token) {
  const p = spawn(process.execPath, [path.join(H.NODE_MODULES, 'mcp-remote', 'dist', 'proxy.js'), target,
    '--header', `Authorization: Bearer ${token}`, '--transport', 'http-only'], {
    stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, MCP_REMOTE_CONFIG_DIR: path.join(dir, 'mcp-remote') },
  });
  let err = '';
  p.stderr.on('data', (d) => { err += d; });
  const waiting = new Map();
  readline.createInterface({ input: p.stdout }).on('line', (l) => {
    let m;
    try { m = JSON.parse(l); } catch { return; }
    waiting.get(m.id)?.(m);
    waiting.delete(m.id);
  });
  const exited = new Promise((r) => p.on('exit', r));
  cleanup.add(async () => { p.kill(); await exited; });
  return {
    stderr: () => err,
    request: (id, method, params) => new Promise((resolve) => {
      waiting.set(id, resolve);
      p.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
    }),
    notify: (method) => p.stdin.write(JSON.stringify({ jsonrpc: '2.0', method }) + '\n'),
  };
}

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-stdio-');
  const conf = H.writeConf(dir, {
    admin: true,
    // sse_keepalive_ms: a client gone with its GET stream open is noticed at the next keep-alive
    limits: { stdio_evict_idle_ms: EVICT_IDLE_MS, sse_keepalive_ms: 1000 },
    grants: [{ name: 'a', token_sha256: H.sha256hex(TOKEN_A) }, { name: 'b', token_sha256: H.sha256hex(TOKEN_B) },
      { name: 'c', token_sha256: H.sha256hex(TOKEN_C) }],
    upstreams: [
      {
        name: 'envy', command: [process.execPath, FIXTURE], max_children: 2,
        env: { FROM_CONF: 'set-in-conf', LC_TIME: 'C' },
        env_pass: ['PASSED_ON', 'NOT_SET_ANYWHERE'],
      },
      { name: 'pair', command: [process.execPath, FIXTURE], max_children: 2 },
      { name: 'solo', command: [process.execPath, FIXTURE], max_children: 2 },
      // never called: it only makes the gateway read a token through ${VAR}, as a user's conf does
      { name: 'remote', url: 'http://127.0.0.1:9/mcp', protocol: '2025', headers: { Authorization: 'Bearer ${UPSTREAM_TOKEN}' } },
    ],
  });
  gw = await H.startTollgate(conf, {
    cleanup, admin: true,
    env: {
      COWORK_TOKEN: 'cowork-secret', UPSTREAM_TOKEN: 'upstream-secret', GATEWAY_ONLY: 'gateway-only',
      PASSED_ON: 'passed-value', HOME: dir, LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8', TZ: 'Europe/Paris',
    },
  });
});
after(() => cleanup.run());

const ALLOWED = new Set(['PATH', 'HOME', 'LANG', 'TZ', 'FROM_CONF', 'PASSED_ON']);

function checkEnv(env) {
  for (const k of Object.keys(env))
    assert.ok(ALLOWED.has(k) || k.startsWith('LC_'), `the child sees ${k}=${env[k]}, which nothing passed to it`);
  for (const k of ['COWORK_TOKEN', 'UPSTREAM_TOKEN', 'GATEWAY_ONLY', 'ASAN_OPTIONS', 'TOLLGATE_BIN', 'NOT_SET_ANYWHERE'])
    assert.equal(env[k], undefined, `${k} reached the child`);
  assert.ok(!JSON.stringify(env).includes('secret'), 'a secret value reached the child');
  assert.equal(env.PATH, process.env.PATH, 'PATH is the gateway\'s');
  assert.equal(env.HOME, dir);
  assert.equal(env.LANG, 'C.UTF-8');
  assert.equal(env.LC_ALL, 'C.UTF-8');
  assert.equal(env.TZ, 'Europe/Paris');
  assert.equal(env.LC_TIME, 'C', 'env sets what it names (over the gateway\'s)');
  assert.equal(env.FROM_CONF, 'set-in-conf');
  assert.equal(env.PASSED_ON, 'passed-value', 'env_pass passes a variable the gateway has');
}

describe('a stdio child\'s environment', () => {
  it('through the SDK client: only PATH, HOME, LANG, LC_*, TZ, env and env_pass', async () => {
    const c = await H.connectClient(url(), { headers: bearer(TOKEN_A), cleanup });
    const r = await c.client.callTool({ name: 'env', arguments: {} });
    checkEnv(JSON.parse(H.resultText(r)));
    await c.close();
  });

  it('through the MCP Inspector CLI: the same', async () => {
    const r = await inspector(TOKEN_A, '--method', 'tools/call', '--tool-name', 'env');
    assert.equal(r.code, 0, `inspector-cli failed (${r.code}):\n${r.err}\n${r.out}`);
    checkEnv(JSON.parse(toolText(r)));
  });
});

describe('sessions nobody ends, at max_children', () => {
  it('another grant waits for idleness, the same grant takes the longest-idle child at once', async () => {
    current = 'pair'; // max_children = 2, nothing on it yet
    const a1 = await rawSession(TOKEN_A);
    const a2 = await rawSession(TOKEN_A);
    const pid1 = await pidOf(a1);
    const pid2 = await pidOf(a2);
    assert.notEqual(pid1, pid2, 'one child per session');
    assert.equal(await evictions('same_grant'), 0);

    // Grant b: both of a's sessions were used just now, so b is refused with -32004.
    const refused = await H.postRaw(fetchFn, url(), H.initializeBody(1), bearer(TOKEN_B));
    assert.equal(refused.messages[0]?.error?.code, -32004, `b is refused while a's sessions are fresh: ${refused.text}`);
    assert.equal(await evictions('other_grant'), 0);

    // Once a1 (the longer idle) has been idle limits.stdio_evict_idle_ms, b's initialize takes its child.
    let b1;
    await H.waitUntil(async () => {
      const r = await H.postRaw(fetchFn, url(), H.initializeBody(1), bearer(TOKEN_B));
      if (r.status !== 200 || r.messages[0]?.error) return false;
      b1 = { headers: { ...bearer(TOKEN_B), 'mcp-session-id': r.headers.get('mcp-session-id'), 'mcp-protocol-version': H.PROTOCOL_VERSION } };
      return true;
    }, { timeout: EVICT_IDLE_MS + H.scaled(10000), interval: 200, what: 'grant b to get a child once a1 was idle long enough' });
    await onSession(b1, { jsonrpc: '2.0', method: 'notifications/initialized' });
    assert.equal(await evictions('other_grant'), 1);
    const gone = await onSession(a1, callBody(5, 'pid'));
    assert.equal(gone.status, 404, `the evicted session is unknown now: ${gone.status} ${gone.text}`);
    assert.equal(await pidOf(a2), pid2, 'a2 kept its child');

    // Grant a again, through the Inspector CLI: a2 is a's only session with a child, and it goes at once.
    const r = await inspector(TOKEN_A, '--method', 'tools/call', '--tool-name', 'pid');
    assert.equal(r.code, 0, `inspector-cli failed (${r.code}):\n${r.err}\n${r.out}`);
    assert.notEqual(Number(toolText(r)), pid2);
    assert.equal(await evictions('same_grant'), 1);
    const a2gone = await onSession(a2, callBody(6, 'pid'));
    assert.equal(a2gone.status, 404, `a2 was evicted: ${a2gone.status} ${a2gone.text}`);
    // … and its client initialises again and is served, taking the child the Inspector left as
    // soon as its GET stream's next keep-alive finds the Inspector gone.
    let a3;
    await H.waitUntil(async () => (a3 = await rawSession(TOKEN_A).catch(() => null)) !== null,
      { interval: 100, what: 'a2\'s client to get a child again' });
    assert.ok(await pidOf(a3) > 0);
    assert.equal(await evictions('same_grant'), 2);

    // A session with a call in flight is never evicted: b1 holds a call, so b's next session finds
    // no child (a3 is fresh, another grant's).
    const release = path.join(dir, 'release');
    const held = onSession(b1, callBody(7, 'hold', { file: release }));
    await H.waitUntil(() => fs.existsSync(`${release}.held`), { what: 'the hold call to reach b1\'s child' });
    const b2 = await H.postRaw(fetchFn, url(), H.initializeBody(1), bearer(TOKEN_B));
    assert.equal(b2.messages[0]?.error?.code, -32004, `b1's child is busy: ${b2.text}`);
    fs.writeFileSync(release, '');
    const h = await held;
    assert.equal(h.status, 200);
    assert.equal(h.messages[0]?.result?.content?.[0]?.text, 'released', 'the held call was answered by its own child');
  });
});

describe('mcp-remote at max_children', () => {
  it('a connected client keeps its children while fresh, gives them up once idle, and its grant is served again', async () => {
    current = 'solo'; // max_children = 2
    const mr = mcpRemote(url(), TOKEN_A);
    const init = await mr.request(1, 'initialize', { protocolVersion: H.PROTOCOL_VERSION, capabilities: {},
      clientInfo: { name: 'stdio-interop', version: '1.0.0' } });
    assert.ok(init.result, `initialize through mcp-remote: ${JSON.stringify(init)}\n${mr.stderr()}`);
    mr.notify('notifications/initialized');
    const first = await mr.request(2, 'tools/call', { name: 'pid', arguments: {} });
    const pid1 = Number(first.result?.content?.[0]?.text);
    assert.ok(pid1 > 0, `pid through mcp-remote: ${JSON.stringify(first)}\n${mr.stderr()}`);
    // mcp-remote holds both children: the session it opens at start to check the server and the
    // one it made for its client, each with a GET stream open. While they are fresh neither its
    // own grant nor another takes one (two such clients of one grant would otherwise take a child
    // from each other without end, each initialising again the moment its stream ends).
    for (const token of [TOKEN_A, TOKEN_B]) {
      const r = await H.postRaw(fetchFn, url(), H.initializeBody(1), bearer(token));
      assert.equal(r.messages[0]?.error?.code, -32004, `mcp-remote's fresh sessions keep their children: ${r.text}`);
    }
    // Once idle stdio_evict_idle_ms, grants b and c take them.
    const taken = {};
    for (const [name, token] of [['b', TOKEN_B], ['c', TOKEN_C]]) {
      await H.waitUntil(async () => {
        taken[name] = await H.rawInitialize(fetchFn, url(), bearer(token)).catch(() => null);
        return taken[name] !== null;
      }, { timeout: EVICT_IDLE_MS + H.scaled(10000), interval: 200, what: `grant ${name} to take an idle child of mcp-remote's` });
    }
    assert.equal(await evictions('other_grant'), 2);
    // mcp-remote saw its stream end and initialised again at once; with both children taken by
    // fresh sessions of other grants that was refused, and mcp-remote says so to its client at
    // once (0.15.1 does not try again: it is restarted, as a desktop app does).
    const lost = await mr.request(10, 'tools/call', { name: 'pid', arguments: {} });
    assert.ok(lost.error, `mcp-remote's client is told its session is gone: ${JSON.stringify(lost)}`);
    assert.match(mr.stderr(), /re-?initiali[sz]/i, 'mcp-remote tried to initialise again');
    // The grant is not locked out: a new client of it (the Inspector CLI) is served as soon as
    // b's and c's sessions have been idle stdio_evict_idle_ms.
    let r;
    await H.waitUntil(async () => (r = await inspector(TOKEN_A, '--method', 'tools/call', '--tool-name', 'pid')).code === 0,
      { timeout: EVICT_IDLE_MS + H.scaled(15000), interval: 200, what: 'a new client of grant a to be served' });
    assert.ok(Number(toolText(r)) > 0);
    assert.equal(await evictions('other_grant'), 3);
    const gone = await H.postRaw(fetchFn, url(), callBody(5, 'pid'), taken.b.headers);
    assert.equal(gone.status, 404, 'b\'s session, the longest idle, gave its child');
  });
});

describe('a reload that changes a stdio child\'s environment', () => {
  // A warm child waits, started with the environment of the configuration it was made for; a
  // reload that keeps the command but takes a variable out of env (or changes env_pass or cwd)
  // must not hand a new session a child that still holds it.
  it('new sessions get children made with the new env, warm ones included', async () => {
    const local = new H.Cleanup();
    try {
      const d = H.makeTempDir(local, 'tollgate-stdio-reload-');
      const write = (env) => H.writeConf(d, {
        upstreams: [{ name: 'hot', command: [process.execPath, FIXTURE], warm: 1, max_children: 4, env }],
      });
      const conf = write({ RETIRED_SECRET: 'old-secret', KEPT: 'kept' });
      const g = await H.startTollgate(conf, { cleanup: local });
      const u = `http://127.0.0.1:${g.plainPort}/hot/mcp`;
      const envOf = async () => {
        const s = await H.rawInitialize(fetchFn, u, {});
        const r = await H.postRaw(fetchFn, u, callBody(2, 'env'), s.headers);
        assert.equal(r.status, 200, `env: HTTP ${r.status} ${r.text}`);
        return JSON.parse(r.messages[0].result.content[0].text);
      };
      assert.equal((await envOf()).RETIRED_SECRET, 'old-secret', 'before the reload the child has it');
      write({ KEPT: 'kept' }); // the same command: the upstream keeps its runtime
      const n = (g.stderr().match(/configuration reloaded/g) ?? []).length;
      process.kill(g.proc.pid, 'SIGHUP');
      await H.waitUntil(() => (g.stderr().match(/configuration reloaded/g) ?? []).length > n,
        { what: 'tollgate logged "configuration reloaded"' });
      for (let i = 0; i < 2; i++) { // the child warm since before the reload, then a fresh one
        const env = await envOf();
        assert.equal(env.RETIRED_SECRET, undefined, `session ${i} after the reload got a child with the removed variable`);
        assert.equal(env.KEPT, 'kept');
      }
    } finally {
      await local.run();
    }
  });
});
