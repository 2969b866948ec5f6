// The older official conformance suite, @modelcontextprotocol/conformance 0.1.16 (npm alias
// `conformance-0116` in test/package.json, beside the pinned 0.2.0-alpha.12), directly against the
// era2026 fixture and through tollgate in front of it. 0.1.16 knows only 2025 wire: each scenario
// makes its own 2025-11-25 session (initialize), so through tollgate these are 2025 clients.
//
// `conformance server --url URL --suite all -o DIR` runs its 32 server scenarios (the default
// "active" suite leaves out the two pending ones, json-schema-2020-12 and server-sse-polling) and
// ends with the suite's own count, "Total: P passed, F failed": the SUCCESS and FAILURE checks
// over all scenarios. "47 of 47" is that count: 44 checks in 31 scenarios, plus server-sse-polling's
// three (priming event, retry field, disconnect-resume), which need the fixture's --sse-polling
// (an event store on its 2025 sessions; test_reconnection ends its POST stream before answering).
//
// The fixture runs with --sse-polling (the 2026 tests use it without; conformance2026.test.mjs).
// Tollgate has it twice: upstream "dual" with `protocol = "auto"` (probed), and "dual25" with
// `protocol = "2025"` (the same server, not probed); and "strict", the fixture with --legacy
// reject (2026-07-28 only). The suite sends no Authorization header, so it is the anonymous grant
// "suite", whose per-grant policy allows everything (the upstreams' own policy denies everything:
// a check that passes went through the grant's policy).
//
//   - direct: 47 of 47 (the suite's "Total: 47 passed, 0 failed"), 32 scenarios, no WARNING;
//   - the probe calls the --sse-polling fixture dual-era (its initialize answer starts with a
//     SEP-1699 priming event with empty data: the probe must look past it);
//   - through "dual" (auto): every scenario gives the checks it gives direct, 47 of 47;
//   - through "dual25" (2025): the same checks as direct, 47 of 47;
//   - through "strict" (the era bridge; direct, initialize is refused and all but one check
//     fail): no check fails (42 passed; the SSE polling and multiple-streams checks are INFO,
//     since the bridge answers JSON), logging included (setLevel goes as _meta logLevel).
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/conformance0116.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import { startEra2026 } from './lib/conformance2026.mjs';

H.requireNodeModules();
const PACKAGE = path.join(H.NODE_MODULES, 'conformance-0116');
const BIN = path.join(PACKAGE, 'dist', 'index.js');
if (!fs.existsSync(BIN)) {
  throw new Error(`interop tests: ${path.relative(H.REPO_ROOT, BIN)} is missing; ` +
    'install the pinned test dependencies with:  npm ci --prefix test');
}
const VERSION = JSON.parse(fs.readFileSync(path.join(PACKAGE, 'package.json'), 'utf8')).version;

/** What the pinned 0.1.16 gives a server that passes everything: `Total: 47 passed, 0 failed`. */
const ALL_CHECKS = 47;
const ALL_SCENARIOS = 32;

const cleanup = new H.Cleanup();
let dir;
let gw;
let fx; // the era2026 fixture, --sse-polling
let strict; // the era2026 fixture, --legacy reject (2026-07-28 only)
let verdict; // the probe's era for "dual"
const runs = {}; // 'direct' | 'dual' | 'dual25' -> result

const logs = () => ({ 'tollgate stderr': gw?.stderr(), 'era2026 fixture': fx?.output(), 'strict fixture': strict?.output() });
const test = (name, fn) => it(name, H.withLogs(logs, fn));
const url = (name) => `http://127.0.0.1:${gw.plainPort}/${name}/mcp`;

/**
 * Runs `conformance server --url URL --suite all -o DIR` (0.1.16) on this Node and reads every
 * scenario's DIR/server-<scenario>-<timestamp>/checks.json. Resolves (never rejects on failed
 * checks) with { code, command, output, total: {passed, failed} (the suite's own summary line),
 * passed, failed, warnings (counted here over every check), checks: [{scenario, id, status,
 * errorMessage, note (details.message or the description)}], scenarios: {name: {passed, failed, warnings}} }.
 */
