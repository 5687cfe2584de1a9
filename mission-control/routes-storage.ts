// Storage: what a workspace holds in Postgres (per run, per convoy, in total) and in git (per
// run and per convoy, for those shown), with its retention policy and quota. GET /api/storage and
// /storage.
import type { Hono } from 'hono';
import type { Database } from '../store/connection.ts';
import { convoyBranches, convoyBytes, largestRuns, storagePolicy, workspacePostgresBytes } from '../store/storage.ts';
import { withWorkspace } from '../store/workspace.ts';
import { requirePrincipal, workspaceOf } from './auth.ts';
import type { McEnv } from './context.ts';
import { branchesGitBytes, runGitBytes } from '../worker/git/git-bytes.ts';
import { sendPage } from './layout.ts';
import { storageContent, type StorageView } from './pages-storage.ts';
import { applyStoragePolicy, type StorageSweepDeps } from '../operator/storage-sweep.ts';
import { retentionPreview } from '../store/retention.ts';
import { isConfirmed, sendConfirmation } from './confirm.ts';
import { isReadOnly, mayWrite, pageCsrfToken } from './routes-actions.ts';
import type { McContext } from './context.ts';
import { formatBytes } from './pages-storage.ts';

/** Runs listed (and measured in git) per request: the largest, which are what an operator prunes. */
const RUNS_SHOWN = 50;

export function mountStorageRoutes(
  app: Hono<McEnv>,
  deps: { db: Database; repoRoot?: string; sweep: Omit<StorageSweepDeps, 'db'> },
): void {
  const api = requirePrincipal(deps.db.admin, { surface: 'api', need: 'workspace' });
  const pages = requirePrincipal(deps.db.admin, { surface: 'html', need: 'workspace' });

  async function storageView(workspaceId: string): Promise<StorageView> {
    const read = await withWorkspace(deps.db.app, workspaceId, async (tx) => {
      const policy = await storagePolicy(tx);
      const convoys = await convoyBytes(tx, RUNS_SHOWN);
      const convoyIds = convoys.map((c) => c.convoyId);
      return {
        postgres: await workspacePostgresBytes(tx),
        runs: await largestRuns(tx, RUNS_SHOWN),
        convoys,
        branches: await convoyBranches(tx, convoyIds, deps.repoRoot ?? ''),
        policy,
        preview:
          policy.keepLast === null ? undefined : await retentionPreview(tx, policy.keepLast, policy.keepDays ?? 0),
      };
    });
    const runs = await Promise.all(
      read.runs.map(async (run) => ({
        ...run,
        gitBytes: await runGitBytes(run.repoPath ?? deps.repoRoot ?? null, run.branch, run.baseOid),
      })),
    );
    const { branches, ...rest } = read;
    const convoys = await Promise.all(
      read.convoys.map(async (convoy) => ({
        ...convoy,
        gitBytes: await branchesGitBytes(branches.get(convoy.convoyId) ?? []),
      })),
    );
    return { workspaceId, ...rest, runs, convoys };
  }

  app.get('/api/storage', api, async (c) => {
    const view = await storageView(workspaceOf(c));
    return c.json({
      workspaceId: view.workspaceId,
      postgresBytes: view.postgres.total,
      postgres: view.postgres,
      gitBytes: view.runs.reduce((n, r) => n + (r.gitBytes ?? 0), 0),
      policy: { ...view.policy, measuredAt: view.policy.measuredAt?.toISOString() ?? null },
      runs: view.runs.map((r) => ({
        agentRunId: r.agentRunId,
        convoyId: r.convoyId,
        status: r.status,
        checkpointRows: r.checkpointRows,
        postgresBytes: r.postgresBytes,
        checkpointBytes: r.checkpointBytes,
        eventBytes: r.eventBytes,
        gitBytes: r.gitBytes,
      })),
      convoys: view.convoys,
    });
  });

  /** The Prune form carries the session's CSRF token; a read-only token gets none. */
  const csrfOf = (c: McContext) => {
    const csrf = pageCsrfToken(c);
    return csrf && !isReadOnly(c.get('principal')) ? csrf : undefined;
  };

  // Prune now: the policy applied at once to this workspace, after a confirmation naming what goes.
  app.post('/storage/prune', pages, mayWrite('html'), async (c) => {
    const form = (await c.req.parseBody()) as Record<string, unknown>;
    const workspaceId = workspaceOf(c);
    if (!isConfirmed(form)) {
      const view = await storageView(workspaceId);
      const what = view.preview
        ? `${view.preview.rows} checkpoints of ${view.preview.runs} runs ` +
          `(${formatBytes(view.preview.bytes)} in Postgres)`
        : 'nothing: no retention policy is set';
      return sendConfirmation(c, `workspace ${workspaceId}`, {
        title: 'Prune now?',
        consequence:
          `This removes ${what}; each run keeps its last checkpoints and an anchor, ` + 'so its chain still verifies.',
        action: '/storage/prune',
        csrf: pageCsrfToken(c) ?? '',
        back: '/storage',
        button: 'Yes, prune',
      });
    }
    await applyStoragePolicy({ db: deps.db, ...deps.sweep }, workspaceId);
    return c.redirect('/storage', 303);
  });

  app.get('/storage', pages, async (c) => {
    const content = storageContent(await storageView(workspaceOf(c)), csrfOf(c));
    return sendPage(c, { title: 'Storage', who: `workspace ${workspaceOf(c)}`, content });
  });
}
