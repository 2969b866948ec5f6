#!/usr/bin/env node
// Loop stalls as another session sees them. Run through test/bench/stall.sh.
//
// A control session (Streamable HTTP, keep-alive) calls a fast tool on the C fast upstream, one
// call at a time, and records each call's latency (a) at rest, (b) while another session, in a
// process of its own, gets 50 MiB answers from a stdio upstream, (c) the same from an HTTP
// upstream, (d) during 20 SIGHUP reloads of a conf with policies and a TLS listener. The big
// answers come from test/fixtures/hostile/hostile.mjs (tool big_*, arguments.mib), itself in a
// process of its own, so that neither the 50 MiB string nor its parse runs in this process.
//
//   node stall.mjs --bin TOLLGATE --fast TG_BENCH_UPSTREAM [--mib 50] [--big-calls 3] [--rest-ms 3000] [--reloads 20]
//   node stall.mjs big PORT UPSTREAM MIB COUNT        (the other session; prints one JSON line)

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as H from '../interop/lib/harness.mjs';
import { openClient, textOf } from '../interop/lib/clients.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const HOSTILE = path.join(HERE, '..', 'fixtures', 'hostile', 'hostile.mjs');

if (process.argv[2] === 'big') {
  const [port, upstream, mib, count] = process.argv.slice(3);
  const c = await openClient('streamable', { port: Number(port), upstream });
  const out = [];
  for (let i = 0; i < Number(count); i++) {
    const t0 = performance.now();
    const a = await c.call(`big_${i}`, { mib: Number(mib) }, { timeout: 300000 });
    const ms = performance.now() - t0;
    const len = textOf(a)?.length;
    if (len !== Math.round(Number(mib) * 1048576)) {
      process.stdout.write(JSON.stringify({ error: `answer ${i}: ${len} characters, not ${mib} MiB: ${JSON.stringify(a).slice(0, 300)}` }) + '\n');
      process.exit(1);
    }
    out.push(Math.round(ms));
  }
  await c.close();
  process.stdout.write(JSON.stringify({ ms: out }) + '\n');
  process.exit(0);
}

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const BIN = path.resolve(arg('bin', 'build-rel/tollgate'));
const FAST = path.resolve(arg('fast', 'build-rel/test/bench/tg-bench-upstream'));
const MIB = Number(arg('mib', 50));
const BIG_CALLS = Number(arg('big-calls', 3));
const REST_MS = Number(arg('rest-ms', 3000));
const RELOADS = Number(arg('reloads', 20));

const cleanup = new H.Cleanup();
process.on('SIGINT', () => { cleanup.run().finally(() => process.exit(130)); });

/** Spawns a child that prints "LISTENING PORT" on stdout; resolves with its port. */
async function startListening(cmd, args, what) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'], detached: true });
  cleanup.add(() => H.stopChild(child, 2000));
  let out = '';
  child.stdout.setEncoding('utf8');
  const port = await new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => { out += d; const m = /LISTENING (\d+)/.exec(out); if (m) resolve(Number(m[1])); });
    child.once('exit', (code) => reject(new Error(`${what} exited (${code}) before listening: ${out}`)));
  });
  return port;
}

function stats(lat) {
  const a = [...lat].sort((x, y) => x - y);
  const q = (p) => a[Math.min(a.length - 1, Math.ceil(p * a.length) - 1)];
  return { n: a.length, p50: q(0.5), p99: q(0.99), max: a[a.length - 1], over: a.filter((x) => x >= 100).length };
}

