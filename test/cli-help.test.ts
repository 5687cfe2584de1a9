// Every command of package.json explains itself and refuses what it does not know, before doing
// anything: --help exits 0 naming each flag the command declares, an unknown flag exits 2 with the
// usage, and neither starts a database, a worktree, a server or a benchmark. Each runs with a fresh
// ECHODO_HOME and WORKER_WORKTREE_BASE (still empty afterwards) and a DATABASE_URL on a closed port.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Sql } from 'postgres';
import { PROJECT_ROOT } from '../core/config.ts';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { spawnNode } from './support/child.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';

const TSX_LOADER = import.meta.resolve('tsx');
const POOL = 3;
const CHILD_TIMEOUT_MS = 30_000;

interface Entry {
  script: string;
  file: string;
  /** Arguments the npm script itself passes (test:load: --load). */
  args: string[];
}

/** The npm scripts that run our own entry points; the others run third-party tools (tsc, patch-package). */
function entryPoints(): Entry[] {
  const pkg = JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8'));
  const scripts = pkg.scripts as Record<string, string>;
  return Object.entries(scripts).flatMap(([script, line]) => {
    const m = /^tsx (scripts\/\S+\.ts)((?: \S+)*)$/.exec(line);
    return m ? [{ script, file: m[1]!, args: m[2]!.split(' ').filter(Boolean) }] : [];
  });
}

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  pid: number;
  /** Something of the command's process group still ran after the grace below. */
  leftBehind: boolean;
}

/** tsx's esbuild service outlives node by a moment (it exits when its stdin closes): that is not left behind. */
const GROUP_GRACE_MS = 5_000;

interface Sandbox {
  home: string;
  worktrees: string;
  env: NodeJS.ProcessEnv;
}

async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function sandbox(port: number): Promise<Sandbox> {
  const home = await mkdtemp(path.join(os.tmpdir(), 'echodo-cli-help-home-'));
  const worktrees = await mkdtemp(path.join(os.tmpdir(), 'echodo-cli-help-wt-'));
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ECHODO_HOME: home,
    WORKER_WORKTREE_BASE: worktrees,
    DATABASE_URL: `postgres://echodo:x@127.0.0.1:${port}/echodo`,
    LOG_LEVEL: 'info',
  };
  for (const name of ['DATABASE_APP_URL', 'REDIS_URL', 'ECHODO_CLI_HELP', 'ECHODO_TEST_PG_URL']) delete env[name];
  return { home, worktrees, env };
}

/** One command in its own process group, so anything it left running can be found (and is then killed). */
function run(entry: Entry, args: string[], env: NodeJS.ProcessEnv): Promise<Run> {
  const child = spawn(process.execPath, ['--import', TSX_LOADER, entry.file, ...entry.args, ...args], {
    cwd: PROJECT_ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const timer = setTimeout(() => killGroup(child.pid!), CHILD_TIMEOUT_MS);
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', async (code, signal) => {
      clearTimeout(timer);
      const leftBehind = await groupOutlives(child.pid!, GROUP_GRACE_MS);
      resolve({ code, signal, stdout, stderr, pid: child.pid!, leftBehind });
    });
  });
}

function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // gone
  }
}

