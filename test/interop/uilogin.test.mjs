// The admin throttle (core/app/throttle.c): wrong admin tokens on POST /admin/ui/login and on the admin API
// are limited per peer address (5 at once, then 5 a minute) and for all addresses together (30
// at once, then 30 a minute), like nginx's limit_req: beyond, 429 with Retry-After, the token not
// even looked at. Counted in /metrics, logged once per lockout. Plain HTTP requests from several
// loopback addresses (127.0.0.N: Linux routes all of 127/8 to lo), no browser.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/uilogin.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';

import * as H from './lib/harness.mjs';

const ADMIN_TOKEN = 'admin-' + H.randomToken();
const cleanup = new H.Cleanup();
let gw;

const logs = () => ({ 'tollgate process': gw?.status(), 'tollgate stderr': gw?.stderr() });
const test = (name, fn) => it(name, { timeout: 30000 }, H.withLogs(logs, fn));

/** An admin API request with `Authorization: Bearer token` from the loopback address `from`; resolves {status, headers, body}. */
function bearer(method, path, token, from) {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1', port: gw.adminPort, path, method, localAddress: from, agent: false,
      headers: { authorization: `Bearer ${token}`, 'content-length': 0 },
    }, (res) => {
      let b = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { b += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: b }));
    });
    req.on('error', reject);
    req.setTimeout(10000, () => req.destroy(new Error(`${method} ${path} from ${from}: no answer in 10 s`)));
    req.end();
  });
}

/** POST /admin/ui/login with token, from the loopback address `from`; resolves {status, headers, body}. */
function login(token, from = '127.0.0.1') {
  const body = `token=${encodeURIComponent(token)}`;
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1', port: gw.adminPort, path: '/admin/ui/login', method: 'POST', localAddress: from, agent: false,
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      let b = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { b += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: b }));
    });
    req.on('error', reject);
    req.setTimeout(10000, () => req.destroy(new Error(`login from ${from}: no answer in 10 s`)));
    req.end(body);
  });
}

const wrong = () => 'wrong-' + H.randomToken();

async function metric(name) {
  const v = (await gw.metrics({ token: ADMIN_TOKEN }))[name];
  assert.ok(typeof v === 'number', `${name} in /metrics`);
  return v;
}

before(async () => {
  const dir = H.makeTempDir(cleanup, 'tollgate-uilogin-');
  const conf = H.writeConf(dir, {
    admin: { token_sha256: H.sha256hex(ADMIN_TOKEN) },
    upstreams: [{ name: 'none', url: 'http://127.0.0.1:9/mcp', initialize: 'local' }],
  });
  gw = await H.startTollgate(conf, { cleanup, admin: true });
});
after(() => cleanup.run());

