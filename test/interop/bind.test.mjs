// Arguments the model cannot choose: a policy's "set" and "forbid" bind tool arguments to the
// caller (its grant's attributes, its JWT's claims, its subject), whatever the model sends.
//
//   1. tools/list: bound and forbidden properties are gone from inputSchema.properties and
//      required, as a 2025 and a 2026 client see them
//   2. on every client transport (Streamable HTTP 2025, 2026 stateless, legacy SSE, WebSocket)
//      and both upstream eras (the CoWork OS stand-in, 2025; the era2026 fixture with --legacy
//      reject, 2026-07-28 only): a tenant the model tries to change is overwritten, and the
//      upstream receives the bound value (the stand-in echoes it in its answer; the 2026
//      fixture logs the request, whose Mcp-Param-Region header carries it too); a forbidden
//      argument is removed; the audit line logs the final arguments
//   3. strict: true refuses a different value (-32001, rule "set") and lets the same one pass
//   4. an approver sees (args_text, args_sha256) and approves the final arguments, and the
//      approved call runs with them
//   5. a 2026 call that needs input (input_required): its retry, which resends the model's own
//      arguments, is bound the same way, so the envelope the gateway minted for the bound call
//      opens for it
//   6. a claim-bound argument whose claim the caller's token lacks is denied (-32001, rule
//      "set", the reason naming the claim), and so is a static token (no claims at all)
//
// Tokens are signed here (RS256, node:crypto) as test/interop/subjects.test.mjs does.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/bind.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import * as H from './lib/harness.mjs';
import { startEra2026 } from './lib/conformance2026.mjs';
import { openClient, request, messagesOf, KINDS, META, MODERN, textOf } from './lib/clients.mjs';

const ISSUER = 'https://idp.test/';
const AUDIENCE = 'tollgate';
const STANDIN_TOKEN = H.randomToken();
const STATIC_TOKEN = H.randomToken(); // grant "acme" too, by a static token: no claims
const ADMIN_TOKEN = H.randomToken();

const cleanup = new H.Cleanup();
let dir;
let key;
let standin;
let modern;
let gw;
let auditFile;

const b64u = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

/** A token of grant acme for `sub`, with the claim org unless org is null. */
function token(sub, { org = 'org-7' } = {}) {
  const now = Math.floor(Date.now() / 1000);
  const claims = { iss: ISSUER, aud: AUDIENCE, sub, team: 'acme', iat: now, exp: now + 600 };
  if (org !== null) claims.org = org;
  const input = `${b64u({ alg: 'RS256', typ: 'JWT', kid: 'k1' })}.${b64u(claims)}`;
  return `${input}.${crypto.sign('sha256', Buffer.from(input), key.privateKey).toString('base64url')}`;
}

const logs = () => ({ 'tollgate stderr': gw?.stderr(), 'era2026 fixture': modern?.output() });
const test = (name, fn) => it(name, { timeout: 60000 }, H.withLogs(logs, fn));
const codeOf = (a) => a?.error?.code ?? (a?.result?.isError ? 'isError' : undefined);

const COWORK_POLICY = {
  version: '1', default: 'allow',
  tools: {
    '*': { forbid: ['requestId'] },
    'jira.create_issue': { set: { projectKey: '${grant.tenant}' }, forbid: ['idempotencyKey'] },
    'jira.get_issue': { set: { id: '${claims.org}' }, strict: true },
    write_file: { action: 'approve', approval_mode: 'retry', set: { path: '/tenants/${grant.tenant}/notes.txt' } },
  },
};
const MODERN_POLICY = {
  version: '1', default: 'allow',
  tools: {
    region_lookup: { set: { region: '${grant.region}', query: 'org ${claims.org} for ${subject}' } },
    test_elicitation: { set: { message: 'for ${grant.tenant}' } },
  },
};

