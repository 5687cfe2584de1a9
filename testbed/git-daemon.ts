// A real git transport for tests: `git daemon` on 127.0.0.1 serving the bare repositories under
// a base path (push enabled), which a test can stop and start again on the same port (an outage).
import { spawn, type ChildProcess } from 'node:child_process';
import { connect, createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

const GIT_DAEMON = '/usr/lib/git-core/git-daemon';

export interface GitDaemon {
  port: number;
  /** git://127.0.0.1:<port>/<name> */
  url(name: string): string;
  stop(): Promise<void>;
  start(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export async function startGitDaemon(basePath: string): Promise<GitDaemon> {
  const port = await freePort();
  let child: ChildProcess | undefined;
  const start = async () => {
    child = spawn(
      GIT_DAEMON,
      [
        `--base-path=${basePath}`,
        '--export-all',
        '--enable=receive-pack',
        '--reuseaddr',
        '--listen=127.0.0.1',
        `--port=${port}`,
        basePath,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const deadline = Date.now() + 20_000;
    while (!(await accepts(port))) {
      if (child.exitCode !== null || Date.now() > deadline)
        throw new Error(`git daemon did not start on port ${port}: ${stderr}`);
      await sleep(50);
    }
  };
  const stop = async () => {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null) return;
    const exited = new Promise((r) => c.once('exit', r));
    c.kill('SIGTERM');
    await exited;
    while (await accepts(port)) await sleep(50);
  };
  await start();
  return { port, url: (name) => `git://127.0.0.1:${port}/${name}`, stop, start };
}
