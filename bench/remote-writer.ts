// A size's remote setup, and the run's checkpoint writer with that remote, as a worker builds it:
// shared by the many-hosts benches (remote.ts, remote-resume.ts).
import { parseConfig } from '../core/config.ts';
import { checkpointWriterFor, type CheckpointWriter } from '../worker/checkpoints/writer.ts';
import { RemotePusher, runNotesRef } from '../worker/remote/push.ts';
import type { BenchEnv } from './env.ts';
import { silentLog, type RunFixture } from './fixture.ts';

/** A size's remote and host A's repository. */
export interface RemoteSetup {
  files: number;
  pristine: string;
  /** The bare repository the server serves, and its URL there. */
  remoteDir: string;
  url: string;
  repoPackedBytes: number;
  hostA: string;
}

/**
 * The run's writer with the remote, built as worker/run/execute.ts builds it; the fixture's own writer (no
 * remote) is left unused. `onPush` wraps each push (to time it).
 */
export function remoteWriter(
  env: BenchEnv,
  f: RunFixture,
  url: string,
  onPush?: (push: () => Promise<void>) => Promise<void>,
): CheckpointWriter {
  const notesRef = runNotesRef(f.identity.workspaceId, f.identity.agentRunId);
  const pusher = new RemotePusher({
    cwd: f.worktree,
    remote: url,
    branch: f.branch,
    notesRef,
    assertHeld: () => f.lease.assertHeld(),
    log: silentLog,
  });
  if (onPush) {
    const push = pusher.pushCheckpoint.bind(pusher);
    pusher.pushCheckpoint = (oid) => onPush(() => push(oid));
  }
  const config = parseConfig({ ...env.childEnv, LOG_LEVEL: 'silent' });
  return checkpointWriterFor(
    config,
    {
      sql: env.db.app,
      run: f.identity,
      lease: f.lease,
      tree: { root: f.worktree, git: { branch: f.branch, worktreePath: f.worktree } },
      tracker: f.tracker,
      leaseMs: 3_600_000,
      log: silentLog,
      remote: { pusher, notesRef },
    },
    f.writer.state,
  );
}
