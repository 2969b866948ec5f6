// The tamper-evident audit log with a real gateway, checked by a verifier of this file's own (node
// crypto, nothing from tollgate): every line's event_hash (SHA-256 of the line's canonical form
// without it: members sorted by byte order at every level, no whitespace, numbers as written),
// previous_hash and seq threading, every checkpoint's ECDSA P-256 signature (over the canonical
// form without event_hash and signature) against the public key, and key_sha256 (SHA-256 of the
// key's SubjectPublicKeyInfo DER). The signing key is made here with node's crypto.
//
//   1. calls over Streamable HTTP 2025, 2026-07-28 stateless, legacy SSE and WebSocket to the
//      CoWork OS stand-in (allowed, denied, rate-limited, parked for approval then approved or
//      rejected through the admin API) give chained lines with the right decision and
//      disposition; the file starts with a `start` checkpoint carrying the conf's and the
//      policy's SHA-256 and the instance; the verifier itself fails on each kind of tampering
//      1b. audit.args = "values": arguments shown as the client wrote them, hashed canonically
//      1c. limits.json_depth = 1000: deep arguments verify and survive a crash; an approval does
//          not cover arguments that differ 300 levels down
//      1d. a history and counters in the policy's order; 1e. a record dropped, counted, no gap
//   2. checkpoint_lines = 5: a `lines` checkpoint after every 5 records; checkpoint_seconds = 1:
//      none while idle, an `interval` checkpoint after a record
//   3. rotation: the file renamed, SIGUSR1: the old file ends with a `rotate` checkpoint, the new
//      file's first line continues from it; 3b. without a rename, twice, under traffic on every
//      transport (one unbroken chain holding every call), a reload naming another file
//   4. SIGHUP after the policy and the conf changed: a `reload` checkpoint with the new hashes;
//      4b. the signing key replaced in its file signs from the reload on
//   5. SIGTERM: the file ends with a `shutdown` checkpoint; a restart on it continues the chain;
//      5b. calls in flight (served, held for approval) are recorded before that checkpoint
//   6. SIGKILL under traffic, then restarts: the chain continues from the last whole line; a torn
//      last line (appended here, as a cut write) stays a line of its own and the chain skips it;
//      6b. a last line longer than the writer's first tail read
//   7. audit.chain = false: no chain members, no checkpoints, one JSON object per line, keys in
//      byte order; 7b. turned on and off by reloads on one file
//   8. `tollgate -t` refuses an RSA key, a P-384 key, a public key, a file that is not a key, a
//      missing one, signing_key with chain = false, an unknown audit member and out-of-range
//      intervals, naming the directive
//   9. two cluster instances (one redis-server): each its own file and chain, its own `instance`
//
// Every gateway stops with SIGTERM and must exit 0 with no error line and no sanitizer report.
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/audit-chain.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as C from './lib/clients.mjs';
import * as R from './lib/cluster.mjs';

H.requireNodeModules();

const cleanup = new H.Cleanup();
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const ADMIN_TOKEN = 'admin-' + H.randomToken();
const KINDS = C.KINDS; // streamable (2025 session), stateless (2026-07-28), sse, ws
const TOKENS = Object.fromEntries([...KINDS, 'plain'].map((k) => [k, `${k}-${H.randomToken()}`]));
const KEY = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
const sha256 = (b) => crypto.createHash('sha256').update(b).digest('hex');
const KEY_SHA256 = sha256(KEY.publicKey.export({ type: 'spki', format: 'der' }));
let dir;
let keyFile;
let pubFile;
let s;
let agent;
let current = []; // the gateways of the running test, for the failure context

const logs = () => Object.fromEntries(current.map((g, i) => [`tollgate[${i}] (${g.status()}) stderr`, g.stderr()]));
const test = (name, fn) => it(name, H.withLogs(logs, (...a) => { current = []; return fn(...a); }));

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-audit-chain-');
  agent = new http.Agent({ keepAlive: true });
  cleanup.add(() => agent.destroy());
  keyFile = path.join(dir, 'audit.key');
  fs.writeFileSync(keyFile, KEY.privateKey.export({ type: 'sec1', format: 'pem' }), { mode: 0o600 });
  pubFile = path.join(dir, 'audit.pub');
  fs.writeFileSync(pubFile, KEY.publicKey.export({ type: 'spki', format: 'pem' }));
  s = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
});
after(() => cleanup.run());

// ---------------------------------------------------------------------------
// The verifier

/** JSON text parsed with every number kept as its text (JSON.rawJSON and the reviver's source text,
 * both in the pinned Node 22), so it is written back as it was. */
const parseRaw = (text) => JSON.parse(text, (k, v, ctx) => (typeof v === 'number' ? JSON.rawJSON(ctx.source) : v));
const byBytes = (a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));

/** The canonical form: members sorted by their UTF-8 bytes at every level, no whitespace, numbers as written. */
function canon(v) {
  if (v !== null && typeof v === 'object' && JSON.isRawJSON(v)) return v.rawJSON;
  if (Array.isArray(v)) return `[${v.map(canon).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    // Object.keys puts integer-like names first: sorted here by bytes, whatever JS's order
    return `{${Object.keys(v).sort(byBytes).map((k) => `${JSON.stringify(k)}:${canon(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v); // strings: the escapes tollgate writes (", \, \b\f\n\r\t, other controls as \u00xx)
}
const without = (o, ...keys) => Object.fromEntries(Object.entries(o).filter(([k]) => !keys.includes(k)));

/** A file's whole lines and what follows its last newline. */
function readAudit(file) {
  const t = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
  const cut = t.lastIndexOf('\n') + 1;
  return { lines: t.slice(0, cut).split('\n').slice(0, -1), tail: t.slice(cut), text: t };
}

/**
 * Checks `lines` as one stretch of a chain; throws at the first line that is not what it must be.
 *   prev: null (the stretch starts a chain: previous_hash null, seq 1) or {hash, seq, since} (it
 *     continues from that line; since = records after the last checkpoint before it, if known)
 *   signed: checkpoints must carry a signature that verifies with the public key whose SPKI DER's
 *     SHA-256 is their key_sha256, one of `keys` (key_sha256 -> KeyObject; default: KEY alone)
 * Returns { records, checkpoints (parsed), last: {hash, seq, since} }.
 */
function verifyChain(lines, { prev = null, signed = true, keys = { [KEY_SHA256]: KEY.publicKey }, what = 'audit' } = {}) {
  const records = [];
  const checkpoints = [];
  let since = prev?.since; // undefined: unknown until the first checkpoint of the stretch
  let last = prev;
  lines.forEach((line, i) => {
    const at = `${what} line ${i + 1}: ${line.slice(0, 400)}`;
    let raw;
    try { raw = parseRaw(line); } catch (e) { assert.fail(`${at}: not JSON (${e.message})`); }
    assert.ok(raw && typeof raw === 'object' && !Array.isArray(raw), `${at}: not an object`);
    const eh = raw.event_hash;
    assert.match(eh ?? '', /^[0-9a-f]{64}$/, `${at}: event_hash`);
    const pre = canon(without(raw, 'event_hash'));
    assert.equal(sha256(pre), eh, `${at}: event_hash is not the SHA-256 of the canonical form`);
    const o = JSON.parse(line);
    // members in byte order, event_hash last; a line without a client's arguments, a history or
    // several counters (written as they came) is canonical as written: its preimage is its bytes
    const names = Object.keys(o);
    assert.deepEqual(names, [...names.filter((k) => k !== 'event_hash').sort(byBytes), 'event_hash'], `${at}: members in byte order, event_hash last`);
    assert.ok(line.endsWith(`,"event_hash":"${eh}"}`), `${at}: event_hash last`);
    if (!('args' in o) && !('history' in o) && Object.keys(o.counters ?? {}).length <= 1)
      assert.equal(line, `${pre.slice(0, -1)},"event_hash":"${eh}"}`, `${at}: not written in canonical form`);
    assert.ok(Number.isSafeInteger(o.seq) && /^[1-9][0-9]*$/.test(raw.seq.rawJSON), `${at}: seq ${raw.seq?.rawJSON}`);
    if (last == null) {
      assert.equal(o.previous_hash, null, `${at}: the first line of a chain has previous_hash null`);
      assert.equal(o.seq, 1, `${at}: the first line of a chain has seq 1`);
    } else {
      assert.equal(o.previous_hash, last.hash, `${at}: previous_hash is not the event_hash of the line before`);
      assert.equal(o.seq, last.seq + 1, `${at}: seq does not follow ${last.seq}`);
    }
    if ('checkpoint' in o) {
      assert.ok(!('decision' in o), `${at}: a checkpoint has no decision`);
      const cp = o.checkpoint;
      assert.ok(Number.isSafeInteger(cp.records) && Number.isSafeInteger(cp.dropped), `${at}: records, dropped`);
      // records: since the previous checkpoint this process wrote; a start checkpoint has none before it
      if (cp.reason === 'start') assert.equal(cp.records, 0, `${at}: records of a start checkpoint`);
      else if (since !== undefined) assert.equal(cp.records, since, `${at}: records since the previous checkpoint`);
      if (signed) {
        assert.match(o.signature ?? '', /^[A-Za-z0-9+/]+={0,2}$/, `${at}: signature`);
        const key = keys[cp.key_sha256];
        assert.ok(key, `${at}: key_sha256 is not the SHA-256 of the public key's DER (${Object.keys(keys).join(', ')})`);
        const signedText = canon(without(raw, 'event_hash', 'signature'));
        assert.ok(crypto.verify('sha256', Buffer.from(signedText), { key, dsaEncoding: 'der' }, Buffer.from(o.signature, 'base64')),
          `${at}: the signature does not verify over ${signedText}`);
      } else {
        assert.ok(!('signature' in o) && !('key_sha256' in cp), `${at}: unsigned`);
      }
      checkpoints.push(o);
      since = 0;
    } else {
      assert.ok(typeof o.decision === 'string' && typeof o.disposition === 'string', `${at}: a record has decision and disposition`);
      records.push(o);
      if (since !== undefined) since++;
    }
    last = { hash: eh, seq: o.seq, since };
  });
  return { records, checkpoints, last };
}

