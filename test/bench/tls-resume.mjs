// Full TLS handshakes against resumed ones (session tickets), one after another, against one
// listener: what a reconnecting client pays with and without listen[].tls.session_timeout_s.
//
//   node test/bench/tls-resume.mjs PORT [COUNT]      (loopback; client side included in the figures)
import tls from 'node:tls';

const port = Number(process.argv[2]);
const count = Number(process.argv[3] ?? 300);
if (!port) {
  console.error('usage: node test/bench/tls-resume.mjs PORT [COUNT]');
  process.exit(2);
}

function connect(session) {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false, session, maxVersion: 'TLSv1.2' });
    let ticket;
    s.on('session', (b) => { ticket = b; });
    s.once('secureConnect', () => {
      const reused = s.isSessionReused();
      s.end();
      s.once('close', () => resolve({ reused, ticket }));
    });
    s.once('error', reject);
  });
}

for (const mode of ['full', 'resumed']) {
  const first = await connect();
  const t0 = process.hrtime.bigint();
  let reused = 0;
  for (let i = 0; i < count; i++) reused += (await connect(mode === 'full' ? undefined : first.ticket)).reused;
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  console.log(`${mode}: ${count} handshakes in ${ms.toFixed(0)} ms, ${(ms / count).toFixed(2)} ms each; resumed ${reused}`);
}
