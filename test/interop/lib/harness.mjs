// Shared helpers for tollgate's interop tests (node --test).
//
// Everything a test needs is made at test time in a throwaway directory:
// a CA and a server certificate (openssl), the tollgate configuration, and
// the peers (tollgate itself, the CoWork OS stand-in, server-everything).
// Every process started here is killed by cleanup(); nothing is committed.

import { spawn, execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const TEST_DIR = path.join(REPO_ROOT, 'test');
export const NODE_MODULES = path.join(TEST_DIR, 'node_modules');

// ---------------------------------------------------------------------------
// Dependencies

/** Throws a clear message when `npm ci --prefix test` has not been run. */
export function requireNodeModules() {
  const sdk = path.join(NODE_MODULES, '@modelcontextprotocol', 'sdk', 'package.json');
  const everything = path.join(NODE_MODULES, '@modelcontextprotocol', 'server-everything', 'package.json');
  for (const f of [sdk, everything]) {
    if (!fs.existsSync(f)) {
      throw new Error(`interop tests: ${path.relative(REPO_ROOT, f)} is missing; ` +
        'install the pinned test dependencies with:  npm ci --prefix test');
    }
  }
}

/** The SDK pieces the tests use. */
export async function loadSdk() {
  requireNodeModules();
  const [{ Client }, { StreamableHTTPClientTransport, StreamableHTTPError }, types] = await Promise.all([
    import('@modelcontextprotocol/sdk/client/index.js'),
    import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
    import('@modelcontextprotocol/sdk/types.js'),
  ]);
  return { Client, StreamableHTTPClientTransport, StreamableHTTPError, types };
}

// ---------------------------------------------------------------------------
// Small utilities

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** Resolves 'timeout' after ms, without keeping the process alive once the race it is in is won. */
const startDeadline = (ms) => new Promise((r) => setTimeout(() => r('timeout'), ms).unref());

/**
 * TOLLGATE_WRAP: a command line put in front of the gateway's (split on spaces), for example
 *   TOLLGATE_WRAP="valgrind --leak-check=full --error-exitcode=99 --log-file=/tmp/vg.%p.log"
 * (scripts/ci/memcheck.sh sets it). TOLLGATE_TIME_FACTOR (default 1, or 20 when TOLLGATE_WRAP names
 * valgrind) scales the harness's waits on the gateway: its start, its log lines, its metrics, its
 * exit, and waitUntil()'s default deadline. Tests that wait on the gateway with their own
 * deadlines scale them with timeFactor() too.
 */
export const TOLLGATE_WRAP = (process.env.TOLLGATE_WRAP ?? '').split(/\s+/).filter(Boolean);
const TIME_FACTOR = Number(process.env.TOLLGATE_TIME_FACTOR ||
  (TOLLGATE_WRAP.some((w) => /valgrind/.test(w)) ? 20 : 1)) || 1;
/** The factor TOLLGATE_TIME_FACTOR sets; scaled(ms) = ms times it. */
export const timeFactor = () => TIME_FACTOR;
export const scaled = (ms) => Math.round(ms * TIME_FACTOR);

export function sha256hex(s) {
  return createHash('sha256').update(s).digest('hex');
}

export function randomToken(bytes = 24) {
  return randomBytes(bytes).toString('base64url');
}

/**
 * Polls fn() until it returns a truthy value or the deadline passes; returns the last value
 * (falsy on a timeout: the caller asserts on it with its own message). See waitUntil() for the
 * variant that throws.
 */
export async function waitFor(fn, { timeout = 5000, interval = 50 } = {}) {
  const deadline = Date.now() + timeout;
  let v;
  for (;;) {
    v = await fn();
    if (v) return v;
    if (Date.now() >= deadline) return v;
    await sleep(interval);
  }
}

/**
 * Waits for something to happen: polls fn() every `interval` ms until it returns a truthy value,
 * which it returns. The deadline is generous on purpose (a busy machine is slow, not wrong); when
 * it passes, throws "timed out after N ms waiting for WHAT" with `detail()` (or the last value).
 */
export async function waitUntil(fn, { timeout = scaled(10000), interval = 25, what = 'the condition', detail } = {}) {
  const t0 = Date.now();
  let v;
  for (;;) {
    v = await fn();
    if (v) return v;
    if (Date.now() - t0 >= timeout) break;
    await sleep(interval);
  }
  let more;
  try { more = detail ? detail() : JSON.stringify(v); } catch (e) { more = String(e); }
  throw new Error(`timed out after ${Date.now() - t0} ms waiting for ${what}${more === undefined ? '' : `; last: ${String(more).slice(0, 2000)}`}`);
}

/**
 * Resolves with p's value, or rejects with "WHAT did not happen within N ms" at the deadline.
 * For waits on one event (a close, an exit, a pong) with a bound.
 */
export function within(p, ms, what = 'the event') {
  let t;
  const deadline = new Promise((resolve, reject) => {
    t = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
  });
  return Promise.race([p, deadline]).finally(() => clearTimeout(t));
}

/**
 * A pure deadline for a negative check: "nothing (more) arrives within ms". There is no event to
 * wait for when the point is that nothing happens, so this is the one place a fixed wait is right.
 * Never use it to wait for something that should happen: use waitUntil() or an event.
 */
export const quietFor = (ms) => sleep(ms);

/**
 * The fields of an item of GET /admin/approvals (and of the page's queue), with or without a
 * cluster (docs/operations.md): `instance` is the member holding the call, null without a
 * cluster; `args` (left out here) only with audit.args = "values" (the page: always).
 */
export const APPROVAL_FIELDS = ['args_sha256', 'blocked', 'digest', 'expires_in_ms', 'grant', 'id', 'instance', 'parked_at_ms', 'policy',
  'session', 'subject', 'tool', 'upstream', 'waited_ms'];
export const approvalFields = (item) => Object.keys(item).filter((k) => k !== 'args' && k !== 'args_text').sort();

/** Parses a Prometheus text exposition into { 'name{labels}': number } (labels as written). */
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^(\S+?(?:\{[^}]*\})?)\s+(\S+)$/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

