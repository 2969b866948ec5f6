// Several instances, one budget (issue 12, item 5): three tollgate instances sharing one
// redis-server, Debian's haproxy in front, the CoWork OS stand-in behind them, all on loopback and
// started here (test/interop/lib/cluster.mjs). The stand-in's request log is the proof of what
// reached the upstream: every call carries a unique argument, so "forwarded" means "in that log".
//
//   1. the harness itself, without the cluster group: three plain instances behind HAProxy, each
//      with its own memory (what the cluster fixes: a session made on one is unknown to the others)
//   2. with `cluster = { ... }`: the seed scenario through HAProxy, a 40-call race, a session made
//      on one instance and used on the others, approvals parked on one and decided on another, a
//      reload on one instance, Redis paused (SIGSTOP) under load and resumed, an instance killed
//      under load.
//   3. a counter key poisoned in Redis; 4. histories: a toxic flow (secrets read through one
//      instance, egress through another) refused, and a history entry changed in Redis failing closed.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/cluster.test.mjs

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
let sdk;
let standin;
const UPSTREAM = 'cowork-os';
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const ADMIN_TOKEN = 'admin-' + H.randomToken();
const SEED_POLICY = path.join(H.REPO_ROOT, 'conf', 'policies', 'cowork-os.json');

let current; // the cluster of the running describe, for the failure context
const logs = () => ({
  ...(current?.logs() ?? {}),
  'stand-in log': standin?.logFile && fs.existsSync(standin.logFile) ? fs.readFileSync(standin.logFile, 'utf8').slice(-3000) : undefined,
});
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

before(async () => {
  sdk = await H.loadSdk();
  dir = H.makeTempDir(cleanup, 'tollgate-cluster-');
  fetchFn = H.makeFetch({ cleanup });
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
});
after(() => cleanup.run());

// ---------------------------------------------------------------------------
// helpers

function writePolicy(name, obj) {
  const f = path.join(dir, name);
  fs.writeFileSync(f, JSON.stringify(obj) + '\n');
  return f;
}

/** A policy: execute_code limited to `max` per `window` for the grant, echo free, write_file approved by hand. */
const budgetPolicy = (name, max, window = 'day') => writePolicy(`${name}.json`, {
  version: '1', default: 'deny',
  tools: {
    execute_code: { limits: [{ counter: 'execute_code_rate', window, max, scope: 'grant' }] },
    echo: { action: 'allow' },
    write_file: { action: 'approve', approval_mode: 'hold', approval_timeout: 30 },
  },
});

const bearer = (t) => ({ authorization: `Bearer ${t}` });

