// Policy enforcement through the tollgate binary with real MCP peers: the seed scenario of
// issue 3 (the CoWork OS stand-in behind conf/policies/cowork-os.json, two grants, token
// buckets), approvals on the admin API, the audit log, hot reload (SIGHUP and
// POST /admin/reload), non-standard methods, deny_server_requests, per-grant policies and
// session caps, and resources/prompts rules. The stand-in's request log is the proof of
// what reached the upstream.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/policy.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as H from './lib/harness.mjs';

H.requireNodeModules(); // fails the file with 'npm ci --prefix test' when the packages are missing

const cleanup = new H.Cleanup();
let dir;
let fetchFn;
let sdk;
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken(); // CoWork's token, held by the gateway only
const upstreamHeaders = { Authorization: `Bearer ${UPSTREAM_TOKEN}` };
const ADMIN_TOKEN = 'admin-' + H.randomToken();
const SEED_POLICY = path.join(H.REPO_ROOT, 'conf', 'policies', 'cowork-os.json');

// Every gateway and stand-in started here, for the failure context.
const gws = {};
const standins = {};
const logs = () => {
  const o = {};
  for (const [k, g] of Object.entries(gws)) {
    o[`tollgate[${k}] process`] = g.status();
    o[`tollgate[${k}] stderr`] = g.stderr();
  }
  for (const [k, s] of Object.entries(standins)) {
    o[`stand-in[${k}] log`] = s.logFile && fs.existsSync(s.logFile) ? fs.readFileSync(s.logFile, 'utf8').slice(-4000) : undefined;
  }
  return o;
};
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

before(async () => {
  sdk = await H.loadSdk();
  dir = H.makeTempDir(cleanup, 'tollgate-policy-');
  fetchFn = H.makeFetch({ cleanup });
});
after(() => cleanup.run());

// ---------------------------------------------------------------------------
// helpers

async function standin(name) {
  const s = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, `standin-${name}.log`) });
  standins[name] = s;
  return s;
}

async function gateway(name, opts, startOpts = {}) {
  const sub = path.join(dir, name);
  fs.mkdirSync(sub, { recursive: true });
  const conf = H.writeConf(sub, opts);
  const gw = await H.startTollgate(conf, { cleanup, listeners: 1, ...startOpts });
  gw.conf = conf;
  gws[name] = gw;
  return gw;
}

function writePolicy(name, obj) {
  const f = path.join(dir, name);
  fs.writeFileSync(f, typeof obj === 'string' ? obj : JSON.stringify(obj) + '\n');
  return f;
}

const url = (gw, up) => `http://127.0.0.1:${gw.plainPort}/${up}/mcp`;
const bearer = (t) => ({ Authorization: `Bearer ${t}` });

function connect(gw, up, token, extra = {}) {
  return H.connectClient(url(gw, up), { fetch: fetchFn, headers: token ? bearer(token) : undefined, cleanup, ...extra });
}

/** Awaits p and returns the McpError it rejects with (fails if it resolves). */
async function rpcError(p, what) {
  let r;
  try {
    r = await p;
  } catch (e) {
    assert.ok(e instanceof sdk.types.McpError, `${what}: McpError expected, got ${e?.stack ?? e}`);
    return e;
  }
  assert.fail(`${what}: expected a JSON-RPC error, got the result ${JSON.stringify(r).slice(0, 400)}`);
}

/** The stand-in's tools/call records (requests that reached CoWork). */
const toolCalls = (s) => s.records().filter((r) => r.http && r.msg?.method === 'tools/call');

/** Admin API request; returns {status, json, text}. */
/** The body of an approve: the digest of the listed item the approver saw. */
const digestOf = (item) => JSON.stringify({ digest: item.digest });

async function admin(gw, method, p, { token = ADMIN_TOKEN, headers = {}, body } = {}) {
  const h = { ...headers };
  if (token) h.authorization = `Bearer ${token}`;
  if (body !== undefined) h['content-type'] = 'application/json';
  const res = await fetchFn(`http://127.0.0.1:${gw.adminPort}${p}`, { method, headers: h, body });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text };
}

function auditLines(file) {
  if (!fs.existsSync(file)) return [];
  return fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => {
    try { return JSON.parse(l); } catch { return { unparsable: l }; }
  });
}

/**
 * A logfmt line as {key: value}: `k=v`, `k="quoted value"` with tg_log_esc()'s escapes (\" \\ \xNN),
 * and a bare `k` as true. Whatever is not one of those becomes a key of its own, so a forged field shows.
 */
function logfmt(line) {
  const out = {};
  let i = 0;
  while (i < line.length) {
    while (line[i] === ' ') i++;
    if (i >= line.length) break;
    let k = '';
    while (i < line.length && line[i] !== '=' && line[i] !== ' ') k += line[i++];
    if (line[i] !== '=') { out[k] = true; continue; }
    i++;
    let v = '';
    if (line[i] === '"') {
      for (i++; i < line.length && line[i] !== '"'; i++) {
        if (line[i] === '\\' && line[i + 1] === 'x') { v += String.fromCharCode(parseInt(line.slice(i + 2, i + 4), 16)); i += 3; }
        else if (line[i] === '\\') v += line[++i];
        else v += line[i];
      }
      i++;
    } else {
      while (i < line.length && line[i] !== ' ') v += line[i++];
    }
    out[k] = v;
  }
  return out;
}

/** Resolves to 'pending' if p has not settled within ms (a negative check: it must not settle). */
async function stillPending(p, ms = 300) {
  return Promise.race([p.then(() => 'resolved', () => 'rejected'), H.quietFor(ms).then(() => 'pending')]);
}

const EC_ARGS = (i) => ({ language: 'python', code: `print(${i})` });

// ---------------------------------------------------------------------------
// 1. The seed scenario (issue 3, item 10)

