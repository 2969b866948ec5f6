// Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned in
// test/package.json) against a Streamable HTTP URL and reads its per-check results. For a server
// directly or for tollgate in front of one: the caller passes the URL.
//
//   const r = await runConformance('http://127.0.0.1:PORT/mcp', { requirements: '2026-07-28', dir });
//   r.failed === 0 && r.scenariosMissing.length === 0
//
// The command, with the pinned Node (process.execPath) and the package's own bin script:
//   conformance server --url URL --requirements REV -o DIR --timeout MS
// `--requirements REV` runs the scenarios the revision requires (frozen at its release, run at its
// wire: 2026-07-28 stateless, 2025-11-25 with initialize and sessions) plus its `not_scored`
// ones. Its exit status is 1 when a required scenario has a FAILURE check, else 0 (not_scored
// scenarios never change it). Each scenario writes DIR/server-<scenario>-<timestamp>/checks.json:
// [{id, name, description, status: SUCCESS|FAILURE|WARNING|SKIPPED|INFO, errorMessage?, details?}]
// with the scenario's own checks and its wire-schema checks (every message the server sent,
// validated against the revision's JSON schema).

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { REPO_ROOT, TEST_DIR, sleep, stopChild } from './harness.mjs';

const NODE_MODULES = path.join(TEST_DIR, 'node_modules');
export const ERA2026_FIXTURE = path.join(TEST_DIR, 'fixtures', 'era2026', 'server.mjs');
export const CONFORMANCE_PACKAGE = path.join(NODE_MODULES, '@modelcontextprotocol', 'conformance');
/**
 * The suite's command, the package's own bin script. Not test/node_modules/.bin/conformance: the
 * alias conformance-0116 (0.1.16, conformance0116.test.mjs) has a bin of the same name, and which
 * of the two npm links there depends on its link order.
 */
export const CONFORMANCE_BIN = path.join(CONFORMANCE_PACKAGE, 'dist', 'index.js');

// The suite's own YAML parser (a dependency of the package, not of ours).
const parseYaml = (text) => createRequire(path.join(CONFORMANCE_PACKAGE, 'package.json'))('yaml').parse(text);

/**
 * The scenarios `revision` requires of a server, and those it runs without scoring
 * ([{scenario, reason}]), from the package's requirements/REV.yaml.
 */
export function requirementSet(revision) {
  const file = path.join(CONFORMANCE_PACKAGE, 'requirements', `${revision}.yaml`);
  const y = parseYaml(fs.readFileSync(file, 'utf8'));
  return {
    scored: [...(y.server ?? [])],
    notScored: (y.not_scored ?? []).filter((e) => e.leg === 'server').map((e) => ({ scenario: e.scenario, reason: e.reason })),
  };
}

const count = (checks, status) => checks.filter((c) => c.status === status).length;

/**
 * Runs the suite against `url` and resolves (never rejects on check failures) with
 *   { code, command, output,
 *     passed, failed, warnings, skipped,      // over the scored scenarios' checks
 *     checks: [{scenario, scored, id, status, errorMessage}],   // every check of every scenario
 *     scenarios: {name: {scored, reason?, passed, failed, warnings, skipped, info}},
 *     scenariosMissing: [names of scored scenarios that wrote no checks.json] }
 * Options: requirements (default '2026-07-28'), dir (where results go; default a temp dir,
 * removed unless keep), timeoutMs (per scenario, default 30000), totalTimeoutMs (the whole run,
 * default 240000; the child is killed and `code` is 'timeout'), env (extra environment).
 */
