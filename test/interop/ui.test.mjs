// The approvals page (/admin/ui/ on the admin listener) in a real browser: Debian's chromium,
// headless, driven by playwright-core. The CoWork OS stand-in is the upstream (its request log
// proves what reached it); write_file is parked for approval, and audit.redact names its
// `content`, whose value must never reach the page.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/ui.test.mjs
//   CHROMIUM=/path/to/chromium overrides /usr/bin/chromium.
// A screenshot of the queue is saved as BUILD_DIR/artifacts/ui-approvals.png (BUILD_DIR: the
// directory of $TOLLGATE_BIN).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import * as H from './lib/harness.mjs';

H.requireNodeModules();

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ADMIN_TOKEN = 'admin-' + H.randomToken();
const UPSTREAM_TOKEN = 'cowork-' + H.randomToken();
const ALICE_TOKEN = 'alice-' + H.randomToken();
const SECRET = 'hunter2-' + H.randomToken(); // the redacted argument's value
const APPROVER = 'Ada "ops" Lovelace'; // the name given at sign-in
const ARTIFACTS = path.join(path.dirname(H.tollgateBin()), 'artifacts');

const cleanup = new H.Cleanup();
let dir, s, gw, mcp, sdk, browser, context, page;

const logs = () => ({
  'tollgate process': gw?.status(),
  'tollgate stderr': gw?.stderr(),
});
const test = (name, fn) => it(name, H.withLogs(logs, fn));

const adminUrl = (p) => `http://127.0.0.1:${gw.adminPort}${p}`;
const writes = (p) => s.records().filter((r) => r.http && r.msg?.method === 'tools/call'
  && r.msg.params?.name === 'write_file' && r.msg.params.arguments?.path === p);

