#!/usr/bin/env node
// A bounded soak at steady mixed load. Run through test/bench/soak.sh.
//
// For SOAK_SECONDS (default 600) a release gateway serves, all at once:
//   - one client per client transport and era (Streamable HTTP 2025 session, 2026-07-28
//     stateless, legacy SSE, WebSocket) for each of two upstreams: the C fast upstream over HTTP
//     and the hostile fixture as a stdio child;
//   - a mix of calls: allowed (echo), denied by policy (-32001), rate-limited (a bucket of 20 per
//     second shared by the grant: most get -32002); sessions are closed and opened again every
//     200 calls (new stdio children, new session records);
//   - now and then a call that needs approval, approved through the admin API;
//   - a SIGHUP reload every 30 s (the policy files rewritten first).
// Every 10 s it samples the gateway's VmRSS (/proc/PID/status) and open descriptors (/proc/PID/fd)
// into a CSV (test/bench/results/soak.csv), and at the end prints the rows and a summary: first,
// min, max, last, and the least-squares slope over the second half. Any call whose outcome is not
// the expected one is counted in `unexpected` (and the first few printed); the exit status is 1 if
// there is one, 2 on an error.
//
//   node soak.mjs --bin TOLLGATE --fast TG_BENCH_UPSTREAM [--seconds 600]

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as H from '../interop/lib/harness.mjs';
import { openClient, request, textOf, KINDS } from '../interop/lib/clients.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const HOSTILE = path.join(HERE, '..', 'fixtures', 'hostile', 'hostile.mjs');
const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const BIN = path.resolve(arg('bin', 'build-rel/tollgate'));
const FAST = path.resolve(arg('fast', 'build-rel/test/bench/tg-bench-upstream'));
const SECONDS = Number(arg('seconds', process.env.SOAK_SECONDS ?? 600));
const SAMPLE_MS = 10000;
const RELOAD_MS = 30000;
const TOKEN = 'soak-' + H.randomToken();
const ADMIN = 'admin-' + H.randomToken();

const cleanup = new H.Cleanup();
process.on('SIGINT', () => { cleanup.run().finally(() => process.exit(130)); });

async function startListening(cmd, args, what) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'], detached: true });
  cleanup.add(() => H.stopChild(child, 2000));
  let out = '';
  child.stdout.setEncoding('utf8');
  return new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => { out += d; const m = /LISTENING (\d+)/.exec(out); if (m) resolve(Number(m[1])); });
    child.once('exit', (code) => reject(new Error(`${what} exited (${code}) before listening: ${out}`)));
  });
}

const rss = (pid) => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
const fds = (pid) => fs.readdirSync(`/proc/${pid}/fd`).length;
function slope(points) { // least squares, y per minute
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((s, p) => s + p[0], 0) / n;
  const my = points.reduce((s, p) => s + p[1], 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) { num += (x - mx) * (y - my); den += (x - mx) ** 2; }
  return den ? (num / den) * 60 : 0;
}

