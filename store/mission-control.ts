// Mission control's read model: what the operator panel shows, each function one round
// trip of plain indexed SQL inside a workspace transaction. Row-level security scopes every
// read; the explicit workspace_id predicates are there so the planner can use the indexes
// that lead with workspace_id (and so a reader sees the scoping without knowing about RLS).
import type { Sql } from 'postgres';
import type { RunStatus } from './runs.ts';
import { decodeKeyset, encodeKeyset, likeEscape, MAX_PAGE, type RunStatusFilter } from './run-search.ts';
import type { WorkspaceTx } from './workspace.ts';

export const RUN_STATUSES: readonly RunStatus[] = ['queued', 'running', 'completed', 'failed', 'cancelled'];

export interface ConvoySummary {
  convoyId: string;
  createdAt: Date;
  runs: Record<RunStatus, number>;
  checkpointCount: number;
  lastCheckpointAt: Date | null;
}

export interface RunSummary {
  agentRunId: string;
  briefId: string;
  status: RunStatus;
  attempt: number;
  workerId: string | null;
  heartbeatAt: Date | null;
  leaseExpiresAt: Date | null;
  step: number;
  checkpointCount: number;
  lastCheckpointAt: Date | null;
  createdAt: Date;
  finishedAt: Date | null;
}

export interface ConvoyDetail {
  convoyId: string;
  createdAt: Date;
  checkpointCount: number;
  lastCheckpointAt: Date | null;
  runs: RunSummary[];
}

const LIST_CONVOYS_SQL = `
select v.id as convoy_id, v.created_at, v.created_at::text as created_key, r.queued, r.running, r.completed, r.failed,
       r.cancelled, r.budget_exhausted,
       cp.checkpoint_count, cp.last_checkpoint_at
  from convoys v
 cross join lateral (
   select count(*) filter (where a.status = 'queued')::int as queued,
          count(*) filter (where a.status = 'running')::int as running,
          count(*) filter (where a.status = 'completed')::int as completed,
          count(*) filter (where a.status = 'failed')::int as failed,
          count(*) filter (where a.status = 'cancelled')::int as cancelled,
          count(*) filter (where a.status = 'budget_exhausted')::int as budget_exhausted
     from agent_runs a
    where a.workspace_id = v.workspace_id and a.convoy_id = v.id) r
 cross join lateral (
   select count(*)::int as checkpoint_count, max(c.occurred_at) as last_checkpoint_at
     from worker_checkpoints c
    where c.workspace_id = v.workspace_id and c.convoy_id = v.id) cp
 where v.workspace_id = $1
   and ($3::text is null or (v.created_at, v.id) < ($3::text::timestamptz, $4::text))
   and ($5::text is null or v.id ilike $5
        or exists (select 1 from agent_runs a
                    where a.workspace_id = v.workspace_id and a.convoy_id = v.id
                      and (a.job->>'brief' ilike $5 or a.brief_id ilike $5)))
   and ($6::text is null
        or exists (select 1 from agent_runs a
                    where a.workspace_id = v.workspace_id and a.convoy_id = v.id
                      and (($6 = 'stalled' and a.status = 'running' and a.lease_expires_at < now()) or a.status = $6)))
 order by v.created_at desc, v.id desc
 limit $2`;

/** Which convoys a list shows: `q` in the convoy id or a run's brief, `status` that of one of its runs at least. */
export interface ConvoyFilter {
  q?: string;
  status?: RunStatusFilter;
}

export interface ConvoyPage {
  convoys: ConvoySummary[];
  /** Pass back to read the next (older) page; null on the last page. */
  cursor: string | null;
}

/** One keyset page of the workspace's convoys, newest first, each with its runs by status and checkpoint totals. */
export async function listConvoys(
  tx: WorkspaceTx,
  cursor: string | null = null,
  limit = 50,
  filter: ConvoyFilter = {},
): Promise<ConvoyPage> {
  const after = decodeKeyset(cursor);
  const size = Math.max(1, Math.min(MAX_PAGE, Math.floor(limit)));
  // As for runs: a generic plan would keep the predicates a null switches off.
  if (filter.q || filter.status) await tx.unsafe('set local plan_cache_mode = force_custom_plan');
  const rows = await tx.unsafe(LIST_CONVOYS_SQL, [
    tx.workspaceId,
    size + 1,
    after?.createdKey ?? null,
    after?.id ?? null,
    filter.q ? `%${likeEscape(filter.q)}%` : null,
    filter.status ?? null,
  ]);
  const page = rows.slice(0, size);
  const last = page.at(-1);
  const next = rows.length > size && last ? encodeKeyset(last.created_key, last.convoy_id) : null;
  return { convoys: page.map(convoySummaryOf), cursor: next };
}