/** Grants for the cluster: name -> { token, policy }. */
function makeGrants(spec) {
  const grants = {};
  for (const [name, policy] of Object.entries(spec)) grants[name] = { token: `${name}-${H.randomToken()}`, policy };
  return grants;
}
const grantConf = (grants) => Object.entries(grants).map(([name, g]) => ({
  name, token_sha256: H.sha256hex(g.token), policies: [{ upstream: UPSTREAM, policy: g.policy }],
}));
const upstreamConf = () => [{
  name: UPSTREAM, url: standin.url, default: true, headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` },
  initialize: 'local', policy: SEED_POLICY,
}];

/** The stand-in's tools/call records whose `field` argument starts with prefix. */
const forwarded = (prefix, field = 'code') => standin.records()
  .filter((r) => r.http && r.msg?.method === 'tools/call' && String(r.msg.params?.arguments?.[field] ?? '').startsWith(prefix))
  .map((r) => r.msg.params.arguments[field]);

let nextId = 1000;
/**
 * One raw tools/call on `url` with a session's headers; resolves with
 * { status, msg (the JSON-RPC answer, or undefined), error (a transport failure), ms }.
 */
async function rawCall(url, sess, name, args) {
  const t0 = Date.now();
  try {
    const r = await H.postRaw(fetchFn, url, { jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name, arguments: args } }, sess.headers);
    return { status: r.status, msg: r.messages[0], text: r.text, ms: Date.now() - t0 };
  } catch (e) {
    return { error: String(e), ms: Date.now() - t0 };
  }
}
const ok = (r) => r.status === 200 && r.msg?.result && !r.msg.result.isError;
const code = (r) => r.msg?.error?.code;

/** A raw 2025 session of `grant` made on `url`. */
async function session(url, grant) {
  const s = await H.rawInitialize(fetchFn, url, bearer(grant.token));
  assert.ok(s.sessionId, 'initialize gave an Mcp-Session-Id');
  return s;
}

/** Sum of every sample of a metric family in parsed metrics (all label sets). */
const family = (m, name) => Object.entries(m).filter(([k]) => k === name || k.startsWith(name + '{')).reduce((a, [, v]) => a + v, 0);

// ---------------------------------------------------------------------------
// 1. The harness, without the cluster group

describe('harness: three plain instances behind HAProxy (no cluster group)', () => {
  const local = new H.Cleanup();
  let c;
  let grants;

  before(async () => {
    const sub = path.join(dir, 'plain');
    fs.mkdirSync(sub);
    grants = makeGrants({ plain: budgetPolicy('plain', 10) });
    c = await C.startCluster({
      cleanup: local, dir: sub, n: 3, cluster: false, adminToken: ADMIN_TOKEN,
      conf: { grants: grantConf(grants), upstreams: upstreamConf() },
    });
    current = c;
  });
  after(() => local.run());

  test('HAProxy spreads plain POSTs round-robin; each instance holds only the sessions it made', async () => {
    assert.deepEqual(await c.haproxy.servers(), { a: 'UP', b: 'UP', c: 'UP' });
    const sessions = [];
    for (let i = 0; i < 6; i++) {
      const r = await H.postRaw(fetchFn, c.url(UPSTREAM), H.initializeBody(), bearer(grants.plain.token));
      assert.equal(r.status, 200, r.text);
      const sid = r.headers.get('mcp-session-id');
      assert.ok(sid, 'an Mcp-Session-Id');
      sessions.push({ ...bearer(grants.plain.token), 'mcp-session-id': sid, 'mcp-protocol-version': r.messages[0].result.protocolVersion });
    }
    const owners = [0, 0, 0];
    for (const h of sessions) {
      const known = [];
      for (let i = 0; i < 3; i++) {
        const r = await H.postRaw(fetchFn, c.instanceUrl(i, UPSTREAM), { jsonrpc: '2.0', method: 'notifications/initialized' }, h);
        assert.ok([200, 202, 404].includes(r.status), `notifications/initialized on ${c.instances[i].name}: HTTP ${r.status} ${r.text}`);
        if (r.status !== 404) known.push(i);
      }
      assert.equal(known.length, 1, `without the cluster group exactly one instance knows a session: ${known}`);
      owners[known[0]]++;
    }
    assert.deepEqual(owners, [2, 2, 2], 'round-robin: two sessions each');
  });

  test('an SDK client on one instance: the budget is per instance without the cluster (10 there, 10 more on the next)', async () => {
    const a = await H.connectClient(c.instanceUrl(0, UPSTREAM), { fetch: fetchFn, headers: bearer(grants.plain.token), cleanup: local });
    for (let i = 0; i < 10; i++) {
      const r = await a.client.callTool({ name: 'execute_code', arguments: { language: 'python', code: `plain-a-${i}` } });
      assert.ok(!r.isError, JSON.stringify(r));
    }
    await assert.rejects(a.client.callTool({ name: 'execute_code', arguments: { language: 'python', code: 'plain-a-10' } }),
      (e) => e instanceof sdk.types.McpError && e.code === -32002);
    const b = await session(c.instanceUrl(1, UPSTREAM), grants.plain);
    const r = await rawCall(c.instanceUrl(1, UPSTREAM), b, 'execute_code', { language: 'python', code: 'plain-b-0' });
    assert.ok(ok(r), `instance b has its own bucket: ${JSON.stringify(r)}`);
    assert.equal(forwarded('plain-').length, 11);
  });

  test('killing an instance: HAProxy marks it DOWN and the others serve', async () => {
    await c.kill(2);
    await c.haproxy.waitServer('c', 'DOWN');
    for (let i = 0; i < 4; i++) {
      const r = await H.postRaw(fetchFn, c.url(UPSTREAM), H.initializeBody(), bearer(grants.plain.token));
      assert.equal(r.status, 200, r.text);
    }
  });
});

// ---------------------------------------------------------------------------
// 2. The cluster

describe('cluster: three instances, one redis-server, HAProxy in front', () => {
  let c;
  let g;

  before(async () => {
    const sub = path.join(dir, 'cluster');
    fs.mkdirSync(sub);
    g = makeGrants({
      seed: SEED_POLICY,
      race: budgetPolicy('race', 10),
      sess: budgetPolicy('sess', 10),
      other: budgetPolicy('other', 10),
      approve: budgetPolicy('approve', 10),
      retry: writePolicy('retry.json', { version: '1', default: 'deny', tools: { write_file: { action: 'approve', approval_mode: 'retry' } } }),
      task: writePolicy('task.json', { version: '1', default: 'deny', tools: { write_file: { action: 'approve', approval_mode: 'task' } } }),
      reload: budgetPolicy('reload', 10),
      pause: budgetPolicy('pause', 40),
      kill: budgetPolicy('kill', 20),
      restart: budgetPolicy('restart', 10),
      local: budgetPolicy('local', 5),
    });
    c = await C.startCluster({
      cleanup, dir: sub, n: 3, adminToken: ADMIN_TOKEN,
      conf: { grants: grantConf(g), upstreams: upstreamConf() },
    });
    current = c;
  });

  test('every instance exports tollgate_cluster_* metrics and sees Redis up', async () => {
    for (let i = 0; i < 3; i++) {
      const m = await c.clusterMetrics(i);
      assert.ok(Object.keys(m).length > 0, `tollgate[${c.instances[i].name}]: no tollgate_cluster_ metric`);
      await c.instances[i].waitForMetric('tollgate_cluster_redis_up', (v) => v === 1, { token: ADMIN_TOKEN });
    }
  });

  test('seed scenario through HAProxy: 10 execute_code per minute for the grant across 3 instances, the 11th -32002', async (t) => {
    const before = await Promise.all([0, 1, 2].map((i) => c.metrics(i)));
    const cl = await H.connectClient(c.url(UPSTREAM), { fetch: fetchFn, headers: bearer(g.seed.token), cleanup });
    const { tools } = await cl.client.listTools();
    assert.deepEqual(tools.map((x) => x.name), ['execute_code']);
    for (let i = 1; i <= 10; i++) {
      const r = await cl.client.callTool({ name: 'execute_code', arguments: { language: 'python', code: `seed-${i}` } });
      assert.ok(!r.isError, `call ${i}: ${JSON.stringify(r)}`);
    }
    const e = await cl.client.callTool({ name: 'execute_code', arguments: { language: 'python', code: 'seed-11' } })
      .then((r) => assert.fail(`the 11th call was served: ${JSON.stringify(r)}`), (x) => x);
    assert.ok(e instanceof sdk.types.McpError, String(e));
    assert.equal(e.code, -32002, e.message);
    assert.equal(e.data?.counter, 'execute_code_rate', JSON.stringify(e.data));
    assert.equal(forwarded('seed-').length, 10, 'exactly 10 reached the stand-in');
    const after = await Promise.all([0, 1, 2].map((i) => c.metrics(i)));
    const decided = after.map((m, i) => family(m, 'tollgate_decisions_total') - family(before[i], 'tollgate_decisions_total'));
    assert.ok(decided.every((d) => d > 0), `every instance decided some of the calls (spread over 3): ${decided}`);
    const rt = after.reduce((a, m, i) => a + family(m, 'tollgate_cluster_redis_round_trips_total') - family(before[i], 'tollgate_cluster_redis_round_trips_total'), 0);
    const cmds = after.reduce((a, m, i) => a + family(m, 'tollgate_cluster_redis_commands_total') - family(before[i], 'tollgate_cluster_redis_commands_total'), 0);
    const keys = await c.redis.command('KEYS', `${c.keyPrefix}*`);
    assert.ok(Array.isArray(keys) && keys.length > 0, `the counters live in Redis under ${c.keyPrefix}: ${JSON.stringify(keys)}`);
    t.diagnostic(`decisions per instance ${decided.join('/')}; Redis round trips ${rt}, commands ${cmds} for 1 initialize + 1 tools/list + 11 tools/call`);
    await cl.close();
  });

  test('a 40-call race spread over the 3 instances: exactly the budget (10) allowed, 30 limited', async (t) => {
    const s = await session(c.instanceUrl(0, UPSTREAM), g.race);
    const before = await Promise.all([0, 1, 2].map((i) => c.metrics(i)));
    const calls = Array.from({ length: 40 }, (_, i) => rawCall(c.instanceUrl(i % 3, UPSTREAM), s, 'execute_code', { language: 'python', code: `race-${i}` }));
    const rs = await Promise.all(calls);
    const oks = rs.filter(ok);
    const limited = rs.filter((r) => code(r) === -32002);
    assert.equal(oks.length, 10, `allowed: ${oks.length}; answers: ${JSON.stringify(rs.filter((r) => !ok(r) && code(r) !== -32002)).slice(0, 1500)}`);
    assert.equal(limited.length, 30);
    assert.equal(forwarded('race-').length, 10, 'exactly 10 reached the stand-in');
    const after = await Promise.all([0, 1, 2].map((i) => c.metrics(i)));
    const delta = (name) => after.reduce((a, m, i) => a + family(m, name) - family(before[i], name), 0);
    t.diagnostic(`Redis per tools/call: ${(delta('tollgate_cluster_redis_round_trips_total') / 40).toFixed(2)} round trips, ` +
      `${(delta('tollgate_cluster_redis_commands_total') / 40).toFixed(2)} commands (40 calls, one counter each, sessions adopted on b and c included)`);
  });

  test('a session made on instance a serves POSTs on b and c; a forged or foreign id is 404 there', async () => {
    const s = await session(c.instanceUrl(0, UPSTREAM), g.sess);
    for (const i of [1, 2]) {
      const r = await rawCall(c.instanceUrl(i, UPSTREAM), s, 'echo', { text: `sess-echo-${i}` });
      assert.ok(ok(r), `echo on ${c.instances[i].name}: ${JSON.stringify(r)}`);
      assert.equal(r.msg.result.content?.[0]?.text, `sess-echo-${i}`);
      const l = await H.postRaw(fetchFn, c.instanceUrl(i, UPSTREAM), { jsonrpc: '2.0', id: 7, method: 'tools/list' }, s.headers);
      assert.equal(l.status, 200, l.text);
      assert.deepEqual(l.messages[0].result.tools.map((x) => x.name).sort(), ['echo', 'execute_code', 'write_file']);
    }
    assert.deepEqual(forwarded('sess-echo-', 'text').sort(), ['sess-echo-1', 'sess-echo-2']);
    // a forged id: one character changed, so its seal cannot verify
    const sid = s.sessionId;
    const flipped = sid.slice(0, -2) + (sid.at(-2) === 'A' ? 'B' : 'A') + sid.at(-1);
    const forged = await rawCall(c.instanceUrl(1, UPSTREAM), { headers: { ...s.headers, 'mcp-session-id': flipped } }, 'echo', { text: 'sess-forged' });
    assert.equal(forged.status, 404, `forged session id: ${JSON.stringify(forged)}`);
    // another grant's token with this session id
    const foreign = await rawCall(c.instanceUrl(2, UPSTREAM), { headers: { ...s.headers, ...bearer(g.other.token) } }, 'echo', { text: 'sess-foreign' });
    assert.equal(foreign.status, 404, `another grant's session: ${JSON.stringify(foreign)}`);
    assert.deepEqual(forwarded('sess-forged', 'text').concat(forwarded('sess-foreign', 'text')), []);
  });

  test('DELETE on c ends a session made on a and used on b, for every instance', async () => {
    const s = await session(c.instanceUrl(0, UPSTREAM), g.sess);
    for (const i of [0, 1, 2]) assert.ok(ok(await rawCall(c.instanceUrl(i, UPSTREAM), s, 'echo', { text: `del-before-${i}` })));
    const d = await fetchFn(c.instanceUrl(2, UPSTREAM), { method: 'DELETE', headers: s.headers });
    await d.text();
    assert.ok(d.status === 200 || d.status === 204, `DELETE: HTTP ${d.status}`);
    const after = {};
    for (const i of [2, 1, 0]) after[c.instances[i].name] = (await rawCall(c.instanceUrl(i, UPSTREAM), s, 'echo', { text: `del-after-${i}` })).status;
    assert.deepEqual(after, { c: 404, b: 404, a: 404 }, 'HTTP status of a POST with the deleted session id, per instance');
    assert.deepEqual(forwarded('del-after-', 'text'), [], 'nothing forwarded on a deleted session');
  });

  test('approvals: parked on a, listed on b and c, approved on c; the client on a gets the result, the stand-in the call once', async () => {
    const a = await H.connectClient(c.instanceUrl(0, UPSTREAM), { fetch: fetchFn, headers: bearer(g.approve.token), cleanup });
    const args = { path: '/tmp/cluster-approved.txt', content: 'approve-on-c' };
    const pending = a.client.callTool({ name: 'write_file', arguments: args });
    pending.catch(() => {});
    const listed = {};
    for (const i of [1, 2]) {
      listed[i] = await H.waitUntil(async () => {
        const r = await c.admin(i, 'GET', '/admin/approvals');
        return r.json?.approvals?.find((x) => x.tool === 'write_file');
      }, { what: `the parked call in ${c.instances[i].name}'s GET /admin/approvals` });
    }
    assert.equal(listed[1].id, listed[2].id, 'the same approval id on b and c');
    // the same fields as without a cluster (policy.test.mjs), the member holding it named
    for (const i of [1, 2]) {
      assert.deepEqual(H.approvalFields(listed[i]), H.APPROVAL_FIELDS, JSON.stringify(listed[i]));
      assert.equal(listed[i].instance, c.instances[0].name);
      assert.ok(!('args' in listed[i]), `audit.args is not "values": no arguments listed: ${JSON.stringify(listed[i])}`);
    }
    assert.equal(forwarded('/tmp/cluster-approved', 'path').length, 0, 'nothing forwarded before the decision');
    assert.equal(listed[1].digest, listed[2].digest, 'the same digest on b and c');
    const r = await c.admin(2, 'POST', `/admin/approvals/${listed[2].id}/approve`,
      { headers: { 'X-Tollgate-Approver': 'carol' }, body: JSON.stringify({ digest: listed[2].digest }) });
    assert.equal(r.status, 200, r.text);
    const res = await H.within(pending, H.scaled(10000), 'the approved call to complete on a');
    assert.ok(!res.isError, JSON.stringify(res));
    assert.equal(forwarded('/tmp/cluster-approved', 'path').length, 1, 'forwarded exactly once');
    for (const i of [0, 1, 2]) {
      await H.waitUntil(async () => (await c.admin(i, 'GET', '/admin/approvals')).json?.approvals?.length === 0,
        { what: `${c.instances[i].name}'s queue to be empty` });
    }
    const again = await c.admin(1, 'POST', `/admin/approvals/${listed[1].id}/approve`, { body: JSON.stringify({ digest: listed[1].digest }) });
    assert.equal(again.status, 404, `approving a decided call again on b: ${again.text}`);
    // shown as decided on every member, with who decided it and where
    const decided = await H.waitUntil(async () => (await c.admin(1, 'GET', '/admin/approvals')).json?.decided?.find((x) => x.id === listed[1].id),
      { what: "the decided call in b's list" });
    assert.equal(decided.decision, 'approved', JSON.stringify(decided));
    assert.equal(decided.by, `carol@${c.instances[2].name}`, JSON.stringify(decided));
    // and a deny on b reaches the client on a: -32003, never forwarded
    const denyArgs = { path: '/tmp/cluster-denied.txt', content: 'deny-on-b' };
    const refused = a.client.callTool({ name: 'write_file', arguments: denyArgs }).then((r) => ({ r }), (e) => ({ e }));
    const item = await H.waitUntil(async () => (await c.admin(1, 'GET', '/admin/approvals')).json?.approvals?.find((x) => x.tool === 'write_file'),
      { what: "the second parked call in b's list" });
    const d = await c.admin(1, 'POST', `/admin/approvals/${item.id}/deny`, { headers: { 'X-Tollgate-Approver': 'dave' } });
    assert.equal(d.status, 200, d.text);
    const out = await H.within(refused, H.scaled(10000), 'the denied call to be answered on a');
    assert.ok(out.e instanceof sdk.types.McpError, `denied: ${JSON.stringify(out.r ?? String(out.e))}`);
    assert.equal(out.e.code, -32003, out.e.message);
    assert.equal(forwarded('/tmp/cluster-denied', 'path').length, 0, 'a denied call is never forwarded');
    await a.close();
  });

  test('approvals in retry mode: pending on a, listed and approved on b; the call made again on a runs once, a third needs a new approval', async () => {
    const a = await H.connectClient(c.instanceUrl(0, UPSTREAM), { fetch: fetchFn, headers: bearer(g.retry.token), cleanup });
    const args = { path: '/tmp/cluster-retry.txt', content: 'approve-on-b' };
    const call = () => a.client.callTool({ name: 'write_file', arguments: args }).then((r) => ({ r }), (e) => ({ e }));
    const first = await call();
    assert.equal(first.e?.code, -32003, JSON.stringify(first.r ?? String(first.e)));
    assert.equal(first.e.data.status, 'pending');
    const id = first.e.data.approval_id;
    const item = await H.waitUntil(async () => (await c.admin(1, 'GET', '/admin/approvals')).json?.approvals?.find((x) => x.id === id),
      { what: "the pending approval in b's list" });
    assert.equal(item.instance, c.instances[0].name);
    const r = await c.admin(1, 'POST', `/admin/approvals/${id}/approve`, { headers: { 'X-Tollgate-Approver': 'erin' }, body: JSON.stringify({ digest: item.digest }) });
    assert.equal(r.status, 200, r.text);
    await H.waitUntil(async () => !(await c.admin(0, 'GET', '/admin/approvals')).json?.approvals?.some((x) => x.id === id),
      { what: 'the decision to reach a' });
    const second = await call();
    assert.ok(second.r && !second.r.isError, JSON.stringify(second.r ?? String(second.e)));
    assert.equal(forwarded('/tmp/cluster-retry', 'path').length, 1, 'the call made again ran exactly once');
    const third = await call();
    assert.equal(third.e?.code, -32003, JSON.stringify(third.r ?? String(third.e)));
    assert.notEqual(third.e.data.approval_id, id, 'a new approval');
    assert.equal(forwarded('/tmp/cluster-retry', 'path').length, 1, 'the third call did not run');
    // c learns of the new approval through Redis, a moment after a parked it: deny it once listed
    await H.waitUntil(async () => (await c.admin(2, 'GET', '/admin/approvals')).json?.approvals?.some((x) => x.id === third.e.data.approval_id),
      { what: "the third call's approval in c's list" });
    const d = await c.admin(2, 'POST', `/admin/approvals/${third.e.data.approval_id}/deny`);
    assert.equal(d.status, 200, d.text);
    await a.close();
  });

  // Retry-mode approvals shared through Redis: the record a call made again meets is the same on
  // every member. Each helper call is a fresh raw tools/call on a session of that member.
  const retrySessions = {};
  const retryCall = async (i, args) => {
    retrySessions[i] ??= await session(c.instanceUrl(i, UPSTREAM), g.retry);
    return rawCall(c.instanceUrl(i, UPSTREAM), retrySessions[i], 'write_file', args);
  };
  const status = (r) => r.msg?.error?.data?.status;
  /** The record value in Redis holding approval `id` (found by scanning the record keys). */
  const recordOf = async (id) => {
    for (const k of await c.redis.command('KEYS', `${c.keyPrefix}ar:*`)) {
      const v = await c.redis.command('GET', k);
      if (typeof v === 'string' && v.slice(1, 33) === id) return { key: k, value: v };
    }
    return null;
  };
  /** Approve (or deny, with a reason) the pending approval id through member i's admin API. */
  const decide = async (i, id, how, body = {}) => {
    const item = await H.waitUntil(async () => (await c.admin(i, 'GET', '/admin/approvals')).json?.approvals?.find((x) => x.id === id),
      { what: `approval ${id} in ${c.instances[i].name}'s list` });
    const r = await c.admin(i, 'POST', `/admin/approvals/${id}/${how}`, { headers: { 'X-Tollgate-Approver': 'frank' }, body: JSON.stringify({ digest: item.digest, ...body }) });
    assert.equal(r.status, 200, r.text);
    // the member holding it wrote the decided record (A approved, D denied)
    await H.waitUntil(async () => (await recordOf(id))?.value[0] === (how === 'approve' ? 'A' : 'D'), { what: `the ${how}d record in Redis` });
  };

  test('retry approvals are shared: pending on a (the same approval on c), approved through b, run once on c; again on a or b needs a new approval', async (t) => {
    const args = { path: '/tmp/cluster-share.txt', content: 'pending-a-approve-b-run-c' };
    const first = await retryCall(0, args);
    assert.equal(code(first), -32003, JSON.stringify(first));
    assert.equal(status(first), 'pending');
    const id = first.msg.error.data.approval_id;
    const onC = await retryCall(2, args);
    assert.equal(status(onC), 'pending', JSON.stringify(onC));
    assert.equal(onC.msg.error.data.approval_id, id, 'the identical call on c shares a\'s approval');
    const rec = await recordOf(id);
    assert.match(rec.value, /^P[0-9a-f]{32}[0-9a-f]{64}\.\{/, `a record is STATE ID MAC . JSON: ${rec.value}`);
    assert.ok(Number(await c.redis.command('PTTL', rec.key)) > 0, 'the record expires');
    await decide(1, id, 'approve');
    const m0 = await c.metrics(2);
    const ran = await retryCall(2, args);
    assert.ok(ok(ran), `the call made again on c: ${JSON.stringify(ran)}`);
    const m1 = await c.metrics(2);
    const delta = (name) => family(m1, name) - family(m0, name);
    t.diagnostic(`the approved call made again on c: ${delta('tollgate_cluster_redis_requests_total')} Redis requests, ` +
      `${delta('tollgate_cluster_redis_round_trips_total')} round trips (the lookup that takes it, then its deletion once sent)`);
    assert.equal(forwarded('/tmp/cluster-share', 'path').length, 1, 'ran exactly once, on c');
    assert.equal(await recordOf(id), null, 'the used approval is gone from Redis');
    const onA = await retryCall(0, args);
    assert.equal(status(onA), 'pending', `again on a: ${JSON.stringify(onA)}`);
    assert.notEqual(onA.msg.error.data.approval_id, id, 'a new approval');
    const onB = await retryCall(1, args);
    assert.equal(status(onB), 'pending', `again on b: ${JSON.stringify(onB)}`);
    assert.equal(onB.msg.error.data.approval_id, onA.msg.error.data.approval_id, 'b shares the new approval');
    assert.equal(forwarded('/tmp/cluster-share', 'path').length, 1, 'nothing more ran');
    await decide(2, onA.msg.error.data.approval_id, 'deny');
  });

  test('retry approvals: the same approved call made on a and b at once runs exactly once', async () => {
    for (let round = 0; round < 3; round++) {
      const args = { path: `/tmp/cluster-race-${round}.txt`, content: 'race' };
      const id = (await retryCall(0, args)).msg.error.data.approval_id;
      await decide(2, id, 'approve');
      const rs = await Promise.all([retryCall(0, args), retryCall(1, args)]);
      assert.equal(rs.filter(ok).length, 1, `round ${round}: exactly one ran: ${JSON.stringify(rs)}`);
      const other = rs.find((r) => !ok(r));
      assert.equal(code(other), -32003, JSON.stringify(other));
      assert.ok(['running', 'pending'].includes(status(other)), JSON.stringify(other));
      assert.equal(forwarded(`/tmp/cluster-race-${round}`, 'path').length, 1, `round ${round}: forwarded once`);
      if (status(other) === 'pending') await decide(0, other.msg.error.data.approval_id, 'deny');
    }
  });

  test('retry approvals: a record changed or forged in Redis is ignored (counted); the untouched one runs once', async () => {
    const refusedOn = async (i) => family(await c.metrics(i), 'tollgate_cluster_approval_records_refused_total');
    const before = await refusedOn(2);
    // a pending record turned "approved" by hand: its MAC no longer verifies
    const args = { path: '/tmp/cluster-forge.txt', content: 'forge' };
    const id = (await retryCall(0, args)).msg.error.data.approval_id;
    const pending = await recordOf(id);
    await c.redis.command('SET', pending.key, 'A' + pending.value.slice(1).replace('"state":"pending"', '"state":"approved"'), 'PX', '60000');
    const forged = await retryCall(2, args);
    assert.equal(status(forged), 'pending', `a forged approval: ${JSON.stringify(forged)}`);
    assert.notEqual(forged.msg.error.data.approval_id, id, 'ignored: c made a pending record of its own');
    assert.equal(forwarded('/tmp/cluster-forge', 'path').length, 0, 'nothing ran');
    await decide(2, forged.msg.error.data.approval_id, 'deny');
    await decide(1, id, 'deny'); // a's pending call, whose record was replaced, is still listed: decided too
    // an approved record whose approver was changed, then one with no MAC: ignored; put back: it runs
    const args2 = { path: '/tmp/cluster-alter.txt', content: 'alter' };
    const id2 = (await retryCall(1, args2)).msg.error.data.approval_id;
    await decide(0, id2, 'approve');
    const approved = await recordOf(id2);
    const json = approved.value.slice(98);
    for (const value of [approved.value.replace('"by":"frank', '"by":"mallory'), approved.value.slice(0, 33) + '0'.repeat(64) + '.' + json]) {
      assert.notEqual(value, approved.value);
      await c.redis.command('SET', approved.key, value, 'PX', '60000');
      const r = await retryCall(2, args2);
      assert.equal(code(r), -32003, `a changed record ran the call: ${JSON.stringify(r)}`);
      await decide(2, r.msg.error.data.approval_id, 'deny');
    }
    assert.equal(forwarded('/tmp/cluster-alter', 'path').length, 0, 'nothing ran');
    assert.ok(await refusedOn(2) - before >= 3, `records refused counted on c: ${await refusedOn(2) - before}`);
    await c.redis.command('SET', approved.key, approved.value, 'PX', '60000');
    const r = await retryCall(2, args2);
    assert.ok(ok(r), `the record as its member wrote it: ${JSON.stringify(r)}`);
    assert.equal(forwarded('/tmp/cluster-alter', 'path').length, 1);
  });

  test('retry approvals: a deny on b reaches the call made again on c with the approver\'s reason', async () => {
    const args = { path: '/tmp/cluster-deny.txt', content: 'deny' };
    const id = (await retryCall(0, args)).msg.error.data.approval_id;
    await decide(1, id, 'deny', { reason: 'not this path' });
    for (const i of [2, 0]) {
      const r = await retryCall(i, args);
      assert.equal(code(r), -32003, JSON.stringify(r));
      assert.equal(status(r), 'denied', JSON.stringify(r));
      assert.equal(r.msg.error.data.reason, 'not this path');
      assert.equal(r.msg.error.data.approval_id, id);
    }
    assert.equal(forwarded('/tmp/cluster-deny', 'path').length, 0);
  });

  test('retry approvals with Redis stopped: -32003 "approvals are unavailable", nothing runs; afterwards the approval runs once', async () => {
    const args = { path: '/tmp/cluster-down.txt', content: 'down' };
    const id = (await retryCall(0, args)).msg.error.data.approval_id;
    await decide(1, id, 'approve');
    const warm = await retryCall(2, { path: '/tmp/cluster-down-warm.txt', content: 'x' }); // c's session exists
    await decide(2, warm.msg.error.data.approval_id, 'deny');
    c.redis.stop();
    let down;
    try {
      down = await retryCall(2, args);
    } finally {
      c.redis.cont();
    }
    assert.equal(code(down), -32003, JSON.stringify(down));
    assert.equal(status(down), 'unavailable', JSON.stringify(down));
    assert.match(down.msg.error.message, /approvals are unavailable/);
    assert.equal(forwarded('/tmp/cluster-down', 'path').length, 0, 'nothing ran while Redis was stopped');
    for (let i = 0; i < 3; i++) await c.instances[i].waitForMetric('tollgate_cluster_redis_up', (v) => v === 1, { token: ADMIN_TOKEN, timeout: 15000 });
    const r = await H.waitUntil(async () => { const x = await retryCall(2, args); return status(x) === 'unavailable' ? null : x; },
      { what: 'the call made again once Redis answers' });
    assert.ok(ok(r), JSON.stringify(r));
    // b learns through Redis that the approved call has finished: until then it says "running"
    const again = await H.waitUntil(async () => { const x = await retryCall(1, args); return status(x) === 'running' ? null : x; },
      { what: "b seeing the approved call's end" });
    assert.equal(status(again), 'pending', JSON.stringify(again));
    assert.equal(forwarded('/tmp/cluster-down', 'path').length, 1, 'ran exactly once');
    await decide(1, again.msg.error.data.approval_id, 'deny');
  });

  test('approvals in task mode: a task on a, approved on c; polled on a, completed with the result, run once', async () => {
    const a = await H.connectClient(c.instanceUrl(0, UPSTREAM), { fetch: fetchFn, headers: bearer(g.task.token), cleanup });
    const args = { path: '/tmp/cluster-task.txt', content: 'approve-on-c' };
    const created = await a.client.request({ method: 'tools/call', params: { name: 'write_file', arguments: args, task: { ttl: 60000 } } },
      sdk.types.CreateTaskResultSchema);
    assert.equal(created.task.status, 'working', JSON.stringify(created));
    const item = await H.waitUntil(async () => (await c.admin(2, 'GET', '/admin/approvals')).json?.approvals?.find((x) => x.tool === 'write_file' && x.grant === 'task'),
      { what: "the parked task call in c's list" });
    assert.equal(item.instance, c.instances[0].name);
    const r = await c.admin(2, 'POST', `/admin/approvals/${item.id}/approve`, { body: JSON.stringify({ digest: item.digest }) });
    assert.equal(r.status, 200, r.text);
    const done = await H.waitUntil(async () => {
      const t = await a.client.request({ method: 'tasks/get', params: { taskId: created.task.taskId } }, sdk.types.GetTaskResultSchema);
      return t.status === 'completed' ? t : null;
    }, { what: 'the task to complete on a' });
    assert.equal(done.taskId, created.task.taskId);
    const res = await a.client.request({ method: 'tasks/result', params: { taskId: created.task.taskId } }, sdk.types.CallToolResultSchema);
    assert.ok(!res.isError, JSON.stringify(res));
    assert.equal(forwarded('/tmp/cluster-task', 'path').length, 1, 'run exactly once');
    await a.close();
  });

  test('approval listings are signed: one changed in Redis (arguments, tool) or forged is not shown and cannot be decided', async () => {
    const key = `${c.keyPrefix}approvals`;
    const a = await H.connectClient(c.instanceUrl(0, UPSTREAM), { fetch: fetchFn, headers: bearer(g.approve.token), cleanup });
    const args = { path: '/tmp/cluster-tamper.txt', content: 'tamper' };
    const pending = a.client.callTool({ name: 'write_file', arguments: args });
    pending.catch(() => {});
    const listedOn = async (i, id) => ((await c.admin(i, 'GET', '/admin/approvals')).json?.approvals ?? []).find((x) => x.id === id);
    const item = await H.waitUntil(async () => (await c.admin(1, 'GET', '/admin/approvals')).json?.approvals?.find((x) => x.tool === 'write_file'),
      { what: "the parked call in b's list" });
    const original = await c.redis.command('HGET', key, item.id);
    assert.match(original, /^[0-9a-f]{64}\./, `a listing is its MAC, a dot, then its JSON: ${original}`);
    const refusedBefore = family(await c.metrics(1), 'tollgate_cluster_approval_listings_refused_total');
    const forged = 'f'.repeat(32);
    const forgedJson = JSON.stringify({ ...JSON.parse(original.slice(65)), id: forged, tool: 'echo' });
    const tampered = {
      args: original.replace('/tmp/cluster-tamper.txt', '/etc/cluster-evil.txt'),
      tool: original.replace('"tool":"write_file"', '"tool":"read_file"'),
    };
    assert.notEqual(tampered.args, original);
    assert.notEqual(tampered.tool, original);
    for (const [what, value] of Object.entries(tampered)) {
      await c.redis.command('HSET', key, item.id, value);
      for (const i of [1, 2])
        assert.equal(await listedOn(i, item.id), undefined, `${what} changed in Redis: not shown on ${c.instances[i].name}`);
      const r = await c.admin(1, 'POST', `/admin/approvals/${item.id}/approve`, { body: JSON.stringify({ digest: item.digest }) });
      assert.equal(r.status, 404, `${what} changed in Redis: approve on b answered ${r.status} ${r.text}`);
    }
    // forged: a listing of its own, with the MAC of another, or none
    await c.redis.command('HSET', key, forged, original.slice(0, 65) + forgedJson);
    await c.redis.command('HSET', key, 'e'.repeat(32), JSON.stringify({ id: 'e'.repeat(32), tool: 'echo', instance: c.instances[0].name, deadline_ms: Date.now() + 60000 }));
    for (const i of [1, 2]) {
      const ids = (await c.admin(i, 'GET', '/admin/approvals')).json.approvals.map((x) => x.id);
      assert.ok(!ids.includes(forged) && !ids.includes('e'.repeat(32)), `forged listings shown on ${c.instances[i].name}: ${ids}`);
    }
    for (const id of [forged, 'e'.repeat(32)]) {
      const r = await c.admin(1, 'POST', `/admin/approvals/${id}/approve`, { body: JSON.stringify({ digest: item.digest }) });
      assert.equal(r.status, 404, `a forged listing decided: ${r.status} ${r.text}`);
    }
    await H.quietFor(200); // negative check: nothing reaches the stand-in late
    assert.equal(forwarded('/tmp/cluster-tamper', 'path').length + forwarded('/etc/cluster-evil', 'path').length, 0, 'nothing ran');
    const refused = family(await c.metrics(1), 'tollgate_cluster_approval_listings_refused_total') - refusedBefore;
    assert.ok(refused >= 4, `listings refused counted on b: ${refused}`);
    // the listing a member wrote verifies again: shown, and decided from another member
    await c.redis.command('HDEL', key, forged, 'e'.repeat(32));
    await c.redis.command('HSET', key, item.id, original);
    assert.equal((await listedOn(1, item.id))?.digest, item.digest, 'the untouched listing is shown again');
    const stale = await c.admin(1, 'POST', `/admin/approvals/${item.id}/approve`, { body: JSON.stringify({ digest: '0'.repeat(64) }) });
    assert.equal(stale.status, 409, `a stale digest through b: ${stale.status} ${stale.text}`);
    const r = await c.admin(1, 'POST', `/admin/approvals/${item.id}/approve`, { body: JSON.stringify({ digest: item.digest }) });
    assert.equal(r.status, 200, r.text);
    const res = await H.within(pending, H.scaled(10000), 'the approved call to complete on a');
    assert.ok(!res.isError, JSON.stringify(res));
    assert.equal(forwarded('/tmp/cluster-tamper', 'path').length, 1, 'forwarded once, as listed');
    await a.close();
  });

  test('a reload (SIGHUP) on b keeps the shared counters: 4 spent on a, 6 left on b, then -32002 on c', async () => {
    const s = await session(c.instanceUrl(0, UPSTREAM), g.reload);
    for (let i = 0; i < 4; i++) assert.ok(ok(await rawCall(c.instanceUrl(0, UPSTREAM), s, 'execute_code', { language: 'python', code: `reload-a-${i}` })));
    await c.hup(1);
    for (let i = 0; i < 6; i++) {
      const r = await rawCall(c.instanceUrl(1, UPSTREAM), s, 'execute_code', { language: 'python', code: `reload-b-${i}` });
      assert.ok(ok(r), `call ${i} on b after its reload: ${JSON.stringify(r)}`);
    }
    for (const i of [1, 2]) {
      const r = await rawCall(c.instanceUrl(i, UPSTREAM), s, 'execute_code', { language: 'python', code: `reload-x-${i}` });
      assert.equal(code(r), -32002, `on ${c.instances[i].name}: ${JSON.stringify(r)}`);
    }
    assert.equal(forwarded('reload-').length, 10);
  });

  test('Redis paused (SIGSTOP) under load: counter calls -32004 with a reason, echo served; after SIGCONT counters work again, nothing overspent', async (t) => {
    const s = await session(c.instanceUrl(0, UPSTREAM), g.pause);
    const ec = (i, tag) => rawCall(c.instanceUrl(i % 3, UPSTREAM), s, 'execute_code', { language: 'python', code: `pause-${tag}` });
    for (let i = 0; i < 3; i++) assert.ok(ok(await ec(i, `before-${i}`)));
    c.redis.stop();
    let denied;
    let echoes;
    const downSeen = [];
    const readyWhileDown = [];
    try {
      [denied, echoes] = await Promise.all([
        Promise.all(Array.from({ length: 9 }, (_, i) => ec(i, `paused-${i}`))),
        Promise.all(Array.from({ length: 6 }, (_, i) => rawCall(c.instanceUrl(i % 3, UPSTREAM), s, 'echo', { text: `pause-echo-${i}` }))),
      ]);
      // while it is still stopped: /readyz stays 200 (HAProxy keeps every instance in), and
      // the instances say Redis is down (asserted below, after the answers)
      for (let i = 0; i < 3; i++) {
        const r = await fetch(`http://127.0.0.1:${c.instances[i].adminPort}/readyz`);
        await r.text();
        readyWhileDown[i] = r.status;
      }
      for (let i = 0; i < 3; i++) {
        downSeen[i] = await H.waitFor(async () => (await c.metrics(i)).tollgate_cluster_redis_up === 0, { timeout: H.scaled(10000), interval: 50 });
      }
    } finally {
      c.redis.cont();
    }
    for (const r of denied) {
      assert.equal(code(r), -32004, `a counter call with Redis stopped: ${JSON.stringify(r)}`);
      assert.ok(typeof r.msg.error.data?.reason === 'string' && r.msg.error.data.reason.length > 0, `error.data.reason: ${JSON.stringify(r.msg.error)}`);
      assert.ok(r.ms < H.scaled(5000), `answered within the deadline, not hung: ${r.ms} ms`);
    }
    for (const r of echoes) assert.ok(ok(r), `echo (no counter) with Redis stopped: ${JSON.stringify(r)}`);
    assert.deepEqual(forwarded('pause-paused-'), [], 'no call answered -32004 was forwarded');
    assert.deepEqual(readyWhileDown, [200, 200, 200], '/readyz with Redis stopped');
    assert.deepEqual(downSeen, [true, true, true], 'tollgate_cluster_redis_up went to 0 on every instance while Redis was stopped');
    t.diagnostic(`-32004 answered in ${Math.min(...denied.map((r) => r.ms))}..${Math.max(...denied.map((r) => r.ms))} ms`);

    for (let i = 0; i < 3; i++) {
      await c.instances[i].waitForMetric('tollgate_cluster_redis_up', (v) => v === 1, { token: ADMIN_TOKEN, timeout: 15000 });
      let n = 0;
      const r = await H.waitUntil(async () => { const x = await ec(i, `resume-${i}-${n++}`); return ok(x) ? x : (code(x) === -32004 ? null : x); },
        { what: `a counter call on ${c.instances[i].name} to succeed after SIGCONT` });
      assert.ok(ok(r), `after SIGCONT on ${c.instances[i].name}: ${JSON.stringify(r)}`);
    }
    // spend the rest: the budget holds (40 for the grant, never more forwarded)
    let limited = null;
    for (let i = 0; i < 60 && !limited; i++) {
      const r = await ec(i, `rest-${i}`);
      if (code(r) === -32002) limited = r;
      else assert.ok(ok(r), JSON.stringify(r));
    }
    assert.ok(limited, 'the budget ran out again (-32002)');
    const n = forwarded('pause-').length;
    t.diagnostic(`forwarded ${n} of a budget of 40 (reservations queued in the stopped Redis may be lost, never added)`);
    assert.ok(n <= 40, `overspent: ${n} > 40`);
    assert.ok(n >= 40 - denied.length, `${n} forwarded: more lost than the ${denied.length} calls made while Redis was stopped`);
  });

  test('on_unavailable = "local" by a reload on c: with Redis stopped c decides on its own counters (counted), a and b still refuse -32004', async () => {
    const s = await session(c.instanceUrl(0, UPSTREAM), g.local);
    const ec = (i, tag) => rawCall(c.instanceUrl(i, UPSTREAM), s, 'execute_code', { language: 'python', code: `local-${tag}` });
    assert.ok(ok(await ec(2, 'warm')), 'c knows the session before Redis stops');
    await c.reconfigure(2, { on_unavailable: 'local' });
    const fb0 = (await c.metrics(2)).tollgate_cluster_fallback_decisions_total ?? 0;
    const from = c.instances[2].stderr().length;
    c.redis.stop();
    const onC = [];
    let onA;
    try {
      for (let i = 0; i < 6; i++) onC.push(await ec(2, `c-${i}`));
      onA = await ec(0, 'a');
    } finally {
      c.redis.cont();
    }
    // c's own bucket of 5 is full (it never spent locally): 5 served, then -32002, decided locally
    assert.deepEqual(onC.map((r) => (ok(r) ? 'ok' : code(r))), ['ok', 'ok', 'ok', 'ok', 'ok', -32002], JSON.stringify(onC.filter((r) => !ok(r))));
    assert.equal(code(onA), -32004, `a (deny) with Redis stopped: ${JSON.stringify(onA)}`);
    const fb1 = (await c.metrics(2)).tollgate_cluster_fallback_decisions_total;
    assert.ok(fb1 - fb0 >= 6, `tollgate_cluster_fallback_decisions_total on c: ${fb0} -> ${fb1}`);
    await c.instances[2].waitForLog(/redis unavailable.*on_unavailable=local/, { from, what: 'the line saying c decides locally' });
    await c.reconfigure(2, { on_unavailable: 'deny' });
    for (let i = 0; i < 3; i++) await c.instances[i].waitForMetric('tollgate_cluster_redis_up', (v) => v === 1, { token: ADMIN_TOKEN, timeout: 15000 });
  });

  test('Redis killed and restarted empty on its port: -32004 while it is gone, then scripts loaded again and counters work (from a full bucket: no persistence)', async (t) => {
    const s = await session(c.instanceUrl(0, UPSTREAM), g.restart);
    const ec = (i, tag) => rawCall(c.instanceUrl(i % 3, UPSTREAM), s, 'execute_code', { language: 'python', code: `restart-${tag}` });
    for (let i = 0; i < 3; i++) assert.ok(ok(await ec(i, `before-${i}`)));
    await c.redis.kill();
    try {
      for (let i = 0; i < 3; i++) {
        await c.instances[i].waitForMetric('tollgate_cluster_redis_up', (v) => v === 0, { token: ADMIN_TOKEN });
        const r = await ec(i, `down-${i}`);
        assert.equal(code(r), -32004, `Redis gone, on ${c.instances[i].name}: ${JSON.stringify(r)}`);
        assert.ok(r.msg.error.data?.reason, JSON.stringify(r.msg.error));
        const e = await rawCall(c.instanceUrl(i, UPSTREAM), s, 'echo', { text: `restart-echo-${i}` });
        assert.ok(ok(e), `echo with Redis gone, on ${c.instances[i].name}: ${JSON.stringify(e)}`);
      }
    } finally {
      if (c.redis.proc.exitCode !== null || c.redis.proc.signalCode !== null) await c.redis.restart();
    }
    assert.deepEqual(forwarded('restart-down-'), []);
    let unavailable = 0;
    let served = 0;
    for (let i = 0; i < 3; i++) {
      await c.instances[i].waitForMetric('tollgate_cluster_redis_up', (v) => v === 1, { token: ADMIN_TOKEN, timeout: 15000 });
      let n = 0;
      await H.waitUntil(async () => {
        const x = await ec(i, `up-${i}-${n++}`);
        if (code(x) === -32004) { unavailable++; return false; }
        assert.ok(ok(x), `after the restart, on ${c.instances[i].name}: ${JSON.stringify(x)}`);
        served++;
        return true;
      }, { what: `a counter call on ${c.instances[i].name} after the restart` });
    }
    let limited = null;
    for (let i = 0; i < 20 && !limited; i++) {
      const r = await ec(i, `rest-${i}`);
      if (code(r) === -32002) limited = r;
      else { assert.ok(ok(r), JSON.stringify(r)); served++; }
    }
    assert.ok(limited, 'the new bucket runs out (-32002)');
    t.diagnostic(`after the restart: ${served} served before -32002, ${unavailable} answered -32004 while reconnecting`);
    assert.ok(served <= 10 && served >= 10 - unavailable, `a fresh bucket of 10: ${served} served`);
  });

  test('an instance killed (SIGKILL) under load: the others keep serving through HAProxy, the budget holds', async (t) => {
    const s = await session(c.instanceUrl(0, UPSTREAM), g.kill);
    const results = [];
    let started = 0;
    let killed = null;
    const worker = async () => {
      while (started < 60) {
        const k = started++;
        results.push(await rawCall(c.url(UPSTREAM), s, 'execute_code', { language: 'python', code: `kill-${k}` }));
        if (results.length === 8 && !killed) killed = c.kill(2);
      }
    };
    await Promise.all(Array.from({ length: 6 }, worker));
    await killed;
    await c.haproxy.waitServer('c', 'DOWN');
    const oks = results.filter(ok).length;
    const limited = results.filter((r) => code(r) === -32002).length;
    const failed = results.filter((r) => !ok(r) && code(r) !== -32002);
    t.diagnostic(`60 calls: ${oks} served, ${limited} limited, ${failed.length} failed at the kill (${failed.map((r) => r.status ?? r.error).join(', ')})`);
    // At most the 6 calls in flight at the kill, and per worker one more that HAProxy wrote on a
    // kept-alive connection to the dead instance before it noticed (a POST it may not resend).
    assert.ok(failed.length <= 12, `at most the calls in flight at the kill (and one more per worker) fail: ${JSON.stringify(failed).slice(0, 1500)}`);
    for (const r of failed) assert.ok(r.error || r.status >= 500, `a failure is a transport failure, not a wrong answer: ${JSON.stringify(r)}`);
    const fw = forwarded('kill-');
    assert.ok(fw.length <= 20, `overspent: ${fw.length} forwarded`);
    assert.ok(fw.length >= 20 - failed.length, `${fw.length} forwarded, but only ${failed.length} reservations can have been lost`);
    assert.ok(oks <= fw.length && fw.length <= oks + failed.length, `served ${oks}, forwarded ${fw.length}, failed ${failed.length}`);
    assert.ok(limited >= 60 - 20 - failed.length);
    // after the kill: every call through HAProxy is answered by a or b
    for (let i = 0; i < 6; i++) {
      const r = await rawCall(c.url(UPSTREAM), s, 'echo', { text: `kill-after-${i}` });
      assert.ok(ok(r), `after the kill: ${JSON.stringify(r)}`);
    }
    const r = await rawCall(c.url(UPSTREAM), s, 'execute_code', { language: 'python', code: 'kill-after-ec' });
    assert.equal(code(r), -32002, JSON.stringify(r));
  });
});

