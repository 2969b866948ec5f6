// Policies that judge a call by the calls before it: session-history rules (toxic flows) and
// runaway-loop brakes, end to end through the tollgate binary, on every client transport
// (Streamable HTTP 2025 session, 2026-07-28 stateless, legacy SSE, WebSocket) and both upstream
// eras: the CoWork OS stand-in (2025, `initialize = "local"`) and the era2026 fixture with
// `--legacy reject` (2026-07-28 only; 2025 clients are bridged to it).
//
//   1. toxic flow: a call of a tool tagged reads_secrets, then one tagged egress is refused
//      (-32001, the rule's name) with error.data.history naming the earlier call {tool, upstream,
//      at}; nothing reaches the upstream; an untagged tool still passes; an egress call before any
//      read passes. Per transport, on each upstream, and across the two (the read on one, the
//      egress on the other, both ways): history is the subject's, not an upstream's.
//   2. brakes: the same tool with the same canonical arguments more than N times in the window is
//      refused at the N+1th (-32002, rule "brake", retry_after_ms, the reason the model reads)
//      whatever the key order, number spelling and spacing; a varied workload of the same tool
//      passes; braked calls spend no rate limit (the tool's own limit still has exactly the
//      tokens the allowed calls left) and are not recorded (retry_after_ms does not grow); a
//      loop of two calls (brake.cycle) is braked as it starts its third round, the loop named.
//   3. a 2 s window: the braked call passes again once retry_after_ms has gone by (polled).
//   4. history survives a reload (SIGHUP, with the policy's message changed): the refusal after
//      it names the read made before it, and the loop stays braked.
//   5. the audit line (rule, history) and /metrics (tollgate_brakes_total{upstream,tool},
//      tollgate_history_refusals_total{upstream,rule}).
//   6. bad input: `tollgate -t` refuses pathological windows and malformed history conditions
//      and brakes, naming the file and the path; 1 MiB arguments braked by their canonical form;
//      error.data.history valid JSON for long and odd names; a flood of distinct calls from one subject and
//      from many keeps tollgate_history_memory_bytes under limits.history_bytes, a window longer
//      than the ring remembers fails closed (the message says to raise limits.history_calls),
//      and the gateway keeps serving.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/history.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import * as H from './lib/harness.mjs';
import { startEra2026 } from './lib/conformance2026.mjs';
import { openClient, KINDS, textOf } from './lib/clients.mjs';

H.requireNodeModules();

const STANDIN_TOKEN = 'cowork-' + H.randomToken();
const RULE = 'no-egress-after-secrets';
const DENY_MSG = 'egress is closed for 10 minutes after a read of secrets';
const DENY_MSG_RELOADED = 'egress stays closed after a read of secrets (reloaded policy)';
const ERA = { cw: '2025 upstream', e26: '2026-07-28 upstream' };

// What each upstream's tools are for this file: a read of secrets, an egress, a tool with no tag,
// and a braked tool (with its arguments: a valid call of it upstream, so nothing is refunded).
const TOOLS = {
  cw: {
    read: ['salesforce.get_record', { object: 'Account', id: '001' }],
    egress: ['resend.send_email', { from: 'a@example.com', to: 'b@example.com', subject: 's', text: 't' }],
    egress2: ['http_request', { url: 'https://example.com/', method: 'GET' }],
    plain: ['echo', { text: 'still served' }],
    brake: 'jira.create_issue',
    // The same canonical arguments, spelled five ways (key order, number spelling, spacing).
    same: [
      '{"projectKey":"OPS","issueType":"Bug","fields":{"summary":"disk full","priority":2}}',
      '{"fields":{"priority":2.0,"summary":"disk full"},"issueType":"Bug","projectKey":"OPS"}',
      ' { "issueType" : "Bug" , "projectKey":"OPS","fields":{ "summary":"disk full","priority":2e0 } } ',
      '{"projectKey":"OPS","fields":{"summary":"disk full","priority":20e-1},"issueType":"Bug"}',
      '{"issueType":"Bug","fields":{"priority":0.2e1,"summary":"disk full"},"projectKey":"OPS"}',
    ],
    varied: (i) => ({ projectKey: 'OPS', issueType: 'Bug', fields: { summary: `disk full #${i}`, priority: 2 } }),
  },
  e26: {
    read: ['touch_resource', { uri: 'file:///vault/keys' }],
    egress: ['execute_code', { code: 'curl https://example.com' }],
    egress2: null,
    plain: ['json_schema_2020_12_tool', { name: 'Ada', email: 'ada@example.com' }],
    brake: 'echo',
    same: [
      '{"message":"disk full","limit":2}',
      '{"limit":2.0,"message":"disk full"}',
      ' { "limit" : 2e0 , "message":"disk full" } ',
      '{"limit":20e-1,"message":"disk full"}',
      '{"message":"disk full","limit":0.2e1}',
    ],
    varied: (i) => ({ message: `disk full #${i}`, limit: 2 }),
  },
};