/**
 * The same files through `tollgate audit verify` (--key for each public key, --closed when the
 * last file must end with a shutdown checkpoint): a second verifier, written apart from this
 * one, must agree that the files are whole.
 */
function tollgateVerifies(files, { closed = true, pubs = [pubFile] } = {}) {
  const args = ['audit', 'verify', ...pubs.flatMap((p) => ['--key', p]), ...(closed ? ['--closed'] : []), ...files];
  const r = spawnSync(H.tollgateBin(), args, { encoding: 'utf8', timeout: 30000 });
  const out = `${r.stdout}${r.stderr}`;
  assert.doesNotMatch(out, /AddressSanitizer|LeakSanitizer|runtime error:/, `tollgate audit verify: sanitizer report:\n${out}`);
  assert.equal(r.status, 0, `tollgate ${args.join(' ')}:\n${out}`);
  assert.match(r.stdout, /^OK: /m, out);
  return out;
}

// ---------------------------------------------------------------------------
// Gateways

const policyFile = (name, obj) => {
  const f = path.join(dir, name);
  fs.writeFileSync(f, JSON.stringify(obj) + '\n');
  return f;
};

/** A policy: echo allowed, run_command denied (default), execute_code 1 an hour a grant, write_file approved by hand. */
const POLICY = {
  version: '1', default: 'deny',
  tools: {
    echo: { action: 'allow' },
    execute_code: { limits: [{ counter: 'ec_rate', window: 'hour', max: 1, scope: 'grant' }] },
    write_file: { action: 'approve', approval_timeout: 120 },
  },
};