describe('seed scenario: conf/policies/cowork-os.json, two grants, 10 execute_code calls each per minute', () => {
  let s;
  let gw;
  const TOKEN_A = 'grant-a-' + H.randomToken();
  const TOKEN_B = 'grant-b-' + H.randomToken();
  let a;
  let b;

  before(async () => {
    assert.deepEqual(JSON.parse(fs.readFileSync(SEED_POLICY, 'utf8')), {
      version: '1', default: 'deny',
      tools: { execute_code: { limits: [{ counter: 'execute_code_rate', window: 'minute', max: 10, scope: 'grant' }] } },
    }, 'conf/policies/cowork-os.json is the seed policy of issue 3');
    s = await standin('seed');
    gw = await gateway('seed', {
      grants: [
        { name: 'grant-a', token_sha256: H.sha256hex(TOKEN_A) },
        { name: 'grant-b', token_sha256: H.sha256hex(TOKEN_B) },
      ],
      upstreams: [{ name: 'cowork-os', url: s.url, default: true, headers: upstreamHeaders, initialize: 'local', policy: SEED_POLICY }],
    });
    a = await connect(gw, 'cowork-os', TOKEN_A);
    b = await connect(gw, 'cowork-os', TOKEN_B);
  });

  test('tools/list shows execute_code only (default deny hides every other tool)', async () => {
    for (const c of [a, b]) {
      const { tools } = await c.client.listTools();
      const names = tools.map((t) => t.name);
      assert.deepEqual(names, ['execute_code'], `tools/list for this grant: ${names.join(', ')}`);
      assert.deepEqual(tools[0].inputSchema.required, ['language', 'code'], 'the tool definition passes unchanged');
    }
    assert.ok(s.records().some((r) => r.msg?.method === 'tools/list'), 'the list came from the stand-in');
  });

  test('grant A: 10 execute_code calls succeed, the 11th is -32002 with a retry hint', async () => {
    for (let i = 1; i <= 10; i++) {
      const r = await a.client.callTool({ name: 'execute_code', arguments: EC_ARGS(i) });
      assert.ok(!r.isError, `call ${i}: ${JSON.stringify(r)}`);
      assert.match(H.resultText(r), /ran \d+ bytes of python/, `call ${i}`);
    }
    assert.equal(toolCalls(s).length, 10);
    const e = await rpcError(a.client.callTool({ name: 'execute_code', arguments: EC_ARGS(11) }), '11th call');
    assert.equal(e.code, -32002, e.message);
    assert.match(e.message, /execute_code/, e.message);
    assert.match(e.message, /retry in/, `the message tells the model when to retry: ${e.message}`);
    assert.match(e.message, /execute_code is limited to 10 calls per minute for this grant; retry in \d+ s/, e.message);
    assert.equal(e.data?.tool, 'execute_code', JSON.stringify(e.data));
    assert.equal(e.data?.counter, 'execute_code_rate', JSON.stringify(e.data));
    assert.ok(Number.isFinite(e.data?.retry_after_ms) && e.data.retry_after_ms > 0 && e.data.retry_after_ms <= 6000,
      `retry_after_ms in (0, 6000] for a bucket refilling 10/minute: ${JSON.stringify(e.data)}`);
    assert.equal(toolCalls(s).length, 10, 'the limited call never reached the stand-in');
  });

  test('grant B still gets its own 10 (and its 11th is limited too)', async () => {
    for (let i = 1; i <= 10; i++) {
      const r = await b.client.callTool({ name: 'execute_code', arguments: EC_ARGS(100 + i) });
      assert.ok(!r.isError, `grant B call ${i}: ${JSON.stringify(r)}`);
    }
    const e = await rpcError(b.client.callTool({ name: 'execute_code', arguments: EC_ARGS(111) }), 'grant B 11th call');
    assert.equal(e.code, -32002, e.message);
  });

  test('every other tool is refused with -32001 {tool, rule, reason}, for both grants', async () => {
    const others = [
      ['run_command', { command: 'id' }],
      ['write_file', { path: '/tmp/x', content: 'x' }],
      ['echo', { text: 'hi' }],
      ['discord.delete_channel', { channel_id: '1' }],
      ['delete_file', { path: '/tmp/x' }],
      ['http_request', { url: 'http://example.com' }],
      ['slow', { seconds: 1 }],
      ['no_such_tool', {}],
    ];
    for (const c of [a, b]) {
      for (const [name, args] of others) {
        const e = await rpcError(c.client.callTool({ name, arguments: args }), name);
        assert.equal(e.code, -32001, `${name}: ${e.code} ${e.message}`);
        assert.equal(e.data?.tool, name, `${name}: data ${JSON.stringify(e.data)}`);
        assert.ok('rule' in (e.data ?? {}), `${name}: data.rule present: ${JSON.stringify(e.data)}`);
        assert.ok(typeof e.data?.reason === 'string' && e.data.reason.length > 0, `${name}: data.reason: ${JSON.stringify(e.data)}`);
      }
    }
  });

  test("the stand-in's log shows exactly 20 execute_code calls and no other tool", async () => {
    const calls = toolCalls(s);
    const names = calls.map((r) => r.msg.params?.name);
    assert.equal(names.filter((n) => n === 'execute_code').length, 20, names.join(', '));
    assert.deepEqual([...new Set(names)], ['execute_code'], `tools that reached CoWork: ${names.join(', ')}`);
    // every one of them was one of the calls the grants made, each exactly once
    const codes = calls.map((r) => r.msg.params.arguments.code).sort();
    const want = [...Array.from({ length: 10 }, (_, i) => `print(${i + 1})`), ...Array.from({ length: 10 }, (_, i) => `print(${101 + i})`)].sort();
    assert.deepEqual(codes, want);
  });
});

// ---------------------------------------------------------------------------
// 2. Approvals

