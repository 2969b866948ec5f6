// Resource URIs that a URL parser reads as another URI than the one decided: through tollgate
// to a recording upstream (a 2025 Streamable HTTP server written here, which answers
// resources/read with the URI it was sent), as raw requests in a 2025 session.
//
// The oracle is the one an SDK server uses: it looks a resource up by `new URL(uri).href`
// (WHATWG), which reads "file:/x", "file:x" and "file://localhost/x" as "file:///x", and drops
// a default port. For every trick, either tollgate refuses and the upstream receives nothing, or
// what the upstream receives does not parse to a URI under the denied folder. Lists and
// resources/subscribe are held to the same oracle, and the updates the upstream sends on the
// session's GET stream too.
//
//   TOLLGATE_BIN=build/tollgate node --test test/interop/uritricks.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import * as H from './lib/harness.mjs';

H.requireNodeModules();

const cleanup = new H.Cleanup();
let gw;
let up;

const logs = () => ({ 'tollgate process': gw?.status(), 'tollgate stderr': gw?.stderr() });
const test = (name, fn) => it(name, H.withLogs(logs, fn));

// Denied whatever the spelling: the secret folder, and the secret API path.
const SECRET_FILE = 'file:///secret/';
const SECRET_API = 'https://api.example.com/secret/';
const SECRET_IP = 'http://127.0.0.1/secret/';
const POLICY = {
  version: '1',
  default: 'allow',
  resources: { deny: [`${SECRET_FILE}**`, `${SECRET_API}**`, `${SECRET_IP}**`] },
};

/** Would the upstream (an SDK server: new URL(uri).href, or one that fetches it) read a denied resource? */
function secret(uri) {
  let href;
  try {
    const u = new URL(uri);
    u.username = '';
    u.password = '';
    href = u.href;
  } catch {
    return false; // it cannot look it up at all
  }
  return href.startsWith(SECRET_FILE) || href.startsWith(SECRET_API) || href.startsWith(SECRET_IP);
}

/** A 2025 Streamable HTTP upstream that records every request body and can push on its GET stream. */
async function startRecorder() {
  const seen = [];
  const streams = [];
  const srv = http.createServer((req, res) => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': open\n\n');
      streams.push(res);
      return;
    }
    if (req.method === 'DELETE') {
      res.writeHead(200).end();
      return;
    }
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const m = JSON.parse(body);
      seen.push(m);
      if (m.id === undefined) {
        res.writeHead(202).end();
        return;
      }
      const p = m.params ?? {};
      let result = {};
      if (m.method === 'initialize') {
        result = { protocolVersion: p.protocolVersion, capabilities: { resources: { subscribe: true } }, serverInfo: { name: 'recorder', version: '1' } };
      } else if (m.method === 'resources/list') {
        result = { resources: LISTED.map((uri, i) => ({ uri, name: `r${i}` })), nextCursor: 'next' };
      } else if (m.method === 'resources/templates/list') {
        result = { resourceTemplates: LISTED.map((uri, i) => ({ uriTemplate: `${uri}{x}`, name: `t${i}` })) };
      } else if (m.method === 'resources/read') {
        result = { contents: [{ uri: p.uri, text: `contents of ${p.uri}` }] };
      }
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'recorder-session' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: m.id, result }));
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  cleanup.add(() => { for (const s of streams) s.destroy(); srv.close(); });
  return {
    url: `http://127.0.0.1:${srv.address().port}/mcp`,
    seen,
    streams,
    push: (msg) => { for (const s of streams) s.write(`data: ${JSON.stringify(msg)}\n\n`); },
  };
}