/** A directory, a policy, a conf with an audit group (merged into the defaults) and a gateway. */
async function gateway(name, { audit = {}, conf = {}, policy = POLICY } = {}) {
  const sub = path.join(dir, name);
  fs.mkdirSync(sub, { recursive: true });
  const pol = path.join(sub, 'policy.json');
  fs.writeFileSync(pol, JSON.stringify(policy) + '\n');
  const file = path.join(sub, 'audit.log');
  const confOpts = {
    admin: { token_sha256: H.sha256hex(ADMIN_TOKEN) },
    grants: Object.entries(TOKENS).map(([n, t]) => ({ name: n, token_sha256: H.sha256hex(t) })),
    upstreams: [{ name: 'cowork-os', url: s.url, headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` }, initialize: 'local', policy: pol }],
    audit: { file, signing_key: keyFile, ...audit },
    ...conf,
  };
  const confFile = H.writeConf(sub, confOpts);
  const g = { dir: sub, file, policy: pol, conf: confFile, confOpts, gw: null };
  g.start = async () => {
    g.gw = await H.startTollgate(confFile, { cleanup, admin: true });
    current.push(g.gw);
    return g.gw;
  };
  /** SIGTERM; asserts a clean exit and a clean stderr (error lines matching `allow` aside). */
  g.stop = async (allow) => {
    const r = await g.gw.stop();
    assert.deepEqual(r, { code: 0, signal: null }, `tollgate exits 0 on SIGTERM:\n${g.gw.stderr().slice(-3000)}`);
    assertCleanStderr(g.gw, allow);
  };
  /** SIGKILL (meant: the harness's cleanup is told so). */
  g.kill = async () => {
    const gw = g.gw;
    gw.stopping = true;
    const gone = new Promise((resolve) => (gw.proc.exitCode !== null || gw.proc.signalCode !== null ? resolve() : gw.proc.once('exit', resolve)));
    process.kill(gw.proc.pid, 'SIGKILL');
    await gone;
    gw.stop = async () => ({ code: 0, signal: null });
  };
  g.signal = (sig) => process.kill(g.gw.proc.pid, sig);
  g.client = (kind = 'streamable', token = TOKENS[kind]) => C.openClient(kind, { port: g.gw.plainPort, upstream: 'cowork-os', token, agent });
  await g.start();
  return g;
}

/** No sanitizer report and no error-level line in tollgate's stderr. */
function assertCleanStderr(gw, allow = /$^/) {
  const err = gw.stderr();
  assert.doesNotMatch(err, /AddressSanitizer|LeakSanitizer|runtime error:|SUMMARY: UndefinedBehaviorSanitizer/, 'sanitizer report');
  const errors = err.split('\n').filter((l) => /\blevel=(error|fatal)\b/.test(l) && !allow.test(l));
  assert.deepEqual(errors, [], 'no error in the log');
}

/** Waits until the file's whole lines satisfy pred(lines); returns them. */
async function linesWhen(file, pred, what) {
  let got;
  await H.waitUntil(() => pred((got = readAudit(file).lines)), { what, detail: () => got.join('\n').slice(-4000) });
  return got;
}
const reasons = (lines) => lines.map((l) => JSON.parse(l)).filter((o) => o.checkpoint).map((o) => o.checkpoint.reason);
const nrecords = (lines) => lines.filter((l) => !JSON.parse(l).checkpoint).length;

async function echoes(g, n, kind = 'streamable') {
  const c = await g.client(kind);
  try {
    for (let i = 0; i < n; i++) {
      const a = await c.call('echo', { text: `e${i}` });
      assert.equal(C.textOf(a), `e${i}`, JSON.stringify(a));
    }
  } finally {
    await c.close();
  }
}

async function admin(gw, method, p, body) {
  const headers = { authorization: `Bearer ${ADMIN_TOKEN}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await C.request(agent, gw.adminPort, method, p, headers, body === undefined ? undefined : JSON.stringify(body));
  let json;
  try { json = JSON.parse(r.text); } catch { /* not JSON */ }
  return { ...r, json };
}

// ---------------------------------------------------------------------------

describe('1. every transport: chained lines with decision and disposition, a signed start checkpoint', () => {
  test('allowed, denied, limited, parked then approved or rejected, on Streamable HTTP 2025 and 2026, SSE and WebSocket', async () => {
    const g = await gateway('transports');
    const gw = g.gw;
    // the start checkpoint is there before any call
    const [first] = await linesWhen(g.file, (l) => l.length >= 1, 'the start checkpoint');
    const parked = {};
    for (const kind of KINDS) {
      const c = await g.client(kind);
      try {
        assert.equal(C.textOf(await c.call('echo', { text: kind })), kind);
        assert.equal((await c.call('run_command', { command: 'id' })).error?.code, -32001, `${kind}: run_command denied`);
        assert.ok((await c.call('execute_code', { language: 'python', code: '1' })).result, `${kind}: the first execute_code passes`);
        assert.equal((await c.call('execute_code', { language: 'python', code: '2' })).error?.code, -32002, `${kind}: the second is limited`);
        const p = await c.call('write_file', { path: `/tmp/${kind}`, content: 'x' });
        assert.equal(p.error?.code, -32003, `${kind}: parked ${JSON.stringify(p)}`);
        parked[kind] = p.error.data.approval_id;
        if (kind === 'streamable' || kind === 'sse') {
          // decided by a human: approved for one, rejected for the other; then the same call again
          const item = (await admin(gw, 'GET', '/admin/approvals')).json.approvals.find((x) => x.id === parked[kind]);
          const verb = kind === 'streamable' ? 'approve' : 'deny';
          const r = await admin(gw, 'POST', `/admin/approvals/${parked[kind]}/${verb}`, { digest: item.digest });
          assert.equal(r.status, 200, r.text);
          const again = await c.call('write_file', { path: `/tmp/${kind}`, content: 'x' });
          if (verb === 'approve') assert.ok(again.result && !again.result.isError, `${kind}: approved call ${JSON.stringify(again)}`);
          else assert.equal(again.error?.code, -32003, `${kind}: rejected call ${JSON.stringify(again)}`);
        }
      } finally {
        await c.close();
      }
    }
    const lines = await linesWhen(g.file, (l) => nrecords(l) >= 24, 'the records of every call');
    const { checkpoints } = verifyChain(lines);
    assert.equal(lines.length, 25, `one start checkpoint and 24 records:\n${lines.join('\n')}`);
    // the start checkpoint: first, signed, with the files in force and the instance
    const cp = JSON.parse(first).checkpoint;
    assert.equal(cp.reason, 'start', first);
    assert.deepEqual(checkpoints.map((c) => c.checkpoint.reason), ['start']);
    assert.deepEqual(cp.conf, { file: fs.realpathSync(g.conf), sha256: sha256(fs.readFileSync(g.conf)) }, first);
    assert.deepEqual(cp.policies, { [g.policy]: sha256(fs.readFileSync(g.policy)) }, first);
    assert.equal(cp.instance, os.hostname(), first);
    assert.equal(cp.records, 0, first);
    assert.equal(cp.dropped, 0, first);
    // each transport's calls, in order, with tollgate's decision and SEP-3004's disposition
    const base = [['echo', 'allow', 'allowed'], ['run_command', 'deny', 'denied'], ['execute_code', 'allow', 'allowed'],
      ['execute_code', 'limited', 'denied'], ['write_file', 'approve', 'deferred']];
    const want = {
      streamable: [...base, ['write_file', 'approved', 'allowed'], ['write_file', 'allow', 'allowed']],
      stateless: base,
      sse: [...base, ['write_file', 'rejected', 'denied'], ['write_file', 'rejected', 'denied']],
      ws: base,
    };
    const recs = lines.slice(1).map((l) => JSON.parse(l));
    for (const kind of KINDS) {
      const mine = recs.filter((r) => r.grant === kind);
      assert.deepEqual(mine.map((r) => [r.tool, r.decision, r.disposition]), want[kind], `${kind}: ${JSON.stringify(mine)}`);
      assert.ok(mine.every((r) => r.method === 'tools/call' && r.upstream === 'cowork-os' && r.subject === kind), kind);
      assert.equal(mine.find((r) => r.decision === 'approve').approval_id, parked[kind], kind);
      assert.equal(mine.find((r) => r.decision === 'limited').rule, 'ec_rate', kind);
    }

    // The verifier is not vacuous: each kind of change to the file is caught.
    const changed = (l, a, b) => { assert.ok(l.includes(a), l); return l.replace(a, b); };
    const swap = (a, i, j) => { const b = [...a]; [b[i], b[j]] = [b[j], b[i]]; return b; };
    const resealed = (line, f) => { // content changed and event_hash recomputed: only a signature can tell
      const o = f(parseRaw(line));
      const pre = canon(without(o, 'event_hash'));
      return `${pre.slice(0, -1)},"event_hash":"${sha256(pre)}"}`;
    };
    const tampered = {
      'a value changed': lines.map((l, i) => (i === 2 ? changed(l, '"decision":"deny"', '"decision":"allow"') : l)),
      'a line removed': lines.filter((l, i) => i !== 5),
      'two lines swapped': swap(lines, 4, 5),
      'a line inserted': [...lines.slice(0, 6), lines[2], ...lines.slice(6)],
      'a checkpoint re-hashed after its instance changed': [resealed(lines[0], (o) => { o.checkpoint.instance = 'elsewhere'; return o; }), ...lines.slice(1)],
    };
    for (const [how, t] of Object.entries(tampered)) {
      assert.throws(() => verifyChain(t), (e) => e.code === 'ERR_ASSERTION', `the verifier catches: ${how}`);
    }

    await g.stop();
    // at shutdown, a last signed checkpoint: records since the start
    const all = readAudit(g.file);
    assert.equal(all.tail, '', 'the file ends with a newline');
    const v = verifyChain(all.lines);
    const end = v.checkpoints.at(-1);
    assert.equal(JSON.parse(all.lines.at(-1)).checkpoint?.reason, 'shutdown', all.lines.at(-1));
    assert.equal(end.checkpoint.records, v.records.length, JSON.stringify(end));
    tollgateVerifies([g.file]);
  });
});

describe('1b. arguments in the line (audit.args = "values"): hashed through the canonical form, shown as they came', () => {
  // Arguments with escapes, number spellings, members out of order, integer-like and non-ASCII
  // names (U+FF21 sorts before U+1F600 by UTF-8 bytes, after it by UTF-16 units), a redacted
  // member. The line shows them in the client's order (so that args_sha256 is the SHA-256 of the
  // args text the line shows); its event_hash is of its canonical form all the same.
  const RAW = [
    '{"text":"\\u0041"}',
    '{"text":"a\\/b"}',
    '{"text":"\\ud83d\\ude00 \\u2028 \\t"}',
    '{ "text" : "spaced" }',
    '{"text":"x","n":1.50,"big":12345678901234567890,"e":1E+2,"neg":-0,"f":0.1e-3}',
    '{"text":"y","10":1,"9":2,"\u00e9":3,"Y":4,"\uff21":5,"\ud83d\ude00":6,"z":{"b":1,"a":[1.0,{"y":2,"x":1}]}}',
    '{"text":"z","password":"hunter2","inner":{"token":"t","keep":"\\u0042"}}',
  ];
  test('every line verifies and holds the arguments\' value', async () => {
    const g = await gateway('values', { audit: { args: 'values' } });
    const c = await g.client();
    for (const raw of RAW) {
      const a = await c.call('echo', null, { raw });
      assert.ok(a.result, `${raw}: ${JSON.stringify(a)}`);
    }
    await c.close();
    await g.stop();
    const lines = readAudit(g.file).lines;
    const { records } = verifyChain(lines);
    assert.equal(records.length, RAW.length, lines.join('\n'));
    const redact = (v) => (v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, ['password', 'token'].includes(k) ? '[redacted]' : redact(x)]))
      : Array.isArray(v) ? v.map(redact) : v);
    records.forEach((r, i) => assert.deepEqual(r.args, redact(JSON.parse(RAW[i])), `${RAW[i]}: ${lines[i + 1]}`));
    records.forEach((r, i) => {
      const line = lines[i + 1];
      assert.ok(line.startsWith('{"args":'), line);
      const shown = line.slice('{"args":'.length, line.indexOf(',"args_sha256":"'));
      if (!RAW[i].includes('password')) assert.equal(sha256(shown), r.args_sha256, `args_sha256 is of the args the line shows: ${line}`);
    });
    // the client's order is kept where it is not byte order: the line is not canonical, and verifies
    assert.ok(lines.some((l) => l.startsWith('{"args":{"text":"x","n":1.50,')), lines.join('\n'));
    tollgateVerifies([g.file]);
  });
});