// Names a history entry must carry safely: longer than it keeps (128 bytes), and with bytes JSON
// escapes (a quote, a backslash, a control character, non-ASCII).
const LONG_NAME = 'read_' + 'é'.repeat(150);
const ODD_NAME = 'read "secret" \\ \u0001 ✓';
const REPEATS = 3;      // brake.repeats: the 4th identical call is braked
const LIMIT = 10;       // the braked tool's own rate limit (per grant, an hour)
const BRAKE_WINDOW_MS = 60000;

const cleanup = new H.Cleanup();
let dir;
let gw;
let standin;
let e26;
let auditFile;
let cwPolicy;
let e26Policy;
const TOKENS = {};
const logs = () => ({ 'tollgate stderr': gw?.stderr(), 'tollgate process': gw?.status(), 'era2026 fixture': e26?.output() });
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, { timeout: 120000, ...opts }, H.withLogs(logs, fn));
};

/** A grant of its own per scenario and transport: each has its own history. */
const grantNames = [];
for (const s of ['toxic-cw', 'toxic-e26', 'cross-a', 'cross-b', 'brake-cw', 'brake-e26', 'cycle'])
  for (const k of KINDS) grantNames.push(`${s}-${k}`);
grantNames.push('short', 'reload', 'audit', 'reads', 'reads-denied', 'prompts-streamable', 'prompts-stateless', 'huge', 'long-name', 'odd-name', 'mrtr');
for (const g of grantNames) TOKENS[g] = `${g}-${H.randomToken()}`;

/** The stand-in's policy: tags, the toxic-flow rule on "*", a brake with a limit, a 2 s brake. */
function cwPolicyJson(onDeny = DENY_MSG) {
  return {
    version: '1', default: 'allow',
    resources: { tags: { 'cowork://workspaces*': ['reads_secrets'] }, deny: ['cowork://workspaces/secret-*'] },
    tools: {
      'salesforce.get_record': { tags: ['reads_secrets'] },
      [LONG_NAME]: { tags: ['reads_secrets'] },
      [ODD_NAME]: { tags: ['reads_secrets'] },
      'resend.send_email': { tags: ['egress'] },
      http_request: { tags: ['egress'] },
      'jira.create_issue': {
        brake: { repeats: REPEATS, within: '60s' },
        rules: [{ name: 'issue budget', rate_limit: `${LIMIT}/hour` }],
      },
      'jira.get_issue': { brake: { repeats: 2, within: '2s' } },
      'okta.list_users': { brake: { repeats: 2, within: '60s', cycle: 3 } },
      '*': {
        rules: [{
          name: RULE, when: { tags: ['egress'] },
          conditions: [{ history: { tags: ['reads_secrets'], within: '10m' }, op: 'lt', value: 1 }],
          on_deny: onDeny,
        }],
      },
    },
  };
}

/** The era2026 fixture's: the same rule over its own tools, and the brake on echo. */
function e26PolicyJson(onDeny = DENY_MSG) {
  return {
    version: '1', default: 'allow',
    prompts: { tags: { 'test_*': ['reads_secrets'] } },
    tools: {
      touch_resource: { tags: ['reads_secrets'] },
      echo: {
        brake: { repeats: REPEATS, within: '60s' },
        rules: [{ name: 'echo budget', rate_limit: `${LIMIT}/hour` }],
      },
      execute_code: { tags: ['egress'] },
      ask_name: { brake: { repeats: 1, within: '60s' } },
      '*': {
        rules: [{
          name: RULE, when: { tags: ['egress'] },
          conditions: [{ history: { tags: ['reads_secrets'], within: '10m' }, op: 'lt', value: 1 }],
          on_deny: onDeny,
        }],
      },
    },
  };
}

const writeJson = (f, v) => fs.writeFileSync(f, JSON.stringify(v, null, 2) + '\n');

