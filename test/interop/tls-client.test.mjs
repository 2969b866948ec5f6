// Client-side TLS (issue 10, item 3): what a TLS listener accepts and refuses, its handshake
// timeout, and mTLS client certificates mapped to grants.
//
//  - `openssl s_client` (Debian's openssl 3.0): TLS 1.0, 1.1 and 1.3-only refused; TLS 1.2 with a
//    suite that is not ECDHE + AEAD (plain RSA key exchange, DHE, CBC) refused, on an RSA listener
//    too, where ECDHE-RSA with GCM and ChaCha20-Poly1305 is the control that it serves at all;
//    ECDHE-ECDSA with AES-GCM and ChaCha20-Poly1305 accepted; a client's renegotiation ("R") refused
//    without a second handshake, and the gateway serves on.
//  - limits.tls_handshake_timeout_ms (300 ms on a gateway of its own, header_timeout_ms 60 s): a
//    client that sends nothing, and one that sends half a ClientHello, is closed after the
//    handshake timeout, counted in tollgate_tls_handshake_failures_total; a finished handshake is
//    not cut by it.
//  - the official SDK client over https with the throwaway CA and alice's client certificate, on
//    Streamable HTTP, legacy SSE and WebSocket: initialize, tools/list, tools/call.
//  - mTLS (listen[].tls.client_ca, grants[].tls_subject): alice's grant names her CN, bob's his
//    whole subject; their policies differ (alice: echo only; bob: all but echo), so which grant a
//    request got shows in tools/list, in what a call does, and in the audit log. A certificate from
//    another CA, one whose subject only looks like a grant's, and a token naming another grant are
//    no way in; `client_auth = "required"` refuses the handshake without a verified certificate.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/tls-client.test.mjs
//
// Every certificate is made at test time (lib/harness.mjs makeCerts, makeClientCerts).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { once } from 'node:events';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import * as H from './lib/harness.mjs';

H.requireNodeModules();

const { default: WsWebSocket } = await import('ws');
const [{ SSEClientTransport }, { WebSocketClientTransport }] = await Promise.all([
  import('@modelcontextprotocol/sdk/client/sse.js'),
  import('@modelcontextprotocol/sdk/client/websocket.js'),
]);

// The SDK's WebSocket transport calls `new WebSocket(url, 'mcp')`; Node has no WebSocket that takes
// a CA or a client certificate, so `ws` gets them, looked up by the URL object the transport holds.
const wsOptions = new WeakMap();
class TgWebSocket extends WsWebSocket {
  constructor(url, protocols, options) {
    super(url, protocols, { allowSynchronousEvents: false, ...(wsOptions.get(url) ?? {}), ...(options ?? {}) });
  }
}
globalThis.WebSocket = TgWebSocket;

const cleanup = new H.Cleanup();
let dir;
let certs; // server side: the test CA, an EC server certificate
let rsaServer; // an RSA server certificate from the same CA (plain RSA key exchange needs one)
let cc; // client side: the client CA, alice, bob, stranger (another CA), issue()
let odd; // client certificates from the client CA that name no grant, or only look like one
let standin;
let gw; // listeners: 0 TLS + client_ca (client_auth by default: optional), 1 client_auth required, 2 RSA, no client_ca
let gwTimeout; // tls_handshake_timeout_ms 300
let gwAnon; // an anonymous grant besides alice, optional client_auth
let anonConf; // (grants) => rewrites gwAnon's configuration
let anonGrants;
let auditFile;
let sdk;
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const BOB_TOKEN = 'bob-' + H.randomToken();
const OPENSSL_TIMEOUT_MS = 20000;
const HANDSHAKE_TIMEOUT_MS = 300;

const logs = () => ({
  tollgate: gw?.stderr(),
  'tollgate (handshake timeout)': gwTimeout?.stderr(),
  'tollgate (anonymous)': gwAnon?.stderr(),
});
const test = (name, opts, fn) => {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return it(name, opts, H.withLogs(logs, fn));
};

const port = (g, i) => g.listeners[i].port;
const mcpUrl = (g, i, kind = 'mcp') => `${kind === 'ws' ? 'wss' : 'https'}://127.0.0.1:${port(g, i)}/cowork-os/${kind}`;

/** A fetch that trusts the test CA and, given an identity ({cert, key} paths), presents it. */
function fetchAs(id, { keepAlive = true } = {}) {
  return H.makeFetch({
    ca: certs.caPem, cleanup, keepAlive,
    cert: id ? fs.readFileSync(id.cert) : undefined,
    key: id ? fs.readFileSync(id.key) : undefined,
  });
}

/**
 * Which grant a client gets: initialize and tools/list over raw HTTP on listener i of g.
 * Returns { status, text, headers } when initialize is refused, else { status: 200, tools: [names],
 * session: { headers }, fetch, url } for more requests on that session.
 */
/**
 * The log's position after every line written so far: lines are written by a thread of the
 * gateway's own, so a request's lines may land after the next test began. A request with a
 * foreign Origin logs a line naming a fresh marker; once it is there, so is all before it.
 */
async function logMark(g, i) {
  const marker = `http://mark-${crypto.randomBytes(6).toString('hex')}.example`;
  await H.postRaw(fetchAs(null), mcpUrl(g, i), H.initializeBody(), { origin: marker });
  await H.waitUntil(() => g.stderr().includes(marker), { timeout: 10000, what: 'the log marker' });
  const at = g.stderr().indexOf(marker);
  return g.stderr().indexOf('\n', at) + 1;
}

async function grantView(g, i, id, headers = {}) {
  const f = fetchAs(id);
  const url = mcpUrl(g, i);
  const init = await H.postRaw(f, url, H.initializeBody(), headers);
  if (init.status !== 200) return { status: init.status, text: init.text, headers: init.headers };
  const s = { headers: { ...headers, 'mcp-protocol-version': init.messages[0]?.result?.protocolVersion ?? H.PROTOCOL_VERSION } };
  const sid = init.headers.get('mcp-session-id');
  if (sid) s.headers['mcp-session-id'] = sid;
  const n = await H.postRaw(f, url, { jsonrpc: '2.0', method: 'notifications/initialized' }, s.headers);
  assert.ok(n.status === 202 || n.status === 200, `notifications/initialized: HTTP ${n.status} ${n.text}`);
  const l = await H.postRaw(f, url, { jsonrpc: '2.0', id: 2, method: 'tools/list' }, s.headers);
  assert.equal(l.status, 200, `tools/list: HTTP ${l.status} ${l.text}`);
  const tools = l.messages[0]?.result?.tools?.map((t) => t.name);
  assert.ok(Array.isArray(tools), `tools/list answer: ${l.text.slice(0, 400)}`);
  return { status: 200, tools: tools.sort(), session: s, fetch: f, url };
}

