// `tollgate scan` (issue 11, item 3): the real binary scans real stand-ins and the policy it prints
// is judged by tollgate itself (`policy check`, and `policy test` with cases, so the decisions are
// the gateway's, not a reading of the text).
//
//   1. The CoWork OS stand-in over HTTP (JSON answers, a bearer token via --header, and its HTTP
//      quirk: initialize is refused with "Already initialized"): execute_code, run_command and
//      delete_file need approval, list/get tools are allowed, write_file and send_email are allowed
//      10 times a minute, http_request and the health tools are denied and hidden; YAML and --json.
//   2. The hostile fixture over stdio with list=scan (tools/list in pages of 4 with nextCursor, and
//      annotated tools): every page is fetched, annotations are used (readOnlyHint allows,
//      destructiveHint approves, a readOnlyHint never lifts a "runs a shell" tool), a tool name
//      with quotes and a description with U+2028 and a newline give a policy that loads, and a
//      tool named "*" (which a policy reads as every tool) is left out.
//   3. The hostile fixture over HTTP with answer=sse: SSE answers (a notification event before
//      the answer), the Mcp-Session-Id and MCP-Protocol-Version sent back on every later POST.
//   4. The official server-everything over Streamable HTTP (the SDK's SSE answers) and over stdio:
//      the same policy both ways, and it loads.
//   5. Errors: bad arguments → usage, exit 2; an unreachable URL, a 401, a command that does not
//      exist, a server that never answers, answers garbage or drips its answer → a clear message,
//      exit 1, within --timeout.
//   6. https:// (the hostile fixture over TLS with H.makeUpstreamCerts' throwaway CA): --ca
//      FILE scans it (same policy as over http://, SNI sent for a name); without --ca (the system
//      bundle), an untrusted certificate, a certificate for another name, a plain HTTP server
//      and a server that never answers the ClientHello fail with a clear message and send no
//      request; --insecure accepts the untrusted certificate; a --ca file that does not load.
//   7. A stdio server written by the test: tools that read the environment, credentials or secrets
//      are denied with a reason whatever readOnlyHint says (whole words: keyboard, monkey and
//      tokenizer are not), a tool named "<<" loads as that tool, and the resources, resource
//      templates and prompts it offers become "resources" and "prompts" groups with default: deny
//      (templates as globs, secret ones denied), decided by `tollgate policy explain`.
//   8. Tags: every listed tool gets tags from scan's vocabulary (read, write, destructive, execute,
//      egress, reads_secrets, filesystem, network), the same in YAML and JSON, each with the word
//      or annotation behind it in the comment: execute_code and run_command execute,
//      delete_channel destructive and write, send_email egress, a tool reading the environment
//      reads_secrets; a readOnlyHint tool gets read and never write, and takes no tag away; the
//      other annotations (readOnlyHint: false, destructiveHint, idempotentHint, openWorldHint);
//      the CoWork OS stand-in, the hostile fixture, server-everything, server-filesystem and
//      server-memory. The brake for execute/write tools is written under "*", in YAML and JSON,
//      and braked calls are checked with `policy test`.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import { startHostile, ALL_TOOLS, SCAN_TOOLS } from '../fixtures/hostile/hostile.mjs';

const cleanup = new H.Cleanup();
const dir = H.makeTempDir(cleanup, 'tollgate-scan-');
const HOSTILE = path.join(H.TEST_DIR, 'fixtures', 'hostile', 'hostile.mjs');

/** Runs tollgate with args (never blocking the loop, so in-process fixtures answer). */
function tollgate(args, { timeout = H.scaled(30000) } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(H.tollgateBin(), args, { cwd: H.REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => { stdout += d; });
    child.stderr.setEncoding('utf8').on('data', (d) => { stderr += d; });
    const t = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`tollgate ${args.join(' ')} did not end in ${timeout} ms\n${stderr}`)); }, timeout);
    child.on('error', (e) => { clearTimeout(t); reject(e); });
    child.on('close', (code) => { clearTimeout(t); resolve({ code, stdout, stderr }); });
  });
}

const show = (r) => `exit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
let nfile = 0;
function save(text, ext) {
  const f = path.join(dir, `policy${++nfile}.${ext}`);
  fs.writeFileSync(f, text);
  return f;
}

/** `tollgate policy check` accepts the file and counts `tools` listed tools. */
async function assertLoads(file, tools) {
  const r = await tollgate(['policy', 'check', file]);
  assert.equal(r.code, 0, show(r));
  assert.match(r.stdout, new RegExp(`: ok \\(${tools} tools\\)`), show(r));
}

/** Runs `tollgate policy test` on the policy with these cases; each must pass. */
async function assertCases(file, cases) {
  const cf = path.join(dir, `cases${++nfile}.json`);
  fs.writeFileSync(cf, JSON.stringify(cases));
  const r = await tollgate(['policy', 'test', file, cf]);
  assert.equal(r.code, 0, show(r));
  assert.equal((r.stdout.match(/^ok/gm) ?? []).length, cases.length, show(r));
}

const call = (name, args = {}) => ({ name, arguments: args });
/** n calls of name, each with other arguments (a brake counts only identical ones). */
const varied = (name, n, expect) => Array.from({ length: n }, (_, i) => ({ call: call(name, { n: i }), expect }));

/** The tags of each tool listed in a scanned YAML policy (`"NAME":` entries and their `tags: [..]`;
 * not "*", which holds the brake). */
function yamlTags(y) {
  const out = {};
  for (const m of y.matchAll(/^ {2}("(?:[^"\\]|\\.)*"):\n((?: {4}[^\n]*\n)*)/gm)) {
    const t = /^ {4}tags: \[([^\]\n]*)\]$/m.exec(m[2]);
    if (m[1] !== '"*"') out[JSON.parse(m[1])] = t ? t[1].split(', ') : undefined;
  }
  return out;
}

/** The tags of each tool of a --json policy. */
const jsonTags = (p) => Object.fromEntries(Object.entries(p.tools).filter(([k]) => k !== '*').map(([k, v]) => [k, v.tags]));

/** The brake is proposed under "*", live, after a comment saying what it does. */
function assertBrake(y, n) {
  assert.match(y, new RegExp(`^ {2}# A brake for the ${n} tools? above tagged execute or write: `, 'm'));
  assert.match(y, /^ {2}"\*":\n {4}brake: \{repeats: 5, within: "60s", cycle: 4, tags: \[execute, write\]\}$/m);
  assert.doesNotMatch(y, /does not read `brake`/);
}

after(() => cleanup.run()); // once both suites are done (the https one uses dir too)

