// The worker process's life: the dry-run banner (secrets masked), a bad setting refused at
// start-up, a clean stop on SIGTERM mid-run (the round in flight finished and checkpointed, the
// run released for another worker to resume with nothing lost), and an error inside one run
// failing that run only.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, realpath, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { withWorkspace } from '../store/workspace.ts';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { registerRepo } from './support/grants.ts';
import { startRedis, type RedisServer } from '../testbed/redis.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';

const file = (name: string) => `export const ${name} = '${name}';\n`;
const write = (name: string): TranscriptStep => ({
  toolCalls: [{ toolName: 'write_file', input: { path: `src/${name}.ts`, content: file(name) } }],
  delayMs: 300,
});
// Round 3 runs a 2 s command: SIGTERM is sent while it runs, so it is the round in flight.
const STEPS: TranscriptStep[] = [
  write('a'),
  write('b'),
  { toolCalls: [{ toolName: 'run_command', input: { command: 'sleep 2' } }], delayMs: 300 },
  write('c'),
  write('d'),
  { text: 'Done.' },
];
const ROUNDS = STEPS.length - 1;

/** Whether process `pid` has a child process called `name` (read from /proc: no tools needed). */
/** A process named `name` below `pid` (commands run inside bwrap, a few levels down). */
async function hasChildNamed(pid: number, name: string): Promise<boolean> {
  const procs: { pid: number; ppid: number; comm: string }[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    // pid (comm) state ppid ...: comm may hold spaces, so split after its closing parenthesis.
    const close = stat.lastIndexOf(')');
    if (close < 0) continue;
    procs.push({
      pid: Number(entry),
      ppid: Number(stat.slice(close + 2).split(' ')[1]),
      comm: stat.slice(stat.indexOf('(') + 1, close),
    });
  }
  const below = new Set([pid]);
  for (let grew = true; grew;) {
    grew = false;
    for (const p of procs) if (below.has(p.ppid) && !below.has(p.pid)) (below.add(p.pid), (grew = true));
  }
  return procs.some((p) => p.pid !== pid && below.has(p.pid) && p.comm === name);
}

const roundsDone = (w: Child, agentRunId: string) =>
  w.lines.filter((l) => l.includes('"tool round done"') && l.includes(agentRunId)).length;

describe('start-up', () => {
  const fakeUrls = {
    DATABASE_URL: 'postgres://u:s3cretpw@127.0.0.1:1/echodo',
    REDIS_URL: 'redis://default:r3dispw@127.0.0.1:1/0',
  };

  test('WORKER_DRY_RUN=1 prints the config with passwords masked and exits 0 without connecting', async () => {
    for (const urls of [fakeUrls, { ...fakeUrls, REDIS_URL: 'redis://:r3dispw@127.0.0.1:1' }]) {
      const w = spawnNode('scripts/worker.ts', [], {
        env: { ...urls, WORKER_DRY_RUN: '1', WORKER_ID: 'dry-worker', WORKER_LEASE_MS: '4321' },
      });
      const exit = await w.exited;
      const out = w.output();
      assert.equal(exit.code, 0, out);
      assert.match(out, /dry run/);
      assert.match(out, /"WORKER_ID": "dry-worker"/);
      assert.match(out, /"WORKER_LEASE_MS": 4321/);
      assert.match(out, /"WORKER_QUEUE_KEY": "echodo:orchestrator:jobs"/);
      assert.match(out, /postgres:\/\/u:\*\*\*@127\.0\.0\.1:1\/echodo/, 'the database URL is shown, masked');
      assert.match(out, /redis:\/\/[a-z]*:\*\*\*@127\.0\.0\.1:1/, 'the Redis URL is shown, masked');
      assert.ok(!out.includes('s3cretpw'), 'the database password is not printed');
      assert.ok(!out.includes('r3dispw'), 'the Redis password is not printed');
    }
  });

  test('a bad setting stops the worker with a message naming the variable', async () => {
    for (const [name, value] of [
      ['WORKER_LEASE_MS', 'abc'],
      ['WORKER_MAX_TOOL_STEPS', '0'],
      ['WORKER_DRY_RUN', 'maybe'],
    ] as const) {
      const w = spawnNode('scripts/worker.ts', [], {
        env: { DATABASE_URL: 'postgres://u@127.0.0.1:1/x', [name]: value },
      });
      const exit = await w.exited;
      assert.notEqual(exit.code, 0, `${name}=${value} is refused`);
      assert.match(w.stderr.join('\n'), new RegExp(`${name}: .*\\(got "${value}"\\)`), w.output());
      assert.ok(!w.output().includes('worker started'), "!w.output().includes('worker started')");
    }
  });
});

