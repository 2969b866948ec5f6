// Denials in the MCP drafts' shapes (signals = "mcp-drafts"): SEP-2643's authorization denial
// envelope and SEP-3313's tool-failure classification on a tools/call tollgate refuses, through
// a 2025 upstream (the CoWork OS stand-in) and a 2026-07-28-only one (the era2026 fixture):
//   1. on every client transport (Streamable HTTP 2025, 2026-07-28 stateless, legacy SSE,
//      WebSocket) a policy's deny is a CallToolResult with isError true whose _meta holds
//      "io.modelcontextprotocol/authorization" {reason, remediation "unavailable",
//      authorizationContextId} and "io.modelcontextprotocol/toolFailure" {class "governance",
//      code "policy_blocked", correlationId: the same handle}, tollgate's own data beside them
//   2. a tool tools/list does not show (hidden, denied outright) is "undisclosed": the same text
//      and code for a hidden name and a denied one, no rule, no reason, no hints
//   3. a call waiting for approval (retry mode) is "available" with a "url" hint naming the page;
//      a task-mode call's CreateTaskResult and its tasks/get while it waits carry a "task" hint
//   4. an upstream with signals = "tollgate" keeps -32001 / -32003 with none of it
//   5. a retry echoing the handle in params._meta["io.modelcontextprotocol/authorization-context-id"]
//      is accepted and logged, and is still denied: the handle never authorizes
//      The handle is the correlation_id of the refusal's audit line; none by default.
//   6. what the official SDK clients (1.x and 2.x Client.callTool) give for such a denial
//   7. what a human decides: a refused retry-mode call made again, a refused held call and a
//      refused task's result are "unavailable"; an approved one made again with the echoed
//      handle runs; a 2025-11-25 task-augmented call has the envelope beside its task
//   8. under default: deny, an unnamed tool is "undisclosed" as a hidden one is
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/denials.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as C from './lib/clients.mjs';
import { startEra2026 } from './lib/conformance2026.mjs';

H.requireNodeModules();

const AUTHZ = 'io.modelcontextprotocol/authorization';
const FAILURE = 'io.modelcontextprotocol/toolFailure';
const ECHO_KEY = 'io.modelcontextprotocol/authorization-context-id';
const HANDLE = /^[0-9a-f]{32}$/;
const cleanup = new H.Cleanup();
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const KINDS = ['streamable', 'stateless', 'sse', 'ws'];
const UPSTREAMS = ['cowork', 'modern']; // 2025 and 2026-07-28-only
const ADMIN_TOKEN = 'admin-' + H.randomToken();
const TOKENS = Object.fromEntries([...KINDS, 'echo', 'sdk', 'task', 'plain', 'decided', 'hold', 'strict', 'taskdeny', 'task25'].map((k) => [k, `${k}-${H.randomToken()}`]));
let dir;
let s;
let modern;
let gw;
let port;
let agent;
/** The audit lines written so far (whole lines only). */
const auditLines = () => fs.readFileSync(path.join(dir, 'audit.log'), 'utf8').split('\n').slice(0, -1).map((l) => JSON.parse(l));

