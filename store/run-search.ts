// Finding runs in a workspace of any size: one filtered keyset page at a time, newest first.
// The cursor is the last row's (created_at, id) with created_at in Postgres' own text form, so
// microseconds survive the round trip through the browser and no row is skipped or repeated.
import type { RunStatus } from './runs.ts';
import type { WorkspaceTx } from './workspace.ts';

/** 'stalled': running with its lease expired, not yet re-dispatched by the stall detector. */
export type RunStatusFilter = RunStatus | 'stalled';
export const RUN_STATUS_FILTERS: readonly RunStatusFilter[] = [
  'queued',
  'running',
  'stalled',
  'completed',
  'failed',
  'cancelled',
  'budget_exhausted',
];

export interface RunFilter {
  status?: RunStatusFilter;
  convoy?: string;
  /** Searched in the brief text, brief id, run id, branch, worker and host. */
  q?: string;
  /** Exact matches on the run's own columns (model: the job's model, e.g. anthropic:claude-sonnet-4). */
  worker?: string;
  host?: string;
  model?: string;
  branch?: string;
  createdFrom?: Date;
  createdTo?: Date;
  /** A finished range leaves out runs not finished yet. */
  finishedFrom?: Date;
  finishedTo?: Date;
}

export interface RunListItem {
  agentRunId: string;
  convoyId: string;
  briefId: string;
  status: RunStatus;
  stalled: boolean;
  attempt: number;
  workerId: string | null;
  hostId: string | null;
  branch: string | null;
  model: string | null;
  leaseExpiresAt: Date | null;
  checkpointCount: number;
  lastCheckpointAt: Date | null;
  createdAt: Date;
  finishedAt: Date | null;
}

export interface RunPage {
  runs: RunListItem[];
  /** Pass back to read the next (older) page; null on the last page. */
  cursor: string | null;
}

export const MAX_PAGE = 200;

// The cursor's time is bound as text and cast in SQL: a parameter typed timestamptz would be
// serialized through a JS Date by the driver, losing the microseconds that order ties.
// Every filter is optional: a null parameter switches its predicate off, so one statement
// serves every combination. The page is chosen first and only its runs have their checkpoints
// counted, so a plan that sorts never counts the checkpoints of runs it then drops.
const SEARCH_RUNS_SQL = `
select r.id as agent_run_id, r.convoy_id, r.brief_id, r.status, r.attempt, r.worker_id, r.host_id, r.branch,
       r.model, r.lease_expires_at, r.created_at, r.finished_at, r.created_key, r.stalled,
       cp.checkpoint_count, cp.last_checkpoint_at
  from (
    select r.workspace_id, r.id, r.convoy_id, r.brief_id, r.status, r.attempt, r.worker_id, r.host_id, r.branch,
           r.job->>'model' as model, r.lease_expires_at, r.created_at, r.finished_at,
           r.created_at::text as created_key, (r.status = 'running' and r.lease_expires_at < now()) as stalled
      from agent_runs r
     where r.workspace_id = $1
       and ($2::text is null
            or ($2 = 'stalled' and r.status = 'running' and r.lease_expires_at < now())
            or r.status = $2)
       and ($3::text is null or r.convoy_id = $3)
       and ($4::text is null or r.job->>'brief' ilike $4 or r.brief_id ilike $4 or r.id ilike $4
            or r.branch ilike $4 or r.worker_id ilike $4 or r.host_id ilike $4)
       and ($16::text[] is null or r.id = any($16::text[]))
       and ($5::timestamptz is null or r.created_at >= $5)
       and ($6::timestamptz is null or r.created_at < $6)
       and ($7::text is null or (r.created_at, r.id) < ($7::text::timestamptz, $8::text))
       and ($10::text is null or r.worker_id = $10)
       and ($11::text is null or r.host_id = $11)
       and ($12::text is null or r.job->>'model' = $12)
       and ($13::text is null or r.branch = $13)
       and ($14::timestamptz is null or r.finished_at >= $14)
       and ($15::timestamptz is null or r.finished_at < $15)
     order by r.created_at desc, r.id desc
     limit $9) r
 cross join lateral (
   select count(*)::int as checkpoint_count, max(c.occurred_at) as last_checkpoint_at
     from worker_checkpoints c
    where c.workspace_id = r.workspace_id and c.agent_run_id = r.id) cp
 order by r.created_at desc, r.id desc`;

