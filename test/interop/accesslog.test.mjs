// log.access (issue 11, item 7): one line per HTTP request, in logfmt or JSON, with method, path,
// status, bytes, duration, grant, session and upstream, and never a token: not the bearer, not
// ?access_token= on /ws, not the query string at all. In log.format = "json" with the audit on,
// every line of both files is strict JSON whatever names a peer sends.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/accesslog.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import fs from 'node:fs';
import path from 'node:path';

import * as H from './lib/harness.mjs';

const { default: WebSocket } = await import('ws');

const TOKEN = H.randomToken();
const UPSTREAM_TOKEN = H.randomToken();
const cleanup = new H.Cleanup();
const test = (name, fn) => it(name, { timeout: 30000 }, fn);
let standin;

async function gateway(format) {
  const dir = H.makeTempDir(cleanup);
  const conf = H.writeConf(dir, {
    listeners: [{}],
    log: { format, access: true },
    grants: [{ name: 'alice', token_sha256: H.sha256hex(TOKEN) }],
    upstreams: [{ name: 'cowork', url: standin.url, initialize: 'local', default: true,
      headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` } }],
  });
  return H.startTollgate(conf, { cleanup });
}

/** The access lines logged since `from`, once `n` of them are there (lines come from a log thread). */
async function accessLines(gw, from, n) {
  const pick = () => gw.stderr().slice(from).split('\n').filter((l) => /"request"|msg="request"/.test(l));
  await H.waitUntil(() => pick().length >= n, { timeout: 10000, what: `${n} access lines`, detail: () => gw.stderr().slice(from) });
  return pick();
}

function logfmt(line) {
  const o = {};
  for (const m of line.matchAll(/(\w+)=("(?:[^"\\]|\\.)*"|\S+)/g)) o[m[1]] = m[2].startsWith('"') ? JSON.parse(m[2]) : m[2];
  return o;
}

before(async () => { standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN }); });
after(() => cleanup.run());

for (const format of ['logfmt', 'json']) {
  describe(`log.access = true, log.format = ${format}`, () => {
    let gw;
    before(async () => { gw = await gateway(format); });

    test('each request gets one line with method, path, status, bytes, duration, grant, session and upstream; no token anywhere', async () => {
      const base = `http://127.0.0.1:${gw.plainPort}`;
      const f = H.makeFetch({ cleanup });
      const from = gw.stderr().length;
      const auth = { authorization: `Bearer ${TOKEN}` };
      const init = await H.rawInitialize(f, `${base}/mcp?access_token=${TOKEN}&x=1`, auth);
      assert.ok(init.sessionId, 'a session');
      const list = await H.postRaw(f, `${base}/mcp`, { jsonrpc: '2.0', id: 2, method: 'tools/list' },
        { ...auth, 'mcp-session-id': init.sessionId, 'mcp-protocol-version': H.PROTOCOL_VERSION });
      assert.equal(list.status, 200, list.text);
      const missing = await f(`${base}/nothing-here`, { headers: auth });
      assert.equal(missing.status, 404);
      const unauth = await f(`${base}/mcp`, { method: 'POST', headers: { authorization: 'Bearer wrong-token', 'content-type': 'application/json' }, body: '{}' });
      assert.equal(unauth.status, 401);
      // A browser's WebSocket carries its token in the query: it must not be logged.
      const ws = new WebSocket(`ws://127.0.0.1:${gw.plainPort}/ws?access_token=${TOKEN}`, 'mcp');
      await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
      ws.close();
      const lines = await accessLines(gw, from, 6);
      const recs = lines.map((l) => (format === 'json' ? JSON.parse(l) : logfmt(l)));
      const byPath = (p, st) => recs.find((r) => r.path === p && Number(r.status) === st);
      const i = byPath('/mcp', 200);
      assert.ok(i, `the initialize line: ${lines.join('\n')}`);
      assert.equal(i.method, 'POST');
      assert.equal(i.grant, 'alice');
      assert.equal(i.upstream, 'cowork');
      assert.ok(Number(i.bytes) > 0, 'bytes sent');
      assert.ok(Number(i.ms) >= 0, 'a duration');
      const l = recs.find((r) => r.session === init.sessionId && Number(r.status) === 200);
      assert.ok(l, `the tools/list line names the session: ${lines.join('\n')}`);
      assert.ok(recs.find((r) => r.session === init.sessionId && Number(r.status) === 202), 'notifications/initialized: 202');
      assert.ok(byPath('/nothing-here', 404), '404 logged');
      const u = byPath('/mcp', 401);
      assert.ok(u, '401 logged');
      assert.equal(u.grant, '-', 'a refused credential names no grant');
      const w = byPath('/ws', 101);
      assert.ok(w, `the WebSocket upgrade is logged with 101: ${lines.join('\n')}`);
      assert.equal(w.grant, 'alice');
      const all = gw.stderr().slice(from);
      assert.ok(!all.includes(TOKEN), 'the token never reaches the log');
      assert.ok(!/access_token/.test(lines.join('\n')), 'no query string in the access lines');
    });

    test('the gateway exits clean', async () => {
      await gw.stop();
      assert.doesNotMatch(gw.stderr(), /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/);
    });
  });
}

