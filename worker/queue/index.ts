// Picks the queue backend: Redis when REDIS_URL is set, else Postgres itself.
import type { Database } from '../../store/connection.ts';
import type { Config } from '../../core/config.ts';
import { createPostgresQueue } from './postgres.ts';
import { createRedisQueue } from './redis.ts';
import type { JobQueue } from './types.ts';

export type { Delivery, JobQueue } from './types.ts';
export type { RedisJobQueue } from './redis.ts';

export interface QueueTuning {
  /** Redis: TTL of the worker's liveness key (default 3 × WORKER_HEARTBEAT_MS). */
  livenessTtlMs?: number;
  /** Redis: orphan recovery period (default min(5 s, liveness TTL)). */
  recoverEveryMs?: number;
  /** Postgres: how long a taken, unclaimed run stays hidden (default WORKER_LEASE_MS). */
  visibilityMs?: number;
}

export function createQueue(args: {
  config: Config;
  db: Database;
  workerId: string;
  onError?: (err: unknown) => void;
  tuning?: QueueTuning;
}): JobQueue {
  const { config, db, workerId, onError, tuning = {} } = args;
  if (config.REDIS_URL) {
    return createRedisQueue({
      url: config.REDIS_URL,
      key: config.WORKER_QUEUE_KEY,
      workerId,
      db,
      livenessTtlMs: tuning.livenessTtlMs ?? 3 * config.WORKER_HEARTBEAT_MS,
      recoverEveryMs: tuning.recoverEveryMs,
      onError,
    });
  }
  return createPostgresQueue({ db, visibilityMs: tuning.visibilityMs ?? config.WORKER_LEASE_MS, onError });
}