// ---------------------------------------------------------------------------
// 3. A counter key poisoned in Redis fails closed

describe('a counter key in Redis that holds no finite decimal number', () => {
  const local = new H.Cleanup();
  let c;
  let g;
  let audit;

  before(async () => {
    const sub = path.join(dir, 'poison');
    fs.mkdirSync(sub);
    g = makeGrants({ poison: budgetPolicy('poison', 10) });
    audit = path.join(sub, 'audit.log');
    c = await C.startCluster({
      cleanup: local, dir: sub, n: 1, adminToken: ADMIN_TOKEN,
      cluster: { on_unavailable: 'local' }, // even so: poisoned data is not an outage to fall back from
      conf: { grants: grantConf(g), upstreams: upstreamConf(), audit: { file: audit } },
    });
    current = c;
  });
  after(() => local.run());

  test('nan, inf, 0x10, 1e999 ...: -32004 with the reason (never the local counters), nothing forwarded, no nan or inf in the audit', async () => {
    const url = c.instanceUrl(0, UPSTREAM);
    const s = await session(url, g.poison);
    const first = await rawCall(url, s, 'execute_code', { language: 'python', code: 'poison-0' });
    assert.ok(ok(first), JSON.stringify(first));
    const keys = (await c.redis.command('KEYS', `${c.keyPrefix}c:*`));
    assert.equal(keys.length, 1, `one counter key: ${JSON.stringify(keys)}`);
    const [stamp] = String(await c.redis.command('GET', keys[0])).split(' ');
    const poisons = ['nan', '-nan', 'inf', '-inf', 'infinity', '0x10', '0x1p3', '1e999', '01', 'x'];
    for (const [i, bad] of poisons.entries()) {
      assert.equal(await c.redis.command('SET', keys[0], `${stamp} ${bad}`, 'KEEPTTL'), 'OK');
      const r = await rawCall(url, s, 'execute_code', { language: 'python', code: `poison-${i + 1}` });
      assert.equal(code(r), -32004, `counter value ${bad}: ${JSON.stringify(r)}`);
      assert.match(JSON.stringify(r.msg.error), /not a finite decimal number/, `the reason for ${bad}`);
    }
    assert.deepEqual(forwarded('poison-'), ['poison-0'], 'no call against a poisoned counter reached the upstream');
    const m = await c.metrics(0);
    assert.equal(family(m, 'tollgate_cluster_fallback_decisions_total'), 0, 'never decided on the local counters');
    // the audit: one strict JSON line per call, no nan or inf anywhere
    const lines = await H.waitFor(() => {
      const t = fs.existsSync(audit) ? fs.readFileSync(audit, 'utf8') : '';
      const l = t.split('\n').filter((x) => x.includes('"execute_code"'));
      return l.length >= poisons.length + 1 ? l : null;
    }, { timeout: 10000 });
    assert.ok(lines, `audit lines: ${fs.existsSync(audit) ? fs.readFileSync(audit, 'utf8') : '(no file)'}`);
    for (const l of lines) {
      const rec = JSON.parse(l);
      assert.doesNotMatch(l, /\b-?(nan|inf|infinity)\b/i, `audit line: ${l}`);
      for (const v of Object.values(rec.counters ?? {})) assert.ok(Number.isFinite(v), `counter value in ${l}`);
    }
  });
});

