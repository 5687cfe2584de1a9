// What the Storage page and GET /api/storage show for a workspace: its bytes in Postgres (read in
// one workspace transaction) and, outside it, the git bytes of the runs and convoys shown, all
// measured together (worker/git/git-bytes.ts bounds the git processes a page load starts).
import type { Database } from '../store/connection.ts';
import { convoyBranches, convoyBytes, largestRuns, storagePolicy, workspacePostgresBytes } from '../store/storage.ts';
import { withWorkspace } from '../store/workspace.ts';
import { gitBytesOf, type GitLocation } from '../worker/git/git-bytes.ts';
import { retentionPreview } from '../store/retention.ts';
import type { StorageView } from './pages-storage.ts';

/** Runs listed (and measured in git) per request: the largest, which are what an operator prunes. */
const RUNS_SHOWN = 50;

/** `repoRoot`: WORKER_REPO_ROOT, the repository of runs whose job named none. */
export async function storageView(
  db: Database,
  repoRoot: string | undefined,
  workspaceId: string,
): Promise<StorageView> {
  const read = await withWorkspace(db.app, workspaceId, async (tx) => {
    const policy = await storagePolicy(tx);
    const convoys = await convoyBytes(tx, RUNS_SHOWN);
    const convoyIds = convoys.map((c) => c.convoyId);
    return {
      postgres: await workspacePostgresBytes(tx),
      runs: await largestRuns(tx, RUNS_SHOWN),
      convoys,
      branches: await convoyBranches(tx, convoyIds, repoRoot ?? ''),
      policy,
      preview: policy.keepLast === null ? undefined : await retentionPreview(tx, policy.keepLast, policy.keepDays ?? 0),
    };
  });
  const { branches, ...rest } = read;
  const runSets: GitLocation[][] = read.runs.map((r) => [
    { repoPath: r.repoPath ?? repoRoot ?? '', branch: r.branch, baseOid: r.baseOid },
  ]);
  const convoySets = read.convoys.map((c) => branches.get(c.convoyId) ?? []);
  const bytes = await gitBytesOf([...runSets, ...convoySets]);
  const runs = read.runs.map((run, i) => ({ ...run, gitBytes: bytes[i] ?? null }));
  const convoys = read.convoys.map((convoy, i) => ({ ...convoy, gitBytes: bytes[runSets.length + i] ?? null }));
  const known = runs.filter((r) => r.gitBytes !== null);
  const gitBytes = known.length ? known.reduce((n, r) => n + r.gitBytes!, 0) : null;
  return { workspaceId, ...rest, runs, convoys, gitBytes };
}