try {
  for (const f of [BIN, FAST]) if (!fs.existsSync(f)) throw new Error(`${f} is missing (build: cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j2)`);
  process.env.TOLLGATE_BIN = BIN;
  const dir = H.makeTempDir(cleanup, 'tollgate-soak-');
  const certs = H.makeCerts(dir);
  const fastPort = await startListening(FAST, ['0'], 'the fast upstream');
  const policies = {
    fast: path.join(dir, 'fast.json'),
    st: path.join(dir, 'st.json'),
  };
  const writePolicies = (gen) => {
    const common = {
      echo: {},
      denied: { action: 'deny', reason: `generation ${gen}` },
      echo_limited: { limits: [{ counter: 'soak_limited', window: 'second', max: 20, scope: 'grant' }] },
    };
    fs.writeFileSync(policies.fast, JSON.stringify({ version: '1', default: 'deny', tools: common }));
    fs.writeFileSync(policies.st, JSON.stringify({ version: '1', default: 'deny', tools: { ...common, visible: { action: 'approve' } } }));
  };
  writePolicies(0);
  const conf = H.writeConf(dir, {
    listeners: [{}, { tls: { cert: certs.cert, key: certs.key } }],
    admin: { token_sha256: H.sha256hex(ADMIN) },
    audit: { file: path.join(dir, 'audit.log') },
    limits: { drain_timeout_ms: 3000 },
    grants: [{ name: 'soak', token_sha256: H.sha256hex(TOKEN) }],
    upstreams: [
      { name: 'fast', url: `http://127.0.0.1:${fastPort}/mcp`, policy: policies.fast },
      { name: 'st', command: [process.execPath, HOSTILE, '--stdio'], policy: policies.st, call_timeout_ms: 20000 },
    ],
  });
  const gw = await H.startTollgate(conf, { cleanup, listeners: 2, admin: true });
  const pid = gw.proc.pid;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  cleanup.add(() => agent.destroy());

  const count = { calls: 0, ok: 0, denied: 0, limited: 0, approved: 0, reopened: 0, reloads: 0, unexpected: 0 };
  const unexpected = [];
  const note = (what) => { count.unexpected++; if (unexpected.length < 10) unexpected.push(what); };
  let stop = false;
  const t0 = Date.now();

  async function worker(kind, upstream, w) {
    let c = null;
    for (let i = 0; !stop; i++) {
      if (!c || i % 200 === 0) {
        if (c) { await c.close(); count.reopened++; }
        try { c = await openClient(kind, { port: gw.plainPort, upstream, token: TOKEN, agent }); } catch (e) {
          note(`${kind}→${upstream} open: ${e.message}`);
          c = null;
          await H.sleep(500);
          continue;
        }
      }
      const r = i % 20;
      const tool = r < 14 ? 'echo' : r < 17 ? 'denied' : 'echo_limited';
      const text = `w${w}-${i}`;
      count.calls++;
      try {
        const a = await c.call(tool, { text }, { timeout: 20000 });
        if (tool === 'echo') {
          const want = upstream === 'fast' ? 'ok' : text;
          if (textOf(a) === want) count.ok++; else note(`${kind}→${upstream} echo: ${JSON.stringify(a).slice(0, 200)}`);
        } else if (tool === 'denied') {
          if (a.error?.code === -32001) count.denied++; else note(`${kind}→${upstream} denied: ${JSON.stringify(a).slice(0, 200)}`);
        } else if (a.error?.code === -32002) count.limited++;
        else if (a.result) count.ok++;
        else note(`${kind}→${upstream} limited: ${JSON.stringify(a).slice(0, 200)}`);
      } catch (e) {
        note(`${kind}→${upstream} ${tool}: ${e.kind}: ${e.message}`);
        c = null; // a broken client: open a new one
      }
      await H.sleep(2);
    }
    if (c) await c.close();
  }

  // An approval now and then: a call parked on the stdio upstream, approved through the admin API.
  async function approvals() {
    const c = await openClient('streamable', { port: gw.plainPort, upstream: 'st', token: TOKEN, agent });
    const auth = { authorization: `Bearer ${ADMIN}` };
    while (!stop) {
      const p = c.call('visible', { text: 'approved' }, { timeout: 20000 });
      let id, digest;
      await H.waitUntil(async () => {
        const r = await request(agent, gw.adminPort, 'GET', '/admin/approvals', auth);
        ({ id, digest } = JSON.parse(r.text).approvals?.[0] ?? {});
        return id;
      }, { timeout: 10000, what: 'the parked call on /admin/approvals' });
      // an approve names the digest of the item it approves
      const r = await request(agent, gw.adminPort, 'POST', `/admin/approvals/${id}/approve`,
        { ...auth, 'content-type': 'application/json' }, JSON.stringify({ digest }));
      if (r.status !== 200) note(`approve: HTTP ${r.status} ${r.text}`);
      const a = await p;
      if (textOf(a) === 'approved') count.approved++; else note(`approved call: ${JSON.stringify(a).slice(0, 200)}`);
      await H.sleep(5000);
    }
    await c.close();
  }

  const rows = [];
  const header = 't_s,rss_kib,fds,calls,ok,denied,limited,approved,reopened,reloads,unexpected';
  const sample = () => {
    const row = [Math.round((Date.now() - t0) / 1000), rss(pid), fds(pid), count.calls, count.ok, count.denied, count.limited,
      count.approved, count.reopened, count.reloads, count.unexpected];
    rows.push(row);
    process.stdout.write(row.join(',') + '\n');
  };
  process.stdout.write(`soak: ${SECONDS} s, gateway pid ${pid}\n${header}\n`);
  const workers = [];
  let w = 0;
  for (const up of ['fast', 'st']) for (const kind of KINDS) workers.push(worker(kind, up, w++));
  workers.push(approvals().catch((e) => note(`approvals: ${e.message}`)));
  sample();
  const sampler = setInterval(sample, SAMPLE_MS);
  let gen = 0;
  const reloader = setInterval(() => {
    writePolicies(++gen);
    const n = (gw.stderr().match(/configuration reloaded/g) ?? []).length;
    process.kill(pid, 'SIGHUP');
    H.waitUntil(() => (gw.stderr().match(/configuration reloaded/g) ?? []).length > n, { timeout: 10000, what: 'a reload' })
      .then(() => { count.reloads++; }, (e) => note(`reload ${gen}: ${e.message}`));
  }, RELOAD_MS);
  await H.sleep(SECONDS * 1000);
  clearInterval(reloader);
  clearInterval(sampler);
  sample();
  stop = true;
  await Promise.all(workers);
  if (gw.exit) throw new Error(`the gateway exited during the soak: ${gw.status()}\n${gw.stderr().slice(-3000)}`);

  const summary = [];
  for (const [col, name, unit] of [[1, 'rss', 'KiB'], [2, 'fds', '']]) {
    const v = rows.map((r) => r[col]);
    const half = rows.filter((r) => r[0] >= SECONDS / 2).map((r) => [r[0], r[col]]);
    summary.push(`${name}: first ${v[0]} min ${Math.min(...v)} max ${Math.max(...v)} last ${v[v.length - 1]} ${unit}; ` +
      `slope over the second half ${slope(half).toFixed(1)} ${unit}/min`);
  }
  summary.push(`calls ${count.calls}: ok ${count.ok}, denied ${count.denied}, limited ${count.limited}, approved ${count.approved}; ` +
    `sessions reopened ${count.reopened}; reloads ${count.reloads}; unexpected ${count.unexpected}`);
  for (const u of unexpected) summary.push(`  unexpected: ${u}`);
  process.stdout.write(summary.join('\n') + '\n');
  const res = path.join(HERE, 'results');
  fs.mkdirSync(res, { recursive: true });
  fs.writeFileSync(path.join(res, 'soak.csv'), [header, ...rows.map((r) => r.join(','))].join('\n') + '\n');
  fs.writeFileSync(path.join(res, 'soak.txt'), summary.join('\n') + '\n');
  await gw.stop();
  await cleanup.run().catch((e) => process.stderr.write(`soak: cleanup: ${e.message}\n`));
  process.exit(count.unexpected ? 1 : 0);
} catch (e) {
  process.stderr.write(`soak: ${e.stack ?? e}\n`);
  await cleanup.run().catch(() => {});
  process.exit(2);
}
