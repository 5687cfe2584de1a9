// The worker daemon: one run at a time, explicit states, an interruptible wait.
//   idle → taking → running → idle … ; SIGTERM → stopping (the run in flight checkpoints
//   and is released) → stopped. A lease that lapsed because Postgres was unreachable costs the
//   run, not the process: the daemon waits for the database and serves the queue again. A lease
//   lost otherwise (the process was paused, or an invariant broke) means this process is suspect:
//   it stops and exits with LEASE_LOST_EXIT so a supervisor starts a fresh one.
import type { Config } from '../core/config.ts';
import type { Database } from '../store/connection.ts';
import { errorMessage } from '../core/errors.ts';
import { isTransientDbError } from '../store/transient-retry.ts';
import { OutageWatch, waitForDatabase } from './db-wait.ts';
import type { Logger } from './log.ts';
import type { JobQueue } from './queue/types.ts';
import { dropStandby, RemoteStandby } from './remote/standby.ts';
import { executeDelivery, type JobResult } from './run/execute.ts';
import { workerMetrics } from './metrics.ts';
import { makeSpareWorktree, removeSpareWorktrees, SpareKeeper } from './worktrees/spare-keeper.ts';

/** A spare taken by a run is made again this long after: not while the run starts its first round. */
const SPARE_REPLENISH_DELAY_MS = 3_000;

export const LEASE_LOST_EXIT = 3;

export type DaemonState = 'idle' | 'taking' | 'running' | 'stopping' | 'stopped';

export class WorkerDaemon {
  state: DaemonState = 'idle';
  readonly results: Record<JobResult, number> = {
    completed: 0,
    failed: 0,
    released: 0,
    skipped: 0,
    dead_lettered: 0,
    given_up: 0,
    lease_lost: 0,
  };
  private readonly shutdown = new AbortController();
  private spares: SpareKeeper | undefined;
  private standby: RemoteStandby | undefined;
  private readonly outage: OutageWatch;

  constructor(private readonly deps: { config: Config; db: Database; queue: JobQueue; workerId: string; log: Logger }) {
    this.outage = new OutageWatch(deps.log, 'the worker');
  }

  stop(): void {
    if (this.state === 'stopped') return;
    this.deps.log.info({ state: this.state }, 'stop requested');
    this.state = 'stopping';
    this.shutdown.abort();
  }

  /** Runs until stop() or a lost lease; resolves with the exit code. */
  async run(options: { maxJobs?: number } = {}): Promise<number> {
    this.spares = this.keepSpares();
    this.standby = this.keepStandby();
    try {
      return await this.serve(options);
    } finally {
      await Promise.all([this.spares?.stop(), this.standby?.stop()]);
    }
  }

  /** With a checkpoint remote: the runs of other hosts kept fetched ahead (worker/remote/standby.ts). */
  private keepStandby(): RemoteStandby | undefined {
    const { config, db, log } = this.deps;
    if (!config.WORKER_CHECKPOINT_REMOTE) return undefined;
    if (!config.WORKER_REMOTE_STANDBY_MS) {
      void dropStandby(config.WORKER_REPO_ROOT).catch((err) =>
        log.warn({ error: errorMessage(err) }, "could not drop the remote standby's refs"),
      );
      return undefined;
    }
    const standby = new RemoteStandby({
      repoPath: config.WORKER_REPO_ROOT,
      remote: config.WORKER_CHECKPOINT_REMOTE,
      hostId: config.WORKER_HOST_ID,
      intervalMs: config.WORKER_REMOTE_STANDBY_MS,
      timeoutMs: config.WORKER_REMOTE_TIMEOUT_MS,
      admin: db.admin,
      // The spare worktree (when spares are on) is aimed at the run likeliest to be taken over.
      aimSpare: config.WORKER_SPARE_WORKTREE
        ? (aim) =>
            makeSpareWorktree({
              repoPath: config.WORKER_REPO_ROOT,
              worktreeBase: config.WORKER_WORKTREE_BASE,
              aim,
              log,
            })
        : undefined,
      overdueLeftMs: config.WORKER_LEASE_MS - 2 * config.WORKER_HEARTBEAT_MS,
      log,
    });
    standby.start();
    return standby;
  }