export async function runConformance(url, opts = {}) {
  const requirements = opts.requirements ?? '2026-07-28';
  const own = opts.dir === undefined;
  const base = opts.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'conformance-'));
  const outDir = path.join(base, `results-${requirements}-${Date.now()}`);
  fs.mkdirSync(outDir, { recursive: true });
  const args = [CONFORMANCE_BIN, 'server', '--url', url, '--requirements', requirements, '-o', outDir,
    '--timeout', String(opts.timeoutMs ?? 30000)];

  const child = spawn(process.execPath, args, {
    cwd: base, stdio: ['ignore', 'pipe', 'pipe'], detached: true,
    env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0', ...opts.env },
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
  }, opts.totalTimeoutMs ?? 240000);
  const exit = await new Promise((resolve) => child.once('exit', (c, sig) => resolve(c ?? sig)));
  clearTimeout(timer);

  const set = requirementSet(requirements);
  const reasons = Object.fromEntries(set.notScored.map((e) => [e.scenario, e.reason]));
  const scenarios = {};
  const checks = [];
  for (const d of fs.readdirSync(outDir)) {
    const m = /^server-(.+)-(\d{4}-\d\d-\d\dT[\d-]+Z)$/.exec(d);
    const file = path.join(outDir, d, 'checks.json');
    if (!m || !fs.existsSync(file)) continue;
    const name = m[1];
    const scored = set.scored.includes(name);
    const list = JSON.parse(fs.readFileSync(file, 'utf8'));
    for (const c of list) checks.push({ scenario: name, scored, id: c.id, status: c.status, errorMessage: c.errorMessage });
    scenarios[name] = {
      scored, ...(reasons[name] ? { reason: reasons[name] } : {}),
      passed: count(list, 'SUCCESS'), failed: count(list, 'FAILURE'), warnings: count(list, 'WARNING'),
      skipped: count(list, 'SKIPPED'), info: count(list, 'INFO'),
    };
  }
  const scoredChecks = checks.filter((c) => c.scored);
  const result = {
    code: timedOut ? 'timeout' : exit,
    command: ['node', path.relative(process.cwd(), CONFORMANCE_BIN), ...args.slice(1)].join(' '),
    output: output.replace(/\x1b\[[0-9;]*m/g, ''),
    passed: count(scoredChecks, 'SUCCESS'),
    failed: count(scoredChecks, 'FAILURE'),
    warnings: count(scoredChecks, 'WARNING'),
    skipped: count(scoredChecks, 'SKIPPED'),
    checks,
    scenarios,
    scenariosMissing: set.scored.filter((s) => !scenarios[s]),
  };
  if (own && !opts.keep) fs.rmSync(base, { recursive: true, force: true });
  return result;
}

/** One line per scenario ("name: 3 passed, 0 failed[, 1 warnings] [not scored: reason]"), for diagnostics. */
export function summarize(r) {
  return Object.entries(r.scenarios).map(([name, s]) => `${name}: ${s.passed} passed, ${s.failed} failed`
    + (s.warnings ? `, ${s.warnings} warnings` : '') + (s.skipped ? `, ${s.skipped} skipped` : '')
    + (s.scored ? '' : ` [not scored: ${s.reason}]`));
}

/** The checks that did not pass (FAILURE or WARNING) of the given scenarios, as readable text. */
export function problems(r, filter = (c) => c.scored) {
  return r.checks.filter((c) => filter(c) && (c.status === 'FAILURE' || c.status === 'WARNING'))
    .map((c) => `${c.scenario} ${c.id} ${c.status}: ${c.errorMessage ?? ''}`).join('\n');
}

/**
 * Starts test/fixtures/era2026/server.mjs on an ephemeral port with `args` (e.g. ['--legacy',
 * 'reject'], ['--bad-header-tool']) and, if `logFile`, --log logFile. Resolves once it printed
 * LISTENING <port>: { proc, port, url, logFile, records() (the request log, parsed), output(), stop() }.
 */
export async function startEra2026({ cleanup, args = [], logFile, timeout = 10000 } = {}) {
  const argv = [ERA2026_FIXTURE, '--port', '0', ...(logFile ? ['--log', logFile] : []), ...args];
  const child = spawn(process.execPath, argv, { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => { out += d; });
  const s = {
    proc: child, logFile, port: undefined, url: undefined,
    output: () => out,
    stop: () => stopChild(child, 2000),
    records: () => (logFile && fs.existsSync(logFile)
      ? fs.readFileSync(logFile, 'utf8').replace(/[^\n]*$/, '').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []),
  };
  cleanup?.add(() => s.stop());
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const ready = new Promise((resolve) => child.stdout.on('data', (d) => {
    out += d;
    const m = /LISTENING (\d+)/.exec(out);
    if (m) resolve(Number(m[1]));
  }));
  const r = await Promise.race([ready, exited, sleep(timeout).then(() => 'timeout')]);
  if (typeof r !== 'number') {
    await s.stop();
    throw new Error(`era2026 fixture ${args.join(' ')} did not start (${JSON.stringify(r)}):\n${out}`);
  }
  s.port = r;
  s.url = `http://127.0.0.1:${r}/mcp`;
  return s;
}
