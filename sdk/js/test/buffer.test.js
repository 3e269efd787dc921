// The disk buffer: what an emitter could not deliver survives its own process being SIGKILLed,
// and the next emitter on the same directory sends it first; the buffer's cap drops and counts.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { Emitter, Reader } from '../src/index.js';
import { Server, idCounts, readBack, tempDir } from './helpers.js';

const INDEX = new URL('../src/index.js', import.meta.url).href;

test('the disk buffer survives the emitter process being killed', { timeout: 180_000 }, async () => {
  // The server's ports are chosen but it is not running yet: the first emitter cannot deliver.
  const server = await Server.create('buffer');
  const dir = path.join(tempDir('buf'), 'emitter-buffer');
  try {
    const child = spawn(process.execPath, ['--input-type=module', '-e', `
      import { Emitter } from ${JSON.stringify(INDEX)};
      const em = new Emitter({ http: ${JSON.stringify(server.url)}, bufferDir: ${JSON.stringify(dir)} });
      for (let i = 0; i < 300; i++) em.emit({ type: 'JSBUFFER', id: i });
      setTimeout(() => console.log(JSON.stringify(em.stats())), 300);
      setInterval(() => {}, 1000);
    `], { stdio: ['ignore', 'pipe', 'inherit'] });
    const line = await new Promise((resolve, reject) => {
      child.stdout.once('data', (d) => resolve(d.toString()));
      child.once('exit', (c) => reject(new Error(`emitter process exited ${c}`)));
    });
    const before = JSON.parse(line);
    assert.equal(before.emitted, 300);
    assert.equal(before.sent, 0);
    assert.ok(before.bufferedBytes > 300 * 20, JSON.stringify(before));
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    assert.ok(fs.readdirSync(dir).some((f) => f.endsWith('.ndjson')), 'segments on disk');

    await server.start();
    const em = new Emitter({ http: server.url, bufferDir: dir });
    for (let i = 300; i < 310; i++) em.emit({ type: 'JSBUFFER', id: i });
    assert.equal(await em.flush({ timeout: 60_000 }), true, JSON.stringify(em.stats()));
    assert.equal(await em.close(), true);
    const s = em.stats();
    assert.equal(s.sent, 310, JSON.stringify(s));
    assert.equal(s.bufferedBytes, 0);
    const evs = await readBack(new Reader({ server: server.url }), 'JSBUFFER', 310);
    const c = idCounts(evs);
    assert.equal(c.size, 310);
    for (const [id, n] of c) assert.equal(n, 1, `id ${id}`);
    // What was delivered is gone from the directory: a third emitter sends nothing again.
    const again = new Emitter({ http: server.url, bufferDir: dir });
    assert.equal(again.stats().bufferedBytes, 0);
    await again.close();
  } finally {
    await server.stop();
  }
});

test('a full disk buffer drops as buffer_full, counted', async () => {
  const server = await Server.create('bufcap'); // never started: nothing is delivered
  const dir = path.join(tempDir('bufcap'), 'b');
  const em = new Emitter({ http: server.url, bufferDir: dir, bufferMaxBytes: 2000 });
  for (let i = 0; i < 100; i++) em.emit({ type: 'JSBUFCAP', id: i, pad: 'x'.repeat(40) });
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setTimeout(r, 50));
  const s = em.stats();
  assert.ok(s.bufferedBytes <= 2000 && s.bufferedBytes > 1000, JSON.stringify(s));
  assert.ok(s.dropped.buffer_full > 50, JSON.stringify(s));
  assert.equal(s.emitted, 100);
  // One emitter per directory.
  assert.throws(() => new Emitter({ http: server.url, bufferDir: dir }), /in use by another emitter of this process/);
  assert.equal(await em.close({ timeout: 300 }), false);
  // Kept for the next emitter, not dropped: closing leaves the buffer on disk.
  assert.equal(em.stats().dropped.closed, undefined);
  const next = new Emitter({ http: server.url, bufferDir: dir });
  assert.equal(next.stats().bufferedBytes, s.bufferedBytes);
  assert.equal(await next.close({ timeout: 100 }), false);
});
