// The re-dispatch matrix through one entry: the dispatch CLI, a raw job RPUSHed on
// Redis by an outside orchestrator, or dispatchJob on the Postgres queue. Real worker processes
// put runs in each state (killed mid-brief, failed by an injected ENOSPC, released by SIGTERM,
// running, completed, cancelled); the entry then names each run again, and every run must end
// served once, resumed from its last checkpoint in its own verified worktree, never re-cloned.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { createWorkspace } from '../../store/runs.ts';
import { withWorkspace } from '../../store/workspace.ts';
import { requestCancel } from '../../operator/cancel.ts';
import { dispatchJob } from '../../operator/dispatch.ts';
import { EchodoError } from '../../core/errors.ts';
import { checkRunIntegrity } from '../../operator/integrity.ts';
import { redisKeys } from '../../worker/queue/redis.ts';
import { spawnNode, waitFor, type Child } from './child.ts';
import { startRedis, type RedisServer } from '../../testbed/redis.ts';
import { createScenario, type Scenario, type TranscriptStep } from './scenario.ts';

export type Entry = 'cli' | 'redis' | 'postgres';

type Answer =
  | { kind: 'ok'; jobId: string; agentRunId: string; outcome?: string }
  | { kind: 'refused'; message: string }
  | { kind: 'pushed' };

// Leases long enough for a loaded 2-core machine, short enough to expire within the test.
const LEASE = {
  WORKER_LEASE_MS: '5000',
  WORKER_HEARTBEAT_MS: '500',
  WORKER_BLPOP_TIMEOUT_S: '1',
  STALL_QUEUED_MS: '600000',
};

const write = (file: string, content: string): TranscriptStep => ({
  toolCalls: [{ toolName: 'write_file', input: { path: file, content } }],
});
const READ: TranscriptStep = { toolCalls: [{ toolName: 'read_file', input: { path: 'README.md' } }] };
// Three rounds: a read (checkpoint 1, nothing written), then two writes.
const FAST: TranscriptStep[] = [
  READ,
  write('src/a.ts', 'export const a = 1;\n'),
  write('src/b.ts', 'export const b = 2;\n'),
  { text: 'Done.' },
];
// The model "thinks" a while before round 2: time to SIGTERM the worker or to re-dispatch a live run.
const SLOW: TranscriptStep[] = [
  READ,
  { ...write('src/a.ts', 'export const a = 1;\n'), delayMs: 4000 },
  write('src/b.ts', 'export const b = 2;\n'),
  { text: 'Done.' },
];
// Long enough to still be running when a dispatch process has started on a loaded machine.
const LIVE: TranscriptStep[] = [
  READ,
  { ...write('src/a.ts', 'export const a = 1;\n'), delayMs: 15_000 },
  { text: 'Done.' },
];

