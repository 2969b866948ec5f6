// MCP 2026-07-28 through tollgate, with real peers on both sides: the era2026 fixture
// (test/fixtures/era2026/server.mjs, @modelcontextprotocol/server 2.4.0) behind the gateway twice,
// dual-era (2025 sessions + 2026) as upstream "dual" and 2026-only (`--legacy reject`) as
// upstream "strict", and server-everything (2025 only) as "everything" for contrast. The
// fixture's --log is the ground truth for what reached an upstream.
//
//   - the probe: each upstream's era is logged once (dual, 2026-07-28, 2025);
//   - the official conformance suite (--requirements 2026-07-28) directly and through tollgate,
//     per scenario: every check that passes direct passes through, except the ones tollgate's
//     policy explains (POLICY below, each with its reason);
//   - the SDK 2.4.0 client pinned to 2026-07-28 through tollgate to both: tools/list filtered,
//     echo, execute_code refused -32001 without reaching the upstream, region_lookup;
//   - the Mcp-* headers the upstream gets are rebuilt from the body, never copied;
//   - header tricks (name, method, duplicates, comma-joined, version, a legacy session id)
//     refused, nothing upstream;
//   - 2025 clients (SDK 1.x and SDK 2.4.0 in legacy mode) to the dual upstream: sessions,
//     elicitation, list_changed; to the 2026-only upstream: a documented gap;
//   - MRTR (input_required) through the gateway: sealed requestState, every retry checked.
//
// Tests marked GAP assert today's behaviour where a feature is missing, so that they fail
// when it lands (then turn them into the positive test). Tests marked MRTR expect the gateway
// envelope on requestState (core/mcp/mrtr.c, being built): they fail until it lands. Besides
// those, what fails today fails on a gateway gap, named in its message: the conformance
// scenarios server-stateless (-32602 for a 2026 header without a body claim, the -32022
// version list, the upstream's 4xx JSON-RPC errors relayed as -32004, subscriptions/listen),
// tools-call-with-progress (progress dropped on 2026 streams), tasks-dispatch-and-envelope
// (404/-32601 relayed as -32004) and http-custom-header-server-validation with region_lookup
// (Mcp-Param-* neither checked nor passed on).
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/thru2026.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import { CONFORMANCE_BIN, problems, requirementSet, runConformance, startEra2026, summarize } from './lib/conformance2026.mjs';

H.requireNodeModules();
if (!fs.existsSync(CONFORMANCE_BIN)) {
  throw new Error(`interop tests: ${path.relative(H.REPO_ROOT, CONFORMANCE_BIN)} is missing; ` +
    'install the pinned test dependencies with:  npm ci --prefix test');
}

const MODERN = '2026-07-28';
const ALICE = 'alice-' + H.randomToken();
const CAROL = 'carol-' + H.randomToken();
const BOB = 'bob-' + H.randomToken();
const cleanup = new H.Cleanup();
let dir;
let gw;
let dual; // era2026 fixture, default: 2025 sessions + 2026 stateless
let strict; // era2026 fixture, --legacy reject: 2026-07-28 only
let everything; // server-everything: 2025 only
const verdicts = {}; // upstream -> era, from tollgate's log

const fixtureOf = (name) => (name === 'dual' ? dual : strict);
const MODES = ['dual', 'strict'];

const logs = () => ({
  'tollgate stderr': gw?.stderr(),
  'dual fixture': dual?.output(),
  'strict fixture': strict?.output(),
});
const test = (name, fn) => it(name, H.withLogs(logs, fn));
const url = (name) => `http://127.0.0.1:${gw.plainPort}/${name}/mcp`;

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-thru2026-');
  dual = await startEra2026({ cleanup, logFile: path.join(dir, 'dual.log') });
  strict = await startEra2026({ cleanup, args: ['--legacy', 'reject'], logFile: path.join(dir, 'strict.log') });
  everything = await H.startEverything({ cleanup });
  // The grants with tokens (alice, bob) get the upstream policy: only the five tools the tests
  // name, execute_code denied (and so hidden), everything else hidden under default deny.
  const policy = path.join(dir, 'era2026.json');
  fs.writeFileSync(policy, JSON.stringify({
    version: '1', default: 'deny',
    tools: {
      echo: {}, ask_name: {}, region_lookup: {}, notify_change: {},
      execute_code: { action: 'deny', reason: 'no code execution through the gateway' },
    },
    resources: { default: 'allow', deny: ['secret://*'] },
    // Prompts are read under default deny only through a group that allows them.
    prompts: { default: 'allow' },
  }) + '\n');
  // The conformance suite cannot send an Authorization header (its `server` command has no such
  // option), so it is the anonymous grant "suite" (README, Grants: `anonymous = true` serves
  // requests with no Authorization). Its policy lets the suite's tools through; execute_code
  // stays denied.
  const suitePolicy = path.join(dir, 'suite.json');
  fs.writeFileSync(suitePolicy, JSON.stringify({
    version: '1', default: 'allow',
    tools: { execute_code: { action: 'deny', reason: 'no code execution through the gateway' } },
  }) + '\n');
  const oncePolicy = path.join(dir, 'once.json');
  fs.writeFileSync(oncePolicy, JSON.stringify({ version: '1', default: 'deny', tools: {
    echo: {}, ask_name: { limits: [{ counter: 'ask', window: 'minute', max: 1, scope: 'grant' }] } } }));
  const conf = H.writeConf(dir, {
    grants: [
      { name: 'alice', token_sha256: H.sha256hex(ALICE) },
      { name: 'bob', token_sha256: H.sha256hex(BOB) },
      // carol: ask_name once a minute, to show that a call costs one token however many rounds
      { name: 'carol', token_sha256: H.sha256hex(CAROL), policies: [{ upstream: 'dual', policy: oncePolicy }, { upstream: 'strict', policy: oncePolicy }] },
      {
        name: 'suite', anonymous: true,
        policies: [{ upstream: 'dual', policy: suitePolicy }, { upstream: 'strict', policy: suitePolicy }],
      },
    ],
    upstreams: [
      { name: 'dual', url: dual.url, policy, protocol: 'auto' },
      { name: 'strict', url: strict.url, policy }, // protocol = "auto" by default
      { name: 'everything', url: everything.url }, // pass-everything policy (harness)
    ],
  });
  gw = await H.startTollgate(conf, { cleanup });
  for (const name of ['dual', 'strict', 'everything']) {
    const m = await gw.waitForLog(new RegExp(`msg="upstream protocol" upstream=${name} era=(\\S+)`),
      { what: `the probe's verdict on ${name}` });
    verdicts[name] = m[1];
  }
});

after(() => cleanup.run());

// ---- raw HTTP ----------------------------------------------------------------------------------

const capsMeta = (caps = {}) => ({
  'io.modelcontextprotocol/protocolVersion': MODERN,
  'io.modelcontextprotocol/clientCapabilities': caps,
});
const META = capsMeta();
const ELICIT_META = capsMeta({ elicitation: {} });
const std = (method, name) => [['MCP-Protocol-Version', MODERN], ['Mcp-Method', method], ...(name ? [['Mcp-Name', name]] : [])];
const b64 = (s) => `=?base64?${Buffer.from(s, 'utf8').toString('base64')}?=`;
let nextId = 1000;
const toolCall = (name, args = {}, meta = META, extra = {}) => ({
  jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name, arguments: args, ...extra, _meta: meta },
});

