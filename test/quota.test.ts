// The storage quota wherever a run starts, against a real Postgres and a real Redis: with the
// workspace's last measure over its quota, dispatch, Retry and fork are refused with the reason
// (the bytes used, Postgres and git, and the quota); a job pushed straight onto the Redis list or
// recorded straight into the Postgres queue is refused at the claim: dead-lettered with the reason
// and its run failed with it, never left waiting; a re-dispatch pushed onto the list leaves its run
// as it was. Under the quota again, runs start.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Redis } from 'ioredis';
import type { Sql } from 'postgres';
import { dispatchJob, retryRun } from '../operator/dispatch.ts';
import { forkRun } from '../operator/fork.ts';
import { createWorkspace, recordRun } from '../store/runs.ts';
import { recordUsage, setQuota } from '../store/storage.ts';
import { withWorkspace } from '../store/workspace.ts';
import { parseJob, type Job } from '../core/job.ts';
import { createLogger } from '../worker/log.ts';
import { createPostgresQueue } from '../worker/queue/postgres.ts';
import { createRedisQueue, redisKeys } from '../worker/queue/redis.ts';
import type { JobQueue } from '../worker/queue/types.ts';
import { executeDelivery } from '../worker/run/execute.ts';
import { startRedis, type RedisServer } from '../testbed/redis.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';

const WS = 'quota';
const KEY = 'echodo:quota-test:jobs';
const REASON = /over its storage quota: 5000 bytes used \(3800 in Postgres, 1200 in git\) of 1000 allowed/;
const log = createLogger({ level: 'silent', name: 'test' });
const doorbell = { enqueue: async () => {} } as unknown as JobQueue;

let t: TestDatabase;
let su: Sql;
let redis: RedisServer;

const job = (briefId: string, extra: Record<string, unknown> = {}) => ({
  workspaceId: WS,
  convoyId: 'convoy-q',
  briefId,
  roleId: 'coder',
  harnessAlias: 'code',
  baseRef: 'main',
  brief: 'One more.',
  model: 'replay:/tmp/none.json',
  ...extra,
});

async function runRow(id: string): Promise<{ status: string; attempt: number; failure_reason: string | null }> {
  const [row] = await su`select status, attempt, failure_reason from agent_runs where id = ${id}`;
  return row as { status: string; attempt: number; failure_reason: string | null };
}

before(async () => {
  t = await createTestDatabase();
  su = superuserSql(t.url);
  redis = await startRedis();
  await withWorkspace(t.db.app, WS, (tx) => createWorkspace(tx));
  // A failed run (for Retry) and a completed one (for fork), then a measure over the quota.
  for (const [id, status] of [
    ['run-failed', 'failed'],
    ['run-done', 'completed'],
  ]) {
    const parsed = parseJob({ ...job(`brief-${id}`), jobId: `job-${id}`, agentRunId: id });
    assert.ok(parsed.ok);
    await withWorkspace(t.db.app, WS, (tx) => recordRun(tx, parsed.job));
    await su`update agent_runs set status = ${status}, finished_at = now() where id = ${id}`;
  }
  await withWorkspace(t.db.app, WS, async (tx) => {
    await setQuota(tx, 1000);
    await recordUsage(tx, 5000, 1200);
  });
});

after(async () => {
  await su?.end();
  await redis?.stop();
  await t?.drop();
});

const refused = (err: Error & { code?: string }) => {
  assert.equal(err.code, 'action_refused');
  assert.match(err.message, REASON);
  return true;
};

test('over the quota: dispatch, Retry and fork are refused with the bytes and the quota', async () => {
  await assert.rejects(dispatchJob(t.db, doorbell, job('brief-new')), refused);
  await assert.rejects(retryRun(t.db, doorbell, { workspaceId: WS, agentRunId: 'run-failed' }), refused);
  assert.deepEqual(
    await runRow('run-failed'),
    { status: 'failed', attempt: 1, failure_reason: null },
    'the refused retry changed nothing',
  );
  const deps = { db: t.db, queue: doorbell, config: t.config, log };
  await assert.rejects(forkRun(deps, { workspaceId: WS, agentRunId: 'run-done', at: 1, by: 'cli' }), refused);
  const [{ n }] = (await su`select count(*)::int as n from agent_runs where workspace_id = ${WS}`) as unknown as [
    { n: number },
  ];
  assert.equal(n, 2, 'no run was recorded');
});

/** Takes one delivery from `queue` and runs it as the worker would. */
async function deliver(queue: JobQueue): Promise<string> {
  const delivery = await queue.take({ timeoutMs: 5000 });
  assert.ok(delivery, 'a job was waiting');
  const deps = { config: t.config, db: t.db, queue, workerId: 'w-quota', log, shutdown: new AbortController().signal };
  return executeDelivery(deps, delivery);
}

test('a job recorded straight into the Postgres queue is failed at the claim, with the reason', async () => {
  const parsed = parseJob({ ...job('brief-pg'), jobId: 'job-pg' });
  assert.ok(parsed.ok);
  const { agentRunId } = await withWorkspace(t.db.app, WS, (tx) => recordRun(tx, parsed.job));
  const queue = createPostgresQueue({ db: t.db, visibilityMs: 60_000 });
  try {
    assert.equal(await deliver(queue), 'dead_lettered');
  } finally {
    await queue.close();
  }
  const run = await runRow(agentRunId);
  assert.equal(run.status, 'failed');
  assert.match(run.failure_reason ?? '', REASON);
  const [dead] = await su`select reason from dead_letters where job_id = 'job-pg'`;
  assert.match(String(dead?.reason), REASON);
});

test('jobs RPUSHed onto Redis are dead-lettered with the reason; a re-dispatch leaves its run alone', async () => {
  const orchestrator = new Redis(redis.url, { maxRetriesPerRequest: null });
  const queue = createRedisQueue({ url: redis.url, key: KEY, workerId: 'w-quota', db: t.db, livenessTtlMs: 5000 });
  try {
    const raw: Job[] = [
      { ...job('brief-redis'), jobId: 'job-redis' } as Job,
      { ...job('brief-run-failed'), jobId: 'job-again', agentRunId: 'run-failed', resumeFromCheckpoint: true } as Job,
    ];
    await orchestrator.rpush(KEY, ...raw.map((j) => JSON.stringify(j)));
    assert.equal(await deliver(queue), 'dead_lettered');
    assert.equal(await deliver(queue), 'dead_lettered');
    const deadList = (await orchestrator.lrange(redisKeys(KEY).dead, 0, -1)).map((e) => JSON.parse(e));
    assert.equal(deadList.length, 2);
    for (const entry of deadList) assert.match(entry.reason, REASON);
    const [recorded] = await su`select id from agent_runs where job_id = 'job-redis'`;
    const run = await runRow(String(recorded!.id));
    assert.equal(run.status, 'failed', 'the new run is recorded failed, not left queued');
    assert.match(run.failure_reason ?? '', REASON);
    assert.deepEqual(await runRow('run-failed'), { status: 'failed', attempt: 1, failure_reason: null });
    assert.equal(await orchestrator.llen(KEY), 0, 'nothing left on the list');
  } finally {
    await queue.close();
    orchestrator.disconnect();
  }
});

test('under the quota again, a run starts', async () => {
  await withWorkspace(t.db.app, WS, (tx) => setQuota(tx, 1e12));
  const admitted = await dispatchJob(t.db, doorbell, job('brief-later'));
  assert.equal(admitted.outcome, 'recorded');
  assert.equal((await retryRun(t.db, doorbell, { workspaceId: WS, agentRunId: 'run-failed' })).outcome, 'redispatched');
});
