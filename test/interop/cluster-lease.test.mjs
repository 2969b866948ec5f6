// The cluster's opt-in token lease (cluster.lease, cluster/lease.c) under races, through three
// tollgate instances, one redis-server and the CoWork OS stand-in (test/interop/lib/cluster.mjs).
// Each instance may take up to 4 tokens more than a call needs from a bucket and answer the calls
// they cover without Redis; unspent ones go back after lease.ms. What must hold:
//
//   1. a race of 150 calls over the 3 instances on a budget of 60, Redis paused (SIGSTOP) while
//      calls wait in the sockets and resumed within the deadline: never more than 60 forwarded,
//      each call answered once (forwarded or refused, never both), and at most 3 x 4 fewer than
//      60 (the tokens that sit in leases); some calls were answered from a lease;
//   2. leftovers come back: once lease.ms has passed the unspent tokens are in Redis again, and
//      calls on one instance reach exactly the budget of 60 in all;
//   3. with the lease off, exactly the budget as before (cluster-pipeline.test.mjs, whose
//      instances run without a lease, is unchanged and still passes).
//
// The stand-in's request log is the proof of what reached the upstream: every call carries a
// unique argument.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/cluster-lease.test.mjs

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
let g;
const UPSTREAM = 'cowork-os';
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const ADMIN_TOKEN = 'admin-' + H.randomToken();
const SEED_POLICY = path.join(H.REPO_ROOT, 'conf', 'policies', 'cowork-os.json');
const TIMEOUT_MS = 2000; // cluster.timeout_ms: the pause below stays under it
const LEASE = 4;
const LEASE_MS = 1500;

const logs = () => ({
  ...(c?.logs() ?? {}),
  'stand-in log': standin?.logFile && fs.existsSync(standin.logFile) ? fs.readFileSync(standin.logFile, 'utf8').slice(-3000) : undefined,
});
const test = (name, fn) => it(name, H.withLogs(logs, fn));

const budgetPolicy = (name, max) => {
  const f = path.join(dir, `${name}.json`);
  fs.writeFileSync(f, JSON.stringify({
    version: '1', default: 'deny',
    tools: { execute_code: { limits: [{ counter: 'execute_code_rate', window: 'day', max, scope: 'grant' }] } },
  }) + '\n');
  return f;
};

const forwarded = (prefix) => standin.records()
  .filter((r) => r.http && r.msg?.method === 'tools/call' && String(r.msg.params?.arguments?.code ?? '').startsWith(prefix))
  .map((r) => r.msg.params.arguments.code);

let nextId = 5000;
async function rawCall(url, sess, code) {
  try {
    const r = await H.postRaw(fetchFn, url, { jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name: 'execute_code', arguments: { language: 'python', code } } }, sess.headers);
    return { code, status: r.status, msg: r.messages[0] };
  } catch (e) {
    return { code, error: String(e) };
  }
}
const ok = (r) => r.status === 200 && r.msg?.result && !r.msg.result.isError;
const errCode = (r) => r.msg?.error?.code;

async function session(grant) {
  const s = await H.rawInitialize(fetchFn, c.instanceUrl(0, UPSTREAM), { authorization: `Bearer ${grant.token}` });
  assert.ok(s.sessionId, 'initialize gave an Mcp-Session-Id');
  // every instance adopts the session before the race (its record is read once, not raced)
  for (let i = 1; i < 3; i++) {
    const r = await H.postRaw(fetchFn, c.instanceUrl(i, UPSTREAM), { jsonrpc: '2.0', id: nextId++, method: 'tools/list', params: {} }, s.headers);
    assert.equal(r.status, 200, `tools/list on ${c.instances[i].name}`);
  }
  return s;
}

/** n calls at once, spread over the 3 instances; resolves with their answers. */
const race = (s, tag, n, from = 0) => Promise.all(Array.from({ length: n }, (_, k) => rawCall(c.instanceUrl((from + k) % 3, UPSTREAM), s, `${tag}-${from + k}`)));

const family = (m, name) => Object.entries(m).filter(([k]) => k === name || k.startsWith(name + '{')).reduce((a, [, v]) => a + v, 0);
const metricsAll = () => Promise.all([0, 1, 2].map((i) => c.metrics(i)));
const delta = (before, after, name) => after.reduce((a, m, i) => a + family(m, name) - family(before[i], name), 0);
/** Redis's own count of EVALSHA calls (INFO commandstats). */
async function evalshaCalls() {
  const info = String(await c.redis.command('INFO', 'commandstats'));
  const m = /cmdstat_evalsha:calls=(\d+)/.exec(info);
  return m ? Number(m[1]) : 0;
}

/** SIGSTOP, and wait until the kernel says the process is stopped. */
async function pauseRedis() {
  c.redis.stop();
  await H.waitUntil(() => {
    const st = fs.readFileSync(`/proc/${c.redis.proc.pid}/stat`, 'utf8');
    return st.slice(st.lastIndexOf(')') + 2).startsWith('T');
  }, { what: 'redis-server stopped (state T)' });
}