/** The JSON admin API (bearer token), to see the queue from outside the page. */
async function apiQueue() {
  const res = await fetch(adminUrl('/admin/approvals'), { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  assert.equal(res.status, 200);
  return (await res.json()).approvals;
}

/** Awaits p and returns the McpError it rejects with (fails if it resolves). */
async function rpcError(p, what) {
  let r;
  try {
    r = await p;
  } catch (e) {
    assert.ok(e instanceof sdk.types.McpError, `${what}: McpError expected, got ${e?.stack ?? e}`);
    return e;
  }
  assert.fail(`${what}: expected a JSON-RPC error, got ${JSON.stringify(r).slice(0, 400)}`);
}

/** Starts a write_file call and waits until tollgate has parked it; returns {call, id}. */
async function park(file, { expectError = false } = {}) {
  const from = gw.stderr().length;
  const p = mcp.client.callTool({ name: 'write_file', arguments: { path: file, content: SECRET } });
  const call = expectError ? rpcError(p, file) : p;
  call.catch(() => {}); // awaited by the test; a rejection before that is not unhandled
  const m = await gw.waitForLog(/msg="call parked for approval" approval_id=([0-9a-f]+)/, { from, what: `${file} parked` });
  return { call, id: m[1], parkedAt: Date.now() };
}

const row = (id) => `tr[data-approval-id="${id}"]`;

before(async () => {
  sdk = await H.loadSdk();
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: install Debian's chromium (scripts/install-deps.sh --test)`);
  dir = H.makeTempDir(cleanup, 'tollgate-ui-');
  s = await H.startStandin({ cleanup, token: UPSTREAM_TOKEN, logFile: path.join(dir, 'standin.log') });
  const policy = path.join(dir, 'policy.json');
  fs.writeFileSync(policy, JSON.stringify({
    version: '1', default: 'deny',
    tools: { write_file: { action: 'approve', approval_mode: 'hold', approval_timeout: 120 }, echo: { action: 'allow' } },
  }));
  const conf = H.writeConf(dir, {
    admin: { token_sha256: H.sha256hex(ADMIN_TOKEN) },
    grants: [{ name: 'alice', token_sha256: H.sha256hex(ALICE_TOKEN) }],
    // args stays "hash": the page shows the arguments, redacted, whatever the audit log keeps
    audit: { file: path.join(dir, 'audit.log'), redact: ['content'] },
    upstreams: [{
      name: 'cowork-os', url: s.url, initialize: 'local', policy,
      headers: { Authorization: `Bearer ${UPSTREAM_TOKEN}` },
    }],
  });
  gw = await H.startTollgate(conf, { cleanup, admin: true });
  mcp = await H.connectClient(`http://127.0.0.1:${gw.plainPort}/cowork-os/mcp`,
    { cleanup, headers: { Authorization: `Bearer ${ALICE_TOKEN}` } });

  const { chromium } = createRequire(import.meta.url)(path.join(H.NODE_MODULES, 'playwright-core'));
  // --no-sandbox: the tests may run as root (containers), where chromium's sandbox refuses to start.
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'], timeout: H.scaled(30000) });
  cleanup.add(() => browser.close());
  context = await browser.newContext({ viewport: { width: 1280, height: 560 } });
  page = await context.newPage();
});
after(() => cleanup.run());

describe('the approvals page in chromium', () => {
  test('a wrong token shows an error and nothing else; no cookie is set', async () => {
    await page.goto(adminUrl('/admin/ui/'));
    await page.fill('input[type="password"][name="token"]', 'wrong-' + H.randomToken());
    const [res] = await Promise.all([
      page.waitForResponse((r) => r.url().endsWith('/admin/ui/login')),
      page.click('button[type="submit"]'),
    ]);
    assert.equal(res.status(), 401);
    await page.waitForSelector('.error');
    assert.match(await page.textContent('.error'), /wrong token/i);
    assert.equal(await page.$('#queue'), null, 'no queue on a failed login');
    assert.equal(await page.$('input[name="token"]') !== null, true, 'the form is shown again');
    assert.deepEqual(await context.cookies(), []);
    // and the page's API stays closed
    const q = await page.evaluate(async () => (await fetch('/admin/ui/queue')).status);
    assert.equal(q, 401);
  });

  test('the right token: the page, with an HttpOnly SameSite=Strict cookie on Path=/admin', async () => {
    await page.fill('input[name="token"]', ADMIN_TOKEN);
    await page.fill('input[name="approver"]', APPROVER);
    await Promise.all([page.waitForURL(adminUrl('/admin/ui/')), page.click('button[type="submit"]')]);
    await page.waitForSelector('#empty:visible');
    await page.waitForFunction(() => /waiting/.test(document.getElementById('status').textContent));
    const cookies = await context.cookies();
    assert.equal(cookies.length, 1, JSON.stringify(cookies));
    const [c] = cookies;
    assert.equal(c.name, 'tollgate_admin');
    assert.equal(c.httpOnly, true);
    assert.equal(c.sameSite, 'Strict');
    assert.equal(c.path, '/admin');
    assert.equal(await page.evaluate(() => document.cookie), '', 'scripts cannot read the session cookie');
  });

  test('a parked call appears within 2 s with tool, grant, upstream, waited and deadline; its redacted value never reaches the page', async () => {
    const p = await park('/ws/appears.txt', { expectError: true });
    await page.waitForSelector(row(p.id), { timeout: H.scaled(2000) });
    const cells = await page.$eval(row(p.id), (tr) => ({
      tool: tr.querySelector('.tool').textContent,
      grant: tr.querySelector('.grant').textContent,
      subject: tr.querySelector('.subject').textContent,
      upstream: tr.querySelector('.upstream').textContent,
      args: tr.querySelector('.args').textContent,
      waited: tr.querySelector('.waited').textContent,
      deadline: tr.querySelector('.deadline').textContent,
      buttons: [...tr.querySelectorAll('button')].map((b) => b.dataset.action),
      reason: tr.querySelectorAll('input[name="reason"]').length,
    }));
    assert.equal(cells.tool, 'write_file');
    assert.equal(cells.grant, 'alice');
    assert.equal(cells.subject, 'alice');
    assert.equal(cells.upstream, 'cowork-os');
    assert.match(cells.args, /"path": "\/ws\/appears.txt"/);
    assert.match(cells.args, /"content": "\[redacted\]"/);
    assert.match(cells.waited, /^\d+ s$/);
    assert.match(cells.deadline, /^in (1 min \d+|\d+) s/);
    assert.deepEqual(cells.buttons, ['approve', 'deny']);
    assert.equal(cells.reason, 1);
    // the value is nowhere: not in the HTML, not in what the page fetched
    assert.ok(!(await page.content()).includes(SECRET), 'the redacted value is in the page');
    const q = await page.evaluate(async () => (await fetch('/admin/ui/queue')).text());
    assert.ok(q.includes('[redacted]') && !q.includes(SECRET), q);
    // the time waited goes up while it waits (the row is live, not a snapshot)
    await page.waitForFunction((sel) => /^[1-9]\d* s$/.test(document.querySelector(sel + ' .waited').textContent),
      row(p.id), { timeout: H.scaled(5000) });
    // clean up: refused through the JSON API, the row goes away by itself
    const r = await fetch(adminUrl(`/admin/approvals/${p.id}/deny`), { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    assert.equal(r.status, 200);
    assert.equal((await p.call).code, -32003);
    await page.waitForSelector(row(p.id), { state: 'detached', timeout: H.scaled(3000) });
  });

  test('a POST without the CSRF token (or with a wrong one) is 403 and changes nothing', async () => {
    const p = await park('/ws/csrf.txt', { expectError: true });
    await page.waitForSelector(row(p.id), { timeout: H.scaled(2000) });
    const statuses = await page.evaluate(async (id) => {
      const post = (u, headers = {}, body = '') => fetch(u, { method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded', ...headers }, body }).then((r) => r.status);
      return {
        approve: await post(`/admin/ui/approvals/${id}/approve`),
        deny: await post(`/admin/ui/approvals/${id}/deny`, {}, 'reason=forged'),
        wrong: await post(`/admin/ui/approvals/${id}/approve`, { 'X-CSRF-Token': 'f'.repeat(64) }),
        field: await post(`/admin/ui/approvals/${id}/approve`, {}, 'csrf=' + 'f'.repeat(64)),
        logout: await post('/admin/ui/logout'),
      };
    }, p.id);
    assert.deepEqual(statuses, { approve: 403, deny: 403, wrong: 403, field: 403, logout: 403 });
    // nothing changed: still parked, never forwarded, the session still works
    assert.ok((await apiQueue()).some((a) => a.id === p.id), 'still parked');
    assert.equal(writes('/ws/csrf.txt').length, 0);
    assert.ok(await page.$(row(p.id)));
    assert.equal(await page.evaluate(async () => (await fetch('/admin/ui/queue')).status), 200);
    // the cookie alone, sent from outside the page (no token), is refused too
    const [c] = await context.cookies();
    const r = await fetch(adminUrl(`/admin/ui/approvals/${p.id}/approve`), { method: 'POST', headers: { cookie: `${c.name}=${c.value}` } });
    assert.equal(r.status, 403);
    assert.ok((await apiQueue()).some((a) => a.id === p.id), 'still parked');
    const d = await fetch(adminUrl(`/admin/approvals/${p.id}/deny`), { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    assert.equal(d.status, 200);
    assert.equal((await p.call).code, -32003);
    assert.equal(writes('/ws/csrf.txt').length, 0);
  });

  test('Approve: the client gets the upstream\'s result, the stand-in gets the call once, with its real arguments', async () => {
    const p = await park('/ws/approved.txt');
    await page.waitForSelector(row(p.id), { timeout: H.scaled(2000) });
    await page.click(`${row(p.id)} button[data-action="approve"]`);
    const res = await p.call;
    assert.ok(!res.isError, JSON.stringify(res));
    const out = JSON.parse(H.resultText(res));
    assert.equal(out.success, true, JSON.stringify(out));
    assert.equal(out.path, '/ws/approved.txt');
    assert.equal(out.bytesWritten, Buffer.byteLength(SECRET), 'the upstream got the real value, not the redacted one');
    assert.equal(writes('/ws/approved.txt').length, 1);
    assert.equal(writes('/ws/approved.txt')[0].msg.params.arguments.content, SECRET);
    await page.waitForSelector(row(p.id), { state: 'detached', timeout: H.scaled(3000) });
    assert.ok(!(await apiQueue()).some((a) => a.id === p.id), 'decided');
    // who decided: on the page, under the calls decided lately, and in the audit line
    const done = `#decided tr[data-decided-id="${p.id}"]`;
    await page.waitForSelector(done, { timeout: H.scaled(3000) });
    const cells = await page.$eval(done, (tr) => ({
      decision: tr.querySelector('.decision').textContent, by: tr.querySelector('.by').textContent,
      tool: tr.querySelector('.tool').textContent,
    }));
    assert.deepEqual(cells, { decision: 'approved', by: APPROVER, tool: 'write_file' });
    const audit = path.join(dir, 'audit.log');
    const line = await H.waitUntil(() => fs.readFileSync(audit, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
      .find((l) => l.approval_id === p.id && l.decision === 'approved'), { what: 'the audit line of the approval' });
    assert.equal(line.decided_by, APPROVER, JSON.stringify(line));
  });

  test('the arguments are shown as sent: 1e400, a 30-digit integer and 2^53+1 exactly; redaction re-writes none of them', async () => {
    const url = `http://127.0.0.1:${gw.plainPort}/cowork-os/mcp`;
    const sess = await H.rawInitialize(fetch, url, { authorization: `Bearer ${ALICE_TOKEN}` });
    const from = gw.stderr().length;
    const args = `{"path":"/ws/numbers.txt","content":"${SECRET}","huge":1e400,"long":123456789012345678901234567890,"odd":9007199254740993}`;
    const body = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"write_file","arguments":${args}}}`;
    const call = H.postRaw(fetch, url, body, sess.headers);
    call.catch(() => {});
    const m = await gw.waitForLog(/msg="call parked for approval" approval_id=([0-9a-f]+)/, { from, what: 'numbers parked' });
    const id = m[1];
    await page.waitForSelector(row(id), { timeout: H.scaled(2000) });
    const text = await page.$eval(`${row(id)} .args pre`, (pre) => pre.textContent);
    assert.match(text, /"huge": 1e400\b/, text);
    assert.match(text, /"long": 123456789012345678901234567890\b/, text);
    assert.match(text, /"odd": 9007199254740993\b/, text);
    assert.match(text, /"content": "\[redacted\]"/, text);
    assert.ok(!text.includes(SECRET), text);
    // an approve that names another digest than the row's (or none) is 409 and runs nothing
    const statuses = await page.evaluate(async (id) => {
      const csrf = document.querySelector('meta[name="csrf-token"]').content;
      const post = (body) => fetch(`/admin/ui/approvals/${id}/approve`, { method: 'POST', headers: { 'X-CSRF-Token': csrf, 'Content-Type': 'application/x-www-form-urlencoded' }, body }).then((r) => r.status);
      return { none: await post(''), other: await post('digest=' + 'a'.repeat(64)) };
    }, id);
    assert.deepEqual(statuses, { none: 409, other: 409 });
    await H.quietFor(200); // negative check: nothing reaches the stand-in late
    assert.equal(writes('/ws/numbers.txt').length, 0);
    assert.ok((await apiQueue()).some((a) => a.id === id), 'still parked');
    const d = await fetch(adminUrl(`/admin/approvals/${id}/deny`), { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    assert.equal(d.status, 200);
    const r = await call;
    assert.equal(r.messages[0]?.error?.code, -32003, r.text);
  });

  test('Deny with a reason: the client gets -32003 with the reason in error.data; never forwarded (screenshot saved)', async () => {
    const p = await park('/ws/denied.txt', { expectError: true });
    const other = await park('/ws/other.txt', { expectError: true }); // a second row for the screenshot
    await page.waitForSelector(row(p.id), { timeout: H.scaled(2000) });
    await page.waitForSelector(row(other.id), { timeout: H.scaled(2000) });
    const reason = 'not on a Friday — ask Ada';
    await page.fill(`${row(p.id)} input[name="reason"]`, reason);
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    const shot = path.join(ARTIFACTS, 'ui-approvals.png');
    await page.screenshot({ path: shot, fullPage: true });
    assert.ok(fs.statSync(shot).size > 1000, 'the screenshot was written');
    assert.ok(!(await page.content()).includes(SECRET));
    await page.click(`${row(p.id)} button[data-action="deny"]`);
    const e = await p.call;
    assert.equal(e.code, -32003, e.message);
    assert.equal(e.data?.reason, reason, JSON.stringify(e.data));
    assert.equal(e.data?.approval_id, p.id);
    assert.equal(e.data?.tool, 'write_file');
    await page.waitForSelector(row(p.id), { state: 'detached', timeout: H.scaled(3000) });
    const left = (await apiQueue()).map((a) => a.id);
    assert.ok(left.includes(other.id) && !left.includes(p.id), `only the one denied was decided: ${left}`);
    await page.click(`${row(other.id)} button[data-action="deny"]`); // no reason: the default one
    const e2 = await other.call;
    assert.equal(e2.code, -32003);
    assert.match(e2.data?.reason ?? '', /refused by a human approver/, JSON.stringify(e2.data));
    await H.quietFor(200); // negative check: nothing reaches the stand-in late
    assert.equal(writes('/ws/denied.txt').length + writes('/ws/other.txt').length, 0);
  });

  test('Sign out ends the session: the login form again, the queue closed', async () => {
    await Promise.all([page.waitForURL(adminUrl('/admin/ui/')), page.click('#logout button')]);
    await page.waitForSelector('input[name="token"]');
    assert.equal(await page.$('#queue'), null);
    assert.equal(await page.evaluate(async () => (await fetch('/admin/ui/queue')).status), 401);
    assert.deepEqual(await context.cookies(), []);
  });
});