function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function groupOutlives(pid: number, graceMs: number): Promise<boolean> {
  const deadline = Date.now() + graceMs;
  while (groupAlive(pid)) {
    if (Date.now() > deadline) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}

/** Processes whose environment names `dir` (a server or daemon started for the sandbox, in any group). */
function processesUsing(dir: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${name}/environ`, 'latin1').includes(`=${dir}\0`)) found.push(Number(name));
    } catch {
      // gone, or not ours to read
    }
  }
  return found;
}

async function inPool<T, R>(items: T[], size: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(size, items.length) }, worker));
  return results;
}

/** --help with ECHODO_CLI_HELP=json: the declarations the command parses with, and its help text. */
interface Declared {
  usage: string[];
  flags: Record<string, unknown>;
  text: string;
}

interface Outcome {
  entry: Entry;
  sandbox: Sandbox;
  help: Run;
  bogus: Run;
}

const show = (r: Run) => `exit ${r.code} (signal ${r.signal})\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;

describe('every command explains itself and does nothing else', () => {
  const entries = entryPoints();
  let outcomes: Map<string, Outcome>;

  before(async () => {
    const port = await closedPort();
    const all = await inPool(entries, POOL, async (entry) => {
      const box = await sandbox(port);
      const help = await run(entry, ['--help'], { ...box.env, ECHODO_CLI_HELP: 'json' });
      const bogus = await run(entry, ['--bogus-flag'], box.env);
      return { entry, sandbox: box, help, bogus };
    });
    outcomes = new Map(all.map((o) => [o.entry.script, o]));
  });

  after(async () => {
    for (const o of outcomes?.values() ?? []) {
      for (const r of [o.help, o.bogus]) killGroup(r.pid);
      await rm(o.sandbox.home, { recursive: true, force: true });
      await rm(o.sandbox.worktrees, { recursive: true, force: true });
    }
  });

  test('package.json has the commands of the contract', () => {
    const names = entries.map((e) => e.script);
    for (const name of ['test', 'worker', 'stall-detector', 'dispatch', 'integrity-check', 'mission-control', 'db']) {
      assert.ok(names.includes(name), `${name} in ${names.join(', ')}`);
    }
    for (const name of ['demo', 'bench', 'prune', 'workspace', 'fork', 'cancel', 'retry']) {
      assert.ok(names.includes(name), `${name} in ${names.join(', ')}`);
    }
  });

  for (const entry of entries) {
    describe(`npm run ${entry.script}`, () => {
      test('-- --help: exit 0, the usage and every declared flag', () => {
        const { help } = outcomes.get(entry.script)!;
        assert.equal(help.code, 0, show(help));
        const spec = JSON.parse(help.stdout) as Declared;
        assert.ok(spec.usage.length > 0, 'at least one usage line');
        assert.match(spec.text, /usage/i, spec.text);
        for (const flag of Object.keys(spec.flags)) {
          assert.ok(spec.text.includes(`--${flag}`), `--help names --${flag}\n${spec.text}`);
        }
        for (const section of ['exit codes', 'environment']) {
          assert.ok(spec.text.includes(section), `--help has "${section}"\n${spec.text}`);
        }
        const environment = spec.text.slice(spec.text.indexOf('\nenvironment:'));
        assert.doesNotMatch(environment, /^ +[A-Z][A-Z0-9_]* *$/m, 'every variable listed says what it is for');
        assert.equal(help.stderr.trim(), '', 'nothing on stderr (nothing was attempted)');
      });

      test('-- --bogus-flag: exit 2 with the usage, no stack trace', () => {
        const { bogus } = outcomes.get(entry.script)!;
        assert.equal(bogus.code, 2, show(bogus));
        assert.match(bogus.stderr, /--bogus-flag/, show(bogus));
        assert.match(bogus.stderr, /usage: npm run /, show(bogus));
        assert.doesNotMatch(bogus.stderr, /^\s+at .+:\d+:\d+\)?$/m, show(bogus));
        assert.equal(bogus.stdout, '', show(bogus));
      });

      test('nothing was started or written', () => {
        const o = outcomes.get(entry.script)!;
        assert.deepEqual(readdirSync(o.sandbox.home), [], 'ECHODO_HOME is still empty');
        assert.deepEqual(readdirSync(o.sandbox.worktrees), [], 'WORKER_WORKTREE_BASE is still empty');
        for (const r of [o.help, o.bogus]) {
          assert.equal(r.signal, null, `exited by itself\n${show(r)}`);
          assert.equal(r.leftBehind, false, `nothing left in the process group of ${r.pid}`);
          assert.equal(existsSync(path.join(PROJECT_ROOT, 'bench', 'tmp', `run-${r.pid}`)), false, 'no bench folder');
        }
        assert.deepEqual(processesUsing(o.sandbox.home), [], 'no process uses the sandbox home');
      });
    });
  }
});

describe("a user's mistake is named, with exit 2", () => {
  let box: Sandbox;
  before(async () => {
    box = await sandbox(await closedPort());
  });
  after(async () => {
    await rm(box.home, { recursive: true, force: true });
    await rm(box.worktrees, { recursive: true, force: true });
  });
  const cases: { name: string; file: string; args: string[]; says: RegExp; env?: NodeJS.ProcessEnv }[] = [
    { name: 'bench --only=bogus', file: 'scripts/bench.ts', args: ['--only=bogus'], says: /unknown benchmark "bogus"/ },
    { name: 'db with no command', file: 'scripts/db.ts', args: [], says: /usage: npm run db/ },
    { name: 'db bogus', file: 'scripts/db.ts', args: ['bogus'], says: /unknown command: bogus/ },
    { name: 'fork --at x', file: 'scripts/fork.ts', args: ['--workspace=w', '--run=r', '--at=x'], says: /--at/ },
    { name: 'cancel without --run', file: 'scripts/cancel.ts', args: ['--workspace', 'w'], says: /--run/ },
    { name: 'worker with an argument', file: 'scripts/worker.ts', args: ['now'], says: /unexpected argument/ },
    { name: 'a flag without its value', file: 'scripts/dispatch.ts', args: ['--job'], says: /--job/ },
    {
      name: 'a bad variable',
      file: 'scripts/worker.ts',
      args: [],
      env: { WORKER_LEASE_MS: 'abc' },
      says: /WORKER_LEASE_MS/,
    },
  ];
  test('plain --help prints the text of the declarations (one command stands for all: one code path)', async () => {
    const entry = { script: 'db', file: 'scripts/db.ts', args: [] };
    const [plain, json] = await Promise.all([
      run(entry, ['--help'], box.env),
      run(entry, ['--help'], { ...box.env, ECHODO_CLI_HELP: 'json' }),
    ]);
    assert.equal(plain.code, 0, show(plain));
    assert.equal(plain.stdout, (JSON.parse(json.stdout) as Declared).text);
    assert.match(plain.stdout, /^usage:$/m);
  });

  test('each refused before anything starts', async () => {
    await inPool(cases, POOL, async (c) => {
      const r = await run({ script: c.name, file: c.file, args: [] }, c.args, { ...box.env, ...c.env });
      assert.equal(r.code, 2, `${c.name}: ${show(r)}`);
      assert.match(r.stderr, c.says, `${c.name}: ${show(r)}`);
      assert.doesNotMatch(r.stderr, /^\s+at .+:\d+:\d+\)?$/m, `${c.name}: no stack trace\n${show(r)}`);
    });
    assert.deepEqual(readdirSync(box.home), []);
    assert.deepEqual(readdirSync(box.worktrees), []);
  });
});

