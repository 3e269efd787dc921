// Drops an emitter makes are reported to the server (POST /v1/drops) and appear in its
// completeness counts (GET /v1/counts) as `client:<reason>` for their (epoch, dc, type, subtype).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Emitter, Reader } from '../src/index.js';
import { Server, waitFor } from './helpers.js';

async function hasDropsEndpoint(server) {
  const { request } = await import('../src/net.js');
  const r = await request({ url: `${server.url}/v1/drops`, method: 'POST', body: '{"drops":[]}', headers: { 'content-type': 'application/json' }, timeout: 5000 });
  return r.status !== 404 && r.status !== 405;
}

// Reported drops are counted at once; the stored events of that second once it is flushed, so
// the row is waited for until both show (`stored`, when given).
async function countsRow(reader, epoch, type, want, stored) {
  return waitFor(async () => {
    const rows = await reader.counts({ from: epoch, to: epoch + 1 });
    const row = rows.find((r) => r.type === type);
    const dropsShown = row && Object.entries(want).every(([k, v]) => (row.dropped ?? {})[k] === v);
    return dropsShown && (stored === undefined || row.stored === stored) ? row : null;
  }, 30_000, `counts of ${type} at ${epoch} showing ${JSON.stringify(want)}${stored === undefined ? '' : ` and ${stored} stored`}`);
}

test('queue_full, too_large and retry_budget drops appear in /v1/counts as client:<reason>', { timeout: 120_000 }, async (t) => {
  const server = await (await Server.create('drops')).start();
  try {
    if (!(await hasDropsEndpoint(server))) {
      t.skip('this sluice serve has no POST /v1/drops yet (the server side of the drops contract)');
      return;
    }
    const reader = new Reader({ server: server.url });
    const epoch = Math.floor(Date.now() / 1000) - 5;

    // queue_full: 10 fit the queue, 40 do not; too_large: one event over maxEventBytes.
    const em = new Emitter({ http: server.url, maxQueue: 10, maxEventBytes: 500, flushInterval: 1000 });
    for (let i = 0; i < 50; i++) em.emit({ type: 'JSDROPS', subtype: 'q', epoch, id: i });
    em.emit({ type: 'JSDROPS', subtype: 'q', epoch, big: 'x'.repeat(1000) });
    assert.equal(await em.close({ timeout: 20_000 }), true);
    const s = em.stats();
    assert.deepEqual(s.dropped, { queue_full: 40, too_large: 1 });
    assert.equal(s.sent, 10);
    assert.equal(s.dropsReported, 41, JSON.stringify(s));
    const row = await countsRow(reader, epoch, 'JSDROPS', { 'client:queue_full': 40, 'client:too_large': 1 }, 10);
    assert.equal(row.subtype, 'q');
    assert.equal(row.stored, 10);

    // retry_budget: a second server, down while the emitter gives up on a batch; reported once it answers.
    const late = await Server.create('drops-late');
    try {
      const em2 = new Emitter({ http: late.url, retryBudget: 1000, flushInterval: 20 });
      for (let i = 0; i < 5; i++) em2.emit({ type: 'JSDROPS2', epoch, id: i });
      await waitFor(() => em2.stats().dropped.retry_budget === 5, 30_000, 'the retry budget to run out');
      assert.equal(em2.stats().dropsPending, 5);
      await late.start();
      em2.emit({ type: 'JSDROPS2', epoch, id: 5 });
      assert.equal(await em2.close({ timeout: 20_000 }), true);
      assert.equal(em2.stats().dropsReported, 5, JSON.stringify(em2.stats()));
      await countsRow(new Reader({ server: late.url }), epoch, 'JSDROPS2', { 'client:retry_budget': 5 });
    } finally {
      await late.stop();
    }

    // TCP reports through dropsUrl (the server's HTTP address).
    const em3 = new Emitter({ tcp: server.tcp, dropsUrl: server.url, maxEventBytes: 200 });
    em3.emit({ type: 'JSDROPS3', epoch, big: 'y'.repeat(400) });
    em3.emit({ type: 'JSDROPS3', epoch, id: 1 });
    assert.equal(await em3.close({ timeout: 20_000 }), true);
    assert.equal(em3.stats().dropsReported, 1);
    await countsRow(reader, epoch, 'JSDROPS3', { 'client:too_large': 1 });
  } finally {
    await server.stop();
  }
});
