// Waiting out a database outage. A daemon that finds Postgres unreachable probes it with capped
// backoff until it answers; the log says so once when the outage is noticed and once when it ends,
// never per probe, so a long outage leaves two lines instead of thousands.
import type { Sql } from 'postgres';
import { errorMessage } from '../core/errors.ts';
import { isTransientDbError } from '../store/transient-retry.ts';
import type { Logger } from './log.ts';

export interface ProbeBackoff {
  firstMs: number;
  /** Kept small: the time from Postgres answering to the fleet serving again is at most this. */
  maxMs: number;
}

export const DEFAULT_PROBE_BACKOFF: ProbeBackoff = { firstMs: 100, maxMs: 1000 };

/** Tracks one daemon's view of the database: up or down, with a log line per change. */
export class OutageWatch {
  private downSince: number | undefined;

  constructor(
    private readonly log: Logger,
    private readonly what: string,
  ) {}

  get isDown(): boolean {
    return this.downSince !== undefined;
  }

  /** Records a failure; logs only the first of an outage. */
  down(err: unknown): void {
    if (this.downSince !== undefined) return;
    this.downSince = performance.now();
    this.log.warn({ error: errorMessage(err) }, `database unreachable: ${this.what} waits for it`);
  }

  /** Records a success; true (and one log line) when it ends an outage. */
  up(): boolean {
    if (this.downSince === undefined) return false;
    const downMs = Math.round(performance.now() - this.downSince);
    this.downSince = undefined;
    this.log.info({ downMs }, `database answers again: ${this.what} goes on`);
    return true;
  }
}

/**
 * Resolves once `select 1` succeeds (at once when it already does), or when `signal` aborts.
 * A non-transient error is a real problem, not an outage: it is thrown.
 */
export async function waitForDatabase(
  sql: Sql,
  watch: OutageWatch,
  signal: AbortSignal,
  backoff: ProbeBackoff = DEFAULT_PROBE_BACKOFF,
): Promise<void> {
  for (let attempt = 0; !signal.aborted; attempt++) {
    try {
      await sql`select 1`;
      watch.up();
      return;
    } catch (err) {
      if (!isTransientDbError(err)) throw err;
      watch.down(err);
    }
    await pause(Math.min(backoff.maxMs, backoff.firstMs * 2 ** attempt), signal);
  }
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}
