// One contract for both queue backends: the same cases run against Postgres and Redis.
// Postgres is the truth and the queue the doorbell: every case checks the runs in agent_runs.
// Every assert.ok carries a message: without one, a failing assert.ok makes node re-parse
// the (tsx-compiled) source to describe it, which can spin for minutes.
import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import type { Config } from '../core/config.ts';
import { parseJob, parseRawJob, type Job, type JobInput } from '../core/job.ts';
import {
  createQueue,
  type Delivery,
  type JobQueue,
  type QueueTuning,
  type RedisJobQueue,
} from '../worker/queue/index.ts';
import { redisKeys } from '../worker/queue/redis.ts';
import { claimRun, createWorkspace, getRun, recordRun } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import type { Sql } from 'postgres';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';
import { startRedis, type RedisServer } from '../testbed/redis.ts';
import { spawnNode, waitFor } from './support/child.ts';

// Short on purpose: a dead worker's liveness key (3 × heartbeat) and an unclaimed Postgres
// reservation (the lease) run out quickly, so recovery happens within the test.
const HEARTBEAT_MS = 100;
const LEASE_MS = 500;
const RECOVER_EVERY_MS = 100;

type Backend = 'postgres' | 'redis';

interface Harness {
  backend: Backend;
  testDb: TestDatabase;
  /** Superuser, outside RLS: for reading back what the queue recorded. */
  su: Sql;
  config: Config;
  /** Redis only: the server, and a plain client for looking at keys. */
  server?: RedisServer;
  inspect?: Redis;
  queue(workerId: string, tuning?: QueueTuning): JobQueue;
}

type Consumed =
  { kind: 'claimed' | 'already-claimed'; job: Job; agentRunId: string } | { kind: 'dead'; reason: string; raw: string };

// What the worker loop does with a delivery: parse, record (idempotent), claim, ack.
async function consumeOne(h: Harness, queue: JobQueue, workerId: string, timeoutMs: number): Promise<Consumed | null> {
  const delivery = await queue.take({ timeoutMs });
  return delivery && settle(h, queue, delivery, workerId);
}

async function settle(h: Harness, queue: JobQueue, delivery: Delivery, workerId: string): Promise<Consumed> {
  const parsed = parseRawJob(delivery.raw);
  if (!parsed.ok) {
    const reason = parsed.problems.join('; ');
    await queue.deadLetter(delivery.raw, reason, idsOf(delivery.raw));
    await delivery.ack();
    return { kind: 'dead', reason, raw: delivery.raw };
  }
  const job = parsed.job;
  const { agentRunId } = await withWorkspace(h.testDb.db.app, job.workspaceId, (tx) => recordRun(tx, job));
  const run = await withWorkspace(h.testDb.db.app, job.workspaceId, (tx) =>
    claimRun(tx, { agentRunId, workerId, leaseMs: 60_000 }),
  );
  await delivery.ack();
  return { kind: run ? 'claimed' : 'already-claimed', job, agentRunId };
}

/** Keeps taking (short waits, like the worker loop) until something arrives or the deadline. */
async function consumeWithin(h: Harness, queue: JobQueue, workerId: string, ms: number): Promise<Consumed> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const got = await consumeOne(h, queue, workerId, 300);
    if (got) return got;
  }
  throw new Error(`${workerId} got no job within ${ms} ms`);
}

function idsOf(raw: string): { workspaceId?: string; jobId?: string } {
  try {
    const value = JSON.parse(raw) as Record<string, unknown>;
    return {
      workspaceId: typeof value.workspaceId === 'string' ? value.workspaceId : undefined,
      jobId: typeof value.jobId === 'string' ? value.jobId : undefined,
    };
  } catch {
    return {};
  }
}

function jobInput(workspaceId: string, n: number): JobInput {
  return {
    workspaceId,
    convoyId: 'convoy-1',
    briefId: `brief-${n}`,
    roleId: 'coder',
    baseRef: 'main',
    brief: `Brief number ${n}.`,
    model: 'replay:/nonexistent/transcript.json',
  };
}

function makeJob(workspaceId: string, n: number): Job {
  const parsed = parseJob(jobInput(workspaceId, n));
  assert.ok(parsed.ok, 'test job must be valid');
  return parsed.job;
}

