// Which repository a job may name. No repoPath, or WORKER_REPO_ROOT itself: always. Anything else
// must be registered to the job's workspace by the operator (npm run workspace -- repo add), and
// not registered, unshared, to another workspace: otherwise a tenant could name another tenant's
// repository and have its worktree made, its branches read and its objects packed. Checked at
// dispatch and again when a worker claims the run (rows and jobs can bypass dispatch). Paths are
// compared as realpaths, so a symlink or a `..` cannot dress one repository up as another.
import { realpath } from 'node:fs/promises';
import path from 'node:path';
import { EchodoError } from '../../core/errors.ts';
import { repoAccess } from '../../store/grants.ts';
import type { WorkspaceTx } from '../../store/workspace.ts';

export class RepoNotGrantedError extends EchodoError {
  constructor(message: string) {
    super('invalid_job', message);
    this.name = 'RepoNotGrantedError';
  }
}

const notRegistered = (repoPath: string, workspaceId: string) =>
  new RepoNotGrantedError(
    `repoPath: ${repoPath} is not a repository registered to workspace ${workspaceId} ` +
      `(an operator registers it: npm run workspace -- repo add --workspace ${workspaceId} PATH)`,
  );

/**
 * The realpath a job's repoPath must be registered under, or null when it needs no registration
 * (absent, or WORKER_REPO_ROOT). A path that does not resolve is looked up as written: unregistered,
 * it is refused exactly like an existing one (the answer tells a tenant nothing about which paths
 * exist on the host); registered, the run goes on to fail on the missing folder itself.
 */
export async function repoNeedingGrant(repoPath: string | undefined, repoRoot: string): Promise<string | null> {
  if (repoPath === undefined) return null;
  if (path.resolve(repoPath) === path.resolve(repoRoot)) return null;
  const realRoot = await realpath(repoRoot).catch(() => path.resolve(repoRoot));
  const real = await realpath(repoPath).catch(() => path.resolve(repoPath));
  return real === realRoot ? null : real;
}

/** Throws RepoNotGrantedError unless the transaction's workspace may name the repository at realPath. */
export async function assertRepoGranted(tx: WorkspaceTx, repoPath: string, realPath: string): Promise<void> {
  const access = await repoAccess(tx, realPath);
  if (access === 'unregistered') throw notRegistered(repoPath, tx.workspaceId);
  if (access === 'exclusive') {
    throw new RepoNotGrantedError(
      `repoPath: ${repoPath} is registered to another workspace and not shared with ${tx.workspaceId}`,
    );
  }
}