async function runSuite(target, tag) {
  const outDir = path.join(dir, `results-${tag}`);
  fs.mkdirSync(outDir, { recursive: true });
  const args = [BIN, 'server', '--url', target, '--suite', 'all', '-o', outDir];
  const child = spawn(process.execPath, args, {
    cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
  });
  let output = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (d) => { output += d; });
  child.stderr.on('data', (d) => { output += d; });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
  }, 120000);
  const code = await new Promise((resolve) => child.once('exit', (c, sig) => resolve(c ?? sig)));
  clearTimeout(timer);
  output = output.replace(/\x1b\[[0-9;]*m/g, '');

  const checks = [];
  const scenarios = {};
  for (const d of fs.readdirSync(outDir).sort()) {
    const m = /^server-(.+)-(\d{4}-\d\d-\d\dT[\d-]+Z)$/.exec(d);
    const file = path.join(outDir, d, 'checks.json');
    if (!m || !fs.existsSync(file)) continue;
    const list = JSON.parse(fs.readFileSync(file, 'utf8'));
    const n = (st) => list.filter((c) => c.status === st).length;
    scenarios[m[1]] = { passed: n('SUCCESS'), failed: n('FAILURE'), warnings: n('WARNING') };
    for (const c of list) {
      checks.push({ scenario: m[1], id: c.id, status: c.status, errorMessage: c.errorMessage,
        note: typeof c.details?.message === 'string' ? c.details.message : c.description });
    }
  }
  const count = (st) => checks.filter((c) => c.status === st).length;
  const t = /Total: (\d+) passed, (\d+) failed/.exec(output);
  return {
    code: timedOut ? 'timeout' : code,
    command: ['node', path.relative(H.REPO_ROOT, BIN), ...args.slice(1)].join(' '),
    output,
    total: t ? { passed: Number(t[1]), failed: Number(t[2]) } : null,
    passed: count('SUCCESS'), failed: count('FAILURE'), warnings: count('WARNING'),
    checks, scenarios,
  };
}

/** The ids of the INFO checks that trace requests, responses and events. */
const TRACE = /^(incoming|outgoing)-|^stream-closed$|^server-info$/;

/** Every scenario's verdicts (the non-INFO checks: INFO is the suite's trace of requests), by id. */
function verdicts(r) {
  const out = {};
  for (const c of r.checks) {
    if (c.status === 'INFO') continue;
    ((out[c.scenario] ??= {})[c.id] ??= []).push(c.status);
  }
  for (const s of Object.keys(r.scenarios)) out[s] ??= {};
  return out;
}

/** How `th` differs from the baseline `d`, one line per check (empty: the same verdicts). */
function differences(d, th) {
  const a = verdicts(d);
  const b = verdicts(th);
  const lines = [];
  for (const s of new Set([...Object.keys(a), ...Object.keys(b)])) {
    if (!b[s]) { lines.push(`${s}: not run through tollgate`); continue; }
    if (!a[s]) { lines.push(`${s}: not run direct`); continue; }
    for (const id of new Set([...Object.keys(a[s]), ...Object.keys(b[s])])) {
      const x = (a[s][id] ?? []).sort().join(',');
      const y = (b[s][id] ?? []).sort().join(',');
      if (x === y) continue;
      // Its checks through tollgate, and for a check gone missing the scenario's INFO notes
      // (e.g. "Server returned JSON ..."), not the trace of requests.
      const why = th.checks.filter((c) => c.scenario === s && c.status !== 'SUCCESS'
        && (c.id === id || (!b[s][id] && !TRACE.test(c.id))))
        .map((c) => `${c.status} ${c.errorMessage ?? c.note ?? ''}`.trim());
      lines.push(`${s} ${id}: direct [${x || 'none'}], through [${y || 'none'}]${why.length ? `: ${why.join(' | ')}` : ''}`);
    }
  }
  return lines;
}

/** The checks that did not pass (FAILURE or WARNING), as readable text. */
const problems = (r) => r.checks.filter((c) => c.status === 'FAILURE' || c.status === 'WARNING')
  .map((c) => `${c.scenario} ${c.id} ${c.status}: ${c.errorMessage ?? ''}`).join('\n');

function report(t, what, r) {
  t.diagnostic(`${what}: ${r.command}`);
  t.diagnostic(`${what}: suite's summary "Total: ${r.total?.passed} passed, ${r.total?.failed} failed"; `
    + `${Object.keys(r.scenarios).length} scenarios, ${r.warnings} warnings; exit ${r.code}`);
  for (const [name, s] of Object.entries(r.scenarios)) {
    if (s.failed || s.warnings) t.diagnostic(`  ${name}: ${s.passed} passed, ${s.failed} failed, ${s.warnings} warnings`);
  }
}

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-conf0116-');
  fx = await startEra2026({ cleanup, args: ['--sse-polling'], logFile: path.join(dir, 'era2026.log') });
  strict = await startEra2026({ cleanup, args: ['--legacy', 'reject'] });
  const closed = path.join(dir, 'closed.json');
  fs.writeFileSync(closed, '{"version":"1","default":"deny"}\n');
  const suite = path.join(dir, 'suite.json');
  fs.writeFileSync(suite, '{"version":"1","default":"allow"}\n');
  const conf = H.writeConf(dir, {
    grants: [{
      name: 'suite', anonymous: true,
      policies: ['dual', 'dual25', 'strict'].map((upstream) => ({ upstream, policy: suite })),
    }],
    upstreams: [
      { name: 'dual', url: fx.url, policy: closed, protocol: 'auto' },
      { name: 'dual25', url: fx.url, policy: closed, protocol: '2025' },
      { name: 'strict', url: strict.url, policy: closed, protocol: '2026' },
    ],
  });
  gw = await H.startTollgate(conf, { cleanup });
  verdict = (await gw.waitForLog(/msg="upstream protocol" upstream=dual era=(\S+)/, { what: 'the probe\'s verdict on dual' }))[1];
  // 2025 requests that come before an upstream's verdict are served as 2025 (README, Upstream eras).
  await gw.waitForLog(/msg="upstream protocol" upstream=strict era=2026-07-28/, { what: 'strict\'s server/discover' });
  runs.direct = await runSuite(fx.url, 'direct');
  runs.dual = await runSuite(url('dual'), 'dual');
  runs.dual25 = await runSuite(url('dual25'), 'dual25');
  runs.strict = await runSuite(url('strict'), 'strict');
});