/**
 * A search term held by at most this many runs is looked up by the trigram index and the page read by
 * those runs' ids; a commoner one is found by walking the newest runs, where matches come soon.
 */
const FEW_MATCHES = 1000;

/** The ids of every run the pattern matches, when they are few; null when they are many. */
async function fewMatches(tx: WorkspaceTx, pattern: string): Promise<string[] | null> {
  const rows = await tx.unsafe<{ id: string }[]>('select echodo_runs_matching($1, $2) as id', [
    pattern,
    FEW_MATCHES + 1,
  ]);
  return rows.length > FEW_MATCHES ? null : rows.map((row) => row.id);
}

/** One page of the workspace's runs matching `filter`, newest first, after `cursor`. */
export async function searchRuns(
  tx: WorkspaceTx,
  filter: RunFilter,
  cursor: string | null,
  limit = 50,
): Promise<RunPage> {
  const size = Math.max(1, Math.min(MAX_PAGE, Math.floor(limit)));
  const after = decodeKeyset(cursor);
  // A plan for these very values: a cached generic plan cannot drop the predicates switched off
  // by nulls, and would sort every run of the workspace instead of walking agent_runs_newest.
  await tx.unsafe('set local plan_cache_mode = force_custom_plan');
  const pattern = filter.q ? `%${likeEscape(filter.q)}%` : null;
  const ids = pattern === null ? null : await fewMatches(tx, pattern);
  const rows = await tx.unsafe(SEARCH_RUNS_SQL, [
    tx.workspaceId,
    filter.status ?? null,
    filter.convoy ?? null,
    ids === null ? pattern : null,
    filter.createdFrom?.toISOString() ?? null,
    filter.createdTo?.toISOString() ?? null,
    after?.createdKey ?? null,
    after?.id ?? null,
    size + 1,
    filter.worker ?? null,
    filter.host ?? null,
    filter.model ?? null,
    filter.branch ?? null,
    filter.finishedFrom?.toISOString() ?? null,
    filter.finishedTo?.toISOString() ?? null,
    ids,
  ]);
  const more = rows.length > size;
  const page = rows.slice(0, size);
  const last = page.at(-1);
  return {
    runs: page.map((row) => ({
      agentRunId: row.agent_run_id,
      convoyId: row.convoy_id,
      briefId: row.brief_id,
      status: row.status,
      stalled: row.stalled,
      attempt: row.attempt,
      workerId: row.worker_id,
      hostId: row.host_id,
      branch: row.branch,
      model: row.model,
      leaseExpiresAt: row.lease_expires_at,
      checkpointCount: row.checkpoint_count,
      lastCheckpointAt: row.last_checkpoint_at,
      createdAt: row.created_at,
      finishedAt: row.finished_at,
    })),
    cursor: more && last ? encodeKeyset(last.created_key, last.agent_run_id) : null,
  };
}

/** `%` and `_` in what the operator typed are literal characters, not patterns. */
export function likeEscape(text: string): string {
  return text.replace(/[\\%_]/g, (ch) => `\\${ch}`);
}

/** timestamptz as Postgres prints it (ISO style); anything else would fail the cast. */
const TIMESTAMP_TEXT = /^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?([+-]\d{2}(:?\d{2})?|Z)?$/;

export function encodeKeyset(createdKey: string, id: string): string {
  return Buffer.from(JSON.stringify([createdKey, id])).toString('base64url');
}

/** A cursor that does not decode is treated as "from the start", never as an error page. */
export function decodeKeyset(cursor: string | null | undefined): { createdKey: string; id: string } | undefined {
  if (!cursor) return undefined;
  try {
    const value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
    if (!Array.isArray(value) || value.length !== 2) return undefined;
    const [createdKey, id] = value as unknown[];
    if (typeof createdKey !== 'string' || typeof id !== 'string' || !TIMESTAMP_TEXT.test(createdKey)) return undefined;
    return { createdKey, id };
  } catch {
    return undefined;
  }
}