/**
 * POSTs `body` to tollgate's /NAME/mcp with `headers` given as [[name, value]...] (a name given
 * twice is sent as two header lines, which fetch() cannot do). Resolves with
 * { status, headers, text, messages, json (the first JSON-RPC message) }.
 */
function post(name, body, headers = [], { token = ALICE } = {}) {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  const grouped = new Map(); // lower-case name -> [casing of the first, values]
  for (const [k, v] of [['Content-Type', 'application/json'], ['Accept', 'application/json, text/event-stream'],
    ...(token ? [['Authorization', `Bearer ${token}`]] : []), ...headers]) {
    const e = grouped.get(k.toLowerCase()) ?? [k, []];
    e[1].push(v);
    grouped.set(k.toLowerCase(), e);
  }
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: gw.plainPort, method: 'POST', path: `/${name}/mcp`, agent: false }, (res) => {
      let out = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { out += d; });
      res.on('end', () => {
        const ct = res.headers['content-type'] ?? '';
        let messages = [];
        try {
          if (ct.includes('text/event-stream')) messages = H.parseSse(out).map((e) => JSON.parse(e.data));
          else if (out) messages = [JSON.parse(out)].flat();
        } catch { messages = [{ unparsable: out }]; }
        resolve({ status: res.statusCode, headers: res.headers, text: out, messages, json: messages.find((m) => 'result' in m || 'error' in m) });
      });
    });
    req.on('error', reject);
    for (const [k, vs] of grouped.values()) req.setHeader(k, vs.length === 1 ? vs[0] : vs);
    req.setHeader('Content-Length', String(Buffer.byteLength(text)));
    req.end(text);
  });
}

/**
 * POSTs with header lines written byte for byte over a socket (node:http refuses control
 * characters and non-Latin-1 text in header values). Resolves with { status, text, json }.
 */
function postBytes(name, body, headerLines, { token = ALICE } = {}) {
  const text = JSON.stringify(body);
  const head = [`POST /${name}/mcp HTTP/1.1`, `Host: 127.0.0.1:${gw.plainPort}`, 'Content-Type: application/json',
    'Accept: application/json, text/event-stream', `Authorization: Bearer ${token}`, ...headerLines,
    `Content-Length: ${Buffer.byteLength(text)}`, 'Connection: close', '', ''].join('\r\n');
  return new Promise((resolve, reject) => {
    const chunks = [];
    const sock = net.connect(gw.plainPort, '127.0.0.1', () => sock.end(Buffer.concat([Buffer.from(head, 'latin1'), Buffer.from(text)])));
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', reject);
    sock.on('close', () => {
      const all = Buffer.concat(chunks).toString('utf8');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(all)?.[1]);
      const bodyText = all.slice(all.indexOf('\r\n\r\n') + 4);
      let json;
      try { json = JSON.parse(bodyText); } catch { json = undefined; }
      resolve({ status, text: all, json });
    });
  });
}

/** The fixture's request log lines written after mark (a count of lines). */
const since = (fx, mark) => fx.records().slice(mark);
const callsOf = (recs, tool) => recs.filter((r) => r.body?.method === 'tools/call' && r.body?.params?.name === tool);
const mentions = (recs, s) => recs.filter((r) => JSON.stringify(r.body ?? '').includes(s));

// ---- SDK clients -------------------------------------------------------------------------------

/**
 * The SDK 2.4.0 client (@modelcontextprotocol/client) through tollgate. mode: 'pin' (2026-07-28)
 * or 'legacy' (2025 initialize). It declares elicitation and answers every elicitation with the
 * name Ada; `client.seen` records every POST it made with the JSON-RPC messages of the answer
 * (await Promise.all(client.seen.map((e) => e.done)) before reading them).
 */
async function sdk2(name, mode, { token = ALICE } = {}) {
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const client = new Client({ name: `thru2026-${mode}`, version: '1.0.0' }, {
    capabilities: { elicitation: {} },
    versionNegotiation: { mode: mode === 'pin' ? { pin: MODERN } : 'legacy' },
  });
  client.elicitations = [];
  client.setRequestHandler('elicitation/create', async (req) => {
    client.elicitations.push(req.params);
    return { action: 'accept', content: { name: 'Ada' } };
  });
  client.seen = [];
  const recording = async (input, init = {}) => {
    const res = await fetch(input, init);
    const entry = { method: init.method ?? 'GET', request: undefined, status: res.status, messages: [] };
    try { entry.request = typeof init.body === 'string' ? JSON.parse(init.body) : undefined; } catch { /* not JSON */ }
    const ct = res.headers.get('content-type') ?? '';
    entry.done = entry.method === 'POST' && res.body
      ? res.clone().text().then((t) => {
        try {
          entry.messages = ct.includes('text/event-stream') ? H.parseSse(t).map((e) => JSON.parse(e.data)) : t ? [JSON.parse(t)].flat() : [];
        } catch { entry.messages = [{ unparsable: t }]; }
      }, () => {})
      : Promise.resolve();
    client.seen.push(entry);
    return res;
  };
  cleanup.add(() => client.close().catch(() => {}));
  await client.connect(new StreamableHTTPClientTransport(new URL(url(name)), {
    fetch: recording, requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }));
  return client;
}

/** The SDK 1.x client (@modelcontextprotocol/sdk) through tollgate, declaring elicitation (answers: Ada). */
async function sdk1(name, { token = ALICE, onToolsChanged } = {}) {
  const { types } = await H.loadSdk();
  const elicitations = [];
  const c = await H.connectClient(url(name), {
    cleanup,
    headers: { Authorization: `Bearer ${token}` },
    capabilities: { elicitation: {} },
    handlers: [[types.ElicitRequestSchema, async (req) => {
      elicitations.push(req.params);
      return { action: 'accept', content: { name: 'Ada' } };
    }]],
    notificationHandlers: onToolsChanged ? [[types.ToolListChangedNotificationSchema, onToolsChanged]] : [],
  });
  c.elicitations = elicitations;
  return c;
}

/** Asserts p rejects with JSON-RPC error `code` (an McpError/ProtocolError); returns the error. */
async function rejectsWith(p, code, what) {
  let err;
  await assert.rejects(p, (e) => { err = e; return true; }, what);
  assert.equal(err?.code, code, `${what}: ${err?.stack ?? err}`);
  return err;
}

// ---------------------------------------------------------------------------------------------------

