// Users inside a grant: many JWT subjects share one grant (an identity provider puts its users
// in it), and tollgate tells them apart.
//
//   1. counters of scope "subject" are one bucket per user, on every client transport (Streamable
//      HTTP 2025 and 2026, legacy SSE, WebSocket: a long-lived channel's messages count for the
//      user who opened it); a counter of scope "grant" is still shared by all of them
//   2. every audit line and every access-log line names the subject, escaped as other fields are
//   3. a 2025 session belongs to the subject that made it: another user of the same grant, or the
//      same subject name from another issuer, gets 404 for its Mcp-Session-Id on Streamable HTTP
//      (POST, GET, DELETE) and on the legacy SSE /messages?sessionId=
//   4. jwt[].grant: an issuer whose tokens name no grant puts all its users in one
//   5. in a cluster, the shared session record binds the subject: another instance refuses
//      another user too, and subject counters are shared through Redis
//
// Tokens are signed here (RS256, node:crypto) as test/interop/jwt.test.mjs does.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/subjects.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import * as H from './lib/harness.mjs';
import * as C from './lib/cluster.mjs';
import { openClient } from './lib/clients.mjs';

const ISSUER = 'https://idp.test/';
const ISSUER_B = 'https://other-idp.test/'; // also bound to staff: its "alice" is someone else
const ISSUER_C = 'https://users-idp.test/'; // jwt[].grant = "staff": its tokens name no grant
const AUDIENCE = 'tollgate';
const UPSTREAM = 'cowork-os';
const UPSTREAM_TOKEN = H.randomToken();
const STATIC_TOKEN = H.randomToken(); // grant "solo": a static token is its grant's one subject

const cleanup = new H.Cleanup();
let dir;
let key;
let jwksFile;
let standin;
let gw;
let fetchFn;
let auditFile;

const b64u = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

/** A token of grant `team` for subject `sub`, from `iss`. */
function token(sub, { team = 'staff', iss = ISSUER } = {}) {
  const now = Math.floor(Date.now() / 1000);
  const claims = { iss, aud: AUDIENCE, sub, iat: now, exp: now + 600 };
  if (team !== null) claims.team = team;
  const input = `${b64u({ alg: 'RS256', typ: 'JWT', kid: 'k1' })}.${b64u(claims)}`;
  return `${input}.${crypto.sign('sha256', Buffer.from(input), key.privateKey).toString('base64url')}`;
}
const bearer = (t) => ({ authorization: `Bearer ${t}` });

const logs = () => ({ 'tollgate stderr': gw?.stderr(), 'tollgate process': gw?.status() });
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, { timeout: 60000, ...opts }, H.withLogs(logs, fn));
};

/** echo: 2 an hour per user; execute_code: 3 an hour for the grant. */
function writePolicy() {
  const f = path.join(dir, 'staff.json');
  fs.writeFileSync(f, JSON.stringify({
    version: '1', default: 'deny',
    tools: {
      echo: { limits: [{ counter: 'per_user', window: 'hour', max: 2, scope: 'subject' }] },
      execute_code: { limits: [{ counter: 'per_team', window: 'hour', max: 3, scope: 'grant' }] },
    },
  }) + '\n');
  return f;
}

