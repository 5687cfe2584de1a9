// The run's lease: heartbeats push lease_expires_at forward while lease_epoch is ours.
// A worker whose last successful heartbeat is older than its lease stops itself before it
// touches the worktree again: it may have been paused (SIGSTOP, a VM freeze) or cut off,
// and another worker may already own the run.
import type { Sql } from 'postgres';
import { LeaseLostError } from '../core/errors.ts';
import type { Logger } from './log.ts';
import { heartbeatWithCancel, leaseView } from '../store/operator-actions.ts';
import { withWorkspace } from '../store/workspace.ts';
import { retryTransient } from '../store/retry.ts';

export class Lease {
  private lastOkAt = performance.now();
  private timer: NodeJS.Timeout | undefined;
  private lost: LeaseLostError | undefined;
  readonly lostSignal: AbortSignal;
  private readonly controller = new AbortController();
  /** Aborts (reason: who asked) when an operator asks to cancel the run: seen at a heartbeat or a fencing check. */
  readonly cancelSignal: AbortSignal;
  private readonly cancelController = new AbortController();

  constructor(
    private readonly sql: Sql,
    readonly workspaceId: string,
    readonly agentRunId: string,
    readonly epoch: number,
    private readonly options: { heartbeatMs: number; leaseMs: number; log: Logger },
  ) {
    this.lostSignal = this.controller.signal;
    this.cancelSignal = this.cancelController.signal;
  }

  /** Who asked for the cancel, once one was seen. */
  get cancelRequestedBy(): string | undefined {
    return this.cancelSignal.aborted ? String(this.cancelSignal.reason) : undefined;
  }

  private noteCancel(by: string | null): void {
    if (by !== null && !this.cancelSignal.aborted) this.cancelController.abort(by);
  }

  start(): void {
    this.timer = setInterval(() => void this.beat(), this.options.heartbeatMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Marks a successful lease renewal done elsewhere (a checkpoint renews it too). */
  renewed(): void {
    this.lastOkAt = performance.now();
  }

  private markLost(reason: string): void {
    if (this.lost) return;
    this.lost = new LeaseLostError(`run ${this.agentRunId}: ${reason}`);
    this.options.log.warn({ epoch: this.epoch }, this.lost.message);
    this.stop();
    this.controller.abort(this.lost);
  }

  private async beat(): Promise<void> {
    if (this.lost) return;
    try {
      this.assertFresh(); // after a pause: lost, and nothing more is written
      const view = await withWorkspace(this.sql, this.workspaceId, (tx) =>
        heartbeatWithCancel(tx, { agentRunId: this.agentRunId, leaseEpoch: this.epoch, leaseMs: this.options.leaseMs }),
      );
      const ok = view.held;
      this.noteCancel(view.cancelRequestedBy);
      if (ok) this.renewed();
      else this.markLost(`lease epoch ${this.epoch} is no longer current (taken over or finished)`);
    } catch (err) {
      if (this.lost) return;
      // A database blip: keep trying; assertFresh() stops us if it outlasts the lease.
      this.options.log.warn({ error: (err as Error).message }, 'heartbeat failed; will retry');
    }
  }

  /** Local check, no I/O: throws if the lease was lost or may have expired unnoticed. */
  assertFresh(): void {
    if (!this.lost && performance.now() - this.lastOkAt > this.options.leaseMs) {
      this.markLost(`no successful heartbeat for ${Math.round(performance.now() - this.lastOkAt)} ms (lease ${this.options.leaseMs} ms); stopping before touching anything`);
    }
    if (this.lost) throw this.lost;
  }

  /** The fencing check before a tool call: local freshness, then the epoch in Postgres. */
  async assertHeld(): Promise<void> {
    this.assertFresh();
    const view = await retryTransient(() =>
      withWorkspace(this.sql, this.workspaceId, (tx) => leaseView(tx, { agentRunId: this.agentRunId, leaseEpoch: this.epoch })),
    );
    const ok = view.held;
    this.noteCancel(view.cancelRequestedBy);
    if (!ok) this.markLost(`lease epoch ${this.epoch} is no longer current (taken over or finished)`);
    this.assertFresh();
  }

  get isLost(): boolean {
    return this.lost !== undefined;
  }
}
