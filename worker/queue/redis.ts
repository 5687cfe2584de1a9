// Redis backend (REDIS_URL set): jobs are JSON on the list WORKER_QUEUE_KEY. We take from the
// LEFT end, as BLPOP does, so orchestrators that RPUSH get FIFO (and we RPUSH our own). A take
// atomically moves the job onto the tail of this worker's processing list (BLMOVE LEFT RIGHT);
// ack removes it once the run is claimed in Postgres (or the job is dead-lettered or refused).
// A worker that dies leaves its processing list behind; once its liveness key expires, any
// worker's orphan recovery moves those jobs back to the HEAD of the queue, oldest first, so the
// order holds. A job may so arrive twice, never zero times: Postgres decides (the claim is a
// compare-and-set).
import os from 'node:os';
import { Redis, type RedisOptions } from 'ioredis';
import type { Database } from '../../store/connection.ts';
import { EchodoError, errorMessage } from '../../core/errors.ts';
import type { Job } from '../../core/job.ts';
import { deadLetterReason, deadLetterText, recordDeadLetter } from './postgres.ts';
import type { Delivery, JobQueue } from './types.ts';

const DEAD_LIST_MAX = 10_000; // the table keeps them all; the list is for a quick look
const CLOSE_CLEANUP_MS = 2000;

export interface RedisJobQueue extends JobQueue {
  readonly backend: 'redis';
  /** Moves the jobs of workers whose liveness key is gone back to the queue; returns how many. */
  recoverOrphans(): Promise<number>;
}

export interface RedisQueueArgs {
  url: string;
  /** The main list (WORKER_QUEUE_KEY); the other keys hang off it. */
  key: string;
  workerId: string;
  db: Database;
  /** TTL of this worker's liveness key; refreshed every third of it. */
  livenessTtlMs: number;
  /** Orphan recovery period (default: min(5 s, livenessTtlMs)). */
  recoverEveryMs?: number;
  onError?: (err: unknown) => void;
}

export const redisKeys = (key: string) => ({
  main: key,
  dead: `${key}:dead`,
  processingPrefix: `${key}:processing:`,
  processing: (workerId: string) => `${key}:processing:${workerId}`,
  worker: (workerId: string) => `${key}:worker:${workerId}`,
});

const globEscape = (s: string) => s.replace(/[*?[\]\\]/g, '\\$&');

function connectionOptions(name: string, maxRetriesPerRequest: number | null): RedisOptions {
  return {
    connectionName: name.replace(/[^A-Za-z0-9._:-]/g, '_'),
    maxRetriesPerRequest,
    // Exponential backoff with jitter, capped, never giving up: a restarted Redis is picked up again.
    retryStrategy: (times: number) => Math.min(50 * 2 ** Math.min(times, 6), 2000) + Math.floor(Math.random() * 200),
  };
}