describe('the probe', () => {
  test('each upstream\'s era is logged once: dual, 2026-07-28 (--legacy reject), 2025 (server-everything)', async () => {
    assert.deepEqual(verdicts, { dual: 'dual', strict: '2026-07-28', everything: '2025' });
    for (const name of Object.keys(verdicts)) {
      const n = gw.stderr().split('\n').filter((l) => l.includes('msg="upstream protocol"') && l.includes(`upstream=${name} `)).length;
      assert.equal(n, 1, `one verdict line for ${name}`);
    }
    // What the probe sent, as the fixtures logged it: server/discover as a 2026 client, then a
    // 2025 initialize (a session only the dual-era one makes, deleted at once).
    for (const [fx, session] of [[dual, true], [strict, false]]) {
      const recs = fx.records();
      assert.equal(recs[0]?.body?.method, 'server/discover', JSON.stringify(recs[0]));
      assert.equal(recs[0].headers['mcp-method'], 'server/discover');
      assert.equal(recs[1]?.body?.method, 'initialize', JSON.stringify(recs[1]));
      if (session) await H.waitUntil(() => fx.records().some((r) => r.method === 'DELETE'), { what: 'the probe session deleted' });
    }
  });
});

// ---------------------------------------------------------------------------------------------------

// Checks that pass direct and fail through tollgate because of tollgate's policy, with why. A
// check listed here must fail through tollgate exactly as `through` says, or pass.
const POLICY = {
  'input-required-result-ignore-extra-params sep-2322-ignore-unexpected-params': {
    reason: 'the suite sends inputResponses with no requestState; they answer nothing tollgate issued, so '
      + 'tollgate drops them (they never reach the upstream) and the call goes as a first round, which asks '
      + 'again (input_required) instead of completing (README, MCP 2026-07-28 clients)',
    through: /did not return complete result/,
  },
};

// SHOULD checks the suite gives a fixed window (1.5 s) on a listen stream: a WARNING there can be
// the machine's load (as in conformance2026.test.mjs), so it is reported, not counted as lost.
const TIMING_BOUND = new Set([
  'sep-2575-server-sends-prompts-list-changed-on-subscription',
  'sep-2575-server-sends-tools-list-changed-on-subscription',
]);

describe('conformance --requirements 2026-07-28: direct and through tollgate', () => {
  const set = requirementSet(MODERN);
  const scenarios = [...set.scored, ...set.notScored.map((e) => e.scenario)];
  const runs = {}; // `${mode} direct|through` -> result

  before(async () => {
    for (const mode of MODES) {
      runs[`${mode} direct`] = await runConformance(fixtureOf(mode).url, { requirements: MODERN, dir });
      // no Authorization: the anonymous grant "suite"
      runs[`${mode} through`] = await runConformance(url(mode), { requirements: MODERN, dir });
    }
  });

  for (const mode of MODES) {
    test(`${mode}: the counts, and every required scenario ran both ways`, async (t) => {
      for (const how of ['direct', 'through']) {
        const r = runs[`${mode} ${how}`];
        t.diagnostic(`${mode} ${how}: ${r.command}`);
        t.diagnostic(`${mode} ${how}: scored checks ${r.passed} passed, ${r.failed} failed, ${r.warnings} warnings, ${r.skipped} skipped; exit ${r.code}`);
        const all = r.checks;
        t.diagnostic(`${mode} ${how}: all checks (not scored too) ${all.filter((c) => c.status === 'SUCCESS').length} passed, `
          + `${all.filter((c) => c.status === 'FAILURE').length} failed`);
        assert.deepEqual(r.scenariosMissing, [], `${how}: every required scenario wrote results\n${r.output.slice(-2000)}`);
      }
      for (const line of summarize(runs[`${mode} through`])) t.diagnostic(`  through: ${line}`);
      // The direct run is the baseline: the fixture itself passes every required scenario
      // (conformance2026.test.mjs), so what fails through tollgate is tollgate's.
      assert.equal(runs[`${mode} direct`].failed, 0, problems(runs[`${mode} direct`]));
    });

    for (const scenario of scenarios) {
      it(`${mode}: ${scenario}: every check that passes direct passes through tollgate`, async (t) => {
        const d = runs[`${mode} direct`].checks.filter((c) => c.scenario === scenario);
        const th = runs[`${mode} through`].checks.filter((c) => c.scenario === scenario);
        const lost = [];
        for (const id of new Set(d.map((c) => c.id))) {
          const ok = (l) => l.filter((c) => c.id === id && c.status === 'SUCCESS').length;
          const want = ok(d);
          if (ok(th) >= want) continue;
          const failed = th.filter((c) => c.id === id && c.status !== 'SUCCESS');
          if (TIMING_BOUND.has(id) && failed.length > 0 && failed.every((c) => c.status === 'WARNING')) {
            t.diagnostic(`load? ${id} WARNING through tollgate: ${failed.map((c) => c.errorMessage).join(' | ')}`);
            continue;
          }
          const policy = POLICY[`${scenario} ${id}`];
          if (policy && failed.length > 0 && failed.every((c) => policy.through.test(c.errorMessage ?? ''))) {
            t.diagnostic(`policy: ${id}: ${policy.reason}`);
            continue;
          }
          lost.push(`${id}: direct ${want} passed, through ${ok(th)}: `
            + (failed.map((c) => `${c.status} ${c.errorMessage ?? ''}`).join(' | ') || 'not run'));
        }
        assert.deepEqual(lost, [], `checks lost through tollgate (${scenario}):\n${lost.join('\n')}`);
      });
    }
  }
});

// ---------------------------------------------------------------------------------------------------

describe('the SDK 2.4.0 client pinned to 2026-07-28 through tollgate', () => {
  for (const mode of MODES) {
    test(`${mode}: tools/list filtered by the policy, echo, execute_code refused -32001 and never upstream`, async () => {
      const fx = fixtureOf(mode);
      const mark = fx.records().length;
      const client = await sdk2(mode, 'pin');
      assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
      const names = (await client.listTools()).tools.map((x) => x.name).sort();
      assert.deepEqual(names, ['ask_name', 'echo', 'notify_change', 'region_lookup'], 'the policy\'s tools; execute_code hidden');
      assert.equal(H.resultText(await client.callTool({ name: 'echo', arguments: { message: `via ${mode}` } })), `via ${mode}`);
      const e = await rejectsWith(client.callTool({ name: 'execute_code', arguments: { code: 'rm -rf /' } }), -32001, 'execute_code');
      assert.match(e.message, /no code execution through the gateway/);
      await client.close();
      const recs = since(fx, mark);
      assert.deepEqual(mentions(recs, 'execute_code'), [], 'execute_code never reached the upstream');
      assert.equal(callsOf(recs, 'echo').length, 1);
      assert.ok(recs.every((r) => r.method === 'POST' && r.headers['mcp-session-id'] === undefined),
        `stateless upstream traffic only: ${recs.map((r) => `${r.method} ${r.body?.method}`).join(', ')}`);
    });

    // The client mirrors region into Mcp-Param-Region; tollgate passes it on (rebuilt from the
    // body once it knows the schema), and the upstream's own SEP-2243 check agrees.
    test(`${mode}: region_lookup (an x-mcp-header argument) works`, async () => {
      const client = await sdk2(mode, 'pin');
      assert.equal(H.resultText(await client.callTool({ name: 'region_lookup', arguments: { region: 'eu-west' } })), 'region eu-west');
      await client.close();
    });
  }

  test('contrast, server-everything (2025 only): the gateway\'s own upstream session serves the pinned client', async () => {
    const client = await sdk2('everything', 'pin');
    assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
    const names = (await client.listTools()).tools.map((x) => x.name);
    assert.ok(names.includes('echo'), names.join(' '));
    assert.match(H.resultText(await client.callTool({ name: 'echo', arguments: { message: 'contrast' } })), /contrast/);
    await client.close();
  });
});