function auditLines() {
  if (!fs.existsSync(auditFile)) return [];
  return fs.readFileSync(auditFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

/** Stand-in request records of tools/call name since record index mark. */
const upstreamCalls = (name, mark = 0) => standin.records().slice(mark).filter((r) => r.msg?.method === 'tools/call' && r.msg?.params?.name === name);
const e26Calls = (name, mark = 0) => e26.records().slice(mark).filter((r) => r.body?.method === 'tools/call' && r.body?.params?.name === name);
const callsOn = (up, name, mark) => (up === 'cw' ? upstreamCalls(name, mark) : e26Calls(name, mark));
const mark = (up) => (up === 'cw' ? standin.records().length : e26.records().length);

const client = (kind, upstream, grant) => openClient(kind, { port: gw.plainPort, upstream, token: TOKENS[grant] });

function assertResult(a, what) {
  assert.ok(a.result && !a.error, `${what}: expected a result, got ${JSON.stringify(a).slice(0, 400)}`);
}

/** `at` of error.data.history as ms since the epoch (a number, or a date text). */
function atMs(at) {
  if (typeof at === 'number') return at;
  const t = Date.parse(at);
  assert.ok(Number.isFinite(t), `history.at is a time: ${JSON.stringify(at)}`);
  return t;
}

/** A -32001 from the toxic-flow rule, naming the earlier call (tool on upstream, made in [t0, t1]). */
function assertToxic(a, { tool, up, readTool, readUp, t0, t1, message = DENY_MSG }) {
  assert.ok(a.error, `${tool} after ${readTool}: refused, got ${JSON.stringify(a).slice(0, 400)}`);
  assert.equal(a.error.code, -32001, JSON.stringify(a.error));
  assert.equal(a.error.message, message);
  const d = a.error.data;
  assert.equal(d.tool, tool);
  assert.equal(d.rule, RULE);
  assert.equal(d.reason, message);
  assert.ok(d.history && typeof d.history === 'object', `error.data.history present: ${JSON.stringify(d)}`);
  assert.equal(d.history.tool, readTool, `history names the earlier call: ${JSON.stringify(d.history)}`);
  assert.equal(d.history.upstream, readUp);
  const at = atMs(d.history.at);
  assert.ok(at >= t0 - 1000 && at <= t1 + 1000, `history.at ${d.history.at} is when the read was made (${t0}..${t1})`);
  void up;
}

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-history-');
  auditFile = path.join(dir, 'audit.log');
  [standin, e26] = await Promise.all([
    H.startStandin({ cleanup, token: STANDIN_TOKEN, logFile: path.join(dir, 'cowork.log') }),
    startEra2026({ cleanup, args: ['--legacy', 'reject'], logFile: path.join(dir, 'e26.log') }),
  ]);
  cwPolicy = path.join(dir, 'cw.json');
  e26Policy = path.join(dir, 'e26.json');
  writeJson(cwPolicy, cwPolicyJson());
  writeJson(e26Policy, e26PolicyJson());
  const conf = H.writeConf(dir, {
    admin: true,
    audit: { file: auditFile },
    grants: grantNames.map((name) => ({ name, token_sha256: H.sha256hex(TOKENS[name]) })),
    upstreams: [
      { name: 'cw', url: standin.url, initialize: 'local', headers: { Authorization: `Bearer ${STANDIN_TOKEN}` }, policy: cwPolicy },
      { name: 'e26', url: e26.url, policy: e26Policy },
    ],
  });
  gw = await H.startTollgate(conf, { cleanup, admin: true });
  await gw.waitForLog(/msg="upstream protocol" upstream=e26 era=2026-07-28/, { what: 'the probe calling e26 2026-07-28 only' });
});

after(() => cleanup.run());

// ---- 1. toxic flows ------------------------------------------------------------------------------

describe('a read of secrets, then egress: refused, naming the read', () => {
  for (const up of ['cw', 'e26']) {
    for (const kind of KINDS) {
      test(`${kind} client, ${ERA[up]}`, async () => {
        const T = TOOLS[up];
        const c = await client(kind, up, `toxic-${up}-${kind}`);
        try {
          assertResult(await c.call(...T.egress), 'egress before any read of secrets');
          const t0 = Date.now();
          assertResult(await c.call(...T.read), 'the read of secrets');
          const t1 = Date.now();
          const m = mark(up);
          const a = await c.call(...T.egress);
          assertToxic(a, { tool: T.egress[0], up, readTool: T.read[0], readUp: up, t0, t1 });
          if (T.egress2) assertToxic(await c.call(...T.egress2), { tool: T.egress2[0], up, readTool: T.read[0], readUp: up, t0, t1 });
          assertResult(await c.call(...T.plain), 'a tool with no tag');
          assert.deepEqual(callsOn(up, T.egress[0], m), [], 'the refused call never reached the upstream');
          // Refused again: a refusal is not a call that history records, nor one that wears off.
          assertToxic(await c.call(...T.egress), { tool: T.egress[0], up, readTool: T.read[0], readUp: up, t0, t1 });
        } finally {
          await c.close();
        }
      });
    }
  }
});

describe('across two upstreams: the read on one, the egress on the other', () => {
  for (const kind of KINDS) {
    test(`${kind} client: read on the 2025 upstream, egress on the 2026 one`, async () => {
      const a = await client(kind, 'cw', `cross-a-${kind}`);
      const b = await client(kind, 'e26', `cross-a-${kind}`);
      try {
        assertResult(await b.call(...TOOLS.e26.egress), 'egress before the read');
        const t0 = Date.now();
        assertResult(await a.call(...TOOLS.cw.read), 'the read on cw');
        const t1 = Date.now();
        const m = mark('e26');
        assertToxic(await b.call(...TOOLS.e26.egress), { tool: TOOLS.e26.egress[0], up: 'e26', readTool: TOOLS.cw.read[0], readUp: 'cw', t0, t1 });
        assert.deepEqual(e26Calls(TOOLS.e26.egress[0], m), [], 'nothing reached e26');
        assertResult(await b.call(...TOOLS.e26.plain), 'untagged on e26');
      } finally {
        await a.close();
        await b.close();
      }
    });
    test(`${kind} client: read on the 2026 upstream, egress on the 2025 one`, async () => {
      const a = await client(kind, 'e26', `cross-b-${kind}`);
      const b = await client(kind, 'cw', `cross-b-${kind}`);
      try {
        const t0 = Date.now();
        assertResult(await a.call(...TOOLS.e26.read), 'the read on e26');
        const t1 = Date.now();
        const m = mark('cw');
        assertToxic(await b.call(...TOOLS.cw.egress), { tool: TOOLS.cw.egress[0], up: 'cw', readTool: TOOLS.e26.read[0], readUp: 'e26', t0, t1 });
        assert.deepEqual(upstreamCalls(TOOLS.cw.egress[0], m), [], 'nothing reached cw');
        assertResult(await b.call(...TOOLS.cw.plain), 'untagged on cw');
      } finally {
        await a.close();
        await b.close();
      }
    });
  }
});