function confOpts(policy, extra = {}) {
  return {
    listeners: [{}],
    log: { access: true },
    jwt: [
      { issuer: ISSUER, audience: AUDIENCE, jwks_file: jwksFile, grant_claim: 'team' },
      { issuer: ISSUER_B, audience: AUDIENCE, jwks_file: jwksFile, grant_claim: 'team' },
      { issuer: ISSUER_C, audience: AUDIENCE, jwks_file: jwksFile, grant: 'staff' },
    ],
    grants: [
      { name: 'staff', issuers: [ISSUER, ISSUER_B, ISSUER_C], policies: [{ upstream: UPSTREAM, policy }] },
      { name: 'solo', token_sha256: H.sha256hex(STATIC_TOKEN), policies: [{ upstream: UPSTREAM, policy }] },
    ],
    upstreams: [{
      name: UPSTREAM, url: standin.url, default: true, initialize: 'local',
      headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` },
    }],
    ...extra,
  };
}

before(async () => {
  H.requireNodeModules();
  dir = H.makeTempDir(cleanup, 'tollgate-subjects-');
  key = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  jwksFile = path.join(dir, 'jwks.json');
  fs.writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...key.publicKey.export({ format: 'jwk' }), kid: 'k1', alg: 'RS256', use: 'sig' }] }) + '\n');
  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  auditFile = path.join(dir, 'audit.jsonl');
  gw = await H.startTollgate(H.writeConf(dir, confOpts(writePolicy(), { audit: { file: auditFile } })), { cleanup, listeners: 1 });
  fetchFn = H.makeFetch({ cleanup });
});
after(() => cleanup.run());

const url = (g = gw) => `http://127.0.0.1:${g.plainPort}/${UPSTREAM}/mcp`;
const codeOf = (a) => a?.error?.code ?? (a?.result?.isError ? 'isError' : undefined);

async function auditLines(pred, n) {
  let got = [];
  await H.waitUntil(() => {
    const text = fs.existsSync(auditFile) ? fs.readFileSync(auditFile, 'utf8') : '';
    got = text.split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter(pred);
    return got.length >= n;
  }, { what: `${n} audit lines`, detail: () => JSON.stringify(got) });
  return got;
}

function logfmt(line) {
  const o = {};
  const unq = (v) => JSON.parse(v.replace(/\\x([0-9a-f]{2})/g, '\\u00$1')); // tollgate writes control bytes as \xNN
  for (const m of line.matchAll(/(\w+)=("(?:[^"\\]|\\.)*"|\S+)/g)) o[m[1]] = m[2].startsWith('"') ? unq(m[2]) : m[2];
  return o;
}

// ---------------------------------------------------------------------------

describe('counters of scope "subject": one bucket per user inside the grant', () => {
  for (const kind of ['streamable', 'stateless', 'sse', 'ws']) {
    test(`${kind}: alice's third echo is limited, bob's first two in the same grant are not; audit lines name each`, async () => {
      const alice = await openClient(kind, { port: gw.plainPort, upstream: UPSTREAM, token: token(`alice-${kind}`) });
      const bob = await openClient(kind, { port: gw.plainPort, upstream: UPSTREAM, token: token(`bob-${kind}`) });
      try {
        for (let i = 0; i < 2; i++) assert.equal(codeOf(await alice.call('echo', { text: `a-${kind}-${i}` })), undefined);
        const third = await alice.call('echo', { text: `a-${kind}-2` });
        assert.equal(codeOf(third), -32002, JSON.stringify(third));
        assert.match(third.error.message, /for this user/);
        for (let i = 0; i < 2; i++) {
          const r = await bob.call('echo', { text: `b-${kind}-${i}` });
          assert.equal(codeOf(r), undefined, `bob's call ${i}: ${JSON.stringify(r)}`);
        }
        assert.equal(codeOf(await bob.call('echo', { text: `b-${kind}-2` })), -32002);
      } finally {
        await alice.close();
        await bob.close();
      }
      const lines = await auditLines((l) => l.tool === 'echo' && (l.subject === `alice-${kind}` || l.subject === `bob-${kind}`) &&
        l.decision !== 'allow', 2);
      for (const l of lines) {
        assert.equal(l.grant, 'staff');
        assert.equal(l.decision, 'limited', JSON.stringify(l));
      }
      const allowed = await auditLines((l) => l.tool === 'echo' && l.subject === `alice-${kind}` && l.decision === 'allow', 2);
      assert.equal(allowed.length, 2, JSON.stringify(allowed));
    });
  }

  for (const kind of ['streamable', 'stateless', 'sse', 'ws']) {
    test(`${kind}: one subject name from two issuers bound to the grant is two users: two buckets`, async () => {
      const sub = `zed-${kind}`;
      const a = await openClient(kind, { port: gw.plainPort, upstream: UPSTREAM, token: token(sub) });
      const b = await openClient(kind, { port: gw.plainPort, upstream: UPSTREAM, token: token(sub, { iss: ISSUER_B }) });
      try {
        for (let i = 0; i < 2; i++) assert.equal(codeOf(await a.call('echo', { text: `za-${kind}-${i}` })), undefined);
        assert.equal(codeOf(await a.call('echo', { text: `za-${kind}-2` })), -32002);
        for (let i = 0; i < 2; i++) {
          const r = await b.call('echo', { text: `zb-${kind}-${i}` });
          assert.equal(codeOf(r), undefined, `the other issuer's ${sub}, call ${i}: ${JSON.stringify(r)}`);
        }
        assert.equal(codeOf(await b.call('echo', { text: `zb-${kind}-2` })), -32002);
      } finally {
        await a.close();
        await b.close();
      }
    });
  }

  test('a counter of scope "grant" is still shared by every user of the grant', async () => {
    const alice = await openClient('streamable', { port: gw.plainPort, upstream: UPSTREAM, token: token('alice-team') });
    const bob = await openClient('streamable', { port: gw.plainPort, upstream: UPSTREAM, token: token('bob-team') });
    const args = (c) => ({ language: 'python', code: c });
    assert.equal(codeOf(await alice.call('execute_code', args('team-1'))), undefined);
    assert.equal(codeOf(await alice.call('execute_code', args('team-2'))), undefined);
    assert.equal(codeOf(await bob.call('execute_code', args('team-3'))), undefined);
    const r = await bob.call('execute_code', args('team-4'));
    assert.equal(codeOf(r), -32002, JSON.stringify(r));
    assert.match(r.error.message, /for this grant/);
    await alice.close();
    await bob.close();
  });

  test('jwt[].grant: tokens that name no grant land in it, each user counted apart', async () => {
    const carol = await openClient('streamable', { port: gw.plainPort, upstream: UPSTREAM, token: token('carol-c', { iss: ISSUER_C, team: null }) });
    const dave = await openClient('streamable', { port: gw.plainPort, upstream: UPSTREAM, token: token('dave-c', { iss: ISSUER_C, team: 'solo' }) });
    for (let i = 0; i < 2; i++) assert.equal(codeOf(await carol.call('echo', { text: `carol-${i}` })), undefined);
    assert.equal(codeOf(await carol.call('echo', { text: 'carol-2' })), -32002);
    assert.equal(codeOf(await dave.call('echo', { text: 'dave-0' })), undefined, 'a grant claim is not read: dave is in staff');
    await carol.close();
    await dave.close();
    const [l] = await auditLines((x) => x.subject === 'dave-c', 1);
    assert.equal(l.grant, 'staff');
  });

  test('a static token is its grant\'s one subject: audit and access lines say so', async () => {
    const from = gw.stderr().length;
    const solo = await openClient('streamable', { port: gw.plainPort, upstream: UPSTREAM, token: STATIC_TOKEN });
    assert.equal(codeOf(await solo.call('echo', { text: 'solo-1' })), undefined);
    await solo.close();
    const [l] = await auditLines((x) => x.grant === 'solo' && x.tool === 'echo', 1);
    assert.equal(l.subject, 'solo');
    await H.waitUntil(() => gw.stderr().slice(from).split('\n').some((x) => /msg="?request/.test(x) && / grant=solo subject=solo /.test(x)),
      { what: 'an access line with grant=solo subject=solo' });
  });

  test('audit (JSON) and access (logfmt) lines carry a subject with quotes, spaces and a newline, escaped', async () => {
    const sub = 'eve "the" admin\nlevel=error';
    const from = gw.stderr().length;
    const eve = await openClient('streamable', { port: gw.plainPort, upstream: UPSTREAM, token: token(sub) });
    assert.equal(codeOf(await eve.call('echo', { text: 'eve' })), undefined);
    await eve.close();
    const [l] = await auditLines((x) => x.subject === sub && x.tool === 'echo', 1);
    assert.equal(l.grant, 'staff');
    let recs = [];
    await H.waitUntil(() => {
      recs = gw.stderr().slice(from).split('\n').filter((x) => /msg="?request/.test(x)).map(logfmt);
      return recs.filter((r) => r.subject === sub).length >= 2;
    }, { what: 'access lines naming eve', detail: () => gw.stderr().slice(from) });
    assert.ok(!gw.stderr().slice(from).split('\n').some((x) => x.startsWith('level=error')), 'the subject cannot forge a log line');
  });
});

describe('a 2025 session belongs to the subject that made it', () => {
  test('Streamable HTTP: bob (same grant) and alice from another issuer get 404 on POST, GET and DELETE; alice goes on', async () => {
    const aliceTok = token('alice-s');
    const s = await H.rawInitialize(fetchFn, url(), bearer(aliceTok));
    const list = { jsonrpc: '2.0', id: 5, method: 'tools/list' };
    const others = { bob: token('bob-s'), 'alice-s from another issuer': token('alice-s', { iss: ISSUER_B }), solo: STATIC_TOKEN };
    for (const [who, tok] of Object.entries(others)) {
      const h = { ...s.headers, ...bearer(tok) };
      const p = await H.postRaw(fetchFn, url(), list, h);
      assert.equal(p.status, 404, `${who} POST: HTTP ${p.status} ${p.text}`);
      assert.equal(p.messages[0]?.error?.message, 'Session not found');
      const call = await H.postRaw(fetchFn, url(), { jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'echo', arguments: { text: `stolen-${who}` } } }, h);
      assert.equal(call.status, 404, `${who} tools/call: HTTP ${call.status}`);
      const g = await fetchFn(url(), { method: 'GET', headers: { ...h, accept: 'text/event-stream' } });
      await g.text();
      assert.equal(g.status, 404, `${who} GET`);
      const d = await fetchFn(url(), { method: 'DELETE', headers: h });
      await d.text();
      assert.equal(d.status, 404, `${who} DELETE`);
    }
    assert.deepEqual(standin.records().filter((r) => String(r.msg?.params?.arguments?.text ?? '').startsWith('stolen-')), [],
      'nothing of theirs reached the upstream');
    // alice still has her session (nobody could delete it), with a fresh token of hers too
    const mine = await H.postRaw(fetchFn, url(), list, { ...s.headers, ...bearer(token('alice-s')) });
    assert.equal(mine.status, 200, mine.text);
    const g = await fetchFn(url(), { method: 'GET', headers: { ...s.headers, accept: 'text/event-stream' } });
    await g.text();
    assert.equal(g.status, 405, 'alice GET: the session is hers (initialize = "local" has no GET stream)');
    const d = await fetchFn(url(), { method: 'DELETE', headers: s.headers });
    await d.text();
    assert.equal(d.status, 200);
  });

  test('legacy SSE: bob\'s POST to alice\'s /messages?sessionId= is 404; alice\'s is 202', async () => {
    const req = http.request({ host: '127.0.0.1', port: gw.plainPort, method: 'GET', path: `/${UPSTREAM}/sse`,
      headers: { ...bearer(token('alice-sse-own')), accept: 'text/event-stream' }, agent: false });
    const endpoint = await new Promise((resolve, reject) => {
      req.on('error', reject);
      req.on('response', (res) => {
        if (res.statusCode !== 200) { reject(new Error(`GET /sse: HTTP ${res.statusCode}`)); return; }
        res.setEncoding('utf8');
        let buf = '';
        res.on('data', (d) => {
          buf += d;
          const m = /event: endpoint\r?\ndata: (\S+)\r?\n\r?\n/.exec(buf);
          if (m) resolve(m[1]);
        });
      });
      req.end();
    });
    try {
      assert.match(endpoint, /\/messages\?sessionId=/);
      const post = (tok, id) => fetchFn(`http://127.0.0.1:${gw.plainPort}${endpoint}`, {
        method: 'POST', headers: { ...bearer(tok), 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id, method: 'initialize',
          params: { protocolVersion: '2024-11-05', capabilities: {}, clientInfo: { name: 't', version: '1' } } }),
      });
      const bob = await post(token('bob-sse-own'), 1);
      assert.equal(bob.status, 404, await bob.text());
      const other = await post(token('alice-sse-own', { iss: ISSUER_B }), 2);
      assert.equal(other.status, 404, 'the same subject name from another issuer');
      const alice = await post(token('alice-sse-own'), 3);
      assert.equal(alice.status, 202, await alice.text());
    } finally {
      req.destroy();
    }
  });
});

describe('cluster: the shared session record binds the subject; subject counters are shared', () => {
  let c;
  before(async () => {
    const sub = path.join(dir, 'cluster');
    fs.mkdirSync(sub);
    c = await C.startCluster({ cleanup, dir: sub, n: 2, adminToken: H.randomToken(), conf: confOpts(writePolicy()) });
  });

  const clogs = () => c?.logs() ?? {};
  const ctest = (name, fn) => it(name, { timeout: 60000 }, H.withLogs(clogs, fn));

  ctest('a session alice made on a is 404 for bob on b (before and after b adopted it), and served to alice on b', async () => {
    const s = await H.rawInitialize(fetchFn, c.instanceUrl(0, UPSTREAM), bearer(token('alice-c')));
    assert.ok(s.sessionId);
    const list = { jsonrpc: '2.0', id: 9, method: 'tools/list' };
    const bob = { ...s.headers, ...bearer(token('bob-c')) };
    const b1 = await H.postRaw(fetchFn, c.instanceUrl(1, UPSTREAM), list, bob);
    assert.equal(b1.status, 404, `bob on b, record not adopted: HTTP ${b1.status} ${b1.text}`);
    const a = await H.postRaw(fetchFn, c.instanceUrl(1, UPSTREAM), list, s.headers);
    assert.equal(a.status, 200, `alice on b: ${a.text}`);
    const b2 = await H.postRaw(fetchFn, c.instanceUrl(1, UPSTREAM), list, bob);
    assert.equal(b2.status, 404, `bob on b, adopted: HTTP ${b2.status}`);
    const b3 = await H.postRaw(fetchFn, c.instanceUrl(0, UPSTREAM), list, bob);
    assert.equal(b3.status, 404, `bob on a: HTTP ${b3.status}`);
    const d = await fetchFn(c.instanceUrl(1, UPSTREAM), { method: 'DELETE', headers: bob });
    await d.text();
    assert.equal(d.status, 404, 'bob cannot end it');
    const again = await H.postRaw(fetchFn, c.instanceUrl(0, UPSTREAM), list, s.headers);
    assert.equal(again.status, 200, 'alice\'s session lives on');
  });

  ctest('alice\'s subject bucket is one across instances (Redis); bob has his own', async () => {
    const a0 = await H.rawInitialize(fetchFn, c.instanceUrl(0, UPSTREAM), bearer(token('alice-cc')));
    const a1 = await H.rawInitialize(fetchFn, c.instanceUrl(1, UPSTREAM), bearer(token('alice-cc')));
    const b1 = await H.rawInitialize(fetchFn, c.instanceUrl(1, UPSTREAM), bearer(token('bob-cc')));
    let id = 100;
    const echo = async (i, s, text) => {
      const r = await H.postRaw(fetchFn, c.instanceUrl(i, UPSTREAM), { jsonrpc: '2.0', id: id++, method: 'tools/call', params: { name: 'echo', arguments: { text } } }, s.headers);
      assert.equal(r.status, 200, r.text);
      return r.messages[0];
    };
    assert.equal(codeOf(await echo(0, a0, 'cc-1')), undefined);
    assert.equal(codeOf(await echo(1, a1, 'cc-2')), undefined);
    const third = await echo(1, a1, 'cc-3');
    assert.equal(codeOf(third), -32002, JSON.stringify(third));
    assert.equal(codeOf(await echo(1, b1, 'cc-bob-1')), undefined);
    // the same subject name from the other issuer: a bucket of its own, in the cluster too
    const o1 = await H.rawInitialize(fetchFn, c.instanceUrl(1, UPSTREAM), bearer(token('alice-cc', { iss: ISSUER_B })));
    assert.equal(codeOf(await echo(1, o1, 'cc-other-1')), undefined);
    assert.equal(codeOf(await echo(1, o1, 'cc-other-2')), undefined);
    assert.equal(codeOf(await echo(1, o1, 'cc-other-3')), -32002);
    const keys = await c.redis.command('KEYS', `${c.keyPrefix}*`);
    assert.ok(!JSON.stringify(keys).includes('alice'), `no subject in a Redis key: ${JSON.stringify(keys)}`);
  });
});