describe('approvals: "action":"approve" parks the call for the admin API', () => {
  let s;
  let gw;
  let c;
  let auditFile;
  let policyFile;
  const TOKEN = 'appr-' + H.randomToken();

  before(async () => {
    s = await standin('approvals');
    auditFile = path.join(dir, 'audit-approvals.log');
    const policy = writePolicy('approvals.json', {
      version: '1', default: 'deny',
      tools: { write_file: { action: 'approve', approval_mode: 'hold', approval_timeout: 3 }, echo: { action: 'allow' } },
    });
    policyFile = policy;
    gw = await gateway('approvals', {
      admin: { token_sha256: H.sha256hex(ADMIN_TOKEN) },
      audit: { file: auditFile, args: 'values' },
      limits: { approvals_max: 2, approvals_per_grant: 2 }, // one grant may take the whole (small) queue here
      grants: [{ name: 'alice', token_sha256: H.sha256hex(TOKEN) }],
      upstreams: [{ name: 'cowork-os', url: s.url, headers: upstreamHeaders, initialize: 'local', policy }],
    }, { admin: true });
    c = await connect(gw, 'cowork-os', TOKEN);
  });

  const writes = (p) => toolCalls(s).filter((r) => r.msg.params?.name === 'write_file' && r.msg.params.arguments?.path === p);

  async function parked(tool) {
    const l = await H.waitFor(async () => {
      const r = await admin(gw, 'GET', '/admin/approvals');
      assert.equal(r.status, 200, r.text);
      return r.json.approvals.find((x) => x.tool === tool) ? r.json.approvals : null;
    }, { timeout: 3000 });
    assert.ok(l, `the parked ${tool} call appears in GET /admin/approvals`);
    return l.find((x) => x.tool === tool);
  }

  test('the admin API needs the admin token: none or a wrong one is 401', async () => {
    // Wrong tokens fill the admin throttle (5 per address): 4 here, so the right one still works.
    const all = [['GET', '/admin/approvals'], ['POST', '/admin/approvals/x/approve'], ['POST', '/admin/reload']];
    for (const [token, what, paths] of [[null, 'no token', all], ['wrong-' + H.randomToken(), 'wrong token', all], [TOKEN, "a client grant's token", all.slice(0, 1)]]) {
      for (const [m, p] of paths) {
        const r = await admin(gw, m, p, { token });
        assert.equal(r.status, 401, `${what}: ${m} ${p}: HTTP ${r.status} ${r.text}`);
      }
    }
    const ok = await admin(gw, 'GET', '/admin/approvals');
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(ok.json, { approvals: [], decided: [] });
  });

  test('approve: the call waits, is listed, and completes once approved; the stand-in gets it once', async () => {
    const args = { path: '/tmp/approved.txt', content: 'approved content' };
    const call = c.client.callTool({ name: 'write_file', arguments: args });
    const item = await parked('write_file');
    assert.equal(item.grant, 'alice');
    assert.equal(item.upstream, 'cowork-os');
    assert.equal(item.session, c.transport.sessionId, 'the client session is named');
    assert.equal(item.args_sha256, H.sha256hex(JSON.stringify(args)));
    assert.ok(typeof item.id === 'string' && item.id.length > 0, JSON.stringify(item));
    assert.ok(item.expires_in_ms > 0 && item.expires_in_ms <= 3000, JSON.stringify(item));
    assert.ok(Math.abs(item.parked_at_ms - Date.now()) < 10000, `parked_at_ms is wall-clock ms: ${item.parked_at_ms}`);
    // the same fields as with a cluster (cluster.test.mjs); no member holds it here
    assert.deepEqual(H.approvalFields(item), H.APPROVAL_FIELDS, JSON.stringify(item));
    assert.equal(item.instance, null);
    assert.ok(item.waited_ms >= 0 && item.waited_ms < 10000, JSON.stringify(item));
    assert.deepEqual(item.args, args, 'audit.args = "values": the arguments are listed');
    assert.equal(item.args_text, JSON.stringify(args), 'and their text as sent');
    assert.equal(item.subject, 'alice', 'a static token: the grant is the subject');
    assert.match(item.digest, /^[0-9a-f]{64}$/, JSON.stringify(item));
    assert.equal(typeof item.policy, 'number', JSON.stringify(item));
    assert.equal(await stillPending(call), 'pending', "the client's request stays pending while parked");
    assert.equal(writes(args.path).length, 0, 'nothing reached the stand-in before the approval');
    // nothing else waits while a call is parked
    const e = await c.client.callTool({ name: 'echo', arguments: { text: 'meanwhile' } });
    assert.equal(H.resultText(e), 'meanwhile');
    const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { headers: { 'X-Tollgate-Approver': 'carol' }, body: digestOf(item) });
    assert.equal(r.status, 200, r.text);
    const res = await call;
    assert.ok(!res.isError, JSON.stringify(res));
    assert.equal(writes(args.path).length, 1, 'the approved call reached the stand-in exactly once');
    assert.deepEqual(writes(args.path)[0].msg.params.arguments, args);
    const again = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: digestOf(item) });
    assert.equal(again.status, 404, `deciding twice: ${again.status} ${again.text}`);
    assert.deepEqual((await admin(gw, 'GET', '/admin/approvals')).json.approvals, []);
  });

  test('deny: -32003 {tool, approval_id}; the stand-in never gets it', async () => {
    const args = { path: '/tmp/denied.txt', content: 'nope' };
    const call = rpcError(c.client.callTool({ name: 'write_file', arguments: args }), 'denied approval');
    const item = await parked('write_file');
    const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/deny`, { headers: { 'X-Tollgate-Approver': 'dave' } });
    assert.equal(r.status, 200, r.text);
    const e = await call;
    assert.equal(e.code, -32003, e.message);
    assert.equal(e.data?.tool, 'write_file', JSON.stringify(e.data));
    assert.equal(e.data?.approval_id, item.id, JSON.stringify(e.data));
    await H.quietFor(200); // negative check: nothing reaches the stand-in late
    assert.equal(writes(args.path).length, 0, 'a denied call never reaches the stand-in');
  });

  test('deny with a JSON body {"reason"}: the client gets -32003 with it in error.data.reason (as from the page)', async () => {
    const reason = 'not on a Friday é\u0001 ok';
    const call = rpcError(c.client.callTool({ name: 'write_file', arguments: { path: '/tmp/reason.txt', content: 'x' } }), 'denied with a reason');
    const item = await parked('write_file');
    const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/deny`, { body: JSON.stringify({ reason }) });
    assert.equal(r.status, 200, r.text);
    const e = await call;
    assert.equal(e.code, -32003, e.message);
    assert.equal(e.data?.approval_id, item.id, JSON.stringify(e.data));
    // control characters become spaces, as the page does with its form field
    assert.equal(e.data?.reason, 'not on a Friday é  ok', JSON.stringify(e.data));
    // a body that is not a JSON object with a string reason is refused, and the call stays parked
    const call2 = rpcError(c.client.callTool({ name: 'write_file', arguments: { path: '/tmp/reason2.txt', content: 'x' } }), 'denied 2');
    const item2 = await parked('write_file');
    for (const bad of ['{"reason":', '{"reason":5}', '[1]', JSON.stringify({ reason: 'r'.repeat(601) })]) {
      const b = await admin(gw, 'POST', `/admin/approvals/${item2.id}/deny`, { body: bad });
      assert.equal(b.status, 400, `${bad.slice(0, 20)}: ${b.status} ${b.text}`);
    }
    const ok = await admin(gw, 'POST', `/admin/approvals/${item2.id}/deny`, { body: '{}' });
    assert.equal(ok.status, 200, ok.text);
    const e2 = await call2;
    assert.equal(e2.code, -32003, e2.message);
    assert.equal(e2.data?.approval_id, item2.id, JSON.stringify(e2.data));
  });

  test('approve names the digest it saw: none, a stale or a foreign one is 409 and nothing runs; the right one runs it', async () => {
    const a = { path: '/tmp/digest-a', content: 'a' };
    const b = { path: '/tmp/digest-b', content: 'b' };
    const callA = c.client.callTool({ name: 'write_file', arguments: a });
    const itemA = await parked('write_file');
    const callB = rpcError(c.client.callTool({ name: 'write_file', arguments: b }), 'b');
    const itemB = await H.waitFor(async () => (await admin(gw, 'GET', '/admin/approvals')).json.approvals
      .find((x) => x.id !== itemA.id), { timeout: 3000 });
    assert.ok(itemB, 'b parked');
    assert.notEqual(itemA.digest, itemB.digest, 'two calls with other arguments have other digests');
    const tries = {
      none: await admin(gw, 'POST', `/admin/approvals/${itemA.id}/approve`),
      empty: await admin(gw, 'POST', `/admin/approvals/${itemA.id}/approve`, { body: '{}' }),
      foreign: await admin(gw, 'POST', `/admin/approvals/${itemA.id}/approve`, { body: digestOf(itemB) }),
      stale: await admin(gw, 'POST', `/admin/approvals/${itemA.id}/approve`, { body: JSON.stringify({ digest: itemA.digest.replace(/^./, (ch) => (ch === '0' ? '1' : '0')) }) }),
    };
    for (const [what, r] of Object.entries(tries)) assert.equal(r.status, 409, `${what}: ${r.status} ${r.text}`);
    await H.quietFor(200); // negative check: a refused approve must not make it run, even a little later
    assert.equal(writes(a.path).length, 0, 'a 409 ran nothing');
    assert.equal(await stillPending(callA), 'pending', 'still parked after the refused approves');
    assert.deepEqual((await admin(gw, 'GET', '/admin/approvals')).json.approvals.map((x) => x.id).sort(), [itemA.id, itemB.id].sort());
    // no X-Tollgate-Approver: the decision is the API's
    const r = await admin(gw, 'POST', `/admin/approvals/${itemA.id}/approve`, { body: digestOf(itemA) });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.by, 'api', r.text);
    assert.ok(!(await callA).isError);
    assert.equal(writes(a.path).length, 1);
    const l = await H.waitUntil(() => auditLines(auditFile).find((x) => x.approval_id === itemA.id && x.decision === 'approved'),
      { what: `the audit record of approval ${itemA.id}` });
    assert.equal(l.decided_by, 'api', JSON.stringify(l));
    // decided calls are listed apart, with who decided
    const d = (await admin(gw, 'GET', '/admin/approvals')).json.decided.find((x) => x.id === itemA.id);
    assert.equal(d?.decision, 'approved', JSON.stringify(d));
    assert.equal(d?.by, 'api', JSON.stringify(d));
    assert.equal(d?.digest, itemA.digest, JSON.stringify(d));
    assert.equal((await admin(gw, 'POST', `/admin/approvals/${itemB.id}/deny`)).status, 200);
    assert.equal((await callB).code, -32003);
    assert.equal(writes(b.path).length, 0);
  });

  test('the listing shows the arguments\' text as sent: 1e400, a 30-digit integer and 2^53+1 are not re-parsed', async () => {
    const h = {
      ...H.MCP_HEADERS, ...bearer(TOKEN),
      'mcp-session-id': c.transport.sessionId, 'mcp-protocol-version': c.transport.protocolVersion,
    };
    const args = '{"path":"/tmp/numbers","content":"x","huge":1e400,"long":123456789012345678901234567890,"odd":9007199254740993,"neg":-0.0e-7}';
    const body = `{"jsonrpc":"2.0","id":"numbers-1","method":"tools/call","params":{"name":"write_file","arguments":${args}}}`;
    const p = fetchFn(url(gw, 'cowork-os'), { method: 'POST', headers: h, body });
    p.catch(() => {});
    const item = await parked('write_file');
    assert.equal(item.args_text, args, 'the exact text, as a JSON string');
    const raw = (await admin(gw, 'GET', '/admin/approvals')).text;
    for (const t of ['"huge":1e400', '"long":123456789012345678901234567890', '"odd":9007199254740993', '"neg":-0.0e-7'])
      assert.ok(raw.includes(t), `${t} in the answer's args value as written: ${raw}`);
    assert.equal((await admin(gw, 'POST', `/admin/approvals/${item.id}/deny`)).status, 200);
    await p;
    assert.equal(writes('/tmp/numbers').length, 0);
  });

  test('timeout: -32003 after approval_timeout (3 s), never forwarded', async () => {
    const args = { path: '/tmp/expired.txt', content: 'late' };
    const t0 = Date.now();
    const call = rpcError(c.client.callTool({ name: 'write_file', arguments: args }), 'expired approval');
    const item = await parked('write_file');
    const e = await call;
    const took = Date.now() - t0;
    assert.equal(e.code, -32003, e.message);
    assert.equal(e.data?.approval_id, item.id, JSON.stringify(e.data));
    assert.ok(took >= 2500 && took <= 5500, `expired after ${took} ms (approval_timeout 3 s, checked once a second)`);
    assert.equal(writes(args.path).length, 0);
    assert.deepEqual((await admin(gw, 'GET', '/admin/approvals')).json.approvals, []);
    const late = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: digestOf(item) });
    assert.equal(late.status, 404, `approving an expired call: ${late.status} ${late.text}`);
  });

  test('limits.approvals_max = 2: a third parked call is refused at once with -32003, never forwarded', async () => {
    const p1 = rpcError(c.client.callTool({ name: 'write_file', arguments: { path: '/tmp/q1', content: '1' } }), 'q1');
    const p2 = rpcError(c.client.callTool({ name: 'write_file', arguments: { path: '/tmp/q2', content: '2' } }), 'q2');
    const both = await H.waitFor(async () => {
      const r = await admin(gw, 'GET', '/admin/approvals');
      return r.json.approvals.length === 2 ? r.json.approvals : null;
    }, { timeout: 3000 });
    assert.ok(both, 'two calls parked');
    const t0 = Date.now();
    const e = await rpcError(c.client.callTool({ name: 'write_file', arguments: { path: '/tmp/q3', content: '3' } }), 'q3');
    assert.ok(Date.now() - t0 < 1500, `refused at once (${Date.now() - t0} ms), not parked`);
    assert.equal(e.code, -32003, e.message);
    assert.match(e.message, /approval queue is full|approvals_max/, e.message);
    assert.equal((await admin(gw, 'GET', '/admin/approvals')).json.approvals.length, 2);
    for (const a of both) {
      const r = await admin(gw, 'POST', `/admin/approvals/${a.id}/deny`);
      assert.equal(r.status, 200, r.text);
    }
    for (const p of [p1, p2]) assert.equal((await p).code, -32003);
    await H.quietFor(100); // negative check: nothing reaches the stand-in late
    for (const q of ['/tmp/q1', '/tmp/q2', '/tmp/q3']) assert.equal(writes(q).length, 0, `${q} never reached the stand-in`);
  });

  test('a client that closes its request while the call is parked: the approval disappears, nothing is forwarded', async () => {
    const ac = new AbortController();
    const h = {
      ...H.MCP_HEADERS, ...bearer(TOKEN),
      'mcp-session-id': c.transport.sessionId, 'mcp-protocol-version': c.transport.protocolVersion,
    };
    const body = { jsonrpc: '2.0', id: 'closed-1', method: 'tools/call', params: { name: 'write_file', arguments: { path: '/tmp/closed', content: 'x' } } };
    const p = fetchFn(url(gw, 'cowork-os'), { method: 'POST', headers: h, body: JSON.stringify(body), signal: ac.signal });
    p.catch(() => {});
    const item = await parked('write_file');
    ac.abort();
    const gone = await H.waitFor(async () => (await admin(gw, 'GET', '/admin/approvals')).json.approvals.length === 0, { timeout: 3000 });
    assert.ok(gone, 'the abandoned call left the approval queue');
    const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: digestOf(item) });
    assert.equal(r.status, 404, `approving an abandoned call: ${r.status} ${r.text}`);
    await H.quietFor(100); // negative check: nothing reaches the stand-in late
    assert.equal(writes('/tmp/closed').length, 0, 'never forwarded');
    assert.equal(H.resultText(await c.client.callTool({ name: 'echo', arguments: { text: 'still here' } })), 'still here');
  });

  test('a client that cancels a parked call (notifications/cancelled): it is never forwarded, even if approved later', async () => {
    const ac = new AbortController();
    const call = c.client.callTool({ name: 'write_file', arguments: { path: '/tmp/cancelled', content: 'x' } }, undefined, { signal: ac.signal });
    call.catch(() => {});
    const item = await parked('write_file');
    ac.abort('the user changed their mind'); // the SDK sends notifications/cancelled {requestId}
    await H.waitFor(async () => (await admin(gw, 'GET', '/admin/approvals')).json.approvals.length === 0, { timeout: 1500 });
    // an admin who still sees it and approves must not make it run
    const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: digestOf(item) });
    await H.quietFor(300); // negative check: an approval must not make it run, even a little later
    assert.equal(writes('/tmp/cancelled').length, 0,
      `a call the client cancelled while parked reached the stand-in after approval (approve answered ${r.status} ${r.text})`);
    assert.equal(r.status, 404, `the cancelled call left the approval queue: approve answered ${r.status} ${r.text}`);
  });

  // A reload that no longer allows it (the tool denied, the grant or its token gone) refuses it
  // instead: test/interop/limits-approvals.test.mjs.
  test('a parked call survives a reload that still allows its tool, and runs once approved', async () => {
    const args = { path: '/tmp/across-reload', content: 'x' };
    const call = c.client.callTool({ name: 'write_file', arguments: args });
    const item = await parked('write_file');
    const policy = fs.readFileSync(policyFile, 'utf8');
    fs.writeFileSync(policyFile, JSON.stringify({ version: '1', default: 'deny', tools: { echo: { action: 'allow' }, write_file: { action: 'allow' } } }));
    try {
      const rl = await admin(gw, 'POST', '/admin/reload');
      assert.equal(rl.status, 200, rl.text);
      const still = (await admin(gw, 'GET', '/admin/approvals')).json.approvals.map((x) => x.id);
      assert.deepEqual(still, [item.id], 'still parked after the reload');
      const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { body: digestOf(item) });
      assert.equal(r.status, 200, r.text);
      assert.ok(!(await call).isError);
      assert.equal(writes(args.path).length, 1);
      // a new call is decided by the new policy: allowed outright, not parked
      const r2 = await c.client.callTool({ name: 'write_file', arguments: { path: '/tmp/after', content: 'x' } });
      assert.ok(!r2.isError, JSON.stringify(r2));
      assert.equal(writes('/tmp/after').length, 1);
    } finally {
      fs.writeFileSync(policyFile, policy);
      assert.equal((await admin(gw, 'POST', '/admin/reload')).status, 200);
    }
  });

  // The name is escaped once for each place it is written: JSON-escaped in the audit record and
  // the admin answer (never log-escaped first, which doubled every \ and "), and log-escaped in
  // tollgate's logfmt line (quoted, so that its spaces and quotes cannot forge fields).
  test('X-Tollgate-Approver is recorded as given: escaped once in the audit log, the answer and the process log', async () => {
    const name = 'Pat O\'Brien "ops" \\ on-call';
    const from = gw.stderr().length;
    const call = c.client.callTool({ name: 'write_file', arguments: { path: '/tmp/approver-name', content: 'x' } });
    const item = await parked('write_file');
    const r = await admin(gw, 'POST', `/admin/approvals/${item.id}/approve`, { headers: { 'X-Tollgate-Approver': name }, body: digestOf(item) });
    assert.equal(r.status, 200, r.text);
    await call;
    assert.equal(r.json.by, name, r.text);
    const l = await H.waitUntil(() => auditLines(auditFile).find((x) => x.approval_id === item.id && x.decision === 'approved'),
      { what: `the audit record of approval ${item.id}`, detail: () => fs.readFileSync(auditFile, 'utf8').slice(-2000) });
    assert.equal(l.decided_by, name, JSON.stringify(l));
    const [line] = await gw.waitForLog(new RegExp(`^.*msg="approval granted" approval_id=${item.id}\\b.*$`, 'm'), { from });
    const fields = logfmt(line);
    assert.equal(fields.by, name, `the process log line carries the name as one quoted value: ${line}`);
    assert.deepEqual(Object.keys(fields).sort(), ['approval_id', 'by', 'level', 'msg', 'time'],
      `no field forged by the name's spaces and quotes: ${line}`);
  });

  test('the audit log records approve, approved, rejected and expired, with who decided', async () => {
    const ok = await H.waitFor(() => {
      const d = auditLines(auditFile).map((l) => l.decision);
      return ['approve', 'approved', 'rejected', 'expired'].every((x) => d.includes(x));
    }, { timeout: 3000 });
    const lines = auditLines(auditFile).filter((l) => l.tool === 'write_file' && /approved|denied|expired/.test(l.args?.path ?? ''));
    assert.ok(ok, `decisions in the audit log: ${JSON.stringify(lines)}`);
    const byId = {};
    for (const l of lines) (byId[l.approval_id] ??= []).push(l);
    const ids = Object.keys(byId);
    assert.equal(ids.length, 3, `three approval ids: ${JSON.stringify(lines)}`);
    for (const id of ids) {
      const ds = byId[id].map((l) => l.decision);
      assert.equal(ds[0], 'approve', `${id}: first record is the parking: ${JSON.stringify(byId[id])}`);
    }
    const approved = lines.find((l) => l.decision === 'approved');
    assert.equal(approved.decided_by, 'carol', JSON.stringify(approved));
    const done = lines.find((l) => l.approval_id === approved.approval_id && l.outcome);
    assert.ok(done, `the approved call's completion is logged with its outcome: ${JSON.stringify(byId[approved.approval_id])}`);
    assert.equal(done.outcome, 'ok', JSON.stringify(done));
    assert.equal(typeof done.upstream_latency_ms, 'number', JSON.stringify(done));
    const rejected = lines.find((l) => l.decision === 'rejected');
    assert.equal(rejected.decided_by, 'dave', JSON.stringify(rejected));
    const expired = lines.find((l) => l.decision === 'expired');
    assert.ok(expired.approval_id, JSON.stringify(expired));
    assert.ok(!/^admin/.test(expired.decided_by ?? ''), `nobody decided the expired one: ${JSON.stringify(expired)}`);
    for (const l of lines) {
      assert.equal(l.grant, 'alice');
      assert.equal(l.upstream, 'cowork-os');
      assert.equal(l.method, 'tools/call');
    }
  });
});