describe('POST /admin/ui/login is throttled', () => {
  test('per address: 5 wrong tokens are 401, the 6th and even the right token then 429 with Retry-After; another address signs in', async () => {
    const from = gw.stderr().length;
    for (let i = 0; i < 5; i++) {
      const r = await login(wrong(), '127.0.0.2');
      assert.equal(r.status, 401, `wrong token ${i + 1}: ${r.status}`);
    }
    const t = await login(wrong(), '127.0.0.2');
    assert.equal(t.status, 429, `the 6th wrong token: ${t.status} ${t.body.slice(0, 200)}`);
    const ra = Number(t.headers['retry-after']);
    assert.ok(Number.isInteger(ra) && ra >= 1 && ra <= 13, `Retry-After: ${t.headers['retry-after']}`);
    assert.equal(t.headers['set-cookie'], undefined, 'no session');
    const right = await login(ADMIN_TOKEN, '127.0.0.2');
    assert.equal(right.status, 429, 'a locked address gets 429 even with the right token (the token is not looked at)');
    assert.equal(right.headers['set-cookie'], undefined);
    for (let i = 0; i < 3; i++) assert.equal((await login(wrong(), '127.0.0.2')).status, 429);
    const other = await login(ADMIN_TOKEN, '127.0.0.3');
    assert.equal(other.status, 303, `the right token from another address: ${other.status} ${other.body.slice(0, 200)}`);
    assert.match(other.headers['set-cookie']?.[0] ?? '', /^tollgate_admin=[0-9a-f]{64};.*HttpOnly/);
    // logged once for this lockout, however many attempts met it
    await gw.waitForLog(/msg="admin page login throttled" scope=peer peer=127\.0\.0\.2 /, { from, what: 'the lockout line' });
    await H.quietFor(300);
    const lines = gw.stderr().slice(from).split('\n').filter((l) => /admin page login throttled/.test(l));
    assert.equal(lines.length, 1, lines.join('\n'));
    assert.ok(!gw.stderr().includes(ADMIN_TOKEN), 'the token is never logged');
    assert.equal(await metric('tollgate_admin_login_failures_total'), 5, 'only looked-at wrong tokens count as failures');
    assert.equal(await metric('tollgate_admin_login_throttled_total'), 5);
    assert.equal(await metric('tollgate_admin_login_throttle_addresses'), 1, 'a right token takes no slot');
  });

  test('the bearer-token admin API fills the same buckets: wrong bearers and wrong logins from one address, then 429 even for the right token', async () => {
    const from = gw.stderr().length;
    const before = await metric('tollgate_admin_auth_failures_total');
    const ok = await bearer('GET', '/admin/approvals', ADMIN_TOKEN, '127.0.0.4');
    assert.equal(ok.status, 200, `the right token before the bucket fills: ${ok.status} ${ok.body}`);
    for (let i = 0; i < 3; i++) {
      const r = await bearer('GET', '/admin/approvals', wrong(), '127.0.0.4');
      assert.equal(r.status, 401, `wrong bearer ${i + 1}: ${r.status} ${r.body}`);
    }
    for (let i = 0; i < 2; i++) assert.equal((await login(wrong(), '127.0.0.4')).status, 401, `wrong login ${i + 1}`);
    const t = await bearer('POST', '/admin/reload', ADMIN_TOKEN, '127.0.0.4');
    assert.equal(t.status, 429, `the right bearer from a full address: ${t.status} ${t.body}`);
    const ra = Number(t.headers['retry-after']);
    assert.ok(Number.isInteger(ra) && ra >= 1 && ra <= 13, `Retry-After: ${t.headers['retry-after']}`);
    assert.equal((await login(ADMIN_TOKEN, '127.0.0.4')).status, 429, 'the page meets the same full bucket');
    assert.equal((await bearer('GET', '/admin/approvals', ADMIN_TOKEN, '127.0.0.5')).status, 200, 'another address is not locked out');
    await gw.waitForLog(/msg="admin API bearer throttled" scope=peer peer=127\.0\.0\.4 /, { from, what: 'the lockout line' });
    assert.equal(await metric('tollgate_admin_auth_failures_total'), before + 3);
    assert.equal(await metric('tollgate_admin_auth_throttled_total'), 1);
  });

  test('globally: many addresses together get 30 wrong tokens, then every address gets 429 (bounded table, counted)', async () => {
    const from = gw.stderr().length;
    // 5 already spent by 127.0.0.2 and 5 by 127.0.0.4; 20 more from 127.0.1.1..4 (5 each) fill the global bucket
    let n401 = 0;
    for (let a = 1; a <= 4; a++)
      for (let i = 0; i < 5; i++) {
        const r = await login(wrong(), `127.0.1.${a}`);
        if (r.status === 401) n401++;
      }
    assert.ok(n401 >= 19, `wrong tokens answered 401 before the global cap: ${n401}`); // one may have drained meanwhile
    let fresh;
    for (let tries = 0; tries < 3; tries++) {
      fresh = await login(wrong(), `127.0.2.${tries + 1}`);
      if (fresh.status === 429) break;
    }
    assert.equal(fresh.status, 429, 'a fresh address meets the global cap');
    const ra = Number(fresh.headers['retry-after']);
    assert.ok(ra >= 1 && ra <= 3, `Retry-After of the global bucket: ${fresh.headers['retry-after']}`);
    await gw.waitForLog(/msg="admin page login throttled" scope=global /, { from, what: 'the global lockout line' });
    const live = await metric('tollgate_admin_login_throttle_addresses');
    assert.ok(live >= 6 && live <= 256, `addresses held: ${live}`);
    assert.equal(await metric('tollgate_admin_login_throttle_evictions_total'), 0);
  });
});
