// Transient database errors (a restarted server, a killed connection, a serialization
// conflict) are retried with exponential backoff and full jitter; real errors are not.
import { setTimeout as sleep } from 'node:timers/promises';

const TRANSIENT_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  '57P01', // admin_shutdown (pg_terminate_backend, server stopping)
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now (starting up)
  '53300', // too_many_connections
  '40001', // serialization_failure
  '40P01', // deadlock_detected
]);

export function isTransientDbError(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  if (typeof code !== 'string') return false;
  return TRANSIENT_CODES.has(code) || code.startsWith('08'); // class 08: connection exception
}

export interface RetryOptions {
  attempts?: number;
  baseMs?: number;
  maxMs?: number;
  onRetry?: (err: unknown, attempt: number, delayMs: number) => void;
}

export async function retryTransient<T>(fn: (attempt: number) => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const { attempts = 8, baseMs = 50, maxMs = 4000 } = options;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (!isTransientDbError(err) || attempt >= attempts) throw err;
      const delay = Math.random() * Math.min(maxMs, baseMs * 2 ** attempt);
      options.onRetry?.(err, attempt, delay);
      await sleep(delay);
    }
  }
}

/**
 * A statement this connection prepared was made stale by a migration of a newer release (a rolling
 * upgrade adds a column to a table it reads): Postgres refuses it once and the driver forgets it.
 * Inside a transaction the refusal can reach the caller as a sibling statement's "transaction is
 * aborted" (the driver re-sends the stale one before it gives up), so that counts too: the
 * transaction rolled back whole, and running it again either succeeds or fails as it did.
 */
export function isStaleStatement(err: unknown): boolean {
  const e = err as { code?: unknown; routine?: unknown };
  return (e.code === '0A000' && e.routine === 'RevalidateCachedQuery') || e.code === '25P02';
}

/**
 * Postgres away (refused, dropped, shutting down or starting up), as opposed to a conflict that a
 * retry resolves: looked for along the error's causes, since callers may wrap it.
 */
export function isDatabaseUnreachable(err: unknown): boolean {
  for (let e = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && isTransientDbError(e) && !CONFLICT_CODES.has(code)) return true;
  }
  return false;
}

const CONFLICT_CODES = new Set(['40001', '40P01', '53300']);
