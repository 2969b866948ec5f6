// Approval modes with the clients people use: the SDK 1.x client (@modelcontextprotocol/sdk) and
// the SDK 2.x client (@modelcontextprotocol/client), with their default options, through tollgate
// to the CoWork OS stand-in, whose write_file needs a human's approval.
//
//   retry (the default for a call without a progressToken): the call is answered at once with
//     -32003, status "pending", the page's URL and a message a model can act on; once approved
//     through the admin API the same call made again runs, exactly once; a third needs a new
//     approval; identical pending calls share one approval; a denial reaches the retry with the
//     approver's reason; another grant's identical call is not covered by the approval.
//   hold (a call that sent a progressToken): the call waits; notifications/progress every
//     limits.approval_progress_ms (1 s here; sent on the gateway's 1 s tick, so 1 to 2 s apart)
//     keep an SDK call with resetTimeoutOnProgress alive past its own timeout (4 s here, standing
//     for the SDK's 60 s); without progress it would have failed. The wait is capped at limits.approval_hold_max_ms.
//   task (a task-augmented call): the SDK 1.x experimental tasks client gets a task, working while
//     a human decides, completed with the result or failed with the denial; another grant's
//     tasks/get, tasks/result, tasks/cancel of it are "not found", its tasks/list empty.
//   task, MCP 2026-07-28 (raw requests declaring the io.modelcontextprotocol/tasks extension; no
//     npm client implements it yet: the SDK 2.x client rejects resultType "task"): a flat
//     CreateTaskResult (resultType "task", working, ttlMs covering the approval window), tasks/get
//     working until decided, then completed with the result inlined or failed with the denial as
//     the inlined error; tasks/cancel an empty ack that withdraws the call; another grant's
//     tasks/get|update|cancel "not found"; without the extension declared, -32021 for those and
//     retry for the call.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import * as H from './lib/harness.mjs';

H.requireNodeModules();

const cleanup = new H.Cleanup();
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const ADMIN_TOKEN = 'admin-' + H.randomToken();
const ALICE = 'alice-' + H.randomToken();
const BOB = 'bob-' + H.randomToken();
let dir;
let fetchFn;
let sdk;
let s;
let gw;

const logs = () => ({
  'tollgate process': gw?.status(),
  'tollgate stderr': gw?.stderr(),
  'stand-in log': s?.logFile && fs.existsSync(s.logFile) ? fs.readFileSync(s.logFile, 'utf8').slice(-4000) : undefined,
});
const test = (name, fn) => it(name, H.withLogs(logs, fn));