/** Returns a TCP port that was free a moment ago (for peers that cannot be told to use port 0). */
/**
 * A port nobody listens on right now. host: where to look; tests that need a port to stay
 * closed (connection refused) use 127.0.0.2, where the fixtures (on 127.0.0.1 with port 0) can
 * never be given the same port by the kernel while the test runs.
 */
export function freePort(host = '127.0.0.1') {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, host, () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** A list of cleanup actions run in reverse order. */
export class Cleanup {
  constructor() { this.fns = []; }
  add(fn) { this.fns.push(fn); return fn; }
  async run() {
    const errors = [];
    while (this.fns.length) {
      const fn = this.fns.pop();
      try { await fn(); } catch (e) { errors.push(e); }
    }
    if (errors.length) throw errors[0];
  }
}

/** A throwaway directory under the OS temp dir, removed by cleanup unless KEEP_TMP is set. */
export function makeTempDir(cleanup, prefix = 'tollgate-interop-') {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  cleanup?.add(() => {
    if (process.env.KEEP_TMP) { process.stderr.write(`# kept ${dir}\n`); return; }
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

// ---------------------------------------------------------------------------
// (a) Throwaway CA and server certificate

/**
 * Makes an ECDSA P-256 CA and a server certificate for 127.0.0.1 / localhost / ::1
 * in `dir`. Returns paths and the CA's PEM text.
 */
export function makeCerts(dir) {
  const p = (f) => path.join(dir, f);
  const ossl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  fs.writeFileSync(p('ca.ext'), [
    'basicConstraints=critical,CA:TRUE',
    'keyUsage=critical,keyCertSign,cRLSign',
    'subjectKeyIdentifier=hash',
    '',
  ].join('\n'));
  fs.writeFileSync(p('server.ext'), [
    'basicConstraints=critical,CA:FALSE',
    'keyUsage=critical,digitalSignature,keyEncipherment',
    'extendedKeyUsage=serverAuth',
    'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost',
    'authorityKeyIdentifier=keyid',
    'subjectKeyIdentifier=hash',
    '',
  ].join('\n'));
  try {
    ossl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', p('ca.key'));
    ossl('req', '-new', '-key', p('ca.key'), '-subj', '/CN=tollgate interop test CA', '-out', p('ca.csr'));
    ossl('x509', '-req', '-in', p('ca.csr'), '-signkey', p('ca.key'), '-days', '2',
      '-sha256', '-extfile', p('ca.ext'), '-out', p('ca.crt'));
    ossl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', p('server.key'));
    ossl('req', '-new', '-key', p('server.key'), '-subj', '/CN=127.0.0.1', '-out', p('server.csr'));
    ossl('x509', '-req', '-in', p('server.csr'), '-CA', p('ca.crt'), '-CAkey', p('ca.key'),
      '-set_serial', '0x' + randomBytes(8).toString('hex'), '-days', '2', '-sha256',
      '-extfile', p('server.ext'), '-out', p('server.crt'));
  } catch (e) {
    throw new Error(`openssl failed: ${e.message}\n${e.stderr?.toString() ?? ''}`);
  }
  fs.chmodSync(p('ca.key'), 0o600);
  fs.chmodSync(p('server.key'), 0o600);
  return {
    caCert: p('ca.crt'),
    caPem: fs.readFileSync(p('ca.crt'), 'utf8'),
    cert: p('server.crt'),
    key: p('server.key'),
  };
}

/**
 * Issues one certificate in `dir` with openssl: `name`.key / `name`.crt, subject `subj` (openssl's
 * "/O=acme/CN=alice" form), signed by `ca` ({cert, key} paths; self-signed CA when `ca` is
 * absent and `isCa`), with an EC P-256 key or, with `rsa`, an RSA 2048 key. `ext`: extension lines.
 * Returns { cert, key, pem } (paths, and the certificate's PEM text).
 */
export function issueCert(dir, { name, subj, ca, isCa = false, rsa = false, ext = [] }) {
  const p = (f) => path.join(dir, f);
  const ossl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  const exts = isCa
    ? ['basicConstraints=critical,CA:TRUE', 'keyUsage=critical,keyCertSign,cRLSign', 'subjectKeyIdentifier=hash', ...ext]
    : ['basicConstraints=critical,CA:FALSE', 'subjectKeyIdentifier=hash', 'authorityKeyIdentifier=keyid', ...ext];
  fs.writeFileSync(p(`${name}.ext`), exts.join('\n') + '\n');
  try {
    if (rsa) ossl('genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', p(`${name}.key`));
    else ossl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', p(`${name}.key`));
    ossl('req', '-new', '-key', p(`${name}.key`), '-subj', subj, '-out', p(`${name}.csr`));
    const signer = ca ? ['-CA', ca.cert, '-CAkey', ca.key, '-set_serial', '0x' + randomBytes(8).toString('hex')]
      : ['-signkey', p(`${name}.key`)];
    ossl('x509', '-req', '-in', p(`${name}.csr`), ...signer, '-days', '2', '-sha256',
      '-extfile', p(`${name}.ext`), '-out', p(`${name}.crt`));
  } catch (e) {
    throw new Error(`openssl failed for ${name}: ${e.message}\n${e.stderr?.toString() ?? ''}`);
  }
  fs.chmodSync(p(`${name}.key`), 0o600);
  return { cert: p(`${name}.crt`), key: p(`${name}.key`), pem: fs.readFileSync(p(`${name}.crt`), 'utf8') };
}

/**
 * For mTLS listeners: a client CA (`clients-ca.crt`, the listener's `client_ca`) and client
 * certificates it signs (extendedKeyUsage clientAuth): `alice` (subject O=acme, CN=alice) and
 * `bob` (O=acme, CN=bob); and `stranger`, a certificate for the same subject as alice's from
 * another CA (`other-ca`) the listener does not trust. Each entry is { cert, key, pem }; `ca` is
 * the client CA's. Extra certificates: `issue(name, subj)` signs one more with the client CA.
 */
export function makeClientCerts(dir) {
  const clientExt = ['keyUsage=critical,digitalSignature', 'extendedKeyUsage=clientAuth'];
  const ca = issueCert(dir, { name: 'clients-ca', subj: '/CN=tollgate interop client CA', isCa: true });
  const other = issueCert(dir, { name: 'other-ca', subj: '/CN=tollgate interop untrusted CA', isCa: true });
  const issue = (name, subj, signer = ca) => issueCert(dir, { name, subj, ca: signer, ext: clientExt });
  return {
    ca,
    alice: issue('alice', '/O=acme/CN=alice'),
    bob: issue('bob', '/O=acme/CN=bob'),
    stranger: issue('stranger', '/O=acme/CN=alice', other),
    issue,
  };
}

/**
 * Certificates for https:// upstream tests, in `dir` (made at test time, like makeCerts):
 *   ca, server        makeCerts(dir): the CA the gateway is told to trust, and a server
 *                     certificate for IP:127.0.0.1, IP:::1, DNS:localhost signed by it
 *   otherCa           a second CA, unrelated to `ca`
 *   untrusted         a server certificate for the same names, signed by otherCa
 *   otherName         signed by `ca`, but for DNS:other.example only (no IP, no localhost)
 *   ipAsDns           signed by `ca`, CN=127.0.0.1 and DNS:127.0.0.1, but no iPAddress entry
 *   expired           signed by `ca`, for the same names, valid 2020-01-01 to 2020-02-01
 *                     (`openssl ca -startdate/-enddate`: openssl 3.0's `x509 -req` cannot set a
 *                     past notBefore)
 *   clientCa          the CA an mTLS upstream trusts for its clients
 *   client            a client certificate (CN=tollgate-gateway, clientAuth) signed by clientCa
 *   rogueClient       a client certificate (CN=rogue-gateway) signed by otherCa
 * Each certificate entry is { cert, key, pem } (paths; pem: the certificate's text); each CA
 * { cert, key, pem }.
 */
export function makeUpstreamCerts(dir) {
  const main = makeCerts(dir);
  const p = (f) => path.join(dir, f);
  const ossl = (...args) => {
    try {
      return execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      throw new Error(`openssl ${args.join(' ')} failed: ${e.message}\n${e.stderr?.toString() ?? ''}`);
    }
  };
  const entry = (name) => ({ cert: p(`${name}.crt`), key: p(`${name}.key`), pem: fs.readFileSync(p(`${name}.crt`), 'utf8') });
  const key = (name) => {
    ossl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', p(`${name}.key`));
    fs.chmodSync(p(`${name}.key`), 0o600);
  };
  const newCa = (name, cn) => {
    key(name);
    ossl('req', '-new', '-key', p(`${name}.key`), '-subj', `/CN=${cn}`, '-out', p(`${name}.csr`));
    ossl('x509', '-req', '-in', p(`${name}.csr`), '-signkey', p(`${name}.key`), '-days', '2', '-sha256',
      '-extfile', p('ca.ext'), '-out', p(`${name}.crt`));
    return entry(name);
  };
  const extFile = (name, { san, eku }) => {
    fs.writeFileSync(p(`${name}.ext`), [
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      `extendedKeyUsage=${eku}`,
      ...(san ? [`subjectAltName=${san}`] : []),
      'authorityKeyIdentifier=keyid',
      'subjectKeyIdentifier=hash',
      '',
    ].join('\n'));
    return p(`${name}.ext`);
  };
  const leaf = (name, ca, { cn, san, eku = 'serverAuth' }) => {
    key(name);
    ossl('req', '-new', '-key', p(`${name}.key`), '-subj', `/CN=${cn}`, '-out', p(`${name}.csr`));
    ossl('x509', '-req', '-in', p(`${name}.csr`), '-CA', ca.cert, '-CAkey', ca.key,
      '-set_serial', '0x' + randomBytes(8).toString('hex'), '-days', '2', '-sha256',
      '-extfile', extFile(name, { san, eku }), '-out', p(`${name}.crt`));
    return entry(name);
  };
  const ca = { cert: main.caCert, key: path.join(dir, 'ca.key'), pem: main.caPem };
  const serverNames = 'IP:127.0.0.1,IP:::1,DNS:localhost';
  const otherCa = newCa('unrelated-ca', 'tollgate interop unrelated CA');
  const clientCa = newCa('client-ca', 'tollgate interop client CA');

  // The expired one: `openssl ca` is the one openssl 3.0 command that takes a start date.
  key('expired');
  ossl('req', '-new', '-key', p('expired.key'), '-subj', '/CN=127.0.0.1', '-out', p('expired.csr'));
  const db = p('expired-db');
  fs.mkdirSync(db, { recursive: true });
  fs.writeFileSync(path.join(db, 'index.txt'), '');
  fs.writeFileSync(path.join(db, 'serial'), randomBytes(8).toString('hex').toUpperCase() + '\n');
  fs.writeFileSync(p('expired.cnf'), [
    '[ca]', 'default_ca = tca',
    '[tca]', `database = ${path.join(db, 'index.txt')}`, `new_certs_dir = ${db}`, `serial = ${path.join(db, 'serial')}`,
    'default_md = sha256', 'policy = anything', 'unique_subject = no', 'copy_extensions = none',
    '[anything]', 'commonName = supplied',
    '[ext]', 'basicConstraints = critical,CA:FALSE', 'keyUsage = critical,digitalSignature,keyEncipherment',
    'extendedKeyUsage = serverAuth', `subjectAltName = ${serverNames}`,
    '',
  ].join('\n'));
  ossl('ca', '-batch', '-notext', '-config', p('expired.cnf'), '-cert', ca.cert, '-keyfile', ca.key,
    '-in', p('expired.csr'), '-startdate', '20200101000000Z', '-enddate', '20200201000000Z',
    '-extensions', 'ext', '-out', p('expired.crt'));

  return {
    ca,
    server: { cert: main.cert, key: main.key, pem: fs.readFileSync(main.cert, 'utf8') },
    otherCa,
    untrusted: leaf('untrusted', otherCa, { cn: '127.0.0.1', san: serverNames }),
    otherName: leaf('other-name', ca, { cn: 'other.example', san: 'DNS:other.example' }),
    ipAsDns: leaf('ip-as-dns', ca, { cn: '127.0.0.1', san: 'DNS:127.0.0.1' }),
    expired: entry('expired'),
    clientCa,
    client: leaf('client', clientCa, { cn: 'tollgate-gateway', eku: 'clientAuth' }),
    rogueClient: leaf('rogue-client', otherCa, { cn: 'rogue-gateway', eku: 'clientAuth' }),
  };
}

// ---------------------------------------------------------------------------
// (b) tollgate configuration (libconfig syntax)

function cfgString(s) {
  return '"' + String(s)
    .replace(/\\/g, '\\\\')
    .replace(/"/g, '\\"')
    .replace(/\n/g, '\\n')
    .replace(/\t/g, '\\t') + '"';
}

function cfgValue(v, indent) {
  const pad = '  '.repeat(indent);
  if (typeof v === 'string') return cfgString(v);
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Error(`config: bad number ${v}`);
    return Number.isInteger(v) ? String(v) : String(v);
  }
  if (Array.isArray(v)) {
    // Arrays of scalars are libconfig arrays [ ]; arrays of groups are lists ( ).
    if (v.length && typeof v[0] === 'object') {
      return '(\n' + v.map((e) => pad + '  ' + cfgValue(e, indent + 1)).join(',\n') + '\n' + pad + ')';
    }
    return '[ ' + v.map((e) => cfgValue(e, indent)).join(', ') + ' ]';
  }
  if (v && typeof v === 'object') {
    const keys = Object.keys(v).filter((k) => v[k] !== undefined);
    if (!keys.length) return '{ }';
    return '{\n' + keys.map((k) => `${pad}  ${k} = ${cfgValue(v[k], indent + 1)};`).join('\n') + '\n' + pad + '}';
  }
  throw new Error(`config: cannot encode ${typeof v}`);
}

/**
 * Writes a tollgate configuration to dir/tollgate.conf and returns its path.
 *
 * opts:
 *   listeners: [{ tls?: {cert,key}, origins?: [...] }]       (port is always 0)
 *   admin:     true | { token_sha256 }                       (port 0) — omitted when falsy
 *   limits:    { header_bytes, body_bytes, ... }
 *   grants:    [{ name, token_sha256 } | { name, anonymous: true }]
 *   upstreams: [{ name, url, default?, headers?, initialize?, pool?, ... }]
 *   log:       overrides for the log group
 *   audit:     { file, args?, redact? } — omitted when falsy
 *   jwt:       [{ issuer, audience, jwks_file, grant_claim?, skew_s? }] — omitted when falsy
 *   public_url: string — omitted when falsy
 *   cluster:   { redis, key_prefix, secret_file, on_unavailable, ... } — omitted when falsy
 *
 * An upstream without a `policy` gets a pass-everything policy ({"default":"allow"}) written
 * beside the conf, since an upstream with no policy at all is closed; `policy: null` leaves it out.
 */
export function writeConf(dir, opts) {
  let allowAll;
  const upstreams = (opts.upstreams ?? []).map((u) => {
    if (u.policy === null) {
      const { policy, ...rest } = u;
      return rest;
    }
    if (u.policy !== undefined) return u;
    if (!allowAll) {
      allowAll = path.join(dir, 'allow-all.json');
      fs.writeFileSync(allowAll, '{"version":"1","default":"allow"}\n');
    }
    return { ...u, policy: allowAll };
  });
  const conf = {
    log: { level: 'info', format: 'logfmt', file: '', ...(opts.log ?? {}) },
    listen: (opts.listeners ?? [{}]).map((l) => ({ address: '127.0.0.1', port: 0, ...l })),
    admin: opts.admin ? { address: '127.0.0.1', port: 0, ...(opts.admin === true ? {} : opts.admin) } : undefined,
    limits: { drain_timeout_ms: 1000, ...(opts.limits ?? {}) },
    grants: opts.grants ?? [{ name: 'local', anonymous: true }],
    upstreams,
    audit: opts.audit || undefined,
    jwt: opts.jwt || undefined,
    public_url: opts.public_url || undefined,
    cluster: opts.cluster || undefined,
    approvals: opts.approvals || undefined,
    signals: opts.signals || undefined,
  };
  const lines = ['# written by test/interop/lib/harness.mjs'];
  for (const [k, v] of Object.entries(conf)) {
    if (v === undefined) continue;
    lines.push(`${k} = ${cfgValue(v, 0)};`);
  }
  const file = path.join(dir, opts.file ?? 'tollgate.conf');
  fs.writeFileSync(file, lines.join('\n') + '\n');
  return file;
}

// ---------------------------------------------------------------------------
// Processes

const SANITIZER_RE = /ERROR: (AddressSanitizer|LeakSanitizer|MemorySanitizer|ThreadSanitizer)|runtime error:|SUMMARY: UndefinedBehaviorSanitizer/;

/** Signals the child's process group (children are spawned detached), or the child alone. Exactly one signal. */
function killTree(child, signal) {
  try {
    process.kill(-child.pid, signal);
  } catch {
    try { child.kill(signal); } catch { /* gone */ }
  }
}

/** Stops a child: SIGTERM, then SIGKILL after graceMs. Resolves with {code, signal}. */
export function stopChild(child, graceMs = 3000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve({ code: child?.exitCode ?? null, signal: child?.signalCode ?? null });
  }
  return new Promise((resolve) => {
    const t = setTimeout(() => killTree(child, 'SIGKILL'), graceMs);
    child.once('exit', (code, signal) => { clearTimeout(t); resolve({ code, signal }); });
    killTree(child, 'SIGTERM');
  });
}

function tail(s, lines = 200) {
  const a = s.split('\n');
  return a.length > lines ? `[... ${a.length - lines} lines cut ...]\n` + a.slice(-lines).join('\n') : s;
}

/** Path of the gateway binary: $TOLLGATE_BIN or build/tollgate. */
export function tollgateBin() {
  const bin = process.env.TOLLGATE_BIN || path.join(REPO_ROOT, 'build', 'tollgate');
  return path.isAbsolute(bin) ? bin : path.resolve(REPO_ROOT, bin);
}

/**
 * (c) Starts tollgate with `-c confPath` and waits (10 s) until every listener
 * (and the admin listener if `admin`) has logged its port.
 * Returns { proc, listeners: [{port, tls}], plainPort, tlsPort, adminPort, stderr(), stop() }.
 */
export async function startTollgate(confPath, { cleanup, listeners = 1, admin = false, env = {}, timeout = 10000 } = {}) {
  timeout = scaled(timeout);
  const bin = tollgateBin();
  if (!fs.existsSync(bin)) {
    throw new Error(`tollgate binary not found at ${bin} (build it with: cmake -S . -B build && cmake --build build, or set TOLLGATE_BIN)`);
  }
  const argv = [...TOLLGATE_WRAP, bin, '-c', confPath];
  const child = spawn(argv[0], argv.slice(1), {
    cwd: REPO_ROOT,
    env: { ...process.env, ASAN_OPTIONS: process.env.ASAN_OPTIONS ?? 'detect_leaks=1:abort_on_error=0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let err = '';
  let out = '';
  const gw = {
    proc: child,
    listeners: [],
    plainPort: undefined,
    tlsPort: undefined,
    adminPort: undefined,
    stderr: () => err,
    stdout: () => out,
    exit: null, // {code, signal} once it exited
    stopping: false, // set when stop() was asked for; an exit before that is a crash
    async stop() {
      gw.stopping = true;
      const r = await stopChild(child, scaled(5000));
      gw.exit = r;
      return r;
    },
    /** One line on the process state, for failure messages. */
    status() {
      if (!gw.exit) return 'running';
      return `${gw.stopping ? 'exited after SIGTERM' : 'EXITED UNEXPECTEDLY'} (code ${gw.exit.code}, signal ${gw.exit.signal})`;
    },
    /** Throws if a sanitizer reported anything so far. */
    assertNoSanitizerReport() {
      if (SANITIZER_RE.test(err)) throw new Error('tollgate: sanitizer report in stderr:\n' + tail(err));
    },
    /**
     * Waits until tollgate's stderr, from offset `from` on (default: all of it), matches `re`;
     * resolves with the match. Checked on every chunk tollgate writes, not on a timer. Rejects
     * with the tail of stderr after `timeout` ms, or at once if tollgate exits first.
     */
    waitForLog(re, { timeout = 10000, from = 0, what } = {}) {
      timeout = scaled(timeout);
      const scan = () => re.exec(err.slice(from));
      const now = scan();
      if (now) return Promise.resolve(now);
      return new Promise((resolve, reject) => {
        const done = (f) => { clearTimeout(t); child.stderr.off('data', onData); child.off('exit', onExit); f(); };
        const onData = () => { const m = scan(); if (m) done(() => resolve(m)); };
        const onExit = () => { const m = scan(); done(() => (m ? resolve(m) : reject(new Error(`tollgate exited before its log showed ${what ?? re}:\n${tail(err, 40)}`)))); };
        const t = setTimeout(() => done(() => reject(new Error(`timed out after ${timeout} ms waiting for ${what ?? re} in tollgate's log:\n${tail(err.slice(from), 40)}`))), timeout);
        // after the harness's own listener (registered first), so err already holds the chunk
        child.stderr.on('data', onData);
        child.once('exit', onExit);
      });
    },
    /**
     * Waits until the metric `name` (as parseMetrics() keys it, labels included) satisfies
     * pred(value); resolves with the value. Needs the admin listener, like metrics().
     */
    async waitForMetric(name, pred, { token, timeout = 10000, what } = {}) {
      timeout = scaled(timeout);
      let v;
      await waitUntil(async () => { v = (await gw.metrics({ token }))[name]; return pred(v); },
        { timeout, what: what ?? `${name} to reach the expected value`, detail: () => `${name} = ${v}` });
      return v;
    },
    /**
     * GET /metrics on the admin listener (startTollgate with `admin: true`); resolves with
     * parseMetrics() of the body. `token`: the admin bearer token, when admin.token_sha256 is set.
     */
    metrics({ token } = {}) {
      if (gw.adminPort === undefined) return Promise.reject(new Error('metrics(): tollgate has no admin listener (start it with admin: true)'));
      return new Promise((resolve, reject) => {
        const req = http.get({
          host: '127.0.0.1', port: gw.adminPort, path: '/metrics', agent: false,
          headers: token ? { authorization: `Bearer ${token}` } : {},
        }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d) => { body += d; });
          res.on('end', () => (res.statusCode === 200 ? resolve(parseMetrics(body))
            : reject(new Error(`GET /metrics: HTTP ${res.statusCode} ${body.slice(0, 200)}`))));
        });
        req.on('error', reject);
      });
    },
  };
  cleanup?.add(async () => {
    const crashed = gw.exit && !gw.stopping ? gw.status() : null;
    const r = await gw.stop();
    if (SANITIZER_RE.test(err)) {
      throw new Error('tollgate: sanitizer report in stderr:\n' + tail(err));
    }
    if (crashed) throw new Error(`tollgate ${crashed} during the tests:\n${tail(err)}`);
    if (r.code !== 0) {
      throw new Error(`tollgate did not exit cleanly on SIGTERM (code ${r.code}, signal ${r.signal}):\n${tail(err)}`);
    }
  });
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => {
    gw.exit = { code, signal };
    resolve({ code, signal });
  }));
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.setEncoding('utf8');
  const ready = new Promise((resolve) => {
    let buf = '';
    child.stderr.on('data', (d) => {
      err += d;
      buf += d;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        const port = /(?:^|\s)port=(\d+)/.exec(line)?.[1] ?? /"port"\s*:\s*(\d+)/.exec(line)?.[1];
        if (/msg="?admin listening"?|"msg"\s*:\s*"admin listening"/.test(line) && port) {
          gw.adminPort = Number(port);
        } else if (/msg="?listening"?(\s|$)|"msg"\s*:\s*"listening"/.test(line) && port) {
          const tls = /(?:^|\s)tls=true\b|"tls"\s*:\s*true/.test(line);
          gw.listeners.push({ port: Number(port), tls });
          if (tls && gw.tlsPort === undefined) gw.tlsPort = Number(port);
          if (!tls && gw.plainPort === undefined) gw.plainPort = Number(port);
        }
        if (gw.listeners.length >= listeners && (!admin || gw.adminPort !== undefined)) resolve('ready');
      }
    });
  });
  let startTimer;
  const timer = new Promise((resolve) => { startTimer = setTimeout(() => resolve('timeout'), timeout); });
  const r = await Promise.race([ready, exited, timer]);
  clearTimeout(startTimer); // a pending timer would keep the test process alive (long under TOLLGATE_WRAP)
  if (r !== 'ready') {
    const how = r === 'timeout' ? `did not log ${listeners} listening line(s) within ${timeout} ms`
      : `exited early (code ${r.code}, signal ${r.signal})`;
    await gw.stop();
    throw new Error(`tollgate ${how}\nconf ${confPath}:\n${fs.readFileSync(confPath, 'utf8')}\n--- tollgate stderr ---\n${tail(err)}`);
  }
  return gw;
}

