// Every queue message ends served, dead-lettered with a reason, or handed back for a transient
// retry: poison jobs (a NUL, a lone surrogate) are refused at parse time, and a job Postgres
// will not record (a constraint, here a trigger raising) is dead-lettered instead of being
// redelivered forever. A real worker on Redis; the same worker serves the next good job.
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, test } from 'node:test';
import { Redis } from 'ioredis';
import { redisKeys } from '../worker/queue/redis.ts';
import { waitFor, type Child } from './support/child.ts';
import { startRedis, type RedisServer } from '../testbed/redis.ts';
import { createScenario, type Scenario } from './support/scenario.ts';

let redis: RedisServer;
let s: Scenario;
let inspect: Redis;
let worker: Child;

before(async () => {
  redis = await startRedis();
  s = await createScenario({
    steps: [{ toolCalls: [{ toolName: 'read_file', input: { path: 'README.md' } }] }, { text: 'Read it.' }],
    env: { REDIS_URL: redis.url, WORKER_LEASE_MS: '5000', WORKER_HEARTBEAT_MS: '500', WORKER_BLPOP_TIMEOUT_S: '1' },
  });
  inspect = new Redis(redis.url, { maxRetriesPerRequest: null });
  // Postgres refuses to record one brief: a non-transient error at record time.
  await s.su.unsafe(`
    create function refuse_poison_brief() returns trigger language plpgsql as $$
    begin
      if new.brief_id = 'brief-poison' then raise exception 'brief-poison may not be recorded'; end if;
      return new;
    end $$;
    create trigger refuse_poison_brief before insert on agent_runs for each row execute function refuse_poison_brief();`);
  worker = s.spawnWorker({ WORKER_ID: 'poison-worker' });
});

after(async () => {
  await worker?.stop('SIGTERM', 5000);
  inspect?.disconnect();
  await s?.close();
  await redis?.stop();
});

test(
  'NUL, lone surrogate and unrecordable jobs are dead-lettered once with a reason; the worker serves the next job',
  { timeout: 90_000 },
  async () => {
    const job = (briefId: string, brief: string) => ({
      workspaceId: s.workspaceId,
      convoyId: 'convoy-1',
      briefId,
      roleId: 'coder',
      harnessAlias: 'code',
      repoPath: s.repo,
      baseRef: 'main',
      brief,
      model: `replay:${s.transcriptPath}`,
    });
    const key = s.config.WORKER_QUEUE_KEY;
    await inspect.rpush(key, JSON.stringify(job('brief-nul', 'a\u0000b')));
    await inspect.rpush(key, JSON.stringify(job('brief-surrogate', 'a\ud800b')));
    await inspect.rpush(key, JSON.stringify(job('brief-poison', 'An ordinary brief.')));
    const good = { ...job('brief-good', 'An ordinary brief.'), agentRunId: 'good-run' };
    await inspect.rpush(key, JSON.stringify(good));

    const done = await s.waitForStatus('good-run', 'completed', 60_000).catch((err: Error) => {
      throw new Error(`${err.message}\n${worker.output()}`);
    });
    assert.equal(done.worker_id, 'poison-worker', 'the same worker served the next job');

    const reasons = async () =>
      (await s.su<{ reason: string }[]>`select reason from dead_letters order by id`).map((r) => r.reason);
    const dead = await reasons();
    assert.equal(dead.length, 3, JSON.stringify(dead));
    assert.match(dead[0]!, /brief: brief holds a NUL character or a lone surrogate/);
    assert.match(dead[1]!, /brief: brief holds a NUL character or a lone surrogate/);
    assert.match(dead[2]!, /could not record the job: .*brief-poison may not be recorded/);
    assert.equal(
      (await s.su`select count(*)::int as n from agent_runs where brief_id <> 'brief-good'`)[0]!.n,
      0,
      'nothing recorded for them',
    );

    // Acknowledged, not left in the processing list to come back.
    const keys = redisKeys(key);
    assert.equal(await inspect.llen(keys.main), 0);
    assert.equal(await inspect.llen(keys.processing('poison-worker')), 0);
    assert.equal(await inspect.llen(keys.dead), 3, 'mirrored on the dead list');
    await sleep(1500);
    assert.equal((await reasons()).length, 3, 'never redelivered');
    assert.equal(worker.process.exitCode, null, 'the worker is still up');
  },
);
