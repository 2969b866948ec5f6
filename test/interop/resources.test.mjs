// Resources, prompts and completions under a deny-by-default policy, through tollgate to
// @modelcontextprotocol/server-everything (pinned, Streamable HTTP, a 2025 upstream), with the
// official SDK client:
//   1. reads and lists: resources/read, prompts/get, completion/complete are decided; the
//      resources, templates and prompts lists show only what the grant may use; a policy
//      without resources/prompts rules follows its default (deny) for them;
//   2. URIs are decided in their RFC 3986 normal form, and the upstream is sent that form:
//      "..", "%2e%2e", "//", mixed-case scheme and host cannot reach past a glob, "%2F" is
//      refused, "*" stays in one path segment;
//   3. resources/subscribe is decided on a 2025 upstream too (Streamable HTTP and stdio), and
//      the upstream subscribes to the normal form;
//   4. a notifications/resources/updated for a URI the grant may no longer read (the policy
//      was reloaded) never reaches the client's GET stream, while one it may read does.
//
//   node --test test/interop/resources.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import * as H from './lib/harness.mjs';

H.requireNodeModules();

const cleanup = new H.Cleanup();
let dir;
let ev; // server-everything
let gw; // tollgate
let policyFile; // the reloadable policy of upstream "ev"

const logs = () => ({ 'tollgate process': gw?.status(), 'tollgate stderr': gw?.stderr(), 'server-everything output': ev?.output() });
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