// What a hostile client sends: each spells a denied resource in a way a URL parser reads back.
const TRICKS = [
  'file:///secret/a',
  'file:/secret/a',
  'file:secret/a',
  'FILE:/secret/a',
  'file://localhost/secret/a',
  'file://LOCALHOST/secret/a',
  'file://localhost//secret/a',
  'file:////secret/a',
  'file:///pub/../secret/a',
  'file:///pub/%2e%2e/secret/a',
  'file:///pub/.%2E/secret/a',
  'file:///pub/%252e%252e/secret/a',
  'file:///pub/..%2fsecret/a',
  'file:///%73ecret/a',
  'file://localhost/pub/%2e%2e/secret/a',
  'file:/pub/../secret/a',
  'file://../secret/a',
  'file:///pub/a;/../../secret/a',
  'https://api.example.com/secret/a',
  'https://api.example.com:443/secret/a',
  'https://api.example.com:0443/secret/a',
  'https://api.example.com:/secret/a',
  'https:api.example.com/secret/a',
  'https:/api.example.com/secret/a',
  'HTTPS://API.EXAMPLE.COM:443/secret/a',
  'https://api.example.com:443/pub/%2e%2e/secret/a',
  'https://ＡＰＩ.example.com/secret/a', // fullwidth letters, which IDNA maps to ASCII
  'https://api。example。com/secret/a', // ideographic full stops
  'https://%EF%BC%A1pi.example.com/secret/a',
  'https://api.ex\u00ADample.com/secret/a', // a soft hyphen, which IDNA drops
  'file://ＬＯＣＡＬＨＯＳＴ/secret/a',
  'http://127.0.0.1/secret/a',
  'http://0x7f.1/secret/a', // IPv4 written as a URL parser also reads it
  'http://2130706433/secret/a',
  'http://127.000.0.1/secret/a',
  'http://127.0.0.1./secret/a',
  'https://user@api.example.com/secret/a', // a client that fetches it reads the host alone
  'https://api.example.com:443@api.example.com/secret/a',
  'https://api.example.com::443/secret/a', // one ":443" dropped would leave "api.example.com:"
];
// The resources the upstream lists (and templates it offers), some spelt the same ways.
const LISTED = ['file:///pub/a', 'file:///secret/b', 'file:/secret/c', 'file://localhost/secret/d',
  'https://api.example.com:443/secret/e', 'https://api.example.com/pub/f'];

// The same upstream over stdio (a message-stream link): resources/read of file:///pub/emit first
// sends what the test asks for (argv[2], JSON lines), then a readable marker update, then the answer.
const STDIO_SERVER = `
const emit = JSON.parse(process.argv[2]);
let buf = '';
const out = (m) => process.stdout.write((typeof m === 'string' ? m : JSON.stringify(m)) + '\\n');
process.stdin.setEncoding('utf8').on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\\n')) >= 0) {
    const m = JSON.parse(buf.slice(0, i)); buf = buf.slice(i + 1);
    if (m.id === undefined) continue;
    const ok = (result) => out({ jsonrpc: '2.0', id: m.id, result });
    if (m.method === 'initialize') ok({ protocolVersion: m.params.protocolVersion, capabilities: { resources: { subscribe: true } }, serverInfo: { name: 'stdio-rec', version: '1' } });
    else if (m.method === 'resources/read') {
      for (const line of emit) out(line);
      out({ jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri: 'file:///pub/marker' } });
      ok({ contents: [{ uri: m.params.uri, text: 'x' }] });
    } else ok({});
  }
});
`;
const STDIO_EMITS = [
  '[{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///secret/batch"}}]',
  '[{"jsonrpc":"2.0","id":"s1","method":"roots/list"}]',
  '{"jsonrpc":"2.0","method":"notifications\\/resources\\/updated","params":{"uri":"file:///secret/escaped"}}',
  '{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file://localhost/secret/host"}}',
];
let stdioUrl;
let sseUrl;