const ALICE_TOOLS = ['echo'];
/** bob's policy allows everything but echo: his list is long and lacks echo. */
function assertBob(v, what) {
  assert.equal(v.status, 200, `${what}: HTTP ${v.status} ${v.text ?? ''}`);
  assert.ok(!v.tools.includes('echo') && v.tools.includes('execute_code'), `${what}: bob's tools expected, got ${v.tools}`);
}
function assertAlice(v, what) {
  assert.equal(v.status, 200, `${what}: HTTP ${v.status} ${v.text ?? ''}`);
  assert.deepEqual(v.tools, ALICE_TOOLS, `${what}: alice's tools expected`);
}
function assert401(v, what) {
  assert.equal(v.status, 401, `${what}: expected 401, got ${v.status} ${v.text ?? ''} tools=${v.tools}`);
  assert.match(v.headers.get('www-authenticate') ?? '', /^Bearer/, `${what}: WWW-Authenticate`);
}

/** tools/call on a raw session from grantView(); returns the JSON-RPC answer. */
async function rawCall(v, name, args, id = 3) {
  const r = await H.postRaw(v.fetch, v.url, { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } },
    v.session.headers);
  assert.equal(r.status, 200, `tools/call ${name}: HTTP ${r.status} ${r.text}`);
  return r.messages.find((m) => m.id === id);
}

/**
 * openssl s_client -connect 127.0.0.1:PORT -CAfile CA -msg ARGS, stdin /dev/null (so it ends right
 * after the handshake). Resolves with { code, out } (stdout and stderr together).
 */
function sClient(p, args) {
  const child = spawn('openssl', ['s_client', '-connect', `127.0.0.1:${p}`, '-CAfile', certs.caCert, '-msg', ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { out += d; });
  const done = new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal, out })));
  return H.within(done, OPENSSL_TIMEOUT_MS, `openssl s_client ${args.join(' ')} exiting`)
    .catch((e) => { child.kill('SIGKILL'); throw e; });
}

const count = (re, s) => (s.match(new RegExp(re.source, re.flags.includes('g') ? re.flags : re.flags + 'g')) ?? []).length;

/** The handshake was tried (a ClientHello left) and did not finish: no ServerHello or no Finished from the server. */
function assertRefused(r, what) {
  assert.notEqual(r.code, 0, `${what}: openssl s_client succeeded:\n${r.out}`);
  assert.match(r.out, /^>>> [^\n]*ClientHello$/m, `${what}: openssl sent no ClientHello, so it proves nothing:\n${r.out}`);
  assert.equal(count(/^<<< [^\n]*Finished$/m, r.out), 0, `${what}: the server finished a handshake:\n${r.out}`);
  assert.match(r.out, /Cipher is \(NONE\)/, `${what}: a cipher was agreed:\n${r.out}`);
}

function assertAccepted(r, suite, what) {
  assert.equal(r.code, 0, `${what}: openssl s_client failed (${r.code}):\n${r.out}`);
  assert.match(r.out, new RegExp(`New, TLSv1\\.2, Cipher is ${suite}\\b`), `${what}: the suite agreed:\n${r.out}`);
  assert.match(r.out, /Verify return code: 0 \(ok\)/, `${what}: the server certificate verified:\n${r.out}`);
}

const failures = async (g) => (await g.metrics())['tollgate_tls_handshake_failures_total'];

/** A real ClientHello's bytes (a node client's, caught by a plain TCP server). */
async function clientHello() {
  const srv = net.createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const first = new Promise((resolve) => srv.once('connection', (c) => c.once('data', (d) => { resolve(d); c.destroy(); })));
  const cl = tls.connect({ host: '127.0.0.1', port: srv.address().port, rejectUnauthorized: false });
  cl.on('error', () => {});
  const hello = await H.within(first, 10000, 'a ClientHello');
  cl.destroy();
  srv.close();
  assert.equal(hello[0], 0x16, 'a handshake record');
  return hello;
}

/** Node TLS client: resolves 'established' on secureConnect (after a request answered), or the error/close. */
function tlsAttempt(p, id) {
  return new Promise((resolve) => {
    const s = tls.connect({
      host: '127.0.0.1', port: p, ca: certs.caPem,
      cert: id ? fs.readFileSync(id.cert) : undefined, key: id ? fs.readFileSync(id.key) : undefined,
    });
    let established = false;
    s.once('secureConnect', () => {
      established = true;
      s.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
    });
    let data = '';
    s.on('data', (d) => { data += d; });
    s.once('error', (e) => { s.destroy(); resolve({ established, error: e, data }); });
    s.once('close', () => resolve({ established, data }));
  });
}

// ---------------------------------------------------------------------------

/**
 * A copy of the certificate `pem` (signed by the CA whose key is `caKeyFile`) with `from` replaced
 * by `to` (same length) in its TBSCertificate, re-signed with that key: for subjects openssl's
 * -subj cannot write, such as a CN with a NUL byte. DER lengths stay the same, so only the
 * signature's BIT STRING is rebuilt.
 */
function patchCert(pem, caKeyFile, from, to) {
  const der = Buffer.from(pem.replace(/-----[^-]+-----/g, '').replace(/\s/g, ''), 'base64');
  const tlv = (o) => {
    let len = der[o + 1];
    let hdr = 2;
    if (len & 0x80) {
      const n = len & 0x7f;
      len = 0;
      for (let i = 0; i < n; i++) len = len * 256 + der[o + 2 + i];
      hdr = 2 + n;
    }
    return { start: o, hdr, end: o + hdr + len };
  };
  const outer = tlv(0);
  const tbsT = tlv(outer.start + outer.hdr);
  const algT = tlv(tbsT.end);
  const tbs = Buffer.from(der.subarray(tbsT.start, tbsT.end));
  const at = tbs.indexOf(Buffer.from(from));
  assert.ok(at > 0 && from.length === to.length, `patchCert: ${from} in the certificate`);
  Buffer.from(to, 'latin1').copy(tbs, at);
  const sig = crypto.sign('sha256', tbs, fs.readFileSync(caKeyFile));
  const enc = (tag, body) => {
    const l = body.length;
    const len = l < 128 ? [l] : l < 256 ? [0x81, l] : [0x82, l >> 8, l & 255];
    return Buffer.concat([Buffer.from([tag, ...len]), body]);
  };
  const cert = enc(0x30, Buffer.concat([tbs, der.subarray(algT.start, algT.end), enc(0x03, Buffer.concat([Buffer.from([0]), sig]))]));
  return `-----BEGIN CERTIFICATE-----\n${cert.toString('base64').match(/.{1,64}/g).join('\n')}\n-----END CERTIFICATE-----\n`;
}

function writePolicy(name, obj) {
  const f = path.join(dir, name);
  fs.writeFileSync(f, JSON.stringify(obj));
  return f;
}