// ---------------------------------------------------------------------------
// 3. Audit log

describe('audit log: one line per decision, hashes, redacted values, latency and outcome', () => {
  let s;
  let gw;
  let c;
  let auditFile;
  const TOKEN = 'audit-' + H.randomToken();

  before(async () => {
    s = await standin('audit');
    auditFile = path.join(dir, 'audit.log');
    const policy = writePolicy('audit.json', {
      version: '1', default: 'deny',
      tools: {
        echo: { action: 'allow' },
        execute_code: { limits: [{ counter: 'ec_audit', window: 'hour', max: 1, scope: 'grant' }] },
        run_command: { action: 'deny', reason: 'no shell for agents' },
      },
    });
    gw = await gateway('audit', {
      audit: { file: auditFile, args: 'values' },
      grants: [{ name: 'auditor', token_sha256: H.sha256hex(TOKEN) }],
      upstreams: [{ name: 'cowork-os', url: s.url, headers: upstreamHeaders, initialize: 'local', policy }],
    });
    c = await connect(gw, 'cowork-os', TOKEN);
  });

  test('allowed, denied and limited calls: fields, hashes, redaction', async () => {
    const echoArgs = {
      text: 'audit me', password: 'hunter2-' + H.randomToken(6), count: 3,
      nested: { token: 'tok-' + H.randomToken(6), keep: 'visible', list: [1, { password: 'deep-secret' }] },
    };
    const r = await c.client.callTool({ name: 'echo', arguments: echoArgs });
    assert.equal(H.resultText(r), 'audit me');
    const cmdArgs = { command: 'rm -rf /', token: 'cmd-token-' + H.randomToken(6) };
    const d = await rpcError(c.client.callTool({ name: 'run_command', arguments: cmdArgs }), 'run_command');
    assert.equal(d.code, -32001);
    assert.match(d.data?.reason ?? '', /no shell for agents/, JSON.stringify(d.data));
    await c.client.callTool({ name: 'execute_code', arguments: EC_ARGS(1) });
    const l = await rpcError(c.client.callTool({ name: 'execute_code', arguments: EC_ARGS(2) }), 'execute_code #2');
    assert.equal(l.code, -32002);

    const lines = await H.waitFor(() => {
      const a = auditLines(auditFile).filter((x) => x.method === 'tools/call');
      return a.length >= 4 ? a : null;
    }, { timeout: 3000 });
    assert.ok(lines, `four tools/call records: ${fs.existsSync(auditFile) ? fs.readFileSync(auditFile, 'utf8') : '(no audit file)'}`);
    await H.quietFor(200); // negative check: no fifth line turns up
    const all = auditLines(auditFile).filter((x) => x.method === 'tools/call');
    assert.equal(all.length, 4, `exactly one line per decision: ${JSON.stringify(all, null, 1)}`);
    for (const x of all) {
      assert.ok(!x.unparsable, `a JSON line: ${x.unparsable}`);
      assert.equal(x.grant, 'auditor');
      assert.equal(x.session, c.transport.sessionId);
      assert.equal(x.upstream, 'cowork-os');
      assert.ok(x.time, `time: ${JSON.stringify(x)}`);
      assert.ok(!Number.isNaN(Date.parse(x.time)) || Number.isFinite(x.time), `time parses: ${x.time}`);
    }
    const [echo, cmd, ec1, ec2] = all;
    // allowed: hash, redacted values, outcome and latency
    assert.equal(echo.tool, 'echo');
    assert.equal(echo.decision, 'allow');
    assert.equal(echo.args_sha256, H.sha256hex(JSON.stringify(echoArgs)), 'SHA-256 of the compact JSON of the arguments as sent');
    assert.deepEqual(echo.args, {
      text: 'audit me', password: '[redacted]', count: 3,
      nested: { token: '[redacted]', keep: 'visible', list: [1, { password: '[redacted]' }] },
    });
    assert.equal(echo.outcome, 'ok', JSON.stringify(echo));
    assert.ok(typeof echo.upstream_latency_ms === 'number' && echo.upstream_latency_ms >= 0, JSON.stringify(echo));
    // denied: rule, no latency, redacted too
    assert.equal(cmd.tool, 'run_command');
    assert.equal(cmd.decision, 'deny');
    assert.equal(cmd.args_sha256, H.sha256hex(JSON.stringify(cmdArgs)));
    assert.deepEqual(cmd.args, { command: 'rm -rf /', token: '[redacted]' });
    assert.equal(cmd.upstream_latency_ms, undefined, `no upstream latency for a denied call: ${JSON.stringify(cmd)}`);
    // allowed, then limited, with counters
    assert.equal(ec1.decision, 'allow');
    assert.equal(ec1.outcome, 'ok');
    assert.equal(ec1.args_sha256, H.sha256hex(JSON.stringify(EC_ARGS(1))));
    assert.equal(ec2.decision, 'limited', JSON.stringify(ec2));
    assert.equal(ec2.args_sha256, H.sha256hex(JSON.stringify(EC_ARGS(2))));
    assert.deepEqual(ec1.counters, { ec_audit: 0 }, `counter values after the allowed call: ${JSON.stringify(ec1)}`);
    assert.equal(ec2.rule, 'ec_audit', JSON.stringify(ec2));
    assert.equal(ec2.upstream_latency_ms, undefined, JSON.stringify(ec2));
    const raw = fs.readFileSync(auditFile, 'utf8');
    for (const secret of [echoArgs.password, echoArgs.nested.token, 'deep-secret', cmdArgs.token]) {
      assert.ok(!raw.includes(secret), `secret ${secret} is not in the audit log`);
    }
  });

  // Exactly 0, not "about 0": the bucket (1 an hour) was emptied by the allowed call a few ms
  // earlier, and the tokens refilled since (ms x 1/3,600,000) are no usable call. A limited
  // decision reports what is left like an allowed one does (the allowed record above says 0).
  test('a limited record carries the counter values too: a just-exhausted bucket is 0', async () => {
    const l = auditLines(auditFile).find((x) => x.decision === 'limited');
    assert.ok(l, 'a limited record');
    assert.deepEqual(l.counters, { ec_audit: 0 }, `counters on a limited record: ${JSON.stringify(l)}`);
  });

  test('args_sha256 hashes the arguments as the client sent them (non-ASCII, key order, numbers)', async () => {
    const args = { z: 'last key first', text: 'grüße ✓ 日本', a: [1, 2.5, -3, true, null], e: {} };
    const r = await c.client.callTool({ name: 'echo', arguments: args });
    assert.ok(!r.isError, JSON.stringify(r));
    const line = await H.waitFor(() => auditLines(auditFile).find((x) => x.tool === 'echo' && x.args?.z === 'last key first'),
      { timeout: 3000 });
    assert.ok(line, 'audit line for the call');
    assert.deepEqual(line.args, args, 'values logged as sent (no redacted key here)');
    assert.equal(line.args_sha256, H.sha256hex(JSON.stringify(args)),
      `args_sha256 of ${JSON.stringify(args)} (compact JSON.stringify, UTF-8)`);
  });
});

