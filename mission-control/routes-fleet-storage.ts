// The admin's fleet-wide storage: GET /fleet/storage (the page) and GET /api/fleet/storage.
import type { Hono } from 'hono';
import type { Database } from '../store/connection.ts';
import { fleetStorage } from '../store/fleet-storage.ts';
import type { McEnv } from './context.ts';
import { adminOnly } from './routes-admin.ts';
import { sendPage } from './layout.ts';
import { formatBytes } from './pages-storage.ts';
import { html, timeCell } from './html.ts';

export function mountFleetStorageRoutes(app: Hono<McEnv>, db: Database): void {
  const { api, pages } = adminOnly(db, 'Fleet storage');

  app.get('/api/fleet/storage', api, async (c) => {
    const s = await fleetStorage(db.admin);
    return c.json({
      postgresBytes: s.disk.total,
      disk: s.disk,
      workspaces: s.workspaces.map((w) => ({ ...w, measuredAt: w.measuredAt?.toISOString() ?? null })),
    });
  });

  app.get('/fleet/storage', pages, async (c) => {
    const s = await fleetStorage(db.admin);
    const rows = s.workspaces.map((w) => {
      const over = w.quotaBytes !== null && w.usedBytes !== null && w.usedBytes > w.quotaBytes;
      return html`<tr data-workspace-id="${w.workspaceId}">
        <td><strong>${w.workspaceId}</strong></td>
        <td class="num">${w.checkpointRows}</td>
        <td class="num" data-bytes="${w.usedBytes ?? ''}">${formatBytes(w.usedBytes)}</td>
        <td class="num">
          ${formatBytes(w.quotaBytes)}${over ? html` <span class="badge stalled">over quota</span>` : ''}
        </td>
        <td>${timeCell(w.measuredAt)}</td>
      </tr>`;
    });
    const content = html`<nav class="crumbs"><a href="/fleet">Fleet</a> / storage</nav>
      <h1>Fleet storage</h1>
      <section class="cards">
        <div class="card primary">
          <div class="label">Postgres, every workspace</div>
          <div class="value small" data-testid="fleet-storage-total" data-bytes="${s.disk.total}">
            ${formatBytes(s.disk.total)}
          </div>
          <div class="muted">
            checkpoints ${formatBytes(s.disk.checkpoints)} · events ${formatBytes(s.disk.events)} · runs
            ${formatBytes(s.disk.runs)} (on disk, indexes included)
          </div>
        </div>
      </section>
      <h2>Workspaces</h2>
      <table data-testid="fleet-storage">
        <thead>
          <tr>
            <th>Workspace</th>
            <th>Checkpoints</th>
            <th>Used (last sweep)</th>
            <th>Quota</th>
            <th>Measured</th>
          </tr>
        </thead>
        <tbody>
          ${rows}
        </tbody>
      </table>`;
    return sendPage(c, { title: 'Fleet storage', who: 'admin', content });
  });
}