export function createRedisQueue(args: RedisQueueArgs): RedisJobQueue {
  const { workerId, db, onError } = args;
  const keys = redisKeys(args.key);
  const processing = keys.processing(workerId);
  const workerKey = keys.worker(workerId);
  const ttlMs = Math.max(30, Math.round(args.livenessTtlMs));
  const recoverEveryMs = args.recoverEveryMs ?? Math.min(5000, ttlMs);

  let closed = false;
  let taking = false;
  // Raw messages handed out and not yet acked, with multiplicity. Anything else found in our
  // processing list is a job whose BLMOVE reply was lost (an abort, a reconnect): a take
  // returns those to the queue first.
  const handedOut = new Map<string, number>();
  let handedOutCount = 0;

  function watch(conn: Redis, what: string): Redis {
    let reported = false; // one report per outage, not one per reconnect attempt
    conn.on('error', (err: unknown) => {
      if (closed || reported) return;
      reported = true;
      onError?.(new EchodoError('transient', `redis queue: ${what} connection: ${errorMessage(err)}`, { cause: err }));
    });
    conn.on('ready', () => {
      reported = false;
    });
    return conn;
  }

  // Commands wait through a short outage (offline queue), then fail rather than hang forever.
  const cmd = watch(new Redis(args.url, connectionOptions(`echodo-queue-${workerId}`, 20)), 'command');

  // Its own connection: a BLMOVE holds it for the whole wait. After a reconnect ioredis
  // resends a pending BLMOVE, so a take in flight during a Redis restart carries on.
  let blocking: Redis | undefined;
  const blockingConnection = () =>
    (blocking ??= watch(new Redis(args.url, connectionOptions(`echodo-take-${workerId}`, null)), 'blocking'));

  const report = (err: unknown) => {
    if (!closed) onError?.(err);
  };

  async function refreshLiveness(): Promise<void> {
    await cmd.set(
      workerKey,
      JSON.stringify({ host: os.hostname(), pid: process.pid, at: new Date().toISOString() }),
      'PX',
      ttlMs,
    );
  }

  let recovering: Promise<number> | undefined;
  function recoverOrphans(): Promise<number> {
    recovering ??= (async () => {
      let moved = 0;
      let cursor = '0';
      do {
        const [next, lists] = await cmd.scan(cursor, 'MATCH', `${globEscape(keys.processingPrefix)}*`, 'COUNT', 100);
        cursor = next;
        for (const list of lists) {
          const owner = list.slice(keys.processingPrefix.length);
          if (owner === workerId || (await cmd.exists(keys.worker(owner)))) continue;
          // The processing list holds the oldest at its head. RIGHT→LEFT moves the newest first
          // onto the head of the queue, so the oldest ends up first in line: FIFO kept.
          while ((await cmd.lmove(list, keys.main, 'RIGHT', 'LEFT')) !== null) moved++;
        }
      } while (cursor !== '0');
      return moved;
    })().finally(() => {
      recovering = undefined;
    });
    return recovering;
  }

  async function returnUnseen(): Promise<void> {
    if ((await cmd.llen(processing)) <= handedOutCount) return;
    const expected = new Map(handedOut);
    const unseen: string[] = [];
    for (const raw of await cmd.lrange(processing, 0, -1)) {
      const n = expected.get(raw) ?? 0;
      if (n > 0) expected.set(raw, n - 1);
      else unseen.push(raw);
    }
    // Newest first onto the head of the queue, so the oldest is taken first again.
    for (const raw of unseen.reverse()) await execOrThrow(cmd.multi().lrem(processing, -1, raw).lpush(keys.main, raw));
  }

  // A queue turns consumer on its first take, so a producer (dispatch) never shows up as a
  // worker. The first liveness write and orphan sweep are awaited (through a short outage);
  // the timers then keep both going.
  let started: Promise<void> | undefined;
  let livenessTimer: NodeJS.Timeout | undefined;
  let recoveryTimer: NodeJS.Timeout | undefined;
  function startConsuming(): Promise<void> {
    if (started) return started;
    livenessTimer = setInterval(() => refreshLiveness().catch(report), Math.max(10, Math.floor(ttlMs / 3)));
    recoveryTimer = setInterval(() => recoverOrphans().catch(report), recoverEveryMs);
    livenessTimer.unref();
    recoveryTimer.unref();
    started = (async () => {
      await refreshLiveness();
      await recoverOrphans();
    })().catch(report);
    return started;
  }

  function delivery(raw: string): Delivery {
    handedOut.set(raw, (handedOut.get(raw) ?? 0) + 1);
    handedOutCount++;
    let acked = false;
    const settle = async (giveBack: boolean) => {
      if (acked) return;
      acked = true;
      try {
        if (giveBack) await execOrThrow(cmd.multi().lrem(processing, 1, raw).lpush(keys.main, raw));
        else await cmd.lrem(processing, 1, raw);
      } finally {
        // Even if LREM failed: the job is then returned by a later take and delivered again,
        // which Postgres makes harmless (the claim is a compare-and-set).
        const n = (handedOut.get(raw) ?? 1) - 1;
        if (n > 0) handedOut.set(raw, n);
        else handedOut.delete(raw);
        handedOutCount--;
      }
    };
    return {
      raw,
      ack: () => settle(false),
      // Back to the head of the queue: it is the oldest job, and is taken again first.
      release: () => settle(true),
    };
  }

  return {
    backend: 'redis',
    recoverOrphans,

    async enqueue(job: Job): Promise<void> {
      await cmd.rpush(keys.main, JSON.stringify(job));
    },

    async take({ timeoutMs, signal }): Promise<Delivery | null> {
      if (closed) throw new EchodoError('internal', 'redis queue: take on a closed queue');
      if (taking)
        throw new EchodoError(
          'internal',
          'redis queue: a take is already waiting on this queue; use one queue per consumer',
        );
      taking = true;
      try {
        await startConsuming();
        if (signal?.aborted) return null;
        await returnUnseen();
        // BLMOVE takes seconds (decimals allowed); 0 would mean forever.
        const seconds = Math.max(timeoutMs, 10) / 1000;
        const pending = blockingConnection().blmove(keys.main, processing, 'LEFT', 'RIGHT', seconds);
        // Past the deadline plus a grace (a reply lost in a reconnect), give up on this BLMOVE.
        const outcome = await interruptible(pending, signal, timeoutMs + 5000);
        if (outcome === 'interrupted') {
          // The only way to stop a BLMOVE: drop its connection (the next take opens another).
          blocking?.disconnect();
          blocking = undefined;
          return null;
        }
        return outcome.raw === null ? null : delivery(outcome.raw);
      } catch (err) {
        if (closed) return null;
        throw err;
      } finally {
        taking = false;
      }
    },

    async deadLetter(raw, reason, ids = {}): Promise<void> {
      // The table is the record; the list mirrors it next to the queue for operators.
      await recordDeadLetter(db.admin, raw, reason, ids);
      const entry = {
        reason: deadLetterReason(reason),
        raw: deadLetterText(raw),
        workspaceId: ids.workspaceId ?? null,
        jobId: ids.jobId ?? null,
        at: new Date().toISOString(),
      };
      await execOrThrow(
        cmd
          .multi()
          .lpush(keys.dead, JSON.stringify(entry))
          .ltrim(keys.dead, 0, DEAD_LIST_MAX - 1),
      );
    },

    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      clearInterval(livenessTimer);
      clearInterval(recoveryTimer);
      blocking?.disconnect();
      blocking = undefined;
      if (!started) {
        cmd.disconnect();
        return;
      }
      // Hand back what was taken and never acked, and say we are gone. If Redis is down, the
      // liveness key expires by itself and another worker's recovery does the same.
      const cleanup = (async () => {
        while ((await cmd.lmove(processing, keys.main, 'RIGHT', 'LEFT')) !== null);
        await cmd.del(workerKey);
      })();
      cleanup.catch(() => {}); // reported through withTimeout below
      try {
        await withTimeout(cleanup, CLOSE_CLEANUP_MS);
      } catch (err) {
        onError?.(err);
      } finally {
        cmd.disconnect();
      }
    },
  };
}

async function execOrThrow(multi: ReturnType<Redis['multi']>): Promise<void> {
  const results = await multi.exec();
  if (!results) throw new EchodoError('transient', 'redis queue: transaction aborted');
  const failed = results.find(([err]) => err);
  if (failed) throw failed[0];
}

function interruptible<T>(
  promise: Promise<T>,
  signal: AbortSignal | undefined,
  safetyMs: number,
): Promise<{ raw: T } | 'interrupted'> {
  return new Promise((resolve, reject) => {
    const finish = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onInterrupt);
    };
    const onInterrupt = () => {
      finish();
      resolve('interrupted');
    };
    const timer = setTimeout(onInterrupt, safetyMs);
    signal?.addEventListener('abort', onInterrupt, { once: true });
    promise.then(
      (raw) => {
        finish();
        resolve({ raw });
      },
      (err: unknown) => {
        finish();
        reject(err);
      },
    );
  });
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new EchodoError('transient', `redis queue: clean-up did not finish within ${ms} ms`)),
      ms,
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
