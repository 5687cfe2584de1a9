// Named fault points, like DBOS's debugpoint: tests set ECHODO_FAULT=<name>[@<hit>] and the
// process kills itself with SIGKILL the <hit>-th time (default 1st) it passes that point.
// Unset, a fault point is one Map lookup on an empty map.

export type FaultPoint =
  | 'after-take' // a job taken from the queue, not yet claimed
  | 'after-branch-claim' // the run's branch claimed in Postgres, the worktree not yet made
  | 'after-claim'
  | 'after-content-commit' // checkpoint commit written, row not yet inserted
  | 'after-checkpoint-row' // row inserted, note not yet written
  | 'before-push' // checkpoint commit written, not yet pushed to WORKER_CHECKPOINT_REMOTE
  | 'after-push' // commit (and notes so far) on the remote, row not yet inserted
  | 'after-note'
  | 'mid-write-file' // temp file written, not yet renamed into place
  | 'during-command'
  | 'during-model-call'
  | 'before-tool-call'
  | 'after-worktree-admin' // `git worktree add --no-checkout` done (admin folder, .git file), not yet checked out
  | 'after-worktree-checkout' // worktree checked out (index written), not yet recorded
  | 'after-spare-admin' // a spare worktree's `git worktree add --no-checkout` done, not yet checked out
  | 'after-spare-checkout' // a spare worktree checked out and its index settled: complete
  | 'after-spare-move' // a spare taken: its index set aside, its folder renamed to the run's path, admin pointer not yet fixed
  | 'before-branch-recorded' // worktree ready, branch and path not yet recorded on the run in Postgres
  | 'after-cancel-request' // a cancel seen and the last round checkpointed, the run not yet marked cancelled
  | 'before-remote-prune' // prune: the run's refs on the checkpoint remote not yet pruned, its rows not yet deleted
  | 'after-remote-prune' // prune: the run's refs on the remote pruned, its rows not yet deleted
  | 'after-notes-prune' // prune: the pruned checkpoints' notes removed from WORKER_NOTES_REF, the rows not yet deleted
  | 'after-admission'; // dispatch/retry: the run recorded or re-dispatched in Postgres, the doorbell not yet rung

const armed = new Map<string, number>();
for (const spec of (process.env.ECHODO_FAULT ?? '').split(',').filter(Boolean)) {
  const [name, hit] = spec.split('@');
  armed.set(name!, Number(hit ?? 1));
}

export function faultPoint(name: FaultPoint): void {
  if (armed.size === 0) return;
  const remaining = armed.get(name);
  if (remaining === undefined) return;
  if (remaining > 1) {
    armed.set(name, remaining - 1);
    return;
  }
  process.stderr.write(`echodo: fault point ${name} reached, SIGKILL\n`);
  process.kill(process.pid, 'SIGKILL');
}

/** Whether the next faultPoint(name) kills: for a step another process performs up to that point. */
export function faultArmed(name: FaultPoint): boolean {
  return armed.get(name) === 1;
}

/** For injected I/O faults (ENOSPC) rather than kills: ECHODO_FAULT_ERRNO=<point>:<code>. */
export function injectedErrno(name: string): NodeJS.ErrnoException | undefined {
  const spec = process.env.ECHODO_FAULT_ERRNO;
  if (!spec) return undefined;
  const [point, code] = spec.split(':');
  if (point !== name || !code) return undefined;
  const err: NodeJS.ErrnoException = new Error(`${code}: injected at fault point ${name}`);
  err.code = code;
  return err;
}
