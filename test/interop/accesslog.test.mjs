// log.access (issue 11, item 7): one line per HTTP request, in logfmt or JSON, with method, path,
// status, bytes, duration, grant, session and upstream, and never a token: not the bearer, not
// ?access_token= on /ws, not the query string at all.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/accesslog.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

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