describe('1c. deeply nested arguments (limits.json_depth = 1000)', () => {
  const nest = (n, leaf = 1) => `{"text":"deep","x":${'['.repeat(n)}${leaf}${']'.repeat(n)}}`;

  test('lines holding arguments nested 250, 270, 400 and 990 deep verify; a crash after one, the chain goes on', async () => {
    const g = await gateway('deep', { audit: { args: 'values' }, conf: { limits: { json_depth: 1000 } } });
    const c = await g.client();
    for (const n of [250, 270, 400, 990]) assert.ok((await c.call('echo', null, { raw: nest(n) })).result, `depth ${n}`);
    await c.close();
    const before = await linesWhen(g.file, (l) => nrecords(l) === 4, 'the 4 records');
    // a crash right after a deep line: the restart reads it to continue the chain
    await g.kill();
    await g.start();
    await linesWhen(g.file, (l) => l.length === before.length + 1, 'the start checkpoint after the crash');
    await g.stop();
    const lines = readAudit(g.file).lines;
    assert.deepEqual(reasons(lines), ['start', 'start', 'shutdown']);
    verifyChain(lines);
    tollgateVerifies([g.file]);
  });

  test('an approval (retry mode) covers its own arguments, not others that differ 300 levels down', async () => {
    const g = await gateway('deep-approval', { conf: { limits: { json_depth: 1000 } } });
    const c = await g.client();
    const write = (leaf) => c.call('write_file', null, { raw: nest(300, leaf).replace('"text":"deep"', '"path":"/tmp/deep","content":"x"') });
    const p = await write(1);
    assert.equal(p.error?.code, -32003, JSON.stringify(p));
    const id = p.error.data.approval_id;
    const item = (await admin(g.gw, 'GET', '/admin/approvals')).json.approvals.find((x) => x.id === id);
    assert.equal((await admin(g.gw, 'POST', `/admin/approvals/${id}/approve`, { digest: item.digest })).status, 200);
    const other = await write(2);
    assert.equal(other.error?.code, -32003, `another call is not the approved one: ${JSON.stringify(other).slice(0, 300)}`);
    assert.notEqual(other.error.data.approval_id, id);
    const same = await write(1);
    assert.ok(same.result && !same.result.isError, `the approved call runs: ${JSON.stringify(same).slice(0, 300)}`);
    await c.close();
    await g.stop();
    verifyChain(readAudit(g.file).lines);
  });
});

describe('1d. lines with a history and several counters (written in the policy\'s order)', () => {
  test('a toxic flow refused, a brake, two limits on one tool: every line verifies through its canonical form', async () => {
    const g = await gateway('history', {
      policy: {
        version: '1', default: 'allow',
        tools: {
          delete_file: { tags: ['reads_secrets'] },
          http_request: { tags: ['egress'] },
          execute_code: { limits: [{ counter: 'z_rate', window: 'hour', max: 5, scope: 'grant' }, { counter: 'a_rate', window: 'day', max: 5, scope: 'grant' }] },
          echo: { brake: { repeats: 1, within: '60s' } },
          '*': { rules: [{ name: 'no-egress-after-secrets', when: { tags: ['egress'] }, conditions: [{ history: { tags: ['reads_secrets'], within: '10m' }, op: 'lt', value: 1 }] }] },
        },
      },
    });
    const c = await g.client();
    assert.ok((await c.call('delete_file', { path: '/tmp/secret' })).result);
    assert.equal((await c.call('http_request', { url: 'https://example.com/' })).error?.code, -32001);
    assert.ok((await c.call('execute_code', { language: 'python', code: '1' })).result);
    assert.ok((await c.call('echo', { text: 'again' })).result);
    assert.equal((await c.call('echo', { text: 'again' })).error?.code, -32002);
    await c.close();
    await g.stop();
    const lines = readAudit(g.file).lines;
    const { records } = verifyChain(lines);
    assert.deepEqual(records.map((r) => [r.tool, r.disposition, r.rule ?? null]), [
      ['delete_file', 'allowed', null], ['http_request', 'denied', 'no-egress-after-secrets'], ['execute_code', 'allowed', null],
      ['echo', 'allowed', null], ['echo', 'denied', 'brake']]);
    const flow = lines.find((l) => l.includes('"tool":"http_request"'));
    assert.ok(JSON.parse(flow).history, `the refusal names the read: ${flow}`);
    const counted = lines.find((l) => l.includes('"tool":"execute_code"'));
    assert.match(counted, /"counters":\{"z_rate":\d+,"a_rate":\d+\}/, 'counters in the policy\'s order');
    // neither line is canonical as written: their hashes are of the canonical form
    for (const l of [flow, counted]) assert.notEqual(l, `${canon(without(parseRaw(l), 'event_hash')).slice(0, -1)},"event_hash":"${JSON.parse(l).event_hash}"}`, l);
    tollgateVerifies([g.file]);
  });
});

describe('1e. a record dropped (over audit.max_pending_bytes)', () => {
  test('no gap in the chain; the next checkpoint counts it in dropped, signed', async () => {
    const g = await gateway('dropped', { audit: { args: 'values', max_pending_bytes: 4096 } });
    const c = await g.client();
    assert.ok((await c.call('echo', { text: 'small' })).result);
    assert.ok((await c.call('echo', { text: 'B'.repeat(6000) })).result, 'the call is served; its record does not fit');
    assert.ok((await c.call('echo', { text: 'small again' })).result);
    await c.close();
    await g.gw.waitForMetric('tollgate_audit_dropped_total', (v) => v === 1, { token: ADMIN_TOKEN });
    await g.stop();
    const lines = readAudit(g.file).lines;
    const v = verifyChain(lines);
    assert.deepEqual(v.records.map((r) => r.args.text), ['small', 'small again']);
    assert.deepEqual(v.checkpoints.map((x) => [x.checkpoint.reason, x.checkpoint.records, x.checkpoint.dropped]), [['start', 0, 0], ['shutdown', 2, 1]]);
    tollgateVerifies([g.file]);
  });
});