/**
 * (d) Starts the CoWork OS stand-in over HTTP on an ephemeral port.
 * Returns { port, url, token, logFile, proc, records(), stop() }.
 */
export async function startStandin({ cleanup, token, logFile, extraArgs = [], timeout = 10000 } = {}) {
  const script = path.join(TEST_DIR, 'fixtures', 'cowork-os', 'standin.mjs');
  if (!fs.existsSync(script)) throw new Error(`CoWork OS stand-in not found at ${script}`);
  token ??= randomToken();
  const args = [script, '--http', '--port', '0', '--token', token, ...(logFile ? ['--log', logFile] : []), ...extraArgs];
  const child = spawn(process.execPath, args, { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  let err = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => { err += d; });
  child.stdout.setEncoding('utf8');
  const s = {
    proc: child, token, logFile, port: undefined, url: undefined,
    output: () => out + err,
    stop: () => stopChild(child, 2000),
    /** The stand-in's request log parsed as JSON lines. */
    records() {
      if (!logFile || !fs.existsSync(logFile)) return [];
      return fs.readFileSync(logFile, 'utf8').split('\n').filter(Boolean).map((l) => {
        try { return JSON.parse(l); } catch { return { unparsable: l }; }
      });
    },
  };
  cleanup?.add(() => s.stop());
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const ready = new Promise((resolve) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = /LISTENING (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
  });
  const r = await Promise.race([ready, exited, startDeadline(timeout)]);
  if (typeof r !== 'number') {
    await s.stop();
    throw new Error(`CoWork OS stand-in did not start (${r === 'timeout' ? 'timeout' : `exit ${JSON.stringify(r)}`}):\n${out}${err}`);
  }
  s.port = r;
  s.url = `http://127.0.0.1:${r}/mcp`;
  return s;
}

/**
 * (d) Starts @modelcontextprotocol/server-everything in streamableHttp mode.
 * It takes its port from $PORT (no port 0), so a free port is picked and the
 * start is retried if somebody else grabbed it meanwhile.
 * Returns { port, url, proc, output(), stop() }.
 */
export async function startEverything({ cleanup, timeout = 15000 } = {}) {
  requireNodeModules();
  const entry = path.join(NODE_MODULES, '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
  let lastErr;
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const child = spawn(process.execPath, [entry, 'streamableHttp'], {
      cwd: TEST_DIR,
      env: { ...process.env, PORT: String(port) },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let out = '';
    const s = {
      proc: child, port, url: `http://127.0.0.1:${port}/mcp`,
      output: () => out,
      stop: () => stopChild(child, 2000),
    };
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    const ready = new Promise((resolve) => {
      const on = (d) => {
        out += d;
        if (/listening on port/i.test(out)) resolve('ready');
      };
      child.stdout.setEncoding('utf8');
      child.stderr.setEncoding('utf8');
      child.stdout.on('data', on);
      child.stderr.on('data', on);
    });
    const r = await Promise.race([ready, exited, startDeadline(timeout)]);
    if (r === 'ready') {
      cleanup?.add(() => s.stop());
      return s;
    }
    await s.stop();
    lastErr = new Error(`server-everything did not start on port ${port} (${typeof r === 'string' ? r : JSON.stringify(r)}):\n${out}`);
    if (!/EADDRINUSE|already in use/.test(out)) break;
  }
  throw lastErr;
}

// ---------------------------------------------------------------------------
// HTTP(S) client side

/**
 * A fetch() built on node:http/https that trusts `ca` (PEM) for https URLs (and presents the
 * client certificate `cert` with its `key`, PEM, when given: mTLS).
 * Node 20's global fetch (undici) cannot take a CA without the undici package,
 * so the SDK transport gets this one through its `fetch` option. Bodies stream
 * (SSE responses are delivered as they arrive).
 */
export function makeFetch({ ca, cert, key, cleanup, keepAlive = true } = {}) {
  const httpAgent = new http.Agent({ keepAlive });
  const httpsAgent = new https.Agent({ keepAlive, ca, cert, key });
  cleanup?.add(() => { httpAgent.destroy(); httpsAgent.destroy(); });
  const nullBody = new Set([101, 103, 204, 205, 304]);
  const f = async (input, init = {}) => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    const isHttps = url.protocol === 'https:';
    const headers = {};
    new Headers(init.headers ?? {}).forEach((v, k) => { headers[k] = v; });
    let body = init.body;
    if (body instanceof URLSearchParams) { // an OAuth token request (the SDK's auth flow)
      body = body.toString();
      if (!headers['content-type']) headers['content-type'] = 'application/x-www-form-urlencoded';
    }
    if (body != null && typeof body !== 'string' && !(body instanceof Uint8Array)) {
      if (body instanceof ArrayBuffer) body = new Uint8Array(body);
      else throw new Error('makeFetch: unsupported body type');
    }
    if (body != null) headers['content-length'] = String(Buffer.byteLength(body));
    const signal = init.signal;
    if (signal?.aborted) throw signal.reason ?? new DOMException('aborted', 'AbortError');
    return new Promise((resolve, reject) => {
      const req = (isHttps ? https : http).request(url, {
        method: init.method ?? 'GET',
        headers,
        agent: isHttps ? httpsAgent : httpAgent,
      }, (res) => {
        const h = new Headers();
        for (let i = 0; i < res.rawHeaders.length; i += 2) h.append(res.rawHeaders[i], res.rawHeaders[i + 1]);
        const method = (init.method ?? 'GET').toUpperCase();
        let stream = null;
        if (nullBody.has(res.statusCode) || method === 'HEAD') {
          res.resume();
        } else {
          stream = Readable.toWeb(res);
        }
        const response = new Response(stream, { status: res.statusCode, statusText: res.statusMessage, headers: h });
        Object.defineProperty(response, 'url', { value: url.href });
        resolve(response);
      });
      req.on('error', reject);
      if (signal) {
        const onAbort = () => req.destroy(signal.reason ?? new DOMException('aborted', 'AbortError'));
        signal.addEventListener('abort', onAbort, { once: true });
        req.on('close', () => signal.removeEventListener('abort', onAbort));
      }
      req.end(body ?? undefined);
    });
  };
  return f;
}

/**
 * Connects an SDK Client over Streamable HTTP.
 * opts: { fetch, headers, capabilities, name, handlers: [[schema, fn]...] , onerror }
 * Returns { client, transport, close() }.
 */
export async function connectClient(url, opts = {}) {
  const { Client, StreamableHTTPClientTransport } = await loadSdk();
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: opts.fetch,
    requestInit: opts.headers ? { headers: opts.headers } : undefined,
  });
  const client = new Client({ name: opts.name ?? 'tollgate-interop', version: '1.0.0' },
    { capabilities: opts.capabilities ?? {} });
  for (const [schema, fn] of opts.handlers ?? []) client.setRequestHandler(schema, fn);
  for (const [schema, fn] of opts.notificationHandlers ?? []) client.setNotificationHandler(schema, fn);
  const errors = [];
  client.onerror = (e) => { errors.push(e); opts.onerror?.(e); };
  await client.connect(transport);
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    try { await client.close(); } catch { /* ignore */ }
  };
  opts.cleanup?.add(close);
  return { client, transport, errors, close };
}

