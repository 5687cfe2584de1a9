// Keeps one warm spare worktree per repository on this host (spares.ts), off the
// critical path: the daemon makes WORKER_REPO_ROOT's at start, and the spare of any repository
// it made a worktree in is made again in the background a little later (not while the run that
// took it is on its first tool call). Failures are logged and never stop the worker.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { errorMessage } from '../../core/errors.ts';
import { withFileLock } from '../../core/file-lock.ts';
import type { Logger } from '../log.ts';
import {
  makeSpareLocked,
  removeSparesLocked,
  setSpareListener,
  settleSpareLocked,
  worktreeLockPath,
  WORKTREE_LOCK_OPTIONS,
  type SpareOutcome,
} from './spares.ts';
import { repoCommonDir } from './worktree.ts';

const LOCK = { ...WORKTREE_LOCK_OPTIONS, what: 'spare worktree' };
/** Past the second boundary: file times come from the kernel's coarse clock, a tick behind at most. */
const SECOND_MARGIN_MS = 20;

/**
 * Makes the repository's spare worktree, or brings the one there to the repository's HEAD (or,
 * for the remote standby, to `aim`: makeSpareLocked). What the daemon calls (and the bench, for
 * a host that has been up).
 */
export async function makeSpareWorktree(args: {
  repoPath: string;
  worktreeBase: string;
  aim?: string | null;
  log: Logger;
}): Promise<SpareOutcome> {
  const commonDir = await repoCommonDir(args.repoPath);
  const lock = worktreeLockPath(commonDir);
  const outcome = await withFileLock(lock, () => makeSpareLocked({ ...args, commonDir }), LOCK);
  if (outcome.path && outcome.checkedOutAt !== undefined) {
    // Racy git (settleSpareLocked): the index is written again in a later second than the
    // checkout's files. Waited for outside the lock, so no take or worktree waits on it.
    await sleep(1000 - (outcome.checkedOutAt % 1000) + SECOND_MARGIN_MS);
    await withFileLock(lock, () => settleSpareLocked({ dir: outcome.path!, commonDir }), LOCK);
  }
  return outcome;
}

/** WORKER_SPARE_WORKTREE=off: the disk a spare held is given back. */
export async function removeSpareWorktrees(args: {
  repoPath: string;
  worktreeBase: string;
  log: Logger;
}): Promise<number> {
  if (!existsSync(args.repoPath)) return 0;
  const commonDir = await repoCommonDir(args.repoPath);
  return withFileLock(worktreeLockPath(commonDir), () => removeSparesLocked({ ...args, commonDir }), LOCK);
}

export class SpareKeeper {
  private readonly wanted = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private working: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly opts: { worktreeBase: string; log: Logger; /** after a worktree was made here */ delayMs: number },
  ) {}

  /** Listens to worktree creation in this process; `repoPath`'s spare is made now. */
  start(repoPath: string): void {
    setSpareListener((repo) => this.want(repo, this.opts.delayMs));
    this.want(repoPath, 0);
  }

  want(repoPath: string, delayMs: number): void {
    if (this.stopped) return;
    this.wanted.add(path.resolve(repoPath));
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.work();
    }, delayMs);
    this.timer.unref();
  }

  private async work(): Promise<void> {
    if (this.working) {
      // One pass at a time; what was wanted meanwhile is picked up right after.
      await this.working;
      if (!this.stopped && this.wanted.size) this.want([...this.wanted][0]!, 0);
      return;
    }
    this.working = (async () => {
      while (this.wanted.size && !this.stopped) {
        const repoPath = [...this.wanted][0]!;
        this.wanted.delete(repoPath);
        if (!existsSync(repoPath)) continue; // a host with no copy yet (the partial clone comes with a run)
        const t0 = performance.now();
        try {
          const r = await makeSpareWorktree({ repoPath, worktreeBase: this.opts.worktreeBase, log: this.opts.log });
          const ms = Math.round(performance.now() - t0);
          this.opts.log.info(
            { repoPath, spare: r.path, action: r.action, repairs: r.repairs, ms },
            'spare worktree ready',
          );
        } catch (err) {
          this.opts.log.warn(
            { repoPath, error: errorMessage(err) },
            'could not make a spare worktree; runs add their worktrees as before',
          );
        }
      }
    })();
    try {
      await this.working;
    } finally {
      this.working = undefined;
    }
  }

  /** No new work; the spare being made (under the lock) is finished, so none is left half made. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    setSpareListener(undefined);
    await this.working;
  }
}