async function newWorkspace(h: Harness): Promise<string> {
  const ws = `ws-${randomUUID().slice(0, 8)}`;
  await withWorkspace(h.testDb.db.app, ws, (tx) => createWorkspace(tx));
  return ws;
}

/** What `dispatch` does: record the run in Postgres, then ring the doorbell. */
async function dispatch(h: Harness, producer: JobQueue, job: Job): Promise<void> {
  await withWorkspace(h.testDb.db.app, job.workspaceId, (tx) => recordRun(tx, job));
  await producer.enqueue(job);
}

const runOf = (h: Harness, job: Pick<Job, 'workspaceId' | 'agentRunId'>) =>
  withWorkspace(h.testDb.db.app, job.workspaceId, (tx) => getRun(tx, job.agentRunId));

const redisServer = await startRedis();

for (const backend of ['postgres', 'redis'] as const) {
  describe(`job queue contract (${backend})`, () => {
    let inspect: Redis | undefined;
    const open: JobQueue[] = [];
    const databases: TestDatabase[] = [];
    const superusers: Sql[] = [];

    before(() => {
      if (backend === 'redis') inspect = new Redis(redisServer!.url, { maxRetriesPerRequest: null });
    });
    after(async () => {
      inspect?.disconnect();
      if (backend === 'redis') await redisServer?.stop();
    });
    afterEach(async () => {
      await Promise.all(open.splice(0).map((q) => q.close()));
      await Promise.all(superusers.splice(0).map((su) => su.end({ timeout: 2 })));
      await Promise.all(databases.splice(0).map((d) => d.drop()));
    });

    // A fresh harness per test: its own database (the Postgres queue spans all workspaces),
    // its own queue key on Redis.
    async function harness(): Promise<Harness> {
      const testDb = await createTestDatabase();
      databases.push(testDb);
      const config: Config = {
        ...testDb.config,
        REDIS_URL: backend === 'redis' ? redisServer!.url : undefined,
        WORKER_QUEUE_KEY: `echodo:test:${randomUUID().slice(0, 8)}`,
        WORKER_HEARTBEAT_MS: HEARTBEAT_MS,
        WORKER_LEASE_MS: LEASE_MS,
      };
      const su = superuserSql(testDb.url);
      superusers.push(su);
      const h: Harness = {
        backend,
        testDb,
        su,
        config,
        server: redisServer ?? undefined,
        inspect,
        queue(workerId, tuning = {}) {
          const q = createQueue({
            config,
            db: testDb.db,
            workerId,
            tuning: { recoverEveryMs: RECOVER_EVERY_MS, ...tuning },
            onError: () => {}, // connection hiccups during the restart case are expected
          });
          open.push(q);
          return q;
        },
      };
      return h;
    }

    test('enqueue → take → claim → ack, in FIFO order', async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const producer = h.queue('producer');
      const consumer = h.queue('consumer-1');
      const jobs = [1, 2, 3, 4].map((n) => makeJob(ws, n));
      for (const job of jobs) await dispatch(h, producer, job);

      const got: string[] = [];
      for (let i = 0; i < jobs.length; i++) {
        const c = await consumeOne(h, consumer, 'consumer-1', 5000);
        assert.equal(c?.kind, 'claimed');
        got.push(c.agentRunId);
      }
      assert.deepEqual(
        got,
        jobs.map((j) => j.agentRunId),
        'jobs come out in the order they went in',
      );

      for (const job of jobs) {
        const run = await runOf(h, job);
        assert.equal(run?.status, 'running');
        assert.equal(run?.worker_id, 'consumer-1');
        assert.equal(run?.lease_epoch, 1);
      }
      assert.equal(await consumer.take({ timeoutMs: 200 }), null, 'acked jobs are not delivered again');
      if (backend === 'redis') {
        const keys = redisKeys(h.config.WORKER_QUEUE_KEY);
        assert.equal(await h.inspect!.llen(keys.processing('consumer-1')), 0, 'ack empties the processing list');
        assert.equal(await h.inspect!.llen(keys.main), 0);
      }
    });

    // The take waits far longer than the test may run: only the doorbell can end it in time.
    test('a consumer waiting on an empty queue is woken by enqueue', { timeout: 20_000 }, async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const consumer = h.queue('consumer-wake');
      const waiting = consumer.take({ timeoutMs: 120_000 });
      if (backend === 'redis') {
        await waitFor(async () => /blocked_clients:[1-9]/.test(await h.inspect!.info('clients')), {
          what: 'the consumer blocked in BLMOVE',
        });
      } else {
        // Its LISTEN is in place and its first look found nothing: it is asleep on the doorbell.
        await waitFor(
          async () =>
            (
              await h.testDb.db
                .admin`select 1 from pg_stat_activity where datname = current_database() and query like 'listen %echodo_queue%'`
            ).length > 0,
          { what: 'the consumer listening' },
        );
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      const job = makeJob(ws, 1);
      await dispatch(h, h.queue('producer'), job);
      const delivery = await waiting;
      assert.ok(delivery, 'the doorbell woke the waiting take');
      const c = await settle(h, consumer, delivery, 'consumer-wake');
      assert.equal(c.kind, 'claimed');
      assert.equal(c.kind === 'claimed' && c.agentRunId, job.agentRunId);
    });

    test('a take is abortable and returns null', async () => {
      const h = await harness();
      const consumer = h.queue('consumer-abort');
      const controller = new AbortController();
      const pending = consumer.take({ timeoutMs: 30_000, signal: controller.signal });
      setTimeout(() => controller.abort(), 100);
      assert.equal(await pending, null);

      // The queue still works after an aborted take.
      const ws = await newWorkspace(h);
      const job = makeJob(ws, 1);
      await dispatch(h, h.queue('producer'), job);
      const c = await consumeOne(h, consumer, 'consumer-abort', 5000);
      assert.equal(c?.kind, 'claimed');
      assert.equal(c.agentRunId, job.agentRunId);
    });

    test('a job taken and not yet claimed is not handed to another live consumer', async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const job = makeJob(ws, 1);
      await dispatch(h, h.queue('producer'), job);
      const holder = h.queue('holder', { visibilityMs: 30_000 });
      const delivery = await holder.take({ timeoutMs: 5000 });
      assert.ok(delivery, 'the holder took the job');
      assert.equal(parseRawJob(delivery.raw).ok && JSON.parse(delivery.raw).agentRunId, job.agentRunId);

      const other = h.queue('other');
      if (backend === 'redis')
        assert.equal(await (other as RedisJobQueue).recoverOrphans(), 0, 'a live worker is no orphan');
      assert.equal(await other.take({ timeoutMs: 300 }), null);
      assert.equal((await settle(h, holder, delivery, 'holder')).kind, 'claimed');
    });

    test('a job is not lost when its worker is SIGKILLed between take and claim', async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const job = makeJob(ws, 1);
      await dispatch(h, h.queue('producer'), job);

      const taker = spawnNode('test/fixtures/queue-taker.ts', [], {
        env: {
          ...h.testDb.env,
          REDIS_URL: h.config.REDIS_URL ?? '',
          WORKER_QUEUE_KEY: h.config.WORKER_QUEUE_KEY,
          WORKER_HEARTBEAT_MS: String(HEARTBEAT_MS),
          WORKER_LEASE_MS: String(LEASE_MS),
          QUEUE_TAKER_ID: 'doomed-worker',
          ECHODO_FAULT: 'after-take',
        },
      });
      const exit = await taker.exited;
      assert.equal(exit.signal, 'SIGKILL', `the taker should die at the fault point; output:\n${taker.output()}`);
      const taken = taker.stdout.find((line) => line.startsWith('taken '));
      assert.ok(taken, `the taker took the job before dying; output:\n${taker.output()}`);
      assert.equal(JSON.parse(taken.slice('taken '.length)).agentRunId, job.agentRunId);

      assert.equal((await runOf(h, job))?.status, 'queued', 'nobody claimed it');
      if (backend === 'redis') {
        const keys = redisKeys(h.config.WORKER_QUEUE_KEY);
        assert.equal(await h.inspect!.llen(keys.main), 0, 'the job left the main list');
        assert.equal(await h.inspect!.llen(keys.processing('doomed-worker')), 1, 'it sits with the dead worker');
      }

      const rescuer = h.queue('rescuer');
      const c = await consumeWithin(h, rescuer, 'rescuer', 15_000);
      assert.equal(c.kind, 'claimed');
      assert.equal(c.agentRunId, job.agentRunId);
      const run = await runOf(h, job);
      assert.equal(run?.worker_id, 'rescuer');
      assert.equal(run?.lease_epoch, 1, 'claimed once, by the rescuer');
      if (backend === 'redis') {
        assert.equal(await h.inspect!.exists(redisKeys(h.config.WORKER_QUEUE_KEY).processing('doomed-worker')), 0);
      }
    });

    test('concurrent consumers: every run is claimed exactly once, even when the doorbell rings twice', async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const consumers = ['c1', 'c2', 'c3', 'c4'];
      const jobs = Array.from({ length: 16 }, (_, i) => makeJob(ws, i + 1));
      const claims = new Map<string, string[]>();
      let alreadyClaimed = 0;
      let dispatched = false;
      let stopped = false;

      const loops = consumers.map(async (workerId) => {
        const queue = h.queue(workerId);
        while (!stopped) {
          const c = await consumeOne(h, queue, workerId, 300);
          if (!c) {
            if (dispatched && claims.size === jobs.length) return;
            continue;
          }
          assert.notEqual(c.kind, 'dead');
          if (c.kind === 'claimed') claims.set(c.agentRunId, [...(claims.get(c.agentRunId) ?? []), workerId]);
          else alreadyClaimed++;
        }
      });
      let timer: NodeJS.Timeout | undefined;
      try {
        const producer = h.queue('producer');
        for (const job of jobs) {
          await dispatch(h, producer, job);
          await producer.enqueue(job); // a duplicate: Redis delivers it twice, Postgres rings twice
        }
        dispatched = true;
        await Promise.race([
          Promise.all(loops),
          new Promise((_, reject) => {
            timer = setTimeout(
              () => reject(new Error(`only ${claims.size} of ${jobs.length} runs claimed in time`)),
              30_000,
            );
          }),
        ]);
      } finally {
        clearTimeout(timer);
        stopped = true;
        await Promise.allSettled(loops);
      }

      for (const job of jobs) {
        assert.equal(
          claims.get(job.agentRunId)?.length,
          1,
          `run ${job.agentRunId} claimed by ${claims.get(job.agentRunId)}`,
        );
        const run = await runOf(h, job);
        assert.equal(run?.status, 'running');
        assert.equal(run?.lease_epoch, 1);
        assert.equal(run?.worker_id, claims.get(job.agentRunId)![0]);
      }
      if (backend === 'redis')
        assert.equal(alreadyClaimed, jobs.length, 'each duplicate delivery found its run claimed');
    });

    test('bad jobs go to the dead letters with the reason; the consumer goes on to the next good job', async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const producer = h.queue('producer');
      const consumer = h.queue('consumer-dl');
      const schemaFailing = { workspaceId: ws, convoyId: 'convoy-1', bogus: true };
      const expected: Array<{ reason: RegExp; raw?: string }> = [];

      let badRun: Job | undefined;
      if (backend === 'redis') {
        const malformed = '{"workspaceId": "' + ws + '", not json';
        // An outside orchestrator RPUSHes whatever it likes.
        await h.inspect!.rpush(h.config.WORKER_QUEUE_KEY, malformed);
        await h.inspect!.rpush(h.config.WORKER_QUEUE_KEY, JSON.stringify(schemaFailing));
        expected.push(
          { reason: /not valid JSON/, raw: malformed },
          { reason: /unknown field\(s\): bogus/, raw: JSON.stringify(schemaFailing) },
        );
      } else {
        // A stored job that no longer passes the schema (e.g. written by an older version).
        badRun = makeJob(ws, 99);
        await withWorkspace(h.testDb.db.app, ws, async (tx) => {
          await recordRun(tx, badRun!);
          await tx`update agent_runs set job = ${tx.json(schemaFailing)} where id = ${badRun!.agentRunId}`;
        });
        await producer.enqueue(badRun);
        expected.push({ reason: /unknown field\(s\): bogus/ });
      }
      const good = makeJob(ws, 1);
      await dispatch(h, producer, good);

      for (const want of expected) {
        const c = await consumeOne(h, consumer, 'consumer-dl', 5000);
        assert.equal(c?.kind, 'dead');
        assert.match(c.reason, want.reason);
        if (want.raw) assert.equal(c.raw, want.raw);
      }
      const next = await consumeOne(h, consumer, 'consumer-dl', 5000);
      assert.equal(next?.kind, 'claimed');
      assert.equal(next.agentRunId, good.agentRunId);

      // The dead_letters table holds every one, with its reason.
      const rows = await h.su<{ workspace_id: string; reason: string; raw: string }[]>`
        select workspace_id, reason, raw from dead_letters order by id`;
      for (const want of expected) {
        const row = rows.find((r) => want.reason.test(r.reason) && (!want.raw || r.raw === want.raw));
        assert.ok(row, `dead letter ${want.reason} recorded; have ${JSON.stringify(rows.map((r) => r.reason))}`);
        if (backend === 'postgres') assert.equal(row.workspace_id, ws);
      }
      if (backend === 'redis') {
        const list = (await h.inspect!.lrange(`${h.config.WORKER_QUEUE_KEY}:dead`, 0, -1)).map((e) => JSON.parse(e));
        assert.equal(list.length, expected.length);
        for (const want of expected) {
          const entry = list.find((e) => e.raw === want.raw);
          assert.ok(entry, 'dead list entry present');
          assert.match(entry.reason, want.reason);
          assert.ok(!Number.isNaN(Date.parse(entry.at)), 'the entry carries a timestamp');
        }
        assert.equal(list.find((e) => e.raw === JSON.stringify(schemaFailing)).workspaceId, ws);
      } else {
        // The bad run leaves the queue for good: failed, and not offered again after its visibility timeout.
        const run = await runOf(h, badRun!);
        assert.equal(run?.status, 'failed');
        assert.match(run?.failure_reason ?? '', /dead-lettered: .*bogus/);
        await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 200));
        assert.equal(await consumer.take({ timeoutMs: 200 }), null);
      }
    });

    if (backend !== 'redis') return; // the cases below are about Redis alone

    test('taken from the left end, as BLPOP does: 50 jobs RPUSHed by an orchestrator are claimed in order', async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const raws = Array.from({ length: 50 }, (_, i) =>
        JSON.stringify({ ...jobInput(ws, i + 1), agentRunId: `run-${String(i + 1).padStart(2, '0')}` }),
      );
      for (const raw of raws) await h.inspect!.rpush(h.config.WORKER_QUEUE_KEY, raw);
      const consumer = h.queue('consumer-fifo');
      const got: string[] = [];
      for (let i = 0; i < raws.length; i++) {
        const c = await consumeOne(h, consumer, 'consumer-fifo', 5000);
        assert.equal(c?.kind, 'claimed');
        got.push(c.agentRunId);
      }
      assert.deepEqual(
        got,
        raws.map((r) => JSON.parse(r).agentRunId),
        'first pushed, first claimed',
      );
      const claimedOrder = await h.su<{ id: string }[]>`select id from agent_runs order by started_at, id`;
      assert.deepEqual(
        claimedOrder.map((r) => r.id),
        got,
        'the claims in Postgres follow the push order',
      );
    });

    test("a dead worker's jobs go back to the head of the queue, oldest first; a released delivery too", async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const keys = redisKeys(h.config.WORKER_QUEUE_KEY);
      const [a, b, c, d] = [1, 2, 3, 4].map((n) => JSON.stringify(makeJob(ws, n)));
      // What a dead worker leaves: a, b, c taken in that order (BLMOVE appends to the tail).
      await h.inspect!.rpush(keys.processing('dead-worker'), a!, b!, c!);
      await h.inspect!.rpush(keys.main, d!);
      const rescuer = h.queue('rescuer-order') as RedisJobQueue;
      assert.equal(await rescuer.recoverOrphans(), 3);
      assert.deepEqual(
        await h.inspect!.lrange(keys.main, 0, -1),
        [a, b, c, d],
        'the orphans are first in line, in their order',
      );

      const first = await rescuer.take({ timeoutMs: 2000 });
      assert.equal(first?.raw, a);
      await first!.release!();
      assert.deepEqual(
        await h.inspect!.lrange(keys.main, 0, -1),
        [a, b, c, d],
        'a released delivery is first in line again',
      );
      assert.equal(await h.inspect!.llen(keys.processing('rescuer-order')), 0);
      assert.equal((await rescuer.take({ timeoutMs: 2000 }))?.raw, a);
    });

    test("an outside orchestrator's job (raw RPUSH, no ids) is taken, and recording it is idempotent on jobId", async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const raw = JSON.stringify(jobInput(ws, 7));
      await h.inspect!.rpush(h.config.WORKER_QUEUE_KEY, raw);

      const consumer = h.queue('consumer-outside');
      const c = await consumeOne(h, consumer, 'consumer-outside', 5000);
      assert.equal(c?.kind, 'claimed');
      // A redelivery of the same message parses to a fresh random agentRunId but the same jobId.
      const again = parseRawJob(raw);
      assert.ok(again.ok, 'the outside job parses');
      assert.equal(again.job.jobId, c.job.jobId);
      assert.notEqual(again.job.agentRunId, c.agentRunId);
      const recorded = await withWorkspace(h.testDb.db.app, ws, (tx) => recordRun(tx, again.job));
      assert.deepEqual(recorded, { agentRunId: c.agentRunId, created: false });
      const count = await withWorkspace(h.testDb.db.app, ws, (tx) => tx`select count(*)::int as n from agent_runs`);
      assert.equal(count[0]!.n, 1);
    });

    test("a job stranded in this worker's own processing list (a reply lost in a reconnect) is taken again", async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const job = makeJob(ws, 1);
      await withWorkspace(h.testDb.db.app, ws, (tx) => recordRun(tx, job));
      const keys = redisKeys(h.config.WORKER_QUEUE_KEY);
      // What a BLMOVE whose reply never arrived leaves behind; also a restart with the same WORKER_ID.
      await h.inspect!.rpush(keys.processing('same-worker'), JSON.stringify(job));

      const consumer = h.queue('same-worker');
      const c = await consumeOne(h, consumer, 'same-worker', 5000);
      assert.equal(c?.kind, 'claimed');
      assert.equal(c.agentRunId, job.agentRunId);
      assert.equal(await h.inspect!.llen(keys.processing('same-worker')), 0);
    });

    test('close hands un-acked jobs back at once', async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const job = makeJob(ws, 1);
      await dispatch(h, h.queue('producer'), job);
      const quitter = h.queue('quitter');
      assert.ok(await quitter.take({ timeoutMs: 5000 }), 'the quitter took the job');
      await quitter.close();
      const keys = redisKeys(h.config.WORKER_QUEUE_KEY);
      assert.equal(await h.inspect!.exists(keys.worker('quitter')), 0, 'its liveness key is gone');
      assert.equal(await h.inspect!.llen(keys.main), 1, 'the job is back in the queue');

      const c = await consumeOne(h, h.queue('next'), 'next', 5000);
      assert.equal(c?.kind, 'claimed');
      assert.equal(c.agentRunId, job.agentRunId);
    });

    test('Redis restarted while a consumer waits: a job pushed after the restart is still taken', async () => {
      const h = await harness();
      const ws = await newWorkspace(h);
      const consumer = h.queue('consumer-restart');
      const waiting = consumer.take({ timeoutMs: 20_000 });
      await waitFor(async () => /blocked_clients:[1-9]/.test(await h.inspect!.info('clients')), {
        what: 'the consumer blocked in BLMOVE',
      });

      await h.server!.restart();
      const job = makeJob(ws, 1);
      await dispatch(h, h.queue('producer'), job);

      const delivery = await waiting;
      assert.ok(delivery, 'the waiting take carried on after the restart');
      assert.equal(JSON.parse(delivery.raw).agentRunId, job.agentRunId);
      assert.equal((await settle(h, consumer, delivery, 'consumer-restart')).kind, 'claimed');
      const keys = redisKeys(h.config.WORKER_QUEUE_KEY);
      assert.equal(await h.inspect!.llen(keys.processing('consumer-restart')), 0);
    });
  });
}
