// Approvals an operator can trust and afford, through the tollgate binary with the CoWork OS
// stand-in behind it (whose request log is the proof of what reached the upstream):
//
//   1. a reload between park and approve: the tool now denied, the grant removed, its token
//      rotated -> approve is 409 naming what changed, the client gets -32003 with the reason, the
//      stand-in sees nothing; the listing shows the state before anyone clicks
//   2. a session that ends (DELETE, its upstream removed by a reload) takes its parked call along
//   3. limits: 40 parked calls of 3 MiB from one grant (RSS measured), the 41st refused at once;
//      limits.approvals_bytes; one grant filling its share while another can still park
//   4. approvals.webhook with a receiver of the test's own: signed events, a retry after a 500,
//      and a receiver that hangs blocks nothing; a receiver that always fails gets exactly five
//      attempts, then the event is given up (counted); a queue (approvals.webhook.queue) that
//      overflows drops its oldest waiting events (counted)
//   5. two JWT subjects of one grant: a token that expires while its call is held (the listing
//      marks it, approve 409, the client -32003, nothing forwarded); alice's task is "not found"
//      for bob and absent from his tasks/list; bob's identical retry-mode call is never covered
//      by alice's approval
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/limits-approvals.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import * as H from './lib/harness.mjs';

H.requireNodeModules();

const cleanup = new H.Cleanup();
let dir;
let fetchFn;
let standin;
const UPSTREAM = 'cowork-os';
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const ADMIN_TOKEN = 'admin-' + H.randomToken();

const gws = {};
const logs = () => {
  const o = {};
  for (const [k, g] of Object.entries(gws)) {
    o[`tollgate[${k}] process`] = g.status();
    o[`tollgate[${k}] stderr`] = g.stderr();
  }
  o['stand-in log'] = standin?.logFile && fs.existsSync(standin.logFile) ? fs.readFileSync(standin.logFile, 'utf8').slice(-3000) : undefined;
  return o;
};
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-approvals-');
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

const APPROVE = { version: '1', default: 'deny', tools: { write_file: { action: 'approve', approval_timeout: 60 }, echo: { action: 'allow' } } };
const bearer = (t) => ({ authorization: `Bearer ${t}` });
// hold: the call waits for its decision, whose answer it gets (retry mode answers at once)
const upstream = (name, policy) => ({ name, url: standin.url, headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` }, initialize: 'local', policy, approval_mode: 'hold' });

/** A gateway whose conf can be written again (gw.rewrite(opts)) and reloaded (gw.reload()). */
async function gateway(name, opts) {
  const sub = path.join(dir, name);
  fs.mkdirSync(sub, { recursive: true });
  // audit.args = "values": GET /admin/approvals then shows the arguments, which find an item
  const full = (o) => ({ admin: { token_sha256: H.sha256hex(ADMIN_TOKEN) }, audit: { file: path.join(sub, 'audit.log'), args: 'values' }, ...o });
  const conf = H.writeConf(sub, full(opts));
  const gw = await H.startTollgate(conf, { cleanup, listeners: 1, admin: true });
  gws[name] = gw;
  gw.rewrite = (o) => H.writeConf(sub, full(o));
  gw.reload = async () => {
    const r = await admin(gw, 'POST', '/admin/reload');
    assert.equal(r.status, 200, `reload: ${r.text}`);
  };
  return gw;
}

async function admin(gw, method, p, { headers = {}, body } = {}) {
  const h = { authorization: `Bearer ${ADMIN_TOKEN}`, ...headers };
  if (body !== undefined) h['content-type'] = 'application/json';
  const res = await fetchFn(`http://127.0.0.1:${gw.adminPort}${p}`, { method, headers: h, body });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text };
}

const url = (gw, up = UPSTREAM) => `http://127.0.0.1:${gw.plainPort}/${up}/mcp`;
const session = (gw, token, up = UPSTREAM) => H.rawInitialize(fetchFn, url(gw, up), bearer(token));

let nextId = 1;
/** One raw tools/call; resolves with { status, msg, error }. */
async function call(gw, sess, name, args, { up = UPSTREAM, signal } = {}) {
  try {
    const res = await fetchFn(url(gw, up), {
      method: 'POST', signal,
      headers: { ...H.MCP_HEADERS, ...sess.headers },
      body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name, arguments: args } }),
    });
    const text = await res.text();
    let msg;
    if ((res.headers.get('content-type') ?? '').includes('text/event-stream')) msg = H.parseSse(text).map((e) => JSON.parse(e.data)).find((m) => 'id' in m);
    else if (text) msg = JSON.parse(text);
    return { status: res.status, msg };
  } catch (e) {
    return { error: String(e) };
  }
}

const listing = async (gw) => {
  const r = await admin(gw, 'GET', '/admin/approvals');
  assert.equal(r.status, 200, r.text);
  return r.json.approvals;
};

/** Waits until the listing holds an item for a write to path (or of grant, without arguments shown); returns it. */
async function parked(gw, p, grant) {
  let last;
  const item = await H.waitUntil(async () => {
    last = await listing(gw);
    return last.find((x) => x.tool === 'write_file' && (grant ? x.grant === grant : x.args?.path === p));
  }, { what: `the parked write_file ${p} in GET /admin/approvals`, detail: () => JSON.stringify(last).slice(0, 2000) });
  return item;
}

