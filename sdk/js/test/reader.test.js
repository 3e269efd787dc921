// The Reader against a real `sluice serve`: ranges with where/select, and a tail that resumes
// from its cursor without duplicates.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Emitter, Reader, SluiceError } from '../src/index.js';
import { Server, idCounts, readBack } from './helpers.js';

let server;
let reader;
before(async () => {
  server = await (await Server.create('reader')).start();
  reader = new Reader({ server: server.url });
});
after(async () => {
  await server?.stop();
});

async function emitAll(type, events) {
  const em = new Emitter({ http: server.url, flushInterval: 20 });
  for (const e of events) em.emit({ type, ...e });
  assert.equal(await em.close({ timeout: 20_000 }), true, JSON.stringify(em.stats()));
}

test('range with where and select', async () => {
  const evs = Array.from({ length: 60 }, (_, i) => ({ id: i, status: i % 3 === 0 ? 500 : 200, t: { ms: i } }));
  await emitAll('JSWHERE', evs);
  await readBack(reader, 'JSWHERE', 60);
  const errs = await reader.range({ from: '-1h', type: 'JSWHERE', where: 'status == 500' }).toArray();
  assert.deepEqual(errs.map((e) => e.id).sort((a, b) => a - b), evs.filter((e) => e.status === 500).map((e) => e.id));
  const sel = await reader.range({ from: '-1h', type: 'JSWHERE', where: 't.ms >= 50', select: ['id', 't.ms'] }).toArray();
  assert.equal(sel.length, 10);
  for (const row of sel) {
    assert.deepEqual(Object.keys(row).sort(), ['id', 't.ms']);
    assert.equal(row['t.ms'], row.id);
  }
  // `to` before any event: nothing; Date and seconds are taken as times.
  const none = await reader.range({ from: new Date(Date.now() - 3600_000), to: Math.floor(Date.now() / 1000) - 1800, type: 'JSWHERE' }).toArray();
  assert.equal(none.length, 0);
});

test('a bad where is a SluiceError with status 400', async () => {
  await assert.rejects(reader.range({ from: '-1h', where: 'status ==' }).toArray(), (e) => e instanceof SluiceError && e.status === 400);
  assert.throws(() => reader.range({}), /from is required/);
});

async function take(tail, n) {
  const out = [];
  for await (const e of tail) {
    out.push(e);
    if (out.length >= n) break;
  }
  return out;
}

test('tail resumes from its cursor without duplicates', async () => {
  await emitAll('JSTAIL', Array.from({ length: 50 }, (_, i) => ({ id: i })));
  await readBack(reader, 'JSTAIL', 50);
  const first = reader.tail({ from: '-1h', type: 'JSTAIL', idleTimeout: 60_000 });
  const a = await take(first, 50);
  assert.deepEqual(a.map((e) => e.id), Array.from({ length: 50 }, (_, i) => i));
  const cursor = first.cursor;
  assert.equal(typeof cursor, 'string');

  await emitAll('JSTAIL', Array.from({ length: 50 }, (_, i) => ({ id: 50 + i })));
  const second = reader.tail({ cursor, type: 'JSTAIL', idleTimeout: 60_000 });
  const b = await take(second, 50);
  const counts = idCounts([...a, ...b]);
  assert.equal(counts.size, 100);
  for (const [id, n] of counts) assert.equal(n, 1, `id ${id} seen ${n} times`);
  assert.deepEqual(b.map((e) => e.id).sort((x, y) => x - y), Array.from({ length: 50 }, (_, i) => 50 + i));

  // Nothing new: a tail from the latest cursor ends at its idle timeout with no event.
  const third = reader.tail({ cursor: second.cursor, type: 'JSTAIL', idleTimeout: 1500 });
  assert.deepEqual(await take(third, 1), []);
});