describe('2. checkpoints every checkpoint_lines records and every checkpoint_seconds', () => {
  test('checkpoint_lines = 5: a "lines" checkpoint after every 5 records, records 5', async () => {
    const g = await gateway('lines', { audit: { checkpoint_lines: 5, checkpoint_seconds: 3600 } });
    await echoes(g, 12);
    const lines = await linesWhen(g.file, (l) => nrecords(l) >= 12, '12 records');
    const { checkpoints } = verifyChain(lines);
    const shape = lines.map((l) => JSON.parse(l).checkpoint?.reason ?? 'r').join(' ');
    assert.equal(shape, 'start r r r r r lines r r r r r lines r r', shape);
    assert.deepEqual(checkpoints.map((c) => c.checkpoint.records), [0, 5, 5]);
    await g.stop();
    const all = readAudit(g.file).lines;
    const v = verifyChain(all);
    assert.deepEqual(v.checkpoints.map((c) => [c.checkpoint.reason, c.checkpoint.records]), [['start', 0], ['lines', 5], ['lines', 5], ['shutdown', 2]]);
    tollgateVerifies([g.file]);
  });

  test('checkpoint_seconds = 1: none while idle, an "interval" checkpoint after a record', async () => {
    const g = await gateway('interval', { audit: { checkpoint_seconds: 1 } });
    await linesWhen(g.file, (l) => l.length === 1, 'the start checkpoint');
    await H.quietFor(1500); // at least one tick with nothing to sign
    assert.equal(readAudit(g.file).lines.length, 1, 'idle: nothing after the start checkpoint');
    await echoes(g, 1);
    const lines = await linesWhen(g.file, (l) => reasons(l).includes('interval'), 'an interval checkpoint');
    const { checkpoints } = verifyChain(lines);
    assert.deepEqual(checkpoints.map((c) => [c.checkpoint.reason, c.checkpoint.records]), [['start', 0], ['interval', 1]]);
    await H.quietFor(1500);
    assert.equal(readAudit(g.file).lines.length, 3, 'idle again: no checkpoint without a record');
    await g.stop();
    assert.deepEqual(reasons(readAudit(g.file).lines), ['start', 'interval', 'shutdown']);
    verifyChain(readAudit(g.file).lines);
  });

  test('both changed by a reload: the new intervals apply from the reload checkpoint on', async () => {
    const g = await gateway('interval-reload', { audit: { checkpoint_lines: 10000, checkpoint_seconds: 3600 } });
    await echoes(g, 1);
    H.writeConf(g.dir, { ...g.confOpts, audit: { ...g.confOpts.audit, checkpoint_lines: 3, checkpoint_seconds: 2 } });
    const from = g.gw.stderr().length;
    g.signal('SIGHUP');
    await g.gw.waitForLog(/configuration reloaded/, { from, what: 'the reload line' });
    await echoes(g, 4); // 3: a lines checkpoint; the 4th: an interval one up to 2 s later
    const lines = await linesWhen(g.file, (l) => reasons(l).includes('interval'), 'an interval checkpoint after the reload');
    await g.stop();
    const v = verifyChain(readAudit(g.file).lines); // records of each checkpoint: since the one before
    const cps = v.checkpoints.map((x) => [x.checkpoint.reason, x.checkpoint.records]);
    // typically start 0, reload 1, lines 3, interval 1, shutdown 0; a slow machine may tick between the calls
    assert.deepEqual(cps.slice(0, 2), [['start', 0], ['reload', 1]], lines.join('\n'));
    assert.ok(cps.some(([r, n]) => r === 'lines' && n === 3), JSON.stringify(cps));
    assert.ok(cps.some(([r]) => r === 'interval'), JSON.stringify(cps));
  });
});

describe('3. rotation', () => {
  test('renamed, SIGUSR1: the old file ends with a "rotate" checkpoint, the new one continues from it', async () => {
    const g = await gateway('rotate');
    await echoes(g, 2);
    await linesWhen(g.file, (l) => nrecords(l) === 2, '2 records');
    const old = `${g.file}.1`;
    fs.renameSync(g.file, old);
    g.signal('SIGUSR1');
    const oldLines = await linesWhen(old, (l) => reasons(l).includes('rotate'), 'the rotate checkpoint in the renamed file');
    await H.waitUntil(() => fs.existsSync(g.file), { what: 'the new file' });
    await echoes(g, 3);
    await linesWhen(g.file, (l) => l.length === 3, '3 records in the new file');
    await g.stop();
    const a = verifyChain(readAudit(old).lines, { what: 'old file' });
    assert.deepEqual(readAudit(old).lines, oldLines, 'nothing after the rotate checkpoint in the old file');
    assert.deepEqual(a.checkpoints.map((c) => [c.checkpoint.reason, c.checkpoint.records]), [['start', 0], ['rotate', 2]]);
    const newLines = readAudit(g.file).lines;
    const b = verifyChain(newLines, { prev: a.last, what: 'new file' });
    assert.ok(!JSON.parse(newLines[0]).checkpoint, `the new file starts with the next record: ${newLines[0]}`);
    assert.equal(JSON.parse(newLines[0]).previous_hash, JSON.parse(oldLines.at(-1)).event_hash);
    assert.deepEqual(b.checkpoints.map((c) => [c.checkpoint.reason, c.checkpoint.records]), [['shutdown', 3]]);
    tollgateVerifies([g.file, old]); // in any order
  });
});

describe('3b. rotation, other ways', () => {
  test('SIGUSR1 without a rename: the rotate checkpoint, then the same file goes on; twice renamed: three files, one chain', async () => {
    const g = await gateway('rotate2');
    await echoes(g, 1);
    await linesWhen(g.file, (l) => l.length === 2, 'a record');
    g.signal('SIGUSR1'); // logrotate's copytruncate-less "reopen" with nothing moved
    await linesWhen(g.file, (l) => reasons(l).includes('rotate'), 'the rotate checkpoint');
    await echoes(g, 1);
    await linesWhen(g.file, (l) => l.length === 4, 'a record after it, in the same file');
    fs.renameSync(g.file, `${g.file}.2`);
    g.signal('SIGUSR1');
    await linesWhen(`${g.file}.2`, (l) => reasons(l).length === 3, 'the second rotate checkpoint');
    await H.waitUntil(() => fs.existsSync(g.file), { what: 'the new file' });
    fs.renameSync(g.file, `${g.file}.1`); // empty: nothing written yet
    g.signal('SIGUSR1');
    await linesWhen(`${g.file}.1`, (l) => l.length === 1, 'a rotate checkpoint alone in the empty file');
    await H.waitUntil(() => fs.existsSync(g.file), { what: 'the newest file' });
    await echoes(g, 1);
    await g.stop();
    const f2 = readAudit(`${g.file}.2`).lines;
    const f1 = readAudit(`${g.file}.1`).lines;
    const f0 = readAudit(g.file).lines;
    const a = verifyChain(f2, { what: 'audit.log.2' });
    const b = verifyChain(f1, { prev: a.last, what: 'audit.log.1' });
    const c = verifyChain(f0, { prev: b.last, what: 'audit.log' });
    assert.deepEqual(reasons(f2), ['start', 'rotate', 'rotate']);
    assert.deepEqual(b.checkpoints.map((x) => [x.checkpoint.reason, x.checkpoint.records]), [['rotate', 0]]);
    assert.deepEqual(c.checkpoints.map((x) => [x.checkpoint.reason, x.checkpoint.records]), [['shutdown', 1]]);
    tollgateVerifies([g.file, `${g.file}.1`, `${g.file}.2`]);
  });

  test('three rotations under traffic on every transport: one unbroken chain across four files, every call in it', async () => {
    const g = await gateway('rotate-load');
    let stop = false;
    let answered = 0;
    const loops = KINDS.map(async (kind) => {
      const c = await g.client(kind);
      for (let k = 0; !stop; k++) {
        const a = await c.call('echo', { text: `${kind}-${k}` });
        assert.equal(C.textOf(a), `${kind}-${k}`);
        answered++;
      }
      await c.close();
    });
    const files = [];
    for (let i = 3; i >= 1; i--) {
      const n = nrecords(readAudit(g.file).lines);
      await linesWhen(g.file, (l) => nrecords(l) >= n + 20, 'records under traffic');
      fs.renameSync(g.file, `${g.file}.${i}`);
      g.signal('SIGUSR1');
      files.push(`${g.file}.${i}`);
      await linesWhen(`${g.file}.${i}`, (l) => reasons(l).includes('rotate'), `the rotate checkpoint in audit.log.${i}`);
    }
    await linesWhen(g.file, (l) => nrecords(l) >= 20, 'records in the newest file');
    stop = true;
    await Promise.all(loops);
    await g.stop();
    files.push(g.file);
    let prev = null;
    let total = 0;
    for (const f of files) {
      const lines = readAudit(f).lines;
      const v = verifyChain(lines, { prev, what: path.basename(f) });
      const last = JSON.parse(lines.at(-1)).checkpoint?.reason;
      assert.equal(last, f === g.file ? 'shutdown' : 'rotate', `${f} ends with its checkpoint`);
      total += v.records.length;
      prev = v.last;
    }
    assert.equal(total, answered, 'every answered call is in the chain, once');
    tollgateVerifies(files);
  });

  test('a reload naming another audit file: the old one ends with shutdown, the new one continues its chain', async () => {
    const g = await gateway('refile');
    await echoes(g, 1);
    await linesWhen(g.file, (l) => l.length === 2, 'a record');
    const other = path.join(g.dir, 'other.log');
    H.writeConf(g.dir, { ...g.confOpts, audit: { ...g.confOpts.audit, file: other } });
    const from = g.gw.stderr().length;
    g.signal('SIGHUP');
    await g.gw.waitForLog(/configuration reloaded/, { from, what: 'the reload line' });
    await linesWhen(other, (l) => l.length >= 1, 'the new file\'s first line');
    await echoes(g, 1);
    await g.stop();
    const a = verifyChain(readAudit(g.file).lines, { what: 'old file' });
    assert.deepEqual(reasons(readAudit(g.file).lines), ['start', 'shutdown']);
    assert.equal(a.records.length, 1);
    // the new file (empty) continues the old file's chain from its shutdown checkpoint
    const lines = readAudit(other).lines;
    const b = verifyChain(lines, { prev: a.last, what: 'new file' });
    assert.deepEqual(b.checkpoints.map((x) => [x.checkpoint.reason, x.checkpoint.records]), [['start', 0], ['shutdown', 1]]);
    tollgateVerifies([g.file, other]);
  });
});