// ---------------------------------------------------------------------------------------------------

describe('the headers an upstream gets are rebuilt from the body', () => {
  for (const mode of MODES) {
    test(`${mode}: a base64 Mcp-Name arrives as a plain mcp-name; no session id; odd client headers are not copied`, async () => {
      const fx = fixtureOf(mode);
      const mark = fx.records().length;
      const body = toolCall('echo', { message: 'rebuilt' });
      const r = await post(mode, body, [
        ['MCP-Protocol-Version', MODERN], ['Mcp-Method', 'tools/call'], ['Mcp-Name', b64('echo')],
        ['Mcp-Extra', 'x'], ['X-Client-Odd', 'y'],
      ]);
      assert.equal(r.status, 200, r.text);
      assert.equal(H.resultText(r.json?.result), 'rebuilt', r.text);
      const [up, ...more] = callsOf(since(fx, mark), 'echo');
      assert.equal(more.length, 0);
      assert.ok(up, 'the call reached the upstream');
      const names = up.rawHeaders.map(([k]) => k);
      assert.deepEqual(up.rawHeaders.filter(([k]) => k === 'mcp-name'), [['mcp-name', 'echo']], 'one plain mcp-name, equal to the body\'s name');
      assert.equal(up.headers['mcp-protocol-version'], MODERN);
      assert.equal(up.headers['mcp-method'], 'tools/call');
      assert.equal(names.filter((k) => k === 'mcp-method').length, 1);
      assert.equal(names.filter((k) => k === 'mcp-protocol-version').length, 1);
      assert.equal(up.headers['mcp-session-id'], undefined, 'no session id upstream');
      assert.equal(up.headers['mcp-extra'], undefined, 'Mcp-Extra not copied');
      assert.equal(up.headers['x-client-odd'], undefined, 'X-Client-Odd not copied');
      assert.equal(up.headers.authorization, undefined, 'the client\'s bearer token not copied');
      assert.equal(up.body.params.name, 'echo');
    });

    test(`${mode}: a name that must travel base64-encoded is sent upstream base64-encoded`, async () => {
      // A tool name outside the policy would be refused before the upstream; a prompt name can
      // be any string and this policy's prompts group allows them all: prompts/get with a non-ASCII name
      // (the fixture has no such prompt, so its answer is an error; the headers are the point).
      const fx = fixtureOf(mode);
      const mark = fx.records().length;
      const name = 'prompt ünïcode ';
      const r = await post(mode, { jsonrpc: '2.0', id: nextId++, method: 'prompts/get', params: { name, _meta: META } },
        [['MCP-Protocol-Version', MODERN], ['Mcp-Method', 'prompts/get'], ['Mcp-Name', b64(name)]]);
      assert.equal(r.status === 200 || r.status === 400 || r.status === 404, true, r.text);
      const up = since(fx, mark).find((x) => x.body?.method === 'prompts/get');
      assert.ok(up, `prompts/get reached the upstream: ${r.text}`);
      assert.equal(up.headers['mcp-name'], b64(name), 'encoded, since the value has non-ASCII and a trailing space');
    });

    // Mcp-Param-*: once a tools/list through tollgate showed region_lookup's schema, the header
    // is checked against the arguments (a mismatch is refused here, never sent) and rebuilt from
    // the body for the upstream; a header the schema does not mark goes as it came.
    test(`${mode}: Mcp-Param-Region checked against the arguments and rebuilt upstream`, async () => {
      const fx = fixtureOf(mode);
      const list = await post(mode, { jsonrpc: '2.0', id: nextId++, method: 'tools/list', params: { _meta: META } },
        std('tools/list'));
      assert.ok(list.json?.result?.tools?.some((t) => t.name === 'region_lookup'), list.text);
      let mark = fx.records().length;
      const ok = await post(mode, toolCall('region_lookup', { region: 'eu-west' }),
        [...std('tools/call', 'region_lookup'), ['Mcp-Param-Region', '=?base64?' + Buffer.from('eu-west').toString('base64') + '?='],
          ['Mcp-Param-Unmarked', 'as-is']]);
      assert.equal(ok.status, 200, ok.text);
      assert.equal(ok.json?.error, undefined, ok.text);
      const [up] = callsOf(since(fx, mark), 'region_lookup');
      assert.ok(up, 'the call reached the upstream');
      assert.equal(up.headers['mcp-param-region'], 'eu-west', 'rebuilt from the body, plain');
      assert.equal(up.headers['mcp-param-unmarked'], 'as-is', 'an unrecognised Mcp-Param-* is forwarded');
      mark = fx.records().length;
      const bad = await post(mode, toolCall('region_lookup', { region: 'eu-west' }),
        [...std('tools/call', 'region_lookup'), ['Mcp-Param-Region', 'us-east']]);
      assert.equal(bad.status, 400, bad.text);
      assert.equal(bad.json?.error?.code, -32020, bad.text);
      const missing = await post(mode, toolCall('region_lookup', { region: 'eu-west' }), std('tools/call', 'region_lookup'));
      assert.equal(missing.status, 400, missing.text);
      assert.equal(missing.json?.error?.code, -32020, missing.text);
      assert.deepEqual(callsOf(since(fx, mark), 'region_lookup'), [], 'nothing refused reached the upstream');
    });
  }
});

// ---------------------------------------------------------------------------------------------------

