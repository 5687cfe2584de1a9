// The hostile corpus: repository scripts run by `npm test` in a real worker
// run driven by the replay model, each trying one escape from the bubblewrap sandbox. For each: what
// the script got (its RESULT line in the checkpoint's tool history), that the run went on, and at the
// end that the run completed, its last checkpoint is intact (integrity-check) and no planted secret
// is in any row, note, commit message or log line. pnpm is not installed here, so only npm runs.
// Then a worker whose bwrap is unusable: run_command is refused with the reason and the run goes on.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { probeSandbox } from '../worker/sandbox/index.ts';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { startRedis, type RedisServer } from '../testbed/redis.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';

const FIXTURES = path.resolve('test/fixtures/hostile');
const TIMEOUT_MS = 10_000; // npm alone takes seconds on a loaded 2-core machine
const LIMITS = {
  WORKER_SANDBOX_PIDS: '64',
  WORKER_SANDBOX_FILE_MB: '8',
  WORKER_SANDBOX_MEMORY_MB: '1024',
  WORKER_SANDBOX_CPU_S: '30',
};
const SECRET_KEY = `sk-live-${randomBytes(20).toString('hex')}`;
// The same host as the worker's: which limiter the worker's sandbox has.
const probed = await probeSandbox({ mode: 'bwrap' });
const limiterKind = probed.mode === 'bwrap' && probed.usable ? probed.limiter.kind : 'none';

interface Entry {
  name: string;
  /** What the script may print last: its RESULT line when it got nothing. */
  expect: RegExp;
  timedOut?: boolean;
}

const CORPUS: Entry[] = [
  { name: 'proc-environ', expect: /RESULT procs=[1-9] hits=0\n?$/ },
  { name: 'echodo-home', expect: /RESULT home=absent\n?$/ },
  { name: 'other-worktree', expect: /RESULT other=absent siblings=1\n?$/ },
  { name: 'git-dir', expect: /RESULT gitdir=absent log=fail pointer=readonly\n?$/ },
  { name: 'network', expect: /RESULT pg=ECONNREFUSED redis=ECONNREFUSED outside=(ENETUNREACH|EHOSTUNREACH)\n?$/ },
  { name: 'write-outside', expect: /RESULT wrote: \/tmp\/echodo-hostile-pwned \.\.\/echodo-hostile-pwned\n?$/ },
  { name: 'setsid-daemon', expect: /RESULT daemon=started\n?$/ },
  // Within the cgroup's pids.max (64). A host with no writable cgroup has no process limit (the note
  // says so, docs/security.md); there the bomb stops at its own cap of 500 and the timeout ends it.
  {
    name: 'fork-bomb',
    expect: limiterKind === 'none' ? /RESULT spawned=500 stopped=cap\n?$/ : /RESULT spawned=\d{1,2} stopped=EAGAIN\n?$/,
  },
  { name: 'big-file', expect: /RESULT size=8388608\n?$/ },
  { name: 'print-100mb', expect: /x{100,}\nRESULT printed\n?$/ },
  { name: 'sleep', expect: /^(?![\s\S]*RESULT woke)/, timedOut: true },
];

let s: Scenario;
let redis: RedisServer | null;
let redisStandIn: net.Server | null = null;
let outside: string;
let worktrees: string;
let worker: Child;
const secrets: string[] = [SECRET_KEY];

/** Copies the corpus into the repo with the paths and ports of this scenario, committed on main. */
async function plantCorpus(redisPort: number): Promise<void> {
  const values: Record<string, string> = {
    '@ECHODO_HOME@': s.env.ECHODO_HOME!,
    '@WORKTREES@': worktrees,
    '@COMMON_DIR@': await realpath(path.join(s.repo, '.git')),
    '@PG_PORT@': new URL(s.env.DATABASE_URL!).port || '5432',
    '@REDIS_PORT@': String(redisPort),
    '@OUTSIDE@': outside,
  };
  await mkdir(path.join(s.repo, 'hostile'));
  for (const file of await readdir(FIXTURES)) {
    let text = await readFile(path.join(FIXTURES, file), 'utf8');
    for (const [key, value] of Object.entries(values)) text = text.replaceAll(key, value);
    await writeFile(path.join(s.repo, 'hostile', file), text);
  }
  await writeFile(
    path.join(s.repo, 'package.json'),
    JSON.stringify({ name: 'hostile', version: '1.0.0', scripts: { test: 'sh hostile/run.sh' } }, null, 2),
  );
  await git(s.repo, 'add', '-A');
  await git(s.repo, 'commit', '-q', '-m', 'hostile corpus');
}

