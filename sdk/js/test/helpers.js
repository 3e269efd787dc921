// Test helpers: the real `sluice` binary, `sluice serve` processes on free loopback ports with
// temporary data directories, bounded waits. No mocks.

import { execFileSync, spawn } from 'node:child_process';
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

let bin;
/** The `sluice` binary: SLUICE_BIN, else `cargo build -p sluice` (target/debug/sluice). */
export function sluiceBin() {
  if (bin) return bin;
  if (process.env.SLUICE_BIN) {
    bin = process.env.SLUICE_BIN;
  } else {
    execFileSync('cargo', ['build', '-p', 'sluice'], { cwd: ROOT, stdio: ['ignore', 'inherit', 'inherit'] });
    bin = path.join(ROOT, 'target', 'debug', 'sluice');
  }
  if (!fs.existsSync(bin)) throw new Error(`no sluice binary at ${bin}`);
  return bin;
}

/** A port free on 127.0.0.1 now (tcp or udp). */
export async function freePort(kind = 'tcp') {
  if (kind === 'udp') {
    const s = dgram.createSocket('udp4');
    await new Promise((r) => s.bind(0, '127.0.0.1', r));
    const p = s.address().port;
    s.close();
    return p;
  }
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const p = srv.address().port;
  await new Promise((r) => srv.close(r));
  return p;
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `pred` (maybe async) until it returns something truthy; throws after `timeout` ms. */
export async function waitFor(pred, timeout, what) {
  const end = Date.now() + timeout;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await sleep(100);
  }
}

/** A fresh temporary directory (removed by the caller's cleanup, or left in /tmp). */
export function tempDir(name) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `sluice-js-${name}-`));
}

/** A `sluice serve` process on loopback ports that stay the same across restarts. */
export class Server {
  static async create(name, flags = []) {
    const s = new Server();
    s.root = tempDir(name);
    s.data = path.join(s.root, 'data');
    s.flags = flags;
    s.tlsOn = flags.includes('--tls-self-signed');
    s.httpPort = await freePort();
    s.tcpPort = await freePort();
    s.udpPort = await freePort('udp');
    s.url = `${s.tlsOn ? 'https' : 'http'}://127.0.0.1:${s.httpPort}`;
    s.tcp = `127.0.0.1:${s.tcpPort}`;
    s.udp = `127.0.0.1:${s.udpPort}`;
    s.ca = path.join(s.data, 'tls', 'self-signed.pem');
    s.logPath = path.join(s.root, 'serve.log');
    return s;
  }

  /** Starts the process and waits for /healthz. */
  async start() {
    const log = fs.openSync(this.logPath, 'a');
    this.proc = spawn(
      sluiceBin(),
      ['serve', '--data', this.data, '--http', `127.0.0.1:${this.httpPort}`, '--tcp', this.tcp, '--udp', this.udp, '--dc', 'test', ...this.flags],
      { stdio: ['ignore', log, log] },
    );
    fs.closeSync(log);
    this.exited = new Promise((r) => this.proc.once('exit', (code, sig) => r({ code, sig })));
    let gone = false;
    this.exited.then(() => (gone = true));
    await waitFor(async () => {
      if (gone) throw new Error(`sluice serve exited: ${fs.readFileSync(this.logPath, 'utf8')}`);
      if (this.tlsOn && !fs.existsSync(this.ca)) return false;
      return this.healthy();
    }, 60_000, 'sluice serve to answer /healthz');
    return this;
  }

  async healthy() {
    try {
      const { request } = await import('../src/net.js');
      const ca = this.tlsOn ? fs.readFileSync(this.ca) : undefined;
      const r = await request({ url: `${this.url}/healthz`, timeout: 2000, ca });
      return r.status === 200;
    } catch {
      return false;
    }
  }

  /** SIGKILL: no flush, no goodbye. */
  async kill() {
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGKILL');
      await this.exited;
    }
  }

  /** SIGTERM: the server stores every open second first. */
  async stop() {
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGTERM');
      const t = setTimeout(() => this.proc.kill('SIGKILL'), 60_000);
      await this.exited;
      clearTimeout(t);
    }
  }

  /** `sluice token create` (the CLI finds the local secret in the data directory): the secret. */
  token(name, scope) {
    const env = { ...process.env };
    delete env.SLUICE_TOKEN;
    if (this.tlsOn) env.SLUICE_CA = this.ca;
    const out = execFileSync(sluiceBin(), ['token', 'create', '--data', this.data, '--name', name, '--scope', scope], { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    const secret = out.split('\n')[0].trim();
    if (!secret.startsWith('sluice_')) throw new Error(`token create printed ${out}`);
    return secret;
  }
}

/** Reads every event of `type` once at least `n` are there (the server stores a second after its grace). */
export async function readBack(reader, type, n, extra = {}) {
  return waitFor(async () => {
    const evs = await reader.range({ from: '-1h', type, ...extra }).toArray();
    return evs.length >= n ? evs : null;
  }, 60_000, `${n} ${type} events`);
}

/** Asserts each of `ids` is among `events` (their `id` field) exactly once; returns the duplicates. */
export function idCounts(events) {
  const m = new Map();
  for (const e of events) m.set(e.id, (m.get(e.id) ?? 0) + 1);
  return m;
}