describe('header tricks: refused, and nothing reaches the upstream', () => {
  // Each case carries a body calling execute_code (denied) with headers that try to make it
  // look like something else, or headers that disagree with the body in another way.
  const EXEC = () => toolCall('execute_code', { code: 'cat /etc/shadow' });
  const V = ['MCP-Protocol-Version', MODERN];
  const M = ['Mcp-Method', 'tools/call'];
  const HM = [400, -32020]; // header mismatch
  const cases = [
    ['Mcp-Name: echo over a body calling execute_code', EXEC, [V, M, ['Mcp-Name', 'echo']], HM],
    ['Mcp-Name: base64 of echo over execute_code', EXEC, [V, M, ['Mcp-Name', b64('echo')]], HM],
    ['Mcp-Name missing', EXEC, [V, M], HM],
    ['Mcp-Method: Tools/Call (the value is case-sensitive)', EXEC, [V, ['Mcp-Method', 'Tools/Call'], ['Mcp-Name', 'execute_code']], HM],
    ['Mcp-Method: TOOLS/CALL', EXEC, [V, ['Mcp-Method', 'TOOLS/CALL'], ['Mcp-Name', 'execute_code']], HM],
    ['Mcp-Method: tools/list over tools/call', EXEC, [V, ['Mcp-Method', 'tools/list'], ['Mcp-Name', 'execute_code']], HM],
    ['Mcp-Method missing', EXEC, [V, ['Mcp-Name', 'execute_code']], HM],
    ['Mcp-Name twice (execute_code, echo)', EXEC, [V, M, ['Mcp-Name', 'execute_code'], ['Mcp-Name', 'echo']], HM],
    ['Mcp-Name twice (echo, execute_code)', EXEC, [V, M, ['Mcp-Name', 'echo'], ['Mcp-Name', 'execute_code']], HM],
    ['Mcp-Name twice, the same value', EXEC, [V, M, ['Mcp-Name', 'execute_code'], ['Mcp-Name', 'execute_code']], HM],
    ['Mcp-Method twice', EXEC, [V, M, M, ['Mcp-Name', 'execute_code']], HM],
    ['Mcp-Name comma-joined: echo, execute_code', EXEC, [V, M, ['Mcp-Name', 'echo, execute_code']], HM],
    ['Mcp-Name comma-joined: execute_code,echo', EXEC, [V, M, ['Mcp-Name', 'execute_code,echo']], HM],
    ['Mcp-Method comma-joined', EXEC, [V, ['Mcp-Method', 'tools/call, tools/list'], ['Mcp-Name', 'execute_code']], HM],
    ['MCP-Protocol-Version 2025-11-25 beside a 2026-07-28 _meta', EXEC, [['MCP-Protocol-Version', '2025-11-25'], M, ['Mcp-Name', 'execute_code']], HM],
    ['MCP-Protocol-Version missing', EXEC, [M, ['Mcp-Name', 'execute_code']], HM],
    ['MCP-Protocol-Version twice', EXEC, [V, V, M, ['Mcp-Name', 'execute_code']], HM],
    // Headers that agree with the body pass the check; the policy then decides from the body.
    ['header names in odd case (mcp-METHOD, MCP-NAME): the policy decides', EXEC,
      [['mcp-protocol-VERSION', MODERN], ['mcp-METHOD', 'tools/call'], ['MCP-NAME', 'execute_code']], [200, -32001]],
  ];

  // Header values node:http will not send: written as bytes.
  const byteCases = [
    ['Mcp-Name with a control character (execute_code\\x01)', ['Mcp-Name: execute_code\x01']],
    ['Mcp-Name with DEL (execute_code\\x7f)', ['Mcp-Name: execute_code\x7f']],
    ['Mcp-Name with raw UTF-8 (not base64-encoded)', ['Mcp-Name: execute_cod\u00c3\u00a9']],
    ['Mcp-Name: echo\\x00 (a NUL after a harmless name)', ['Mcp-Name: echo\x00execute_code']],
  ];

  for (const mode of MODES) {
    for (const [what, lines] of byteCases) {
      test(`${mode}: ${what}`, async () => {
        const fx = fixtureOf(mode);
        const mark = fx.records().length;
        const r = await postBytes(mode, EXEC(), [`MCP-Protocol-Version: ${MODERN}`, 'Mcp-Method: tools/call', ...lines]);
        // llhttp refuses control characters in a header value before MCP sees the request
        // (400/-32600 "malformed HTTP"); what gets past it is checked as a header value (-32020).
        assert.equal(r.status, 400, r.text);
        assert.ok([-32020, -32600].includes(r.json?.error?.code), r.text);
        assert.deepEqual(since(fx, mark), [], 'nothing reached the upstream');
      });
    }

    for (const [what, body, headers, want] of cases) {
      test(`${mode}: ${what}`, async () => {
        const fx = fixtureOf(mode);
        const mark = fx.records().length;
        const r = await post(mode, body(), headers);
        assert.equal(r.status, want[0], r.text);
        assert.equal(r.json?.error?.code, want[1], r.text);
        assert.equal(r.json?.result, undefined, r.text);
        assert.deepEqual(since(fx, mark), [], 'nothing reached the upstream');
      });
    }

    // The spec removed Mcp-Session-Id in 2026-07-28 and says to ignore it; tollgate serves such a
    // request statelessly (classified by its body) and never passes the id on. A real 2025
    // session of the same grant makes no difference: the policy decides from the body.
    test(`${mode}: a 2026 request carrying a legacy Mcp-Session-Id: decided from the body, the id never upstream`, async () => {
      const fx = fixtureOf(mode);
      let sid = 'not-a-session';
      if (mode === 'dual') {
        const init = await post(mode, H.initializeBody(1, '2025-11-25'));
        assert.equal(init.status, 200, init.text);
        sid = init.headers['mcp-session-id'];
        assert.ok(sid, 'a 2025 session');
      }
      const mark = fx.records().length;
      const denied = await post(mode, EXEC(), [...std('tools/call', 'execute_code'), ['Mcp-Session-Id', sid]]);
      assert.equal(denied.json?.error?.code, -32001, denied.text);
      assert.deepEqual(since(fx, mark), [], 'nothing reached the upstream');
      const ok = await post(mode, toolCall('echo', { message: 'sid' }), [...std('tools/call', 'echo'), ['Mcp-Session-Id', sid]]);
      assert.equal(H.resultText(ok.json?.result), 'sid', ok.text);
      const recs = since(fx, mark);
      assert.equal(recs.length, 1, JSON.stringify(recs));
      assert.equal(recs[0].headers['mcp-session-id'], undefined, 'the legacy session id is not passed on');
      assert.equal(recs[0].headers['mcp-name'], 'echo');
    });
  }

  test('after every trick, still nothing with execute_code reached either upstream', async () => {
    await H.quietFor(200); // a negative check: nothing arrives late
    for (const fx of [dual, strict]) assert.deepEqual(mentions(fx.records(), 'execute_code'), []);
  });
});

// ---------------------------------------------------------------------------------------------------