describe('tollgate scan', () => {
  let standin;
  before(async () => { standin = await H.startStandin({ cleanup }); });

  const coworkCases = [
    { call: call('execute_code'), expect: 'approve' },
    { call: call('run_command'), expect: 'approve' },
    { call: call('delete_file'), expect: 'approve' },
    { call: call('discord.delete_channel'), expect: 'approve' },
    { call: call('okta.list_users'), expect: 'allow' },
    { call: call('salesforce.get_record'), expect: 'allow' },
    { call: call('google-workspace.calendar_events_list'), expect: 'allow' },
    // The brake under "*" (write is tagged write): 5 identical calls pass, the 6th is braked and
    // spends nothing, so 5 more with other arguments reach the rate limit of 10 a minute.
    { name: '5 identical writes pass', call: call('write_file'), expect: 'allow', repeat: 5 },
    { name: 'the 6th identical write is braked', call: call('write_file'), expect: 'limited' },
    ...varied('write_file', 5, 'allow'),
    { name: 'the 11th is limited', call: call('write_file'), expect: 'limited' },
    ...varied('resend.send_email', 10, 'allow'),
    { call: call('resend.send_email'), expect: 'limited' },
    { call: call('http_request'), expect: 'deny', hidden: true },
    { call: call('okta.health'), expect: 'deny', hidden: true },
    { call: call('echo'), expect: 'deny', hidden: true },
  ];
  const coworkTags = {
    execute_code: ['execute', 'network'], // "network" from its description ("allow_network")
    run_command: ['execute', 'filesystem'],
    write_file: ['write', 'filesystem'],
    delete_file: ['write', 'destructive', 'filesystem'],
    'resend.send_email': ['write', 'egress'],
    'discord.send_message': ['write', 'egress'],
    'discord.delete_channel': ['write', 'destructive'],
    'google-workspace.calendar_events_list': ['read'],
    'google-workspace.calendar_event_delete': ['write', 'destructive'],
    'okta.list_users': ['read'],
    'okta.create_user': ['write'],
    'salesforce.get_record': ['read'],
    'salesforce.update_record': ['write'],
    'jira.get_issue': ['read'],
    'jira.create_issue': ['write'],
  };

  it('scans the CoWork OS stand-in over HTTP: a YAML policy that tollgate loads, with the expected actions', async () => {
    const r = await tollgate(['scan', '--header', `Authorization: Bearer ${standin.token}`, `${standin.url}`]);
    assert.equal(r.code, 0, show(r));
    assert.ok(!r.stdout.includes(standin.token) && !r.stderr.includes(standin.token), 'a --header value is written nowhere');
    assert.match(r.stderr, /refused initialize \(error -32600: Already initialized\)/, show(r));
    const y = r.stdout;
    assert.match(y, /^version: "1"$/m);
    assert.match(y, /^default: deny$/m);
    assert.match(y, /26 tools, 4 allowed, 6 rate-limited, 5 need approval, 0 denied as reading secrets, 11 denied by default; resources: 15 allowed, 0 denied; prompts: 0 allowed, 0 denied/);
    // Each rule and each tag says why, next to it.
    assert.match(y, /# {3}name says "execute": it may run code or commands, so a human approves each call\n {2}# {3}tags: execute \(name says "execute"\); network \(description says "network"\)\n {2}"execute_code":\n {4}action: approve\n {4}tags: \[execute, network\]\n/);
    assert.match(y, /# {3}name says "list": it looks read-only, so it is allowed\n {2}# {3}tags: read \(name says "list"\)\n {2}"okta.list_users":\n {4}action: allow\n {4}tags: \[read\]\n/);
    assert.match(y, /# {3}name says "write": it changes data, so it is allowed at most 10 times a minute per grant\n {2}# {3}tags: write \(name says "write"\); filesystem \(name says "file"\)\n {2}"write_file":\n {4}rules:\n(?: {6}[^\n]*\n)+ {4}tags: \[write, filesystem\]\n/);
    assert.match(y, /# {3}tags: execute \(name says "run"\); filesystem \(description says "directory"\)\n {2}"run_command":/);
    assert.match(y, /# {3}tags: write \(name says "delete"\); destructive \(name says "delete"\)\n {2}"discord.delete_channel":/);
    assert.match(y, /# {3}tags: write \(name says "send"\); egress \(name says "send"\)\n {2}"resend.send_email":/);
    // A tool left out still shows the tags it would get.
    assert.match(y, /# http_request: Make an HTTP request[^\n]*\n {2}# {3}no word of the lists matched: denied by default[^\n]*\n {2}# {3}tags if you allow it: egress \(name says "http"\); network \(name says "http"\)\n/);
    assert.deepEqual(yamlTags(y), coworkTags);
    assertBrake(y, 11);
    const f = save(y, 'yaml');
    await assertLoads(f, 15);
    await assertCases(f, coworkCases);
  });

  it('--json prints the same policy as JSON', async () => {
    const r = await tollgate(['scan', '--json', '--header', `Authorization: Bearer ${standin.token}`, standin.url]);
    assert.equal(r.code, 0, show(r));
    const p = JSON.parse(r.stdout);
    assert.equal(p.version, '1');
    assert.equal(p.default, 'deny');
    assert.deepEqual(p.tools.execute_code, { action: 'approve', tags: ['execute', 'network'] });
    assert.deepEqual(p.tools['jira.get_issue'], { action: 'allow', tags: ['read'] });
    assert.deepEqual(jsonTags(p), coworkTags);
    assert.deepEqual(p.tools['*'], { brake: { repeats: 5, within: '60s', cycle: 4, tags: ['execute', 'write'] } });
    assert.equal(p.tools['jira.create_issue'].rules[0].rate_limit, '10/minute');
    assert.equal(p.tools.http_request, undefined);
    const f = save(r.stdout, 'json');
    await assertLoads(f, 15);
    await assertCases(f, coworkCases);
  });

  it('scans a stdio server, following nextCursor through every page and using annotations', async () => {
    const log = path.join(dir, 'hostile-stdio.log');
    const r = await tollgate(['scan', '--', process.execPath, HOSTILE, '--stdio', '--log', log, '--flags', 'list=scan']);
    assert.equal(r.code, 0, show(r));
    const total = ALL_TOOLS.length + SCAN_TOOLS.length;
    // The fixture's tool "secret" reads as a secret: denied with a reason, the others of ALL_TOOLS by default.
    assert.match(r.stdout, new RegExp(`${total} tools, 3 allowed, 1 rate-limited, 3 need approval, 1 denied as reading secrets, ${ALL_TOOLS.length} denied by default`), show(r));
    assert.match(r.stdout, /name says "secret": it may read the environment, credentials or secrets, so it is denied\n {2}# {3}tags: reads_secrets \(name says "secret"\)\n {2}"secret":\n {4}action: deny\n {4}reason: "tollgate scan: it may read the environment, credentials or secrets"\n {4}tags: \[reads_secrets\]\n/);
    assert.match(r.stdout, /^# Server: hostile 1\.0\.0, protocol 2025-06-18$/m);
    assert.match(r.stdout, /annotation readOnlyHint: true: allowed\n {2}# {3}tags: read \(annotation readOnlyHint: true\)\n {2}"inspect":/);
    assert.match(r.stdout, /annotation destructiveHint: true: a human approves each call\n {2}# {3}tags: write \(name says "wipe"\); destructive \(name says "wipe"\)\n {2}"wipe":/);
    assert.match(r.stdout, /description says "runs" \(run\)[^\n]*readOnlyHint is not trusted[^\n]*\n {2}# {3}tags: execute \(description says "runs" \(run\)\)\n {2}"sneaky":\n {4}action: approve/);
    assert.match(r.stdout, /name says "get"[^\n]*\n {2}# {3}tags: read[^\n]*\n {2}"getUserProfile":/);
    // A readOnlyHint gives read and never write; it takes away no tag the words give (sneaky runs a shell).
    assert.deepEqual(yamlTags(r.stdout), {
      secret: ['reads_secrets'], inspect: ['read'], wipe: ['write', 'destructive'], sneaky: ['execute'],
      getUserProfile: ['read'], publish_post: ['write', 'egress'], transfer_funds: ['write'], 'dot.weird "name"': ['read'],
    });
    assertBrake(r.stdout, 4);
    for (const t of ALL_TOOLS) assert.match(r.stdout, new RegExp(`^ {2}# ${t}: hostile ${t}$`, 'm'));
    // A tool named "*" would be the rule for every tool: it is left out.
    assert.match(r.stdout, /^ {2}# \*: Read everything\n {2}# {3}a tool named "\*" cannot be listed/m);
    assert.doesNotMatch(r.stdout, /^ {2}"\*":\n {4}(?!brake: )/m); // "*" holds only the brake
    // What the server was sent: the lifecycle, then one tools/list per page with the cursors it gave.
    const msgs = fs.readFileSync(log, 'utf8').replace(/[^\n]*$/, '').split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter((x) => x.msg).map((x) => x.msg);
    assert.deepEqual(msgs.slice(0, 2).map((m) => m.method), ['initialize', 'notifications/initialized']);
    assert.equal(msgs[0].params.protocolVersion, '2025-06-18');
    const lists = msgs.filter((m) => m.method === 'tools/list');
    assert.equal(lists.length, Math.ceil(total / 4));
    assert.deepEqual(lists.map((m) => m.params?.cursor ?? null),
      [null, ...Array.from({ length: lists.length - 1 }, (_, i) => `page-${(i + 1) * 4}-of-hostile`)]);
    const f = save(r.stdout, 'yaml');
    await assertLoads(f, SCAN_TOOLS.length);
    await assertCases(f, [
      { call: call('secret'), expect: 'deny', hidden: true },
      { call: call('inspect'), expect: 'allow' },
      { call: call('wipe'), expect: 'approve' },
      { call: call('sneaky'), expect: 'approve' },
      { call: call('getUserProfile'), expect: 'allow' },
      { call: call('transfer_funds'), expect: 'approve' },
      ...varied('publish_post', 10, 'allow'),
      { call: call('publish_post'), expect: 'limited' },
      { call: call('dot.weird "name"'), expect: 'allow' },
      { call: call('echo'), expect: 'deny', hidden: true },
      { call: call('*'), expect: 'deny', hidden: true },
    ]);
  });

  it('reads SSE answers over HTTP and sends the Mcp-Session-Id and protocol version back', async () => {
    const h = await startHostile({ port: 0 });
    cleanup.add(() => h.stop());
    const r = await tollgate(['scan', h.url('/list=scan/answer=sse/mcp')]);
    assert.equal(r.code, 0, show(r));
    assert.match(r.stdout, /3 allowed, 1 rate-limited, 3 need approval/, show(r));
    const posts = h.httpLog.filter((e) => e.method === 'POST');
    // initialize, initialized, the tools/list pages, then resources/list and resources/templates/list
    // (the fixture offers resources, not prompts)
    assert.equal(posts.length, 2 + Math.ceil((ALL_TOOLS.length + SCAN_TOOLS.length) / 4) + 2);
    assert.match(r.stdout, /^resources:\n {2}default: deny\n {2}allow:\n(?: {4}#[^\n]*\n)* {4}- "big:\/\/2"$/m, show(r));
    for (const p of posts) assert.match(p.headers.accept, /application\/json/), assert.match(p.headers.accept, /text\/event-stream/);
    assert.equal(posts[0].headers['mcp-session-id'], undefined);
    const sid = posts[1].headers['mcp-session-id'];
    assert.match(sid ?? '', /^[0-9a-f]{24}$/);
    for (const p of posts.slice(1)) {
      assert.equal(p.headers['mcp-session-id'], sid);
      assert.equal(p.headers['mcp-protocol-version'], '2025-06-18');
    }
  });

  it('the official server-everything gives the same policy over Streamable HTTP (the SDK answers in SSE) and stdio', async () => {
    const ev = await H.startEverything({ cleanup });
    const entry = path.join(H.NODE_MODULES, '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
    const overHttp = await tollgate(['scan', ev.url]);
    assert.equal(overHttp.code, 0, show(overHttp));
    const overStdio = await tollgate(['scan', '--', process.execPath, entry, 'stdio']);
    assert.equal(overStdio.code, 0, show(overStdio));
    const body = (r) => r.stdout.split('\n').filter((l) => !l.startsWith('# Scanned: ')).join('\n');
    assert.equal(body(overHttp), body(overStdio));
    assert.match(overHttp.stdout, /^# Server: mcp-servers\/everything [^\n]*, protocol 2025-06-18$/m);
    // Its tools state all four annotations: a readOnlyHint tool is read (its destructiveHint: false and
    // idempotentHint do not make it write), get-env reads secrets; a tool left out shows the tags
    // readOnlyHint: false and openWorldHint: true would give it.
    const tags = yamlTags(overHttp.stdout);
    assert.deepEqual(tags.echo, ['read'], overHttp.stdout);
    assert.deepEqual(tags['get-env'], ['read', 'reads_secrets'], overHttp.stdout);
    assert.match(overHttp.stdout, /# {3}tags: read \(annotation readOnlyHint: true\); reads_secrets \(name says "env"\)\n {2}"get-env":/);
    assert.match(overHttp.stdout, /# gzip-file-as-resource: [^\n]*\n(?: {2}#[^\n]*\n)*? {2}# {3}tags if you allow it: write \(annotation readOnlyHint: false\); egress \(annotation openWorldHint: true\);/);
    const m = /(\d+) tools, (\d+) allowed/.exec(overHttp.stdout);
    assert.ok(m && Number(m[1]) >= 10 && Number(m[2]) >= 1, overHttp.stdout);
    await assertLoads(save(overHttp.stdout, 'yaml'), (overHttp.stdout.match(/^ {2}"(?!\*")/gm) ?? []).length);
  });

  it('the reference servers filesystem and memory: tags from their words and annotations, and the policy loads', async () => {
    const ref = (pkg) => path.join(H.NODE_MODULES, '@modelcontextprotocol', pkg, 'dist', 'index.js');
    const root = H.makeTempDir(cleanup, 'tollgate-scan-fs-');
    const fsr = await tollgate(['scan', '--', process.execPath, ref('server-filesystem'), root]);
    assert.equal(fsr.code, 0, show(fsr));
    const ft = yamlTags(fsr.stdout);
    assert.deepEqual(ft.read_text_file, ['read', 'filesystem']);
    assert.deepEqual(ft.list_directory, ['read', 'filesystem']);
    assert.deepEqual(ft.write_file, ['write', 'destructive', 'filesystem']); // destructiveHint: true
    assert.deepEqual(ft.create_directory, ['write', 'filesystem']);
    for (const [t, tags] of Object.entries(ft)) if (tags.includes('read')) assert.ok(!tags.includes('write'), `${t}: ${tags}`);
    await assertLoads(save(fsr.stdout, 'yaml'), Object.keys(ft).length);
    const mem = await tollgate(['scan', '--json', '--', process.execPath, ref('server-memory')]);
    assert.equal(mem.code, 0, show(mem));
    const mt = jsonTags(JSON.parse(mem.stdout));
    assert.deepEqual(mt.delete_entities, ['write', 'destructive']);
    assert.deepEqual(mt.create_entities, ['write']);
    assert.deepEqual(mt.read_graph, ['read']);
    await assertLoads(save(mem.stdout, 'json'), Object.keys(mt).length);
  });

  it('a stdio server: its stderr passes through, its requests are answered, lines that are not JSON are counted', async () => {
    // It asks ping, roots/list and sampling/createMessage before answering initialize, and answers
    // only if each got what scan gives (an empty result, no roots, -32601).
    const server = path.join(dir, 'asking-server.mjs');
    fs.writeFileSync(server, `
process.stderr.write('asking-server: starting\\n');
process.stdout.write('a banner on stdout\\n');
const want = { p1: (m) => m.result && Object.keys(m.result).length === 0, p2: (m) => Array.isArray(m.result?.roots) && m.result.roots.length === 0,
  p3: (m) => m.error?.code === -32601 };
let buf = '', init = null;
const send = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
process.stdin.setEncoding('utf8').on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\\n')) >= 0) {
    const m = JSON.parse(buf.slice(0, i)); buf = buf.slice(i + 1);
    if (m.method === 'initialize') {
      init = m.id;
      send({ jsonrpc: '2.0', id: 'p1', method: 'ping' });
      send({ jsonrpc: '2.0', id: 'p2', method: 'roots/list' });
      send({ jsonrpc: '2.0', id: 'p3', method: 'sampling/createMessage', params: {} });
    } else if (m.id in want) {
      if (!want[m.id](m)) { process.stderr.write('asking-server: wrong answer ' + JSON.stringify(m) + '\\n'); process.exit(4); }
      delete want[m.id];
      if (Object.keys(want).length === 0)
        send({ jsonrpc: '2.0', id: init, result: { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'asking', version: '1' } } });
    } else if (m.method === 'tools/list') {
      send({ jsonrpc: '2.0', id: m.id, result: { tools: [{ name: 'list_things', description: 'Lists things' }] } });
    }
  }
});
`);
    const r = await tollgate(['scan', '--', process.execPath, server]);
    assert.equal(r.code, 0, show(r));
    assert.match(r.stderr, /^asking-server: starting$/m, show(r));
    assert.match(r.stderr, /^tollgate: scan: warning: 1 lines on the server's stdout were not JSON, skipped$/m, show(r));
    assert.match(r.stdout, /^# Server: asking 1, protocol 2025-06-18$/m, show(r));
  });

  it('bad arguments print the usage and exit 2', async () => {
    for (const args of [[], ['--bogus', 'http://127.0.0.1:1/mcp'], ['--'], ['--header', 'no colon', 'http://127.0.0.1:1/'],
      ['http://a/', 'http://b/'], ['--timeout', 'x', 'http://127.0.0.1:1/'], ['http://127.0.0.1:1/', '--', 'true'],
      ['--header', 'A: b', '--', 'true']]) {
      const r = await tollgate(['scan', ...args]);
      assert.equal(r.code, 2, `${args.join(' ')}: ${show(r)}`);
      assert.match(r.stderr, /usage:\n {2}tollgate scan/, show(r));
      assert.equal(r.stdout, '');
    }
    const h = await tollgate(['scan', '--help']);
    assert.equal(h.code, 0);
    assert.match(h.stdout, /How tools are classified/);
    assert.match(h.stdout, /^Tags \(written as tags: \[\.\.\.\] on each tool's entry/m);
    assert.match(h.stdout, /^ {2}execute {8}execute exec run eval shell command script bash spawn$/m);
    assert.match(h.stdout, /^Under "\*" a brake is proposed for the tools tagged execute or write: [^]*more than 5 times within 60s [^]*is refused\.$/m);
  });

  it('a URL scan cannot read names it without its user information or query on stderr', async () => {
    for (const url of ['http://u:s3cr3t-1@127.0.0.1:1/mcp', 'ftp://u:s3cr3t-2@h/x?k=s3cr3t-3', 'http://h:99999/m?t=s3cr3t-4']) {
      const r = await tollgate(['scan', url]);
      assert.equal(r.code, 1, show(r));
      assert.match(r.stderr, /cannot read this URL|not an http/, show(r));
      assert.doesNotMatch(r.stderr + r.stdout, /s3cr3t/, show(r));
    }
  });

  it('an unreachable server, a refused token, https:// and a missing command: a clear message, exit 1', async () => {
    const port = await H.freePort();
    let r = await tollgate(['scan', `http://127.0.0.1:${port}/mcp`]);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, new RegExp(`^tollgate: scan: cannot connect to 127\\.0\\.0\\.1 port ${port}: Connection refused$`, 'm'));
    assert.equal(r.stdout, '');
    r = await tollgate(['scan', '--header', 'Authorization: Bearer wrong', standin.url]);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, /HTTP 401 from 127\.0\.0\.1 port \d+: .*Unauthorized/, show(r));
    r = await tollgate(['scan', 'https://127.0.0.1:1/mcp']);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, /cannot connect to 127\.0\.0\.1 port 1: Connection refused/, show(r));
    r = await tollgate(['scan', '--', path.join(dir, 'no-such-server')]);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, /cannot start .*no-such-server: No such file or directory/);
    r = await tollgate(['scan', '--', process.execPath, HOSTILE, '--stdio', '--flags', 'crash=start']);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, /the server exited \(status 3\) before answering request 1/);
  });

  it('a server that never answers: --timeout bounds the wait, exit 1 (HTTP and stdio; the child is ended)', async () => {
    const held = new Set();
    const silent = net.createServer((s) => { held.add(s); s.on('error', () => {}); });
    await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
    cleanup.add(() => { for (const s of held) s.destroy(); return new Promise((resolve) => silent.close(resolve)); });
    const port = silent.address().port;
    let t0 = Date.now();
    let r = await tollgate(['scan', '--timeout', '0.5', `http://127.0.0.1:${port}/mcp`]);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, new RegExp(`no answer from 127\\.0\\.0\\.1 port ${port} within 500 ms`), show(r));
    assert.equal(held.size, 1);
    assert.ok(Date.now() - t0 < H.scaled(10000), `took ${Date.now() - t0} ms`);
    t0 = Date.now();
    r = await tollgate(['scan', '--timeout', '0.5', '--', 'sleep', '30']);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, /no answer to request 1 on the server's stdout within 500 ms/, show(r));
    // sleep ignores its stdin: it was sent SIGTERM 2 s after stdin closed, far before its 30 s.
    assert.ok(Date.now() - t0 < H.scaled(15000), `took ${Date.now() - t0} ms`);
  });
});

// A stdio server written here: tools whose names or descriptions speak of the environment,
// credentials or secrets (and some that only look like they do), resources, resource templates
// and prompts, and a tool named "<<" (a YAML merge key when plain, never when quoted).
const OFFER_SERVER = `
const tools = process.argv[2] === 'tools' ? JSON.parse(process.argv[3]) : [
  { name: 'get_env', description: 'Returns the process environment', annotations: { readOnlyHint: true } },
  { name: 'printenv', description: 'Prints variables' },
  { name: 'readApiKey', description: 'A value' },
  { name: 'vault_read', description: 'Reads a secret from the vault', annotations: { readOnlyHint: true } },
  { name: 'login', description: 'Checks a password' },
  { name: 'issue', description: 'Mints an access token' },
  { name: 'list_credentials', description: 'Lists what is stored' },
  { name: 'get_keys', description: 'Lists the keys' },
  { name: 'keyboard_layout', description: 'Get the keyboard layout' },
  { name: 'monkey_list', description: 'List monkeys' },
  { name: 'tokenizer_show', description: 'Show how a tokenizer splits text' },
  { name: '<<', description: 'Read a merge', annotations: { readOnlyHint: true } },
];
const resources = [
  { uri: 'file:///srv/docs/readme.md', name: 'readme' },
  { uri: 'file:///srv/app/.env', name: 'app env' },
  { uri: 'config://db/password', name: 'db' },
  { uri: 'odd://a*b', name: 'odd' },
  { uri: 'FILE://LocalHost/srv/notes/todo.md', name: 'todo' },
  { uri: 'file:/srv/notes/draft.md', name: 'draft' },
];
const resourceTemplates = [
  { uriTemplate: 'file:///srv/docs/{name}', name: 'docs' },
  { uriTemplate: 'file:///pub/{+path}', name: 'pub' },
  { uriTemplate: 'x://{a}{b}/y', name: 'two' },
  { uriTemplate: 'x://{a}{+b}/z', name: 'wide' },
  { uriTemplate: 'bad://{a}*', name: 'star' },
  { uriTemplate: 'secret://{id}', name: 'vault', description: 'A secret by id' },
  { uriTemplate: '{+uri}', name: 'anything' },
  { uriTemplate: 'HTTPS://Api.Example.com:443/v1/{id}', name: 'api' },
];
const prompts = [{ name: 'summarise', description: 'Summarise a text' }, { name: 'rotate_api_key' }, { name: 'all*' }];
let buf = '';
process.stdin.setEncoding('utf8').on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\\n')) >= 0) {
    const m = JSON.parse(buf.slice(0, i)); buf = buf.slice(i + 1);
    if (m.id === undefined) continue;
    const ok = (result) => process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: m.id, result }) + '\\n');
    if (m.method === 'initialize') ok({ protocolVersion: m.params.protocolVersion, capabilities: { tools: {}, resources: {}, prompts: {} }, serverInfo: { name: 'offer', version: '1' } });
    else if (m.method === 'tools/list') ok({ tools });
    else if (m.method === 'resources/list' && process.argv[2] === 'die') process.exit(0);
    else if (m.method === 'resources/list') ok({ resources });
    else if (m.method === 'resources/templates/list') ok({ resourceTemplates });
    else if (m.method === 'prompts/list') ok({ prompts });
    else process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'no' } }) + '\\n');
  }
});
`;

describe('tollgate scan: secrets, resources and prompts', () => {
  let server;
  before(() => { server = path.join(dir, 'offer-server.mjs'); fs.writeFileSync(server, OFFER_SERVER); });

  /** `tollgate policy explain` of one method against the policy, through a one-upstream conf. */
  async function explain(policy, method, params) {
    const conf = path.join(dir, `explain${++nfile}.conf`);
    fs.writeFileSync(conf, `listen = ( { address = "127.0.0.1"; port = 1; } );\ngrants = ( { name = "a"; anonymous = true; } );\n` +
      `upstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp"; policy = "${policy}"; } );\n`);
    const r = await tollgate(['policy', 'explain', '-c', conf, '--method', method, '--params', JSON.stringify(params)]);
    assert.ok(r.code === 0 || r.code === 1, show(r));
    return r.code === 0 ? 'allow' : 'deny';
  }

  it('tools that read the environment, credentials or secrets are denied whatever readOnlyHint says; whole words only', async () => {
    const r = await tollgate(['scan', '--', process.execPath, server]);
    assert.equal(r.code, 0, show(r));
    const y = r.stdout;
    assert.match(y, /12 tools, 4 allowed, 0 rate-limited, 0 need approval, 8 denied as reading secrets, 0 denied by default/, show(r));
    assert.match(y, /# {3}name says "env": it may read the environment, credentials or secrets, so it is denied \(its readOnlyHint is not trusted over that\)\n {2}# {3}tags: read \(annotation readOnlyHint: true\); reads_secrets \(name says "env"\)\n {2}"get_env":\n {4}action: deny\n {4}reason: "tollgate scan: it may read the environment, credentials or secrets"\n {4}tags: \[read, reads_secrets\]\n/);
    assert.match(y, /name says "key"[^\n]*\n {2}# {3}tags: [^\n]*\n {2}"readApiKey":\n {4}action: deny\n/);
    assert.match(y, /description says "secret"[^\n]*\n {2}# {3}tags: [^\n]*\n {2}"vault_read":\n {4}action: deny\n/);
    assert.match(y, /^ {2}# A brake for the tools tagged execute or write \(none above\): /m);
    const f = save(y, 'yaml');
    await assertLoads(f, 12);
    const denied = ['get_env', 'printenv', 'readApiKey', 'vault_read', 'login', 'issue', 'list_credentials', 'get_keys'];
    await assertCases(f, [
      ...denied.map((t) => ({ call: call(t), expect: 'deny', hidden: true })),
      { call: call('keyboard_layout'), expect: 'allow' },
      { call: call('monkey_list'), expect: 'allow' },
      { call: call('tokenizer_show'), expect: 'allow' },
      { call: call('<<'), expect: 'allow' },
      { call: call('anything_else'), expect: 'deny', hidden: true },
    ]);
    const j = await tollgate(['scan', '--json', '--', process.execPath, server]);
    assert.equal(j.code, 0, show(j));
    const p = JSON.parse(j.stdout);
    assert.deepEqual(p.tools.get_env, { action: 'deny', reason: 'tollgate scan: it may read the environment, credentials or secrets', tags: ['read', 'reads_secrets'] });
    await assertLoads(save(j.stdout, 'json'), 12);
  });

  it('writes resources and prompts groups with default: deny: listed ones allowed, secret ones denied, templates as globs', async () => {
    const r = await tollgate(['scan', '--json', '--', process.execPath, server]);
    assert.equal(r.code, 0, show(r));
    const p = JSON.parse(r.stdout);
    assert.deepEqual(p.resources, {
      default: 'deny',
      allow: ['file:///srv/docs/readme.md', 'file:///srv/notes/todo.md', 'file:///srv/docs/*', 'file:///pub/**', 'x://*/y',
        'x://**/z', 'https://api.example.com/v1/*'],
      deny: ['file:///srv/app/.env', 'config://db/password', 'secret://*'],
    });
    assert.deepEqual(p.prompts, { default: 'deny', allow: ['summarise'], deny: ['rotate_api_key'] });
    const y = await tollgate(['scan', '--', process.execPath, server]);
    assert.match(y.stdout, /^ {2}# Left out, so denied:\n {2}# odd:\/\/a\*b: odd\n {2}# {3}a URI with a \* cannot be listed/m, show(y));
    assert.match(y.stdout, /# bad:\/\/\{a\}\*: star\n {2}# {3}a template with a literal \*/, show(y));
    assert.match(y.stdout, /# \{\+uri\}: anything\n {2}# {3}a template without a fixed scheme would allow any URI: left out \(denied\)/, show(y));
    // Written in the normal form URIs are decided in (a policy refuses a glob in another), or left out.
    assert.match(y.stdout, /# file:\/srv\/notes\/draft\.md: draft\n {2}# {3}a URI that cannot be parsed \(a file:, http\(s\): or ws\(s\): URI is written with "\/\/" after the scheme\) is refused by the gateway: left out \(denied\)/, show(y));
    for (const [text, ext] of [[r.stdout, 'json'], [y.stdout, 'yaml']]) {
      const f = save(text, ext);
      await assertLoads(f, 12);
      assert.equal(await explain(f, 'resources/read', { uri: 'file:///srv/docs/readme.md' }), 'allow');
      assert.equal(await explain(f, 'resources/read', { uri: 'file:///srv/docs/guide.md' }), 'allow');
      assert.equal(await explain(f, 'resources/read', { uri: 'file:///pub/a/b/c.txt' }), 'allow');
      assert.equal(await explain(f, 'resources/read', { uri: 'file:///srv/app/.env' }), 'deny');
      assert.equal(await explain(f, 'resources/read', { uri: 'config://db/password' }), 'deny');
      assert.equal(await explain(f, 'resources/read', { uri: 'secret://1' }), 'deny');
      assert.equal(await explain(f, 'resources/read', { uri: 'odd://a*b' }), 'deny');
      assert.equal(await explain(f, 'resources/read', { uri: 'file:///etc/passwd' }), 'deny');
      assert.equal(await explain(f, 'resources/read', { uri: 'file:///srv/notes/todo.md' }), 'allow');
      assert.equal(await explain(f, 'resources/read', { uri: 'https://api.example.com/v1/7' }), 'allow');
      assert.equal(await explain(f, 'prompts/get', { name: 'summarise' }), 'allow');
      assert.equal(await explain(f, 'prompts/get', { name: 'rotate_api_key' }), 'deny');
      assert.equal(await explain(f, 'prompts/get', { name: 'all*' }), 'deny');
      assert.equal(await explain(f, 'prompts/get', { name: 'other' }), 'deny');
    }
  });

  it('a server that stops answering after tools/list still gets its policy, with resources and prompts denied', async () => {
    const r = await tollgate(['scan', '--json', '--', process.execPath, server, 'die']);
    assert.equal(r.code, 0, show(r));
    assert.match(r.stderr, /warning: the server stopped answering after tools\/list/, show(r));
    const p = JSON.parse(r.stdout);
    assert.deepEqual([p.resources, p.prompts], [{ default: 'deny' }, { default: 'deny' }]);
    assert.deepEqual(p.tools.get_env.action, 'deny');
  });

  it('the "# Scanned:" comment never carries a credential from the command line', async () => {
    const r = await tollgate(['scan', '--', process.execPath, server, '--header', 'X-Key: s3cr3t-1', 'Authorization: Bearer s3cr3t-2', '--api-token=s3cr3t-3', 'plain-arg']);
    assert.equal(r.code, 0, show(r));
    const line = r.stdout.split('\n').find((l) => l.startsWith('# Scanned: '));
    assert.ok(line, show(r));
    assert.doesNotMatch(r.stdout, /s3cr3t/, show(r));
    assert.match(line, / --header \[redacted\] \[redacted\] \[redacted\] plain-arg$/);
  });

  it('"# Scanned:" also hides the value after a flag that names a secret, and a URL argument\'s user and query', async () => {
    // The comment keeps 200 bytes of the command: two runs, so that nothing checked is cut off.
    for (const [args, want] of [
      [['--token', 's3cr3t-1', '--api-key', 's3cr3t-2', '--password', 's3cr3t-3', 'plain'], / \[redacted\] \[redacted\] \[redacted\] plain$/],
      [['https://u:s3cr3t-4@e.t/m?k=s3cr3t-5', '--url=http://x:s3cr3t-6@h/'], / https:\/\/\[redacted\]@e\.t\/m\?\[redacted\] --url=http:\/\/\[redacted\]@h\/$/],
    ]) {
      const r = await tollgate(['scan', '--', process.execPath, server, ...args]);
      assert.equal(r.code, 0, show(r));
      const line = r.stdout.split('\n').find((l) => l.startsWith('# Scanned: '));
      assert.ok(line, show(r));
      assert.doesNotMatch(r.stdout, /s3cr3t/, show(r));
      assert.match(line, want, show(r));
    }
  });

  it('secret words in unusual forms: snake, kebab and camel case, acronyms, passphrase, camelCase in a description', async () => {
    const secret = ['API_KEY', 'apiKey', 'x-api-key', 'SecretsManager', 'passphrase_check', 'privateKey', 'ssh_key',
      'getCredentials', 'getAWSSecret', 'readENVVar', 'fetchAPIToken', 'unlockWithPassphrase', 'read_cookies',
      'getBearer', 'get_auth_header'];
    const described = { fetch_a: 'Returns the clientSecret', fetch_b: 'Reads the user\'s accessToken', fetch_c: 'Gives back the AWSSecretKey' };
    const ro = { readOnlyHint: true };
    const tools = [...secret.map((name) => ({ name, description: 'x', annotations: ro })),
      ...Object.entries(described).map(([name, description]) => ({ name, description, annotations: ro })),
      { name: 'getMCPServerInfo', description: 'x', annotations: ro }, { name: 'list_authors', description: 'x', annotations: ro }];
    secret.push(...Object.keys(described));
    const r = await tollgate(['scan', '--json', '--', process.execPath, server, 'tools', JSON.stringify(tools)]);
    assert.equal(r.code, 0, show(r));
    const p = JSON.parse(r.stdout);
    for (const t of secret) assert.equal(p.tools[t]?.action, 'deny', `${t}: ${r.stdout}`);
    assert.equal(p.tools.getMCPServerInfo?.action, 'allow', r.stdout);
    assert.equal(p.tools.list_authors?.action, 'allow', r.stdout); // "authors" is not the word "auth"

  });

  it('tags from words and from each annotation, with the reason for each; the same in YAML and JSON', async () => {
    const tools = [
      { name: 'get_alpha', description: 'x', annotations: { readOnlyHint: false } },
      { name: 'show_beta', description: 'x', annotations: { idempotentHint: true } },
      { name: 'show_gamma', description: 'x', annotations: { destructiveHint: false } },
      { name: 'view_delta', description: 'x', annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false } },
      { name: 'find_things', description: 'x', annotations: { readOnlyHint: true, openWorldHint: true } },
      { name: 'read_env', description: 'Reads an environment variable', annotations: { readOnlyHint: true } },
      { name: 'list_files', description: 'x' },
      { name: 'save_view', description: 'x', annotations: { readOnlyHint: true } },
      { name: 'run_script', description: 'x' },
      { name: 'send_mail', description: 'x' },
      { name: 'wipe_cache', description: 'Deletes cached entries' },
      { name: 'post_webhook', description: 'x' },
      { name: 'upload_report', description: 'x' },
    ];
    const want = {
      get_alpha: ['write'], show_beta: ['write'], show_gamma: ['write'], view_delta: ['read'],
      find_things: ['read', 'egress', 'network'], read_env: ['read', 'reads_secrets'], list_files: ['read', 'filesystem'],
      save_view: ['write'], run_script: ['execute'], send_mail: ['write', 'egress'], wipe_cache: ['write', 'destructive'],
      post_webhook: ['egress', 'network'],
    };
    const j = await tollgate(['scan', '--json', '--', process.execPath, server, 'tools', JSON.stringify(tools)]);
    assert.equal(j.code, 0, show(j));
    const p = JSON.parse(j.stdout);
    assert.deepEqual(jsonTags(p), want, j.stdout);
    assert.equal(p.tools.read_env.action, 'deny');
    const y = await tollgate(['scan', '--', process.execPath, server, 'tools', JSON.stringify(tools)]);
    assert.equal(y.code, 0, show(y));
    assert.deepEqual(yamlTags(y.stdout), want, y.stdout);
    for (const [tool, why] of [
      ['get_alpha', 'write \\(annotation readOnlyHint: false\\)'],
      ['show_beta', 'write \\(annotation idempotentHint \\(a tool that changes things\\)\\)'],
      ['show_gamma', 'write \\(annotation destructiveHint: false \\(a tool that changes things\\)\\)'],
      ['view_delta', 'read \\(annotation readOnlyHint: true\\)'],
      ['find_things', 'read \\(annotation readOnlyHint: true\\); egress \\(annotation openWorldHint: true\\); network \\(annotation openWorldHint: true\\)'],
      ['read_env', 'read \\(annotation readOnlyHint: true\\); reads_secrets \\(name says "env"\\)'],
      ['save_view', 'write \\(name says "save"\\)'],
      ['wipe_cache', 'write \\(name says "wipe"\\); destructive \\(name says "wipe"\\)'],
    ]) assert.match(y.stdout, new RegExp(`^ {2}# {3}tags: ${why}\\n {2}"${tool}":$`, 'm'), y.stdout);
    // upload_report matches no class: left out, with the tags it would get.
    assert.match(y.stdout, /# upload_report: x\n {2}# {3}no word of the lists matched[^\n]*\n {2}# {3}tags if you allow it: write \(name says "upload"\); egress \(name says "upload"\); network \(name says "upload"\)\n/);
    assertBrake(y.stdout, 7);
    await assertLoads(save(y.stdout, 'yaml'), 12);
    await assertLoads(save(j.stdout, 'json'), 12);
  });

  it('a server that offers no prompts still gets a prompts group, which denies every one', async () => {
    const r = await tollgate(['scan', '--', process.execPath, HOSTILE, '--stdio', '--flags', 'list=scan']);
    assert.equal(r.code, 0, show(r));
    assert.match(r.stdout, /# The server offers no prompts: every one is denied\.\nprompts:\n {2}default: deny\n/, show(r));
    assert.match(r.stdout, /prompts: 0 allowed, 0 denied/);
  });
});

describe('tollgate scan https://', () => {
  let certs;
  const tlsFx = {};
  before(async () => {
    certs = H.makeUpstreamCerts(H.makeTempDir(cleanup, 'tollgate-scan-tls-'));
    for (const [role, c] of [['good', certs.server], ['untrusted', certs.untrusted], ['otherName', certs.otherName]]) {
      tlsFx[role] = await startHostile({ tls: { key: c.key, cert: c.cert } });
      cleanup.add(() => tlsFx[role].stop());
    }
  });
  const posts = (h) => h.httpLog.filter((e) => e.method === 'POST');

  it('--ca FILE: scans an https server, the same policy as over http://; SNI is the URL host', async () => {
    const h = tlsFx.good;
    const url = h.url('/list=scan/answer=sse/mcp');
    assert.match(url, /^https:\/\/127\.0\.0\.1:/);
    const r = await tollgate(['scan', '--ca', certs.ca.cert, url]);
    assert.equal(r.code, 0, show(r));
    assert.match(r.stdout, /3 allowed, 1 rate-limited, 3 need approval/, show(r));
    assert.ok(posts(h).length >= 3, `POSTs over TLS: ${posts(h).length}`);
    const plain = await startHostile({ port: 0 });
    cleanup.add(() => plain.stop());
    const overHttp = await tollgate(['scan', plain.url('/list=scan/answer=sse/mcp')]);
    const body = (x) => x.stdout.split('\n').filter((l) => !l.startsWith('# Scanned: ')).join('\n');
    assert.equal(body(r), body(overHttp));
    await assertLoads(save(r.stdout, 'yaml'), (r.stdout.match(/^ {2}"(?!\*")/gm) ?? []).length);
    assert.ok(h.tlsSessions.every((t) => t.servername === false), 'no SNI for an IP host');
    // by name: localhost is in the certificate, and goes as SNI
    const before = h.tlsSessions.length;
    const byName = await tollgate(['scan', '--ca', certs.ca.cert, `https://localhost:${h.port}/mcp`]);
    assert.equal(byName.code, 0, show(byName));
    assert.ok(h.tlsSessions.slice(before).some((t) => t.servername === 'localhost'), JSON.stringify(h.tlsSessions.slice(before)));
  });

  it('refused certificates: the system bundle, another CA, another name: a clear message, exit 1, no request sent', async () => {
    for (const [what, role, args, re] of [
      ['the system bundle does not know the test CA', 'good', [], /TLS handshake with 127\.0\.0\.1 port \d+ failed: .*(verif|certificate|CA)/i],
      ['a certificate from another CA', 'untrusted', ['--ca', certs.ca.cert], /TLS handshake with 127\.0\.0\.1 port \d+ failed: .*(verif|certificate|CA)/i],
      ['a certificate for another name', 'otherName', ['--ca', certs.ca.cert], /TLS handshake with 127\.0\.0\.1 port \d+ failed: .*(verif|certificate|name|CN)/i],
    ]) {
      const h = tlsFx[role];
      const n = posts(h).length;
      const r = await tollgate(['scan', ...args, h.url('/mcp')]);
      assert.equal(r.code, 1, `${what}: ${show(r)}`);
      assert.match(r.stderr, re, `${what}: ${show(r)}`);
      assert.equal(r.stdout, '', what);
      assert.equal(posts(h).length, n, `${what}: no request reached the server`);
    }
    const ins = await tollgate(['scan', '--insecure', tlsFx.untrusted.url('/mcp')]);
    assert.equal(ins.code, 0, `--insecure: ${show(ins)}`);
    const bad = await tollgate(['scan', '--ca', path.join(dir, 'no-such-ca.pem'), tlsFx.good.url('/mcp')]);
    assert.equal(bad.code, 1, show(bad));
    assert.match(bad.stderr, /^tollgate: scan: TLS: .*no-such-ca\.pem/m, show(bad));
    for (const args of [['--ca', certs.ca.cert, '--insecure'], ['--insecure', 'http://127.0.0.1:1/mcp'], ['--ca', certs.ca.cert, '--', 'true']]) {
      const u = await tollgate(['scan', ...args, ...(args.includes('--') || args.some((a) => a.startsWith('http')) ? [] : [tlsFx.good.url('/mcp')])]);
      assert.equal(u.code, 2, `${args.join(' ')}: ${show(u)}`);
    }
  });

  it('a plain HTTP server, a silent one, garbage and a dripping answer: a clear error within --timeout', async () => {
    const plain = await startHostile({ port: 0 });
    cleanup.add(() => plain.stop());
    let t0 = Date.now();
    let r = await tollgate(['scan', '--timeout', '2', `https://127.0.0.1:${plain.port}/mcp`]);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, /TLS handshake with 127\.0\.0\.1 port \d+(: | failed: )/, show(r));
    assert.ok(Date.now() - t0 < H.scaled(10000), `took ${Date.now() - t0} ms`);
    assert.equal(posts(plain).length, 0);

    const held = new Set();
    const mode = new Map(); // port -> behaviour
    const servers = [];
    for (const m of ['silent', 'garbage', 'drip']) {
      const srv = net.createServer((sock) => {
        held.add(sock);
        sock.on('error', () => {});
        if (m === 'garbage') sock.once('data', () => sock.end('\x16\x03\x01 this is not HTTP at all\r\n\r\n'));
        if (m === 'drip') {
          sock.once('data', () => {
            sock.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n');
            const t = setInterval(() => sock.write('X'), 100); // a header that never ends
            sock.on('close', () => clearInterval(t));
          });
        }
      });
      await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
      mode.set(m, srv.address().port);
      servers.push(srv);
    }
    cleanup.add(() => { for (const s of held) s.destroy(); return Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve)))); });
    t0 = Date.now();
    r = await tollgate(['scan', '--timeout', '0.5', `https://127.0.0.1:${mode.get('silent')}/mcp`]);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, /TLS handshake with 127\.0\.0\.1 port \d+: no answer within 500 ms/, show(r));
    assert.ok(Date.now() - t0 < H.scaled(10000), `silent TLS: took ${Date.now() - t0} ms`);
    r = await tollgate(['scan', '--timeout', '2', `http://127.0.0.1:${mode.get('garbage')}/mcp`]);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, /bad HTTP answer from 127\.0\.0\.1 port \d+: /, show(r));
    t0 = Date.now();
    r = await tollgate(['scan', '--timeout', '1', `http://127.0.0.1:${mode.get('drip')}/mcp`]);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, /no answer from 127\.0\.0\.1 port \d+ within 1000 ms|header/i, show(r));
    const took = Date.now() - t0;
    assert.ok(took >= 900 && took < H.scaled(10000), `a dripping answer is cut at --timeout: took ${took} ms`);
  });
});