// ---------------------------------------------------------------------------
// 3b. Limit scopes, windows in seconds, and refunds

describe('limits: session and global scopes, a window in seconds, refunds when the upstream fails', () => {
  let s;
  let gw;
  let auditFile;
  const T_X = 'x-' + H.randomToken();
  const T_Y = 'y-' + H.randomToken();

  before(async () => {
    s = await standin('scopes');
    auditFile = path.join(dir, 'audit-scopes.log');
    const policy = writePolicy('scopes.json', {
      version: '1', default: 'deny',
      tools: {
        execute_code: { limits: [{ counter: 'per_session', window: 3600, max: 2, scope: 'session' }] },
        echo: { limits: [{ counter: 'everyone', window: 'hour', max: 3, scope: 'global' }] },
      },
    });
    const dead = await H.freePort(); // nothing listens there
    gw = await gateway('scopes', {
      audit: { file: auditFile },
      grants: [{ name: 'x', token_sha256: H.sha256hex(T_X) }, { name: 'y', token_sha256: H.sha256hex(T_Y) }],
      upstreams: [
        { name: 'cowork-os', url: s.url, headers: upstreamHeaders, initialize: 'local', policy },
        { name: 'down', url: `http://127.0.0.1:${dead}/mcp`, initialize: 'local', connect_timeout_ms: 500, policy },
      ],
    });
  });

  test('scope "session": each session of a grant has its own bucket', async () => {
    const x1 = await connect(gw, 'cowork-os', T_X);
    const x2 = await connect(gw, 'cowork-os', T_X);
    for (const c of [x1, x2]) {
      for (let i = 0; i < 2; i++) assert.ok(!(await c.client.callTool({ name: 'execute_code', arguments: EC_ARGS(i) })).isError);
      const e = await rpcError(c.client.callTool({ name: 'execute_code', arguments: EC_ARGS(9) }), 'third call in a session');
      assert.equal(e.code, -32002, e.message);
      assert.equal(e.data?.counter, 'per_session');
      // a 3600 s window refilling 2 tokens: the next one comes in about 30 minutes
      assert.ok(e.data.retry_after_ms > 60000 && e.data.retry_after_ms <= 1800000, JSON.stringify(e.data));
    }
    const x3 = await connect(gw, 'cowork-os', T_X);
    assert.ok(!(await x3.client.callTool({ name: 'execute_code', arguments: EC_ARGS(3) })).isError, 'a new session starts full');
    await Promise.all([x1.close(), x2.close(), x3.close()]);
  });

  test('scope "global": every grant draws from one bucket', async () => {
    const x = await connect(gw, 'cowork-os', T_X);
    const y = await connect(gw, 'cowork-os', T_Y);
    for (const c of [x, y, x]) assert.equal(H.resultText(await c.client.callTool({ name: 'echo', arguments: { text: 'g' } })), 'g');
    for (const c of [y, x]) {
      const e = await rpcError(c.client.callTool({ name: 'echo', arguments: { text: 'g' } }), 'fourth echo');
      assert.equal(e.code, -32002, e.message);
      assert.equal(e.data?.counter, 'everyone');
    }
    assert.equal(toolCalls(s).filter((r) => r.msg.params.name === 'echo').length, 3);
    await Promise.all([x.close(), y.close()]);
  });

  test('a call the upstream never got is refunded: -32004 twice, never -32002', async () => {
    const c = await connect(gw, 'down', T_Y);
    for (let i = 0; i < 3; i++) {
      const e = await rpcError(c.client.callTool({ name: 'execute_code', arguments: EC_ARGS(i) }), `call ${i} to a dead upstream`);
      assert.equal(e.code, -32004, `call ${i}: ${e.code} ${e.message} (a limit of 2 must not be spent by failed calls)`);
      assert.equal(e.data?.upstream, 'down', JSON.stringify(e.data));
    }
    const lines = await H.waitFor(() => {
      const a = auditLines(auditFile).filter((l) => l.upstream === 'down' && l.tool === 'execute_code');
      return a.length >= 3 ? a : null;
    }, { timeout: 3000 });
    assert.ok(lines, 'audit lines for the failed calls');
    for (const l of lines) {
      assert.equal(l.decision, 'allow', JSON.stringify(l));
      assert.equal(l.outcome, 'unavailable', JSON.stringify(l));
    }
    await c.close();
  });
});