before(async () => {
  H.requireNodeModules();
  dir = H.makeTempDir(cleanup, 'tollgate-bind-');
  key = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwksFile = path.join(dir, 'jwks.json');
  fs.writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...key.publicKey.export({ format: 'jwk' }), kid: 'k1', alg: 'RS256', use: 'sig' }] }) + '\n');
  [standin, modern] = await Promise.all([
    H.startStandin({ cleanup, token: STANDIN_TOKEN, logFile: path.join(dir, 'standin.log') }),
    startEra2026({ cleanup, args: ['--legacy', 'reject'], logFile: path.join(dir, 'modern.log') }),
  ]);
  const cowork = path.join(dir, 'cowork.json');
  const mod = path.join(dir, 'modern.json');
  fs.writeFileSync(cowork, JSON.stringify(COWORK_POLICY) + '\n');
  fs.writeFileSync(mod, JSON.stringify(MODERN_POLICY) + '\n');
  auditFile = path.join(dir, 'audit.jsonl');
  gw = await H.startTollgate(H.writeConf(dir, {
    jwt: [{ issuer: ISSUER, audience: AUDIENCE, jwks_file: jwksFile, grant_claim: 'team' }],
    grants: [{
      name: 'acme', issuers: [ISSUER], token_sha256: H.sha256hex(STATIC_TOKEN),
      attributes: { tenant: 'acme', region: 'eu' },
      policies: [{ upstream: 'cowork', policy: cowork }, { upstream: 'modern', policy: mod }],
    }],
    upstreams: [
      { name: 'cowork', url: standin.url, initialize: 'local', headers: { Authorization: `Bearer ${STANDIN_TOKEN}` } },
      { name: 'modern', url: modern.url },
    ],
    audit: { file: auditFile, args: 'values' },
    admin: { token_sha256: H.sha256hex(ADMIN_TOKEN) },
  }), { cleanup, admin: true });
  await gw.waitForLog(/msg="upstream protocol" upstream=modern era=(\S+)/, { what: 'the probe of the 2026 upstream' });
});
after(() => cleanup.run());

async function auditLines(pred, n) {
  let got = [];
  await H.waitUntil(() => {
    const text = fs.existsSync(auditFile) ? fs.readFileSync(auditFile, 'utf8') : '';
    got = text.split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter(pred);
    return got.length >= n;
  }, { what: `${n} audit lines`, detail: () => JSON.stringify(got) });
  return got;
}