try {
  for (const f of [BIN, FAST]) if (!fs.existsSync(f)) throw new Error(`${f} is missing (build: cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j2)`);
  process.env.TOLLGATE_BIN = BIN;
  const dir = H.makeTempDir(cleanup, 'tollgate-stall-');
  const certs = H.makeCerts(dir);
  const fastPort = await startListening(FAST, ['0'], 'the fast upstream');
  const hostilePort = await startListening(process.execPath, [HOSTILE, '--http', '--port', '0'], 'the hostile HTTP upstream');
  const policy = (name, tools) => {
    const f = path.join(dir, `${name}.json`);
    fs.writeFileSync(f, JSON.stringify({ version: '1', default: 'deny', tools }));
    return f;
  };
  const bigTools = Object.fromEntries(Array.from({ length: BIG_CALLS }, (_, i) => [`big_${i}`, {}]));
  const conf = H.writeConf(dir, {
    listeners: [{}, { tls: { cert: certs.cert, key: certs.key } }],
    limits: { response_bytes: Math.max(67108864, Math.ceil(MIB * 1048576 * 1.25)), body_bytes: 1048576, drain_timeout_ms: 2000 },
    upstreams: [
      { name: 'fast', url: `http://127.0.0.1:${fastPort}/mcp`, policy: policy('fast', { echo: {} }) },
      { name: 'hbig', url: `http://127.0.0.1:${hostilePort}/mcp`, call_timeout_ms: 300000, policy: policy('hbig', bigTools) },
      { name: 'sbig', command: [process.execPath, HOSTILE, '--stdio'], call_timeout_ms: 300000, policy: policy('sbig', bigTools) },
    ],
  });
  const gw = await H.startTollgate(conf, { cleanup, listeners: 2 });
  const control = await openClient('streamable', { port: gw.plainPort, upstream: 'fast' });
  cleanup.add(() => control.close());

  /** Calls echo one at a time until done() is true; returns the latencies in ms. */
  async function controlLoop(done) {
    const lat = [];
    while (!done()) {
      const t0 = performance.now();
      const a = await control.call('echo', {}, { timeout: 60000 });
      lat.push(performance.now() - t0);
      if (!a.result) throw new Error(`control call failed: ${JSON.stringify(a)}`);
    }
    return lat;
  }
  for (let i = 0; i < 200; i++) await control.call('echo', {}); // warm up

  const results = [];
  // (a) at rest
  const tRest = Date.now() + REST_MS;
  results.push({ phase: '(a) at rest', ...stats(await controlLoop(() => Date.now() >= tRest)) });

  // (b), (c) a 50 MiB answer in another session, from stdio then HTTP
  for (const [phase, up] of [[`(b) ${MIB} MiB stdio answers`, 'sbig'], [`(c) ${MIB} MiB HTTP answers`, 'hbig']]) {
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), 'big', String(gw.plainPort), up, String(MIB), String(BIG_CALLS)],
      { stdio: ['ignore', 'pipe', 'inherit'] });
    cleanup.add(() => H.stopChild(child, 1000));
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    let exited = false;
    const ended = new Promise((resolve) => child.once('exit', (code) => { exited = true; resolve(code); }));
    const lat = await controlLoop(() => exited);
    const code = await ended;
    let big;
    try { big = JSON.parse(out); } catch { big = { error: out }; }
    if (code !== 0 || big.error) throw new Error(`${phase}: the big-answer session failed (${code}): ${big.error}`);
    results.push({ phase, ...stats(lat), note: `big calls took ${big.ms.join(', ')} ms` });
  }

  // (d) reloads
  const reloaded = () => (gw.stderr().match(/configuration reloaded/g) ?? []).length;
  let reloadsDone = false;
  const t0 = Date.now();
  const reloader = (async () => {
    for (let r = 0; r < RELOADS; r++) {
      const n = reloaded();
      process.kill(gw.proc.pid, 'SIGHUP');
      await H.waitUntil(() => reloaded() > n || /reload failed/.test(gw.stderr()), { timeout: 10000, what: `reload ${r + 1}` });
      if (/reload failed/.test(gw.stderr())) throw new Error(`reload failed: ${gw.stderr().slice(-2000)}`);
      await H.sleep(20); // some control calls between two reloads
    }
    reloadsDone = true;
  })();
  const lat = await controlLoop(() => reloadsDone);
  await reloader;
  results.push({ phase: `(d) ${RELOADS} SIGHUP reloads`, ...stats(lat), note: `${RELOADS} reloads in ${Date.now() - t0} ms` });

  const fmt = (v) => (v === undefined ? '-' : v.toFixed(2));
  const lines = [`control session latency (ms), ${path.relative(process.cwd(), BIN)}, tools/call echo on the C fast upstream, one call at a time`,
    `${'phase'.padEnd(30)} ${'calls'.padStart(7)} ${'p50'.padStart(8)} ${'p99'.padStart(8)} ${'max'.padStart(9)} ${'>=100'.padStart(6)}  note`];
  for (const r of results) lines.push(`${r.phase.padEnd(30)} ${String(r.n).padStart(7)} ${fmt(r.p50).padStart(8)} ${fmt(r.p99).padStart(8)} ${fmt(r.max).padStart(9)} ${String(r.over).padStart(6)}  ${r.note ?? ''}`);
  const bad = results.filter((r) => r.max >= 100);
  lines.push(bad.length ? `over the 100 ms goal (max): ${bad.map((r) => r.phase).join('; ')}` : 'every phase under the 100 ms goal (max)');
  process.stdout.write(lines.join('\n') + '\n');
  const res = path.join(HERE, 'results');
  fs.mkdirSync(res, { recursive: true });
  fs.writeFileSync(path.join(res, 'stall.txt'), lines.join('\n') + '\n');
  await cleanup.run();
  process.exit(bad.length ? 1 : 0);
} catch (e) {
  process.stderr.write(`stall: ${e.stack ?? e}\n`);
  await cleanup.run().catch(() => {});
  process.exit(2);
}
