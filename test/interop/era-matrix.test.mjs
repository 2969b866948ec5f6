// The era matrix: every MCP client era against every upstream era, through one tollgate.
//
// Clients (rows):
//   sdk1    @modelcontextprotocol/sdk 1.x, StreamableHTTPClientTransport: 2025 only
//   legacy  @modelcontextprotocol/client 2.4.0, versionNegotiation { mode: 'legacy' }: 2025
//   auto    the same, { mode: 'auto' }: server/discover first, 2026-07-28 if offered
//   pin     the same, { mode: { pin: '2026-07-28' } }: 2026-07-28 or nothing
// Upstreams (columns):
//   dual         test/fixtures/era2026/server.mjs (SDK 2.4.0): 2025 sessions and 2026 stateless
//   strict       the same with --legacy reject: 2026-07-28 only
//   everything   @modelcontextprotocol/server-everything, streamableHttp: 2025 only
//   cowork-http  the CoWork OS stand-in over HTTP, initialize = "local" (it refuses initialize)
//   cowork-stdio the stand-in as a stdio child (it needs initialize, which tollgate forwards)
//
// In every cell, the same five steps: connect, tools/list, a call (echo), an elicitation round
// (where the upstream has a tool that asks the client), a tools/list_changed notification
// (where the upstream can be made to send one). A step ends as one of:
//   ok    it works through tollgate;
//   n/a   the upstream has nothing to exercise it (the note says why);
//   FAIL  an assertion failed (the note says which): the cell's test fails.
// Every cell's row is printed (t.diagnostic), and the whole table at the end.
//
// Why the cells that could look impossible work:
//   - a 2025 client of the 2026-only upstream is bridged: tollgate answers initialize from the
//     upstream's server/discover, sends each request as a 2026 one, turns input_required into
//     real elicitation/create requests on the call's stream (core/bridge/input.c), and stands a
//     subscriptions/listen in for the session's GET stream;
//   - a 2026 client of a 2025 upstream is served on a stateless session per grant and upstream,
//     for which tollgate keeps an upstream session of its own (core/bridge/stateless.c): it declares
//     every input kind there, hands the upstream's elicitation/create to the client as
//     input_required and answers it with the retry; its listen is acknowledged by tollgate and
//     fed from that session's GET stream (core/bridge/listen.c);
//   - tollgate answers server/discover for every upstream, so an `auto` client always lands in
//     2026-07-28.
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/era-matrix.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import { startEra2026 } from './lib/conformance2026.mjs';

H.requireNodeModules();

const MODERN = '2026-07-28';
const STANDIN = path.join(H.TEST_DIR, 'fixtures', 'cowork-os', 'standin.mjs');
const cleanup = new H.Cleanup();
let dir;
let gw;
let dual;
let strict;
let everything;
let standin;
const verdicts = {};
// One grant per client kind: a 2026 client's stateless session is per grant and upstream, so
// no two rows share one.
const TOKENS = { sdk1: 'sdk1-' + H.randomToken(), legacy: 'legacy-' + H.randomToken(), auto: 'auto-' + H.randomToken(), pin: 'pin-' + H.randomToken() };
const STANDIN_TOKEN = 'cowork-' + H.randomToken();