async function waitForEnd(agentRunId: string): Promise<Record<string, any>> {
  return waitFor(
    async () => {
      const row = await s.run(agentRunId);
      return row.status === 'completed' || row.status === 'failed' ? row : undefined;
    },
    { timeoutMs: 180_000, what: `run ${agentRunId} to finish` },
  ).catch((err: Error) => {
    throw new Error(`${err.message}\nworker output:\n${worker?.output().slice(-6000) ?? ''}`);
  });
}

/** Every recorded tool call of the run: checkpoints hold their own rounds (deltas), so all are read. */
async function history(agentRunId: string): Promise<any[]> {
  const rows = await s.checkpoints(agentRunId);
  const byRound = new Map<number, any>();
  for (const row of rows) for (const record of row.tool_history as any[]) byRound.set(record.round, record);
  return [...byRound.values()].sort((a, b) => a.round - b.round);
}

before(async () => {
  redis = await startRedis();
  if (!redis) {
    // No redis-server here: a loopback listener stands in for its port.
    redisStandIn = net.createServer((c) => c.end()).listen(0, '127.0.0.1');
    await new Promise((r) => redisStandIn!.once('listening', r));
  }
  const steps: TranscriptStep[] = [
    ...CORPUS.map((e) => ({ toolCalls: [{ toolName: 'run_command', input: { command: `npm test -- ${e.name}` } }] })),
    { toolCalls: [{ toolName: 'run_command', input: { command: 'git status --short' } }] },
    { text: 'Done.' },
  ];
  s = await createScenario({
    steps,
    env: {
      ...(redis ? { REDIS_URL: redis.url } : {}),
      OPENAI_API_KEY: SECRET_KEY,
      WORKER_COMMAND_TIMEOUT_MS: String(TIMEOUT_MS),
      WORKER_MAX_TOOL_STEPS: '20',
      // Nothing here is about stalls: a lease long enough that a loaded machine does not lose it.
      WORKER_LEASE_MS: '30000',
      WORKER_HEARTBEAT_MS: '1000',
      ...LIMITS,
    },
  });
  outside = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-hostile-outside-')));
  worktrees = s.env.WORKER_WORKTREE_BASE!;
  await mkdir(path.join(worktrees, 'other-run'), { recursive: true, mode: 0o700 });
  await writeFile(path.join(worktrees, 'other-run', 'secret.txt'), "another run's work\n");
  await rm('/tmp/echodo-hostile-pwned', { force: true });
  const redisPort = redis?.port ?? (redisStandIn!.address() as net.AddressInfo).port;
  await plantCorpus(redisPort);
  const dbPassword = decodeURIComponent(new URL(s.env.DATABASE_URL!).password);
  if (dbPassword) secrets.push(dbPassword);
  const appRole = JSON.parse(await readFile(path.join(s.env.ECHODO_HOME!, 'app-role.json'), 'utf8')) as {
    password?: string;
  };
  if (appRole.password) secrets.push(appRole.password);
  worker = s.spawnWorker({ WORKER_ID: 'hostile-worker' });
  await worker.waitForLine(/"worker started"/);
});

after(async () => {
  await worker?.stop('SIGTERM', 5000);
  await s?.close();
  await redis?.stop();
  redisStandIn?.close();
  await rm(outside, { recursive: true, force: true });
});