  /** The warm spare worktree (worker/worktrees/spare-keeper.ts): made in the background, never in the way. */
  private keepSpares(): SpareKeeper | undefined {
    const { config, log } = this.deps;
    const repo = { repoPath: config.WORKER_REPO_ROOT, worktreeBase: config.WORKER_WORKTREE_BASE, log };
    if (!config.WORKER_SPARE_WORKTREE) {
      void removeSpareWorktrees(repo).catch((err) =>
        log.warn({ error: errorMessage(err) }, 'could not remove the spare worktree'),
      );
      return undefined;
    }
    const keeper = new SpareKeeper({
      worktreeBase: config.WORKER_WORKTREE_BASE,
      log,
      delayMs: SPARE_REPLENISH_DELAY_MS,
    });
    keeper.start(config.WORKER_REPO_ROOT);
    return keeper;
  }

  private async serve(options: { maxJobs?: number }): Promise<number> {
    const { config, queue, log } = this.deps;
    let handled = 0;
    while (!this.shutdown.signal.aborted) {
      this.state = 'taking';
      let delivery;
      try {
        delivery = await queue.take({ timeoutMs: config.WORKER_BLPOP_TIMEOUT_S * 1000, signal: this.shutdown.signal });
      } catch (err) {
        if (await this.waitIfUnreachable(err)) continue;
        log.warn({ error: errorMessage(err) }, 'taking a job failed; retrying');
        await this.pause(1000);
        continue;
      }
      if (!delivery) continue;
      this.state = 'running';
      let result: JobResult;
      try {
        result = await executeDelivery({ ...this.deps, shutdown: this.shutdown.signal }, delivery);
      } catch (err) {
        if (await this.waitIfUnreachable(err)) continue;
        // Outside any claimed run (e.g. the database unreachable while recording): the job stays
        // in Postgres / the queue, and the daemon goes on.
        log.error({ error: errorMessage(err) }, 'job could not be processed; it stays queued');
        await this.pause(1000);
        continue;
      }
      this.results[result]++;
      workerMetrics.runsFinished.inc({ outcome: result });
      if (result === 'lease_lost') workerMetrics.leaseLosses.inc();
      // Another process of this host (a worker, `npm run fork`) may have taken the spare: checked
      // (and made again if so) in the background, after the job.
      this.spares?.want(config.WORKER_REPO_ROOT, SPARE_REPLENISH_DELAY_MS);
      if (result === 'lease_lost') {
        this.state = 'stopped';
        return LEASE_LOST_EXIT;
      }
      // The run was given up or handed back for want of Postgres: nothing is taken until it answers.
      if (result === 'given_up' || result === 'released') await this.waitForDatabase();
      if (this.state === 'running') this.state = 'idle';
      if (options.maxJobs && ++handled >= options.maxJobs) break;
    }
    this.state = 'stopped';
    return 0;
  }

  /** A transient database error: waits for the database (true); anything else is the caller's. */
  private async waitIfUnreachable(err: unknown): Promise<boolean> {
    if (!isTransientDbError(err)) return false;
    this.outage.down(err);
    await this.waitForDatabase();
    return true;
  }

  private async waitForDatabase(): Promise<void> {
    try {
      await waitForDatabase(this.deps.db.admin, this.outage, this.shutdown.signal);
    } catch (err) {
      this.deps.log.warn({ error: errorMessage(err) }, 'database check failed; serving the queue anyway');
    }
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.shutdown.signal.addEventListener(
        'abort',
        () => {
          clearTimeout(timer);
          resolve();
        },
        { once: true },
      );
    });
  }
}
