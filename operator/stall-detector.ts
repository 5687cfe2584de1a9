// The stall detector: runs whose lease expired while running, and runs queued for longer than
// STALL_QUEUED_MS, are re-dispatched with the same agentRunId, attempt + 1 and
// resumeFromCheckpoint; after STALL_MAX_ATTEMPTS the run is failed with a run_failed event.
// Every change is a compare-and-set on lease_epoch, so two detectors re-dispatch a run once,
// and the bump fences off the worker that stalled.
// The daemon rides out an outage (StallSweeper): a sweep that finds Postgres away is noted once,
// and the first sweep after a failed one rings every queued run's doorbell at once, since the
// messages may have been lost meanwhile (a Redis restarted, an enqueue that failed).
import type { Config } from '../core/config.ts';
import type { Database } from '../store/connection.ts';
import { appendEvent, failStalledRun, getRun, redispatchRun, requeueRun } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { isTransientDbError } from '../store/transient-retry.ts';
import { OutageWatch } from '../worker/db-wait.ts';
import type { Logger } from '../worker/log.ts';
import type { JobQueue } from '../worker/queue/types.ts';

const LOCK_NOT_AVAILABLE = '55P03';

export interface SweepResult {
  /** Running runs whose lease expired: attempt + 1, resumeFromCheckpoint. */
  redispatched: string[];
  /** Queued runs nobody took for STALL_QUEUED_MS: enqueued again, same attempt. */
  reenqueued: string[];
  failed: string[];
}

interface StalledRow {
  workspace_id: string;
  agent_run_id: string;
  status: 'running' | 'queued';
  lease_epoch: number;
  attempt: number;
}

export interface SweepDeps {
  config: Config;
  db: Database;
  queue: JobQueue;
  log: Logger;
  /** Queued for longer than this is re-enqueued; default STALL_QUEUED_MS. */
  queuedMs?: number;
}

export async function sweepStalledRuns(deps: SweepDeps): Promise<SweepResult> {
  const { config, db, queue, log } = deps;
  const queuedMs = deps.queuedMs ?? config.STALL_QUEUED_MS;
  const result: SweepResult = { redispatched: [], reenqueued: [], failed: [] };
  // Run ids are unique per workspace only: what to enqueue is kept as (workspace, run) pairs.
  const toEnqueue: StalledRow[] = [];
  const stalled = await db.admin<StalledRow[]>`select * from echodo_stalled_runs(${queuedMs})`;
  for (const row of stalled) {
    const why =
      row.status === 'running'
        ? 'lease expired while running'
        : deps.queuedMs === undefined
          ? `queued for over ${queuedMs} ms`
          : 'queued when the sweep came back after a failure';
    await withWorkspace(db.app, row.workspace_id, async (tx) => {
      // A paused worker may hold this row's lock mid-transaction: skip it this sweep, not block.
      await tx`set local lock_timeout = '500ms'`;
      if (row.status === 'queued') {
        // Never started (a job lost from Redis, or every worker busy): ring the doorbell again.
        // Waiting is not a failed attempt, so the attempt count stays.
        const run = await requeueRun(tx, {
          agentRunId: row.agent_run_id,
          leaseEpoch: row.lease_epoch,
          nextAttempt: false,
        });
        if (!run) return;
        await appendEvent(tx, {
          convoyId: run.convoy_id,
          agentRunId: run.id,
          type: 'run_reenqueued',
          metadata: { attempt: run.attempt, reason: why },
        });
        result.reenqueued.push(run.id);
        toEnqueue.push(row);
        log.info({ workspaceId: row.workspace_id, agentRunId: run.id }, `re-enqueued: ${why}`);
        return;
      }
      if (row.attempt >= config.STALL_MAX_ATTEMPTS) {
        const reason = `stalled on attempt ${row.attempt} of ${config.STALL_MAX_ATTEMPTS} (${why}); giving up`;
        const failed = await failStalledRun(tx, { agentRunId: row.agent_run_id, leaseEpoch: row.lease_epoch, reason });
        if (!failed) return;
        await appendEvent(tx, {
          convoyId: failed.convoy_id,
          agentRunId: failed.id,
          type: 'run_failed',
          metadata: { reason, attempt: row.attempt },
        });
        result.failed.push(failed.id);
        log.warn({ workspaceId: row.workspace_id, agentRunId: failed.id, attempt: row.attempt }, reason);
        return;
      }
      // The same SQL as a requested re-dispatch (worker/run/admission.ts), from 'running' only.
      const run = await redispatchRun(tx, {
        agentRunId: row.agent_run_id,
        leaseEpoch: row.lease_epoch,
        from: ['running'],
      });
      if (!run) return; // another detector (or the worker itself) got there first
      await appendEvent(tx, {
        convoyId: run.convoy_id,
        agentRunId: run.id,
        type: 'run_redispatched',
        metadata: { attempt: run.attempt, reason: why },
      });
      result.redispatched.push(run.id);
      toEnqueue.push(row);
      log.info({ workspaceId: row.workspace_id, agentRunId: run.id, attempt: run.attempt }, `re-dispatched: ${why}`);
    }).catch((err) => {
      if ((err as { code?: string }).code !== LOCK_NOT_AVAILABLE) throw err;
      log.info({ agentRunId: row.agent_run_id }, 'run is locked by a transaction in flight; next sweep');
    });
  }
  // Enqueue after the transactions committed: the queue only ever points at a recorded state.
  for (const row of toEnqueue) {
    const run = await withWorkspace(db.app, row.workspace_id, (tx) => getRun(tx, row.agent_run_id));
    if (run?.status === 'queued') await queue.enqueue(run.job);
  }
  return result;
}

/** The daemon's sweeps, one per period, through outages of Postgres or the queue. */
export class StallSweeper {
  private catchUp = false;
  private readonly outage: OutageWatch;

  constructor(private readonly deps: Omit<SweepDeps, 'queuedMs'>) {
    this.outage = new OutageWatch(deps.log, 'the stall detector');
  }

  /** A sweep's result; undefined while Postgres is unreachable. Other errors are thrown. */
  async once(): Promise<SweepResult | undefined> {
    try {
      const result = await sweepStalledRuns({ ...this.deps, queuedMs: this.catchUp ? 0 : undefined });
      this.catchUp = false;
      this.outage.up();
      return result;
    } catch (err) {
      this.catchUp = true;
      if (!isTransientDbError(err)) throw err;
      this.outage.down(err);
      return undefined;
    }
  }
}