before(async () => {
  sdk = await H.loadSdk();
  dir = H.makeTempDir(cleanup, 'tollgate-approvals-');
  fetchFn = H.makeFetch({ cleanup });
  s = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  const policy = path.join(dir, 'policy.json');
  fs.writeFileSync(policy, JSON.stringify({
    version: '1', default: 'deny',
    tools: { write_file: { action: 'approve', approval_timeout: 120 }, echo: { action: 'allow' } },
  }));
  const conf = H.writeConf(dir, {
    admin: { token_sha256: H.sha256hex(ADMIN_TOKEN) },
    limits: { approval_progress_ms: 1000, approval_hold_max_ms: 8000 },
    grants: [{ name: 'alice', token_sha256: H.sha256hex(ALICE) }, { name: 'bob', token_sha256: H.sha256hex(BOB) }],
    upstreams: [{ name: 'cowork-os', url: s.url, headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` }, initialize: 'local', policy }],
  });
  gw = await H.startTollgate(conf, { cleanup, listeners: 1, admin: true });
});
after(() => cleanup.run());

const url = () => `http://127.0.0.1:${gw.plainPort}/cowork-os/mcp`;
const writes = (p) => s.records().filter((r) => r.http && r.msg?.method === 'tools/call' &&
  r.msg.params?.name === 'write_file' && r.msg.params.arguments?.path === p);

async function admin(method, p, headers = {}, body) {
  const h = { authorization: `Bearer ${ADMIN_TOKEN}`, ...headers };
  if (body !== undefined) h['content-type'] = 'application/json';
  const res = await fetchFn(`http://127.0.0.1:${gw.adminPort}${p}`, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text };
}

const sdk1 = (token) => H.connectClient(url(), { fetch: fetchFn, headers: { Authorization: `Bearer ${token}` }, cleanup });

/** The SDK 2.x client; mode 'pin' speaks 2026-07-28, 'legacy' 2025. */
async function sdk2(token, mode) {
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const client = new Client({ name: `approvals-${mode}`, version: '1.0.0' },
    { capabilities: {}, versionNegotiation: { mode: mode === 'pin' ? { pin: '2026-07-28' } : 'legacy' } });
  cleanup.add(() => client.close().catch(() => {}));
  await client.connect(new StreamableHTTPClientTransport(new URL(url()), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return client;
}

/** The error a call rejects with (fails if it resolves). */
async function rejection(p, what) {
  try {
    const r = await p;
    assert.fail(`${what}: expected a JSON-RPC error, got ${JSON.stringify(r).slice(0, 300)}`);
  } catch (e) {
    if (e?.code === 'ERR_ASSERTION') throw e;
    return e;
  }
}

/** The pending answer: -32003, what a model can act on, what a program can. */
function assertPending(e, what) {
  assert.equal(e.code, -32003, `${what}: ${e.message}`);
  const d = e.data;
  assert.equal(d?.status, 'pending', `${what}: ${JSON.stringify(d)}`);
  assert.match(d.approval_id, /^[0-9a-f]{32}$/);
  assert.equal(d.approve_url, `http://127.0.0.1:${gw.adminPort}/admin/ui/`);
  assert.equal(d.retry_after_ms, 5000);
  assert.equal(d.tool, 'write_file');
  assert.match(e.message, new RegExp(`a human must approve this call at http://127\\.0\\.0\\.1:${gw.adminPort}/admin/ui/ \\(approval ${d.approval_id}\\); ask the user to approve it, then call write_file again with the same arguments`));
  return d.approval_id;
}

async function listed(id) {
  const r = await admin('GET', '/admin/approvals');
  assert.equal(r.status, 200, r.text);
  return r.json.approvals.find((x) => x.id === id);
}

describe('retry mode (the default without a progressToken)', () => {
  for (const [name, open] of [
    ['SDK 1.x', async (t) => { const c = await sdk1(t); return (args) => c.client.callTool({ name: 'write_file', arguments: args }); }],
    ['SDK 2.x (2025 session)', async (t) => { const c = await sdk2(t, 'legacy'); return (args) => c.callTool({ name: 'write_file', arguments: args }); }],
    ['SDK 2.x (2026-07-28)', async (t) => { const c = await sdk2(t, 'pin'); return (args) => c.callTool({ name: 'write_file', arguments: args }); }],
  ]) {
    test(`${name}: pending at once, listed; approved, the call made again runs once; once more needs a new approval`, async () => {
      const call = await open(ALICE);
      const p = `/tmp/retry-${name.replace(/\W+/g, '-')}.txt`;
      const args = { path: p, content: 'x', mode: 420 };
      const t0 = Date.now();
      const id = assertPending(await rejection(call(args), 'first call'), 'first call');
      assert.ok(Date.now() - t0 < 5000, 'answered at once, not held');
      const item = await listed(id);
      assert.ok(item, 'the pending approval is listed like a parked call');
      assert.equal(item.grant, 'alice');
      assert.equal(item.tool, 'write_file');
      // the same call again before a decision: the same approval, nothing runs
      const same = assertPending(await rejection(call({ mode: 420, content: 'x', path: p }), 'same call'), 'same call');
      assert.equal(same, id, 'identical pending calls share one approval (keys in any order)');
      assert.equal((await admin('GET', '/admin/approvals')).json.approvals.filter((x) => x.tool === 'write_file' && x.grant === 'alice').length, 1);
      // another grant's identical call is its own
      const other = await sdk1(BOB);
      const bobId = assertPending(await rejection(other.client.callTool({ name: 'write_file', arguments: args }), 'bob'), 'bob');
      assert.notEqual(bobId, id);
      const r = await admin('POST', `/admin/approvals/${id}/approve`, { 'X-Tollgate-Approver': 'carol' }, { digest: item.digest });
      assert.equal(r.status, 200, r.text);
      assert.equal(await listed(id), undefined, 'decided: no longer listed');
      assert.equal(writes(p).length, 0, 'nothing ran at the approval itself');
      const res = await call(args);
      assert.ok(!res.isError, JSON.stringify(res));
      assert.equal(writes(p).length, 1, 'the call made again ran exactly once');
      assert.deepEqual(writes(p)[0].msg.params.arguments, args);
      const again = assertPending(await rejection(call(args), 'third call'), 'third call');
      assert.notEqual(again, id, 'a used approval is gone: a new one is asked for');
      assert.equal(writes(p).length, 1, 'the third call did not run');
      const d = await admin('POST', `/admin/approvals/${again}/deny`);
      assert.equal(d.status, 200, d.text);
      const d2 = await admin('POST', `/admin/approvals/${bobId}/deny`);
      assert.equal(d2.status, 200, d2.text);
    });
  }

  test('denied: the call made again gets -32003 with the approver\'s reason, and nothing runs', async () => {
    const c = await sdk1(ALICE);
    const args = { path: '/tmp/retry-denied.txt', content: 'no' };
    const id = assertPending(await rejection(c.client.callTool({ name: 'write_file', arguments: args }), 'first'), 'first');
    const r = await fetchFn(`http://127.0.0.1:${gw.adminPort}/admin/approvals/${id}/deny`, {
      method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'not on a Friday' }),
    });
    assert.equal(r.status, 200, await r.text());
    const e = await rejection(c.client.callTool({ name: 'write_file', arguments: args }), 'retry');
    assert.equal(e.code, -32003);
    assert.equal(e.data.status, 'denied');
    assert.equal(e.data.approval_id, id);
    assert.equal(e.data.reason, 'not on a Friday');
    assert.match(e.message, /write_file was refused by a human approver; the call was not made/);
    assert.equal(writes(args.path).length, 0);
  });
});

describe('hold mode (a call that sent a progressToken)', () => {
  test('SDK 1.x with resetTimeoutOnProgress: progress every second keeps it waiting past its timeout; approved, it runs', async () => {
    const c = await sdk1(ALICE);
    const args = { path: '/tmp/hold.txt', content: 'held' };
    const progress = [];
    const t0 = Date.now();
    const call = c.client.callTool({ name: 'write_file', arguments: args }, undefined, {
      timeout: 4000, resetTimeoutOnProgress: true, onprogress: (p) => progress.push(p),
    });
    const item = await H.waitUntil(async () => (await admin('GET', '/admin/approvals')).json.approvals.find((x) => x.tool === 'write_file' && x.session),
      { what: 'the held call in GET /admin/approvals' });
    assert.ok(item.expires_in_ms <= 8000, `approval_timeout 120 s is capped at approval_hold_max_ms: ${item.expires_in_ms}`);
    await H.waitUntil(() => progress.length >= 3 && Date.now() - t0 > 5000,
      { what: 'progress notifications past the 4 s timeout' });
    assert.match(progress[0].message, /waiting for a human to approve write_file at http:\/\/127\.0\.0\.1:\d+\/admin\/ui\/ \(approval [0-9a-f]{32}\)/);
    assert.ok(progress.every((p, i) => i === 0 || p.progress > progress[i - 1].progress), 'progress increases');
    const r = await admin('POST', `/admin/approvals/${item.id}/approve`, {}, { digest: item.digest });
    assert.equal(r.status, 200, r.text);
    const res = await call;
    assert.ok(!res.isError, JSON.stringify(res));
    assert.equal(writes(args.path).length, 1);
  });

  test('SDK 2.x (2025 session) with resetTimeoutOnProgress: the same', async () => {
    const c = await sdk2(ALICE, 'legacy');
    const args = { path: '/tmp/hold-sdk2.txt', content: 'held' };
    const progress = [];
    const t0 = Date.now();
    const call = c.callTool({ name: 'write_file', arguments: args }, {
      timeout: 4000, resetTimeoutOnProgress: true, onprogress: (p) => progress.push(p),
    });
    const item = await H.waitUntil(async () => (await admin('GET', '/admin/approvals')).json.approvals.find((x) => x.tool === 'write_file' && x.session),
      { what: 'the held call in GET /admin/approvals' });
    await H.waitUntil(() => progress.length >= 3 && Date.now() - t0 > 5000,
      { what: 'progress notifications past the 4 s timeout' });
    const r = await admin('POST', `/admin/approvals/${item.id}/approve`, {}, { digest: item.digest });
    assert.equal(r.status, 200, r.text);
    const res = await call;
    assert.ok(!res.isError, JSON.stringify(res));
    assert.equal(writes(args.path).length, 1);
  });

  test('a held call is refused when approval_hold_max_ms passes', async () => {
    const c = await sdk1(ALICE);
    const t0 = Date.now();
    const e = await rejection(c.client.callTool({ name: 'write_file', arguments: { path: '/tmp/hold-expired.txt', content: 'x' } }, undefined,
      { timeout: 4000, resetTimeoutOnProgress: true, onprogress: () => {} }), 'expired');
    assert.equal(e.code, -32003, e.message);
    assert.match(e.message, /write_file was not approved in time; the call was not made/);
    const took = Date.now() - t0;
    assert.ok(took >= 7000 && took < 12000, `the cap (8 s) decided, not the tool's 120 s: ${took} ms`);
  });
});

describe('task mode (a task-augmented call, MCP 2025-11-25)', () => {
  /** The SDK 1.x experimental tasks client: callToolStream with a task; every message it yields. */
  async function streamed(c, args, onCreated) {
    const seen = [];
    for await (const msg of c.client.experimental.tasks.callToolStream({ name: 'write_file', arguments: args }, undefined, { task: { ttl: 60000 } })) {
      seen.push(msg);
      if (msg.type === 'taskCreated') await onCreated(msg.task);
    }
    return seen;
  }

  test('SDK 1.x callToolStream: a task, working while it waits, bound to its caller; approved, completed with the result', async () => {
    const c = await sdk1(ALICE);
    const other = await sdk1(BOB);
    const args = { path: '/tmp/task-approved.txt', content: 'task' };
    let taskId;
    const seen = await streamed(c, args, async (task) => {
      taskId = task.taskId;
      assert.equal(task.status, 'working');
      assert.match(task.statusMessage, /waiting for a human to approve write_file at http:\/\/127\.0\.0\.1:\d+\/admin\/ui\/ \(approval [0-9a-f]{32}\)/);
      assert.ok(task.ttl >= 120000, `the ttl covers the approval window: ${task.ttl}`);
      // another grant: not found, whatever it asks; its list is empty
      for (const [method, schema] of [['tasks/get', sdk.types.GetTaskResultSchema], ['tasks/result', sdk.types.CallToolResultSchema], ['tasks/cancel', sdk.types.CancelTaskResultSchema]]) {
        const e = await rejection(other.client.request({ method, params: { taskId } }, schema), `bob ${method}`);
        assert.equal(e.code, -32602, `${method}: ${e.message}`);
        assert.match(e.message, /Task not found/);
      }
      assert.deepEqual((await other.client.request({ method: 'tasks/list', params: {} }, sdk.types.ListTasksResultSchema)).tasks, []);
      const mine = await c.client.request({ method: 'tasks/list', params: {} }, sdk.types.ListTasksResultSchema);
      assert.deepEqual(mine.tasks.map((t) => t.taskId), [taskId]);
      const got = await c.client.experimental.tasks.getTask(taskId);
      assert.equal(got.status, 'working');
      assert.equal(writes(args.path).length, 0, 'nothing ran before the approval');
      const item = await H.waitUntil(async () => (await admin('GET', '/admin/approvals')).json.approvals.find((x) => x.tool === 'write_file'),
        { what: 'the parked task call in the queue' });
      const r = await admin('POST', `/admin/approvals/${item.id}/approve`, {}, { digest: item.digest });
      assert.equal(r.status, 200, r.text);
    });
    const statuses = seen.filter((m) => m.type === 'taskStatus').map((m) => m.task.status);
    assert.equal(statuses.at(-1), 'completed', JSON.stringify(seen));
    const result = seen.find((m) => m.type === 'result');
    assert.ok(result && !result.result.isError, JSON.stringify(seen));
    assert.equal(writes(args.path).length, 1, 'the approved call ran exactly once');
    assert.equal(writes(args.path)[0].msg.params.task, undefined, 'the upstream got a plain call');
    const again = await c.client.experimental.tasks.getTaskResult(taskId, sdk.types.CallToolResultSchema);
    assert.deepEqual(again, result.result, 'tasks/result keeps the answer');
  });

  test('denied: the task fails with the approver\'s reason; the call never runs', async () => {
    const c = await sdk1(ALICE);
    const args = { path: '/tmp/task-denied.txt', content: 'no' };
    let taskId;
    const seen = await streamed(c, args, async (task) => {
      taskId = task.taskId;
      const item = await H.waitUntil(async () => (await admin('GET', '/admin/approvals')).json.approvals.find((x) => x.tool === 'write_file'),
        { what: 'the parked task call in the queue' });
      const r = await fetchFn(`http://127.0.0.1:${gw.adminPort}/admin/approvals/${item.id}/deny`, {
        method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ reason: 'not this file' }),
      });
      assert.equal(r.status, 200, await r.text());
    });
    assert.equal(seen.at(-1).type, 'error', JSON.stringify(seen));
    const got = await c.client.experimental.tasks.getTask(taskId);
    assert.equal(got.status, 'failed');
    assert.equal(got.statusMessage, 'write_file was refused by a human approver; the call was not made: not this file');
    const e = await rejection(c.client.experimental.tasks.getTaskResult(taskId, sdk.types.CallToolResultSchema), 'tasks/result');
    assert.equal(e.code, -32003);
    assert.equal(e.data.reason, 'not this file');
    assert.equal(writes(args.path).length, 0);
  });

  test('tasks/cancel withdraws the parked call: it leaves the queue and never runs', async () => {
    const c = await sdk1(ALICE);
    const args = { path: '/tmp/task-cancelled.txt', content: 'no' };
    const seen = await streamed(c, args, async (task) => {
      await H.waitUntil(async () => (await admin('GET', '/admin/approvals')).json.approvals.some((x) => x.tool === 'write_file'),
        { what: 'the parked task call in the queue' });
      const r = await c.client.experimental.tasks.cancelTask(task.taskId);
      assert.equal(r.status, 'cancelled');
      assert.equal((await admin('GET', '/admin/approvals')).json.approvals.some((x) => x.tool === 'write_file'), false);
    });
    assert.equal(seen.at(-1).type, 'error', JSON.stringify(seen));
    assert.equal(writes(args.path).length, 0);
  });
});

describe('task mode, MCP 2026-07-28 (the tasks extension, SEP-2663): raw requests', () => {
  const MODERN = '2026-07-28';
  const EXT = 'io.modelcontextprotocol/tasks';
  const meta = (ext) => ({ 'io.modelcontextprotocol/protocolVersion': MODERN,
    'io.modelcontextprotocol/clientCapabilities': ext ? { extensions: { [EXT]: {} } } : {} });
  let nextId = 100;
  /** One 2026-07-28 request: its standard headers from the body (Mcp-Name: the tool or the task), its answer. */
  async function rpc(token, method, params, { ext = true, headers } = {}) {
    const name = method === 'tools/call' ? params.name : ['tasks/get', 'tasks/update', 'tasks/cancel'].includes(method) ? params.taskId : undefined;
    const h = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${token}`,
      'MCP-Protocol-Version': MODERN, 'Mcp-Method': method, ...(name !== undefined ? { 'Mcp-Name': name } : {}), ...headers };
    for (const [k, v] of Object.entries(h)) if (v === null) delete h[k];
    const id = nextId++;
    const res = await fetchFn(url(), { method: 'POST', headers: h,
      body: JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: meta(ext) } }) });
    const text = await res.text();
    let msg;
    try { msg = JSON.parse(text); } catch { msg = H.parseSse(text).map((e) => JSON.parse(e.data)).find((m) => m.id === id); }
    assert.ok(msg, `${method}: an answer (HTTP ${res.status}): ${text.slice(0, 300)}`);
    return { status: res.status, msg, text };
  }
  const ok = (r, what) => { assert.equal(r.msg.error, undefined, `${what}: ${r.text.slice(0, 400)}`); return r.msg.result; };
  const err = (r, code, what) => { assert.equal(r.msg.error?.code, code, `${what}: ${r.text.slice(0, 400)}`); return r.msg.error; };
  const get = (token, taskId, opts) => rpc(token, 'tasks/get', { taskId }, opts);
  const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

  /** A write_file call of alice's that needs approval: its CreateTaskResult, checked, and its listing. */
  async function created(args) {
    const r = ok(await rpc(ALICE, 'tools/call', { name: 'write_file', arguments: args }), 'tools/call');
    assert.equal(r.resultType, 'task', JSON.stringify(r));
    assert.equal(r.status, 'working');
    assert.match(r.taskId, /^[0-9a-f]{32}$/);
    assert.match(r.statusMessage, /^waiting for a human to approve write_file at http:\/\/127\.0\.0\.1:\d+\/admin\/ui\/ \(approval [0-9a-f]{32}\)$/);
    assert.match(r.createdAt, ISO);
    assert.match(r.lastUpdatedAt, ISO);
    assert.ok(Number.isInteger(r.ttlMs) && r.ttlMs >= 120000, `ttlMs covers the approval window (120 s): ${r.ttlMs}`);
    assert.equal(r.pollIntervalMs, 1000);
    for (const k of ['task', 'ttl', 'pollInterval', 'result', 'error', 'requestState', 'content'])
      assert.equal(k in r, false, `a flat CreateTaskResult has no ${k}: ${JSON.stringify(r)}`);
    const item = await H.waitUntil(async () => (await admin('GET', '/admin/approvals')).json.approvals
      .find((x) => x.id === r.statusMessage.match(/approval ([0-9a-f]{32})/)[1]), { what: 'the parked task call in the queue' });
    assert.equal(item.tool, 'write_file');
    assert.equal(item.grant, 'alice');
    return { task: r, item };
  }

  test('server/discover advertises the extension', async () => {
    const r = ok(await rpc(ALICE, 'server/discover', {}), 'server/discover');
    assert.deepEqual(r.capabilities.extensions, { [EXT]: {} }, JSON.stringify(r.capabilities));
  });

  test('approved: working while a human decides, bound to its caller; then completed with the result inlined', async () => {
    const args = { path: '/tmp/task26-approved.txt', content: 'task' };
    const { task, item } = await created(args);
    const w = ok(await get(ALICE, task.taskId), 'tasks/get');
    assert.equal(w.resultType, 'complete');
    assert.equal(w.taskId, task.taskId);
    assert.equal(w.status, 'working');
    assert.equal('result' in w || 'error' in w, false, JSON.stringify(w));
    // another grant's tasks/get, tasks/update, tasks/cancel: not found, as a task that does not exist
    for (const [method, extra] of [['tasks/get', {}], ['tasks/update', { inputResponses: {} }], ['tasks/cancel', {}]]) {
      const from = gw.stderr().length;
      const e = err(await rpc(BOB, method, { taskId: task.taskId, ...extra }), -32602, `bob ${method}`);
      assert.match(e.message, /Task not found/);
      await gw.waitForLog(/task not found for its caller.*grant=bob/, { from, what: `the gateway refusing bob's ${method}` });
    }
    err(await get(ALICE, '0'.repeat(32)), -32602, 'an unknown task id');
    // the extension's methods for a client that declared it only
    const { status, msg } = await get(ALICE, task.taskId, { ext: false });
    assert.equal(status, 400);
    assert.equal(msg.error.code, -32021, JSON.stringify(msg));
    assert.deepEqual(msg.error.data, { requiredCapabilities: { extensions: { [EXT]: {} } } });
    // Mcp-Name states the task: missing or another one is refused before anything
    for (const h of [{ 'Mcp-Name': null }, { 'Mcp-Name': 'f'.repeat(32) }]) {
      const r = await get(ALICE, task.taskId, { headers: h });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.msg.error.code, -32020, r.text);
    }
    // removed in 2026-07-28: tasks/result and tasks/list
    err(await rpc(ALICE, 'tasks/result', { taskId: task.taskId }), -32601, 'tasks/result');
    err(await rpc(ALICE, 'tasks/list', {}), -32601, 'tasks/list');
    // tasks/update: nothing was asked, an empty ack; without inputResponses, -32602
    assert.deepEqual(ok(await rpc(ALICE, 'tasks/update', { taskId: task.taskId, inputResponses: {} }), 'tasks/update'), { resultType: 'complete' });
    err(await rpc(ALICE, 'tasks/update', { taskId: task.taskId }), -32602, 'tasks/update without inputResponses');
    assert.equal(writes(args.path).length, 0, 'nothing ran before the approval');
    const r = await admin('POST', `/admin/approvals/${item.id}/approve`, {}, { digest: item.digest });
    assert.equal(r.status, 200, r.text);
    const done = await H.waitUntil(async () => { const g = ok(await get(ALICE, task.taskId), 'tasks/get'); return g.status !== 'working' && g; },
      { what: 'the task finished' });
    assert.equal(done.status, 'completed', JSON.stringify(done));
    assert.equal(done.resultType, 'complete');
    assert.ok(Array.isArray(done.result?.content) && done.result.content.length > 0, JSON.stringify(done));
    assert.equal(done.result.isError, undefined, JSON.stringify(done));
    assert.equal('error' in done, false);
    assert.equal(writes(args.path).length, 1, 'the approved call ran once');
    assert.deepEqual(writes(args.path)[0].msg.params.arguments, args);
    assert.equal(writes(args.path)[0].msg.params.task, undefined, 'the upstream got a plain call');
    assert.deepEqual(ok(await rpc(ALICE, 'tasks/cancel', { taskId: task.taskId }), 'cancel a finished task'), { resultType: 'complete' },
      'a finished task\'s cancel is acked the same');
    assert.equal(ok(await get(ALICE, task.taskId), 'tasks/get').status, 'completed', 'and changes nothing');
  });

  test('denied: failed, the approver\'s reason in the inlined error; the call never runs', async () => {
    const args = { path: '/tmp/task26-denied.txt', content: 'no' };
    const { task, item } = await created(args);
    const r = await admin('POST', `/admin/approvals/${item.id}/deny`, {}, { reason: 'not on a Friday' });
    assert.equal(r.status, 200, r.text);
    const done = await H.waitUntil(async () => { const g = ok(await get(ALICE, task.taskId), 'tasks/get'); return g.status !== 'working' && g; },
      { what: 'the task finished' });
    assert.equal(done.status, 'failed', JSON.stringify(done));
    assert.equal(done.statusMessage, 'write_file was refused by a human approver; the call was not made: not on a Friday');
    assert.equal(done.error.code, -32003);
    assert.equal(done.error.message, 'write_file was refused by a human approver; the call was not made');
    assert.equal(done.error.data.reason, 'not on a Friday');
    assert.equal(done.error.data.approval_id, item.id);
    assert.equal('result' in done, false);
    assert.equal(writes(args.path).length, 0);
  });

  test('tasks/cancel withdraws the parked call: an empty ack, it leaves the queue, cancelled, never runs', async () => {
    const args = { path: '/tmp/task26-cancelled.txt', content: 'no' };
    const { task, item } = await created(args);
    assert.deepEqual(ok(await rpc(ALICE, 'tasks/cancel', { taskId: task.taskId }), 'tasks/cancel'), { resultType: 'complete' });
    assert.equal((await admin('GET', '/admin/approvals')).json.approvals.some((x) => x.id === item.id), false, 'withdrawn from the queue');
    const g = ok(await get(ALICE, task.taskId), 'tasks/get');
    assert.equal(g.status, 'cancelled');
    assert.equal('result' in g || 'error' in g, false, JSON.stringify(g));
    const late = await admin('POST', `/admin/approvals/${item.id}/approve`, {}, { digest: item.digest });
    assert.notEqual(late.status, 200, 'a withdrawn call cannot be approved');
    assert.equal(writes(args.path).length, 0);
  });

  test('a client that did not declare the extension gets retry: -32003 pending, no task', async () => {
    const args = { path: '/tmp/task26-noext.txt', content: 'x' };
    const e = err(await rpc(ALICE, 'tools/call', { name: 'write_file', arguments: args }, { ext: false }), -32003, 'no extension');
    const id = assertPending(e, 'no extension');
    assert.ok(await listed(id));
    assert.equal((await admin('POST', `/admin/approvals/${id}/deny`)).status, 200);
  });
});

describe('an upstream\'s task ids: only the caller they were handed to may name them', () => {
  test('server-everything\'s simulate-research-query task: alice polls it through; bob\'s tasks/get, tasks/result, tasks/cancel are not found, his tasks/list empty', async () => {
    const ev = await H.startEverything({ cleanup });
    const policy = path.join(dir, 'allow.json');
    fs.writeFileSync(policy, JSON.stringify({ version: '1', default: 'allow' }));
    const sub = path.join(dir, 'relay');
    fs.mkdirSync(sub, { recursive: true });
    const g2 = await H.startTollgate(H.writeConf(sub, {
      grants: [{ name: 'alice', token_sha256: H.sha256hex(ALICE) }, { name: 'bob', token_sha256: H.sha256hex(BOB) }],
      upstreams: [{ name: 'everything', url: ev.url, policy }],
    }), { cleanup, listeners: 1 });
    const u = `http://127.0.0.1:${g2.plainPort}/everything/mcp`;
    const caps = { tasks: { list: {}, cancel: {} }, elicitation: {} };
    const alice = await H.connectClient(u, { fetch: fetchFn, headers: { Authorization: `Bearer ${ALICE}` }, cleanup, capabilities: caps });
    const bob = await H.connectClient(u, { fetch: fetchFn, headers: { Authorization: `Bearer ${BOB}` }, cleanup, capabilities: caps });
    const created = await alice.client.request({ method: 'tools/call', params: { name: 'simulate-research-query', arguments: { topic: 'gateways' }, task: { ttl: 60000 } } },
      sdk.types.CreateTaskResultSchema);
    const taskId = created.task.taskId;
    assert.ok(taskId, JSON.stringify(created));
    const mine = await alice.client.request({ method: 'tasks/get', params: { taskId } }, sdk.types.GetTaskResultSchema);
    assert.equal(mine.taskId, taskId, 'its caller polls it through the gateway');
    for (const [method, schema] of [['tasks/get', sdk.types.GetTaskResultSchema], ['tasks/result', sdk.types.CallToolResultSchema], ['tasks/cancel', sdk.types.CancelTaskResultSchema]]) {
      const from = g2.stderr().length;
      const e = await rejection(bob.client.request({ method, params: { taskId } }, schema), `bob ${method}`);
      assert.equal(e.code, -32602, `${method}: ${e.message}`);
      await g2.waitForLog(/task not found for its caller.*grant=bob/, { from, what: `the gateway refusing bob's ${method}` });
    }
    assert.deepEqual((await bob.client.request({ method: 'tasks/list', params: {} }, sdk.types.ListTasksResultSchema)).tasks, []);
    const done = await alice.client.request({ method: 'tasks/cancel', params: { taskId } }, sdk.types.CancelTaskResultSchema);
    assert.equal(done.status, 'cancelled', 'its caller may cancel it');
    await g2.stop();
    g2.assertNoSanitizerReport();
  });
});

describe('shutdown with records, tasks and a pending approval left', () => {
  test('a pending retry approval, decided records and finished tasks at exit: no sanitizer report, no leak', async () => {
    const c = await sdk1(ALICE);
    assertPending(await rejection(c.client.callTool({ name: 'write_file', arguments: { path: '/tmp/left.txt' } }), 'left'), 'left');
    const r = await gw.stop();
    assert.equal(r.code, 0, `exit: ${JSON.stringify(r)}\n${gw.stderr().slice(-3000)}`);
    gw.assertNoSanitizerReport();
  });
});