describe('hostile repository scripts under npm test', () => {
  let agentRunId: string;
  let records: any[];
  let run: Record<string, any>;

  before(async () => {
    ({ agentRunId } = await s.dispatch({ briefId: 'brief-hostile' }));
    run = await waitForEnd(agentRunId);
    records = await history(agentRunId);
  });

  test('the run went on through every script and completed', () => {
    assert.equal(run.status, 'completed', `run failed: ${run.failure_reason}\n${worker.output()}`);
    assert.equal(records.length, CORPUS.length + 1, 'one recorded round per command');
    assert.ok(
      worker.lines.some((l) => l.includes('"sandbox ready"')),
      'the worker logged its sandbox at start-up',
    );
  });

  for (const [i, entry] of CORPUS.entries()) {
    test(`${entry.name}: the script got nothing`, () => {
      const record = records[i];
      assert.equal(record.input.command, `npm test -- ${entry.name}`);
      assert.equal(record.ok, true, `the command ran: ${record.error}`);
      assert.match(record.result.tail, entry.expect, `tail of ${entry.name}: ${record.result.tail}`);
      assert.equal(record.result.timedOut ?? false, entry.timedOut ?? false, `${entry.name} timed out?`);
    });
  }

  test('nothing was written outside the worktree, and the setsid daemon never wrote', async () => {
    await new Promise((r) => setTimeout(r, 2500)); // the daemon's sleep is 2 s
    for (const target of [
      '/tmp/echodo-hostile-pwned',
      '/usr/echodo-hostile-pwned',
      path.join(worktrees, 'echodo-hostile-pwned'),
      path.join(outside, 'pwned'),
    ]) {
      assert.equal(existsSync(target), false, `${target} was not written on the host`);
    }
    assert.equal(existsSync(path.join(run.worktree_path, 'late.txt')), false, 'no late.txt in the worktree');
    assert.equal(existsSync(path.join(run.worktree_path, 'big.bin')), false);
    assert.match(
      await readFile(path.join(run.worktree_path, '.git'), 'utf8'),
      /^gitdir: /,
      'the .git pointer is unchanged',
    );
    await assert.rejects(git(s.repo, 'cat-file', '-e', `${run.branch}:late.txt`), 'late.txt is on no checkpoint');
  });

  test('every round was checkpointed and the last checkpoint is intact', async () => {
    const rows = await s.checkpoints(agentRunId);
    assert.equal(rows.at(-1)!.step, CORPUS.length + 1);
    const check = spawnNode('scripts/integrity-check.ts', ['--workspace', s.workspaceId, '--run', agentRunId], {
      env: s.env,
    });
    const exit = await check.exited;
    assert.equal(exit.code, 0, `integrity-check: ${check.output()}`);
  });

  test('no planted secret is in any row, note, commit message or log line', async () => {
    const rows = JSON.stringify([
      await s.su`select * from agent_runs where id = ${agentRunId}`,
      await s.su`select * from worker_checkpoints where agent_run_id = ${agentRunId}`,
      await s.su`select * from convoy_events where agent_run_id = ${agentRunId}`,
    ]);
    const notesRef = s.config.WORKER_NOTES_REF;
    const notes = await git(s.repo, 'log', '-p', notesRef).catch(() => '');
    assert.ok(notes.length > 0, 'the notes mirror exists');
    const messages = await git(s.repo, 'log', '--all', '--format=%B');
    const places = { rows, notes, messages, log: worker.output() };
    for (const secret of secrets) {
      for (const [where, text] of Object.entries(places))
        assert.ok(!text.includes(secret), `a planted secret is in the ${where}`);
    }
  });
});

describe('WORKER_SANDBOX=bwrap with bwrap unusable', () => {
  test('run_command is refused with the reason; the run goes on and completes', async () => {
    await worker.stop('SIGTERM', 10_000);
    const transcript = path.join(path.dirname(s.transcriptPath), 'fail-closed.json');
    const steps: TranscriptStep[] = [
      { toolCalls: [{ toolName: 'run_command', input: { command: 'npm test -- proc-environ' } }] },
      { toolCalls: [{ toolName: 'write_file', input: { path: 'after.txt', content: 'the run went on\n' } }] },
      { text: 'Done.' },
    ];
    await writeFile(transcript, JSON.stringify({ steps }));
    worker = s.spawnWorker({ WORKER_ID: 'no-bwrap-worker', WORKER_SANDBOX_BWRAP: '/nonexistent/bwrap' });
    await worker.waitForLine(/"worker started"/);
    assert.ok(
      worker.lines.some((l) => /sandbox unusable.*bubblewrap was not found/.test(l)),
      `start-up log says so:\n${worker.output()}`,
    );
    const { agentRunId } = await s.dispatch({ briefId: 'brief-no-bwrap', model: `replay:${transcript}` });
    const run = await waitForEnd(agentRunId);
    assert.equal(run.status, 'completed', `run failed: ${run.failure_reason}`);
    const [refused, written] = await history(agentRunId);
    assert.equal(refused.ok, false);
    assert.match(refused.error, /run_command is refused: bubblewrap was not found \(\/nonexistent\/bwrap\)/);
    assert.equal(written.ok, true);
    assert.equal(await git(s.repo, 'show', `${run.branch}:after.txt`), 'the run went on');
  });

  test('the dry-run banner says so, and WORKER_SANDBOX=off is announced', async () => {
    for (const [env, pattern] of [
      [
        { WORKER_SANDBOX_BWRAP: '/nonexistent/bwrap' },
        /sandbox: sandbox unusable, run_command is refused: bubblewrap was not found/,
      ],
      [{ WORKER_SANDBOX: 'off' }, /sandbox: WORKER_SANDBOX=off: commands run unconfined/],
    ] as const) {
      const dry = spawnNode('scripts/worker.ts', [], { env: { ...s.env, ...env, WORKER_DRY_RUN: '1' } });
      const exit = await dry.exited;
      assert.equal(exit.code, 0, dry.output());
      assert.match(dry.output(), pattern);
    }
  });
});
