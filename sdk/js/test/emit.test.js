// Emit over each transport (UDP, TCP, HTTP) to a real `sluice serve` and read every event back once.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Emitter, Reader } from '../src/index.js';
import { Server, idCounts, readBack } from './helpers.js';

let server;
before(async () => {
  server = await (await Server.create('emit')).start();
});
after(async () => {
  await server?.stop();
});

for (const transport of ['udp', 'tcp', 'http']) {
  test(`emit over ${transport}: every event read back once`, async () => {
    const type = `JS${transport.toUpperCase()}`;
    const target = { udp: server.udp, tcp: server.tcp, http: server.url }[transport];
    const em = new Emitter({ [transport]: target, batchSize: 100, flushInterval: 50 });
    const n = 500;
    for (let i = 0; i < n; i++) {
      assert.equal(em.emit({ type, subtype: 'sub', id: i, path: `/p/${i % 7}`, nested: { ms: i * 3 } }), true);
    }
    assert.equal(await em.close({ timeout: 20_000 }), true);
    const s = em.stats();
    assert.equal(s.emitted, n);
    assert.equal(s.sent, n, JSON.stringify(s));
    assert.equal(s.droppedTotal, 0, JSON.stringify(s));
    const evs = await readBack(new Reader({ server: server.url }), type, n);
    const counts = idCounts(evs);
    assert.equal(counts.size, n);
    for (let i = 0; i < n; i++) assert.equal(counts.get(i), 1, `id ${i}`);
    const e = evs.find((x) => x.id === 42);
    assert.equal(e.subtype, 'sub');
    assert.equal(e.dc, 'test');
    assert.deepEqual(e.nested, { ms: 126 });
    assert.equal(typeof e.epoch, 'number');
    assert.ok(Math.abs(e.epoch - Date.now() / 1000) < 600, `epoch ${e.epoch} is whole seconds now`);
    // After close, emit refuses and counts.
    assert.equal(em.emit({ type, id: -1 }), false);
    assert.equal(em.stats().dropped.closed, 1);
  });
}

test('emit never throws and counts what it cannot send', async () => {
  const em = new Emitter({ http: server.url, maxEventBytes: 1000 });
  assert.equal(em.emit(null), false);
  assert.equal(em.emit({ id: 1 }), false); // no type
  const cyclic = { type: 'JSBAD' };
  cyclic.self = cyclic;
  assert.equal(em.emit(cyclic), false);
  assert.equal(em.emit({ type: 'JSBAD', big: 'x'.repeat(2000) }), false);
  assert.equal(em.emit({ type: 'JSBAD', n: 1n }), false);
  const s = em.stats();
  assert.equal(s.invalid, 4);
  assert.equal(s.dropped.too_large, 1);
  await em.close();
});

test('bad options are refused at construction', () => {
  assert.throws(() => new Emitter({}), /exactly one/);
  assert.throws(() => new Emitter({ http: server.url, tcp: server.tcp }), /exactly one/);
  assert.throws(() => new Emitter({ http: 'ftp://x' }), /http/);
  assert.throws(() => new Emitter({ tcp: 'nope' }), /host:port/);
  assert.throws(() => new Emitter({ udp: server.udp, token: 't' }), /udp/);
  assert.throws(() => new Emitter({ http: server.url, batchSize: 0 }), /batchSize/);
  assert.throws(() => new Emitter({ http: server.url, dc: 'a:b' }), /dc/);
});