/** tools/list through tollgate as a 2025 session (initialize first) or a 2026 stateless request. */
async function listTools(upstream, tok, era) {
  const agent = new http.Agent({ keepAlive: false });
  const url = `/${upstream}/mcp`;
  const base = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${tok}` };
  let h = base;
  const body = { jsonrpc: '2.0', id: 'list', method: 'tools/list', params: {} };
  if (era === 2026) {
    h = { ...base, 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/list' };
    body.params._meta = META;
  } else {
    const init = { jsonrpc: '2.0', id: 'init', method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bind-test', version: '1' } } };
    const r = await request(agent, gw.plainPort, 'POST', url, base, JSON.stringify(init));
    assert.equal(r.status, 200, r.text);
    h = { ...base, 'mcp-protocol-version': '2025-06-18', 'mcp-session-id': r.headers['mcp-session-id'] };
  }
  const r = await request(agent, gw.plainPort, 'POST', url, h, JSON.stringify(body));
  const a = messagesOf(r).find((m) => m?.id === 'list');
  assert.ok(a?.result?.tools, `tools/list ${upstream} (${era}): HTTP ${r.status} ${r.text.slice(0, 300)}`);
  return a.result.tools;
}

describe('tools/list: the model never sees what the policy binds or forbids', () => {
  for (const era of [2025, 2026]) {
    test(`a ${era} client: bound and forbidden properties are gone from properties and required`, async () => {
      const tools = await listTools('cowork', token(`lister-${era}`), era);
      const create = tools.find((t) => t.name === 'jira.create_issue');
      assert.ok(create, JSON.stringify(tools.map((t) => t.name)));
      const props = Object.keys(create.inputSchema.properties);
      for (const gone of ['projectKey', 'idempotencyKey', 'requestId']) assert.ok(!props.includes(gone), `${gone} in ${props}`);
      assert.deepEqual(props.sort(), ['fields', 'issueType']);
      assert.deepEqual(create.inputSchema.required, ['issueType', 'fields']);
      const get = tools.find((t) => t.name === 'jira.get_issue');
      assert.ok(!('id' in get.inputSchema.properties));
      assert.ok(!get.inputSchema.required.includes('id'));
      const echo = tools.find((t) => t.name === 'echo');
      assert.deepEqual(echo.inputSchema.properties, { text: { type: 'string' } }, 'a tool that binds nothing keeps its schema');
      const region = (await listTools('modern', token(`lister-m-${era}`), era)).find((t) => t.name === 'region_lookup');
      assert.ok(region, 'the 2026 upstream lists region_lookup');
      assert.deepEqual(region.inputSchema.properties ?? {}, {}, JSON.stringify(region.inputSchema));
      assert.ok(!(region.inputSchema.required ?? []).includes('region'));
    });
  }
});

describe('a tenant the model tries to change is overwritten, and the upstream gets the bound value', () => {
  for (const kind of KINDS) {
    test(`${kind}, 2025 upstream: projectKey EVIL becomes acme, requestId and idempotencyKey are removed`, async () => {
      const c = await openClient(kind, { port: gw.plainPort, upstream: 'cowork', token: token(`ann-${kind}`) });
      try {
        const r = await c.call('jira.create_issue', {
          projectKey: 'EVIL', issueType: 'Task', fields: { summary: kind }, idempotencyKey: 'k1', requestId: `req-${kind}`,
        });
        assert.equal(codeOf(r), undefined, JSON.stringify(r));
        const env = JSON.parse(textOf(r));
        assert.match(env.data.key, /^acme-/, 'the stand-in made the issue in the bound project');
        assert.equal(env.meta.requestId, undefined, 'the forbidden requestId never reached the upstream');
        assert.deepEqual(env.warnings ?? [], [], 'nor did idempotencyKey');
      } finally {
        await c.close();
      }
      const [l] = await auditLines((x) => x.subject === `ann-${kind}` && x.tool === 'jira.create_issue', 1);
      assert.equal(l.decision, 'allow');
      assert.deepEqual(l.args, { projectKey: 'acme', issueType: 'Task', fields: { summary: kind } }, 'the audit logs the final arguments');
      const digest = crypto.createHash('sha256').update(JSON.stringify(l.args)).digest('hex'); // as written
      assert.equal(l.args_sha256, digest);
    });

    test(`${kind}, 2026 upstream: region us becomes eu, in the body and in the Mcp-Param-Region header`, async () => {
      await listTools('modern', token(`learn-${kind}`), 2025); // the gateway learns which arguments are headers
      const mark = modern.records().length;
      const c = await openClient(kind, { port: gw.plainPort, upstream: 'modern', token: token(`bo-${kind}`) });
      try {
        const r = await c.call('region_lookup', { region: 'us', query: 'anything' });
        assert.equal(codeOf(r), undefined, JSON.stringify(r));
        assert.equal(textOf(r), `region eu: org org-7 for bo-${kind}`);
      } finally {
        await c.close();
      }
      const calls = modern.records().slice(mark).filter((x) => x.body?.method === 'tools/call');
      assert.equal(calls.length, 1, JSON.stringify(calls));
      assert.deepEqual(calls[0].body.params.arguments, { region: 'eu', query: `org org-7 for bo-${kind}` });
      assert.equal(calls[0].headers['mcp-param-region'], 'eu');
    });
  }
});

describe('strict: true refuses another value instead of overwriting it', () => {
  for (const kind of KINDS) {
    test(`${kind}: jira.get_issue with another id is -32001 rule "set"; the bound one, or none, passes`, async () => {
      const c = await openClient(kind, { port: gw.plainPort, upstream: 'cowork', token: token(`cy-${kind}`) });
      try {
        const bad = await c.call('jira.get_issue', { id: 'org-8' });
        assert.equal(codeOf(bad), -32001, JSON.stringify(bad));
        assert.equal(bad.error.data.rule, 'set');
        assert.match(bad.error.data.reason, /argument "id" is set by the policy/);
        for (const args of [{ id: 'org-7' }, {}]) {
          const ok = await c.call('jira.get_issue', args);
          assert.equal(codeOf(ok), undefined, JSON.stringify(ok));
          assert.equal(JSON.parse(textOf(ok)).data.key, 'org-7');
        }
      } finally {
        await c.close();
      }
      const [l] = await auditLines((x) => x.subject === `cy-${kind}` && x.decision === 'deny', 1);
      assert.equal(l.rule, 'set');
    });
  }
});

describe('a claim-bound argument whose claim is missing is denied', () => {
  for (const kind of KINDS) {
    test(`${kind}: a token without "org", and a static token, are refused; nothing reaches the upstream`, async () => {
      const mark = modern.records().length;
      for (const [who, tok] of [['no org claim', token(`di-${kind}`, { org: null })], ['static token', STATIC_TOKEN]]) {
        for (const [up, tool, args] of [['cowork', 'jira.get_issue', {}], ['modern', 'region_lookup', { query: 'q' }]]) {
          const c = await openClient(kind, { port: gw.plainPort, upstream: up, token: tok });
          try {
            const r = await c.call(tool, args);
            assert.equal(codeOf(r), -32001, `${who}, ${tool}: ${JSON.stringify(r)}`);
            assert.equal(r.error.data.rule, 'set');
            assert.match(r.error.data.reason, /carries no claim "org"/);
          } finally {
            await c.close();
          }
        }
      }
      assert.equal(modern.records().slice(mark).filter((x) => x.body?.method === 'tools/call').length, 0);
    });
  }
});

describe('an approver sees and approves the final arguments', () => {
  test('write_file parked for approval shows the bound path; approved, the same call runs with it', async () => {
    const c = await openClient('streamable', { port: gw.plainPort, upstream: 'cowork', token: token('appr') });
    const args = { path: '/etc/passwd', content: 'x' };
    try {
      const first = await c.call('write_file', args);
      assert.equal(codeOf(first), -32003, JSON.stringify(first));
      const id = first.error.data.approval_id;
      const adminGet = async () => {
        const res = await fetch(`http://127.0.0.1:${gw.adminPort}/admin/approvals`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
        return (await res.json()).approvals.find((x) => x.id === id);
      };
      const item = await H.waitUntil(adminGet, { what: 'the parked call in GET /admin/approvals' });
      const shown = JSON.parse(item.args_text);
      assert.deepEqual(shown, { path: '/tenants/acme/notes.txt', content: 'x' });
      assert.equal(item.args_sha256, crypto.createHash('sha256').update(item.args_text).digest('hex'));
      const res = await fetch(`http://127.0.0.1:${gw.adminPort}/admin/approvals/${id}/approve`, {
        method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ digest: item.digest }),
      });
      assert.equal(res.status, 200, await res.text());
      const again = await c.call('write_file', { ...args, path: '/somewhere/else' }); // bound either way: the same call
      assert.equal(codeOf(again), undefined, JSON.stringify(again));
      assert.match(textOf(again), /\/tenants\/acme\/notes\.txt/);
    } finally {
      await c.close();
    }
    const ran = standin.records().filter((r) => r.http && r.msg?.method === 'tools/call' && r.msg.params?.name === 'write_file');
    assert.deepEqual(ran.map((r) => r.msg.params.arguments.path), ['/tenants/acme/notes.txt']);
  });
});