/** Wait until the instances together have at least n Redis requests in flight. */
const waitPending = (n) => H.waitUntil(async () => {
  const ms = await metricsAll();
  return ms.reduce((a, m) => a + (m.tollgate_cluster_redis_pending ?? 0), 0) >= n;
}, { what: `${n} Redis requests in flight` });

/** Every answer is a success (forwarded once) or a refusal (never forwarded): not both, not lost. */
function partition(rs, tag) {
  const fw = forwarded(`${tag}-`);
  const fwSet = new Set(fw);
  assert.equal(fwSet.size, fw.length, `a call forwarded twice: ${fw.length} records, ${fwSet.size} distinct`);
  const oks = rs.filter(ok);
  for (const r of rs) {
    if (ok(r)) assert.ok(fwSet.has(r.code), `${r.code} answered but not forwarded`);
    else assert.ok(!fwSet.has(r.code), `${r.code} refused (${JSON.stringify(r.msg?.error ?? r.error)}) and forwarded`);
  }
  assert.equal(oks.length, fw.length, 'what was answered is what was forwarded');
  return { oks: oks.length, limited: rs.filter((r) => errCode(r) === -32002).length, unavailable: rs.filter((r) => errCode(r) === -32004).length, fw: fw.length };
}

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-cluster-lease-');
  fetchFn = H.makeFetch({ cleanup });
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  const spec = { race: 60, back: 60 };
  g = {};
  for (const [name, max] of Object.entries(spec)) g[name] = { token: `${name}-${H.randomToken()}`, policy: budgetPolicy(name, max) };
  c = await C.startCluster({
    cleanup, dir, n: 3, adminToken: ADMIN_TOKEN,
    cluster: { timeout_ms: TIMEOUT_MS, lease: { tokens: LEASE, ms: LEASE_MS } },
    conf: {
      grants: Object.entries(g).map(([name, x]) => ({ name, token_sha256: H.sha256hex(x.token), policies: [{ upstream: UPSTREAM, policy: x.policy }] })),
      upstreams: [{ name: UPSTREAM, url: standin.url, default: true, headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` }, initialize: 'local', policy: SEED_POLICY }],
    },
  });
});
after(() => cleanup.run());

describe('cluster token lease: calls answered from a member\'s lease, never above the budget', () => {
  test('a 150-call race on a budget of 60 with Redis paused and resumed: never above 60, at most 3 x 4 fewer', async (t) => {
    const s = await session(g.race);
    const before = await metricsAll();
    const first = race(s, 'race', 45);
    await pauseRedis();
    let second;
    try {
      second = race(s, 'race', 75, 45);
      await waitPending(10); // waiting in the sockets of the stopped Redis
    } finally {
      c.redis.cont();
    }
    const rs = [...(await first), ...(await second)];
    // a third wave, sequential per instance, spends what the leases hold
    const third = [];
    for (let k = 0; k < 30; k++) third.push(await rawCall(c.instanceUrl(k % 3, UPSTREAM), s, `race-${120 + k}`));
    const all = [...rs, ...third];
    const p = partition(all, 'race');
    const after = await metricsAll();
    const leased = delta(before, after, 'tollgate_cluster_lease_decisions_total');
    t.diagnostic(`150 calls: ${p.oks} forwarded, ${p.limited} limited, ${p.unavailable} unavailable, ${leased} answered from a lease`);
    assert.equal(p.unavailable, 0, 'paused for less than cluster.timeout_ms: nothing failed');
    assert.ok(p.oks <= 60, `${p.oks} forwarded on a budget of 60`);
    assert.ok(p.oks >= 60 - 3 * LEASE, `${p.oks} forwarded: more than 3 x ${LEASE} hidden in leases`);
    assert.equal(p.oks + p.limited, 150);
    assert.ok(leased > 0, 'no call was answered from a lease');
  });

  test('leftovers come back after lease.ms: the whole budget is reachable again', async (t) => {
    const s = await session(g.back);
    const rs = await race(s, 'back', 90);
    const p = { oks: rs.filter(ok).length };
    assert.ok(p.oks <= 60 && p.oks >= 60 - 3 * LEASE, `${p.oks} forwarded`);
    // every lease given back: what was taken into leases and not spent is returned
    await H.waitUntil(async () => {
      const ms = await metricsAll();
      return ms.every((m) => (m.tollgate_cluster_lease_keys ?? 0) === 0);
    }, { what: 'every lease given back', timeout: LEASE_MS * 4 });
    const more = [];
    for (let k = 0; k < 30; k++) more.push(await rawCall(c.instanceUrl(0, UPSTREAM), s, `back-${90 + k}`));
    const total = partition([...rs, ...more], 'back').oks;
    t.diagnostic(`first race ${p.oks}, after the leases came back ${more.filter(ok).length}: ${total} of 60`);
    assert.equal(total, 60, 'exactly the budget once the leases are back');
  });
});