describe('2025 clients through tollgate', () => {
  const clients = [
    ['SDK 1.x', (name, opts) => sdk1(name, opts)],
    ['SDK 2.4.0 legacy mode', async (name, { onToolsChanged } = {}) => {
      const client = await sdk2(name, 'legacy');
      if (onToolsChanged) client.setNotificationHandler('notifications/tools/list_changed', onToolsChanged);
      return { client, elicitations: client.elicitations, close: () => client.close() };
    }],
  ];

  for (const [what, connect] of clients) {
    test(`${what} to the dual upstream: session, tools/list, echo, ask_name elicitation, list_changed`, async () => {
      const mark = dual.records().length;
      let changed = 0;
      const c = await connect('dual', { onToolsChanged: () => { changed++; } });
      const { client } = c;
      const names = (await client.listTools()).tools.map((x) => x.name).sort();
      assert.deepEqual(names, ['ask_name', 'echo', 'notify_change', 'region_lookup']);
      assert.equal(H.resultText(await client.callTool({ name: 'echo', arguments: { message: what } })), what);
      // A real elicitation/create on the session, answered by the client's handler.
      assert.equal(H.resultText(await client.callTool({ name: 'ask_name', arguments: {} })), 'hello Ada');
      assert.equal(c.elicitations.length, 1);
      assert.equal(c.elicitations[0].message, 'What is your name?');
      // In 2025 region_lookup is a plain call (no Mcp-Param headers in that era).
      assert.equal(H.resultText(await client.callTool({ name: 'region_lookup', arguments: { region: 'eu' } })), 'region eu');
      await rejectsWith(client.callTool({ name: 'execute_code', arguments: { code: '1' } }), -32001, 'execute_code');

      // list_changed comes on the GET stream: wait until tollgate opened it upstream, then each
      // notify_change sends one (call again only if the first went out before the stream was
      // attached).
      await H.waitUntil(() => since(dual, mark).some((r) => r.method === 'GET'), { what: 'the session\'s GET stream upstream' });
      await H.waitUntil(async () => {
        if (changed === 0) await client.callTool({ name: 'notify_change', arguments: {} });
        return changed > 0;
      }, { timeout: 10000, interval: 100, what: 'notifications/tools/list_changed on the 2025 session' });
      await c.close();

      const recs = since(dual, mark);
      assert.equal(recs[0]?.body?.method, 'initialize', 'a 2025 session upstream');
      assert.ok(recs.slice(1).filter((r) => r.method === 'POST').every((r) => r.headers['mcp-session-id']), 'every later POST in the session');
      assert.deepEqual(mentions(recs, 'execute_code'), []);
      const answer = recs.find((r) => r.body && !r.body.method && 'result' in r.body);
      assert.deepEqual(answer?.body.result, { action: 'accept', content: { name: 'Ada' } }, 'the elicitation answer went upstream');
    });

    // A 2026-only upstream: tollgate answers initialize from its server/discover, sends each
    // request as a 2026 one (the client's capabilities as _meta, the headers from the body),
    // turns input_required into a real elicitation/create on the client's stream and retries
    // upstream, and relays list changes through a subscriptions/listen standing in for GET.
    test(`${what} to the 2026-only upstream: bridged; tools/list, echo, ask_name elicitation, list_changed`, async () => {
      const mark = strict.records().length;
      let changed = 0;
      const c = await connect('strict', { onToolsChanged: () => { changed++; } });
      const { client } = c;
      const names = (await client.listTools()).tools.map((x) => x.name).sort();
      assert.deepEqual(names, ['ask_name', 'echo', 'notify_change', 'region_lookup']);
      assert.equal(H.resultText(await client.callTool({ name: 'echo', arguments: { message: what } })), what);
      assert.equal(H.resultText(await client.callTool({ name: 'ask_name', arguments: {} })), 'hello Ada');
      assert.equal(c.elicitations.length, 1);
      assert.equal(c.elicitations[0].message, 'What is your name?');
      await rejectsWith(client.callTool({ name: 'execute_code', arguments: { code: '1' } }), -32001, 'execute_code');
      await H.waitUntil(() => since(strict, mark).some((r) => r.body?.method === 'subscriptions/listen'),
        { what: 'the listen standing in for the GET stream upstream' });
      await H.waitUntil(async () => {
        if (changed === 0) await client.callTool({ name: 'notify_change', arguments: {} });
        return changed > 0;
      }, { timeout: 10000, interval: 100, what: 'notifications/tools/list_changed on the bridged session' });
      await c.close();
      const recs = since(strict, mark);
      assert.ok(recs.every((r) => r.body?.method !== 'initialize'), 'no initialize reached the 2026-only upstream');
      assert.ok(recs.every((r) => r.headers['mcp-session-id'] === undefined), 'no session upstream');
      const calls = recs.filter((r) => r.body?.method === 'tools/call');
      assert.ok(calls.length >= 3);
      for (const r of calls) {
        assert.equal(r.headers['mcp-protocol-version'], '2026-07-28');
        assert.equal(r.body.params._meta?.['io.modelcontextprotocol/protocolVersion'], '2026-07-28');
        assert.ok(r.body.params._meta?.['io.modelcontextprotocol/clientCapabilities']?.elicitation, 'the client\'s capabilities as _meta');
        assert.equal(r.headers['mcp-name'], r.body.params.name);
      }
      const retry = calls.find((r) => r.body.params.name === 'ask_name' && r.body.params.inputResponses);
      assert.ok(retry, 'the gateway retried ask_name upstream with the answer');
      assert.deepEqual(Object.values(retry.body.params.inputResponses)[0], { action: 'accept', content: { name: 'Ada' } });
      assert.deepEqual(mentions(recs, 'execute_code'), []);
    });
  }

  test('SDK 1.x to the 2026-only upstream: resources/subscribe joins the listen standing in for GET; updates arrive; a denied URI is -32001', async () => {
    const { types } = await H.loadSdk();
    const updated = [];
    const c = await H.connectClient(url('strict'), {
      cleanup, headers: { Authorization: `Bearer ${ALICE}` },
      notificationHandlers: [[types.ResourceUpdatedNotificationSchema, (n) => { updated.push(n.params.uri); }]],
    });
    const mark = strict.records().length;
    await H.waitUntil(() => since(strict, mark - 1000).some((r) => r.body?.method === 'subscriptions/listen'),
      { what: 'the listen standing in for the GET stream' });
    await c.client.subscribeResource({ uri: 'test://watched-resource' });
    await H.waitUntil(() => since(strict, mark).some((r) => r.body?.method === 'subscriptions/listen'
      && r.body.params.notifications.resourceSubscriptions?.includes('test://watched-resource')),
    { what: 'a listen upstream with the subscribed resource' });
    await rejectsWith(c.client.subscribeResource({ uri: 'secret://keys' }), -32001, 'a resource the policy denies');
    await H.waitUntil(async () => {
      // touch_resource is the suite grant's (default allow); alice's session hears of the change
      const r = await post('strict', toolCall('touch_resource', { uri: 'test://watched-resource' }),
        std('tools/call', 'touch_resource'), { token: null });
      assert.equal(r.json?.error, undefined, r.text);
      return updated.length > 0;
    }, { timeout: 10000, interval: 200, what: 'notifications/resources/updated on the bridged session' });
    assert.equal(updated[0], 'test://watched-resource');
    await c.close();
  });

  // The session keeps what its client subscribed to: a subscription made before the client
  // opens its GET stream is asked for by the listen that stream makes (it was answered {} and
  // lost before, when the subscribe came first).
  test('a raw 2025 session to the 2026-only upstream subscribes before its GET stream: the stream\'s listen asks for the resource', async () => {
    const init = await post('strict', H.initializeBody(1, '2025-11-25'));
    assert.equal(init.status, 200, init.text);
    const sid = init.headers['mcp-session-id'];
    assert.ok(sid, init.text);
    const hs = [['Mcp-Session-Id', sid], ['MCP-Protocol-Version', '2025-11-25']];
    const ack = await post('strict', { jsonrpc: '2.0', method: 'notifications/initialized' }, hs);
    assert.equal(ack.status, 202, ack.text);
    const sub = await post('strict', { jsonrpc: '2.0', id: 2, method: 'resources/subscribe', params: { uri: 'test://early-resource' } }, hs);
    assert.deepEqual(sub.json?.result, {}, sub.text);
    // one URI is at most 8 KiB: a longer one is refused before any glob reads it
    const big = await post('strict', { jsonrpc: '2.0', id: 3, method: 'resources/subscribe', params: { uri: `test://${'x'.repeat(70000)}` } }, hs);
    assert.equal(big.json?.error?.code, -32001, big.text.slice(0, 300));
    assert.match(big.json?.error?.message ?? '', /longer than 8192 bytes/);
    // what a session holds this way is bounded (64 KiB of URIs): past it, an error, nothing kept
    let over = null;
    for (let i = 0; i < 9 && over === null; i++) {
      const r = await post('strict', { jsonrpc: '2.0', id: 30 + i, method: 'resources/subscribe', params: { uri: `test://big${i}/${'x'.repeat(8000)}` } }, hs);
      if (r.json?.error) over = r;
      else assert.deepEqual(r.json?.result, {}, r.text.slice(0, 300));
    }
    assert.ok(over, 'nine subscriptions of 8 KB were all kept, past the 64 KiB a session may hold');
    assert.equal(over.json.error.code, -32602, over.text.slice(0, 300));
    for (let i = 0; i < 9; i++) // the kept ones go again, so the listen below asks for the early resource only
      await post('strict', { jsonrpc: '2.0', id: 50 + i, method: 'resources/unsubscribe', params: { uri: `test://big${i}/${'x'.repeat(8000)}` } }, hs);
    const mark = strict.records().length;
    const get = http.request({ host: '127.0.0.1', port: gw.plainPort, method: 'GET', path: '/strict/mcp', agent: false, headers: {
      Accept: 'text/event-stream', Authorization: `Bearer ${ALICE}`, 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-11-25' } });
    let status = 0;
    get.on('response', (res) => { status = res.statusCode; res.resume(); });
    get.on('error', () => {});
    get.end();
    try {
      await H.waitUntil(() => since(strict, mark).some((r) => r.body?.method === 'subscriptions/listen'
        && r.body.params.notifications.resourceSubscriptions?.includes('test://early-resource')),
      { what: 'the GET stream\'s listen with the resource subscribed to before it' });
      const listen = since(strict, mark).find((r) => r.body?.method === 'subscriptions/listen');
      assert.deepEqual(listen.body.params.notifications.resourceSubscriptions, ['test://early-resource']);
      await H.waitUntil(() => status !== 0, { what: 'the GET stream\'s answer' });
      assert.equal(status, 200);
    } finally {
      get.destroy();
    }
  });

  test('a raw 2025 initialize to the 2026-only upstream: answered by tollgate from discover, with a session', async () => {
    const mark = strict.records().length;
    const r = await post('strict', H.initializeBody(1, '2025-11-25'));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json?.result?.protocolVersion, '2025-11-25', r.text);
    assert.ok(r.json.result.capabilities?.tools, r.text);
    assert.ok(r.headers['mcp-session-id']);
    assert.deepEqual(since(strict, mark), [], 'nothing reached the upstream');
  });
});

// ---------------------------------------------------------------------------------------------------

// MRTR: input_required through the gateway. ask_name answers input_required with one
// elicitation (key "name") and no requestState of its own, so the gateway mints its envelope.
describe('subscriptions/listen through tollgate (2026 upstreams)', () => {
  for (const mode of MODES) {
    test(`${mode}: resourceSubscriptions the grant may not read never reach the upstream nor the acknowledgement; the rest go in their normal form`, async () => {
      const fx = fixtureOf(mode);
      const mark = fx.records().length;
      const ac = new AbortController();
      const res = await fetch(`http://127.0.0.1:${gw.plainPort}/${mode}/mcp`, {
        method: 'POST', signal: ac.signal,
        headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
          Authorization: `Bearer ${ALICE}`, 'MCP-Protocol-Version': MODERN, 'Mcp-Method': 'subscriptions/listen' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 'sub-1', method: 'subscriptions/listen', params: {
          notifications: { toolsListChanged: true, resourceSubscriptions: ['test://open', 'secret://keys',
            'SECRET://keys', 'secret://keys/%2e%2e/x', 'test://a/..%2Fb', 'TEST://Open/./a//b/..'] }, _meta: META } }),
      });
      assert.equal(res.status, 200);
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      let ack;
      while (ack === undefined) {
        const { value, done } = await reader.read();
        assert.ok(!done, `the stream ended before the acknowledgement: ${buf}`);
        buf += dec.decode(value, { stream: true });
        const d = /^data: (.*)$/m.exec(buf);
        if (d && buf.includes('\n\n')) ack = JSON.parse(d[1]);
      }
      ac.abort();
      assert.equal(ack.method, 'notifications/subscriptions/acknowledged', JSON.stringify(ack));
      assert.equal(ack.params._meta['io.modelcontextprotocol/subscriptionId'], 'sub-1', 'the client\'s id, not tollgate\'s');
      assert.ok(!/secret|%2F/i.test(JSON.stringify(ack)), JSON.stringify(ack));
      const up = since(fx, mark).find((r) => r.body?.method === 'subscriptions/listen');
      assert.ok(up, 'the listen reached the upstream');
      // Decided and sent in the normal form (RFC 3986): case, dot segments and "//" cannot
      // slip past "secret://*", an encoded "/" is refused.
      assert.deepEqual(up.body.params.notifications.resourceSubscriptions, ['test://open', 'test://open/a/']);
    });

    test(`${mode}: resourceSubscriptions that is not a list never reaches the upstream as it was sent`, async () => {
      const fx = fixtureOf(mode);
      for (const subs of [{ a: 'secret://keys' }, 'secret://keys', { 0: 'secret://keys', length: 1 }]) {
        const mark = fx.records().length;
        const ac = new AbortController();
        const res = await fetch(`http://127.0.0.1:${gw.plainPort}/${mode}/mcp`, {
          method: 'POST', signal: ac.signal,
          headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
            Authorization: `Bearer ${ALICE}`, 'MCP-Protocol-Version': MODERN, 'Mcp-Method': 'subscriptions/listen' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 'sub-2', method: 'subscriptions/listen', params: {
            notifications: { toolsListChanged: true, resourceSubscriptions: subs }, _meta: META } }),
        });
        const text = res.status === 200 ? '' : await res.text();
        await H.waitUntil(() => res.status !== 200 || since(fx, mark).some((r) => r.body?.method === 'subscriptions/listen'),
          { what: 'the listen reached the upstream or was refused' });
        ac.abort();
        const up = since(fx, mark).filter((r) => r.body?.method === 'subscriptions/listen');
        assert.ok(!/secret/.test(JSON.stringify(up)), `${JSON.stringify(subs)}: the upstream got ${JSON.stringify(up)} ${text}`);
      }
    });
  }
});

