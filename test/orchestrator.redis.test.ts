// The worker dropped into an existing orchestrator that speaks only Redis: 20 briefs RPUSHed in
// order onto echodo:orchestrator:jobs, two real workers taking them, three workers SIGKILLed
// mid-brief, and the orchestrator's own stall loop re-dispatching those runs by RPUSHing the
// raw job again with agentRunId and resume_from_checkpoint: true (plain ioredis, no project
// code). Every run completes once, runs are first claimed in the order pushed, and no
// checkpoint seq is written twice.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, test } from 'node:test';
import { Redis } from 'ioredis';
import { waitFor, type Child } from './support/child.ts';
import { startRedis, type RedisServer } from '../testbed/redis.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';

const LEASE_MS = 5000;
const BRIEFS = 20;
const KILLED = [4, 9, 15]; // by push position (1-based)
const QUEUE_KEY = 'echodo:orchestrator:jobs';

const round = (i: number): TranscriptStep => ({
  toolCalls: [
    { toolName: 'write_file', input: { path: `src/part-${i}.ts`, content: `export const part${i} = ${i};\n` } },
  ],
  delayMs: 300,
});
// Two rounds: a checkpoint to resume from, then one more (kept small: the suite runs on 2 cores).
const STEPS: TranscriptStep[] = [round(1), round(2), { text: 'Done.' }];

let redis: RedisServer;
let s: Scenario;
let orchestrator: Redis;
const workers: Child[] = [];

before(async () => {
  redis = await startRedis();
  s = await createScenario({
    steps: STEPS,
    env: {
      REDIS_URL: redis.url,
      WORKER_QUEUE_KEY: QUEUE_KEY,
      WORKER_LEASE_MS: String(LEASE_MS),
      WORKER_HEARTBEAT_MS: '500',
      WORKER_BLPOP_TIMEOUT_S: '1',
      STALL_QUEUED_MS: '600000',
    },
  });
  orchestrator = new Redis(redis.url, { maxRetriesPerRequest: null });
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL')));
  orchestrator?.disconnect();
  await s?.close();
  await redis?.stop();
});

test(
  '20 briefs RPUSHed, 2 workers, 3 killed and re-dispatched through the queue alone: each run completes once, in order',
  { timeout: 480_000 },
  async () => {
    const transcript = path.join(path.dirname(s.transcriptPath), 'orchestrated.json');
    await writeFile(transcript, JSON.stringify({ steps: STEPS }));
    // The orchestrator's jobs: contract-shaped JSON, its own run ids, pushed in order.
    const ids = Array.from({ length: BRIEFS }, (_, i) => `orch-${String(i + 1).padStart(2, '0')}`);
    const jobs = ids.map((agentRunId, i) => ({
      workspaceId: s.workspaceId,
      convoyId: 'convoy-orch',
      briefId: `brief-${i + 1}`,
      roleId: 'coder',
      harnessAlias: 'code',
      repoPath: s.repo,
      baseRef: 'main',
      brief: `Brief number ${i + 1}.`,
      model: `replay:${transcript}`,
      agentRunId,
    }));

    let spawned = 0;
    const spawnWorker = () => {
      const w = s.spawnWorker({ WORKER_ID: `orch-worker-${++spawned}` });
      workers.push(w);
      return w;
    };
    spawnWorker();
    spawnWorker();
    for (const job of jobs) await orchestrator.rpush(QUEUE_KEY, JSON.stringify(job));

    // The orchestrator's stall loop: after a worker died, wait out the lease, then push the job again.
    const redispatches: Promise<void>[] = [];
    for (const position of KILLED) {
      const id = ids[position - 1]!;
      const line = new RegExp(`"agentRunId":"${id}".*"checkpoint written"`);
      const victim = await waitFor(() => workers.find((w) => w.lines.some((l) => line.test(l))), {
        timeoutMs: 180_000,
        what: `a checkpoint of ${id}`,
      }).catch((err: Error) => {
        throw new Error(`${err.message}\n${workers.map((w) => w.output()).join('\n')}`);
      });
      victim.kill('SIGKILL');
      await victim.exited;
      spawnWorker(); // the supervisor replaces it
      redispatches.push(
        (async () => {
          await sleep(LEASE_MS + 1500);
          await orchestrator.rpush(QUEUE_KEY, JSON.stringify({ ...jobs[position - 1], resume_from_checkpoint: true }));
        })(),
      );
    }
    await Promise.all(redispatches);

    const output = () => workers.map((w) => w.output()).join('\n');
    const runs = await waitFor(
      async () => {
        const rows =
          await s.su`select id, status, attempt, started_at from agent_runs where workspace_id = ${s.workspaceId} order by id`;
        return rows.length === BRIEFS && rows.every((r) => r.status === 'completed') ? rows : undefined;
      },
      { timeoutMs: 300_000, intervalMs: 250, what: 'all 20 runs completed' },
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${output()}`);
    });

    const completions = await s.su`select agent_run_id, count(*)::int as n from convoy_events
                                   where workspace_id = ${s.workspaceId} and type = 'role_complete' group by agent_run_id`;
    assert.equal(completions.length, BRIEFS);
    assert.ok(
      completions.every((c) => c.n === 1),
      'every run completed exactly once',
    );

    const seqs =
      await s.su`select agent_run_id, array_agg(checkpoint_seq order by checkpoint_seq) as seqs, count(distinct checkpoint_seq)::int as distinct_seqs, count(*)::int as n
                            from worker_checkpoints where workspace_id = ${s.workspaceId} group by agent_run_id`;
    for (const row of seqs) {
      assert.equal(row.n, row.distinct_seqs, `${row.agent_run_id}: no checkpoint seq twice`);
      assert.deepEqual(row.seqs, [1, 2], `${row.agent_run_id}: seqs 1..2`);
    }
    assert.equal(seqs.length, BRIEFS);

    for (const run of runs) {
      const killed = KILLED.map((p) => ids[p - 1]).includes(run.id);
      assert.equal(run.attempt, killed ? 2 : 1, `${run.id}: ${killed ? 'one re-dispatch' : 'never re-dispatched'}`);
      const created =
        await s.su`select 1 from convoy_events where workspace_id = ${s.workspaceId} and agent_run_id = ${run.id} and type = 'worktree_created'`;
      assert.equal(created.length, 1, `${run.id}: one worktree, resumed in place`);
      if (killed) {
        const [event] =
          await s.su`select metadata from convoy_events where workspace_id = ${s.workspaceId} and agent_run_id = ${run.id} and type = 'run_redispatched'`;
        assert.equal(event?.metadata.reason, 'requested');
      }
    }

    // First claims follow the push order. Two workers take neighbours at nearly the same moment,
    // so only runs two or more places apart are compared.
    const startedAt = new Map(runs.map((r) => [r.id as string, (r.started_at as Date).getTime()]));
    for (let i = 0; i < BRIEFS; i++) {
      for (let j = i + 2; j < BRIEFS; j++) {
        assert.ok(startedAt.get(ids[i]!)! <= startedAt.get(ids[j]!)!, `${ids[i]} was first claimed before ${ids[j]}`);
      }
    }
    assert.equal(await orchestrator.llen(QUEUE_KEY), 0, 'the queue is drained');
  },
);