// ---------------------------------------------------------------------------
// 4. Hot reload

describe('hot reload: SIGHUP and POST /admin/reload swap policies, keep counters and sessions', () => {
  let s;
  let gw;
  let c;
  let policyFile;
  const TOKEN = 'reload-' + H.randomToken();
  const base = (extra = {}) => ({
    version: '1', default: 'deny',
    tools: {
      execute_code: { limits: [{ counter: 'ec_reload', window: 'minute', max: 3, scope: 'grant' }] },
      slow: { action: 'allow' },
      ...extra,
    },
  });
  const reloaded = () => (gw.stderr().match(/configuration reloaded/g) ?? []).length;

  before(async () => {
    s = await standin('reload');
    policyFile = writePolicy('reload.json', base());
    gw = await gateway('reload', {
      admin: { token_sha256: H.sha256hex(ADMIN_TOKEN) },
      grants: [{ name: 'reloader', token_sha256: H.sha256hex(TOKEN) }],
      upstreams: [{ name: 'cowork-os', url: s.url, headers: upstreamHeaders, initialize: 'local', policy: policyFile }],
    }, { admin: true });
    c = await connect(gw, 'cowork-os', TOKEN);
  });

  test('P1 -> SIGHUP -> P2: echo becomes allowed, execute_code keeps its counter (1 call left)', async () => {
    for (let i = 0; i < 2; i++) {
      const r = await c.client.callTool({ name: 'execute_code', arguments: EC_ARGS(i) });
      assert.ok(!r.isError, JSON.stringify(r));
    }
    const e0 = await rpcError(c.client.callTool({ name: 'echo', arguments: { text: 'x' } }), 'echo under P1');
    assert.equal(e0.code, -32001);
    const names0 = (await c.client.listTools()).tools.map((t) => t.name).sort();
    assert.deepEqual(names0, ['execute_code', 'slow']);

    const n = reloaded();
    fs.writeFileSync(policyFile, JSON.stringify(base({ echo: { action: 'allow' } })));
    process.kill(gw.proc.pid, 'SIGHUP');
    assert.ok(await H.waitFor(() => reloaded() > n, { timeout: 5000 }), 'tollgate logged "configuration reloaded"');

    const r = await c.client.callTool({ name: 'echo', arguments: { text: 'after reload' } });
    assert.equal(H.resultText(r), 'after reload', 'same session, new policy');
    const names1 = (await c.client.listTools()).tools.map((t) => t.name).sort();
    assert.deepEqual(names1, ['echo', 'execute_code', 'slow'], 'tools/list follows the new policy');
    const third = await c.client.callTool({ name: 'execute_code', arguments: EC_ARGS(3) });
    assert.ok(!third.isError, 'one call was left');
    const l = await rpcError(c.client.callTool({ name: 'execute_code', arguments: EC_ARGS(4) }), '4th execute_code');
    assert.equal(l.code, -32002, `counters survived the reload: ${l.message}`);
  });

  test('an invalid policy: POST /admin/reload is 400 naming the file and the path in it; the old policy stays', async () => {
    const good = fs.readFileSync(policyFile, 'utf8');
    fs.writeFileSync(policyFile, JSON.stringify({
      version: '1', default: 'deny',
      tools: { echo: { action: 'allow' }, execute_code: { limits: [{ counter: 'ec_reload', window: 'fortnight', max: 3 }] } },
    }));
    const r = await admin(gw, 'POST', '/admin/reload');
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json?.status, 'failed', r.text);
    assert.ok(r.json.errors.includes(policyFile), `the error names the file ${policyFile}: ${r.json.errors}`);
    assert.match(r.json.errors, /tools\.execute_code\.limits\[0\]\.window/, `the error names the path in it: ${r.json.errors}`);
    assert.ok(await H.waitFor(() => /reload failed/.test(gw.stderr()), { timeout: 2000 }), 'the failure is logged');
    // behaviour unchanged
    const e = await c.client.callTool({ name: 'echo', arguments: { text: 'still P2' } });
    assert.equal(H.resultText(e), 'still P2');
    const l = await rpcError(c.client.callTool({ name: 'execute_code', arguments: EC_ARGS(5) }), 'execute_code after a failed reload');
    assert.equal(l.code, -32002, 'the counter is still spent');
    const d = await rpcError(c.client.callTool({ name: 'run_command', arguments: { command: 'id' } }), 'run_command');
    assert.equal(d.code, -32001);
    fs.writeFileSync(policyFile, good);
  });

  test('a misspelt key (acton): SIGHUP fails naming the file, the path and the key it is close to; the old policy stays', async () => {
    const good = fs.readFileSync(policyFile, 'utf8');
    // The slip would turn echo off and run_command on if it were read; it must not be read at all.
    fs.writeFileSync(policyFile, JSON.stringify({
      version: '1', default: 'deny',
      tools: { echo: { acton: 'deny' }, run_command: { action: 'allow' }, execute_code: { limits: [{ counter: 'ec_reload', window: 'minute', max: 3, scope: 'grant' }] } },
    }));
    const failures = () => (gw.stderr().match(/reload failed/g) ?? []).length;
    const f = failures();
    const n = reloaded();
    const from = gw.stderr().length;
    try {
      process.kill(gw.proc.pid, 'SIGHUP');
      await H.waitUntil(() => failures() > f || reloaded() > n, { timeout: H.scaled(5000), what: 'the outcome of the SIGHUP' });
      const log = gw.stderr().slice(from);
      assert.equal(reloaded(), n, `a policy with an unknown key must not be loaded: ${log}`);
      assert.ok(log.includes(path.basename(policyFile)), `the reason names the file: ${log}`);
      assert.match(log, /tools\.echo\.acton: unknown field; did you mean `action`\?/, log);
      const e = await c.client.callTool({ name: 'echo', arguments: { text: 'still the old policy' } });
      assert.equal(H.resultText(e), 'still the old policy');
      const d = await rpcError(c.client.callTool({ name: 'run_command', arguments: { command: 'id' } }), 'run_command');
      assert.equal(d.code, -32001, 'the old policy still denies run_command');
    } finally { fs.writeFileSync(policyFile, good); }
  });

  test('a misspelt key: the gateway does not start, and says where', async () => {
    const sub = path.join(dir, 'typo-start');
    fs.mkdirSync(sub, { recursive: true });
    const typo = writePolicy('typo-start.json', { version: '1', defualt: 'allow', tools: { echo: { action: 'allow' } } });
    const conf = H.writeConf(sub, { grants: [{ name: 'g', token_sha256: H.sha256hex(TOKEN) }], upstreams: [{ name: 'u', url: s.url, policy: typo }] });
    const r = spawnSync(H.tollgateBin(), ['-c', conf], { encoding: 'utf8', timeout: H.scaled(20000), env: { ...process.env, ASAN_OPTIONS: 'detect_leaks=1:abort_on_error=0' } });
    const out = `${r.stdout}\n${r.stderr}`;
    assert.equal(r.signal, null, `tollgate did not exit by itself: ${out}`);
    assert.equal(r.status, 1, out);
    assert.ok(out.includes(`${typo}: defualt: unknown field; did you mean \`default\`?`), out);
    assert.doesNotMatch(out, /listening/, out);
  });

  test('a call in flight finishes under the policy it started with; the next one is denied', async () => {
    const before = toolCalls(s).filter((x) => x.msg.params?.name === 'slow').length;
    const t0 = Date.now();
    const sent = (await gw.metrics({ token: ADMIN_TOKEN }))['tollgate_upstream_calls_total'];
    const call = c.client.callTool({ name: 'slow', arguments: { seconds: 2 } }, undefined, { timeout: 15000 });
    // the reload comes once the slow call is on its way to the stand-in (decided under the old policy)
    await gw.waitForMetric('tollgate_upstream_calls_total', (v) => v > sent, { token: ADMIN_TOKEN, what: 'the slow call to be sent upstream' });
    fs.writeFileSync(policyFile, JSON.stringify(base({ echo: { action: 'allow' }, slow: { action: 'deny', reason: 'slow is off now' } })));
    const r = await admin(gw, 'POST', '/admin/reload');
    assert.equal(r.status, 200, r.text);
    assert.equal(await stillPending(call, 50), 'pending', 'the slow call is still running after the reload');
    const res = await call;
    assert.ok(!res.isError, `the in-flight call completed OK: ${JSON.stringify(res)}`);
    assert.ok(Date.now() - t0 >= 1900, 'it really was slow');
    assert.equal(toolCalls(s).filter((x) => x.msg.params?.name === 'slow').length, before + 1);
    const e = await rpcError(c.client.callTool({ name: 'slow', arguments: { seconds: 1 } }), 'slow after the reload');
    assert.equal(e.code, -32001);
    assert.match(e.data?.reason ?? '', /slow is off now/, JSON.stringify(e.data));
    assert.equal(toolCalls(s).filter((x) => x.msg.params?.name === 'slow').length, before + 1, 'the denied one never arrived');
  });
});

