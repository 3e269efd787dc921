// Epochs as people write them: the SDK sends the value the user gave (ms, float seconds,
// RFC 3339), and the server stores the event under its whole second; the default is whole
// seconds now.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';

import { Emitter, Reader, epochSecond } from '../src/index.js';
import { Server, readBack } from './helpers.js';

let server;
before(async () => {
  server = await (await Server.create('epoch')).start();
});
after(async () => {
  await server?.stop();
});

test('the SDK sends epoch as given; the default is whole seconds', async () => {
  // The bytes on the wire, read by a plain TCP listener on loopback that acknowledges as the
  // collector does (`ok <n> 0`).
  const lines = [];
  const srv = net.createServer((sock) => {
    let buf = '';
    sock.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        lines.push(line);
        sock.write(`ok ${JSON.parse(line).length} 0\n`);
      }
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const ms = Date.now();
  const iso = new Date(ms).toISOString();
  const em = new Emitter({ tcp: `127.0.0.1:${srv.address().port}` });
  em.emit({ type: 'E', epoch: ms });
  em.emit({ type: 'E', epoch: ms / 1000 });
  em.emit({ type: 'E', epoch: iso });
  em.emit({ type: 'E' });
  assert.equal(await em.close({ timeout: 10_000 }), true);
  srv.close();
  const sent = lines.flatMap((l) => JSON.parse(l));
  assert.deepEqual(sent.slice(0, 3).map((e) => e.epoch), [ms, ms / 1000, iso]);
  assert.ok(Number.isInteger(sent[3].epoch) && Math.abs(sent[3].epoch - ms / 1000) < 60, `default epoch ${sent[3].epoch}`);
  assert.equal(epochSecond(ms), Math.floor(ms / 1000));
  assert.equal(epochSecond(ms / 1000), Math.floor(ms / 1000));
  assert.equal(epochSecond(iso), Math.floor(ms / 1000));
  assert.equal(epochSecond('yesterday'), undefined);
});

test('Date.now() ms, float and RFC 3339 epochs are stored under their second', async () => {
  const ms = Date.now() - 3000;
  const second = Math.floor(ms / 1000);
  for (const transport of ['http', 'tcp']) {
    const em = new Emitter({ [transport]: transport === 'http' ? server.url : server.tcp });
    em.emit({ type: 'JSEPOCH', how: `${transport}-ms`, epoch: ms });
    em.emit({ type: 'JSEPOCH', how: `${transport}-float`, epoch: ms / 1000 });
    em.emit({ type: 'JSEPOCH', how: `${transport}-rfc3339`, epoch: new Date(ms).toISOString() });
    assert.equal(await em.close({ timeout: 10_000 }), true, JSON.stringify(em.stats()));
    assert.equal(em.stats().sent, 3, `the server accepted every form over ${transport}: ${JSON.stringify(em.stats())}`);
  }
  const evs = await readBack(new Reader({ server: server.url }), 'JSEPOCH', 6);
  for (const e of evs) assert.equal(e.epoch, second, `${e.how}: stored under ${e.epoch}, expected ${second}`);
  // A range of that one second finds them all.
  const one = await new Reader({ server: server.url }).range({ from: second, to: second + 1, type: 'JSEPOCH' }).toArray();
  assert.equal(one.length, 6);
});
