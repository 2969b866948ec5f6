// Parked calls in a cluster: two tollgate instances sharing one redis-server (HAProxy in front, as
// test/interop/lib/cluster.mjs starts them), the CoWork OS stand-in behind them. A parked call
// stays in the instance that holds its client; what approvers see of it is one entry of a Redis
// hash. That entry must leave with the call whatever ends it, and say what a reload on its
// instance changed, on every instance.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/cluster-approvals.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as C from './lib/cluster.mjs';

H.requireNodeModules();

const cleanup = new H.Cleanup();
let dir;
let fetchFn;
let standin;
let c;
const UPSTREAM = 'cowork-os';
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const ADMIN_TOKEN = 'admin-' + H.randomToken();
const TOKEN = 'appr-' + H.randomToken();
const APPROVE = { version: '1', default: 'deny', tools: { write_file: { action: 'approve', approval_timeout: 60 }, echo: { action: 'allow' } } };
let policy;

const logs = () => ({
  ...(c?.logs() ?? {}),
  'stand-in log': standin?.logFile && fs.existsSync(standin.logFile) ? fs.readFileSync(standin.logFile, 'utf8').slice(-3000) : undefined,
});
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-cluster-appr-');
  fetchFn = H.makeFetch({ cleanup });
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  policy = path.join(dir, 'approve.json');
  fs.writeFileSync(policy, JSON.stringify(APPROVE));
  const sub = path.join(dir, 'cluster');
  fs.mkdirSync(sub);
  c = await C.startCluster({
    cleanup, dir: sub, n: 2, adminToken: ADMIN_TOKEN,
    conf: {
      grants: [{ name: 'appr', token_sha256: H.sha256hex(TOKEN) }],
      upstreams: [{ name: UPSTREAM, url: standin.url, default: true, headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` }, initialize: 'local', policy, approval_mode: 'hold' }],
    },
  });
});
after(() => cleanup.run());

/** Pending listings in Redis (a call a human decided stays listed a while, as decided). */
const hashLen = async () => {
  const vals = await c.redis.command('HVALS', `${c.keyPrefix}approvals`);
  return (Array.isArray(vals) ? vals : []).filter((v) => !String(v).includes('"decision":')).length;
};
const forwarded = (p) => standin.records().filter((r) => r.http && r.msg?.method === 'tools/call' && r.msg.params?.arguments?.path === p);

let nextId = 1;
async function call(i, sess, args, { signal } = {}) {
  try {
    const res = await fetchFn(c.instanceUrl(i, UPSTREAM), {
      method: 'POST', signal,
      headers: { ...H.MCP_HEADERS, ...sess.headers },
      body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name: 'write_file', arguments: args } }),
    });
    const text = await res.text();
    return { status: res.status, msg: text ? JSON.parse(text) : undefined };
  } catch (e) {
    return { error: String(e) };
  }
}

/** The item of session sess as instance i lists it (every member's queue), once it is there. */
async function listed(i, sess) {
  let last;
  return H.waitUntil(async () => {
    last = await c.admin(i, 'GET', '/admin/approvals');
    return last.json?.approvals?.find((x) => x.session === sess.sessionId);
  }, { what: `the parked call of session ${sess.sessionId} listed on instance ${i}`, detail: () => last?.text });
}

async function emptyEverywhere(what) {
  await H.waitUntil(async () => (await hashLen()) === 0, { what: `${what}: the shared listing in Redis empty` });
  for (const i of [0, 1]) assert.deepEqual((await c.admin(i, 'GET', '/admin/approvals')).json.approvals, [], `${what}: instance ${i} lists nothing`);
}

describe('cluster: a parked call leaves the shared listing whatever ends it', () => {
  test('its session DELETEd through the other instance: gone from Redis and from both listings', async () => {
    const s = await H.rawInitialize(fetchFn, c.instanceUrl(0, UPSTREAM), { authorization: `Bearer ${TOKEN}` });
    const p = call(0, s, { path: '/tmp/cl-delete', content: 'x' });
    const item = await listed(1, s);
    assert.equal(item.instance, 'a');
    assert.equal(await hashLen(), 1);
    const d = await fetchFn(c.instanceUrl(1, UPSTREAM), { method: 'DELETE', headers: { ...H.MCP_HEADERS, ...s.headers } });
    await d.text();
    assert.ok(d.status === 200 || d.status === 204, `DELETE on instance b: ${d.status}`);
    await emptyEverywhere('after the DELETE');
    const a = await p;
    assert.equal(a.msg?.error?.code, -32003, JSON.stringify(a));
    const r = await c.admin(1, 'POST', `/admin/approvals/${item.id}/approve`, { headers: { 'content-type': 'application/json' }, body: JSON.stringify({ digest: item.digest }) });
    assert.equal(r.status, 404, r.text);
    assert.equal(forwarded('/tmp/cl-delete').length, 0);
  });

  test('its client gone: gone from Redis', async () => {
    const s = await H.rawInitialize(fetchFn, c.instanceUrl(0, UPSTREAM), { authorization: `Bearer ${TOKEN}` });
    const ac = new AbortController();
    const p = call(0, s, { path: '/tmp/cl-gone', content: 'x' }, { signal: ac.signal });
    await listed(1, s);
    ac.abort();
    await p;
    await emptyEverywhere('after the client went');
    assert.equal(forwarded('/tmp/cl-gone').length, 0);
  });

  test('a reload on its instance that denies the tool: marked on the other instance, approve there is 409, the client -32003', async () => {
    const s = await H.rawInitialize(fetchFn, c.instanceUrl(0, UPSTREAM), { authorization: `Bearer ${TOKEN}` });
    const p = call(0, s, { path: '/tmp/cl-stale', content: 'x' });
    const item = await listed(1, s);
    assert.equal(item.blocked, null);
    fs.writeFileSync(policy, JSON.stringify({ ...APPROVE, tools: { ...APPROVE.tools, write_file: { action: 'deny', reason: 'frozen' } } }));
    try {
      await c.hup(0);
      let now;
      await H.waitUntil(async () => {
        now = (await c.admin(1, 'GET', '/admin/approvals')).json.approvals.find((x) => x.id === item.id);
        return now?.blocked;
      }, { what: 'the shared listing marked after the reload', detail: () => JSON.stringify(now) });
      assert.match(now.blocked, /^no longer allowed: tool "write_file" is now denied.*frozen/);
      const r = await c.admin(1, 'POST', `/admin/approvals/${item.id}/approve`, { headers: { 'content-type': 'application/json' }, body: JSON.stringify({ digest: item.digest }) });
      assert.equal(r.status, 409, r.text);
      assert.match(r.json?.error ?? '', /now denied/);
      const a = await p;
      assert.equal(a.msg?.error?.code, -32003, JSON.stringify(a));
      assert.match(a.msg.error.data?.reason ?? '', /frozen/);
      await emptyEverywhere('after the refused approval');
      assert.equal(forwarded('/tmp/cl-stale').length, 0);
    } finally {
      fs.writeFileSync(policy, JSON.stringify(APPROVE));
      await c.hup(0);
    }
  });
});