/** The stand-in's tools/call records whose arguments.path starts with prefix. */
const forwarded = (prefix) => standin.records()
  .filter((r) => r.http && r.msg?.method === 'tools/call' && String(r.msg.params?.arguments?.path ?? '').startsWith(prefix));

/** RSS of the gateway process, in KiB. */
function rssKiB(gw) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${gw.proc.pid}/status`, 'utf8'));
  return Number(m[1]);
}

const refused = (r, what) => {
  assert.ok(r.msg?.error, `${what}: a JSON-RPC error expected, got ${r.error ?? JSON.stringify(r.msg).slice(0, 400)}`);
  assert.equal(r.msg.error.code, -32003, `${what}: ${JSON.stringify(r.msg.error)}`);
  return r.msg.error;
};

// ---------------------------------------------------------------------------
// 1. A reload between park and approve

describe('approval decides again under the configuration in force', () => {
  let gw;
  let policy;
  const T = { alice: 'alice-' + H.randomToken(), bob: 'bob-' + H.randomToken(), carol: 'carol-' + H.randomToken() };
  const grants = (tokens = T) => Object.entries(tokens).map(([name, t]) => ({ name, token_sha256: H.sha256hex(t) }));
  const confOf = (g = grants()) => ({ grants: g, upstreams: [upstream(UPSTREAM, policy)] });

  before(async () => {
    policy = writePolicy('reload.json', APPROVE);
    gw = await gateway('reload', confOf());
  });

  test('the tool now denied: marked in the listing, approve is 409 with why, the client gets -32003, the upstream nothing', async () => {
    const s = await session(gw, T.alice);
    const p = call(gw, s, 'write_file', { path: '/tmp/stale-denied', content: 'x' });
    const item = await parked(gw, '/tmp/stale-denied');
    assert.equal(item.blocked, null, 'allowed when parked');
    fs.writeFileSync(policy, JSON.stringify({ ...APPROVE, tools: { ...APPROVE.tools, write_file: { action: 'deny', reason: 'writes are frozen' } } }));
    try {
      await gw.reload();
      const now = (await listing(gw)).find((x) => x.id === item.id);
      assert.ok(now, 'still listed after the reload');
      assert.match(now.blocked ?? '', /^no longer allowed: tool "write_file" is now denied.*writes are frozen/, JSON.stringify(now));
      const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: JSON.stringify({ digest: item.digest }) });
      assert.equal(r.status, 409, r.text);
      assert.match(r.json?.error ?? '', /no longer allowed: tool "write_file" is now denied/, r.text);
      const e = refused(await p, 'the approved call');
      assert.match(e.message, /was approved, but the configuration in force no longer allows it: tool "write_file" is now denied/, e.message);
      assert.match(e.data?.reason ?? '', /writes are frozen/, JSON.stringify(e.data));
      assert.equal(e.data?.approval_id, item.id);
      assert.equal(forwarded('/tmp/stale-denied').length, 0, 'nothing reached the stand-in');
      assert.deepEqual(await listing(gw), [], 'gone from the queue');
      const m = await gw.metrics({ token: ADMIN_TOKEN });
      assert.equal(m['tollgate_approvals_refused_total{reason="no_longer_allowed"}'], 1);
    } finally {
      fs.writeFileSync(policy, JSON.stringify(APPROVE));
      await gw.reload();
    }
  });

  test('a reload that allows it again clears the mark: approved, it runs once', async () => {
    const s = await session(gw, T.alice);
    const p = call(gw, s, 'write_file', { path: '/tmp/stale-back', content: 'x' });
    const item = await parked(gw, '/tmp/stale-back');
    fs.writeFileSync(policy, JSON.stringify({ ...APPROVE, tools: { echo: APPROVE.tools.echo } })); // default deny
    await gw.reload();
    assert.match((await listing(gw))[0].blocked ?? '', /no longer allowed: tool "write_file" is now (denied|hidden)/);
    fs.writeFileSync(policy, JSON.stringify(APPROVE));
    await gw.reload();
    assert.equal((await listing(gw))[0].blocked, null, 'the listing is decided again after each reload');
    const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: JSON.stringify({ digest: item.digest }) });
    assert.equal(r.status, 200, r.text);
    const a = await p;
    assert.ok(a.msg?.result && !a.msg.result.isError, JSON.stringify(a));
    assert.equal(forwarded('/tmp/stale-back').length, 1);
  });

  test('its grant removed: 409 naming the grant, -32003, nothing forwarded', async () => {
    const s = await session(gw, T.bob);
    const p = call(gw, s, 'write_file', { path: '/tmp/stale-grant', content: 'x' });
    const item = await parked(gw, '/tmp/stale-grant');
    gw.rewrite(confOf(grants({ alice: T.alice, carol: T.carol })));
    try {
      await gw.reload();
      const now = (await listing(gw)).find((x) => x.id === item.id);
      assert.match(now?.blocked ?? '', /^no longer allowed: grant "bob" was removed/, JSON.stringify(now));
      const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: JSON.stringify({ digest: item.digest }) });
      assert.equal(r.status, 409, r.text);
      assert.match(r.json?.error ?? '', /grant "bob" was removed/);
      const e = refused(await p, 'the approved call of a removed grant');
      assert.match(e.data?.reason ?? '', /grant "bob" was removed/, JSON.stringify(e.data));
      assert.equal(forwarded('/tmp/stale-grant').length, 0);
    } finally {
      gw.rewrite(confOf());
      await gw.reload();
    }
  });

  test('its token rotated: 409 naming the credential, -32003, nothing forwarded', async () => {
    const s = await session(gw, T.carol);
    const p = call(gw, s, 'write_file', { path: '/tmp/stale-token', content: 'x' });
    const item = await parked(gw, '/tmp/stale-token');
    gw.rewrite(confOf(grants({ ...T, carol: 'carol-new-' + H.randomToken() })));
    try {
      await gw.reload();
      const now = (await listing(gw)).find((x) => x.id === item.id);
      assert.match(now?.blocked ?? '', /credential that made this call is no longer accepted for grant "carol"/, JSON.stringify(now));
      const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: JSON.stringify({ digest: item.digest }) });
      assert.equal(r.status, 409, r.text);
      const e = refused(await p, 'the approved call of a rotated token');
      assert.match(e.data?.reason ?? '', /no longer accepted/, JSON.stringify(e.data));
      assert.equal(forwarded('/tmp/stale-token').length, 0);
    } finally {
      gw.rewrite(confOf());
      await gw.reload();
    }
  });

  test('deny still works on a marked item and tells the client', async () => {
    const s = await session(gw, T.alice);
    const p = call(gw, s, 'write_file', { path: '/tmp/stale-deny', content: 'x' });
    const item = await parked(gw, '/tmp/stale-deny');
    fs.writeFileSync(policy, JSON.stringify({ ...APPROVE, tools: { ...APPROVE.tools, write_file: { action: 'deny' } } }));
    try {
      await gw.reload();
      const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/deny`, { body: JSON.stringify({ reason: 'not now' }) });
      assert.equal(r.status, 200, r.text);
      const e = refused(await p, 'the denied call');
      assert.equal(e.data?.reason, 'not now');
    } finally {
      fs.writeFileSync(policy, JSON.stringify(APPROVE));
      await gw.reload();
    }
  });
});