describe('dispatch checks the model against the workspace', () => {
  let t: TestDatabase;
  let su: Sql;
  let dir: string;
  const job = (model: string) => ({
    workspaceId: 'acme',
    convoyId: 'convoy-models',
    briefId: `brief-${model}`,
    roleId: 'coder',
    harnessAlias: 'code',
    baseRef: 'main',
    brief: 'Add a greeting module.',
    model,
  });
  const runCount = async () => (await su`select count(*)::int as n from agent_runs`)[0]!.n as number;
  const dispatch = async (model: string) => {
    const file = path.join(dir, `job-${model}.json`);
    await writeFile(file, JSON.stringify(job(model)));
    const child = spawnNode('scripts/dispatch.ts', ['--job', file], { env: { ...t.env, REDIS_URL: undefined } });
    const { code } = await child.exited;
    return { code, out: child.output() };
  };

  before(async () => {
    t = await createTestDatabase();
    su = superuserSql(t.url);
    await withWorkspace(t.db.app, 'acme', (tx) => createWorkspace(tx));
    await su`insert into model_providers (workspace_id, alias, provider, base_url, model)
             values ('acme', 'fast', 'openai-compatible', 'http://127.0.0.1:9/v1', 'some-model')`;
    dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-cli-models-'));
  });
  after(async () => {
    await su?.end({ timeout: 2 });
    await t?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('an alias the workspace lacks: exit 2 naming it, nothing recorded; one it has is dispatched', async () => {
    const before = await runCount();
    const missing = await dispatch('no-such-alias');
    assert.equal(missing.code, 2, missing.out);
    assert.match(missing.out, /"no-such-alias" is not a model alias of workspace "acme"/);
    assert.doesNotMatch(missing.out, /^\s+at .+:\d+:\d+\)?$/m);
    assert.equal(await runCount(), before);

    const known = await dispatch('fast');
    assert.equal(known.code, 0, known.out);
    assert.equal(await runCount(), before + 1);
  });
});