describe('a 2026 call that needs input: the retry is bound as the first round was', () => {
  test('test_elicitation on the 2026 upstream: input_required, then the retry with the model\'s own message completes', async () => {
    const mark = modern.records().length;
    const meta = { ...META, 'io.modelcontextprotocol/clientCapabilities': { elicitation: {} } };
    const post = async (id, params) => {
      const res = await fetch(`http://127.0.0.1:${gw.plainPort}/modern/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream',
          authorization: `Bearer ${token('mrtr')}`, 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'test_elicitation' },
        body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'test_elicitation', ...params, _meta: meta } }),
      });
      const text = await res.text();
      const m = messagesOf({ status: res.status, text, headers: Object.fromEntries(res.headers) }).find((x) => x?.id === id);
      assert.ok(m, `HTTP ${res.status}: ${text}`);
      return m;
    };
    const first = await post('m1', { arguments: { message: 'evil' } });
    assert.equal(first.result?.resultType, 'input_required', JSON.stringify(first));
    const answer = { user: { action: 'accept', content: { username: 'ada', email: 'ada@example.com' } } };
    const second = await post('m2', { arguments: { message: 'evil' }, inputResponses: answer, requestState: first.result.requestState });
    assert.equal(codeOf(second), undefined, JSON.stringify(second));
    assert.match(textOf(second), /User response: action=accept/);
    const calls = modern.records().slice(mark).filter((x) => x.body?.method === 'tools/call');
    assert.equal(calls.length, 2, JSON.stringify(calls));
    for (const c of calls) assert.deepEqual(c.body.params.arguments, { message: 'for acme' });
  });
});