const logs = () => ({ 'tollgate stderr': gw?.stderr() });
const test = (name, fn) => it(name, H.withLogs(logs, fn));

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-denials-');
  agent = new http.Agent({ keepAlive: true });
  cleanup.add(() => agent.destroy());
  [s, modern] = await Promise.all([
    H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') }),
    startEra2026({ cleanup, args: ['--legacy', 'reject'], logFile: path.join(dir, 'era2026.log') }),
  ]);
  const policy = path.join(dir, 'policy.json');
  fs.writeFileSync(policy, JSON.stringify({
    version: '1', default: 'allow', hide: ['secret'],
    tools: {
      echo: { rules: [{ name: 'no-forbidden', conditions: [{ path: 'args.text', op: 'neq', value: 'forbidden' }], on_deny: 'echo will not say that' }] },
      drop_table: { action: 'deny', reason: 'tables stay' },
      execute_code: { action: 'approve', approval_mode: 'retry', approval_timeout: 120 },
      write_file: { action: 'approve', approval_timeout: 120 }, // its mode by the call: hold, task or retry
    },
  }) + '\n');
  const cowork = (name, extra = {}) => ({ name, url: s.url, headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` }, initialize: 'local', policy, ...extra });
  const strict = path.join(dir, 'strict.json');
  fs.writeFileSync(strict, JSON.stringify({ version: '1', default: 'deny', tools: { echo: { action: 'allow' } } }) + '\n');
  const conf = H.writeConf(dir, {
    admin: { token_sha256: H.sha256hex(ADMIN_TOKEN) },
    audit: { file: path.join(dir, 'audit.log') },
    signals: 'mcp-drafts',
    grants: Object.entries(TOKENS).map(([name, t]) => ({ name, token_sha256: H.sha256hex(t) })),
    upstreams: [cowork('cowork', { default: true }), { name: 'modern', url: modern.url, policy }, cowork('plain', { signals: 'tollgate' }), cowork('strict', { policy: strict })],
  });
  gw = await H.startTollgate(conf, { cleanup, admin: true });
  port = gw.plainPort;
  await gw.waitForLog(/msg="upstream protocol" upstream=modern era=(\S+)/, { what: 'the probe of the 2026 upstream' });
});
after(() => cleanup.run());

async function admin(method, p, body) {
  const h = { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) };
  const r = await C.request(agent, gw.adminPort, method, p, h, body === undefined ? undefined : JSON.stringify(body));
  return { status: r.status, json: (() => { try { return JSON.parse(r.text); } catch { return undefined; } })(), text: r.text };
}

/** The queued approval of grant's call of tool, once it is there. */
const queued = (grant, tool) => H.waitUntil(async () => (await admin('GET', '/admin/approvals')).json?.approvals
  ?.find((x) => x.grant === grant && x.tool === tool), { what: `${grant}'s ${tool} in the approvals queue` });

async function withClient(kind, upstream, token, fn) {
  const c = await C.openClient(kind, { port, upstream, token, agent });
  try {
    return await fn(c);
  } finally {
    await c.close();
  }
}

/** A drafts denial: the result, its two _meta objects checked as SEP-2643 and SEP-3313 have them. */
function draftDenial(a, { remediation, code, kind, what }) {
  assert.equal(a.error, undefined, `${what}: a result, not a JSON-RPC error: ${JSON.stringify(a)}`);
  const r = a.result;
  assert.equal(r?.isError, true, `${what}: ${JSON.stringify(a)}`);
  assert.equal(r.content?.[0]?.type, 'text', what);
  if (kind === 'stateless') assert.equal(r.resultType, 'complete', `${what}: a 2026 result says its type`);
  else assert.equal('resultType' in r, false, what);
  const env = r._meta?.[AUTHZ];
  const tf = r._meta?.[FAILURE];
  assert.equal(env?.reason, 'insufficient_authorization', `${what}: ${JSON.stringify(r._meta)}`);
  assert.equal(env.remediation, remediation, `${what}: ${JSON.stringify(env)}`);
  assert.match(env.authorizationContextId, HANDLE, what);
  assert.deepEqual(Object.keys(tf ?? {}), ['class', 'code', 'correlationId'], `${what}: ${JSON.stringify(tf)}`);
  assert.equal(tf.class, 'governance', what);
  assert.equal(tf.code, code, what);
  assert.equal(tf.correlationId, env.authorizationContextId, `${what}: one handle for both`);
  if (remediation !== 'available') assert.equal('remediationHints' in env, false, `${what}: no hints when ${remediation}`);
  return r;
}

describe('denials in the drafts\' shapes (SEP-2643, SEP-3313) on every transport and both upstream eras', () => {
  for (const kind of KINDS) {
    for (const upstream of UPSTREAMS) {
      test(`${kind} → ${upstream}: a deny is "unavailable", a hidden or denied-outright tool "undisclosed", an approval "available" with a url hint`, async () => {
        await withClient(kind, upstream, TOKENS[kind], async (c) => {
          const what = `${kind} ${upstream}`;
          const deny = draftDenial(await c.call('echo', { text: 'forbidden' }), { remediation: 'unavailable', code: 'policy_blocked', kind, what: `${what} deny` });
          assert.equal(deny.content[0].text, 'echo will not say that');
          assert.deepEqual(deny._meta['tollgate/refusal'], { tool: 'echo', rule: 'no-forbidden', reason: 'echo will not say that' });

          const hidden = draftDenial(await c.call('secret', {}), { remediation: 'undisclosed', code: 'permission_denied', kind, what: `${what} hidden` });
          const outright = draftDenial(await c.call('drop_table', {}), { remediation: 'undisclosed', code: 'permission_denied', kind, what: `${what} denied outright` });
          assert.equal(hidden.content[0].text, 'Tool "secret" is not available');
          // Nothing tells a hidden name from a denied one but the name and the fresh handle.
          const same = (r, name) => JSON.stringify(r).replaceAll(name, 'NAME').replace(/[0-9a-f]{32}/g, 'ID');
          assert.equal(same(hidden, 'secret'), same(outright, 'drop_table'), `${what}: ${JSON.stringify(hidden)} vs ${JSON.stringify(outright)}`);
          for (const r of [hidden, outright]) {
            assert.deepEqual(Object.keys(r._meta), [AUTHZ, FAILURE], `${what}: nothing of tollgate's own: ${JSON.stringify(r._meta)}`);
            assert.doesNotMatch(JSON.stringify(r), /hidden|tables stay|\(default deny\)|rule/, what);
          }
          assert.notEqual(hidden._meta[AUTHZ].authorizationContextId, outright._meta[AUTHZ].authorizationContextId, 'a fresh handle per denial');

          const pending = draftDenial(await c.call('execute_code', { language: 'python', code: `print("${kind}")` }),
            { remediation: 'available', code: 'user_action_required', kind, what: `${what} approval` });
          const hints = pending._meta[AUTHZ].remediationHints;
          assert.equal(hints?.length, 1, JSON.stringify(hints));
          assert.equal(hints[0].type, 'url');
          assert.match(hints[0].url, /\/admin\/ui\/$/);
          assert.equal(pending._meta['tollgate/refusal'].status, 'pending');
          assert.match(pending._meta['tollgate/refusal'].approval_id, HANDLE);
        });
      });
    }
  }

  test('an upstream with signals = "tollgate" keeps its JSON-RPC errors, none of the drafts\' members', async () => {
    for (const kind of KINDS) {
      await withClient(kind, 'plain', TOKENS.plain, async (c) => {
        const deny = await c.call('echo', { text: 'forbidden' });
        assert.deepEqual(deny.error, { code: -32001, message: 'echo will not say that', data: { tool: 'echo', rule: 'no-forbidden', reason: 'echo will not say that' } }, `${kind}: ${JSON.stringify(deny)}`);
        const hidden = await c.call('secret', {});
        assert.deepEqual(hidden.error, { code: -32001, message: 'Tool "secret" is hidden by policy', data: { tool: 'secret', rule: '(hidden)', reason: 'Tool "secret" is hidden by policy' } }, `${kind}: ${JSON.stringify(hidden)}`);
        const pending = await c.call('execute_code', { language: 'python', code: `print("plain ${kind}")` });
        assert.equal(pending.error?.code, -32003, JSON.stringify(pending));
        assert.equal(pending.error.data.status, 'pending');
        for (const a of [deny, hidden, pending]) assert.doesNotMatch(JSON.stringify(a), /io\.modelcontextprotocol|authorizationContextId|correlationId/);
      });
    }
    // deny, hidden and the parked call, on each of the four: none has a correlation_id
    const lines = await H.waitUntil(() => { const l = auditLines().filter((x) => x.upstream === 'plain'); return l.length >= 12 ? l : undefined; },
      { what: 'the default upstream\'s audit lines' });
    assert.ok(lines.every((l) => !('correlation_id' in l)), `no correlation_id by default: ${JSON.stringify(lines)}`);
  });
});

describe('the retry echo (SEP-2643 "Retry Echo via _meta")', () => {
  for (const upstream of UPSTREAMS) {
    test(`${upstream}: an echoed handle is accepted and logged, and never lets a denied call through`, async () => {
      await withClient('streamable', upstream, TOKENS.echo, async (c) => {
        const first = draftDenial(await c.call('echo', { text: 'forbidden' }), { remediation: 'unavailable', code: 'policy_blocked', what: 'first' });
        const id = first._meta[AUTHZ].authorizationContextId;
        const again = await c.request('tools/call', { name: 'echo', arguments: { text: 'forbidden' }, _meta: { [ECHO_KEY]: id } });
        const second = draftDenial(again, { remediation: 'unavailable', code: 'policy_blocked', what: 'retry with the handle' });
        assert.notEqual(second._meta[AUTHZ].authorizationContextId, id, 'the retry is a new denial with its own handle');
        // The handle is the refusal's audit line's correlation_id (SEP-3313: the operator's key).
        for (const [h, what] of [[id, 'first'], [second._meta[AUTHZ].authorizationContextId, 'retry']]) {
          const line = await H.waitUntil(() => auditLines().find((l) => l.correlation_id === h), { what: `the ${what} denial's audit line` });
          assert.equal(line.decision, 'deny', JSON.stringify(line));
          assert.equal(line.tool, 'echo');
          assert.equal(line.upstream, upstream);
        }
        await gw.waitForLog(new RegExp(`msg="call echoes an authorization context" grant=echo upstream=${upstream} tool="echo" authorization_context_id="${id}"`),
          { what: 'the echo in the log' });
        // Nor does a hidden tool's: the echo of any handle is no key.
        const h = draftDenial(await c.call('secret', {}), { remediation: 'undisclosed', code: 'permission_denied', what: 'hidden' });
        const h2 = await c.request('tools/call', { name: 'secret', arguments: {}, _meta: { [ECHO_KEY]: h._meta[AUTHZ].authorizationContextId } });
        draftDenial(h2, { remediation: 'undisclosed', code: 'permission_denied', what: 'hidden, echoed' });
        // An allowed call with an echo (even one that resolves to nothing) runs as any other.
        const ok = await c.request('tools/call', { name: 'echo', arguments: { text: 'hello', message: 'hello' }, _meta: { [ECHO_KEY]: 'not-one-of-ours' } });
        assert.equal(ok.result?.isError ?? false, false, JSON.stringify(ok));
      });
    });
  }
});

describe('a task-mode approval: the envelope with a "task" hint while a human decides', () => {
  test('2026-07-28 with the tasks extension: CreateTaskResult and tasks/get carry it, the same handle', async () => {
    const EXT = 'io.modelcontextprotocol/tasks';
    const meta = { 'io.modelcontextprotocol/protocolVersion': C.MODERN, 'io.modelcontextprotocol/clientCapabilities': { extensions: { [EXT]: {} } } };
    const base = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${TOKENS.task}`, 'mcp-protocol-version': C.MODERN };
    const rpc = async (id, method, params, name) => {
      const r = await C.request(agent, port, 'POST', '/cowork/mcp', { ...base, 'mcp-method': method, 'mcp-name': name },
        JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: meta } }));
      return C.messagesOf(r).find((m) => m.id === id);
    };
    const created = (await rpc(1, 'tools/call', { name: 'write_file', arguments: { path: 'x.md', content: 'x' } }, 'write_file'))?.result;
    assert.equal(created?.resultType, 'task', JSON.stringify(created));
    const env = created._meta?.[AUTHZ];
    assert.deepEqual({ ...env, authorizationContextId: 'ID' }, { reason: 'insufficient_authorization', remediation: 'available', authorizationContextId: 'ID', remediationHints: [{ type: 'task' }] }, JSON.stringify(created));
    assert.match(env.authorizationContextId, HANDLE);
    assert.equal(created._meta[FAILURE]?.code, 'user_action_required');
    const got = (await rpc(2, 'tasks/get', { taskId: created.taskId }, created.taskId))?.result;
    assert.equal(got?.status, 'working', JSON.stringify(got));
    assert.deepEqual(got._meta?.[AUTHZ], env, `tasks/get repeats the envelope while the task waits: ${JSON.stringify(got)}`);
  });
});

describe('the official SDK client and a denial with the envelope', () => {
  test('Client.callTool resolves (no throw) with isError true and the _meta members', async () => {
    const c = await H.connectClient(`http://127.0.0.1:${port}/cowork/mcp`, { headers: { Authorization: `Bearer ${TOKENS.sdk}` }, cleanup });
    const r = await c.client.callTool({ name: 'echo', arguments: { text: 'forbidden' } });
    process.stderr.write(`SDK callTool on a drafts denial: ${JSON.stringify(r)}\n`);
    assert.equal(r.isError, true, JSON.stringify(r));
    assert.equal(r._meta?.[AUTHZ]?.remediation, 'unavailable', JSON.stringify(r));
    assert.equal(r._meta?.[FAILURE]?.class, 'governance', JSON.stringify(r));
    const h = await c.client.callTool({ name: 'secret', arguments: {} });
    assert.equal(h._meta?.[AUTHZ]?.remediation, 'undisclosed', JSON.stringify(h));
    await c.close();
  });

  for (const mode of ['pin', 'legacy']) {
    test(`the SDK 2.x client (${mode === 'pin' ? '2026-07-28' : '2025'}): callTool resolves the same way`, async () => {
      const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
      const client = new Client({ name: `denials-${mode}`, version: '1.0.0' },
        { capabilities: {}, versionNegotiation: { mode: mode === 'pin' ? { pin: C.MODERN } : 'legacy' } });
      cleanup.add(() => client.close().catch(() => {}));
      await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/cowork/mcp`),
        { requestInit: { headers: { Authorization: `Bearer ${TOKENS.sdk}` } } }));
      const r = await client.callTool({ name: 'echo', arguments: { text: 'forbidden' } });
      process.stderr.write(`SDK 2.x (${mode}) callTool on a drafts denial: ${JSON.stringify(r)}\n`);
      assert.equal(r.isError, true, JSON.stringify(r));
      assert.equal(r._meta?.[AUTHZ]?.remediation, 'unavailable', JSON.stringify(r));
      assert.equal(r._meta?.[FAILURE]?.correlationId, r._meta[AUTHZ].authorizationContextId, JSON.stringify(r));
      await client.close();
    });
  }
});

describe('what a human decides, in the drafts\' shapes', () => {
  test('retry mode: refused → "unavailable"; approved → the call made again with the echoed handle runs', async () => {
    await withClient('streamable', 'cowork', TOKENS.decided, async (c) => {
      const args = (n) => ({ language: 'python', code: `print(${n})` });
      const p1 = draftDenial(await c.call('execute_code', args(1)), { remediation: 'available', code: 'user_action_required', what: 'pending 1' });
      const parkLine = await H.waitUntil(() => auditLines().find((l) => l.correlation_id === p1._meta[AUTHZ].authorizationContextId),
        { what: 'the parked call\'s audit line' });
      assert.equal(parkLine.decision, 'approve', JSON.stringify(parkLine));
      assert.equal(parkLine.approval_id, p1._meta['tollgate/refusal'].approval_id);
      const d = await admin('POST', `/admin/approvals/${p1._meta['tollgate/refusal'].approval_id}/deny`);
      assert.equal(d.status, 200, d.text);
      const refused = draftDenial(await c.call('execute_code', args(1)), { remediation: 'unavailable', code: 'permission_denied', what: 'refused' });
      assert.equal(refused._meta['tollgate/refusal'].status, 'denied', JSON.stringify(refused));

      const p2 = draftDenial(await c.call('execute_code', args(2)), { remediation: 'available', code: 'user_action_required', what: 'pending 2' });
      const item = await queued('decided', 'execute_code');
      const a = await admin('POST', `/admin/approvals/${item.id}/approve`, { digest: item.digest });
      assert.equal(a.status, 200, a.text);
      const ran = await c.request('tools/call', { name: 'execute_code', arguments: args(2), _meta: { [ECHO_KEY]: p2._meta[AUTHZ].authorizationContextId } });
      assert.equal(ran.error, undefined, JSON.stringify(ran));
      assert.equal(ran.result?.isError ?? false, false, `approved, it runs: ${JSON.stringify(ran)}`);
    });
  });

  test('hold mode: a call refused while it waited ends "unavailable"', async () => {
    await withClient('streamable', 'cowork', TOKENS.hold, async (c) => {
      const answer = c.request('tools/call', { name: 'write_file', arguments: { path: 'held.md', content: 'x' }, _meta: { progressToken: 'p-hold' } });
      const item = await queued('hold', 'write_file');
      assert.equal((await admin('POST', `/admin/approvals/${item.id}/deny`)).status, 200);
      draftDenial(await answer, { remediation: 'unavailable', code: 'permission_denied', what: 'hold refused' });
    });
  });

  test('task mode (2026-07-28): refused → the task completes with the refusal as its result, the same handle', async () => {
    const EXT = 'io.modelcontextprotocol/tasks';
    const meta = { 'io.modelcontextprotocol/protocolVersion': C.MODERN, 'io.modelcontextprotocol/clientCapabilities': { extensions: { [EXT]: {} } } };
    const base = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${TOKENS.taskdeny}`, 'mcp-protocol-version': C.MODERN };
    let id = 100;
    const rpc = async (method, params, name) => {
      const n = id++;
      const r = await C.request(agent, port, 'POST', '/cowork/mcp', { ...base, 'mcp-method': method, 'mcp-name': name },
        JSON.stringify({ jsonrpc: '2.0', id: n, method, params: { ...params, _meta: meta } }));
      return C.messagesOf(r).find((m) => m.id === n);
    };
    const created = (await rpc('tools/call', { name: 'write_file', arguments: { path: 'refused.md', content: 'x' } }, 'write_file'))?.result;
    assert.equal(created?.resultType, 'task', JSON.stringify(created));
    const handle = created._meta[AUTHZ].authorizationContextId;
    const item = await queued('taskdeny', 'write_file');
    assert.equal((await admin('POST', `/admin/approvals/${item.id}/deny`)).status, 200);
    const done = await H.waitUntil(async () => {
      const g = (await rpc('tasks/get', { taskId: created.taskId }, created.taskId))?.result;
      return g?.status !== 'working' ? g : undefined;
    }, { what: 'the refused task to finish' });
    assert.equal(done.status, 'completed', JSON.stringify(done));
    assert.equal(done._meta?.[AUTHZ], undefined, `no envelope on the finished task itself: ${JSON.stringify(done)}`);
    draftDenial({ result: done.result }, { remediation: 'unavailable', code: 'permission_denied', kind: 'stateless', what: 'the task\'s result' });
    assert.equal(done.result._meta[AUTHZ].authorizationContextId, handle, 'one handle from the parking to the refusal');
  });

  test('2025-11-25 task-augmented call: the envelope beside its task, and in tasks/get', async () => {
    const base = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${TOKENS.task25}` };
    const init = await C.request(agent, port, 'POST', '/cowork/mcp', base, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: { tasks: {} }, clientInfo: { name: 'denials', version: '1' } } }));
    assert.equal(init.status, 200, init.text);
    const h = { ...base, 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': init.headers['mcp-session-id'] };
    await C.request(agent, port, 'POST', '/cowork/mcp', h, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    const r = await C.request(agent, port, 'POST', '/cowork/mcp', h, JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call',
      params: { name: 'write_file', arguments: { path: 't25.md', content: 'x' }, task: { ttl: 60000 } } }));
    const res = C.messagesOf(r).find((m) => m.id === 2)?.result;
    assert.equal(res?.task?.status, 'working', r.text);
    assert.deepEqual(res._meta?.[AUTHZ]?.remediationHints, [{ type: 'task' }], r.text);
    const g = await C.request(agent, port, 'POST', '/cowork/mcp', h, JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tasks/get', params: { taskId: res.task.taskId } }));
    const got = C.messagesOf(g).find((m) => m.id === 3)?.result;
    assert.equal(got?.status, 'working', g.text);
    assert.deepEqual(got._meta?.[AUTHZ], res._meta[AUTHZ], g.text);
  });
});

describe('default: deny', () => {
  test('a name the policy does not name is "undisclosed", as a hidden one is', async () => {
    for (const kind of KINDS) {
      await withClient(kind, 'strict', TOKENS.strict, async (c) => {
        const r = draftDenial(await c.call('anything_else', {}), { remediation: 'undisclosed', code: 'permission_denied', kind, what: `${kind} unnamed` });
        assert.equal(r.content[0].text, 'Tool "anything_else" is not available');
        assert.deepEqual(Object.keys(r._meta), [AUTHZ, FAILURE]);
      });
    }
  });
});