// ---- 2. brakes -------------------------------------------------------------------------------------

/** A -32002 brake refusal of tool; returns its retry_after_ms. */
function assertBraked(a, tool, { windowMs = BRAKE_WINDOW_MS, repeats = REPEATS, loop = false } = {}) {
  assert.ok(a.error, `${tool}: braked, got ${JSON.stringify(a).slice(0, 400)}`);
  assert.equal(a.error.code, -32002, JSON.stringify(a.error));
  const d = a.error.data;
  assert.equal(d.tool, tool);
  assert.equal(d.rule, 'brake', JSON.stringify(d));
  assert.equal(typeof d.retry_after_ms, 'number', JSON.stringify(d));
  assert.ok(d.retry_after_ms > 0 && d.retry_after_ms <= windowMs, `0 < retry_after_ms ${d.retry_after_ms} <= ${windowMs}`);
  assert.equal(d.reason, a.error.message, 'the reason is the message the model reads');
  const short = tool.split('.').pop();
  if (!loop) {
    assert.match(a.error.message, new RegExp(`${short.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}.*same arguments ${repeats + 1} times in ${windowMs / 1000} s`),
      `the model reads what it did: ${a.error.message}`);
  }
  assert.match(a.error.message, /stop and report to the user/);
  return d.retry_after_ms;
}

describe('a loop of identical calls braked at N+1 while a varied workload passes', () => {
  for (const up of ['cw', 'e26']) {
    for (const kind of KINDS) {
      test(`${kind} client, ${ERA[up]}`, async () => {
        const T = TOOLS[up];
        const key = `tollgate_brakes_total{upstream="${up}",tool="${T.brake}"}`;
        const before = (await gw.metrics())[key] ?? 0;
        const c = await client(kind, up, `brake-${up}-${kind}`);
        try {
          const m = mark(up);
          const tFirst = Date.now();
          for (let i = 0; i < REPEATS; i++) assertResult(await c.call(T.brake, null, { raw: T.same[i] }), `identical call ${i + 1} of ${REPEATS}`);
          const r1 = assertBraked(await c.call(T.brake, null, { raw: T.same[3] }), T.brake);
          const r2 = assertBraked(await c.call(T.brake, null, { raw: T.same[4] }), T.brake);
          const spent = Date.now() - tFirst;
          // What is left of the window that began with the first identical call: the brake lets
          // the call through when that one leaves it.
          assert.ok(r1 >= BRAKE_WINDOW_MS - spent && r2 >= BRAKE_WINDOW_MS - spent,
            `retry_after_ms ${r1}, ${r2}: the window's rest, at least ${BRAKE_WINDOW_MS - spent}`);
          assert.ok(r2 <= r1, `a braked call is not recorded: retry_after_ms ${r2} after ${r1} does not grow`);
          assert.equal(callsOn(up, T.brake, m).length, REPEATS, 'the braked calls never reached the upstream');
          // The varied workload: the same tool, other arguments, until its own limit refuses. The
          // braked calls spent nothing: exactly LIMIT - REPEATS pass.
          let passed = 0;
          let limited;
          for (let i = 0; i < LIMIT; i++) {
            const a = await c.call(T.brake, T.varied(i));
            if (a.error) { limited = a; break; }
            passed++;
          }
          assert.equal(passed, LIMIT - REPEATS, `varied calls allowed before the tool's limit (braked calls spend none): ${JSON.stringify(limited)}`);
          assert.equal(limited.error.code, -32002);
          assert.notEqual(limited.error.data.rule, 'brake', 'the rate limit refused it, not the brake');
          assert.ok(limited.error.data.counter, JSON.stringify(limited.error.data));
          await gw.waitForMetric(key, (v) => v === before + 2, { what: `${key} counting the two braked calls` });
        } finally {
          await c.close();
        }
      });
    }
  }

  for (const kind of KINDS) {
    test(`${kind} client: a loop of two calls braked as it starts its third round, named in the message`, async () => {
      const c = await client(kind, 'cw', `cycle-${kind}`);
      try {
        const list = ['okta.list_users', { limit: 5 }];
        const other = ['echo', { text: 'looping' }];
        // Other arguments break the loop: no brake.
        assertResult(await c.call('okta.list_users', { limit: 6 }), 'a different call first');
        for (let round = 1; round <= 2; round++) {
          assertResult(await c.call(...list), `round ${round}: list`);
          assertResult(await c.call(...other), `round ${round}: echo`);
        }
        // The third round starts: braked, the message names the loop in the order it was called.
        const a = await c.call(...list);
        assertBraked(a, 'okta.list_users', { repeats: 2, loop: true });
        assert.match(a.error.message, /repeated the same 2 calls \(echo, okta\.list_users\) 3 times in 60 s; stop and report to the user/);
        // The other member of the loop has no brake of its own: still served.
        assertResult(await c.call(...other), 'echo, unbraked');
      } finally {
        await c.close();
      }
    });
  }

  test('2026-07-28 input rounds: the retry that carries the answer is the same call, not a repeat; a new call is', async () => {
    const c = await client('stateless', 'e26', 'mrtr');
    try {
      const _meta = { 'io.modelcontextprotocol/clientCapabilities': { elicitation: { form: {} } } };
      const ask = (more = {}) => c.request('tools/call', { name: 'ask_name', arguments: {}, _meta, ...more });
      const first = await ask();
      assert.equal(first.result?.resultType, 'input_required', JSON.stringify(first));
      const done = await ask({ inputResponses: { name: { action: 'accept', content: { name: 'Ada' } } }, requestState: first.result.requestState });
      assert.match(textOf(done) ?? '', /hello Ada/, `the retry is answered, not braked: ${JSON.stringify(done)}`);
      // repeats: 1. The retry was not remembered as a second call; the next first round is one.
      assertBraked(await ask(), 'ask_name', { repeats: 1 });
    } finally {
      await c.close();
    }
  });

  test('a 2 s window: braked at the 3rd call, and let through again once retry_after_ms has passed', async () => {
    const c = await client('streamable', 'cw', 'short');
    try {
      const args = { id: 'OPS-7' };
      assertResult(await c.call('jira.get_issue', args), 'first');
      assertResult(await c.call('jira.get_issue', args), 'second');
      const t = Date.now();
      const r = assertBraked(await c.call('jira.get_issue', args), 'jira.get_issue', { windowMs: 2000, repeats: 2 });
      // Polled: braked calls are not recorded, so asking does not push the end away.
      let last;
      const passedAt = await H.waitUntil(async () => {
        last = await c.call('jira.get_issue', args);
        return last.result ? Date.now() : false;
      }, { interval: 50, what: 'the braked call to pass once the window moved on', detail: () => JSON.stringify(last) });
      assert.ok(passedAt - t >= r - 250, `let through after ${passedAt - t} ms, retry_after_ms was ${r}`);
    } finally {
      await c.close();
    }
  });
});