/** Text of the first text content item of a tools/call result. */
export function resultText(result) {
  return (result?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

// ---------------------------------------------------------------------------
// Raw MCP over fetch (for header- and status-level checks)

export const PROTOCOL_VERSION = '2025-06-18';

export const MCP_HEADERS = {
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream',
};

export function initializeBody(id = 1, protocolVersion = PROTOCOL_VERSION) {
  return {
    jsonrpc: '2.0', id, method: 'initialize',
    params: { protocolVersion, capabilities: {}, clientInfo: { name: 'raw-interop', version: '1.0.0' } },
  };
}

/** Parses an SSE body into its events [{event, id, data}]. */
export function parseSse(text) {
  const events = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    if (!block.trim()) continue;
    const ev = { event: 'message', data: '' };
    const data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      let value = i < 0 ? '' : line.slice(i + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') data.push(value);
      else if (field === 'event') ev.event = value;
      else if (field === 'id') ev.id = value;
      else if (field === 'retry') ev.retry = value;
    }
    if (!data.length) continue;
    ev.data = data.join('\n');
    events.push(ev);
  }
  return events;
}

/**
 * POSTs one JSON-RPC body (object or raw string) and reads the whole response.
 * Returns { status, headers, text, messages } where messages are the JSON-RPC
 * messages of a JSON or SSE body.
 */
export async function postRaw(fetchFn, url, body, headers = {}) {
  const res = await fetchFn(url, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  const ct = res.headers.get('content-type') ?? '';
  let messages = [];
  if (ct.includes('text/event-stream')) {
    messages = parseSse(text).map((e) => { try { return JSON.parse(e.data); } catch { return { unparsable: e.data }; } });
  } else if (ct.includes('application/json') && text) {
    try { const j = JSON.parse(text); messages = Array.isArray(j) ? j : [j]; } catch { messages = [{ unparsable: text }]; }
  }
  return { status: res.status, headers: res.headers, text, messages };
}

/** Initializes a raw session; returns { sessionId, protocolVersion, headers } for follow-up requests. */
export async function rawInitialize(fetchFn, url, headers = {}) {
  const r = await postRaw(fetchFn, url, initializeBody(), headers);
  if (r.status !== 200) throw new Error(`raw initialize: HTTP ${r.status}: ${r.text}`);
  const sessionId = r.headers.get('mcp-session-id');
  const protocolVersion = r.messages[0]?.result?.protocolVersion ?? PROTOCOL_VERSION;
  const h = { ...headers, 'mcp-protocol-version': protocolVersion };
  if (sessionId) h['mcp-session-id'] = sessionId;
  const n = await postRaw(fetchFn, url, { jsonrpc: '2.0', method: 'notifications/initialized' }, h);
  if (n.status !== 202 && n.status !== 200) throw new Error(`raw notifications/initialized: HTTP ${n.status}: ${n.text}`);
  return { sessionId, protocolVersion, headers: h, init: r };
}

// ---------------------------------------------------------------------------
// Failure context

/**
 * Wraps a test body so that, when it fails, the tail of each named log
 * (e.g. tollgate's stderr) is printed and attached to the error.
 *   it('x', withLogs(() => ({ tollgate: gw?.stderr() }), async () => { ... }))
 */
export function withLogs(getLogs, fn) {
  return async (t) => {
    try {
      return await fn(t);
    } catch (e) {
      let extra = '';
      let logs = {};
      try { logs = getLogs() ?? {}; } catch { /* ignore */ }
      for (const [name, text] of Object.entries(logs)) {
        if (text == null) continue;
        extra += `\n--- ${name} (tail) ---\n${tail(String(text), 80)}`;
      }
      if (extra) {
        try { e.message += extra; } catch { process.stderr.write(`# failure context:${extra}\n`); }
      }
      throw e;
    }
  };
}