after(() => cleanup.run());

describe(`conformance ${VERSION} server suite (--suite all), direct and through tollgate`, () => {
  test('the alias installs 0.1.16', () => {
    assert.equal(VERSION, '0.1.16');
  });

  test(`direct: ${ALL_CHECKS} of ${ALL_CHECKS} checks pass in all ${ALL_SCENARIOS} scenarios, no warning`, (t) => {
    const r = runs.direct;
    report(t, 'direct', r);
    const why = `${problems(r)}\n${r.output.slice(-3000)}`;
    assert.deepEqual(r.total, { passed: ALL_CHECKS, failed: 0 }, `the suite's own count\n${why}`);
    assert.equal(r.passed, ALL_CHECKS, why);
    assert.equal(r.failed, 0, why);
    assert.equal(r.warnings, 0, why);
    assert.equal(Object.keys(r.scenarios).length, ALL_SCENARIOS, Object.keys(r.scenarios).join(' '));
    assert.equal(r.code, 0, why);
    assert.deepEqual(r.scenarios['server-sse-polling'], { passed: 3, failed: 0, warnings: 0 });
  });

  // A dual-era upstream whose 2025 initialize is answered on an event stream that starts with a
  // SEP-1699 priming event (the SDK does this for 2025-11-25 whenever it has an event store).
  test('the probe calls the --sse-polling fixture dual-era', () => {
    assert.equal(verdict, 'dual', 'upstream/probe.c answer_of() parses the first `data:` line of the probe\'s '
      + 'initialize answer, which is the priming event\'s empty data, so the initialize looks failed and '
      + 'the dual-era upstream is taken for 2026-only; 2025 clients then go through the era bridge');
  });

  for (const [name, protocol] of [['dual', 'auto'], ['dual25', '2025']]) {
    test(`through tollgate, upstream ${name} (protocol ${protocol}): every scenario gives the checks it gives direct`, (t) => {
      const r = runs[name];
      report(t, `through ${name}`, r);
      const lost = differences(runs.direct, r);
      const hint = name === 'dual' && verdict !== 'dual'
        ? `\n(the probe took the upstream for ${verdict}, so these 2025 clients went through the era bridge; see the probe test)` : '';
      assert.deepEqual(lost, [], `through ${name} differs from direct:\n${lost.join('\n')}${hint}`);
      assert.deepEqual(r.total, runs.direct.total, `the suite's own count\n${r.output.slice(-2000)}`);
      assert.equal(r.code, 0);
    });
  }

  // The era bridge (README, "2025 -> 2026 only"): the suite's 2025 sessions to an upstream that
  // refuses initialize (direct, every scenario fails there). Tollgate answers JSON, so the SSE
  // polling and multiple-streams checks are INFO ("not applicable"), not failures; no check may
  // fail; tools-call-with-logging passes because the session's setLevel level goes with each
  // request as _meta io.modelcontextprotocol/logLevel (a 2026 upstream logs only when asked).
  test('through tollgate to a 2026-only upstream (the era bridge): no check fails', (t) => {
    const r = runs.strict;
    report(t, 'through strict (bridge)', r);
    assert.equal(Object.keys(r.scenarios).length, ALL_SCENARIOS, Object.keys(r.scenarios).join(' '));
    assert.equal(r.failed, 0, `${problems(r)}\n(tools-call-with-logging: logging/setLevel is not carried to the 2026 upstream as `
      + '_meta io.modelcontextprotocol/logLevel; core/gate/dispatch.c bridged_lifecycle, core/mcp/era.c tg_mcp_add_claim)');
    assert.equal(r.warnings, 0, problems(r));
  });
});