// ---------------------------------------------------------------------------
// 5. Non-standard methods

describe('non-standard methods: shutdown refused unless the policy names it', () => {
  let s1;
  let s2;
  let gw;
  const TOKEN = 'methods-' + H.randomToken();

  before(async () => {
    s1 = await standin('methods-default');
    s2 = await standin('methods-shutdown'); // it exits when it gets shutdown
    const allowShutdown = writePolicy('methods.json', { version: '1', default: 'allow', methods: ['shutdown'] });
    gw = await gateway('methods', {
      grants: [{ name: 'ops', token_sha256: H.sha256hex(TOKEN) }],
      upstreams: [
        { name: 'plain', url: s1.url, headers: upstreamHeaders, initialize: 'local' }, // allow-all policy, no methods
        { name: 'stoppable', url: s2.url, headers: upstreamHeaders, initialize: 'local', policy: allowShutdown },
      ],
    });
  });

  const shutdowns = (s) => s.records().filter((r) => r.msg?.method === 'shutdown');

  test('default (even under "default":"allow"): -32001, never forwarded', async () => {
    const c = await connect(gw, 'plain', TOKEN);
    const e = await rpcError(c.client.request({ method: 'shutdown', params: {} }, sdk.types.EmptyResultSchema), 'shutdown');
    assert.equal(e.code, -32001, e.message);
    await H.quietFor(200); // negative check: no shutdown reaches the stand-in late
    assert.equal(shutdowns(s1).length, 0);
    assert.equal(s1.proc.exitCode, null, 'stand-in still running');
    await c.close();
  });

  test('"methods":["shutdown"]: forwarded, the stand-in answers and exits', async () => {
    const c = await connect(gw, 'stoppable', TOKEN);
    const exited = new Promise((resolve) => {
      if (s2.proc.exitCode !== null) resolve(s2.proc.exitCode);
      s2.proc.once('exit', (code) => resolve(code));
    });
    const r = await c.client.request({ method: 'shutdown', params: {} }, sdk.types.EmptyResultSchema);
    assert.deepEqual(r, {});
    assert.equal(shutdowns(s2).length, 1, 'the stand-in got shutdown once');
    const code = await Promise.race([exited, H.sleep(3000).then(() => 'still running')]);
    assert.equal(code, 0, 'the stand-in exited after shutdown');
    await c.close();
  });
});

// ---------------------------------------------------------------------------
// 6. deny_server_requests