describe('4. reload', () => {
  test('SIGHUP after the policy and the conf changed: a "reload" checkpoint with their new hashes', async () => {
    const g = await gateway('reload');
    await echoes(g, 1);
    await linesWhen(g.file, (l) => l.length === 2, 'a record');
    const before = { conf: sha256(fs.readFileSync(g.conf)), policy: sha256(fs.readFileSync(g.policy)) };
    fs.writeFileSync(g.policy, JSON.stringify({ ...POLICY, tools: { ...POLICY.tools, delete_file: { action: 'allow' } } }) + '\n');
    fs.appendFileSync(g.conf, '# edited\n');
    const after = { conf: sha256(fs.readFileSync(g.conf)), policy: sha256(fs.readFileSync(g.policy)) };
    assert.notEqual(after.policy, before.policy);
    const from = g.gw.stderr().length;
    g.signal('SIGHUP');
    await g.gw.waitForLog(/configuration reloaded/, { from, what: 'the reload line' });
    const lines = await linesWhen(g.file, (l) => reasons(l).includes('reload'), 'the reload checkpoint');
    // the new policy is in force: delete_file, denied before, passes
    const c = await g.client();
    assert.ok((await c.call('delete_file', { path: '/tmp/x' })).result, 'delete_file allowed by the new policy');
    await c.close();
    await g.stop();
    const all = readAudit(g.file).lines;
    const v = verifyChain(all);
    const [start, reload] = v.checkpoints.map((x) => x.checkpoint);
    assert.equal(start.conf.sha256, before.conf);
    assert.equal(start.policies[g.policy], before.policy);
    assert.deepEqual(reload.conf, { file: fs.realpathSync(g.conf), sha256: after.conf }, lines.at(-1));
    assert.deepEqual(reload.policies, { [g.policy]: after.policy }, lines.at(-1));
    assert.equal(reload.reason, 'reload');
    assert.equal(reload.records, 1);
    assert.equal(reload.instance, start.instance);
    assert.deepEqual(v.records.map((r) => [r.tool, r.disposition]), [['echo', 'allowed'], ['delete_file', 'allowed']]);
    assert.deepEqual(reasons(all), ['start', 'reload', 'shutdown']);
    tollgateVerifies([g.file]);
  });
});

describe('4b. the signing key replaced', () => {
  test('a new key in the same file, SIGHUP: the reload checkpoint is signed with it; a broken key file fails the reload', async () => {
    const kf = path.join(dir, 'rekey.key');
    const pem = (k) => k.privateKey.export({ type: 'sec1', format: 'pem' });
    fs.writeFileSync(kf, pem(KEY), { mode: 0o600 });
    const g = await gateway('rekey', { audit: { signing_key: kf } });
    await echoes(g, 1);
    const K2 = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const K2_SHA256 = sha256(K2.publicKey.export({ type: 'spki', format: 'der' }));
    // replaced in place, as a deployment does: a new file renamed over the old one
    fs.writeFileSync(`${kf}.new`, pem(K2), { mode: 0o600 });
    fs.renameSync(`${kf}.new`, kf);
    let from = g.gw.stderr().length;
    g.signal('SIGHUP');
    await g.gw.waitForLog(/configuration reloaded/, { from, what: 'the reload line' });
    await linesWhen(g.file, (l) => reasons(l).includes('reload'), 'the reload checkpoint');
    await echoes(g, 1);
    // a file that is no key: the reload fails, and no checkpoint is written for it
    fs.writeFileSync(kf, 'not a key\n');
    from = g.gw.stderr().length;
    g.signal('SIGHUP');
    await g.gw.waitForLog(/reload failed/, { from, what: 'the failed reload' });
    await echoes(g, 1);
    await g.stop(/reload failed|reload error/);
    const lines = readAudit(g.file).lines;
    const v = verifyChain(lines, { keys: { [KEY_SHA256]: KEY.publicKey, [K2_SHA256]: K2.publicKey } });
    assert.deepEqual(v.checkpoints.map((c) => [c.checkpoint.reason, c.checkpoint.key_sha256 === KEY_SHA256 ? 'old key' : c.checkpoint.key_sha256 === K2_SHA256 ? 'new key' : c.checkpoint.key_sha256]),
      [['start', 'old key'], ['reload', 'new key'], ['shutdown', 'new key']], lines.join('\n'));
    assert.equal(v.records.length, 3);
    const pub2 = path.join(g.dir, 'new.pub');
    fs.writeFileSync(pub2, K2.publicKey.export({ type: 'spki', format: 'pem' }));
    tollgateVerifies([g.file], { pubs: [pubFile, pub2] });
  });
});

describe('5. shutdown and restart', () => {
  test('SIGTERM: the file ends with a "shutdown" checkpoint; a restart on it continues the chain', async () => {
    const g = await gateway('restart');
    await echoes(g, 3);
    await g.stop();
    const first = readAudit(g.file).lines;
    const a = verifyChain(first);
    assert.deepEqual(reasons(first), ['start', 'shutdown']);
    assert.equal(JSON.parse(first.at(-1)).checkpoint.reason, 'shutdown', 'the shutdown checkpoint is the last line');
    assert.equal(JSON.parse(first.at(-1)).checkpoint.records, 3);
    await g.start();
    const lines = await linesWhen(g.file, (l) => l.length === first.length + 1, 'the new start checkpoint');
    const b = verifyChain(lines.slice(first.length), { prev: a.last, what: 'after the restart' });
    assert.deepEqual(b.checkpoints.map((c) => [c.checkpoint.reason, c.checkpoint.records]), [['start', 0]]);
    await echoes(g, 2);
    await g.stop();
    const all = readAudit(g.file).lines;
    verifyChain(all);
    assert.deepEqual(reasons(all), ['start', 'shutdown', 'start', 'shutdown']);
    assert.equal(JSON.parse(all.at(-1)).seq, all.length, 'one chain: seq counts every line of the file');
    tollgateVerifies([g.file]);
  });
});