// log.format = "json" with the audit on: tool names, a counter name and request paths a peer
// chooses (newlines, quotes, backslashes, U+2028, a name that looks quoted already, non-ASCII)
// go through the deny path, the parked-approval path (which expires) and the allow path. Every
// line of the process log and of the audit file is one JSON object with no key twice, and each
// name comes back exactly as sent.
describe('log.format = json and the audit, with hostile names on every path', () => {
  const NAMES = ['a\nlevel=error msg="forged"', 'quo"te', 'back\\slash', 'sep\u2028line', '"echo"', 'caf\u00e9 \u00ff',
    'ctl\u0001\u001f\u007f', 'eq=1 x="y"'];
  const PARK = 'park\n"me"\\';
  const LONG = 'c'.repeat(130);
  let gw;
  let auditFile;

  /** JSON.parse, and no object in the text with a key twice (JSON.parse keeps the last one silently). */
  function strict(line) {
    const v = JSON.parse(line);
    const seen = [];
    JSON.parse(line, function (k) { if (k !== '') seen.push([this, k]); return arguments[1]; });
    const keys = new Map();
    for (const [o, k] of seen) { const s = keys.get(o) ?? new Set(); keys.set(o, s); s.add(k); }
    // a duplicate key leaves fewer members than names read: count the keys in the text itself
    let members = 0;
    for (let i = 0; i < line.length; i++) {
      if (line[i] !== '"') continue;
      for (i++; line[i] !== '"'; i++) if (line[i] === '\\') i++;
      let j = i + 1;
      while (line[j] === ' ') j++;
      if (line[j] === ':') members++;
    }
    let total = 0;
    for (const s of keys.values()) total += s.size;
    assert.equal(total, members, `a key twice in: ${line}`);
    return v;
  }

  before(async () => {
    const dir = H.makeTempDir(cleanup);
    auditFile = path.join(dir, 'audit.log');
    const policy = path.join(dir, 'hostile.json');
    fs.writeFileSync(policy, JSON.stringify({
      version: '1', default: 'deny',
      tools: {
        [PARK]: { action: 'approve', approval_mode: 'hold', approval_timeout: 1 },
        echo: { action: 'allow', limits: [{ counter: `${LONG}A`, window: 'day', max: 100, scope: 'grant' },
          { counter: `${LONG}B`, window: 'day', max: 100, scope: 'grant' }] },
      },
    }));
    const conf = H.writeConf(dir, {
      listeners: [{}],
      log: { format: 'json', access: true },
      audit: { file: auditFile, args: 'values' },
      grants: [{ name: 'alice', token_sha256: H.sha256hex(TOKEN) }],
      upstreams: [{ name: 'cowork', url: standin.url, initialize: 'local', default: true, policy,
        headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` } }],
    });
    gw = await H.startTollgate(conf, { cleanup });
  });

  test('every line of both files is strict JSON and gives each name back', async () => {
    const base = `http://127.0.0.1:${gw.plainPort}`;
    const f = H.makeFetch({ cleanup });
    const auth = { authorization: `Bearer ${TOKEN}` };
    const s = await H.rawInitialize(f, `${base}/mcp`, auth);
    const call = (name, id) => H.postRaw(f, `${base}/mcp`, { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: { text: name } } }, s.headers);
    for (const [i, name] of NAMES.entries()) {
      const r = await call(name, 10 + i);
      assert.ok(r.messages[0]?.error, `${JSON.stringify(name)} is denied: ${r.text}`);
    }
    const parked = await call(PARK, 50);
    assert.ok(parked.messages[0]?.error, `the parked call expires: ${parked.text}`);
    const ok = await call('echo', 51);
    assert.ok(ok.messages[0]?.result, ok.text);
    await f(`${base}/x"y%0a\\z%E2%80%A8`, { headers: auth });
    const audit = await H.waitUntil(() => {
      const t = fs.existsSync(auditFile) ? fs.readFileSync(auditFile, 'utf8') : '';
      const l = t.split('\n').filter(Boolean);
      return l.length >= NAMES.length + 3 ? l : null;
    }, { what: 'the audit lines', detail: () => (fs.existsSync(auditFile) ? fs.readFileSync(auditFile, 'utf8') : '(none)') });
    const recs = audit.map(strict);
    for (const name of NAMES) assert.ok(recs.find((r) => r.tool === name && r.decision === 'deny'), `audit of ${JSON.stringify(name)}`);
    assert.ok(recs.find((r) => r.tool === PARK && r.decision === 'expired'), 'the parked call expired');
    const echo = recs.find((r) => r.tool === 'echo' && r.decision === 'allow');
    assert.ok(echo, 'the allowed call');
    assert.equal(Object.keys(echo.counters).length, 2, `two counters, two keys: ${JSON.stringify(echo.counters)}`);
    const logs = await H.waitUntil(() => {
      const l = gw.stderr().split('\n').filter(Boolean);
      return l.some((x) => x.includes('approval timed out')) && l.some((x) => x.includes('/x')) ? l : null;
    }, { what: 'the log lines', detail: () => gw.stderr() });
    const lines = logs.map(strict);
    const park = lines.find((l) => l.msg === 'call parked for approval');
    assert.equal(park?.tool, PARK, 'the parked line names the tool as sent');
    assert.ok(lines.every((l) => typeof l.level === 'string' && l.level !== 'error'), 'no forged level');
    assert.ok(lines.find((l) => l.msg === 'request' && typeof l.path === 'string' && l.path.startsWith('/x')), 'the odd path');
  });

  test('the gateway exits clean', async () => {
    await gw.stop();
    assert.doesNotMatch(gw.stderr(), /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/);
  });
});
