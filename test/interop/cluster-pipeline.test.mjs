// The cluster's Redis pipelining under races (test/interop/lib/cluster.mjs: three tollgate
// instances, one redis-server, the CoWork OS stand-in behind them). Each instance writes the
// decisions of a loop iteration to Redis in one write and continues each call as its own reply
// comes, so many calls are in flight on each instance's one Redis connection and Redis answers
// the instances in whatever order it reads them. What must hold whatever that order:
//
//   1. a race of 150 calls over the 3 instances on a budget of 60: exactly 60 forwarded, one
//      EVALSHA (one round trip) per decision, fewer writes to Redis than decisions;
//   2. the same race with Redis paused (SIGSTOP) while calls wait in the sockets, resumed within
//      the deadline: exactly the budget forwarded;
//   3. a reply that never comes (paused past cluster.timeout_ms): every call in flight -32004
//      (on_unavailable = "deny"), none forwarded; their takes ran late and are not given back;
//   4. Redis killed and restarted while calls wait in its socket: those -32004, none forwarded,
//      none both refused and forwarded; the new (empty) Redis then gives exactly the budget;
//   5. a run across a SCRIPT FLUSH (NOSCRIPT on batches: scripts loaded again, batches sent
//      again) and a restart of Redis with its data (SAVE, SIGKILL, started again on the same
//      port), calls racing while the instances reconnect: exactly the budget forwarded in all.
//
// The counter operations an instance's loop iteration makes go to Redis as one batch script
// call (cluster/redis/batch.c): each race asserts that Redis ran fewer EVALSHA than decisions,
// so the batches, not one call per decision, are what is raced.
//
// The stand-in's request log is the proof of what reached the upstream: every call carries a
// unique argument.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/cluster-pipeline.test.mjs

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
const TIMEOUT_MS = 2000; // cluster.timeout_ms: pauses below it are waited out, above it fail closed

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
  dir = H.makeTempDir(cleanup, 'tollgate-cluster-pipeline-');
  fetchFn = H.makeFetch({ cleanup });
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  const spec = { race: 60, pause: 60, never: 30, restart: 30, resume: 90 };
  g = {};
  for (const [name, max] of Object.entries(spec)) g[name] = { token: `${name}-${H.randomToken()}`, policy: budgetPolicy(name, max) };
  c = await C.startCluster({
    cleanup, dir, n: 3, adminToken: ADMIN_TOKEN,
    cluster: { timeout_ms: TIMEOUT_MS },
    conf: {
      grants: Object.entries(g).map(([name, x]) => ({ name, token_sha256: H.sha256hex(x.token), policies: [{ upstream: UPSTREAM, policy: x.policy }] })),
      upstreams: [{ name: UPSTREAM, url: standin.url, default: true, headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` }, initialize: 'local', policy: SEED_POLICY }],
    },
  });
});
after(() => cleanup.run());

describe('cluster pipelining: many decisions in flight on each instance\'s Redis connection', () => {
  test('a 150-call race on a budget of 60: exactly 60 forwarded, one round trip per decision, fewer writes than decisions', async (t) => {
    const s = await session(g.race);
    const before = await metricsAll();
    const ev0 = await evalshaCalls();
    const rs = await race(s, 'race', 150);
    const p = partition(rs, 'race');
    assert.deepEqual([p.oks, p.limited, p.fw], [60, 90, 60], JSON.stringify(rs.filter((r) => !ok(r) && errCode(r) !== -32002)).slice(0, 1500));
    const after = await metricsAll();
    const decisions = delta(before, after, 'tollgate_cluster_decisions_total');
    const rt = delta(before, after, 'tollgate_cluster_redis_round_trips_total');
    const writes = delta(before, after, 'tollgate_cluster_redis_writes_total');
    assert.equal(decisions, 150);
    assert.equal(rt, 150, 'one Redis round trip (one EVALSHA) per decision');
    assert.ok(writes > 0 && writes <= decisions, `writes to Redis ${writes} for ${decisions} decisions`);
    const evalsha = (await evalshaCalls()) - ev0;
    assert.ok(evalsha < decisions, `Redis ran ${evalsha} EVALSHA for ${decisions} decisions: no batch was made`);
    t.diagnostic(`150 decisions: ${rt} round trips in ${writes} writes, ${evalsha} EVALSHA`);
  });

  test('Redis paused (SIGSTOP) with calls waiting in the sockets, resumed within the deadline: exactly the budget forwarded', async (t) => {
    const s = await session(g.pause);
    const ev0 = await evalshaCalls();
    const first = race(s, 'pause', 45);
    await pauseRedis();
    let second;
    try {
      second = race(s, 'pause', 75, 45);
      await waitPending(30); // waiting in the sockets of the stopped Redis
    } finally {
      c.redis.cont();
    }
    const rs = [...(await first), ...(await second)];
    const p = partition(rs, 'pause');
    t.diagnostic(`120 calls: ${p.oks} forwarded, ${p.limited} limited, ${p.unavailable} unavailable`);
    assert.equal(p.unavailable, 0, 'paused for less than cluster.timeout_ms: nothing failed');
    assert.deepEqual([p.oks, p.limited], [60, 60]);
    const evalsha = (await evalshaCalls()) - ev0;
    assert.ok(evalsha < 120, `Redis ran ${evalsha} EVALSHA for 120 decisions: the calls queued during the pause were not batched`);
    t.diagnostic(`120 decisions in ${evalsha} EVALSHA`);
  });

  test('a reply that never comes: the calls in flight fail closed (-32004) at the deadline, none forwarded; their late takes are not given back', async (t) => {
    const s = await session(g.never);
    const rs0 = await race(s, 'never-before', 9);
    assert.equal(rs0.filter(ok).length, 9);
    const before = await metricsAll();
    await pauseRedis();
    let rs;
    try {
      rs = await race(s, 'never-paused', 15);
    } finally {
      c.redis.cont();
    }
    const p = partition(rs, 'never-paused');
    assert.equal(p.unavailable, 15, `every call whose reply did not come in time: ${JSON.stringify(rs.filter((r) => errCode(r) !== -32004)).slice(0, 1000)}`);
    for (const r of rs) assert.ok(r.msg.error.data?.reason, JSON.stringify(r.msg.error));
    // the late replies are read and dropped: those takes ran, and nobody gives them back
    await H.waitUntil(async () => delta(before, await metricsAll(), 'tollgate_cluster_redis_late_replies_total') >= 15, { what: 'the 15 late replies' });
    const after = await metricsAll();
    assert.equal(delta(before, after, 'tollgate_cluster_refund_ops_total'), 0, 'nothing given back for a take whose answer never came');
    // 30 - 9 before - 15 taken late = 6 left
    const rest = await race(s, 'never-after', 12);
    const q = partition(rest, 'never-after');
    t.diagnostic(`after the late takes: ${q.oks} of 12 forwarded`);
    assert.deepEqual([q.oks, q.limited], [6, 6]);
  });

  test('Redis killed and restarted with calls waiting in its socket: those -32004, none forwarded; the new Redis gives exactly the budget', async (t) => {
    const s = await session(g.restart);
    await pauseRedis();
    let rs;
    try {
      const calls = race(s, 'restart-queued', 21);
      await waitPending(21);
      // SIGKILL while it is stopped (c.redis.kill() would let it run first): the 21 never run
      const gone = new Promise((resolve) => c.redis.proc.once('exit', resolve));
      process.kill(c.redis.proc.pid, 'SIGKILL');
      await gone;
      c.redis.paused = false;
      rs = await calls;
    } finally {
      if (c.redis.proc.exitCode !== null || c.redis.proc.signalCode !== null) await c.redis.restart();
    }
    const p = partition(rs, 'restart-queued');
    assert.deepEqual([p.unavailable, p.fw], [21, 0], JSON.stringify(rs.filter((r) => errCode(r) !== -32004)).slice(0, 1000));
    for (let i = 0; i < 3; i++) await c.instances[i].waitForMetric('tollgate_cluster_redis_up', (v) => v === 1, { token: ADMIN_TOKEN, timeout: 15000 });
    const again = await race(s, 'restart-after', 60);
    const q = partition(again, 'restart-after');
    t.diagnostic(`after the restart: ${q.oks} forwarded, ${q.limited} limited, ${q.unavailable} unavailable`);
    assert.deepEqual([q.oks, q.limited, q.unavailable], [30, 30, 0]);
  });

  test('a run across SCRIPT FLUSH and a restart of Redis with its data, calls racing while the instances reconnect: exactly the budget forwarded', async (t) => {
    const s = await session(g.resume);
    const before = await metricsAll();
    const ev0 = await evalshaCalls();
    const a = await race(s, 'resume-a', 30);
    // the scripts gone: the next batches meet NOSCRIPT, load them again and are sent once more
    assert.equal(await c.redis.command('SCRIPT', 'FLUSH'), 'OK');
    const b = await race(s, 'resume-b', 30);
    const mid = await metricsAll();
    assert.ok(delta(before, mid, 'tollgate_cluster_redis_script_loads_total') > 0, 'NOSCRIPT made an instance load the scripts again');
    assert.ok((await evalshaCalls()) - ev0 < 60, 'the races were batched');
    // a crash with the counters kept (SAVE first: the bench Redis has no persistence of its own),
    // and calls racing while the instances notice it and reconnect
    assert.equal(await c.redis.command('SAVE'), 'OK');
    await c.redis.restart();
    const c1 = race(s, 'resume-c', 30); // as the instances find Redis gone
    await c.instances[0].waitForMetric('tollgate_cluster_redis_up', (v) => v === 1, { token: ADMIN_TOKEN, timeout: 15000 });
    const c2 = race(s, 'resume-c', 30, 30); // a takes, b and c may still be reconnecting
    const cc = [...(await c1), ...(await c2)];
    for (let i = 0; i < 3; i++) await c.instances[i].waitForMetric('tollgate_cluster_redis_up', (v) => v === 1, { token: ADMIN_TOKEN, timeout: 15000 });
    const d = await race(s, 'resume-d', 60);
    const p = [partition(a, 'resume-a'), partition(b, 'resume-b'), partition(cc, 'resume-c'), partition(d, 'resume-d')];
    t.diagnostic(`forwarded per wave ${p.map((x) => x.oks).join('/')}, -32004 ${p.map((x) => x.unavailable).join('/')}`);
    assert.deepEqual([p[0].oks, p[1].oks], [30, 30], 'the first 60 of the budget of 90, across the SCRIPT FLUSH');
    assert.equal(p[0].unavailable + p[1].unavailable + p[3].unavailable, 0, 'Redis answered these waves');
    assert.equal(p[2].oks + p[2].limited + p[2].unavailable, 60, JSON.stringify(cc.filter((r) => !ok(r) && ![-32002, -32004].includes(errCode(r)))).slice(0, 1000));
    assert.equal(p.reduce((x, y) => x + y.oks, 0), 90, 'exactly the budget forwarded across the restart');
    assert.equal(p[3].limited, 60 - p[3].oks);
  });
});
