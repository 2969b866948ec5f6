// The credentials of test/bench/auth.sh, made at run time with node:crypto only:
//   DIR/jwks.json     the issuer's public keys (RSA-2048 "rs-1", P-256 "es-1")
//   DIR/static.token  a random static bearer token; DIR/static.sha256 its SHA-256 (for the conf)
//   DIR/rs256.jwt     an RS256 access token for grant "bench", valid for TTL seconds
//   DIR/es256.jwt     the same, ES256
//   DIR/dpop.jwt      an ES256 token bound (cnf.jkt) to DIR/dpop-key.pem, the client's P-256 key
//
//   node test/bench/auth_tokens.mjs DIR ISSUER AUDIENCE [TTL=3600]
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const [dir, issuer, audience, ttl = '3600'] = process.argv.slice(2);
if (!dir || !issuer || !audience) {
  console.error('usage: auth_tokens.mjs DIR ISSUER AUDIENCE [TTL]');
  process.exit(2);
}
const b64u = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const ec = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
const client = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });

fs.writeFileSync(path.join(dir, 'jwks.json'), JSON.stringify({ keys: [
  { ...rsa.publicKey.export({ format: 'jwk' }), kid: 'rs-1', alg: 'RS256', use: 'sig' },
  { ...ec.publicKey.export({ format: 'jwk' }), kid: 'es-1', alg: 'ES256', use: 'sig' },
] }) + '\n');

const now = Math.floor(Date.now() / 1000);
function jwt(alg, extra = {}) {
  const header = { alg, typ: 'at+jwt', kid: alg === 'RS256' ? 'rs-1' : 'es-1' };
  const payload = { iss: issuer, aud: audience, sub: 'bench', iat: now, exp: now + Number(ttl), ...extra };
  const input = `${b64u(header)}.${b64u(payload)}`;
  const sig = alg === 'RS256'
    ? crypto.sign('sha256', Buffer.from(input), rsa.privateKey)
    : crypto.sign('sha256', Buffer.from(input), { key: ec.privateKey, dsaEncoding: 'ieee-p1363' });
  return `${input}.${sig.toString('base64url')}`;
}
// RFC 7638: the thumbprint of the client's public key, which binds the token to it.
const cj = client.publicKey.export({ format: 'jwk' });
const jkt = crypto.createHash('sha256')
  .update(JSON.stringify({ crv: cj.crv, kty: cj.kty, x: cj.x, y: cj.y })).digest('base64url');

const token = crypto.randomBytes(24).toString('base64url');
fs.writeFileSync(path.join(dir, 'static.token'), token);
fs.writeFileSync(path.join(dir, 'static.sha256'), crypto.createHash('sha256').update(token).digest('hex'));
fs.writeFileSync(path.join(dir, 'rs256.jwt'), jwt('RS256'));
fs.writeFileSync(path.join(dir, 'es256.jwt'), jwt('ES256'));
fs.writeFileSync(path.join(dir, 'dpop.jwt'), jwt('ES256', { cnf: { jkt } }));
fs.writeFileSync(path.join(dir, 'dpop-key.pem'), client.privateKey.export({ type: 'sec1', format: 'pem' }));