function convoySummaryOf(row: Record<string, any>): ConvoySummary {
  return {
    convoyId: row.convoy_id,
    createdAt: row.created_at,
    // Asserted: the statuses counted are those the schema allows, whatever RunStatus lists today.
    runs: {
      queued: row.queued,
      running: row.running,
      completed: row.completed,
      failed: row.failed,
      cancelled: row.cancelled,
      budget_exhausted: row.budget_exhausted,
    } as Record<RunStatus, number>,
    checkpointCount: row.checkpoint_count,
    lastCheckpointAt: row.last_checkpoint_at,
  };
}

/**
 * One row per run of the convoy (or one row with null run columns when it has none; no
 * rows when the convoy does not exist). Per-run count and last time come from one pass over
 * worker_checkpoints_convoy (workspace_id, convoy_id, agent_run_id, occurred_at): an
 * index-only scan grouped in index order. Exported so the EXPLAIN test checks this very text.
 */
export const CONVOY_DETAIL_SQL = `
with cp as (
  select c.agent_run_id, count(*)::int as checkpoint_count, max(c.occurred_at) as last_checkpoint_at
    from worker_checkpoints c
   where c.workspace_id = $1 and c.convoy_id = $2
   group by c.agent_run_id
), totals as (
  select coalesce(sum(cp.checkpoint_count), 0)::int as total_count, max(cp.last_checkpoint_at) as total_last from cp
)
select v.id as convoy_id, v.created_at as convoy_created_at, t.total_count, t.total_last,
       r.id as agent_run_id, r.brief_id, r.status, r.attempt, r.worker_id, r.heartbeat_at,
       r.lease_expires_at, r.step, r.created_at, r.finished_at,
       coalesce(cp.checkpoint_count, 0) as checkpoint_count, cp.last_checkpoint_at
  from convoys v
 cross join totals t
  left join agent_runs r on r.workspace_id = v.workspace_id and r.convoy_id = v.id
  left join cp on cp.agent_run_id = r.id
 where v.workspace_id = $1 and v.id = $2
 order by r.created_at, r.id`;

/** The convoy's runs with their checkpoint counts and times; undefined when it does not exist in this workspace. */
export async function convoyDetail(tx: WorkspaceTx, convoyId: string): Promise<ConvoyDetail | undefined> {
  const rows = await tx.unsafe(CONVOY_DETAIL_SQL, [tx.workspaceId, convoyId]);
  const first = rows[0];
  if (!first) return undefined;
  return {
    convoyId: first.convoy_id,
    createdAt: first.convoy_created_at,
    checkpointCount: first.total_count,
    lastCheckpointAt: first.total_last,
    runs: rows.filter((row) => row.agent_run_id !== null).map(runSummaryOf),
  };
}

function runSummaryOf(row: Record<string, any>): RunSummary {
  return {
    agentRunId: row.agent_run_id,
    briefId: row.brief_id,
    status: row.status,
    attempt: row.attempt,
    workerId: row.worker_id,
    heartbeatAt: row.heartbeat_at,
    leaseExpiresAt: row.lease_expires_at,
    step: row.step,
    checkpointCount: row.checkpoint_count,
    lastCheckpointAt: row.last_checkpoint_at,
    createdAt: row.created_at,
    finishedAt: row.finished_at,
  };
}

/** tool_history entries are `{round, tool, ...}`; the tools of a checkpoint are those of its own round. */
export function toolsOfRound(toolHistory: unknown[], round: number): string[] {
  const tools: string[] = [];
  for (const entry of toolHistory) {
    if (entry && typeof entry === 'object') {
      const { round: r, tool } = entry as { round?: unknown; tool?: unknown };
      if (r === round && typeof tool === 'string') tools.push(tool);
    }
  }
  return tools;
}

export interface FleetWorkspace {
  workspaceId: string;
  queued: number;
  running: number;
  stalled: number;
  completedLastDay: number;
  failedLastDay: number;
  checkpointsLastMinute: number;
  workers: { workerId: string; lastHeartbeatAt: string | null }[];
}

/**
 * The admin rollup: one row per workspace. It reads across workspaces, so it goes through the
 * security-definer echodo_fleet_summary() on the owner connection, never through withWorkspace.
 */
export async function fleetSummary(admin: Sql): Promise<FleetWorkspace[]> {
  const rows = await admin`select * from echodo_fleet_summary()`;
  return rows.map((r) => ({
    workspaceId: r.workspace_id,
    queued: Number(r.queued),
    running: Number(r.running),
    stalled: Number(r.stalled),
    completedLastDay: Number(r.completed_last_day),
    failedLastDay: Number(r.failed_last_day),
    checkpointsLastMinute: Number(r.checkpoints_last_minute),
    // jsonb timestamps keep Postgres' text form; normalise to ISO like the rest of the API.
    workers: (r.workers as { workerId: string; lastHeartbeatAt: string | null }[]).map((w) => ({
      workerId: w.workerId,
      lastHeartbeatAt: w.lastHeartbeatAt ? new Date(w.lastHeartbeatAt).toISOString() : null,
    })),
  }));
}