const everythingEntry = path.join(H.NODE_MODULES, '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const DOC = 'demo://resource/static/document/architecture.md';
const DOC2 = 'demo://resource/static/document/features.md';
const TEXT3 = 'demo://resource/dynamic/text/3';
const BLOB5 = 'demo://resource/dynamic/blob/5';

const POLICY = {
  version: '1',
  default: 'deny',
  tools: { 'toggle-subscriber-updates': { action: 'allow' }, echo: { action: 'allow' } },
  resources: {
    allow: ['demo://resource/static/document/*', 'demo://resource/dynamic/text/*'],
    deny: ['*/secret/*', '*/structure.md'],
  },
  prompts: { allow: ['simple-prompt', 'completable-prompt'] },
};
// The same after a reload that takes the static documents away.
const POLICY_TIGHTER = { ...POLICY, resources: { allow: ['demo://resource/dynamic/text/*'] } };

function writePolicy(file, p) {
  fs.writeFileSync(file, JSON.stringify(p, null, 2) + '\n');
}

async function denied(p, what, code = -32001) {
  let err;
  try {
    const r = await p;
    assert.fail(`${what}: expected error ${code}, got a result: ${JSON.stringify(r).slice(0, 300)}`);
  } catch (e) {
    err = e;
  }
  assert.equal(err.code, code, `${what}: ${err.message}`);
  return err;
}

async function reloadPolicy(p) {
  writePolicy(policyFile, p);
  const n = (gw.stderr().match(/configuration reloaded/g) ?? []).length;
  process.kill(gw.proc.pid, 'SIGHUP');
  await H.waitUntil(() => gw.exit !== null || (gw.stderr().match(/configuration reloaded/g) ?? []).length > n,
    { what: 'tollgate logged "configuration reloaded"' });
  assert.equal(gw.exit, null, 'tollgate still runs after the reload');
}

before(async () => {
  dir = H.makeTempDir(cleanup);
  ev = await H.startEverything({ cleanup });
  policyFile = path.join(dir, 'ev.json');
  writePolicy(policyFile, POLICY);
  const bare = path.join(dir, 'bare.json');
  writePolicy(bare, { version: '1', default: 'deny', tools: { echo: { action: 'allow' } } });
  const conf = H.writeConf(dir, {
    upstreams: [
      { name: 'ev', url: ev.url, policy: policyFile },
      { name: 'bare', url: ev.url, policy: bare },
      { name: 'evstdio', command: [process.execPath, everythingEntry, 'stdio'], policy: policyFile },
    ],
  });
  gw = await H.startTollgate(conf, { cleanup });
});

after(() => cleanup.run());

const url = (up) => `http://127.0.0.1:${gw.plainPort}/${up}/mcp`;

describe('1. reads and lists under default deny', () => {
  let c;
  let direct;
  before(async () => {
    c = await H.connectClient(url('ev'), { cleanup });
    direct = await H.connectClient(ev.url, { cleanup });
  });

  test('lists show only what the grant may use (the upstream lists more)', async () => {
    const all = (await direct.client.listResources()).resources.map((r) => r.uri);
    const seen = (await c.client.listResources()).resources.map((r) => r.uri);
    const hidden = 'demo://resource/static/document/structure.md';
    assert.ok(all.includes(hidden) && all.includes(DOC), `the upstream lists: ${all}`);
    assert.deepEqual(seen, all.filter((u) => u !== hidden), 'the list less the denied document');

    const tAll = (await direct.client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
    const tSeen = (await c.client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
    assert.ok(tAll.includes('demo://resource/dynamic/blob/{resourceId}'), tAll.join(', '));
    assert.deepEqual(tSeen, ['demo://resource/dynamic/text/{resourceId}']);

    const pAll = (await direct.client.listPrompts()).prompts.map((p) => p.name);
    const pSeen = (await c.client.listPrompts()).prompts.map((p) => p.name).sort();
    assert.ok(pAll.includes('args-prompt'), pAll.join(', '));
    assert.deepEqual(pSeen, ['completable-prompt', 'simple-prompt']);
  });

  test('resources/read, prompts/get and completion/complete are decided', async () => {
    const r = await c.client.readResource({ uri: DOC });
    assert.equal(r.contents[0].uri, DOC);
    assert.match((await c.client.readResource({ uri: TEXT3 })).contents[0].text, /^Resource 3:/);
    await denied(c.client.readResource({ uri: BLOB5 }), 'a resource no rule allows');
    await denied(c.client.readResource({ uri: 'demo://resource/static/document/secret/x' }), 'a denied resource');
    assert.ok((await c.client.getPrompt({ name: 'simple-prompt' })).messages.length > 0);
    await denied(c.client.getPrompt({ name: 'args-prompt', arguments: { city: 'Bern' } }), 'a prompt no rule allows');
    const ok = await c.client.complete({ ref: { type: 'ref/prompt', name: 'completable-prompt' },
      argument: { name: 'department', value: 'Eng' } });
    assert.deepEqual(ok.completion.values, ['Engineering']);
    await denied(c.client.complete({ ref: { type: 'ref/prompt', name: 'args-prompt' },
      argument: { name: 'city', value: 'B' } }), 'completion of a denied prompt');
    const t = await c.client.complete({ ref: { type: 'ref/resource', uri: 'demo://resource/dynamic/text/{resourceId}' },
      argument: { name: 'resourceId', value: '1' } });
    assert.ok(Array.isArray(t.completion.values), JSON.stringify(t));
    await denied(c.client.complete({ ref: { type: 'ref/resource', uri: 'demo://resource/dynamic/blob/{resourceId}' },
      argument: { name: 'resourceId', value: '1' } }), 'completion of a denied template');
  });

  test('a policy without resources or prompts rules follows its default: deny, and lists are empty', async () => {
    const b = await H.connectClient(url('bare'), { cleanup });
    const e = await denied(b.client.readResource({ uri: DOC }), 'read without a resources group');
    assert.match(e.message, /no "resources" rules; the policy's default is deny/);
    await denied(b.client.getPrompt({ name: 'simple-prompt' }), 'prompt without a prompts group');
    await denied(b.client.complete({ ref: { type: 'ref/prompt', name: 'completable-prompt' },
      argument: { name: 'department', value: 'Eng' } }), 'completion without a prompts group');
    assert.deepEqual((await b.client.listResources()).resources, []);
    assert.deepEqual((await b.client.listResourceTemplates()).resourceTemplates, []);
    assert.deepEqual((await b.client.listPrompts()).prompts, []);
    assert.match(H.resultText(await b.client.callTool({ name: 'echo', arguments: { message: 'still' } })), /still/);
    await b.close();
  });
});

describe('2. URIs are decided and forwarded in their normal form', () => {
  let c;
  before(async () => { c = await H.connectClient(url('ev'), { cleanup }); });

  test('dot segments, %2e%2e, // and case cannot climb past a glob', async () => {
    for (const uri of [
      'demo://resource/static/document/../../dynamic/blob/5',
      'demo://resource/static/document/%2e%2e/%2E%2e/dynamic/blob/5',
      'demo://resource/static/document/.%2e/%2e./dynamic/blob/5',
      'demo://resource/static/document/sub/../../../dynamic/blob/5',
    ]) {
      const e = await denied(c.client.readResource({ uri }), uri);
      assert.match(e.message, /demo:\/\/resource\/dynamic\/blob\/5/, `decided as its normal form: ${e.message}`);
    }
    const e = await denied(c.client.readResource({ uri: 'demo://resource/static/document/..%2F..%2Fdynamic/blob/5' }), '%2F');
    assert.match(e.message, /refused: it holds an encoded "\/" \(%2F\)/);
    await denied(c.client.readResource({ uri: 'demo://resource/static/document/a%5c..' }), '%5C');
    await denied(c.client.readResource({ uri: 'demo://resource/static/document/x?f=../../y' }), '.. in the query');
    await denied(c.client.readResource({ uri: '/etc/passwd' }), 'no scheme');
  });

  test('"*" stays in one path segment', async () => {
    await denied(c.client.readResource({ uri: 'demo://resource/static/document/a/architecture.md' }), 'two segments under *');
  });

  test('the upstream reads the normal form: the answer names it', async () => {
    for (const uri of [
      'DEMO://RESOURCE/static/document/architecture.md',
      'demo://resource/static/document/x/../architecture.md',
      'demo://resource/static//document/%61rchitecture.md',
    ]) {
      const r = await c.client.readResource({ uri });
      assert.equal(r.contents[0].uri, DOC, `${uri} was read as ${r.contents[0].uri}`);
    }
  });
});

for (const [up, how] of [['ev', 'Streamable HTTP'], ['evstdio', 'stdio']]) describe(`3 and 4. subscriptions on a 2025 upstream over ${how}`, () => {
  test('resources/subscribe is decided; updates the grant may no longer read never reach the GET stream', async () => {
    const updates = [];
    let onUpdate = () => {};
    const { types } = await H.loadSdk();
    const c = await H.connectClient(url(up), {
      cleanup,
      notificationHandlers: [[types.ResourceUpdatedNotificationSchema, (n) => { updates.push(n.params.uri); onUpdate(); }]],
    });
    const both = (want) => new Promise((resolve) => {
      onUpdate = () => { if (want.every((u) => updates.includes(u))) resolve(); };
      onUpdate();
    });
    const toggle = async (what) => {
      const r = await c.client.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
      assert.match(H.resultText(r), what);
    };
    await denied(c.client.subscribeResource({ uri: BLOB5 }), 'subscribe to a resource no rule allows');
    await denied(c.client.subscribeResource({ uri: 'demo://resource/static/document/%2e%2e/%2e%2e/dynamic/blob/5' }),
      'subscribe through %2e%2e');
    // DOC2 first: the upstream sends updates in the order of its subscriptions, so by the time
    // TEXT3's arrives, DOC2's would have come before it on the same stream.
    await c.client.subscribeResource({ uri: 'demo://resource/static/document/./features.md' });
    await c.client.subscribeResource({ uri: 'DEMO://resource/dynamic//text/3' });
    try {
      // While both are readable, both updates come, each naming the normal form the upstream
      // was subscribed to.
      let got = both([DOC2, TEXT3]);
      await toggle(/Started/i);
      await H.within(got, H.scaled(10000), `updates of ${DOC2} and ${TEXT3}`);
      await toggle(/Stopped/i);
      assert.deepEqual([...new Set(updates)].sort(), [DOC2, TEXT3].sort());
      // The policy takes the documents away: their updates stop at the gateway.
      await reloadPolicy(POLICY_TIGHTER);
      updates.length = 0;
      got = both([TEXT3]);
      await toggle(/Started/i);
      await H.within(got, H.scaled(10000), `an update of ${TEXT3}`);
      assert.deepEqual([...new Set(updates)], [TEXT3], 'only the readable resource\'s updates reach the client');
      await toggle(/Stopped/i);
    } finally {
      await reloadPolicy(POLICY);
      await c.close();
    }
  });
});
