// Storage: what a workspace holds in Postgres (per run, per convoy, in total) and in git (per
// run and per convoy, for those shown), with its retention policy and quota. GET /api/storage and
// /storage.
import type { Hono } from 'hono';
import type { Database } from '../store/connection.ts';
import { requirePrincipal, workspaceOf } from './auth.ts';
import type { McEnv } from './context.ts';
import { sendPage } from './layout.ts';
import { storageContent } from './pages-storage.ts';
import { storageView } from './storage-view.ts';
import { applyStoragePolicy, type StorageSweepDeps } from '../operator/storage-sweep.ts';
import { isConfirmed, sendConfirmation } from './confirm.ts';
import { isReadOnly, mayWrite, pageCsrfToken } from './routes-actions.ts';
import type { McContext } from './context.ts';
import { formatBytes } from './pages-storage.ts';

export function mountStorageRoutes(
  app: Hono<McEnv>,
  deps: { db: Database; repoRoot?: string; sweep: Omit<StorageSweepDeps, 'db'> },
): void {
  const api = requirePrincipal(deps.db.admin, { surface: 'api', need: 'workspace' });
  const pages = requirePrincipal(deps.db.admin, { surface: 'html', need: 'workspace' });

  const viewOf = (workspaceId: string) => storageView(deps.db, deps.repoRoot, workspaceId);

  app.get('/api/storage', api, async (c) => {
    const view = await viewOf(workspaceOf(c));
    return c.json({
      workspaceId: view.workspaceId,
      postgresBytes: view.postgres.total,
      postgres: view.postgres,
      gitBytes: view.gitBytes,
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
      const view = await viewOf(workspaceId);
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
    const content = storageContent(await viewOf(workspaceOf(c)), csrfOf(c));
    return sendPage(c, { title: 'Storage', who: `workspace ${workspaceOf(c)}`, content });
  });
}
