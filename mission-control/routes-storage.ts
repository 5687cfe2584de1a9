// Storage: what a workspace holds in Postgres (per run, per convoy, in total) and in git (per
// run, for the runs shown), with its retention policy and quota. GET /api/storage and /storage.
import type { Hono } from 'hono';
import type { Database } from '../store/connection.ts';
import { convoyBytes, largestRuns, storagePolicy, workspacePostgresBytes } from '../store/storage.ts';
import { withWorkspace } from '../store/workspace.ts';
import { requirePrincipal, workspaceOf } from './auth.ts';
import type { McEnv } from './context.ts';
import { runGitBytes } from './git-bytes.ts';
import { sendPage } from './layout.ts';
import { storageContent, type StorageView } from './pages-storage.ts';

/** Runs listed (and measured in git) per request: the largest, which are what an operator prunes. */
const RUNS_SHOWN = 50;

export function mountStorageRoutes(app: Hono<McEnv>, deps: { db: Database; repoRoot?: string }): void {
  const api = requirePrincipal(deps.db.admin, { surface: 'api', need: 'workspace' });
  const pages = requirePrincipal(deps.db.admin, { surface: 'html', need: 'workspace' });

  async function storageView(workspaceId: string): Promise<StorageView> {
    const read = await withWorkspace(deps.db.app, workspaceId, async (tx) => ({
      postgres: await workspacePostgresBytes(tx),
      runs: await largestRuns(tx, RUNS_SHOWN),
      convoys: await convoyBytes(tx, RUNS_SHOWN),
      policy: await storagePolicy(tx),
    }));
    const runs = await Promise.all(
      read.runs.map(async (run) => ({
        ...run,
        gitBytes: await runGitBytes(run.repoPath ?? deps.repoRoot ?? null, run.branch, run.baseOid),
      })),
    );
    return { workspaceId, ...read, runs };
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
        agentRunId: r.agentRunId, convoyId: r.convoyId, status: r.status, checkpointRows: r.checkpointRows,
        postgresBytes: r.postgresBytes, checkpointBytes: r.checkpointBytes, eventBytes: r.eventBytes,
        gitBytes: r.gitBytes,
      })),
      convoys: view.convoys,
    });
  });

  app.get('/storage', pages, async (c) => {
    const content = storageContent(await storageView(workspaceOf(c)));
    return sendPage(c, { title: 'Storage', who: `workspace ${workspaceOf(c)}`, content });
  });
}
