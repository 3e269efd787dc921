// Tokens and TLS against a real `sluice serve --auth --tls-self-signed`: a token is required,
// the self-signed certificate is trusted through `ca`.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Emitter, Reader, SluiceError } from '../src/index.js';
import { Server, idCounts, readBack } from './helpers.js';

let server;
let token;
before(async () => {
  server = await (await Server.create('auth', ['--auth', '--tls-self-signed'])).start();
  token = server.token('js', 'ingest,read');
});
after(async () => {
  await server?.stop();
});

test('without a token nothing is sent or read', async () => {
  for (const opts of [{ http: server.url }, { tcp: server.tcp, tls: true }]) {
    const em = new Emitter({ ...opts, token: '', ca: server.ca });
    for (let i = 0; i < 10; i++) em.emit({ type: 'JSNOAUTH', id: i });
    await em.close({ timeout: 10_000 });
    const s = em.stats();
    assert.equal(s.sent, 0, JSON.stringify(s));
    assert.equal(s.unauthorized, 10, JSON.stringify(s));
    assert.equal(s.retries, 0, 'a refused token is not retried');
  }
  const wrong = new Emitter({ http: server.url, token: 'sluice_00000000_wrong', ca: server.ca });
  wrong.emit({ type: 'JSNOAUTH', id: 99 });
  await wrong.close({ timeout: 10_000 });
  assert.equal(wrong.stats().unauthorized, 1);

  const reader = new Reader({ server: server.url, token: '', ca: server.ca });
  await assert.rejects(reader.range({ from: '-1h' }).toArray(), (e) => e instanceof SluiceError && e.status === 401);
  await assert.rejects(
    (async () => {
      for await (const _ of reader.tail({ from: '-1h' })) break;
    })(),
    (e) => e instanceof SluiceError && e.status === 401,
  );
});

test('with a token, over TLS: HTTPS and TCP+TLS deliver, HTTPS reads', async () => {
  for (const [type, opts] of [['JSHTTPS', { http: server.url }], ['JSTLS', { tcp: `tls://${server.tcp}` }]]) {
    const em = new Emitter({ ...opts, token, ca: server.ca });
    for (let i = 0; i < 100; i++) em.emit({ type, id: i });
    assert.equal(await em.close({ timeout: 20_000 }), true, JSON.stringify(em.stats()));
    assert.equal(em.stats().sent, 100);
  }
  const reader = new Reader({ server: server.url, token, ca: server.ca });
  for (const type of ['JSHTTPS', 'JSTLS']) {
    const evs = await readBack(reader, type, 100);
    const c = idCounts(evs);
    assert.equal(c.size, 100);
    for (const n of c.values()) assert.equal(n, 1);
  }
  // Without the CA, the self-signed certificate is not trusted: a clear error, not events.
  const untrusting = new Reader({ server: server.url, token });
  await assert.rejects(untrusting.range({ from: '-1h' }).toArray(), /certificate/);
});