/** The same upstream over legacy HTTP+SSE: what it sends comes on its one event stream. */
async function startLegacy(emits) {
  let stream = null;
  const srv = http.createServer((req, res) => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('event: endpoint\ndata: /messages?sessionId=1\n\n');
      stream = res;
      return;
    }
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      res.writeHead(202).end();
      const m = JSON.parse(body);
      if (m.id === undefined) return;
      const send = (x) => stream.write(`event: message\ndata: ${typeof x === 'string' ? x : JSON.stringify(x)}\n\n`);
      const ok = (result) => send({ jsonrpc: '2.0', id: m.id, result });
      if (m.method === 'initialize') {
        ok({ protocolVersion: m.params.protocolVersion, capabilities: { resources: { subscribe: true } }, serverInfo: { name: 'sse-rec', version: '1' } });
      } else if (m.method === 'resources/read') {
        for (const line of emits) send(line);
        send({ jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri: 'file:///pub/marker' } });
        ok({ contents: [{ uri: m.params.uri, text: 'x' }] });
      } else {
        ok({});
      }
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  cleanup.add(() => { stream?.destroy(); srv.close(); });
  return `http://127.0.0.1:${srv.address().port}/sse`;
}

let url;
let session;
let nextId = 100;
const rpc = async (method, params) => {
  const r = await H.postRaw(fetch, url, { jsonrpc: '2.0', id: nextId++, method, params }, session.headers);
  assert.equal(r.status, 200, r.text);
  return r.messages[0];
};

before(async () => {
  const dir = H.makeTempDir(cleanup);
  up = await startRecorder();
  const policy = path.join(dir, 'policy.json');
  fs.writeFileSync(policy, JSON.stringify(POLICY));
  const server = path.join(dir, 'stdio-rec.mjs');
  fs.writeFileSync(server, STDIO_SERVER);
  gw = await H.startTollgate(H.writeConf(dir, { upstreams: [{ name: 'rec', url: up.url, policy },
    { name: 'srec', command: [process.execPath, server, JSON.stringify(STDIO_EMITS)], policy },
    { name: 'lrec', url: await startLegacy(STDIO_EMITS), transport: 'sse', policy }] }), { cleanup });
  stdioUrl = `http://127.0.0.1:${gw.plainPort}/srec/mcp`;
  sseUrl = `http://127.0.0.1:${gw.plainPort}/lrec/mcp`;
  url = `http://127.0.0.1:${gw.plainPort}/rec/mcp`;
  session = await H.rawInitialize(fetch, url);
});

after(() => cleanup.run());