// ---------------------------------------------------------------------------
// 2. Sessions that end take their parked calls along

describe('a parked call goes with its session', () => {
  let gw;
  let policy;
  const TOKEN = 'sess-' + H.randomToken();
  const confOf = (ups) => ({ grants: [{ name: 'sess', token_sha256: H.sha256hex(TOKEN) }], upstreams: ups.map((u) => upstream(u, policy)) });

  before(async () => {
    policy = writePolicy('sessions.json', APPROVE);
    gw = await gateway('sessions', confOf([UPSTREAM, 'spare']));
  });

  test('DELETE of its session: out of the queue, its client told, never forwarded, approve 404', async () => {
    const s = await session(gw, TOKEN);
    const p = call(gw, s, 'write_file', { path: '/tmp/gone-delete', content: 'x' });
    const item = await parked(gw, '/tmp/gone-delete');
    const d = await fetchFn(url(gw), { method: 'DELETE', headers: { ...H.MCP_HEADERS, ...s.headers } });
    assert.ok(d.status === 200 || d.status === 204, `DELETE: ${d.status}`);
    await d.text();
    await H.waitUntil(async () => (await listing(gw)).length === 0, { what: 'the queue empty after the DELETE' });
    const e = refused(await p, 'the parked call of a deleted session');
    assert.match(e.message, /cancelled|withdrawn/, e.message);
    const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: JSON.stringify({ digest: item.digest }) });
    assert.equal(r.status, 404, r.text);
    await H.quietFor(200); // negative check: nothing reaches the stand-in late
    assert.equal(forwarded('/tmp/gone-delete').length, 0);
    const m = await gw.metrics({ token: ADMIN_TOKEN });
    assert.equal(m.tollgate_approvals_parked_bytes, 0, 'its bytes left the count');
  });

  test('its upstream removed by a reload: out of the queue, its client gets an error, never forwarded', async () => {
    const s = await session(gw, TOKEN, 'spare');
    const p = call(gw, s, 'write_file', { path: '/tmp/gone-upstream', content: 'x' }, { up: 'spare' });
    const item = await parked(gw, '/tmp/gone-upstream');
    gw.rewrite(confOf([UPSTREAM]));
    try {
      await gw.reload();
      await H.waitUntil(async () => (await listing(gw)).length === 0, { what: 'the queue empty after the upstream went' });
      const a = await p;
      assert.ok(a.error || a.msg?.error, `the client heard of it: ${JSON.stringify(a)}`);
      const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: JSON.stringify({ digest: item.digest }) });
      assert.equal(r.status, 404, r.text);
      assert.equal(forwarded('/tmp/gone-upstream').length, 0);
    } finally {
      gw.rewrite(confOf([UPSTREAM, 'spare']));
      await gw.reload();
    }
  });

  test('a client that goes while its call is parked: out of the queue', async () => {
    const s = await session(gw, TOKEN);
    const ac = new AbortController();
    const p = call(gw, s, 'write_file', { path: '/tmp/gone-client', content: 'x' }, { signal: ac.signal });
    await parked(gw, '/tmp/gone-client');
    ac.abort();
    await p;
    await H.waitUntil(async () => (await listing(gw)).length === 0, { what: 'the queue empty after the client went' });
    assert.equal(forwarded('/tmp/gone-client').length, 0);
  });
});