describe('5b. calls in flight at SIGTERM', () => {
  test('their records come before the shutdown checkpoint, which stays the last line', async () => {
    const g = await gateway('inflight', { policy: { version: '1', default: 'allow', tools: { write_file: { action: 'approve', approval_mode: 'hold', approval_timeout: 60 } } } });
    const c = await g.client();
    const slow = c.call('slow', { seconds: 1 }, { timeout: 20000 }).catch((e) => e);
    // and a call held for a human's approval (hold mode: the client waits)
    const c2 = await g.client('ws');
    const held = c2.request('tools/call', { name: 'write_file', arguments: { path: '/tmp/held', content: 'x' }, _meta: { progressToken: 'p1' } }, { timeout: 20000 }).catch((e) => e);
    await H.waitUntil(() => s.records().some((r) => r.msg?.params?.name === 'slow'), { what: 'the slow call upstream' });
    await H.waitUntil(async () => (await admin(g.gw, 'GET', '/admin/approvals')).json?.approvals?.length === 1, { what: 'the held call listed' });
    await g.stop();
    await slow;
    await held;
    await c.close().catch(() => {});
    await c2.close().catch(() => {});
    const lines = readAudit(g.file).lines;
    const v = verifyChain(lines);
    // the slow call served; the held one parked, then ended by the shutdown (order between them free)
    assert.deepEqual(v.records.map((r) => [r.tool, r.decision, r.disposition, r.decided_by ?? null]).sort(),
      [['slow', 'allow', 'allowed', null], ['write_file', 'approve', 'deferred', null], ['write_file', 'expired', 'denied', 'shutdown']], lines.join('\n'));
    assert.deepEqual(reasons(lines), ['start', 'shutdown']);
    assert.equal(JSON.parse(lines.at(-1)).checkpoint?.reason, 'shutdown', lines.at(-1));
    assert.equal(v.checkpoints.at(-1).checkpoint.records, 3);
    tollgateVerifies([g.file]);
  });
});

describe('6. a crash (SIGKILL) under traffic, then a restart', () => {
  /** Clients calling echo until stop(); resolves once `n` records are in the file. */
  async function traffic(g, n) {
    let stop = false;
    const loops = [0, 1, 2, 3].map(async (i) => {
      const c = await g.client(KINDS[i]);
      for (let k = 0; !stop; k++) {
        try { await c.call('echo', { text: `t${i}-${k}` }, { timeout: 5000 }); } catch { break; } // the gateway died
      }
      await c.close().catch(() => {});
    });
    await linesWhen(g.file, (l) => nrecords(l) >= n, `${n} records under traffic`);
    return async () => { stop = true; await Promise.allSettled(loops); };
  }

  test('the chain continues from the last whole line; a torn last line stays a line of its own', async () => {
    const g = await gateway('crash');
    let done = await traffic(g, 20);
    await g.kill();
    await done();
    let t = readAudit(g.file);
    const killed1 = t.lines.length;
    // a write cut short by the kill, if any, is the torn tail; else the file ends with a newline
    const a = verifyChain(t.lines, { what: 'before the first crash' });
    assert.ok(!reasons(t.lines).includes('shutdown'), 'no shutdown checkpoint after SIGKILL');
    if (t.tail) process.stderr.write(`the kill cut a write: ${t.tail.length} bytes left torn\n`);
    let prevWhole = a.last;
    let torn = t.tail;

    // restart: the chain goes on from the last whole line
    await g.start();
    let lines = await linesWhen(g.file, (l) => l.length > killed1 + (torn ? 1 : 0), 'the start checkpoint after the crash');
    done = await traffic(g, nrecords(lines) + 10);
    await g.kill();
    await done();
    t = readAudit(g.file);
    let after = t.lines.slice(killed1 + (torn ? 1 : 0));
    if (torn) assert.equal(t.lines[killed1], torn, 'the torn bytes are a line of their own');
    const b = verifyChain(after, { prev: prevWhole, what: 'after the first restart' });
    assert.equal(JSON.parse(after[0]).checkpoint?.reason, 'start', after[0]);
    assert.equal(JSON.parse(after[0]).checkpoint.records, 0, 'records counts this process\'s records');

    // a torn last line (a write cut short), then a restart
    const killed2 = t.lines.length;
    prevWhole = b.last;
    torn = t.tail;
    if (!torn) {
      torn = '{"args_sha256":"' + 'f'.repeat(64) + '","decision":"allow","disposition":"allo';
      fs.appendFileSync(g.file, torn);
    }
    const size = fs.statSync(g.file).size;
    await g.start();
    await g.gw.waitForLog(/ends inside a line/, { what: 'the torn line warned of' });
    lines = await linesWhen(g.file, (l) => l.length >= killed2 + 2, 'the start checkpoint after the torn line');
    const text = fs.readFileSync(g.file, 'utf8');
    assert.equal(text[size], '\n', 'a newline first, ending the torn line');
    assert.equal(lines[killed2], torn, 'the torn bytes are a line of their own, unchanged');
    await echoes(g, 2);
    await g.stop();
    after = readAudit(g.file).lines.slice(killed2 + 1);
    const c = verifyChain(after, { prev: prevWhole, what: 'after the torn line' });
    assert.deepEqual(c.checkpoints.map((x) => [x.checkpoint.reason, x.checkpoint.records]), [['start', 0], ['shutdown', 2]]);
    assert.equal(JSON.parse(after[0]).previous_hash, prevWhole.hash, 'the start checkpoint continues from the line before the torn one');
    tollgateVerifies([g.file]);
  });
});

describe('6b. a crash after a long line', () => {
  test('a last line of 300 KB, then a torn one of 100 KB (beyond the first tail read): each restart continues the chain', async () => {
    const g = await gateway('longline', { audit: { args: 'values' } });
    const c = await g.client();
    const text = 'L'.repeat(300 * 1024);
    assert.ok((await c.call('echo', { text })).result);
    await c.close();
    const before = await linesWhen(g.file, (l) => l.length === 2, 'the long record');
    assert.ok(before[1].length > 300 * 1024);
    await g.kill();
    await g.start();
    const lines = await linesWhen(g.file, (l) => l.length === 3, 'the start checkpoint after the crash');
    verifyChain(lines);
    assert.equal(JSON.parse(lines[2]).previous_hash, JSON.parse(before[1]).event_hash);
    // a crash again, leaving 100 KB of a line torn (more than the first tail read, no newline in it)
    await g.kill();
    const torn = '{"args":{"text":"' + 'T'.repeat(100 * 1024);
    fs.appendFileSync(g.file, torn);
    await g.start();
    const after = await linesWhen(g.file, (l) => l.length === 5, 'the start checkpoint after the torn line');
    assert.equal(after[3], torn);
    verifyChain(after.slice(4), { prev: { hash: JSON.parse(lines[2]).event_hash, seq: 3 }, what: 'after the torn line' });
    await g.stop();
    tollgateVerifies([g.file]);
  });
});

describe('7. audit.chain = false', () => {
  test('no previous_hash, seq, event_hash, no checkpoint; one JSON object per line, keys in byte order', async () => {
    const g = await gateway('nochain', { audit: { chain: false, signing_key: undefined } });
    const c = await g.client();
    assert.ok((await c.call('echo', { text: 'x' })).result);
    assert.equal((await c.call('run_command', { command: 'id' })).error?.code, -32001);
    await c.close();
    await linesWhen(g.file, (l) => l.length === 2, '2 records');
    const old = `${g.file}.1`;
    fs.renameSync(g.file, old);
    g.signal('SIGUSR1');
    await H.waitUntil(() => fs.existsSync(g.file), { what: 'the new file' });
    await echoes(g, 1);
    await linesWhen(g.file, (l) => l.length === 1, 'a record in the new file');
    await g.stop();
    const all = [...readAudit(old).lines, ...readAudit(g.file).lines];
    assert.equal(all.length, 3, all.join('\n'));
    for (const l of all) {
      const o = JSON.parse(l);
      for (const k of ['previous_hash', 'seq', 'event_hash', 'checkpoint', 'signature']) assert.ok(!(k in o), `no ${k}: ${l}`);
      const keys = Object.keys(o);
      assert.deepEqual(keys, [...keys].sort(byBytes), `keys in byte order: ${l}`);
      assert.ok(o.decision && o.disposition, l);
    }
    assert.deepEqual(all.map((l) => JSON.parse(l)).map((o) => [o.tool, o.disposition]), [['echo', 'allowed'], ['run_command', 'denied'], ['echo', 'allowed']]);
  });
});