describe('a denied resource spelt as a URL parser reads it', () => {
  for (const method of ['resources/read', 'resources/subscribe']) {
    test(`${method}: no spelling reaches the upstream`, async () => {
      const leaked = [];
      for (const uri of TRICKS) {
        const before = up.seen.length;
        const a = await rpc(method, { uri });
        const got = up.seen.slice(before).filter((m) => m.method === method).map((m) => m.params.uri);
        for (const u of got)
          if (secret(u)) leaked.push(`${uri} -> upstream ${method} ${u}`);
        if (got.length === 0)
          assert.ok(a.error, `${uri}: nothing reached the upstream, so the answer is an error: ${JSON.stringify(a)}`);
      }
      assert.deepEqual(leaked, [], 'denied resources the upstream was asked for');
      // The control: an allowed resource still reaches the upstream.
      const a = await rpc(method, { uri: 'file:///pub/a' });
      assert.ok(a.result, JSON.stringify(a));
    });
  }

  test('resources/list and resources/templates/list hide every spelling', async () => {
    const list = (await rpc('resources/list', {})).result;
    assert.deepEqual(list.resources.map((r) => r.uri), ['file:///pub/a', 'https://api.example.com/pub/f']);
    assert.equal(list.nextCursor, 'next', 'pagination goes on');
    const t = (await rpc('resources/templates/list', {})).result;
    assert.deepEqual(t.resourceTemplates.map((r) => r.uriTemplate), ['file:///pub/a{x}', 'https://api.example.com/pub/f{x}']);
  });

  test('notifications/resources/updated on the GET stream: no spelling reaches the client', async () => {
    const res = await fetch(url, { headers: { accept: 'text/event-stream', ...session.headers } });
    assert.equal(res.status, 200);
    await H.waitUntil(() => up.streams.length > 0, { what: 'tollgate opened the upstream GET stream' });
    const reader = res.body.getReader();
    let text = '';
    const dec = new TextDecoder();
    for (const uri of [...LISTED, ...TRICKS.filter((u) => !u.includes('%2f'))])
      up.push({ jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri } });
    up.push({ jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri: 'file:///pub/last' } });
    while (!text.includes('file:///pub/last')) {
      const { value, done } = await reader.read();
      assert.ok(!done, `the stream ended early: ${text}`);
      text += dec.decode(value);
    }
    reader.cancel();
    const uris = H.parseSse(text).map((e) => JSON.parse(e.data).params.uri);
    assert.deepEqual(uris.filter(secret), [], `updates the client heard: ${uris.join(', ')}`);
    assert.ok(uris.includes('file:///pub/a'), uris.join(', '));
  });

  test('an update spelt another way (escaped method, a batch, extra members) reaches the client only if readable', async () => {
    const own = await H.rawInitialize(fetch, url); // a session of its own: the last test's stream may not be gone yet
    const res = await fetch(url, { headers: { accept: 'text/event-stream', ...own.headers } });
    assert.equal(res.status, 200);
    const raw = (text) => { for (const s of up.streams) if (!s.destroyed) s.write(`data: ${text}\n\n`); };
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let text = '';
    // The client's stream is joined to an upstream GET stream when a readable update comes through.
    const ping = setInterval(() => raw('{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///pub/ping"}}'), 50);
    try {
      while (!text.includes('file:///pub/ping')) {
        const { value, done } = await reader.read();
        assert.ok(!done, `the stream ended early: ${text}`);
        text += dec.decode(value);
      }
    } finally {
      clearInterval(ping);
    }
    raw('{"jsonrpc":"2.0","method":"notifications\\/resources\\/updated","params":{"uri":"file:///secret/1"}}');
    raw('{"method":"notifications/resources/updated","jsonrpc":"2.0","params":{"uri":"file:///secret/2"}}');
    raw('[{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///secret/3"}}]');
    raw('{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///pub/x","uri":"file:///secret/4"}}');
    raw('{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":["file:///secret/5"]}}');
    raw('{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///pub/last2"}}');
    while (!text.includes('file:///pub/last2')) {
      const { value, done } = await reader.read();
      assert.ok(!done, `the stream ended early: ${text}`);
      text += dec.decode(value);
    }
    reader.cancel();
    const heard = H.parseSse(text).map((e) => e.data).filter((d) => /secret/.test(d) && !/%252e/.test(d));
    assert.deepEqual(heard, [], 'updates of a denied resource the client heard');
  });

  for (const [kind, target] of [['stdio', () => stdioUrl], ['legacy HTTP+SSE', () => sseUrl]]) {
    test(`${kind} upstream: a batch, an escaped method, a host spelling on the session stream reach the client only if readable`, async () => {
      const u = target();
      const s = await H.rawInitialize(fetch, u);
      const res = await fetch(u, { headers: { accept: 'text/event-stream', ...s.headers } });
      assert.equal(res.status, 200);
      const read = await H.postRaw(fetch, u, { jsonrpc: '2.0', id: 7, method: 'resources/read', params: { uri: 'file:///pub/emit' } }, s.headers);
      assert.equal(read.status, 200, read.text);
      // The messages before the answer go to the GET stream, or to the call's own SSE answer.
      let text = read.text;
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      while (!text.includes('file:///pub/marker')) {
        const { value, done } = await reader.read();
        assert.ok(!done, `the stream ended early: ${text}`);
        text += dec.decode(value);
      }
      reader.cancel();
      assert.doesNotMatch(text, /secret|roots\/list/, text);
    });
  }
});