describe('MRTR through tollgate', () => {
  const ADA = { name: { action: 'accept', content: { name: 'Ada' } } };
  const retries = (recs) => recs.filter((r) => r.body?.method === 'tools/call'
    && (r.body.params?.inputResponses !== undefined || r.body.params?.requestState !== undefined));

  /** ask_name's first round: asserts input_required with a gateway requestState; returns the result. */
  async function issue(mode, token = ALICE) {
    const r = await post(mode, toolCall('ask_name', {}, ELICIT_META), std('tools/call', 'ask_name'), { token });
    assert.equal(r.status, 200, r.text);
    const res = r.json?.result;
    assert.equal(res?.resultType, 'input_required', r.text);
    assert.deepEqual(Object.keys(res.inputRequests ?? {}), ['name'], r.text);
    assert.equal(res.inputRequests.name.method, 'elicitation/create');
    assert.ok(typeof res.requestState === 'string' && res.requestState.length > 0,
      `the gateway's envelope as requestState (the upstream gave none): ${r.text}`);
    return res;
  }
  const retry = (mode, requestState, { name = 'ask_name', args = {}, inputResponses = ADA, token = ALICE } = {}) =>
    post(mode, toolCall(name, args, ELICIT_META, { inputResponses, requestState }), std('tools/call', name), { token });

  /** Asserts r was refused -32602 and no retry reached the upstream after mark. */
  function refused(r, fx, mark, what) {
    assert.equal(r.json?.error?.code, -32602, `${what}: ${r.status} ${r.text}`);
    assert.equal(r.json?.result, undefined);
    assert.deepEqual(retries(since(fx, mark)), [], `${what}: no retry reached the upstream`);
  }

  for (const mode of MODES) {
    test(`MRTR ${mode}: the pinned SDK client completes ask_name; the upstream never sees the gateway's envelope`, async () => {
      const fx = fixtureOf(mode);
      const mark = fx.records().length;
      const client = await sdk2(mode, 'pin');
      assert.equal(H.resultText(await client.callTool({ name: 'ask_name', arguments: {} })), 'hello Ada');
      assert.equal(client.elicitations.length, 1);
      await client.close();
      await Promise.all(client.seen.map((e) => e.done));
      const asks = client.seen.filter((e) => e.request?.params?.name === 'ask_name');
      assert.equal(asks.length, 2, 'the call and its retry');
      const first = asks[0].messages.find((m) => m.id === asks[0].request.id)?.result;
      assert.equal(first?.resultType, 'input_required', JSON.stringify(asks[0].messages));
      assert.ok(typeof first.requestState === 'string' && first.requestState.length > 0,
        `the client got a gateway requestState: ${JSON.stringify(first)}`);
      assert.equal(asks[1].request.params.requestState, first.requestState, 'the client echoed it');
      const up = callsOf(since(fx, mark), 'ask_name');
      assert.equal(up.length, 2, 'both rounds reached the upstream');
      assert.deepEqual(up[1].body.params.inputResponses, ADA);
      assert.equal(up[1].body.params.requestState, undefined, 'the gateway minted the envelope, so the upstream gets no state');
    });

    test(`MRTR ${mode}: a retry with its envelope is decided and reaches the upstream; replayed, it is refused`, async () => {
      const fx = fixtureOf(mode);
      const res = await issue(mode);
      const mark = fx.records().length;
      const ok = await retry(mode, res.requestState);
      assert.equal(H.resultText(ok.json?.result), 'hello Ada', ok.text);
      assert.equal(retries(since(fx, mark)).length, 1);
      const mark2 = fx.records().length;
      refused(await retry(mode, res.requestState), fx, mark2, 'the same retry again');
    });

    test(`MRTR ${mode}: a tampered requestState is refused -32602`, async () => {
      const fx = fixtureOf(mode);
      const res = await issue(mode);
      const s = res.requestState;
      const i = Math.floor(s.length / 2);
      const tampered = s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
      const mark = fx.records().length;
      refused(await retry(mode, tampered), fx, mark, 'tampered');
      refused(await retry(mode, s.slice(0, -4)), fx, mark, 'truncated');
    });

    // Needs no envelope issued first: today these retries reach the upstream.
    test(`MRTR ${mode}: a requestState never issued is refused -32602; inputResponses without one never reach the upstream`, async () => {
      const fx = fixtureOf(mode);
      let mark = fx.records().length;
      refused(await retry(mode, 'not-an-envelope'), fx, mark, 'made up');
      // Without any requestState the answers answer nothing tollgate issued: they are dropped
      // and the call goes as a first round, so the upstream asks again.
      mark = fx.records().length;
      const r = await retry(mode, undefined);
      assert.equal(r.json?.result?.resultType, 'input_required', r.text);
      const up = callsOf(since(fx, mark), 'ask_name');
      assert.equal(up.length, 1, 'a first round reached the upstream');
      assert.equal(up[0].body.params.inputResponses, undefined, 'the unissued answers were dropped');
    });

    test(`MRTR ${mode}: input the client did not declare is 400/-32021 with requiredCapabilities`, async () => {
      const r = await post(mode, toolCall('ask_name', {}), std('tools/call', 'ask_name')); // clientCapabilities: {}
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json?.error?.code, -32021, r.text);
      // The SDK server refuses first (its own -32021, relayed with its status); had it asked anyway,
      // tollgate would have (core/mcp/mrtr.c, unit.core.mcp.mrtr).
      assert.ok(r.json.error.data?.requiredCapabilities?.elicitation, r.text);
    });

    test(`MRTR ${mode}: a call of two rounds costs one token: the retry is judged again but reserves nothing`, async () => {
      const first = await post(mode, toolCall('ask_name', {}, ELICIT_META), std('tools/call', 'ask_name'), { token: CAROL });
      const res = first.json?.result;
      assert.equal(res?.resultType, 'input_required', first.text);
      const done = await retry(mode, res.requestState, { token: CAROL });
      assert.equal(H.resultText(done.json?.result), 'hello Ada', done.text);
      const again = await post(mode, toolCall('ask_name', {}, ELICIT_META), std('tools/call', 'ask_name'), { token: CAROL });
      assert.equal(again.json?.error?.code, -32002, `the budget of 1 was used by the first call: ${again.text}`);
    });

    test(`MRTR ${mode}: another grant's requestState is refused -32602`, async () => {
      const fx = fixtureOf(mode);
      const res = await issue(mode, ALICE);
      const mark = fx.records().length;
      refused(await retry(mode, res.requestState, { token: BOB }), fx, mark, 'bob retries alice\'s');
    });

    test(`MRTR ${mode}: a retry with changed arguments is refused -32602`, async () => {
      const fx = fixtureOf(mode);
      const res = await issue(mode);
      const mark = fx.records().length;
      refused(await retry(mode, res.requestState, { args: { extra: 'smuggled' } }), fx, mark, 'changed arguments');
    });

    test(`MRTR ${mode}: a retry naming another tool is refused -32602`, async () => {
      const fx = fixtureOf(mode);
      const res = await issue(mode);
      const mark = fx.records().length;
      refused(await retry(mode, res.requestState, { name: 'echo', args: {} }), fx, mark, 'ask_name\'s envelope on echo');
      refused(await retry(mode, res.requestState, { name: 'execute_code', args: {} }), fx, mark, 'on execute_code');
      assert.deepEqual(mentions(fx.records(), 'execute_code'), []);
    });

    test(`MRTR ${mode}: inputResponses with a key never issued is refused -32602`, async () => {
      const fx = fixtureOf(mode);
      const res = await issue(mode);
      const mark = fx.records().length;
      const extra = { ...ADA, confirm: { action: 'accept', content: { ok: true } } };
      refused(await retry(mode, res.requestState, { inputResponses: extra }), fx, mark, 'an extra key');
      refused(await retry(mode, res.requestState, { inputResponses: { other: ADA.name } }), fx, mark, 'only a key never issued');
    });
  }
});