describe('deny_server_requests: sampling/createMessage never reaches the client', () => {
  let ev;
  let gw;
  const seen = [];
  const elicited = [];
  const handlers = () => [[sdk.types.CreateMessageRequestSchema, async (req) => {
    seen.push(req.params);
    return { model: 'interop-model', role: 'assistant', content: { type: 'text', text: 'sampled-answer-9c1d' } };
  }], [sdk.types.ElicitRequestSchema, async (req) => {
    elicited.push(req.params);
    return { action: 'accept', content: { name: 'Ada', check: true, integer: 7 } };
  }]];

  before(async () => {
    ev = await H.startEverything({ cleanup });
    gw = await gateway('serverreq', {
      upstreams: [
        { name: 'everything', url: ev.url },
        { name: 'nosampling', url: ev.url, deny_server_requests: ['sampling/createMessage'] },
      ],
    });
  });

  test('without the directive the sampling request is relayed (control)', async () => {
    const c = await connect(gw, 'everything', null, { capabilities: { sampling: {}, elicitation: {} }, handlers: handlers() });
    const n = seen.length;
    const r = await c.client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'say hi', maxTokens: 20 } },
      undefined, { timeout: 20000 });
    assert.equal(seen.length, n + 1, 'the client sampling handler ran once');
    assert.match(H.resultText(r), /sampled-answer-9c1d/);
    await c.close();
  });

  test('with it: the handler is never invoked and the tool call still completes', async () => {
    const c = await connect(gw, 'nosampling', null, { capabilities: { sampling: {}, elicitation: {} }, handlers: handlers() });
    const n = seen.length;
    const t0 = Date.now();
    let outcome;
    try {
      const r = await c.client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'say hi', maxTokens: 20 } },
        undefined, { timeout: 15000 });
      outcome = { result: r };
    } catch (e) {
      outcome = { error: e };
    }
    const took = Date.now() - t0;
    assert.ok(!(outcome.error instanceof sdk.types.McpError && outcome.error.code === sdk.types.ErrorCode.RequestTimeout),
      `the call must not hang: ${outcome.error}`);
    assert.ok(took < 10000, `completed in ${took} ms`);
    assert.equal(seen.length, n, 'the client sampling handler was never invoked');
    if (outcome.result) {
      assert.doesNotMatch(H.resultText(outcome.result), /sampled-answer-9c1d/, JSON.stringify(outcome.result));
    }
    // only sampling is refused: elicitation still reaches the client
    const el = await c.client.callTool({ name: 'trigger-elicitation-request', arguments: {} }, undefined, { timeout: 15000 });
    assert.equal(elicited.length, 1, 'the elicitation handler ran');
    assert.ok(!el.isError, JSON.stringify(el));
    // the session still works
    const e = await c.client.callTool({ name: 'echo', arguments: { message: 'after' } });
    assert.match(H.resultText(e), /after/);
    await c.close();
  });
});

// ---------------------------------------------------------------------------
// 7. Per-grant policy override and max_sessions

describe('grants: per-grant policy override and max_sessions', () => {
  let s;
  let gw;
  const T_ALICE = 'alice-' + H.randomToken();
  const T_BOB = 'bob-' + H.randomToken();
  const T_CAROL = 'carol-' + H.randomToken();

  before(async () => {
    s = await standin('grants');
    const bobPolicy = writePolicy('bob.json', { version: '1', default: 'deny', tools: { echo: { action: 'allow' } } });
    gw = await gateway('grants', {
      grants: [
        { name: 'alice', token_sha256: H.sha256hex(T_ALICE) },
        { name: 'bob', token_sha256: H.sha256hex(T_BOB), policies: [{ upstream: 'cowork-os', policy: bobPolicy }] },
        { name: 'carol', token_sha256: H.sha256hex(T_CAROL), max_sessions: 2 },
      ],
      upstreams: [{ name: 'cowork-os', url: s.url, headers: upstreamHeaders, initialize: 'local', policy: SEED_POLICY }],
    });
  });

  test("bob's own policy applies to bob only", async () => {
    const a = await connect(gw, 'cowork-os', T_ALICE);
    const b = await connect(gw, 'cowork-os', T_BOB);
    assert.deepEqual((await a.client.listTools()).tools.map((t) => t.name), ['execute_code']);
    assert.deepEqual((await b.client.listTools()).tools.map((t) => t.name), ['echo']);
    const ea = await rpcError(a.client.callTool({ name: 'echo', arguments: { text: 'a' } }), 'alice echo');
    assert.equal(ea.code, -32001);
    assert.equal(H.resultText(await b.client.callTool({ name: 'echo', arguments: { text: 'b' } })), 'b');
    const eb = await rpcError(b.client.callTool({ name: 'execute_code', arguments: EC_ARGS(1) }), 'bob execute_code');
    assert.equal(eb.code, -32001);
    assert.ok(!(await a.client.callTool({ name: 'execute_code', arguments: EC_ARGS(2) })).isError);
    const names = toolCalls(s).map((r) => r.msg.params.name);
    assert.deepEqual(names, ['echo', 'execute_code'], `what reached the stand-in: ${names}`);
    await a.close();
    await b.close();
  });

  test('max_sessions = 2: the third initialize is HTTP 429; a DELETE frees a slot', async () => {
    const u = url(gw, 'cowork-os');
    const h = bearer(T_CAROL);
    const s1 = await H.rawInitialize(fetchFn, u, h);
    const s2 = await H.rawInitialize(fetchFn, u, h);
    assert.ok(s1.sessionId && s2.sessionId && s1.sessionId !== s2.sessionId);
    const r3 = await H.postRaw(fetchFn, u, H.initializeBody(3), h);
    assert.equal(r3.status, 429, `third session: HTTP ${r3.status} ${r3.text}`);
    // other grants are not affected
    const other = await H.rawInitialize(fetchFn, u, bearer(T_ALICE));
    assert.ok(other.sessionId);
    // the existing sessions still work
    const list = await H.postRaw(fetchFn, u, { jsonrpc: '2.0', id: 2, method: 'tools/list' }, s1.headers);
    assert.equal(list.status, 200, list.text);
    const del = await fetchFn(u, { method: 'DELETE', headers: s1.headers });
    await del.text();
    assert.ok(del.status === 200 || del.status === 204, `DELETE: HTTP ${del.status}`);
    const s4 = await H.rawInitialize(fetchFn, u, h);
    assert.ok(s4.sessionId, 'a slot was freed by DELETE');
    const r5 = await H.postRaw(fetchFn, u, H.initializeBody(5), h);
    assert.equal(r5.status, 429, `capped again: HTTP ${r5.status} ${r5.text}`);
  });
});

// ---------------------------------------------------------------------------
// 8. resources and prompts rules

describe('resources/read and prompts/get rules', () => {
  let s;
  let ev;
  let gw;

  before(async () => {
    s = await standin('resources');
    ev = await H.startEverything({ cleanup });
    const resPolicy = writePolicy('resources.json', {
      version: '1', default: 'allow', resources: { default: 'deny', allow: ['cowork://workspaces*'] },
    });
    const promptPolicy = writePolicy('prompts.json', {
      version: '1', default: 'allow', prompts: { default: 'deny', allow: ['simple-prompt'] },
    });
    gw = await gateway('resources', {
      upstreams: [
        { name: 'cowork-os', url: s.url, headers: upstreamHeaders, initialize: 'local', policy: resPolicy },
        { name: 'everything', url: ev.url, policy: promptPolicy },
      ],
    });
  });

  test('cowork://workspaces* allowed, cowork://tasks/1 refused with -32001 before CoWork sees it', async () => {
    const c = await connect(gw, 'cowork-os', null);
    const r = await c.client.readResource({ uri: 'cowork://workspaces' });
    assert.equal(r.contents[0].uri, 'cowork://workspaces');
    const e = await rpcError(c.client.readResource({ uri: 'cowork://tasks/1' }), 'cowork://tasks/1');
    assert.equal(e.code, -32001, e.message);
    const e2 = await rpcError(c.client.readResource({ uri: 'cowork://artifacts/a001' }), 'cowork://artifacts');
    assert.equal(e2.code, -32001, e2.message);
    const reads = s.records().filter((x) => x.msg?.method === 'resources/read').map((x) => x.msg.params.uri);
    assert.deepEqual(reads, ['cowork://workspaces'], `resources/read that reached CoWork: ${reads}`);
    // tools are still allowed under this policy
    assert.equal(H.resultText(await c.client.callTool({ name: 'echo', arguments: { text: 'ok' } })), 'ok');
    await c.close();
  });

  test('prompts: simple-prompt allowed, args-prompt refused with -32001', async () => {
    const c = await connect(gw, 'everything', null);
    const p = await c.client.getPrompt({ name: 'simple-prompt' });
    assert.ok(p.messages?.length, JSON.stringify(p));
    const e = await rpcError(c.client.getPrompt({ name: 'args-prompt', arguments: { city: 'Bern' } }), 'args-prompt');
    assert.equal(e.code, -32001, e.message);
    await c.close();
  });
});