// ---------------------------------------------------------------------------
// 3. Bounded and fair

describe('the queue is bounded by bytes and shared fairly between grants', () => {
  const TA = 'big-a-' + H.randomToken();
  const TB = 'big-b-' + H.randomToken();
  const grants = [{ name: 'a', token_sha256: H.sha256hex(TA) }, { name: 'b', token_sha256: H.sha256hex(TB) }];
  const MiB = 1 << 20;
  const big = (i) => ({ path: `/tmp/big-${i}`, content: String(i % 10).repeat(3 * MiB) });

  test('40 parked calls of 3 MiB from one grant: the 41st refused at once, RSS bounded and given back', async (t) => {
    const policy = writePolicy('big.json', APPROVE);
    const gw = await gateway('big', {
      audit: undefined, // no copy of the arguments for the audit log: the request is what is held
      grants, upstreams: [upstream(UPSTREAM, policy)],
      limits: { approvals_max: 1000, approvals_per_grant: 40, approvals_bytes: 512 * MiB, body_bytes: 4 * MiB },
    });
    const s = await session(gw, TA);
    await call(gw, s, 'echo', { text: 'warm' });
    const rss0 = rssKiB(gw);
    const pending = [];
    for (let i = 0; i < 40; i++) pending.push(call(gw, s, 'write_file', big(i)));
    // counted on /metrics, not listed: a listing makes copies of every call's arguments while it runs
    let n = 0;
    await H.waitUntil(async () => (n = (await gw.metrics({ token: ADMIN_TOKEN })).tollgate_approvals_pending) === 40,
      { timeout: H.scaled(60000), what: '40 parked calls', detail: () => `${n} parked` });
    const rss40 = rssKiB(gw);
    const t0 = Date.now();
    const e = refused(await call(gw, s, 'write_file', big(40)), 'the 41st');
    const took = Date.now() - t0;
    assert.match(e.message, /limits\.approvals_per_grant/, e.message);
    assert.equal(e.data?.reason, 'approval queue full for this grant');
    assert.ok(took < 5000, `refused at once (${took} ms)`);
    const m = await gw.metrics({ token: ADMIN_TOKEN });
    const parkedBytes = m.tollgate_approvals_parked_bytes;
    assert.ok(parkedBytes >= 40 * 3 * MiB && parkedBytes < 40 * 4 * MiB, `parked bytes ${parkedBytes}`);
    assert.equal(m['tollgate_approvals_refused_total{reason="per_grant"}'], 1);
    // the other grant still parks
    const sb = await session(gw, TB);
    const pb = call(gw, sb, 'write_file', { path: '/tmp/big-b', content: 'small' });
    await parked(gw, '/tmp/big-b', 'b');
    for (const it of await listing(gw)) {
      const r = await admin(gw, 'POST', `/admin/approvals/${it.id}/deny`);
      assert.equal(r.status, 200, r.text);
    }
    for (const a of await Promise.all([...pending, pb])) refused(a, 'a denied big call');
    const m2 = await gw.metrics({ token: ADMIN_TOKEN });
    assert.equal(m2.tollgate_approvals_parked_bytes, 0);
    const rssAfter = rssKiB(gw);
    assert.equal(forwarded('/tmp/big-').length, 0);
    const grew = rss40 - rss0;
    t.diagnostic(`RSS: ${rss0} KiB before, ${rss40} KiB with 40 parked calls of 3 MiB (+${grew} KiB, ${(grew / 40 / 1024).toFixed(2)} MiB per call), ${rssAfter} KiB after they were denied; parked bytes ${parkedBytes}`);
    console.log(`# RSS: before ${rss0} KiB; 40 x 3 MiB parked ${rss40} KiB (+${grew} KiB); after deny ${rssAfter} KiB; tollgate_approvals_parked_bytes ${parkedBytes}`);
    // Each parked call holds its request once (the connection's copy of the body is let go once it
    // is dispatched). Under ASan freed memory sits in quarantine: the bound holds for a plain build.
    if (!/libasan/.test(fs.readFileSync(`/proc/${gw.proc.pid}/maps`, 'utf8'))) {
      assert.ok(grew < 40 * 3 * 1024 * 2, `RSS grew by ${grew} KiB for 120 MiB parked: about one copy per call is held`);
    }
  });

  test('limits.approvals_bytes: past it a call that needs approval gets -32003 "approval queue full" at once', async () => {
    const policy = writePolicy('bytes.json', APPROVE);
    const gw = await gateway('bytes', {
      audit: undefined,
      grants, upstreams: [upstream(UPSTREAM, policy)],
      limits: { approvals_max: 100, approvals_per_grant: 10, approvals_bytes: 8 * MiB },
    });
    const s = await session(gw, TA);
    const p = [call(gw, s, 'write_file', big(100)), call(gw, s, 'write_file', big(101))];
    await H.waitUntil(async () => (await listing(gw)).length === 2, { what: 'two parked calls of 3 MiB' });
    const e = refused(await call(gw, s, 'write_file', big(102)), 'the third 3 MiB call');
    assert.match(e.message, /approval queue is full \(limits\.approvals_bytes\)/, e.message);
    assert.equal(e.data?.reason, 'approval queue full');
    const m = await gw.metrics({ token: ADMIN_TOKEN });
    assert.equal(m['tollgate_approvals_refused_total{reason="bytes"}'], 1);
    for (const it of await listing(gw)) await admin(gw, 'POST', `/admin/approvals/${it.id}/deny`);
    await Promise.all(p);
    assert.equal(forwarded('/tmp/big-10').length, 0);
  });

  test('one grant fills its share (approvals_per_grant), another can still park', async () => {
    const policy = writePolicy('fair.json', APPROVE);
    const gw = await gateway('fair', {
      grants, upstreams: [upstream(UPSTREAM, policy)], limits: { approvals_max: 8, approvals_per_grant: 2 },
    });
    const sa = await session(gw, TA);
    const sb = await session(gw, TB);
    const pa = [call(gw, sa, 'write_file', { path: '/tmp/fair-a1', content: 'x' }), call(gw, sa, 'write_file', { path: '/tmp/fair-a2', content: 'x' })];
    await H.waitUntil(async () => (await listing(gw)).length === 2, { what: "grant a's two parked calls" });
    const e = refused(await call(gw, sa, 'write_file', { path: '/tmp/fair-a3', content: 'x' }), "grant a's third");
    assert.match(e.message, /this grant already has 2 calls waiting for approval \(limits\.approvals_per_grant\)/, e.message);
    const pb = call(gw, sb, 'write_file', { path: '/tmp/fair-b1', content: 'x' });
    await parked(gw, '/tmp/fair-b1');
    const l = await listing(gw);
    assert.deepEqual(l.map((x) => x.grant).sort(), ['a', 'a', 'b']);
    for (const it of l) await admin(gw, 'POST', `/admin/approvals/${it.id}/deny`);
    await Promise.all([...pa, pb]);
    assert.equal(forwarded('/tmp/fair-').length, 0);
  });
});