const logs = () => ({
  'tollgate stderr': gw?.stderr(),
  'dual fixture': dual?.output(),
  'strict fixture': strict?.output(),
});
const url = (name) => `http://127.0.0.1:${gw.plainPort}/${name}/mcp`;
const since = (fx, mark) => fx.records().slice(mark);

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-era-matrix-');
  [dual, strict, everything, standin] = await Promise.all([
    startEra2026({ cleanup, logFile: path.join(dir, 'dual.log') }),
    startEra2026({ cleanup, args: ['--legacy', 'reject'], logFile: path.join(dir, 'strict.log') }),
    H.startEverything({ cleanup }),
    H.startStandin({ cleanup, token: STANDIN_TOKEN, logFile: path.join(dir, 'cowork-http.log') }),
  ]);
  const conf = H.writeConf(dir, {
    grants: Object.entries(TOKENS).map(([name, token]) => ({ name, token_sha256: H.sha256hex(token) })),
    upstreams: [ // every one with the harness's pass-everything policy: this file is about eras
      { name: 'dual', url: dual.url },
      { name: 'strict', url: strict.url },
      { name: 'everything', url: everything.url },
      { name: 'cowork-http', url: standin.url, initialize: 'local', headers: { Authorization: `Bearer ${STANDIN_TOKEN}` } },
      { name: 'cowork-stdio', command: [process.execPath, STANDIN, '--stdio', '--log', path.join(dir, 'cowork-stdio.log')] },
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

// ---- the clients: one interface for both SDKs ------------------------------------------------------

const ADA = { action: 'accept', content: { name: 'Ada' } };

/**
 * Connects client kind `kind` to tollgate's /NAME/mcp. Every client declares elicitation and
 * answers every elicitation/create with ADA. Returns
 *   { era: '2025' | '2026', listTools(), callTool(name, args), elicitations: [params...],
 *     changed() (tools/list_changed heard so far), listen(filter) (2026 only), close() }.
 */
async function connect(kind, name) {
  const token = TOKENS[kind];
  const elicitations = [];
  let changed = 0;
  if (kind === 'sdk1') {
    const { types } = await H.loadSdk();
    const c = await H.connectClient(url(name), {
      cleanup, name: 'era-matrix-sdk1',
      headers: { Authorization: `Bearer ${token}` },
      capabilities: { elicitation: {} },
      handlers: [[types.ElicitRequestSchema, async (req) => { elicitations.push(req.params); return ADA; }]],
      notificationHandlers: [[types.ToolListChangedNotificationSchema, () => { changed++; }]],
    });
    return {
      era: '2025', elicitations, changed: () => changed,
      listTools: () => c.client.listTools(),
      callTool: (n, args) => c.client.callTool({ name: n, arguments: args }),
      close: () => c.close(),
    };
  }
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const mode = kind === 'pin' ? { pin: MODERN } : kind; // 'legacy' | 'auto'
  const client = new Client({ name: `era-matrix-${kind}`, version: '1.0.0' },
    { capabilities: { elicitation: {} }, versionNegotiation: { mode } });
  client.setRequestHandler('elicitation/create', async (req) => { elicitations.push(req.params); return ADA; });
  client.setNotificationHandler('notifications/tools/list_changed', () => { changed++; });
  cleanup.add(() => client.close().catch(() => {}));
  // What arrives on the client's listen streams, read beside the SDK (for failure notes).
  const listenSeen = [];
  const listenIds = []; // the ids of the listen requests the SDK sent
  const teeing = async (input, init = {}) => {
    const res = await fetch(input, init);
    if (init.method === 'POST' && typeof init.body === 'string' && init.body.includes('"subscriptions/listen"') && res.body) {
      try { listenIds.push(JSON.parse(init.body).id); } catch { /* not ours */ }
      (async () => {
        let buf = '';
        for await (const chunk of res.clone().body.pipeThrough(new TextDecoderStream())) {
          buf += chunk;
          for (let i; (i = buf.indexOf('\n\n')) >= 0; buf = buf.slice(i + 2)) {
            for (const e of H.parseSse(buf.slice(0, i + 2))) {
              try { listenSeen.push(JSON.parse(e.data)); } catch { listenSeen.push({ unparsable: e.data }); }
            }
          }
        }
      })().catch(() => {});
    }
    return res;
  };
  await client.connect(new StreamableHTTPClientTransport(new URL(url(name)), {
    fetch: teeing, requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }));
  const era = client.getProtocolEra();
  return {
    era: era === 'legacy' ? '2025' : era === undefined ? 'none' : '2026', rawEra: era,
    version: client.getNegotiatedProtocolVersion(), elicitations, changed: () => changed,
    listTools: () => client.listTools(),
    callTool: (n, args) => client.callTool({ name: n, arguments: args }),
    listen: (filter) => client.listen(filter, { timeout: LISTEN_TIMEOUT_MS }),
    listenSeen,
    get lastListenId() { return listenIds.at(-1); },
    close: () => client.close(),
  };
}

// ---- the upstreams -------------------------------------------------------------------------------

const na = (note) => ({ outcome: 'n/a', note });

const SUBSCRIPTION_ID = 'io.modelcontextprotocol/subscriptionId';
const LISTEN_TIMEOUT_MS = 5000; // the SDK's own default is 60 s: a listen that is never acknowledged fails sooner

/** What tollgate sent on the client's listen streams, for failure notes. */
const listenNote = (c) => JSON.stringify(c.listenSeen.slice(-2)).slice(0, 400);

/**
 * A 2026 client's subscriptions/listen for tools/list_changed: resolves with the subscription
 * once the SDK saw the acknowledgement (which it matches on _meta["io.modelcontextprotocol/
 * subscriptionId"], the listen request's id); fails saying what tollgate sent instead.
 */
async function listenTools(c) {
  let sub;
  try {
    sub = await c.listen({ toolsListChanged: true });
  } catch (e) {
    const ack = c.listenSeen.find((m) => m.method === 'notifications/subscriptions/acknowledged');
    const meta = ack?.params?._meta ?? {};
    const why = ack && meta[SUBSCRIPTION_ID] !== c.lastListenId
      ? `tollgate's acknowledgement carries ${SUBSCRIPTION_ID}=${JSON.stringify(meta[SUBSCRIPTION_ID])}, not the listen id `
        + `${JSON.stringify(c.lastListenId)} (its _meta: ${JSON.stringify(meta)})`
      : `on the listen stream: ${listenNote(c)}`;
    assert.fail(`subscriptions/listen not acknowledged for the SDK (${e?.code ?? ''} ${e?.message ?? e}): ${why}`);
  }
  return sub;
}

/**
 * list_changed through the era2026 fixture: notify_change makes it send tools/list_changed to
 * every listener of either era. A 2025 client listens on its session's GET stream (tollgate
 * opens the upstream's, or, for the 2026-only upstream, a subscriptions/listen standing in for
 * it); a 2026 client opens its own subscriptions/listen. Then notify_change is called until one
 * arrives (again only if the first went out before the listener was attached upstream).
 */
async function era2026ListChanged(c, fx, mark) {
  let sub;
  if (c.era === '2026') {
    sub = await listenTools(c);
    assert.equal(sub.honoredFilter?.toolsListChanged, true, `the filter honoured: ${JSON.stringify(sub.honoredFilter)}`);
  } else {
    await H.waitUntil(() => since(fx, mark).some((r) => r.method === 'GET' || r.body?.method === 'subscriptions/listen'),
      { what: 'the session\'s GET stream (or the listen standing in for it) upstream' });
  }
  const before = c.changed();
  await H.waitUntil(async () => {
    if (c.changed() === before) await c.callTool('notify_change', {});
    return c.changed() > before;
  }, { timeout: 10000, interval: 100, what: 'notifications/tools/list_changed' });
  await sub?.close();
}

const ERA2026 = (fx, only2026) => ({
  tools: ['echo', 'ask_name', 'notify_change'],
  async call(c, mark) {
    const message = `hi ${c.kind}`;
    assert.equal(H.resultText(await c.callTool('echo', { message })), message);
    // What the fixture got: the dual-era one each client in its own era (a 2025 session, or a
    // stateless 2026 request); the 2026-only one a 2026 request whatever the client speaks.
    const up = since(fx(), mark).filter((r) => r.body?.method === 'tools/call' && r.body.params?.arguments?.message === message);
    assert.equal(up.length, 1, `the call upstream once: ${JSON.stringify(up)}`);
    const modern = only2026 || c.era === '2026';
    assert.equal(up[0].headers['mcp-protocol-version'] === MODERN, modern, `upstream version ${up[0].headers['mcp-protocol-version']}`);
    assert.equal(up[0].headers['mcp-session-id'] !== undefined, !modern, 'an upstream session id exactly when 2025');
  },
  async elicit(c) {
    const n = c.elicitations.length;
    assert.equal(H.resultText(await c.callTool('ask_name', {})), 'hello Ada');
    assert.equal(c.elicitations.length, n + 1, 'the client was asked once');
    assert.equal(c.elicitations.at(-1).message, 'What is your name?');
  },
  listChanged: (c, mark) => era2026ListChanged(c, fx(), mark),
});

// What the stand-in cannot do, the same over HTTP and stdio.
const STANDIN_NO_ELICIT = 'the CoWork OS stand-in has no tool that asks the client anything (it sends no server-to-client request)';
const STANDIN_NO_CHANGE = 'the stand-in declares tools.listChanged false and never sends list_changed';

/**
 * An upstream that never sends list_changed: nothing to receive, in either era. A 2026 client
 * can still listen (it cannot know the upstream is silent): the listen must be acknowledged,
 * with the tools filter not honoured, since the upstream declares no tools.listChanged.
 */
async function listenOnSilent(c, note, declared) {
  if (c.era !== '2026') return na(note);
  const sub = await listenTools(c);
  const honoured = sub.honoredFilter?.toolsListChanged;
  await sub.close();
  // tollgate honours what the upstream declares (server-everything: tools.listChanged true).
  assert.equal(honoured, declared, `toolsListChanged honoured as the upstream declares: ${JSON.stringify(sub.honoredFilter)}`);
  return na(`${note}; the listen was acknowledged (toolsListChanged ${honoured})`);
}

const UPSTREAMS = {
  dual: { label: 'era2026 dual', ...ERA2026(() => dual, false), fixture: () => dual },
  strict: { label: 'era2026 2026-only', ...ERA2026(() => strict, true), fixture: () => strict },
  everything: {
    label: 'server-everything 2025',
    tools: ['echo'],
    async call(c) {
      assert.match(H.resultText(await c.callTool('echo', { message: `hi ${c.kind}` })), new RegExp(`hi ${c.kind}`));
    },
    async elicit(c) {
      // server-everything registers trigger-elicitation-request only for a session whose client
      // declared elicitation, once initialized: a 2025 client's own session, or the stateless
      // session of a 2026 client's grant, for which tollgate declares every input kind upstream
      // and turns the upstream's elicitation/create into input_required (core/bridge/input.c).
      const names = (await c.listTools()).tools.map((t) => t.name);
      assert.ok(names.includes('trigger-elicitation-request'), `listed: ${names}`);
      const n = c.elicitations.length;
      assert.match(H.resultText(await c.callTool('trigger-elicitation-request', {})), /Name: Ada/);
      assert.equal(c.elicitations.length, n + 1, 'the client was asked once');
      assert.ok(c.elicitations.at(-1).requestedSchema?.properties?.name, 'the requested schema relayed');
    },
    // Its tools/list_changed goes out once, while the session initializes (the conditional
    // tools registered), before any GET stream is open; nothing sends one later.
    listChanged: (c) => listenOnSilent(c,
      'server-everything sends list_changed only during initialize, before a stream is open', true),
  },
  'cowork-http': {
    label: 'CoWork stand-in HTTP (local init)',
    tools: ['echo', 'slow'],
    async call(c) {
      assert.equal(H.resultText(await c.callTool('echo', { text: `hi ${c.kind}` })), `hi ${c.kind}`);
    },
    elicit: () => na(STANDIN_NO_ELICIT),
    listChanged: (c) => listenOnSilent(c, STANDIN_NO_CHANGE, false),
  },
  'cowork-stdio': {
    label: 'CoWork stand-in stdio',
    tools: ['echo', 'slow'],
    async call(c) {
      assert.equal(H.resultText(await c.callTool('echo', { text: `hi ${c.kind}` })), `hi ${c.kind}`);
    },
    elicit: () => na(STANDIN_NO_ELICIT),
    listChanged: (c) => listenOnSilent(c, STANDIN_NO_CHANGE, false),
  },
};

const CLIENTS = ['sdk1', 'legacy', 'auto', 'pin'];
const CLIENT_LABEL = { sdk1: 'SDK 1.x', legacy: 'SDK 2.4 legacy', auto: 'SDK 2.4 auto', pin: 'SDK 2.4 pin 2026' };
const STEPS = ['connect', 'list', 'call', 'elicit', 'listChanged'];
const table = new Map(); // `${client} ${upstream}` -> row

function rowLine(row) {
  return `${CLIENT_LABEL[row.client].padEnd(16)} ${row.upstream.padEnd(12)} era=${(row.era ?? '-').padEnd(4)} `
    + STEPS.map((s) => `${s}=${row[s]?.outcome ?? '-'}`).join(' ')
    + STEPS.filter((s) => row[s]?.note).map((s) => `\n    ${s}: ${row[s].note}`).join('');
}

// ---- the cells -------------------------------------------------------------------------------------

describe('the era matrix', () => {
  test('the probe\'s verdicts: dual, 2026-07-28 (--legacy reject), 2025 (server-everything)', async () => {
    assert.deepEqual(verdicts, { dual: 'dual', strict: '2026-07-28', everything: '2025' });
  });

  for (const kind of CLIENTS) {
    for (const [name, up] of Object.entries(UPSTREAMS)) {
      test(`${CLIENT_LABEL[kind]} x ${up.label}`, async (t) => {
        const row = { client: kind, upstream: name };
        table.set(`${kind} ${name}`, row);
        const errors = [];
        const fx = up.fixture?.();
        const mark = fx?.records().length ?? 0;
        let c;
        const step = async (s, fn) => {
          if (STEPS.indexOf(s) > 0 && !c) return; // not connected: nothing to run
          try {
            row[s] = (await fn()) ?? { outcome: 'ok' };
          } catch (e) {
            row[s] = { outcome: 'FAIL', note: String(e?.message ?? e).split('\n')[0].slice(0, 200) };
            errors.push(`${s}: ${e?.stack ?? e}`);
          }
        };
        await step('connect', async () => {
          c = await connect(kind, name);
          c.kind = kind;
          row.era = c.era;
          // sdk1 and legacy speak 2025; pin 2026-07-28; auto lands in 2026-07-28 everywhere,
          // since tollgate answers server/discover for every upstream (bridged or not).
          assert.equal(c.era, kind === 'sdk1' || kind === 'legacy' ? '2025' : '2026', `era ${c.rawEra}`);
          if (c.era === '2026') assert.equal(c.version, MODERN);
        });
        await step('list', async () => {
          const names = (await c.listTools()).tools.map((x) => x.name);
          for (const n of up.tools) assert.ok(names.includes(n), `${n} listed: ${names}`);
        });
        await step('call', () => up.call(c, mark));
        await step('elicit', () => up.elicit(c));
        await step('listChanged', () => up.listChanged(c, mark));
        await c?.close();
        // The 2026-only upstream never saw an initialize (besides the probe's, before the mark):
        // 2025 clients were bridged, not forwarded.
        const inits = name === 'strict' ? since(fx, mark).filter((r) => r.body?.method === 'initialize') : [];
        if (inits.length) errors.push(`an initialize reached the 2026-only upstream: ${JSON.stringify(inits[0])}`);
        t.diagnostic(rowLine(row));
        if (errors.length) assert.fail(errors.join('\n\n'));
      });
    }
  }

  test('the table', (t) => {
    const lines = [`${'client'.padEnd(16)} ${'upstream'.padEnd(12)} era  ${STEPS.join(' | ')}`];
    for (const kind of CLIENTS) {
      for (const name of Object.keys(UPSTREAMS)) {
        const row = table.get(`${kind} ${name}`);
        lines.push(row ? `${CLIENT_LABEL[kind].padEnd(16)} ${name.padEnd(12)} ${(row.era ?? '-').padEnd(4)} `
          + STEPS.map((s) => (row[s]?.outcome ?? '-').padEnd(s.length)).join(' | ')
          : `${CLIENT_LABEL[kind].padEnd(16)} ${name.padEnd(12)} (did not run)`);
      }
    }
    lines.push('ok: works through tollgate; n/a: the upstream cannot do it (see the cell\'s note); FAIL: see the cell\'s test');
    for (const l of lines) t.diagnostic(l);
    assert.equal(table.size, CLIENTS.length * Object.keys(UPSTREAMS).length, 'every cell ran');
  });
});

function test(name, fn) { return it(name, H.withLogs(logs, fn)); }