export function redispatchMatrix(entry: Entry): void {
  describe(`re-dispatch through ${entry === 'cli' ? 'the dispatch CLI' : entry === 'redis' ? 'a raw Redis RPUSH' : 'the Postgres queue'}`, () => {
    let redis: RedisServer | null = null;
    let inspect: Redis | undefined;
    let s: Scenario;
    let fast: string;
    let slow: string;
    let live: string;
    const children: Child[] = [];
    // Runs by the state they were put in, and what they looked like before the re-dispatch.
    let cancelledEpoch = -1;
    const runs: Record<
      string,
      { agentRunId: string; jobId: string; briefId: string; worktree?: string; seqs?: number }
    > = {};

    const spawn = (id: string, env: Record<string, string> = {}) => {
      const child = s.spawnWorker({ WORKER_ID: `${entry}-${id}`, ...env });
      children.push(child);
      return child;
    };
    const output = () => children.map((c) => c.output()).join('\n');

    /** The job of a recorded run as the entry's producer would name it again. */
    const jobOf = (name: string, overrides: Record<string, unknown> = {}) => {
      const r = runs[name]!;
      const job: Record<string, unknown> = {
        workspaceId: s.workspaceId,
        convoyId: 'convoy-1',
        briefId: r.briefId,
        roleId: 'coder',
        harnessAlias: 'code',
        repoPath: s.repo,
        baseRef: 'main',
        brief: 'Add a greeting module and a test for it.',
        model: `replay:${name === 'released' ? slow : name === 'live' ? live : fast}`,
        agentRunId: r.agentRunId,
      };
      // The orchestrator's own spelling, and no jobId: what its stall detector pushes.
      if (entry === 'redis') job.resume_from_checkpoint = true;
      else job.resumeFromCheckpoint = true;
      return { ...job, ...overrides };
    };

    let fileCount = 0;
    async function redispatch(job: Record<string, unknown>): Promise<Answer> {
      if (entry === 'redis') {
        await inspect!.rpush(s.config.WORKER_QUEUE_KEY, JSON.stringify(job));
        return { kind: 'pushed' };
      }
      if (entry === 'postgres') {
        try {
          return { kind: 'ok', ...(await dispatchJob(s.t.db, s.queue, job, { defaultRepoPath: s.repo })) };
        } catch (err) {
          if (err instanceof EchodoError && err.code === 'action_refused')
            return { kind: 'refused', message: err.message };
          throw err;
        }
      }
      const file = path.join(path.dirname(s.transcriptPath), `job-${++fileCount}.json`);
      await writeFile(file, JSON.stringify(job));
      const cli = spawnNode('scripts/dispatch.ts', ['--job', file], { env: s.env });
      const { code } = await cli.exited;
      if (code === 0) {
        assert.equal(cli.stdout.length, 1, `one JSON line: ${cli.output()}`);
        const printed = JSON.parse(cli.stdout[0]!);
        assert.deepEqual(
          Object.keys(printed).sort(),
          ['agentRunId', 'jobId'],
          'the same JSON line as a first dispatch',
        );
        return { kind: 'ok', ...printed };
      }
      assert.equal(code, 3, `exit 3 for a refused re-dispatch: ${cli.output()}`);
      assert.equal(cli.stderr.length, 1, `one line: ${cli.output()}`);
      assert.deepEqual(cli.stdout, []);
      return { kind: 'refused', message: cli.stderr[0]! };
    }

    async function dispatchNew(name: string, transcript: string): Promise<void> {
      const briefId = `brief-${name}`;
      const { agentRunId, jobId } = await s.dispatch({ briefId, model: `replay:${transcript}` });
      runs[name] = { agentRunId, jobId, briefId };
    }

    // Scoped to the scenario's workspace: the same run id also exists in workspace 'other'.
    const runRow = async (id: string) =>
      (await s.su`select * from agent_runs where workspace_id = ${s.workspaceId} and id = ${id}`)[0]!;
    const checkpoints = (id: string) =>
      s.su`select * from worker_checkpoints where workspace_id = ${s.workspaceId} and agent_run_id = ${id} order by checkpoint_seq`;
    const events = (id: string, type: string) =>
      s.su`select * from convoy_events where workspace_id = ${s.workspaceId} and agent_run_id = ${id} and type = ${type} order by id`;
    const waitForStatus = (id: string, status: string, timeoutMs: number) =>
      waitFor(
        async () => {
          const row = await runRow(id);
          return row?.status === status ? row : undefined;
        },
        { timeoutMs, what: `run ${id} to be ${status}` },
      );
    const worktreeCreated = async (id: string) => (await events(id, 'worktree_created')).length;

    before(async () => {
      if (entry === 'redis') redis = await startRedis();
      s = await createScenario({ steps: FAST, env: { ...LEASE, ...(redis ? { REDIS_URL: redis.url } : {}) } });
      fast = s.transcriptPath;
      slow = path.join(path.dirname(fast), 'slow.json');
      await writeFile(slow, JSON.stringify({ steps: SLOW }));
      live = path.join(path.dirname(fast), 'live.json');
      await writeFile(live, JSON.stringify({ steps: LIVE }));
      if (redis) inspect = new Redis(redis.url, { maxRetriesPerRequest: null });
      await withWorkspace(s.t.db.app, 'other', (tx) => createWorkspace(tx));
    });

    after(async () => {
      await Promise.all(children.map((c) => c.stop('SIGKILL')));
      inspect?.disconnect();
      await s?.close();
      await redis?.stop();
    });

    test(
      'set-up: a run killed mid-brief, a run failed by ENOSPC, a run released by SIGTERM',
      { timeout: 420_000 },
      async () => {
        const doomed = spawn('doomed', { ECHODO_FAULT: 'after-note@2' });
        await dispatchNew('expired', fast);
        assert.equal((await doomed.exited).signal, 'SIGKILL', `killed after checkpoint 2:\n${doomed.output()}`);

        const diskFull = spawn('disk-full', { ECHODO_FAULT_ERRNO: 'write-file:ENOSPC' });
        await dispatchNew('failed', fast);
        const failed = await waitForStatus(runs.failed!.agentRunId, 'failed', 150_000);
        assert.match(failed.failure_reason, /ENOSPC/);
        assert.equal((await diskFull.stop('SIGTERM')).code, 0);

        const releasing = spawn('releasing');
        await dispatchNew('released', slow);
        await waitFor(async () => (await checkpoints(runs.released!.agentRunId)).length >= 1, {
          timeoutMs: 150_000,
          what: 'checkpoint 1 of the slow run',
        });
        assert.equal((await releasing.stop('SIGTERM')).code, 0, releasing.output());
        const released = await runRow(runs.released!.agentRunId);
        assert.equal(released.status, 'queued', 'released to the queue');
        assert.equal(released.attempt, 1);
        // Its own doorbell is gone (a Redis that lost its data): only the orchestrator's job can bring it back.
        if (redis) await inspect!.del(s.config.WORKER_QUEUE_KEY);

        for (const name of ['expired', 'failed', 'released']) {
          const row = await runRow(runs[name]!.agentRunId);
          runs[name]!.worktree = row.worktree_path;
          runs[name]!.seqs = (await checkpoints(row.id)).length;
          assert.ok(runs[name]!.seqs! >= 1, `${name} has a checkpoint to resume from`);
        }
        // The killed worker's lease runs out (no stall detector here: only the entry re-dispatches).
        await waitFor(
          async () => {
            const [row] =
              await s.su`select lease_expires_at < now() as expired from agent_runs where id = ${runs.expired!.agentRunId}`;
            return row?.expired;
          },
          { timeoutMs: 20_000, what: 'the killed run lease to expire' },
        );
      },
    );

    test(
      'running with an expired lease, failed, released → re-dispatched: attempt + 1, a run_redispatched event (requested)',
      { timeout: 180_000 },
      async () => {
        for (const name of ['expired', 'failed', 'released']) {
          const before = await runRow(runs[name]!.agentRunId);
          const answer = await redispatch(jobOf(name));
          if (answer.kind === 'pushed') continue; // Redis: decided by the worker that takes it (checked below)
          assert.equal(answer.kind, 'ok', `${name}: ${JSON.stringify(answer)}`);
          assert.equal(answer.kind === 'ok' && answer.agentRunId, runs[name]!.agentRunId);
          assert.equal(answer.kind === 'ok' && answer.jobId, runs[name]!.jobId, 'the run keeps its jobId');
          const after = await runRow(runs[name]!.agentRunId);
          assert.equal(after.status, 'queued', name);
          assert.equal(after.attempt, before.attempt + 1, `${name}: attempt + 1`);
          assert.equal(after.lease_epoch, before.lease_epoch + 1, `${name}: the epoch bumped`);
          const [event] = await events(after.id, 'run_redispatched');
          assert.equal(event?.metadata.reason, 'requested', `${name}: run_redispatched with reason requested`);
          assert.equal(event?.metadata.attempt, after.attempt);
        }
      },
    );

    test(
      "queued → served once; a mismatch is refused naming the field; cancelled is refused; another workspace's id is unknown",
      { timeout: 180_000 },
      async () => {
        await dispatchNew('queued', fast);
        const served = await redispatch(jobOf('queued'));
        if (served.kind !== 'pushed') {
          assert.equal(served.kind, 'ok', JSON.stringify(served));
          assert.deepEqual(served.kind === 'ok' && { jobId: served.jobId, agentRunId: served.agentRunId }, {
            jobId: runs.queued!.jobId,
            agentRunId: runs.queued!.agentRunId,
          });
          const row = await runRow(runs.queued!.agentRunId);
          assert.equal(row.attempt, 1, 'nothing new');
          assert.equal(row.lease_epoch, 0);
        }

        const mismatch = await redispatch(jobOf('queued', { convoyId: 'convoy-2' }));
        if (mismatch.kind !== 'pushed') {
          assert.equal(mismatch.kind, 'refused');
          assert.match(mismatch.kind === 'refused' ? mismatch.message : '', /convoyId/, 'names the field');
        }

        await dispatchNew('cancelled', fast);
        await requestCancel(s.t.db, s.workspaceId, runs.cancelled!.agentRunId, 'test');
        cancelledEpoch = (await runRow(runs.cancelled!.agentRunId)).lease_epoch;
        const cancelled = await redispatch(jobOf('cancelled'));
        if (cancelled.kind !== 'pushed') {
          assert.equal(cancelled.kind, 'refused');
          assert.match(cancelled.kind === 'refused' ? cancelled.message : '', /cancelled/);
        }

        // The same id in another workspace: a new run there, as for any unknown id.
        const foreign = await redispatch(jobOf('queued', { workspaceId: 'other', briefId: 'brief-foreign' }));
        if (foreign.kind !== 'pushed') {
          assert.equal(foreign.kind, 'ok', JSON.stringify(foreign));
          assert.equal(foreign.kind === 'ok' && foreign.agentRunId, runs.queued!.agentRunId);
          const rows =
            await s.su`select workspace_id, status from agent_runs where id = ${runs.queued!.agentRunId} order by workspace_id`;
          assert.deepEqual(
            rows.map((r) => [r.workspace_id, r.status]),
            [
              ['acme', 'queued'],
              ['other', 'queued'],
            ],
          );
        }
      },
    );

    test(
      'all served once: each resumed from its last checkpoint in its own verified worktree, never re-cloned',
      { timeout: 300_000 },
      async () => {
        spawn('w1');
        spawn('w2');
        for (const name of ['expired', 'failed', 'released', 'queued']) {
          const r = runs[name]!;
          const run = await waitForStatus(r.agentRunId, 'completed', 180_000).catch((err: Error) => {
            throw new Error(`${name}: ${err.message}\n${output()}`);
          });
          const seqs = (await checkpoints(r.agentRunId)).map((c) => c.checkpoint_seq);
          assert.deepEqual(seqs, [1, 2, 3], `${name}: seqs 1..3, none twice`);
          assert.equal(await worktreeCreated(r.agentRunId), 1, `${name}: one worktree, never re-made or re-cloned`);
          assert.equal((await events(r.agentRunId, 'role_complete')).length, 1, `${name}: completed once`);
          assert.deepEqual(
            (await checkRunIntegrity(s.t.db, s.config, s.workspaceId, r.agentRunId))?.findings,
            [],
            `${name}: intact`,
          );
          if (name === 'queued') {
            assert.equal(run.attempt, 1);
            assert.equal(run.lease_epoch, 1, 'claimed once');
            assert.equal((await events(r.agentRunId, 'run_redispatched')).length, 0);
            continue;
          }
          assert.equal(run.attempt, 2, `${name}: one re-dispatch`);
          assert.equal(run.worktree_path, r.worktree, `${name}: the same worktree`);
          const redispatched = await events(r.agentRunId, 'run_redispatched');
          assert.deepEqual(
            redispatched.map((e) => e.metadata.reason),
            ['requested'],
            `${name}: re-dispatched once, on request`,
          );
          const resumed = await events(r.agentRunId, 'run_resumed');
          assert.ok(resumed.length >= 1, `${name}: resumed`);
          assert.equal(resumed.at(-1)!.metadata.fromSeq, r.seqs, `${name}: from its last checkpoint`);
          assert.equal(resumed.at(-1)!.metadata.recloned, false);
        }
        const cancelled = await runRow(runs.cancelled!.agentRunId);
        assert.equal(cancelled.status, 'cancelled', 'a cancelled run stays cancelled');
        assert.equal(cancelled.lease_epoch, cancelledEpoch, 'and no worker claimed it');
        assert.equal(cancelled.worker_id, null);

        if (entry === 'redis') {
          const foreign = await waitFor(
            async () => {
              const [row] =
                await s.su`select status from agent_runs where workspace_id = 'other' and id = ${runs.queued!.agentRunId}`;
              return row?.status === 'completed' ? row : undefined;
            },
            { timeoutMs: 60_000, what: "the other workspace's run of the same id" },
          );
          assert.ok(foreign, "another workspace's id is an unknown one: a new run there");
          const dead = await waitFor(
            async () => (await s.su`select reason from dead_letters where reason like '%convoyId%'`)[0],
            { what: 'the mismatch dead-lettered' },
          );
          assert.match(dead.reason, /different convoyId/);
          await waitFor(
            () => children.some((c) => c.lines.some((l) => l.includes('is cancelled: it is not re-dispatched'))),
            { what: 'the cancelled run refused' },
          );
          const keys = redisKeys(s.config.WORKER_QUEUE_KEY);
          await waitFor(async () => (await inspect!.llen(keys.main)) === 0, { what: 'every message taken' });
          for (const worker of ['w1', 'w2'])
            assert.equal(await inspect!.llen(keys.processing(`${entry}-${worker}`)), 0, 'every message acknowledged');
        }
      },
    );

    test('running with a live lease → refused as a duplicate; completed → refused', { timeout: 240_000 }, async () => {
      await dispatchNew('live', live);
      await waitFor(async () => (await checkpoints(runs.live!.agentRunId)).length >= 1, {
        timeoutMs: 150_000,
        what: 'the live run under way',
      });
      const before = await runRow(runs.live!.agentRunId);
      assert.equal(before.status, 'running');
      const answer = await redispatch(jobOf('live'));
      if (answer.kind === 'pushed') {
        // The idle worker takes it, refuses it and acknowledges it.
        await waitFor(
          () =>
            children.some((c) =>
              c.lines.some(
                (l) => l.includes(`run ${before.id} is running`) && l.includes('duplicate delivery refused'),
              ),
            ),
          { timeoutMs: 20_000, what: 'the duplicate refused' },
        );
      } else {
        assert.equal(answer.kind, 'refused');
        assert.match(answer.kind === 'refused' ? answer.message : '', /live lease.*duplicate delivery refused/);
      }
      const done = await waitForStatus(runs.live!.agentRunId, 'completed', 150_000);
      assert.equal(done.attempt, 1, 'no second attempt');
      assert.equal(done.lease_epoch, before.lease_epoch, 'no second claim');
      assert.equal(done.worker_id, before.worker_id, 'no second worker');

      const completed = await redispatch(jobOf('queued'));
      if (completed.kind === 'pushed') {
        await waitFor(
          () => children.some((c) => c.lines.some((l) => l.includes(`run ${runs.queued!.agentRunId} is completed`))),
          { timeoutMs: 20_000, what: 'the completed run refused' },
        );
        const keys = redisKeys(s.config.WORKER_QUEUE_KEY);
        await waitFor(
          async () =>
            (await inspect!.llen(keys.processing(`${entry}-w1`))) +
              (await inspect!.llen(keys.processing(`${entry}-w2`))) ===
            0,
          { what: 'acknowledged' },
        );
      } else {
        assert.equal(completed.kind, 'refused');
        assert.match(completed.kind === 'refused' ? completed.message : '', /is completed/);
      }
      const row = await runRow(runs.queued!.agentRunId);
      assert.equal(row.status, 'completed');
      assert.equal(row.attempt, 1);
    });
  });
}