// ---------------------------------------------------------------------------
// 4. The webhook

describe('approvals.webhook: signed events to a receiver of the test\'s own', () => {
  let gw;
  let receiver;
  let secret;
  const got = [];
  let mode = 'ok';
  let failNext = 0;
  const hung = [];
  const TOKEN = 'hook-' + H.randomToken();

  before(async () => {
    receiver = http.createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (d) => { body += d; });
      req.on('end', () => {
        got.push({ headers: req.headers, body, at: Date.now() });
        if (mode === 'hang') { hung.push(res); return; }
        if (failNext > 0) { failNext--; res.writeHead(500).end('no'); return; }
        res.writeHead(204).end();
      });
    });
    await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
    cleanup.add(() => new Promise((r) => { for (const h of hung) h.destroy(); receiver.close(r); receiver.closeAllConnections?.(); }));
    secret = crypto.randomBytes(32).toString('base64');
    const secretFile = path.join(dir, 'webhook.key');
    fs.writeFileSync(secretFile, secret + '\n', { mode: 0o600 });
    const policy = writePolicy('hook.json', APPROVE);
    gw = await gateway('hook', {
      grants: [{ name: 'hooked', token_sha256: H.sha256hex(TOKEN) }],
      upstreams: [upstream(UPSTREAM, policy)],
      approvals: { webhook: { url: `http://127.0.0.1:${receiver.address().port}/hook`, secret_file: secretFile } },
    });
  });

  /** The body of a delivery, after its signature verified (and its timestamp is now). */
  function verified(d) {
    const ts = d.headers['x-tollgate-timestamp'];
    const sig = d.headers['x-tollgate-signature'];
    assert.match(ts ?? '', /^\d+$/, JSON.stringify(d.headers));
    assert.ok(Math.abs(Number(ts) - Date.now() / 1000) < 60, `timestamp ${ts} is now`);
    assert.match(sig ?? '', /^sha256=[0-9a-f]{64}$/, JSON.stringify(d.headers));
    const want = crypto.createHmac('sha256', secret).update(`${ts}.${d.body}`).digest('hex');
    assert.equal(sig.slice(7), want, 'X-Tollgate-Signature is HMAC-SHA-256(secret, timestamp "." body)');
    const bad = crypto.createHmac('sha256', secret).update(`${ts}.${d.body.replace('"event"', '"evemt"')}`).digest('hex');
    assert.notEqual(sig.slice(7), bad, 'a changed body does not verify');
    assert.equal(d.headers['content-type'], 'application/json');
    return JSON.parse(d.body);
  }

  test('park (a 500 first, then tried again), deny: each event signed, with who and why', async () => {
    mode = 'ok';
    failNext = 1;
    const from = got.length;
    const s = await session(gw, TOKEN);
    const p = call(gw, s, 'write_file', { path: '/tmp/hooked-1', content: 'x' });
    const item = await parked(gw, '/tmp/hooked-1');
    await H.waitUntil(() => got.length >= from + 2, { what: 'the parked event, then its retry after the 500' });
    const [first, retry] = got.slice(from, from + 2).map(verified);
    assert.deepEqual(retry, first, 'the retry carries the same event');
    assert.equal(first.event, 'parked');
    assert.equal(first.id, item.id);
    assert.equal(first.tool, 'write_file');
    assert.equal(first.grant, 'hooked');
    assert.equal(first.subject, 'hooked');
    assert.equal(first.upstream, UPSTREAM);
    assert.equal(first.args_sha256, item.args_sha256);
    assert.equal(first.decided_by, null);
    assert.equal(first.reason, null);
    const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/deny`, { headers: { 'X-Tollgate-Approver': 'dana' }, body: JSON.stringify({ reason: 'not today' }) });
    assert.equal(r.status, 200, r.text);
    refused(await p, 'the denied call');
    await H.waitUntil(() => got.length >= from + 3, { what: 'the denied event' });
    const denied = verified(got[from + 2]);
    assert.equal(denied.event, 'denied');
    assert.equal(denied.id, item.id);
    assert.match(denied.decided_by ?? '', /dana/);
    assert.equal(denied.reason, 'not today');
    const m = await gw.metrics({ token: ADMIN_TOKEN });
    assert.ok(m['tollgate_approval_webhook_total{outcome="retried"}'] >= 1, JSON.stringify(m));
    assert.ok(m['tollgate_approval_webhook_total{outcome="sent"}'] >= 2, JSON.stringify(m));
  });

  test('a receiver that hangs blocks nothing: other calls proceed, calls still park', async () => {
    mode = 'hang';
    const from = got.length;
    const s = await session(gw, TOKEN);
    const p1 = call(gw, s, 'write_file', { path: '/tmp/hooked-hang-1', content: 'x' });
    const i1 = await parked(gw, '/tmp/hooked-hang-1');
    await H.waitUntil(() => hung.length >= 1, { what: 'the receiver holding the parked event' });
    for (let i = 0; i < 5; i++) {
      const t0 = Date.now();
      const r = await call(gw, s, 'echo', { text: `while-hung-${i}` });
      assert.ok(r.msg?.result && !r.msg.result.isError, JSON.stringify(r));
      assert.ok(Date.now() - t0 < 2000, `echo answered in ${Date.now() - t0} ms while the receiver hangs`);
    }
    const p2 = call(gw, s, 'write_file', { path: '/tmp/hooked-hang-2', content: 'x' });
    const i2 = await parked(gw, '/tmp/hooked-hang-2');
    assert.equal(got.length - from, 1, 'one event in flight at a time: the second waits its turn');
    mode = 'ok';
    for (const h of hung.splice(0)) h.writeHead(200).end();
    await H.waitUntil(() => got.length - from >= 2, { what: 'the second event once the receiver answered' });
    assert.equal(verified(got[from + 1]).id, i2.id);
    for (const it of [i1, i2]) await admin(gw, 'POST', `/admin/approvals/${it.id}/deny`);
    await Promise.all([p1, p2]);
    // Left parked with its event in flight to a receiver that hangs: the gateway's shutdown (the
    // harness's cleanup) must still exit cleanly, without a sanitizer report.
    mode = 'hang';
    call(gw, s, 'write_file', { path: '/tmp/hooked-at-shutdown', content: 'x' }).catch(() => {});
    await parked(gw, '/tmp/hooked-at-shutdown');
  });
});

describe('approvals.webhook: retries end, a full queue drops its oldest', () => {
  let gw;
  let receiver;
  const got = [];
  let mode = 'ok';
  const hung = [];
  const TOKEN = 'hook2-' + H.randomToken();

  before(async () => {
    receiver = http.createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (d) => { body += d; });
      req.on('end', () => {
        got.push({ body: JSON.parse(body), at: Date.now() });
        if (mode === 'hang') { hung.push(res); return; }
        if (mode === 'fail') { res.writeHead(500).end('no'); return; }
        res.writeHead(204).end();
      });
    });
    await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
    cleanup.add(() => new Promise((r) => { for (const h of hung) h.destroy(); receiver.close(r); receiver.closeAllConnections?.(); }));
    const secretFile = path.join(dir, 'webhook2.key');
    fs.writeFileSync(secretFile, crypto.randomBytes(32).toString('base64') + '\n', { mode: 0o600 });
    const policy = writePolicy('hook2.json', APPROVE);
    gw = await gateway('hook2', {
      grants: [{ name: 'hooked2', token_sha256: H.sha256hex(TOKEN) }],
      upstreams: [upstream(UPSTREAM, policy)],
      approvals: { webhook: { url: `http://127.0.0.1:${receiver.address().port}/hook`, secret_file: secretFile, queue: 3 } },
    });
  });

  const hookMetric = async (outcome) => (await gw.metrics({ token: ADMIN_TOKEN }))[`tollgate_approval_webhook_total{outcome="${outcome}"}`] ?? 0;

  test('a receiver that always answers 500: five attempts (0.5, 1, 2, 4 s apart), then given up and counted', async () => {
    mode = 'fail';
    const failed0 = await hookMetric('failed');
    const s = await session(gw, TOKEN);
    const p = call(gw, s, 'write_file', { path: '/tmp/hook2-fail', content: 'x' });
    const item = await parked(gw, '/tmp/hook2-fail');
    await H.waitUntil(async () => (await hookMetric('failed')) === failed0 + 1,
      { timeout: H.scaled(30000), what: 'the event given up (outcome="failed")' });
    await H.quietFor(1000); // negative check: no sixth attempt
    const tries = got.filter((d) => d.body.id === item.id && d.body.event === 'parked');
    assert.equal(tries.length, 5, `attempts: ${tries.map((d) => d.at - tries[0].at).join(', ')} ms`);
    const gaps = tries.slice(1).map((d, i) => d.at - tries[i].at);
    [500, 1000, 2000, 4000].forEach((want, i) => assert.ok(gaps[i] >= want - 50 && gaps[i] < want + 1500, `gap ${i + 1}: ${gaps[i]} ms, want about ${want}`));
    assert.ok((await hookMetric('retried')) >= 4);
    mode = 'ok';
    await admin(gw, 'POST', `/admin/approvals/${item.id}/deny`);
    refused(await p, 'the denied call');
  });

  test('a receiver that hangs while more events come than the queue holds: the oldest waiting dropped and counted, calls answered', async () => {
    await H.waitUntil(async () => (await listing(gw)).length === 0, { what: 'an empty queue' });
    await H.waitUntil(() => got.at(-1)?.body.event === 'denied', { what: 'the previous test\'s denied event delivered' });
    mode = 'hang';
    const dropped0 = await hookMetric('dropped');
    const from = got.length;
    const s = await session(gw, TOKEN);
    const pending = [];
    const items = [];
    for (let i = 1; i <= 5; i++) {
      pending.push(call(gw, s, 'write_file', { path: `/tmp/hook2-full-${i}`, content: 'x' }));
      items.push(await parked(gw, `/tmp/hook2-full-${i}`));
      if (i === 1) await H.waitUntil(() => hung.length >= 1, { what: 'the receiver holding the first event' });
    }
    // queue = 3: #1 in flight, #2 and #3 wait; #4 drops #2, #5 drops #3
    assert.equal(await hookMetric('dropped'), dropped0 + 2, 'two events dropped from the full queue');
    for (let i = 0; i < 3; i++) {
      const t0 = Date.now();
      const r = await call(gw, s, 'echo', { text: `while-full-${i}` });
      assert.ok(r.msg?.result && !r.msg.result.isError, JSON.stringify(r));
      assert.ok(Date.now() - t0 < 2000, `echo answered in ${Date.now() - t0} ms while the receiver hangs`);
    }
    assert.equal(got.length - from, 1, 'only the first event reached the receiver so far');
    mode = 'ok';
    for (const h of hung.splice(0)) h.writeHead(200).end();
    await H.waitUntil(() => got.length - from >= 3, { what: 'the events that waited, once the receiver answered' });
    await H.quietFor(300); // negative check: nothing else was waiting
    assert.deepEqual(got.slice(from).map((d) => items.findIndex((it) => it.id === d.body.id) + 1), [1, 4, 5],
      'the first (in flight) and the two newest delivered, in order; #2 and #3 were the oldest waiting');
    for (const it of items) await admin(gw, 'POST', `/admin/approvals/${it.id}/deny`);
    await Promise.all(pending);
  });
});

