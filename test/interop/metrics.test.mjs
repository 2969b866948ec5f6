// /metrics follows Prometheus conventions (issue 11, item 6): `promtool check metrics` (Debian's
// prometheus package) finds nothing to say about a live scrape taken after real traffic, and
// every metric family the gateway exports is documented in docs/operations.md.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/metrics.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import * as H from './lib/harness.mjs';

const UPSTREAM_TOKEN = H.randomToken();
const cleanup = new H.Cleanup();
const test = (name, fn) => it(name, { timeout: 30000 }, fn);
let gw;
let scrape;

before(async () => {
  const standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN });
  const dir = H.makeTempDir(cleanup);
  const conf = H.writeConf(dir, {
    listeners: [{}],
    admin: true,
    grants: [{ name: 'local', anonymous: true }],
    upstreams: [{ name: 'cowork', url: standin.url, initialize: 'local', default: true,
      headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` } }],
  });
  gw = await H.startTollgate(conf, { cleanup, admin: true });
  // Traffic, so that counters, the latency histogram and the pools have values.
  const f = H.makeFetch({ cleanup });
  const url = `http://127.0.0.1:${gw.plainPort}/mcp`;
  const init = await H.rawInitialize(f, url);
  const headers = { 'mcp-session-id': init.sessionId, 'mcp-protocol-version': H.PROTOCOL_VERSION };
  for (let i = 0; i < 5; i++) {
    const r = await H.postRaw(f, url, { jsonrpc: '2.0', id: 10 + i, method: 'tools/list' }, headers);
    assert.equal(r.status, 200, r.text);
  }
  const res = await fetch(`http://127.0.0.1:${gw.adminPort}/metrics`);
  assert.equal(res.status, 200);
  scrape = await res.text();
});

after(() => cleanup.run());

describe('/metrics', () => {
  test('promtool check metrics finds nothing to say about a live scrape', () => {
    const r = spawnSync('promtool', ['check', 'metrics'], { input: scrape, encoding: 'utf8' });
    if (r.error) assert.fail(`promtool cannot be run (${r.error.message}): install Debian's prometheus package (scripts/install-deps.sh --test does)`);
    assert.equal(r.status, 0, `promtool: ${r.stdout}${r.stderr}`);
    assert.equal(`${r.stdout}${r.stderr}`.trim(), '', 'no lint finding');
    assert.match(scrape, /^tollgate_upstream_latency_seconds_bucket\{le="\+Inf"\} [1-9]/m, 'the latency histogram has data');
  });

  test('every metric family is documented in docs/operations.md', () => {
    const doc = fs.readFileSync(path.join(H.REPO_ROOT, 'docs', 'operations.md'), 'utf8');
    const families = [...new Set([...scrape.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]))];
    assert.ok(families.length > 20, `${families.length} families`);
    const missing = families.filter((n) => !doc.includes(n));
    assert.deepEqual(missing, [], 'metrics missing from docs/operations.md');
  });

  test('the gateway exits clean', async () => {
    await gw.stop();
    assert.doesNotMatch(gw.stderr(), /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/);
  });
});