// ---------------------------------------------------------------------------
// 4. Histories shared through Redis: a toxic flow split over two instances

describe('histories: a toxic flow started on one instance is refused on another', () => {
  const local = new H.Cleanup();
  let c;
  let g;

  before(async () => {
    const sub = path.join(dir, 'history');
    fs.mkdirSync(sub);
    g = makeGrants({
      toxic: writePolicy('toxic.json', {
        version: '1', default: 'allow',
        tools: {
          run_command: { tags: ['reads_secrets'] },
          http_request: { tags: ['egress'], rules: [{ name: 'egress-rate', rate_limit: '100/minute' }] },
          '*': {
            rules: [{
              name: 'no-egress-after-secrets', when: { tags: ['egress'] },
              conditions: [{ history: { tags: ['reads_secrets'], within: '10m' }, op: 'eq', value: 0 }],
            }],
          },
        },
      }),
    });
    c = await C.startCluster({
      cleanup: local, dir: sub, n: 2, adminToken: ADMIN_TOKEN,
      conf: { grants: grantConf(g), upstreams: upstreamConf() },
    });
    current = c;
  });
  after(() => local.run());

  /** The history lists in Redis, each as its elements (binary, read as latin1 text). */
  const lists = async () => {
    const out = [];
    for (const k of await c.redis.command('KEYS', `${c.keyPrefix}h:*`)) out.push(await c.redis.command('LRANGE', k, 0, -1));
    return out;
  };

  test('secrets read through a, egress through b refused (-32001 naming the read), forwarded never; one Redis round per decision', async () => {
    const a = await session(c.instanceUrl(0, UPSTREAM), g.toxic);
    const b = await session(c.instanceUrl(1, UPSTREAM), g.toxic);
    const before = await c.metrics(1);
    const first = await rawCall(c.instanceUrl(1, UPSTREAM), b, 'http_request', { url: 'https://example.com/egress-0' });
    assert.ok(ok(first), JSON.stringify(first));
    const mid = await c.metrics(1);
    assert.equal(family(mid, 'tollgate_cluster_decision_rounds_total') - family(before, 'tollgate_cluster_decision_rounds_total'), 1,
      'the history and the rate limit of one decision: one round trip');
    const read = await rawCall(c.instanceUrl(0, UPSTREAM), a, 'run_command', { command: 'cat /run/secrets/token' });
    assert.ok(ok(read), JSON.stringify(read));
    // answered once it was in Redis: no waiting here
    assert.ok((await lists()).flat().some((e) => String(e).includes('run_command')), 'the read is in a history list in Redis');
    const r = await rawCall(c.instanceUrl(1, UPSTREAM), b, 'http_request', { url: 'https://example.com/egress-1' });
    assert.equal(code(r), -32001, JSON.stringify(r));
    assert.equal(r.msg.error.data.rule, 'no-egress-after-secrets');
    assert.match(r.msg.error.data.reason, /run_command on cowork-os/, 'the refusal names the read made through a');
    assert.deepEqual(forwarded('https://example.com/egress-', 'url'), ['https://example.com/egress-0'], 'the egress after the read never reached the upstream');
    const ma = await c.metrics(0);
    const mb = await c.metrics(1);
    // one call kept each (to the subject's ring and, when that is not the grant's own, the
    // grant's); b's refused egress was added ahead of its decision and taken back
    const kept = (m) => family(m, 'tollgate_cluster_history_adds_total') - family(m, 'tollgate_cluster_history_removals_total');
    assert.ok(kept(ma) >= 1, 'a recorded the read');
    assert.equal(kept(mb), kept(ma), 'b recorded its first egress, not the refused one');
    assert.ok(family(mb, 'tollgate_cluster_history_removals_total') >= 1, 'the refused egress was taken back');
    for (const l of await lists()) assert.equal(l.length, 2, 'each list: the first egress and the read');
    assert.equal(family(mb, 'tollgate_history_keys'), 0, "b's own memory holds no history: it is Redis's");
  });

  test('a history entry changed in Redis fails the decision closed (-32004, counted), never decided without it', async () => {
    const b = await session(c.instanceUrl(1, UPSTREAM), g.toxic);
    const keys = await c.redis.command('KEYS', `${c.keyPrefix}h:*`);
    assert.ok(keys.length >= 1, JSON.stringify(keys));
    for (const k of keys) await c.redis.command('RPUSH', k, 'not an entry');
    const r = await rawCall(c.instanceUrl(1, UPSTREAM), b, 'http_request', { url: 'https://example.com/egress-2' });
    assert.equal(code(r), -32004, JSON.stringify(r));
    assert.match(JSON.stringify(r.msg.error), /history entry/);
    const m = await c.metrics(1);
    assert.ok(family(m, 'tollgate_cluster_values_refused_total') >= 1, 'counted');
    assert.deepEqual(forwarded('https://example.com/egress-2', 'url'), []);
  });
});