// ---------------------------------------------------------------------------
// 5. JWT subjects of one grant: what one parked stays theirs, and their token's exp counts

describe('JWT subjects of one grant: parked calls, tasks and approvals stay their subject\'s', () => {
  let gw;
  let rsa;
  const ISSUER = 'https://idp.approvals.test';
  const AUDIENCE = 'tollgate';
  const b64u = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
  /** An RS256 JWT for sub in grant "team" (the issuer's jwt[].grant), valid for ttl_s seconds. */
  const jwt = (sub, ttlS = 300) => {
    const now = Math.floor(Date.now() / 1000);
    const input = `${b64u({ alg: 'RS256', typ: 'JWT', kid: 'k1' })}.${b64u({ iss: ISSUER, aud: AUDIENCE, sub, iat: now, exp: now + ttlS })}`;
    return `${input}.${crypto.sign('sha256', Buffer.from(input), rsa.privateKey).toString('base64url')}`;
  };
  const ALICE = () => jwt('alice');
  const BOB = () => jwt('bob');

  before(async () => {
    rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
    const jwksFile = path.join(dir, 'subjects.jwks.json');
    fs.writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...rsa.publicKey.export({ format: 'jwk' }), kid: 'k1', alg: 'RS256', use: 'sig' }] }));
    const policy = writePolicy('subjects.json', APPROVE);
    gw = await gateway('subjects', {
      // skew_s 0: a token is refused from its exp on, so the test waits no longer than it must
      jwt: [{ issuer: ISSUER, audience: AUDIENCE, jwks_file: jwksFile, grant: 'team', skew_s: 0 }],
      grants: [{ name: 'team', issuers: [ISSUER] }],
      upstreams: [upstream(UPSTREAM, policy), { ...upstream('tasked', policy), approval_mode: 'task' }, { ...upstream('retried', policy), approval_mode: 'retry' }],
    });
  });

  /** One raw JSON-RPC request in sess; resolves with the message that answers it. */
  async function rpc(sess, up, method, params) {
    const r = await H.postRaw(fetchFn, url(gw, up), { jsonrpc: '2.0', id: nextId++, method, params }, { ...H.MCP_HEADERS, ...sess.headers });
    const m = r.messages.find((x) => 'id' in x);
    assert.ok(m, `${method}: an answer (HTTP ${r.status}: ${r.text?.slice(0, 400)})`);
    return m;
  }

  test('a JWT that expires while its call is held: the listing marks it, approve is 409, the client -32003 naming it, nothing forwarded', async () => {
    const s = await session(gw, jwt('alice', 3));
    const p = call(gw, s, 'write_file', { path: '/tmp/subj-expired', content: 'x' });
    const item = await parked(gw, '/tmp/subj-expired');
    assert.equal(item.subject, 'alice');
    assert.equal(item.blocked, null, 'allowed while the token is valid');
    let now;
    await H.waitUntil(async () => /expired/.test((now = (await listing(gw)).find((x) => x.id === item.id))?.blocked ?? ''),
      { timeout: H.scaled(15000), what: 'the listing marking the call once its token expired', detail: () => JSON.stringify(now) });
    assert.match(now.blocked, /^no longer allowed: the token that made this call has expired/, JSON.stringify(now));
    const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: JSON.stringify({ digest: item.digest }) });
    assert.equal(r.status, 409, r.text);
    assert.match(r.json?.error ?? '', /no longer allowed: the token that made this call has expired/, r.text);
    const e = refused(await p, 'the approved call of an expired token');
    assert.match(e.message, /no longer allows it: the token that made this call has expired/, e.message);
    assert.match(e.data?.reason ?? '', /token that made this call has expired/, JSON.stringify(e.data));
    assert.equal(e.data?.approval_id, item.id);
    assert.equal(forwarded('/tmp/subj-expired').length, 0, 'nothing reached the stand-in');
    assert.deepEqual(await listing(gw), [], 'gone from the queue');
  });

  test('task mode: alice\'s task is "Task not found" for bob (same grant) on tasks/get, tasks/result, tasks/cancel; his tasks/list has none of hers', async () => {
    const sa = await session(gw, ALICE(), 'tasked');
    const sb = await session(gw, BOB(), 'tasked');
    const created = await rpc(sa, 'tasked', 'tools/call', { name: 'write_file', arguments: { path: '/tmp/subj-task', content: 'x' }, task: { ttl: 60000 } });
    const taskId = created.result?.task?.taskId;
    assert.ok(taskId, `a task: ${JSON.stringify(created)}`);
    assert.equal(created.result.task.status, 'working');
    const item = await parked(gw, '/tmp/subj-task');
    assert.equal(item.subject, 'alice');
    for (const method of ['tasks/get', 'tasks/result', 'tasks/cancel']) {
      const m = await rpc(sb, 'tasked', method, { taskId });
      assert.equal(m.error?.code, -32602, `bob ${method}: ${JSON.stringify(m)}`);
      assert.match(m.error.message, /Task not found/, `bob ${method}`);
    }
    const bobs = await rpc(sb, 'tasked', 'tasks/list', {});
    assert.deepEqual(bobs.result?.tasks, [], `bob's tasks/list: ${JSON.stringify(bobs)}`);
    const alices = await rpc(sa, 'tasked', 'tasks/list', {});
    assert.deepEqual(alices.result?.tasks?.map((t) => t.taskId), [taskId], JSON.stringify(alices));
    const g = await rpc(sa, 'tasked', 'tasks/get', { taskId });
    assert.equal(g.result?.status, 'working', 'bob\'s tasks/cancel did not touch it');
    assert.ok((await listing(gw)).some((x) => x.id === item.id), 'still parked after bob\'s tasks/cancel');
    const c = await rpc(sa, 'tasked', 'tasks/cancel', { taskId });
    assert.ok(c.result, `alice cancels her own: ${JSON.stringify(c)}`);
    await H.waitUntil(async () => !(await listing(gw)).some((x) => x.id === item.id), { what: 'alice\'s cancelled task out of the queue' });
    assert.equal(forwarded('/tmp/subj-task').length, 0);
  });

  test('retry mode: bob\'s identical call gets its own pending approval, never alice\'s approved one', async () => {
    const sa = await session(gw, ALICE(), 'retried');
    const sb = await session(gw, BOB(), 'retried');
    const args = { path: '/tmp/subj-retry', content: 'x' };
    const pending = (r, who) => {
      const e = refused(r, who);
      assert.equal(e.data?.status, 'pending', `${who}: ${JSON.stringify(e)}`);
      return e.data.approval_id;
    };
    const aid = pending(await call(gw, sa, 'write_file', args, { up: 'retried' }), 'alice');
    const item = (await listing(gw)).find((x) => x.id === aid);
    assert.equal(item?.subject, 'alice', JSON.stringify(item));
    const r = await admin(gw, 'POST', `/admin/approvals/${aid}/approve`, { body: JSON.stringify({ digest: item.digest }) });
    assert.equal(r.status, 200, r.text);
    const bid = pending(await call(gw, sb, 'write_file', args, { up: 'retried' }), 'bob\'s identical call after alice\'s approval');
    assert.notEqual(bid, aid, 'bob has an approval of his own');
    assert.equal((await listing(gw)).find((x) => x.id === bid)?.subject, 'bob');
    assert.equal(forwarded('/tmp/subj-retry').length, 0, 'bob\'s call did not run on alice\'s approval');
    const a = await call(gw, sa, 'write_file', args, { up: 'retried' });
    assert.ok(a.msg?.result && !a.msg.result.isError, `alice's call made again runs: ${JSON.stringify(a)}`);
    assert.equal(forwarded('/tmp/subj-retry').length, 1);
    assert.equal((await admin(gw, 'POST', `/admin/approvals/${bid}/deny`)).status, 200);
  });
});