before(async () => {
  dir = H.makeTempDir(cleanup, 'tollgate-tlsclient-');
  sdk = await H.loadSdk();
  certs = H.makeCerts(dir);
  rsaServer = H.issueCert(dir, {
    name: 'rsa-server', subj: '/CN=127.0.0.1', rsa: true, ca: { cert: certs.caCert, key: path.join(dir, 'ca.key') },
    ext: ['keyUsage=critical,digitalSignature,keyEncipherment', 'extendedKeyUsage=serverAuth',
      'subjectAltName=IP:127.0.0.1,DNS:localhost'],
  });
  cc = H.makeClientCerts(dir);
  odd = {
    otherOrg: cc.issue('other-org-bob', '/O=other/CN=bob'), // bob's CN, not bob's subject
    carol: cc.issue('carol', '/O=acme/CN=carol'), // names no grant
    oneAttr: cc.issue('one-attr', '/O=acme, CN=bob'), // one O attribute whose value reads like bob's subject
  };
  // CN "alice\0evil": a name that is not alice's, though a C string of it reads "alice".
  const nul = cc.issue('nul-cn', '/O=acme/CN=aliceZevil');
  fs.writeFileSync(nul.cert, patchCert(nul.pem, path.join(dir, 'clients-ca.key'), 'aliceZevil', 'alice\0evil'));
  const subj = execFileSync('openssl', ['x509', '-in', nul.cert, '-noout', '-subject', '-nameopt', 'RFC2253'], { encoding: 'utf8' });
  assert.match(subj, /CN=alice\\00evil/, `the NUL certificate: ${subj}`);
  execFileSync('openssl', ['verify', '-CAfile', cc.ca.cert, nul.cert], { stdio: 'pipe' });
  odd.nul = nul;
  // alice's subject, from the client CA, but its validity two years in the past (openssl 3.0's
  // x509 cannot backdate): both UTCTime values of the copy get their year lowered by 2.
  const exp = cc.issue('expired-alice', '/O=acme/CN=alice');
  const times = [...new Set(exp.pem && Buffer.from(exp.pem.replace(/-----[^-]+-----/g, '').replace(/\s/g, ''), 'base64')
    .toString('latin1').match(/\d{12}Z/g))];
  assert.equal(times.length, 2, `the expiring certificate's notBefore and notAfter: ${times}`);
  let pem = exp.pem;
  for (const tm of times) {
    pem = patchCert(pem, path.join(dir, 'clients-ca.key'), tm, String(Number(tm.slice(0, 2)) - 2).padStart(2, '0') + tm.slice(2));
  }
  fs.writeFileSync(exp.cert, pem);
  const end = execFileSync('openssl', ['x509', '-in', exp.cert, '-noout', '-enddate'], { encoding: 'utf8' });
  assert.ok(new Date(end.trim().replace('notAfter=', '')) < new Date(), `expired: ${end}`);
  odd.expired = exp;

  standin = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  const alicePolicy = writePolicy('alice.json', { version: '1', default: 'deny', tools: { echo: { action: 'allow' } } });
  const bobPolicy = writePolicy('bob.json', { version: '1', default: 'allow', tools: { echo: { action: 'deny' } } });
  const upstream = {
    name: 'cowork-os', url: standin.url, default: true, initialize: 'local',
    headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` },
  };
  const serverTls = { cert: certs.cert, key: certs.key };
  const alice = { name: 'alice', tls_subject: 'alice', policies: [{ upstream: 'cowork-os', policy: alicePolicy }] };
  const bob = {
    name: 'bob', tls_subject: 'O=acme, CN=bob', token_sha256: H.sha256hex(BOB_TOKEN),
    policies: [{ upstream: 'cowork-os', policy: bobPolicy }],
  };
  auditFile = path.join(dir, 'audit.log');
  gw = await H.startTollgate(H.writeConf(dir, {
    file: 'main.conf',
    log: { level: 'debug' }, // the "TLS client certificate" line
    listeners: [
      { tls: { ...serverTls, client_ca: cc.ca.cert } },
      { tls: { ...serverTls, client_ca: cc.ca.cert, client_auth: 'required' } },
      { tls: { cert: rsaServer.cert, key: rsaServer.key } },
    ],
    admin: true,
    // Above any handshake of this loaded machine under ASan (~0.2 s), so only the test that idles
    // past it after a finished handshake waits for it.
    limits: { tls_handshake_timeout_ms: 2000 },
    grants: [alice, bob],
    upstreams: [upstream],
    audit: { file: auditFile },
  }), { cleanup, listeners: 3, admin: true });
  assert.deepEqual(gw.listeners.map((l) => l.tls), [true, true, true]);

  gwTimeout = await H.startTollgate(H.writeConf(dir, {
    file: 'timeout.conf',
    listeners: [{ tls: serverTls }],
    admin: true,
    limits: { tls_handshake_timeout_ms: HANDSHAKE_TIMEOUT_MS, header_timeout_ms: 60000, idle_timeout_ms: 60000 },
    grants: [{ name: 'local', anonymous: true }],
    upstreams: [upstream],
  }), { cleanup, listeners: 1, admin: true });

  anonConf = (grants) => H.writeConf(dir, {
    file: 'anon.conf',
    listeners: [{ tls: { ...serverTls, client_ca: cc.ca.cert, client_auth: 'optional' } }],
    grants: [{ name: 'anyone', anonymous: true }, ...grants],
    upstreams: [upstream], // the upstream's own policy (allow all) for the anonymous grant
  });
  anonGrants = { alice, bob };
  gwAnon = await H.startTollgate(anonConf([alice, bob]), { cleanup, listeners: 1 });
});

after(() => cleanup.run());

// ---------------------------------------------------------------------------

describe('openssl s_client: versions and suites', () => {
  let before0;
  let refusals = 0;
  before(async () => { before0 = await failures(gw); });

  const refused = [
    ['TLS 1.0', 0, ['-tls1', '-cipher', 'DEFAULT:@SECLEVEL=0']],
    ['TLS 1.1', 0, ['-tls1_1', '-cipher', 'DEFAULT:@SECLEVEL=0']],
    ['TLS 1.3 only', 0, ['-tls1_3']],
    ['TLS 1.2 ECDHE-ECDSA-AES128-SHA (CBC)', 0, ['-tls1_2', '-cipher', 'ECDHE-ECDSA-AES128-SHA']],
    ['TLS 1.2 ECDHE-ECDSA-AES256-SHA384 (CBC)', 0, ['-tls1_2', '-cipher', 'ECDHE-ECDSA-AES256-SHA384']],
    ['TLS 1.2 AES256-GCM-SHA384 (RSA key exchange)', 2, ['-tls1_2', '-cipher', 'AES256-GCM-SHA384']],
    ['TLS 1.2 AES128-GCM-SHA256 (RSA key exchange)', 2, ['-tls1_2', '-cipher', 'AES128-GCM-SHA256']],
    ['TLS 1.2 DHE-RSA-AES128-GCM-SHA256 (finite-field DH)', 2, ['-tls1_2', '-cipher', 'DHE-RSA-AES128-GCM-SHA256']],
    ['TLS 1.2 ECDHE-RSA-AES128-SHA256 (CBC)', 2, ['-tls1_2', '-cipher', 'ECDHE-RSA-AES128-SHA256']],
  ];
  for (const [what, li, args] of refused) {
    test(`${what} is refused`, async () => {
      const r = await sClient(port(gw, li), args);
      refusals++;
      assertRefused(r, what);
    });
  }

  const accepted = [
    ['ECDHE-ECDSA-AES128-GCM-SHA256', 0],
    ['ECDHE-ECDSA-AES256-GCM-SHA384', 0],
    ['ECDHE-ECDSA-CHACHA20-POLY1305', 0],
    ['ECDHE-RSA-AES128-GCM-SHA256', 2], // the RSA listener serves, so its refusals above are the suites'
    ['ECDHE-RSA-CHACHA20-POLY1305', 2],
  ];
  for (const [suite, li] of accepted) {
    test(`TLS 1.2 ${suite} is accepted`, async () => {
      assertAccepted(await sClient(port(gw, li), ['-tls1_2', '-cipher', suite]), suite, suite);
    });
  }

  test('no TLS 1.2 suite list at all: the server picks ECDHE with an AEAD', async () => {
    const r = await sClient(port(gw, 0), ['-tls1_2']);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /Cipher is ECDHE-ECDSA-(AES(128|256)-GCM-SHA(256|384)|CHACHA20-POLY1305)\b/, r.out);
  });

  test('every refusal is counted in tollgate_tls_handshake_failures_total', async () => {
    assert.equal(refusals, refused.length, 'the refusal tests ran');
    await gw.waitForMetric('tollgate_tls_handshake_failures_total', (v) => v - before0 === refusals,
      { what: `${refusals} more handshake failures than ${before0}` });
  });
});

describe('openssl s_client: renegotiation', () => {
  test('a client-initiated renegotiation ("R") is refused, without a second handshake; the gateway serves on', async () => {
    const child = spawn('openssl', ['s_client', '-connect', `127.0.0.1:${port(gw, 0)}`, '-tls1_2', '-CAfile', certs.caCert, '-msg'],
      { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { out += d; });
    const exited = new Promise((resolve) => child.once('close', (code) => resolve(code)));
    try {
      await H.waitUntil(() => /SSL-Session:[\s\S]*Verify return code: 0 \(ok\)[\s\S]*\n---\n/.test(out) || child.exitCode !== null,
        { timeout: OPENSSL_TIMEOUT_MS, what: 'the first handshake', detail: () => out });
      assert.equal(count(/^<<< [^\n]*Finished$/m, out), 1, `the first handshake finished:\n${out}`);
      child.stdin.write('R\n');
      // Whatever the server does (mbedtls with renegotiation disabled answers a warning alert), the
      // client's attempt ends: an alert or a close. openssl then gives up, or we close its stdin.
      await H.waitUntil(() => /RENEGOTIATING[\s\S]*(Alert|closed|errno|error)/.test(out) || child.exitCode !== null,
        { timeout: OPENSSL_TIMEOUT_MS, what: 'the end of the renegotiation attempt', detail: () => out });
      child.stdin.end();
      await H.within(exited, OPENSSL_TIMEOUT_MS, 'openssl s_client exiting');
    } finally {
      child.kill('SIGKILL');
    }
    // stdout and stderr interleave: openssl's error line may come between RENEGOTIATING and the record.
    assert.match(out, /RENEGOTIATING[\s\S]*>>> [^\n]*ClientHello/, `openssl sent a second ClientHello:\n${out}`);
    assert.equal(count(/^<<< [^\n]*ServerHello$/m, out), 1, `the server answered the renegotiation with a ServerHello:\n${out}`);
    assert.equal(count(/^<<< [^\n]*Finished$/m, out), 1, `the server finished a second handshake:\n${out}`);
    assert.match(out, /no_renegotiation|no renegotiation/, `the refusal is no_renegotiation:\n${out}`);
    const v = await grantView(gw, 0, cc.alice);
    assertAlice(v, 'a new connection after the refused renegotiation');
  });
});

describe('handshake timeout (tls_handshake_timeout_ms = 300, header_timeout_ms = 60000)', () => {
  /** Connects, sends `bytes` (if any) and resolves with the ms from connect to the gateway's close. */
  async function closedAfter(bytes) {
    const s = net.connect(port(gwTimeout, 0), '127.0.0.1');
    s.on('error', () => {}); // a reset is a close too
    let got = 0;
    s.on('data', (d) => { got += d.length; });
    await H.within(once(s, 'connect'), 10000, 'connect');
    const t0 = performance.now();
    if (bytes) s.write(bytes);
    // not once(s, 'close'), which rejects on 'error': a reset (ECONNRESET) is a close too
    const closed = new Promise((resolve) => s.once('close', resolve));
    await H.within(closed, 20000, 'the gateway closing a connection with no handshake');
    return { ms: performance.now() - t0, got };
  }

  /** The first flight of a real TLS client (Node's ClientHello), caught by a local server. */

  let base;
  let timeouts = 0;
  before(async () => { base = await failures(gwTimeout); });

  test('a client that sends nothing is closed after ~300 ms', async (t) => {
    const from = gwTimeout.stderr().length;
    const r = await closedAfter(null);
    timeouts++;
    t.diagnostic(`closed after ${r.ms.toFixed(0)} ms`);
    assert.ok(r.ms >= 250, `closed after ${r.ms.toFixed(0)} ms, before the handshake timeout`);
    assert.ok(r.ms < 10000, `closed after ${r.ms.toFixed(0)} ms: that is the header timeout's business, not the handshake's`);
    assert.equal(r.got, 0, 'nothing was sent to a client that said nothing');
    await gwTimeout.waitForLog(/msg="TLS handshake timed out"[^\n]*timeout_ms=300/, { from });
  });

  test('a client that sends half a ClientHello is closed after ~300 ms', async (t) => {
    const hello = await clientHello();
    const from = gwTimeout.stderr().length;
    const r = await closedAfter(hello.subarray(0, Math.floor(hello.length / 2)));
    timeouts++;
    t.diagnostic(`ClientHello ${hello.length} bytes, ${Math.floor(hello.length / 2)} sent; closed after ${r.ms.toFixed(0)} ms`);
    assert.ok(r.ms >= 250, `closed after ${r.ms.toFixed(0)} ms, before the handshake timeout`);
    assert.ok(r.ms < 10000, `closed after ${r.ms.toFixed(0)} ms`);
    await gwTimeout.waitForLog(/msg="TLS handshake timed out"/, { from });
  });

  test('a client that sends its whole ClientHello and then stalls is closed after ~300 ms, the server\'s flight sent', async (t) => {
    const hello = await clientHello();
    const r = await closedAfter(hello);
    timeouts++;
    t.diagnostic(`closed after ${r.ms.toFixed(0)} ms, ${r.got} bytes of server flight`);
    assert.ok(r.got > 0, 'the server answered the ClientHello');
    assert.ok(r.ms >= 250 && r.ms < 10000, `closed after ${r.ms.toFixed(0)} ms`);
  });

  test('a ClientHello trickled a byte every 50 ms is closed at the deadline from accept, not re-armed by each byte', async (t) => {
    const hello = await clientHello();
    const s = net.connect(port(gwTimeout, 0), '127.0.0.1');
    s.on('error', () => {});
    await H.within(once(s, 'connect'), 10000, 'connect');
    const t0 = performance.now();
    let i = 0;
    const tick = setInterval(() => { if (i < hello.length && !s.destroyed) s.write(hello.subarray(i, ++i)); }, 50);
    try {
      // 'close' comes either way: a byte written as the gateway closes may draw a RST (ECONNRESET)
      await H.within(new Promise((resolve) => s.once('close', resolve)), 20000, 'the gateway closing a trickling handshake');
    } finally {
      clearInterval(tick);
    }
    const ms = performance.now() - t0;
    timeouts++;
    t.diagnostic(`closed after ${ms.toFixed(0)} ms and ${i} bytes`);
    assert.ok(ms >= 250, `closed after ${ms.toFixed(0)} ms`);
    assert.ok(ms < 3000, `closed after ${ms.toFixed(0)} ms (${i} bytes): each byte seems to re-arm the handshake timer`);
  });

  test('each timeout is counted in tollgate_tls_handshake_failures_total', async () => {
    assert.equal(timeouts, 4, 'the timeout tests ran');
    await gwTimeout.waitForMetric('tollgate_tls_handshake_failures_total', (v) => v - base === 4,
      { what: `4 more handshake failures than ${base}` });
  });

  test('a finished handshake is not cut by the handshake timeout (gateway with 2000 ms): the request after it is served', async () => {
    const s = tls.connect({ host: '127.0.0.1', port: port(gw, 2), ca: certs.caPem });
    let data = '';
    let closed = false;
    s.on('data', (d) => { data += d; });
    s.on('error', () => {});
    s.on('close', () => { closed = true; });
    await H.within(once(s, 'secureConnect'), 10000, 'the handshake');
    await H.quietFor(2300); // past tls_handshake_timeout_ms: nothing may happen to the connection
    assert.equal(closed, false, 'the connection was closed after its handshake had finished');
    s.write('POST /cowork-os/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ' + BOB_TOKEN +
      '\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\n' +
      `Content-Length: ${JSON.stringify(H.initializeBody()).length}\r\n\r\n${JSON.stringify(H.initializeBody())}`);
    await H.within(once(s, 'close'), 10000, 'the answer');
    assert.match(data, /^HTTP\/1\.1 200 /, `answer: ${data.slice(0, 300)}`);
  });
});

describe('an idle keep-alive TLS connection gives its record buffers back (core/wire/tls.c tg_tls_trim)', () => {
  const trimmed = async () => (await gwTimeout.metrics())['tollgate_tls_trimmed_bytes_total'];
  /** Reads one HTTP answer with a Content-Length off a keep-alive socket. */
  function answer(s) {
    return new Promise((resolve, reject) => {
      let buf = Buffer.alloc(0);
      const onData = (d) => {
        buf = Buffer.concat([buf, d]);
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end).toString();
        const m = /\r\ncontent-length: *(\d+)/i.exec(head);
        if (!m) { s.off('data', onData); reject(new Error(`no Content-Length: ${head}`)); return; }
        if (buf.length < end + 4 + Number(m[1])) return;
        s.off('data', onData);
        resolve({ head, body: buf.subarray(end + 4, end + 4 + Number(m[1])).toString() });
      };
      s.on('data', onData);
      s.once('error', reject);
    });
  }
  /** An initialize whose body is ~bytes long (padding in clientInfo), so that its records are full size. */
  const bigInit = (id, bytes) => {
    const body = H.initializeBody();
    body.id = id;
    body.params.clientInfo = { ...body.params.clientInfo, pad: 'p'.repeat(bytes) };
    const text = JSON.stringify(body);
    return 'POST /cowork-os/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
      `Accept: application/json, text/event-stream\r\nContent-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`;
  };

  test('idle past 1 s, its pages are given back (counted in tollgate_tls_trimmed_bytes_total); big requests after it are read whole', async () => {
    const base = await trimmed();
    assert.equal(typeof base, 'number', 'tollgate_tls_trimmed_bytes_total is not exported');
    const s = tls.connect({ host: '127.0.0.1', port: port(gwTimeout, 0), ca: certs.caPem });
    s.on('error', () => {});
    await H.within(once(s, 'secureConnect'), 10000, 'the handshake');
    for (let round = 1; round <= 3; round++) {
      const got = answer(s);
      s.write(bigInit(round, 40000)); // three records of up to 16 KiB: every page of the input buffer
      const a = await H.within(got, 10000, `answer ${round}`);
      assert.match(a.head, /^HTTP\/1\.1 200 /, a.head);
      assert.equal(JSON.parse(a.body).id, round, a.body.slice(0, 300));
      // The connection idles: the gateway trims it (an event to wait for, not a sleep).
      const before = await trimmed();
      await gwTimeout.waitForMetric('tollgate_tls_trimmed_bytes_total', (v) => v >= before + 2 * 4096,
        { what: `the idle connection's record buffers to be trimmed (round ${round})` });
    }
    assert.ok(await trimmed() > base);
    s.end();
  });

  test('a reload that cuts idle_timeout_ms below the trim delay while a connection waits to be trimmed: it still times out', async () => {
    const conf = (idle) => H.writeConf(dir, {
      file: 'trim-reload.conf',
      listeners: [{ tls: { cert: certs.cert, key: certs.key } }],
      admin: true,
      limits: { idle_timeout_ms: idle },
      grants: [{ name: 'local', anonymous: true }],
      upstreams: [{ name: 'cowork-os', url: standin.url, default: true, headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` } }],
    });
    const g = await H.startTollgate(conf(60000), { cleanup, listeners: 1, admin: true });
    // The reload has to land inside the idle second before the trim; a slow one is tried again.
    for (let attempt = 1; ; attempt++) {
      const before = (await g.metrics())['tollgate_tls_trimmed_bytes_total'];
      const s = tls.connect({ host: '127.0.0.1', port: port(g, 0), ca: certs.caPem });
      s.on('error', () => {});
      const closed = new Promise((resolve) => s.once('close', resolve));
      await H.within(once(s, 'secureConnect'), 10000, 'the handshake');
      const from = g.stderr().length;
      conf(attempt % 2 ? 300 : 400); // a change each time, so that each SIGHUP reloads
      process.kill(g.proc.pid, 'SIGHUP');
      await g.waitForLog(/msg="configuration reloaded"/, { from });
      if ((await g.metrics())['tollgate_tls_trimmed_bytes_total'] !== before) {
        assert.ok(attempt < 5, 'the reload never landed before the trim');
        s.destroy();
        conf(60000);
        const again = g.stderr().length;
        process.kill(g.proc.pid, 'SIGHUP');
        await g.waitForLog(/msg="configuration reloaded"/, { from: again });
        continue;
      }
      // Trimmed at 1 s, then closed for idleness at once (before the fix: a deadline 2^64 ms away).
      await H.within(closed, 10000, 'the idle connection closing after the trim');
      break;
    }
  });
});

describe('a burst of handshakes is sliced (tls_handshake_slice_ms = 1)', () => {
  let gwSlice;
  const putOff = async () => (await gwSlice.metrics())['tollgate_tls_handshakes_put_off_total'];
  /** A TLS client that asks /healthz once its handshake is done; resolves with what it got. */
  function healthz(p) {
    return new Promise((resolve) => {
      const s = tls.connect({ host: '127.0.0.1', port: p, ca: certs.caPem });
      let data = '';
      s.once('secureConnect', () => s.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'));
      s.on('data', (d) => { data += d; });
      s.once('error', (e) => resolve({ error: e, data }));
      s.once('close', () => resolve({ data }));
    });
  }

  before(async () => {
    gwSlice = await H.startTollgate(H.writeConf(dir, {
      file: 'slice.conf',
      listeners: [{ tls: { cert: certs.cert, key: certs.key } }],
      admin: true,
      // each handshake step (a few ms of public-key work) spends the slice alone: a burst waits
      limits: { tls_handshake_slice_ms: 1, tls_handshake_timeout_ms: 60000 },
      grants: [{ name: 'local', anonymous: true }],
      upstreams: [{ name: 'cowork-os', url: standin.url, default: true, initialize: 'local',
        headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` } }],
    }), { cleanup, listeners: 1, admin: true });
  });

  test('40 clients at once: every handshake ends and its request is answered; some waited for a later iteration', async () => {
    const p = port(gwSlice, 0);
    const f0 = await failures(gwSlice);
    const before0 = await putOff();
    // and clients that send their ClientHello and go: a connection closed while it waits
    const hello = await clientHello();
    const quitters = Array.from({ length: 8 }, () => new Promise((resolve) => {
      const s = net.connect(p, '127.0.0.1', () => s.write(hello, () => { s.destroy(); resolve(); }));
      s.on('error', resolve);
    }));
    // and clients that send their ClientHello and then 200 KiB more: closed (a handshake put off
    // keeps 64 KiB at most), whichever way their bytes are taken
    const floods = Array.from({ length: 2 }, () => new Promise((resolve) => {
      const s = net.connect(p, '127.0.0.1', () => { s.write(hello); s.write(Buffer.alloc(200 * 1024, 0x16)); });
      s.on('data', () => {});
      s.on('error', () => {});
      s.on('close', resolve);
    }));
    const rs = await H.within(Promise.all(Array.from({ length: 40 }, () => healthz(p))), 60000, '40 handshakes');
    await Promise.all(quitters);
    await H.within(Promise.all(floods), 30000, 'the flooding clients to be closed');
    rs.forEach((r, i) => assert.match(r.data, /^HTTP\/1\.1 200 /, `client ${i}: ${r.error ?? ''} ${r.data.slice(0, 200)}`));
    const waited = (await putOff()) - before0;
    assert.ok(waited > 0, 'no handshake waited: the slice is not applied');
    assert.ok((await failures(gwSlice)) - f0 <= 2, 'a handshake failed besides the flooding clients\'');
  });

  test('once the burst is over, nothing waits: a lone handshake is not put off (none is left counted as waiting)', async () => {
    // the burst's connections gone (the one left open is the metrics request's own)
    await gwSlice.waitForMetric('tollgate_connections_open', (v) => v === 1, { timeout: 20000 });
    const before0 = await putOff();
    for (let i = 0; i < 3; i++) {
      const r = await healthz(port(gwSlice, 0));
      assert.match(r.data, /^HTTP\/1\.1 200 /, `lone client ${i}: ${r.data.slice(0, 200)}`);
    }
    assert.equal(await putOff(), before0, 'a lone handshake waited: the waiting count was left above 0');
  });
});

