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
const POLICY = {
  version: '1',
  default: 'allow',
  resources: { deny: [`${SECRET_FILE}**`, `${SECRET_API}**`] },
};

/** Would the upstream (an SDK server: new URL(uri).href) read a denied resource? */
function secret(uri) {
  let href;
  try {
    href = new URL(uri).href;
  } catch {
    return false; // it cannot look it up at all
  }
  return href.startsWith(SECRET_FILE) || href.startsWith(SECRET_API);
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
];
// The resources the upstream lists (and templates it offers), some spelt the same ways.
const LISTED = ['file:///pub/a', 'file:///secret/b', 'file:/secret/c', 'file://localhost/secret/d',
  'https://api.example.com:443/secret/e', 'https://api.example.com/pub/f'];

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
  gw = await H.startTollgate(H.writeConf(dir, { upstreams: [{ name: 'rec', url: up.url, policy }] }), { cleanup });
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
});