for (const backend of ['postgres', 'redis'] as const)
  describe(`runs on the ${backend} queue`, () => {
    let redis: RedisServer | null = null;
    let s: Scenario;
    const workers: Child[] = [];
    const spawn = (env: Record<string, string> = {}) => {
      const w = s.spawnWorker(env);
      workers.push(w);
      return w;
    };

    before(async () => {
      if (backend === 'redis') redis = await startRedis();
      s = await createScenario({
        steps: STEPS,
        env: { WORKER_CHECKPOINT_EVERY_N_STEPS: '2', ...(redis ? { REDIS_URL: redis.url } : {}) },
      });
      await withWorkspace(
        s.t.db.app,
        s.workspaceId,
        (tx) =>
          tx`insert into harness_providers (workspace_id, alias, needs_worktree, allowed_commands, write_prefixes)
         values (${tx.workspaceId}, 'code', true, ${['sleep 2', 'git status']}, null)`,
      );
    });

    after(async () => {
      await Promise.all(workers.map((w) => w.stop('SIGKILL', 100)));
      await s?.close();
      await redis?.stop();
    });

    test('SIGTERM mid-run: the round in flight finishes and is checkpointed, the run is released, exit 0; another worker completes it', async () => {
      const { agentRunId } = await s.dispatch();
      const first = spawn({ WORKER_ID: 'first' });
      // Wait until round 3's command runs (a `sleep` child of the worker), then ask for a stop.
      await waitFor(() => hasChildNamed(first.pid, 'sleep'), {
        timeoutMs: 20_000,
        intervalMs: 25,
        what: 'the sleep command of round 3',
      });
      first.kill('SIGTERM');
      const exit = await first.exited;
      assert.equal(exit.code, 0, first.output());
      assert.ok(
        first.lines.some((l) => l.includes('stopped on request')),
        "first.lines.some((l) => l.includes('stopped on request'))",
      );

      const released = await s.run(agentRunId);
      assert.equal(released.status, 'queued');
      assert.equal(released.attempt, 1, 'a clean stop is not a new attempt');
      assert.equal(released.worker_id, null);
      assert.equal(released.job.resumeFromCheckpoint, true);
      assert.equal(roundsDone(first, agentRunId), 3, 'the first worker did rounds 1..3');
      const atStop = await s.checkpoints(agentRunId);
      // Every 2nd round: seq 1 after round 2; round 3 (finished after SIGTERM) got seq 2 on the stop.
      assert.deepEqual(
        atStop.map((r) => [r.checkpoint_seq, r.step]),
        [
          [1, 2],
          [2, 3],
        ],
      );
      const inFlight = (
        atStop.flatMap((r) => r.tool_history) as {
          round: number;
          tool: string;
          ok: boolean;
          result?: { exitCode: number | null };
        }[]
      ).find((h) => h.round === 3);
      assert.equal(inFlight?.tool, 'run_command');
      assert.equal(inFlight?.ok, true);
      assert.equal(inFlight?.result?.exitCode, 0, 'the command ran to its end, not killed');

      const second = spawn({ WORKER_ID: 'second' });
      await s.waitForStatus(agentRunId, 'completed', 30_000).catch((err: Error) => {
        throw new Error(`${err.message}\n${second.output()}`);
      });
      await second.stop('SIGTERM', 5000);
      const done = await s.run(agentRunId);
      assert.equal(done.attempt, 1);
      assert.equal(done.worker_id, 'second');
      assert.equal(
        roundsDone(second, agentRunId),
        ROUNDS - 3,
        'the second worker did rounds 4..5 only: none redone, none lost',
      );
      const rows = await s.checkpoints(agentRunId);
      assert.deepEqual(
        rows.map((r) => r.checkpoint_seq),
        [1, 2, 3],
        'seqs contiguous',
      );
      assert.equal(rows.at(-1)!.step, ROUNDS);
      const resumed = await s.events(agentRunId, 'run_resumed');
      assert.equal(resumed.length, 1);
      assert.equal(resumed[0]!.metadata.fromSeq, 2);
      assert.equal((await s.events(agentRunId, 'worktree_created')).length, 1, 'the worktree was reused');
      for (const name of ['a', 'b', 'c', 'd']) {
        assert.equal(await git(s.repo, 'show', `${done.branch}:src/${name}.ts`), file(name).replace(/\n$/, ''));
      }
    });

    test('an error inside one run fails that run with a reason; the same worker completes the next job', async () => {
      const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-lifecycle-'));
      const notARepo = path.join(dir, 'plain-folder');
      await mkdir(notARepo);
      await registerRepo(s.su, s.workspaceId, await realpath(notARepo)); // granted, so the git check is what fails
      const quick = path.join(dir, 'quick.json');
      await writeFile(quick, JSON.stringify({ steps: [write('quick'), { text: 'ok' }] }));

      const badRepo = await s.dispatch({ repoPath: notARepo, model: `replay:${quick}` });
      const badRef = await s.dispatch({ baseRef: 'no-such-branch', model: `replay:${quick}` });
      const good = await s.dispatch({ model: `replay:${quick}` });
      const w = spawn({ WORKER_ID: 'errors' });
      const finished = await waitFor(
        async () => {
          const rows =
            await s.su`select * from agent_runs where id in ${s.su([badRepo.agentRunId, badRef.agentRunId, good.agentRunId])}`;
          return rows.every((r) => r.status === 'completed' || r.status === 'failed') ? rows : undefined;
        },
        { timeoutMs: 30_000, what: 'the three runs to finish' },
      );
      const byId = new Map(finished.map((r) => [r.id, r]));

      const cases = [
        [badRepo.agentRunId, new RegExp(`repoPath ${notARepo} is not a git repository`)],
        [badRef.agentRunId, /baseRef "no-such-branch" does not exist/],
      ] as const;
      for (const [id, reason] of cases) {
        const run = byId.get(id)!;
        assert.equal(run.status, 'failed');
        assert.match(run.failure_reason, reason);
        assert.ok(run.finished_at instanceof Date, 'run.finished_at instanceof Date');
        const [failed] = await s.events(id, 'run_failed');
        assert.match(failed?.metadata.reason, reason);
      }
      const next = byId.get(good.agentRunId)!;
      assert.equal(next.status, 'completed', next.failure_reason);
      assert.equal(next.worker_id, 'errors', 'the same worker process ran it');
      assert.equal(await git(s.repo, 'show', `${next.branch}:src/quick.ts`), file('quick').replace(/\n$/, ''));
      assert.equal(w.process.exitCode, null, 'the worker is still running');
      assert.equal((await w.stop('SIGTERM', 5000)).code, 0);
    });
  });
