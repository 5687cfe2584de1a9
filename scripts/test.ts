// npm test: the test suite (the description below is its --help).
// A preflight first (scripts/test-preflight.ts): redis-server, Chromium and bwrap must be there,
// installed with apt-get where it may (root, Debian-like), else it stops naming what is missing.
// Then it starts what the suite needs (one embedded PostgreSQL with a migrated template database,
// one redis-server), runs node's test runner on test/**/*.test.ts (or the files given), stops
// everything it started, and exits with the runner's code. No test is skipped for a missing service.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PROJECT_ROOT } from '../core/config.ts';
import { errorMessage } from '../core/errors.ts';
import { ensureEmbeddedPostgres, stopEmbeddedPostgres } from '../store/embedded.ts';
import { cleanUpWhenGone, ensureTemplate, withDatabase } from '../testbed/db.ts';
import { freePort, pings } from '../testbed/redis.ts';
import { ensureTestPrerequisites, PreflightError } from './test-preflight.ts';
import { command } from './cli.ts';

const { values, positionals: fileArgs } = command({
  name: 'test',
  summary:
    'the test suite: a preflight (redis-server, Chromium and bwrap must be there, installed with apt-get where ' +
    "it may), then one embedded PostgreSQL with a migrated template database and one redis-server, then node's " +
    'test runner on test/**/*.test.ts (or the files given); everything it started is stopped at the end.',
  usage: ['[-- [--load] [FILE…]]'],
  flags: { load: { type: 'boolean', help: 'the load tests at full size (npm run test:load)' } },
  positionals: { min: 0, max: Infinity, help: ['FILE…  test files to run (default: every test/**/*.test.ts)'] },
  exitCodes: {
    0: 'every test passed',
    1: 'a test failed, or a prerequisite is missing (named)',
    2: 'bad arguments, or no such test file',
    130: 'stopped by a signal, after stopping what it started',
  },
  env: [
    ['DATABASE_URL', "ignored: the tests start their own PostgreSQL and never touch the caller's"],
    ['REDIS_URL', 'ignored, likewise'],
  ],
});

const say = (line: string) => process.stderr.write(`test: ${line}\n`);

function findTestFiles(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory() && entry.name !== 'node_modules') found.push(...findTestFiles(full));
    else if (entry.isFile() && entry.name.endsWith('.test.ts')) found.push(full);
  }
  return found.sort();
}

interface Started {
  home?: string;
  pg?: boolean;
  redisPidFile?: string;
}

async function startRedisDaemon(bin: string, home: string): Promise<{ url: string; pidFile: string }> {
  const port = await freePort();
  const pidFile = path.join(home, 'redis.pid');
  const result = spawnSync(
    bin,
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--daemonize',
      'yes',
      '--pidfile',
      pidFile,
      '--dir',
      home,
      '--logfile',
      path.join(home, 'redis.log'),
    ],
    { encoding: 'utf8' },
  );
  if (result.status !== 0) throw new Error(`redis-server failed to start: ${result.stderr || result.stdout}`);
  const deadline = Date.now() + 10_000;
  while (!(await pings(port))) {
    if (Date.now() > deadline) throw new Error(`redis-server did not answer on port ${port}; see ${home}/redis.log`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { url: `redis://127.0.0.1:${port}`, pidFile };
}

async function stopAll(started: Started): Promise<void> {
  if (started.redisPidFile) {
    try {
      const pid = Number(readFileSync(started.redisPidFile, 'utf8').trim());
      if (pid > 0) process.kill(pid, 'SIGTERM');
    } catch {
      // already gone
    }
  }
  if (started.pg && started.home) {
    await stopEmbeddedPostgres(started.home).catch((err: unknown) => say(`stopping PostgreSQL: ${errorMessage(err)}`));
  }
  if (started.home) await rm(started.home, { recursive: true, force: true });
}

async function main(load: boolean): Promise<number> {
  const files = fileArgs.length ? fileArgs.map((f) => path.resolve(f)) : findTestFiles(path.join(PROJECT_ROOT, 'test'));
  const missing = files.filter((f) => !existsSync(f));
  if (missing.length) {
    say(`no such test file: ${missing.join(', ')}`);
    return 2;
  }
  if (!files.length) {
    say('no test files found under test/');
    return 1;
  }

  const started: Started = {};
  let stopping: Promise<void> | undefined;
  const stopOnce = () => (stopping ??= stopAll(started));
  let runner: ReturnType<typeof spawn> | undefined;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      if (stopping) return; // a Ctrl-C reaches us twice: from the terminal and relayed by tsx
      say(`${signal}: stopping`);
      runner?.kill(signal);
      void stopOnce().finally(() => process.exit(130));
    });
  }

  // Before anything is started: every service the suite uses is there, or nothing runs.
  let programs: Record<string, string>;
  try {
    programs = ensureTestPrerequisites({ say });
  } catch (err) {
    if (!(err instanceof PreflightError)) throw err;
    say(err.message);
    return 1;
  }
  const redisBin = programs['redis-server']!;

  try {
    started.home = await mkdtemp(path.join(os.tmpdir(), 'echodo-test-run-'));
    cleanUpWhenGone(started.home);
    process.env.ECHODO_PG_FAST = '1';
    started.pg = true;
    const server = await ensureEmbeddedPostgres(started.home);
    const pgUrl = withDatabase(server.url, 'postgres');
    await ensureTemplate(pgUrl);
    say(`PostgreSQL on 127.0.0.1:${server.port} (pid ${server.pid}), template database ready`);

    const env: NodeJS.ProcessEnv = {
      ...process.env,
      ECHODO_HOME: started.home,
      ECHODO_TEST_PG_URL: pgUrl,
      ECHODO_TEST_OUTPUT: path.join(PROJECT_ROOT, 'test-output'),
    };
    // Tests build their own connections; the caller's databases are never touched.
    delete env.DATABASE_URL;
    delete env.REDIS_URL;
    if (load) env.ECHODO_LOAD_FULL = '1';
    await mkdir(env.ECHODO_TEST_OUTPUT!, { recursive: true });

    env.ECHODO_CHROMIUM = programs.chromium;
    const redis = await startRedisDaemon(redisBin, started.home);
    started.redisPidFile = redis.pidFile;
    env.ECHODO_TEST_REDIS_URL = redis.url;
    env.ECHODO_TEST_REDIS_BIN = redisBin;
    say(`Redis on ${redis.url}`);

    const args = [
      '--import',
      'tsx',
      '--test',
      '--test-concurrency=2',
      ...(load ? [] : ['--test-timeout=900000']),
      ...files,
    ];
    runner = spawn(process.execPath, args, { cwd: PROJECT_ROOT, env, stdio: 'inherit' });
    const code = await new Promise<number>((resolve) => {
      runner!.on('error', (err) => {
        say(`could not start the test runner: ${err.message}`);
        resolve(1);
      });
      runner!.on('close', (exitCode) => resolve(exitCode ?? 1));
    });
    return code;
  } finally {
    await stopOnce();
  }
}

main(values.load ?? false).then(
  (code) => process.exit(code),
  (err: unknown) => {
    say(`failed: ${errorMessage(err)}`);
    process.exit(1);
  },
);