describe('7b. audit.chain turned on and off by reloads, on one file', () => {
  test('off, on, off: the chained stretch starts from nothing with a start checkpoint and ends with a shutdown one', async () => {
    const g = await gateway('toggle', { audit: { chain: false, signing_key: undefined } });
    const reload = async (audit) => {
      H.writeConf(g.dir, { ...g.confOpts, audit: { file: g.file, ...audit } });
      const from = g.gw.stderr().length;
      g.signal('SIGHUP');
      await g.gw.waitForLog(/configuration reloaded/, { from, what: 'the reload line' });
    };
    await echoes(g, 1);
    await linesWhen(g.file, (l) => l.length === 1, 'an unchained record');
    await reload({ chain: true, signing_key: keyFile });
    await linesWhen(g.file, (l) => l.length === 2, 'the start checkpoint');
    await echoes(g, 1);
    await linesWhen(g.file, (l) => l.length === 3, 'a chained record');
    await reload({ chain: false });
    await linesWhen(g.file, (l) => l.length === 4, 'the shutdown checkpoint');
    await echoes(g, 1);
    await g.stop();
    const lines = readAudit(g.file).lines;
    assert.equal(lines.length, 5, lines.join('\n'));
    for (const i of [0, 4]) assert.ok(!('event_hash' in JSON.parse(lines[i])), `unchained: ${lines[i]}`);
    const v = verifyChain(lines.slice(1, 4), { what: 'the chained stretch' });
    assert.deepEqual(v.checkpoints.map((x) => [x.checkpoint.reason, x.checkpoint.records]), [['start', 0], ['shutdown', 1]]);
    assert.match(g.gw.stderr(), /last line is not a chained line: a new chain starts/);
  });
});

describe('8. configuration errors', () => {
  const check = (name, audit) => {
    const sub = path.join(dir, 'conf-errors', name);
    fs.mkdirSync(sub, { recursive: true });
    const conf = H.writeConf(sub, { upstreams: [{ name: 'cowork-os', url: s.url }], audit: { file: path.join(sub, 'audit.log'), ...audit } });
    const r = spawnSync(H.tollgateBin(), ['-t', '-c', conf], { encoding: 'utf8', timeout: 20000 });
    return { status: r.status, out: `${r.stdout}${r.stderr}` };
  };
  const keyOf = (name, text) => {
    const f = path.join(dir, name);
    fs.writeFileSync(f, text, { mode: 0o600 });
    return f;
  };

  test('tollgate -t: a P-256 key passes; RSA, P-384, not a key, a missing file, chain = false, an unknown key fail naming it', () => {
    const ok = check('ok', { signing_key: keyFile, checkpoint_lines: 5, checkpoint_seconds: 1 });
    assert.equal(ok.status, 0, ok.out);
    const pkcs8 = keyOf('p256.pkcs8.pem', KEY.privateKey.export({ type: 'pkcs8', format: 'pem' }));
    const ok8 = check('ok-pkcs8', { signing_key: pkcs8 });
    assert.equal(ok8.status, 0, ok8.out);
    const rsa = keyOf('rsa.pem', crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }));
    const p384 = keyOf('p384.pem', crypto.generateKeyPairSync('ec', { namedCurve: 'P-384' }).privateKey.export({ type: 'sec1', format: 'pem' }));
    const junk = keyOf('junk.pem', '-----BEGIN EC PRIVATE KEY-----\nbm90IGEga2V5\n-----END EC PRIVATE KEY-----\n');
    const pub = keyOf('pub.pem', KEY.publicKey.export({ type: 'spki', format: 'pem' }));
    const cases = [
      ['rsa', { signing_key: rsa }, /audit\.signing_key[^\n]*P-256/],
      ['p384', { signing_key: p384 }, /audit\.signing_key[^\n]*P-256/],
      ['junk', { signing_key: junk }, /audit\.signing_key[^\n]*not a private key/],
      ['public', { signing_key: pub }, /audit\.signing_key[^\n]*not a private key/],
      ['missing', { signing_key: path.join(dir, 'no-such.key') }, /audit\.signing_key/],
      ['unchained', { chain: false, signing_key: keyFile }, /audit\.signing_key[^\n]*audit\.chain = true/],
      ['unknown', { checkpoint_line: 5 }, /checkpoint_line\b/],
      ['lines0', { checkpoint_lines: 0 }, /audit\.checkpoint_lines/],
      ['seconds0', { checkpoint_seconds: 0 }, /audit\.checkpoint_seconds/],
      ['chain-string', { chain: 'yes' }, /audit\.chain/],
    ];
    for (const [name, audit, re] of cases) {
      const r = check(name, audit);
      assert.notEqual(r.status, 0, `${name}: tollgate -t fails:\n${r.out}`);
      assert.match(r.out, re, `${name}: the message names the directive:\n${r.out}`);
      if (process.env.AUDIT_CHAIN_SHOW) process.stderr.write(`${name}: ${r.out}`);
      assert.doesNotMatch(r.out, /AddressSanitizer|LeakSanitizer|runtime error:/, `${name}: sanitizer-clean`);
    }
  });
});

describe('9. a cluster: each instance its own chain', () => {
  test('two instances sharing a redis-server: each file a valid chain with its own instance name', async () => {
    const sub = path.join(dir, 'cluster');
    fs.mkdirSync(sub);
    const redis = await R.startRedis({ cleanup, dir: sub });
    const secret = R.writeSecret(sub);
    const prefix = `tollgate-audit-${H.randomToken(4)}:`;
    const gs = [];
    for (const name of ['alpha', 'beta']) {
      gs.push(await gateway(`cluster/${name}`, {
        conf: { cluster: { redis: redis.addr, key_prefix: prefix, secret_file: secret, on_unavailable: 'deny', instance: name } },
      }));
    }
    for (const g of gs) await R.waitReady(Object.assign(g.gw, { name: 'instance' }));
    // one grant's bucket of 1, shared: the second instance's call is limited
    for (const [i, g] of gs.entries()) {
      const c = await g.client('streamable', TOKENS.plain);
      const a = await c.call('execute_code', { language: 'python', code: `${i}` });
      assert.equal(i === 0 ? 'ok' : a.error?.code, i === 0 ? (a.result ? 'ok' : JSON.stringify(a)) : -32002, JSON.stringify(a));
      assert.ok((await c.call('echo', { text: 'x' })).result);
      await c.close();
    }
    for (const g of gs) await g.stop();
    const files = gs.map((g) => readAudit(g.file).lines);
    for (const [i, name] of ['alpha', 'beta'].entries()) {
      const v = verifyChain(files[i], { what: name });
      assert.deepEqual(v.checkpoints.map((c) => c.checkpoint.reason), ['start', 'shutdown'], name);
      assert.ok(v.checkpoints.every((c) => c.checkpoint.instance === name), `${name}: ${JSON.stringify(v.checkpoints)}`);
      assert.deepEqual(v.records.map((r) => [r.tool, r.decision]), [['execute_code', i === 0 ? 'allow' : 'limited'], ['echo', 'allow']], name);
      tollgateVerifies([gs[i].file]);
    }
    assert.notEqual(JSON.parse(files[0][0]).event_hash, JSON.parse(files[1][0]).event_hash, 'two chains');
  });
});
