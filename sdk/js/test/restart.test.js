// The restart test: steady emitters (~200 events/s over HTTP and TCP together) while the server
// is SIGKILLed and restarted ~20 s later on the same data directory and ports. Afterwards every
// event is found exactly once, and a tail that ran through it saw its type's events once.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Emitter, Reader } from '../src/index.js';
import { Server, idCounts, sleep, waitFor } from './helpers.js';

test('SIGKILL and a 20 s outage under steady emitters: every event stored once', { timeout: 300_000 }, async () => {
  const server = await (await Server.create('restart')).start();
  try {
    const reader = new Reader({ server: server.url });
    const http = new Emitter({ http: server.url, batchSize: 50, flushInterval: 100 });
    const tcp = new Emitter({ tcp: server.tcp, batchSize: 50, flushInterval: 100 });

    // A tail of the HTTP emitter's type runs through the outage, reconnecting from its cursor.
    const tail = reader.tail({ from: '-1m', type: 'JSRESTARTH', idleTimeout: 120_000 });
    const tailed = [];
    let expectTail = Infinity;
    const tailDone = (async () => {
      for await (const e of tail) {
        tailed.push(e);
        if (tailed.length >= expectTail) break;
      }
    })();

    let n = 0;
    const ticker = setInterval(() => {
      // 10 ms ticks: ~100 events/s per emitter.
      http.emit({ type: 'JSRESTARTH', id: n });
      tcp.emit({ type: 'JSRESTARTT', id: n });
      n += 1;
    }, 10);
    await sleep(5000);
    await server.kill();
    const killedAt = n;
    await sleep(20_000);
    await server.start();
    await sleep(5000);
    clearInterval(ticker);
    const total = n;
    assert.ok(total > killedAt + 1000, `events were emitted during the outage (${killedAt} → ${total})`);

    for (const em of [http, tcp]) {
      assert.equal(await em.close({ timeout: 60_000 }), true, JSON.stringify(em.stats()));
      const s = em.stats();
      assert.equal(s.emitted, total);
      assert.equal(s.droppedTotal, 0, JSON.stringify(s));
      assert.ok(s.retries > 0, `the outage was retried: ${JSON.stringify(s)}`);
    }

    for (const [type, em] of [['JSRESTARTH', http], ['JSRESTARTT', tcp]]) {
      const evs = await waitFor(async () => {
        const got = await reader.range({ from: '-10m', type }).toArray();
        return idCounts(got).size >= total ? got : null;
      }, 60_000, `${total} ${type} events`);
      const counts = idCounts(evs);
      const missing = [];
      const dups = [];
      for (let i = 0; i < total; i++) {
        const c = counts.get(i) ?? 0;
        if (c === 0) missing.push(i);
        if (c > 1) dups.push(i);
      }
      assert.deepEqual(missing, [], `${type}: events lost`);
      // Delivery is at least once: only a batch whose request was written whole and whose
      // acknowledgement was lost in the kill may be resent; with none such, none is stored twice.
      const resent = em.stats().resent;
      assert.ok(dups.length <= resent, `${type}: ${dups.length} duplicates, ${resent} events resent after an unknown outcome`);
      if (resent === 0) assert.deepEqual(dups, [], `${type}: duplicates`);
      console.log(`${type}: ${total} events, ${dups.length} duplicates, ${em.stats().retries} retries, ${resent} resent`);
    }

    expectTail = total;
    if (tailed.length < total) await Promise.race([tailDone, sleep(60_000)]);
    tail.close();
    const tc = idCounts(tailed);
    assert.equal(tc.size, total, `the tail saw every event (${tc.size} of ${total}, ${tail.reconnects} reconnects)`);
    assert.ok(tail.reconnects >= 1, 'the tail reconnected');
    const resentH = http.stats().resent;
    const tailDups = [...tc.values()].filter((c) => c > 1).length;
    assert.ok(tailDups <= resentH, `the tail repeated ${tailDups} events`);
  } finally {
    await server.stop();
  }
});
