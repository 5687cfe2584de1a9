// A real redis-server per test that needs one (its own, so a test may restart it). There is no
// skip: without redis-server a Redis test fails, naming the program and how to install it
// (npm test's preflight installs it or stops first).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export interface RedisServer {
  url: string;
  port: number;
  stop(): Promise<void>;
  /** Stops and starts it again on the same port, empty (nothing is persisted). */
  restart(): Promise<void>;
}

/** Path of redis-server: ECHODO_TEST_REDIS_BIN, else found on PATH, else null. */
export function findRedisServer(): string | null {
  const fromEnv = process.env.ECHODO_TEST_REDIS_BIN;
  if (fromEnv) return fromEnv;
  const found = spawnSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' });
  return found.status === 0 && found.stdout.trim() ? found.stdout.trim() : null;
}

export async function startRedis(): Promise<RedisServer> {
  const bin = findRedisServer();
  if (!bin) throw new Error('redis-server is not installed: the Redis tests need it (apt-get install -y redis-server)');
  const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-redis-'));
  const port = await freePort();
  let child: ChildProcess | null = null;

  const start = async () => {
    const args = [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      dir,
      '--loglevel',
      'warning',
    ];
    const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    child = proc;
    let stderr = '';
    proc.stderr!.on('data', (chunk) => (stderr += chunk));
    const deadline = Date.now() + 10_000;
    while (!(await pings(port))) {
      if (proc.exitCode !== null || Date.now() > deadline) {
        proc.kill('SIGKILL');
        throw new Error(`redis-server on port ${port} did not start: ${stderr.trim()}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  };
  const stop = async () => {
    const proc = child;
    child = null;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    proc.kill('SIGKILL'); // nothing to save; a restart must look like a crash to clients
    await exited;
  };

  await start();
  const killOnExit = () => {
    child?.kill('SIGKILL');
  };
  process.on('exit', killOnExit);
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    restart: async () => {
      await stop();
      await start();
    },
    stop: async () => {
      await stop();
      process.off('exit', killOnExit);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** true when something on the port answers PING with +PONG. */
export function pings(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let reply = '';
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk.toString();
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
    socket.on('error', () => done(false));
  });
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