// ---- 3. reload, audit, metrics -----------------------------------------------------------------------

describe('history survives a reload; the audit line and /metrics show it', () => {
  test('SIGHUP with a changed policy: the read made before it still closes egress, the loop stays braked', async () => {
    const c = await client('streamable', 'cw', 'reload');
    try {
      const t0 = Date.now();
      assertResult(await c.call(...TOOLS.cw.read), 'the read');
      const t1 = Date.now();
      const raw = '{"projectKey":"REL","issueType":"Task","fields":{"n":1}}';
      for (let i = 0; i < REPEATS; i++) assertResult(await c.call('jira.create_issue', null, { raw }), `identical ${i + 1}`);
      writeJson(cwPolicy, cwPolicyJson(DENY_MSG_RELOADED));
      const reloads = (await gw.metrics()).tollgate_reloads_total;
      gw.proc.kill('SIGHUP');
      await gw.waitForMetric('tollgate_reloads_total', (v) => v === reloads + 1, { what: 'the reload' });
      const a = await c.call(...TOOLS.cw.egress);
      assertToxic(a, { tool: TOOLS.cw.egress[0], up: 'cw', readTool: TOOLS.cw.read[0], readUp: 'cw', t0, t1, message: DENY_MSG_RELOADED });
      assertBraked(await c.call('jira.create_issue', null, { raw: '{"fields":{"n":1.0},"issueType":"Task","projectKey":"REL"}' }), 'jira.create_issue');
    } finally {
      writeJson(cwPolicy, cwPolicyJson());
      const reloads = (await gw.metrics()).tollgate_reloads_total;
      gw.proc.kill('SIGHUP');
      await gw.waitForMetric('tollgate_reloads_total', (v) => v === reloads + 1, { what: 'the reload back' });
      await c.close();
    }
  });

  test('the audit line names the rule and the earlier call; the brake is audited as rule "brake"; both counted', async () => {
    const hkey = `tollgate_history_refusals_total{upstream="cw",rule="${RULE}"}`;
    const before = (await gw.metrics())[hkey] ?? 0;
    const c = await client('ws', 'cw', 'audit');
    try {
      assertResult(await c.call(...TOOLS.cw.read), 'the read');
      const a = await c.call(...TOOLS.cw.egress);
      assert.equal(a.error?.code, -32001);
      const raw = '{"projectKey":"AUD","issueType":"Task","fields":{}}';
      for (let i = 0; i < REPEATS; i++) assertResult(await c.call('jira.create_issue', null, { raw }), `identical ${i + 1}`);
      assert.equal((await c.call('jira.create_issue', null, { raw })).error?.code, -32002);
    } finally {
      await c.close();
    }
    const deny = await H.waitUntil(() => auditLines().find((l) => l.grant === 'audit' && l.decision === 'deny'),
      { what: 'the audit line of the toxic-flow refusal' });
    assert.equal(deny.tool, TOOLS.cw.egress[0]);
    assert.equal(deny.rule, RULE);
    assert.equal(deny.upstream, 'cw');
    assert.equal(deny.history?.tool, TOOLS.cw.read[0], `audit history: ${JSON.stringify(deny)}`);
    assert.equal(deny.history?.upstream, 'cw');
    assert.ok(deny.history.at !== undefined);
    const brake = await H.waitUntil(() => auditLines().find((l) => l.grant === 'audit' && l.decision === 'limited'),
      { what: 'the audit line of the braked call' });
    assert.equal(brake.tool, 'jira.create_issue');
    assert.equal(brake.rule, 'brake');
    assert.equal(brake.history, undefined, 'a brake names no earlier call');
    const allowed = auditLines().filter((l) => l.grant === 'audit' && l.decision === 'allow');
    assert.ok(allowed.every((l) => l.history === undefined), 'an allowed call has no history field');
    await gw.waitForMetric(hkey, (v) => v === before + 1, { what: `${hkey} to count the refusal` });
    const text = await (await fetch(`http://127.0.0.1:${gw.adminPort}/metrics`)).text();
    assert.match(text, /# TYPE tollgate_brakes_total counter/);
    assert.match(text, /# TYPE tollgate_history_refusals_total counter/);
  });

  test('resources: a read of a tagged resource closes egress too, named as {resource, upstream, at}', async () => {
    const c = await client('streamable', 'cw', 'reads');
    try {
      const t0 = Date.now();
      const r = await c.request('resources/read', { uri: 'cowork://workspaces' });
      assertResult(r, 'resources/read');
      const t1 = Date.now();
      const a = await c.call(...TOOLS.cw.egress);
      assert.equal(a.error?.code, -32001, JSON.stringify(a));
      assert.equal(a.error.data.rule, RULE);
      assert.equal(a.error.data.history?.resource, 'cowork://workspaces', JSON.stringify(a.error.data));
      assert.equal(a.error.data.history.upstream, 'cw');
      const at = atMs(a.error.data.history.at);
      assert.ok(at >= t0 - 1000 && at <= t1 + 1000);
    } finally {
      await c.close();
    }
  });
  test('prompts: a prompts/get of a tagged prompt on the 2026 upstream closes egress, named as {prompt, upstream, at}', async () => {
    for (const kind of ['streamable', 'stateless']) {
      const c = await client(kind, 'e26', `prompts-${kind}`);
      try {
        const t0 = Date.now();
        assertResult(await c.request('prompts/get', { name: 'test_simple_prompt' }), 'prompts/get');
        const t1 = Date.now();
        const a = await c.call(...TOOLS.e26.egress);
        assert.equal(a.error?.code, -32001, JSON.stringify(a));
        assert.equal(a.error.data.history?.prompt, 'test_simple_prompt', JSON.stringify(a.error.data));
        assert.equal(a.error.data.history.upstream, 'e26');
        const at = atMs(a.error.data.history.at);
        assert.ok(at >= t0 - 1000 && at <= t1 + 1000);
      } finally {
        await c.close();
      }
    }
  });

  test('a refused read is not remembered: a denied resource does not close egress', async () => {
    const c = await client('sse', 'cw', 'reads-denied');
    try {
      const r = await c.request('resources/read', { uri: 'cowork://workspaces/secret-vault' });
      assert.equal(r.error?.code, -32001, JSON.stringify(r));
      assertResult(await c.call(...TOOLS.cw.egress), 'egress after a refused read');
    } finally {
      await c.close();
    }
  });
});

// ---- 4. bad input ------------------------------------------------------------------------------------

describe('bad input', () => {
  /** `tollgate -t` over a conf whose one upstream has this policy: {status, out}. */
  function check(policy, name) {
    const side = H.makeTempDir(cleanup, 'tollgate-history-t-');
    const file = path.join(side, `${name}.json`);
    fs.writeFileSync(file, typeof policy === 'string' ? policy : JSON.stringify(policy));
    const conf = H.writeConf(side, { upstreams: [{ name: 'u', url: 'http://127.0.0.1:9/mcp', policy: file }] });
    const r = spawnSync(H.tollgateBin(), ['-t', '-c', conf], { encoding: 'utf8', timeout: 20000 });
    return { status: r.status, out: r.stderr + r.stdout, file: `${name}.json` };
  }
  const cond = (history, extra = {}) => ({
    version: '1', default: 'allow',
    tools: { '*': { rules: [{ name: 'r', conditions: [{ history, op: 'lt', value: 1, ...extra }] }] } },
  });
  const brake = (b) => ({ version: '1', default: 'allow', tools: { t: { brake: b } } });
  const C0 = 'tools.*.rules[0].conditions[0]';

  const cases = [
    // pathological windows
    ['within 0s', cond({ tags: ['x'], within: '0s' }), `${C0}.history.within`],
    ['within under a second', cond({ tags: ['x'], within: '500ms' }), `${C0}.history.within`],
    ['within over a day', cond({ tags: ['x'], within: '25h' }), `${C0}.history.within`],
    ['within a year', cond({ tags: ['x'], within: '365d' }), `${C0}.history.within`],
    ['within negative', cond({ tags: ['x'], within: '-10m' }), `${C0}.history.within`],
    ['within huge number', cond({ tags: ['x'], within: '1e400s' }), `${C0}.history.within`],
    ['within NaN text', cond({ tags: ['x'], within: 'NaNs' }), `${C0}.history.within`],
    ['within no unit word', cond({ tags: ['x'], within: '10 fortnights' }), `${C0}.history.within`],
    ['within empty', cond({ tags: ['x'], within: '' }), `${C0}.history.within`],
    ['within missing', cond({ tags: ['x'] }), `${C0}.history`],
    ['within a list', cond({ tags: ['x'], within: ['10m'] }), `${C0}.history.within`],
    // malformed conditions
    ['history not an object', cond('reads_secrets'), `${C0}.history`],
    ['history unknown key', cond({ tags: ['x'], within: '10m', withn: '1m' }), `${C0}.history.withn`],
    ['history tags not a list', cond({ tags: 'x', within: '10m' }), `${C0}.history.tags`],
    ['history bad tag', cond({ tags: ['two words'], within: '10m' }), `${C0}.history.tags[0]`],
    ['history scope unknown', cond({ tags: ['x'], within: '10m', scope: 'planet' }), `${C0}.history.scope`],
    ['history same not args', cond({ tools: ['t'], within: '10m', same: 'state.x' }), `${C0}.history.same`],
    ['history value not a number', cond({ tags: ['x'], within: '10m' }, { value: 'three' }), `${C0}.value`],
    ['history with a path', cond({ tags: ['x'], within: '10m' }, { path: 'args.x' }), `${C0}`],
    ['history op regex', cond({ tags: ['x'], within: '10m' }, { op: 'regex', value: 'a' }), `${C0}.op`],
    // brakes
    ['brake repeats 0', brake({ repeats: 0, within: '60s' }), 'tools.t.brake.repeats'],
    ['brake repeats text', brake({ repeats: 'five', within: '60s' }), 'tools.t.brake.repeats'],
    ['brake repeats fraction', brake({ repeats: 2.5, within: '60s' }), 'tools.t.brake.repeats'],
    ['brake within 0', brake({ repeats: 3, within: '0s' }), 'tools.t.brake.within'],
    ['brake within two days', brake({ repeats: 3, within: '48h' }), 'tools.t.brake.within'],
    ['brake cycle 1', brake({ repeats: 3, within: '60s', cycle: 1 }), 'tools.t.brake.cycle'],
    ['brake cycle 9', brake({ repeats: 3, within: '60s', cycle: 9 }), 'tools.t.brake.cycle'],
    ['brake unknown key', brake({ repeats: 3, within: '60s', repeat: 2 }), 'tools.t.brake.repeat'],
    ['brake tags on a tool', brake({ repeats: 3, within: '60s', tags: ['write'] }), 'tools.t.brake.tags'],
  ];
  test('tollgate -t refuses pathological windows and malformed history conditions and brakes, naming file and path', () => {
    const wrong = [];
    for (const [name, policy, where] of cases) {
      const r = check(policy, name.replace(/\W+/g, '-'));
      if (r.status !== 1 || !r.out.includes(r.file) || !r.out.includes(`${where}`)) wrong.push(`${name}: status ${r.status}, wanted ${r.file} and ${where} in:\n${r.out}`);
    }
    assert.deepEqual(wrong, []);
    // The limits of the range are accepted.
    for (const within of ['1s', '1d', '24h', '86400s']) {
      const r = check(cond({ tags: ['x'], within }), `ok-${within}`);
      assert.equal(r.status, 0, `within ${within} loads: ${r.out}`);
    }
  });

  test('huge arguments: a loop of identical 1 MiB calls is braked, one differing in its last byte is not', async () => {
    const c = await client('streamable', 'cw', 'huge');
    try {
      const big = 'x'.repeat(1 << 20);
      const args = (last) => ({ projectKey: 'BIG', issueType: 'Task', fields: { blob: big + last } });
      for (let i = 0; i < REPEATS; i++) assertResult(await c.call('jira.create_issue', args('a')), `identical 1 MiB call ${i + 1}`);
      assertBraked(await c.call('jira.create_issue', args('a')), 'jira.create_issue');
      assertResult(await c.call('jira.create_issue', args('b')), 'the last byte differs: another call');
    } finally {
      await c.close();
    }
  });

  for (const [grant, name] of [['long-name', LONG_NAME], ['odd-name', ODD_NAME]]) {
    test(`error.data.history stays valid JSON for a ${grant === 'long-name' ? 'name longer than history keeps' : 'name JSON must escape'}`, async () => {
      const c = await client('ws', 'cw', grant);
      try {
        const read = await c.call(name, {});
        assert.ok(read.result || read.error?.code !== -32001, `the tagged tool is let through: ${JSON.stringify(read).slice(0, 300)}`);
        const a = await c.call(...TOOLS.cw.egress); // the ws client parses the answer: it is JSON
        assert.equal(a.error?.code, -32001, JSON.stringify(a).slice(0, 400));
        const h = a.error.data.history;
        assert.equal(h.upstream, 'cw');
        if (name === LONG_NAME) {
          assert.ok(name.startsWith(h.tool) && h.tool.length < name.length && h.tool.length >= 32,
            `cut on a character boundary: ${JSON.stringify(h.tool)}`);
        } else {
          assert.equal(h.tool, name);
        }
      } finally {
        await c.close();
      }
    });
  }

  test('a flood of distinct calls keeps history memory under limits.history_bytes; a too-short ring fails closed; still serving', async (t) => {
    const side = H.makeTempDir(cleanup, 'tollgate-history-flood-');
    const pol = path.join(side, 'cw.json');
    writeJson(pol, cwPolicyJson());
    const BYTES = 65536;
    const CALLS = 16;
    const many = Array.from({ length: 120 }, (_, i) => `flood-${i}`);
    const toks = Object.fromEntries(['one', 'fresh', ...many].map((g) => [g, `${g}-${H.randomToken()}`]));
    const conf = H.writeConf(side, {
      admin: true,
      limits: { history_calls: CALLS, history_bytes: BYTES },
      grants: Object.keys(toks).map((name) => ({ name, token_sha256: H.sha256hex(toks[name]) })),
      upstreams: [
        { name: 'cw', url: standin.url, initialize: 'local', headers: { Authorization: `Bearer ${STANDIN_TOKEN}` }, policy: pol },
        { name: 'plain', url: standin.url, initialize: 'local', headers: { Authorization: `Bearer ${STANDIN_TOKEN}` } },
      ],
    });
    const g2 = await H.startTollgate(conf, { cleanup, admin: true });
    // A policy with no tags, history conditions or brakes remembers nothing.
    const plain = await openClient('streamable', { port: g2.plainPort, upstream: 'plain', token: toks.fresh });
    for (let i = 0; i < 20; i++) assertResult(await plain.call('echo', { text: `plain ${i}` }), 'a call under a policy that does not record');
    await plain.close();
    const m0 = await g2.metrics();
    assert.equal(m0.tollgate_history_keys, 0, 'nothing remembered for a policy that does not record');
    assert.ok(m0.tollgate_history_memory_bytes < 4096, `no ring allocated: ${m0.tollgate_history_memory_bytes} bytes`);
    const open = (grant, kind = 'streamable') => openClient(kind, { port: g2.plainPort, upstream: 'cw', token: toks[grant] });
    const memory = async () => (await g2.metrics()).tollgate_history_memory_bytes;
    let peak = 0;
    const watch = async () => { peak = Math.max(peak, await memory()); };

    // One subject: a read, then far more distinct calls than its ring holds.
    const one = await open('one');
    assertResult(await one.call(...TOOLS.cw.read), 'the read');
    const N = 1500;
    for (let i = 0; i < N; i += 50) {
      await Promise.all(Array.from({ length: 50 }, (_, j) => one.call('echo', { text: `distinct ${i + j}` })
        .then((a) => assertResult(a, `distinct call ${i + j}`))));
      await watch();
    }
    // The read is forgotten and the window reaches past what the ring holds: fail closed.
    const a = await one.call(...TOOLS.cw.egress);
    assert.equal(a.error?.code, -32001, `a window past the ring's oldest call denies: ${JSON.stringify(a)}`);
    assert.match(a.error.message, /limits\.history_calls/, 'the message says what to raise');
    assert.equal(a.error.data.history, undefined, 'the read is forgotten: no earlier call to name');
    await g2.waitForMetric(`tollgate_history_refusals_total{upstream="cw",rule="${RULE}"}`, (v) => v === 1,
      { what: 'the refusal for a too-short history counted as a history refusal' });
    await one.close();
    // A subject whose history is whole is not affected.
    const fresh = await open('fresh');
    assertResult(await fresh.call(...TOOLS.cw.egress), 'egress of a subject with nothing forgotten');
    await fresh.close();

    // Many subjects: more rings than history_bytes holds; the least recently used go.
    for (let i = 0; i < many.length; i += 20) {
      await Promise.all(many.slice(i, i + 20).map(async (g) => {
        const c = await open(g, 'stateless');
        for (let j = 0; j < 4; j++) assertResult(await c.call('echo', { text: `${g} ${j}` }), `${g} call ${j}`);
        await c.close();
      }));
      await watch();
    }
    const m = await g2.metrics();
    assert.ok(peak > 0 && peak <= BYTES, `tollgate_history_memory_bytes peaked at ${peak}, limit ${BYTES}`);
    assert.ok(m.tollgate_history_keys < many.length, `rings were dropped: ${m.tollgate_history_keys} keys for ${many.length + 2} subjects`);
    t.diagnostic(`history memory peaked at ${peak} of ${BYTES} bytes; ${m.tollgate_history_keys} keys held for ${many.length + 2} subjects`);
    // Still serving, on every transport.
    for (const kind of KINDS) {
      const c = await open('fresh', kind);
      assertResult(await c.call('echo', { text: 'after the flood' }), `${kind} after the flood`);
      await c.close();
    }
    g2.assertNoSanitizerReport();
  });
});