describe('TLS session resumption (session tickets, listen[].tls.session_timeout_s)', () => {
  let gwTix;
  const INIT = JSON.stringify(H.initializeBody());
  const initRequest = (pathName) => `POST ${pathName} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
    `Accept: application/json, text/event-stream\r\nConnection: close\r\nContent-Length: ${INIT.length}\r\n\r\n${INIT}`;
  /** One TLS connection sending `request` once established: its answer, whether the session was
   * resumed, and the session (ticket) the server gave. */
  function exchange(opts, request) {
    return new Promise((resolve, reject) => {
      const s = tls.connect({ host: '127.0.0.1', ca: certs.caPem, ...opts });
      let data = '';
      let session;
      let reused;
      s.on('session', (b) => { session = b; });
      s.once('secureConnect', () => { reused = s.isSessionReused(); s.write(request); });
      s.on('data', (d) => { data += d; });
      s.once('error', reject);
      s.once('close', () => resolve({ data, reused, session }));
    });
  }

  before(async () => {
    gwTix = await H.startTollgate(H.writeConf(dir, {
      file: 'tickets.conf',
      listeners: [{ tls: { cert: certs.cert, key: certs.key } }, { tls: { cert: certs.cert, key: certs.key, session_timeout_s: 0 } }],
      grants: [{ name: 'local', anonymous: true }],
      upstreams: [{ name: 'cowork-os', url: standin.url, default: true, initialize: 'local',
        headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` } }],
    }), { cleanup, listeners: 2 });
  });

  test('a client that comes back with its ticket resumes (no full handshake) and is served', async () => {
    const first = await exchange({ port: port(gwTix, 0) }, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    assert.match(first.data, /^HTTP\/1\.1 200 /, first.data.slice(0, 200));
    assert.equal(first.reused, false);
    assert.ok(first.session, 'no session ticket was given');
    const again = await exchange({ port: port(gwTix, 0), session: first.session }, initRequest('/cowork-os/mcp'));
    assert.equal(again.reused, true, 'the ticket did not resume the session');
    assert.match(again.data, /^HTTP\/1\.1 200 /, again.data.slice(0, 300));
  });

  test('a ticket opens only on the listener that issued it; session_timeout_s = 0 gives none', async () => {
    const first = await exchange({ port: port(gwTix, 0) }, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    const elsewhere = await exchange({ port: port(gwTix, 1), session: first.session }, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    assert.equal(elsewhere.reused, false, 'another listener took the ticket');
    assert.match(elsewhere.data, /^HTTP\/1\.1 200 /, 'the full handshake instead was served');
    const again = await exchange({ port: port(gwTix, 1), session: elsewhere.session }, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    assert.equal(again.reused, false, 'a listener with session_timeout_s = 0 resumed a session');
  });

  test('mTLS: a session resumed keeps the certificate it was made with (alice), and only that', async () => {
    const alice = { cert: fs.readFileSync(cc.alice.cert), key: fs.readFileSync(cc.alice.key) };
    const req = initRequest('/cowork-os/mcp');
    const noCert = await exchange({ port: port(gw, 0) }, req);
    assert.match(noCert.data, /^HTTP\/1\.1 401 /, `no certificate, no token: ${noCert.data.slice(0, 200)}`);
    const first = await exchange({ port: port(gw, 0), ...alice }, req);
    assert.match(first.data, /^HTTP\/1\.1 200 /, `alice: ${first.data.slice(0, 200)}`);
    const again = await exchange({ port: port(gw, 0), session: first.session }, req); // no certificate sent now
    assert.equal(again.reused, true, 'alice\'s session was not resumed');
    assert.match(again.data, /^HTTP\/1\.1 200 /, `the resumed session is alice's: ${again.data.slice(0, 200)}`);
    // the anonymous session of the no-certificate client resumes as what it was: nobody
    const anon = await exchange({ port: port(gw, 0), session: noCert.session }, req);
    assert.equal(anon.reused, true);
    assert.match(anon.data, /^HTTP\/1\.1 401 /, `a resumed session without a certificate: ${anon.data.slice(0, 200)}`);
  });
});

describe('the SDK client over https with alice\'s certificate (no token)', () => {
  async function run(kind) {
    const { Client } = sdk;
    const client = new Client({ name: 'tollgate-tls-client', version: '1.0.0' }, { capabilities: {} });
    let transport;
    if (kind === 'streamable') {
      transport = new sdk.StreamableHTTPClientTransport(new URL(mcpUrl(gw, 0)), { fetch: fetchAs(cc.alice) });
    } else if (kind === 'sse') {
      transport = new SSEClientTransport(new URL(mcpUrl(gw, 0, 'sse')), { fetch: fetchAs(cc.alice) });
    } else {
      const u = new URL(mcpUrl(gw, 0, 'ws'));
      wsOptions.set(u, { ca: certs.caPem, cert: fs.readFileSync(cc.alice.cert), key: fs.readFileSync(cc.alice.key) });
      transport = new WebSocketClientTransport(u);
    }
    await client.connect(transport);
    try {
      const tools = (await client.listTools()).tools.map((x) => x.name);
      assert.deepEqual(tools, ALICE_TOOLS, `${kind}: alice's tools`);
      const r = await client.callTool({ name: 'echo', arguments: { text: `hello over ${kind}` } });
      assert.equal(H.resultText(r), `hello over ${kind}`);
      let err;
      try { await client.callTool({ name: 'execute_code', arguments: { language: 'python', code: 'print(1)' } }); } catch (e) { err = e; }
      assert.ok(err instanceof sdk.types.McpError && err.code === -32001, `${kind}: execute_code is not alice's: ${err}`);
    } finally {
      await client.close();
    }
  }
  test('Streamable HTTP', () => run('streamable'));
  test('legacy SSE', () => run('sse'));
  test('WebSocket', () => run('ws'));

  test('bob over Streamable HTTP with his token and no certificate (RSA listener, no client_ca)', async () => {
    const c = await H.connectClient(mcpUrl(gw, 2), { fetch: fetchAs(null), headers: { Authorization: `Bearer ${BOB_TOKEN}` }, cleanup });
    const tools = (await c.client.listTools()).tools.map((x) => x.name);
    assert.ok(!tools.includes('echo') && tools.includes('execute_code'), `bob's tools: ${tools}`);
    let err;
    try { await c.client.callTool({ name: 'echo', arguments: { text: 'x' } }); } catch (e) { err = e; }
    assert.ok(err instanceof sdk.types.McpError && err.code === -32001, `echo is not bob's: ${err}`);
    await c.close();
  });
});

describe('mTLS: client certificates as credentials (client_auth optional)', () => {
  test("alice's certificate is alice (her CN); it is logged at debug with its subject", async () => {
    const from = await logMark(gw, 0);
    const v = await grantView(gw, 0, cc.alice);
    assertAlice(v, "alice's certificate");
    await gw.waitForLog(/msg="TLS client certificate" [^\n]*subject="O=acme, CN=alice"/, { from });
    const a = await rawCall(v, 'echo', { text: 'audited' });
    assert.equal(a.result?.content?.[0]?.text, 'audited', JSON.stringify(a));
    const rec = await H.waitUntil(() => fs.existsSync(auditFile) && fs.readFileSync(auditFile, 'utf8').split('\n').filter(Boolean)
      .map((l) => JSON.parse(l)).find((x) => x.tool === 'echo' && x.grant === 'alice'),
    { what: "alice's echo in the audit log", detail: () => fs.existsSync(auditFile) && fs.readFileSync(auditFile, 'utf8').slice(-1500) });
    assert.equal(rec.decision, 'allow', JSON.stringify(rec));
  });

  test("bob's certificate is bob (his whole subject)", async () => {
    const v = await grantView(gw, 0, cc.bob);
    assertBob(v, "bob's certificate");
    const e = await rawCall(v, 'echo', { text: 'x' });
    assert.equal(e.error?.code, -32001, `echo is not bob's: ${JSON.stringify(e)}`);
  });

  test("bob's token alone is bob, on the mTLS listener too", async () => {
    assertBob(await grantView(gw, 0, null, { Authorization: `Bearer ${BOB_TOKEN}` }), "bob's token");
  });

  test("alice's certificate with bob's token: 401 (two credentials naming two grants)", async () => {
    assert401(await grantView(gw, 0, cc.alice, { Authorization: `Bearer ${BOB_TOKEN}` }), "alice's cert + bob's token");
  });

  test("bob's certificate with bob's token: bob (they agree)", async () => {
    assertBob(await grantView(gw, 0, cc.bob, { Authorization: `Bearer ${BOB_TOKEN}` }), "bob's cert + bob's token");
  });

  test("alice's certificate with a wrong token: 401", async () => {
    assert401(await grantView(gw, 0, cc.alice, { Authorization: 'Bearer not-a-token' }), "alice's cert + a wrong token");
  });

  test('a certificate from another CA (alice\'s subject): the handshake succeeds, the request is not alice\'s', async () => {
    const from = await logMark(gw, 0);
    assert401(await grantView(gw, 0, cc.stranger), 'the untrusted certificate, no token');
    assertBob(await grantView(gw, 0, cc.stranger, { Authorization: `Bearer ${BOB_TOKEN}` }), "the untrusted certificate + bob's token");
    assert.doesNotMatch(gw.stderr().slice(from), /msg="TLS client certificate"/, 'an unverified certificate was logged as a client certificate');
  });

  test("a certificate with bob's CN but another subject is not bob (his tls_subject is the whole subject)", async () => {
    assert401(await grantView(gw, 0, odd.otherOrg), 'O=other, CN=bob');
  });

  test('a certificate naming no grant is no credential', async () => {
    assert401(await grantView(gw, 0, odd.carol), 'O=acme, CN=carol');
  });

  test('one O attribute "acme, CN=bob" does not pass for bob\'s subject "O=acme, CN=bob"', async () => {
    assert401(await grantView(gw, 0, odd.oneAttr), 'O="acme, CN=bob"');
  });

  test('a CN with a NUL byte ("alice\\0evil") is not alice', async () => {
    assert401(await grantView(gw, 0, odd.nul), 'CN=alice\\0evil');
  });

  test("an expired certificate with alice's subject from the client CA is no credential", async () => {
    const from = await logMark(gw, 0);
    assert401(await grantView(gw, 0, odd.expired), 'expired alice');
    assert.doesNotMatch(gw.stderr().slice(from), /msg="TLS client certificate"/, 'an expired certificate was logged as a client certificate');
  });

  test("alice's certificate with bob's token on legacy SSE and WebSocket: 401 too", async () => {
    const f = fetchAs(cc.alice);
    const r = await f(mcpUrl(gw, 0, 'sse'), { headers: { accept: 'text/event-stream', authorization: `Bearer ${BOB_TOKEN}` } });
    const text = await r.text();
    assert.equal(r.status, 401, `GET /sse: HTTP ${r.status} ${text.slice(0, 200)}`);
    const ws = new WsWebSocket(mcpUrl(gw, 0, 'ws'), 'mcp', {
      ca: certs.caPem, cert: fs.readFileSync(cc.alice.cert), key: fs.readFileSync(cc.alice.key),
      headers: { authorization: `Bearer ${BOB_TOKEN}` },
    });
    const status = await H.within(new Promise((resolve) => {
      ws.once('unexpected-response', (req, res) => { resolve(res.statusCode); res.resume(); req.destroy(); });
      ws.once('open', () => { resolve('open'); ws.close(); });
      ws.once('error', (e) => resolve(`error ${e.message}`));
    }), 10000, 'the WebSocket upgrade answer');
    assert.equal(status, 401, `WebSocket upgrade with alice's certificate and bob's token: ${status}`);
    // and alice's certificate alone opens both
    const ok = await f(mcpUrl(gw, 0, 'sse'), { headers: { accept: 'text/event-stream' }, signal: AbortSignal.timeout(5000) });
    assert.equal(ok.status, 200, `GET /sse with alice's certificate: HTTP ${ok.status}`);
    await ok.body.cancel();
  });

  test("a session opened with alice's certificate is not bob's (token, no certificate)", async () => {
    const v = await grantView(gw, 0, cc.alice);
    assertAlice(v, 'alice');
    const h = { ...v.session.headers, Authorization: `Bearer ${BOB_TOKEN}` };
    const r = await H.postRaw(fetchAs(null), v.url, { jsonrpc: '2.0', id: 9, method: 'tools/list' }, h);
    assert.equal(r.status, 404, `bob on alice's session: HTTP ${r.status} ${r.text}`);
  });
});

describe('mTLS: client_auth = "required"', () => {
  let base;
  before(async () => { base = await failures(gw); });

  test('no certificate: no handshake (Node and openssl s_client)', async () => {
    const r = await tlsAttempt(port(gw, 1), null);
    assert.equal(r.established && /^HTTP\/1\.1 /.test(r.data), false, `served without a certificate: ${r.data.slice(0, 200)}`);
    assert.ok(r.error || !r.data, 'the connection ended without an answer');
    const s = await sClient(port(gw, 1), ['-tls1_2']);
    assert.notEqual(s.code, 0, s.out);
    assert.equal(count(/^<<< [^\n]*Finished$/m, s.out), 0, `the server finished the handshake:\n${s.out}`);
  });

  test('a certificate from another CA: no handshake', async () => {
    const r = await tlsAttempt(port(gw, 1), cc.stranger);
    assert.ok(!/^HTTP\/1\.1 /.test(r.data), `served with an untrusted certificate: ${r.data.slice(0, 200)}`);
    assert.ok(r.error, 'a TLS error');
    const s = await sClient(port(gw, 1), ['-tls1_2', '-cert', cc.stranger.cert, '-key', cc.stranger.key]);
    assert.notEqual(s.code, 0, s.out);
    assert.equal(count(/^<<< [^\n]*Finished$/m, s.out), 0, `the server finished the handshake:\n${s.out}`);
  });

  test('an expired certificate: no handshake', async () => {
    const r = await tlsAttempt(port(gw, 1), odd.expired);
    assert.ok(!/^HTTP\/1\.1 /.test(r.data), `served with an expired certificate: ${r.data.slice(0, 200)}`);
    assert.ok(r.error, 'a TLS error');
  });

  test("alice's certificate: alice", async () => {
    assertAlice(await grantView(gw, 1, cc.alice), 'alice on the required listener');
    const s = await sClient(port(gw, 1), ['-tls1_2', '-cert', cc.alice.cert, '-key', cc.alice.key]);
    assert.equal(s.code, 0, s.out);
    assert.equal(count(/^<<< [^\n]*Finished$/m, s.out), 1, s.out);
  });

  test('the refused handshakes are counted', async () => {
    await gw.waitForMetric('tollgate_tls_handshake_failures_total', (v) => v - base === 5,
      { what: `5 more handshake failures than ${base} (3 Node, 2 openssl)` });
  });
});

describe('mTLS with an anonymous grant', () => {
  test('no certificate and no token: the anonymous grant', async () => {
    const v = await grantView(gwAnon, 0, null);
    assert.equal(v.status, 200, v.text);
    assert.ok(v.tools.includes('echo') && v.tools.includes('execute_code'), `anonymous tools: ${v.tools}`);
  });

  test("a certificate from another CA (alice's subject) falls back to the anonymous grant", async () => {
    const v = await grantView(gwAnon, 0, cc.stranger);
    assert.equal(v.status, 200, v.text);
    assert.ok(v.tools.includes('echo') && v.tools.includes('execute_code'), `anonymous tools expected, got ${v.tools}`);
  });

  test("alice's certificate is alice, not anonymous", async () => {
    assertAlice(await grantView(gwAnon, 0, cc.alice), 'alice');
  });

  test("alice's certificate with bob's token: 401", async () => {
    assert401(await grantView(gwAnon, 0, cc.alice, { Authorization: `Bearer ${BOB_TOKEN}` }), "alice's cert + bob's token");
  });
});

describe('mTLS across a reload', () => {
  test('SIGHUP with alice\'s tls_subject moved to carol\'s CN: alice\'s certificate is anonymous, carol\'s is the alice grant', async () => {
    const from = gwAnon.stderr().length;
    anonConf([{ ...anonGrants.alice, tls_subject: 'O=acme, CN=carol' }, anonGrants.bob]);
    process.kill(gwAnon.proc.pid, 'SIGHUP');
    await gwAnon.waitForLog(/msg="configuration reloaded"/, { from });
    const a = await grantView(gwAnon, 0, cc.alice);
    assert.equal(a.status, 200, a.text);
    assert.ok(a.tools.includes('execute_code'), `alice's certificate after the reload: anonymous tools expected, got ${a.tools}`);
    assertAlice(await grantView(gwAnon, 0, odd.carol), "carol's certificate after the reload");
    assertBob(await grantView(gwAnon, 0, cc.bob), "bob's certificate after the reload");
  });
});

describe('the gateways', () => {
  test('stay up and exit cleanly on SIGTERM (no sanitizer report)', async () => {
    for (const [name, g] of [['main', gw], ['handshake timeout', gwTimeout], ['anonymous', gwAnon]]) {
      assert.equal(g.status(), 'running', `${name}: ${g.status()}`);
      g.assertNoSanitizerReport();
      const r = await g.stop();
      assert.deepEqual(r, { code: 0, signal: null }, `${name}: exit ${JSON.stringify(r)}\n${g.stderr().slice(-3000)}`);
      g.assertNoSanitizerReport();
    }
  });
});
