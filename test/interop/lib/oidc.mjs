// The real OpenID provider of test/fixtures/oidc/idp.mjs, for the identity tests: keys, start,
// restart with another key set, its request log, and client_credentials tokens from it.
//
//   const keys = makeIdpKeys('k1');                       // private JWKS (RS256 + ES256)
//   const idp = await startIdp({ cleanup, dir, certs, keys, resources: { [RES]: { scope: 'read' } } });
//   const tok = await idp.token({ resource: RES, scope: 'read' });   // a JWT access token
//   await idp.restart({ keys: makeIdpKeys('k2') });       // same port, same issuer, new keys
//   await idp.waitForRequest((r) => r.path === '/jwks');  // the request log, awaited
//
// certs: makeCerts(dir) from harness.mjs (the idp serves certs.cert; clients trust certs.caCert).
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';

import { REPO_ROOT, scaled, stopChild } from './harness.mjs';

const IDP = path.join(REPO_ROOT, 'test', 'fixtures', 'oidc', 'idp.mjs');

/** A private JWKS: an RSA-2048 key (RS256, kid `${prefix}-rsa`) and a P-256 key (ES256, `${prefix}-ec`). */
export function makeIdpKeys(prefix = 'k1') {
  const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const ec = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return {
    keys: [
      { ...rsa.privateKey.export({ format: 'jwk' }), kid: `${prefix}-rsa`, alg: 'RS256', use: 'sig' },
      { ...ec.privateKey.export({ format: 'jwk' }), kid: `${prefix}-ec`, alg: 'ES256', use: 'sig' },
    ],
  };
}

/**
 * Starts the provider. opts: { cleanup, dir, certs, keys (private JWKS object), name ('idp': its
 * files in dir), and any option of idp.mjs (issuerPath, clients, resources, alg, extraClaims,
 * jwksCacheControl, hideOpenidConfiguration, issuerOverride) }. extraClaims may be changed later
 * with idp.setClaims(obj) (written to the extraClaimsFile). Returns
 * { issuer, port, url(p), requests, waitForRequest(pred), token(o), setClaims(o), restart(o), stop() }.
 */
export async function startIdp(opts) {
  const { cleanup, dir, certs, name = 'idp' } = opts;
  const claimsFile = path.join(dir, `${name}-claims.json`);
  const state = { child: null, port: 0, issuer: null, requests: [], waiters: [], stderr: '' };
  const idp = {
    get issuer() { return state.issuer; },
    get port() { return state.port; },
    requests: state.requests,
    url: (p) => `${state.issuer}${p}`,
  };

  async function launch(keys, extra = {}) {
    const jwksFile = path.join(dir, `${name}-jwks.json`);
    fs.writeFileSync(jwksFile, JSON.stringify(keys), { mode: 0o600 });
    const o = { ...opts, ...extra };
    const conf = {
      cert: certs.cert, key: certs.key, jwksFile, port: state.port,
      issuerPath: o.issuerPath, clients: o.clients, resources: o.resources, alg: o.alg,
      extraClaims: o.extraClaims, extraClaimsFile: claimsFile, jwksCacheControl: o.jwksCacheControl,
      hideOpenidConfiguration: o.hideOpenidConfiguration, issuerOverride: o.issuerOverride,
    };
    const confFile = path.join(dir, `${name}-options.json`);
    fs.writeFileSync(confFile, JSON.stringify(conf));
    const child = spawn(process.execPath, [IDP, confFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    state.child = child;
    child.stderr.on('data', (d) => { state.stderr += d; });
    let buf = '';
    const ready = new Promise((resolve, reject) => {
      child.on('exit', (code) => reject(new Error(`idp exited (${code}): ${state.stderr}`)));
      child.stdout.on('data', (d) => {
        buf += d;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          let m;
          try { m = JSON.parse(line); } catch { continue; }
          if (m.ready) {
            state.port = m.port;
            state.issuer = m.issuer;
            resolve();
          } else if (m.request) {
            state.requests.push(m.request);
            for (const w of [...state.waiters]) if (w.pred(m.request)) { w.resolve(m.request); state.waiters.splice(state.waiters.indexOf(w), 1); }
          }
        }
      });
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), scaled(15000));
    try { await ready; } finally { clearTimeout(timer); }
  }

  /** The first logged request (from now on, or already logged with `since`) matching pred. */
  idp.waitForRequest = (pred, { since = state.requests.length, timeout = scaled(15000) } = {}) => {
    const hit = state.requests.slice(since).find(pred);
    if (hit) return Promise.resolve(hit);
    return new Promise((resolve, reject) => {
      const w = { pred, resolve };
      state.waiters.push(w);
      setTimeout(() => {
        const i = state.waiters.indexOf(w);
        if (i >= 0) { state.waiters.splice(i, 1); reject(new Error('idp: no such request came')); }
      }, timeout).unref();
    });
  };
  idp.count = (pred) => state.requests.filter(pred).length;

  idp.setClaims = (claims) => fs.writeFileSync(claimsFile, JSON.stringify(claims));

  /**
   * A client_credentials access token: { resource, scope, client_id, client_secret, dpop } where
   * dpop, when given, is a DPoP proof JWT for POST to the token endpoint (the answer is then
   * DPoP-bound). Returns the token endpoint's JSON answer ({ access_token, token_type, ... }).
   */
  idp.tokenResponse = async ({ resource, scope, client_id = 'tollgate-test', client_secret = 'tollgate-test-secret', dpop } = {}) => {
    const form = new URLSearchParams({ grant_type: 'client_credentials' });
    if (resource) form.set('resource', resource);
    if (scope) form.set('scope', scope);
    const headers = {
      'content-type': 'application/x-www-form-urlencoded',
      authorization: `Basic ${Buffer.from(`${encodeURIComponent(client_id)}:${encodeURIComponent(client_secret)}`).toString('base64')}`,
    };
    if (dpop) headers.dpop = dpop;
    const body = form.toString();
    return new Promise((resolve, reject) => {
      const req = https.request(idp.url('/token'), { method: 'POST', headers, ca: fs.readFileSync(certs.caCert) }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => { text += d; });
        res.on('end', () => {
          const j = JSON.parse(text);
          if (res.statusCode !== 200) reject(new Error(`token endpoint ${res.statusCode}: ${text}`));
          else resolve(j);
        });
      });
      req.on('error', reject);
      req.end(body);
    });
  };
  idp.token = async (o) => (await idp.tokenResponse(o)).access_token;

  idp.stop = async () => {
    if (state.child) await stopChild(state.child);
    state.child = null;
  };
  /** The same port and issuer, another key set (and option changes, e.g. jwksCacheControl). */
  idp.restart = async ({ keys, ...extra } = {}) => {
    await idp.stop();
    opts.keys = keys ?? opts.keys;
    Object.assign(opts, extra);
    await launch(opts.keys);
  };

  await launch(opts.keys);
  cleanup?.add(() => idp.stop());
  return idp;
}
