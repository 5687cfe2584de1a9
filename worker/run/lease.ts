// The run's lease: heartbeats push lease_expires_at forward while lease_epoch is ours.
// A worker whose last successful heartbeat is older than its lease stops itself before it
// touches the worktree again: it may have been paused (SIGSTOP, a VM freeze) or cut off,
// and another worker may already own the run.
// Why the lease was lost decides what the process does next (lossCause): a worker cut off from
// Postgres gives the run up and goes on serving; a paused one, or one fenced off while it was in
// contact (an invariant broke), is itself suspect and exits.
import type { Sql } from 'postgres';
import { LeaseLostError } from '../../core/errors.ts';
import type { Logger } from '../log.ts';
import { heartbeatWithCancel, leaseView } from '../../store/operator-actions.ts';
import { withWorkspace } from '../../store/workspace.ts';
import { retryTransient } from '../../store/transient-retry.ts';

/**
 * - `paused`: the process itself did not run for half a lease or more (SIGSTOP, a frozen VM).
 * - `cut_off`: heartbeats went out on time and Postgres did not answer them.
 * - `fenced`: the epoch moved on while heartbeats were being answered: an invariant broke.
 */
export type LeaseLossCause = 'paused' | 'cut_off' | 'fenced';

export class Lease {
  private lastOkAt = performance.now();
  /** When the heartbeat timer last fired: a long gap means the process was not running. */
  private lastTickAt = performance.now();
  private longestGapMs = 0;
  /** Heartbeats and fencing checks since the last success that failed or were still unanswered. */
  private unanswered = 0;
  private inFlight = 0;
  private cause: LeaseLossCause | undefined;
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
    this.unanswered = 0;
    this.longestGapMs = 0;
  }

  /** Why the lease was lost (undefined while it is held). */
  get lossCause(): LeaseLossCause | undefined {
    return this.cause;
  }

  /** The cause of a loss seen now, by this lease or elsewhere (a completion's compare-and-set). */
  classifyLoss(): LeaseLossCause {
    if (this.cause) return this.cause;
    const gapMs = Math.max(this.longestGapMs, performance.now() - this.lastTickAt);
    if (gapMs >= Math.max(this.options.leaseMs / 2, 2 * this.options.heartbeatMs)) return 'paused';
    return this.unanswered > 0 ? 'cut_off' : 'fenced';
  }

  private markLost(reason: string): void {
    if (this.lost) return;
    this.cause = this.classifyLoss();
    this.lost = new LeaseLostError(`run ${this.agentRunId}: ${reason}`);
    this.options.log.warn({ epoch: this.epoch, cause: this.cause }, this.lost.message);
    this.stop();
    this.controller.abort(this.lost);
  }

  private noteTick(): void {
    const now = performance.now();
    this.longestGapMs = Math.max(this.longestGapMs, now - this.lastTickAt);
    this.lastTickAt = now;
    if (this.inFlight > 0) this.unanswered++; // the previous heartbeat is still waiting for Postgres
  }

  private async beat(): Promise<void> {
    if (this.lost) return;
    try {
      this.assertFresh(); // after a pause: lost, and nothing more is written
      this.noteTick();
      this.inFlight++;
      const view = await withWorkspace(this.sql, this.workspaceId, (tx) =>
        heartbeatWithCancel(tx, { agentRunId: this.agentRunId, leaseEpoch: this.epoch, leaseMs: this.options.leaseMs }),
      ).finally(() => this.inFlight--);
      const ok = view.held;
      this.noteCancel(view.cancelRequestedBy);
      if (ok) this.renewed();
      else this.markLost(`lease epoch ${this.epoch} is no longer current (taken over or finished)`);
    } catch (err) {
      if (this.lost) return;
      this.unanswered++;
      // A database blip: keep trying; assertFresh() stops us if it outlasts the lease.
      this.options.log.warn({ error: (err as Error).message }, 'heartbeat failed; will retry');
    }
  }

  /** Local check, no I/O: throws if the lease was lost or may have expired unnoticed. */
  assertFresh(): void {
    if (!this.lost && performance.now() - this.lastOkAt > this.options.leaseMs) {
      this.markLost(
        `no successful heartbeat for ${Math.round(performance.now() - this.lastOkAt)} ms (lease ${this.options.leaseMs} ms); stopping before touching anything`,
      );
    }
    if (this.lost) throw this.lost;
  }

  /** The fencing check before a tool call: local freshness, then the epoch in Postgres. */
  async assertHeld(): Promise<void> {
    this.assertFresh();
    const view = await retryTransient(() =>
      withWorkspace(this.sql, this.workspaceId, (tx) =>
        leaseView(tx, { agentRunId: this.agentRunId, leaseEpoch: this.epoch }),
      ),
    ).catch((err: unknown) => {
      this.unanswered++;
      throw err;
    });
    const ok = view.held;
    this.noteCancel(view.cancelRequestedBy);
    if (!ok) this.markLost(`lease epoch ${this.epoch} is no longer current (taken over or finished)`);
    this.assertFresh();
  }

  get isLost(): boolean {
    return this.lost !== undefined;
  }
}
