// What a workspace holds in Postgres, and its storage policy (retention and quota). Bytes are
// pg_column_size of whole rows (their stored, possibly compressed, size): checkpoint rows and
// events per run. Git bytes are measured apart (worker/git/git-bytes.ts); the quota counts both.
import type { WorkspaceTx } from './workspace.ts';

export interface RunBytes {
  agentRunId: string;
  convoyId: string;
  briefId: string;
  status: string;
  checkpointRows: number;
  checkpointBytes: number;
  eventBytes: number;
  /** checkpointBytes + eventBytes */
  postgresBytes: number;
  branch: string | null;
  baseOid: string | null;
  repoPath: string | null;
}

export interface StoragePolicy {
  keepLast: number | null;
  keepDays: number | null;
  quotaBytes: number | null;
  /** What the storage sweep last measured: Postgres and git together. */
  usedBytes: number | null;
  /** The git part of usedBytes. */
  gitBytes: number | null;
  measuredAt: Date | null;
}

const LARGEST_RUNS_SQL = `
select r.id as agent_run_id, r.convoy_id, r.brief_id, r.status, r.branch, r.base_oid, r.job->>'repoPath' as repo_path,
       cp.rows as checkpoint_rows, cp.bytes as checkpoint_bytes, ev.bytes as event_bytes
  from agent_runs r
 cross join lateral (
   select count(*)::int as rows, coalesce(sum(pg_column_size(c.*)), 0)::bigint as bytes
     from worker_checkpoints c where c.workspace_id = r.workspace_id and c.agent_run_id = r.id) cp
 cross join lateral (
   select coalesce(sum(pg_column_size(e.*)), 0)::bigint as bytes
     from convoy_events e where e.workspace_id = r.workspace_id and e.agent_run_id = r.id) ev
 where r.workspace_id = $1
 order by cp.bytes + ev.bytes desc, r.id
 limit $2`;

/** The workspace's runs by the bytes they hold in Postgres, largest first. */
export async function largestRuns(tx: WorkspaceTx, limit = 100): Promise<RunBytes[]> {
  const rows = await tx.unsafe(LARGEST_RUNS_SQL, [tx.workspaceId, limit]);
  return rows.map((row) => ({
    agentRunId: row.agent_run_id,
    convoyId: row.convoy_id,
    briefId: row.brief_id,
    status: row.status,
    checkpointRows: row.checkpoint_rows,
    checkpointBytes: Number(row.checkpoint_bytes),
    eventBytes: Number(row.event_bytes),
    postgresBytes: Number(row.checkpoint_bytes) + Number(row.event_bytes),
    branch: row.branch,
    baseOid: row.base_oid,
    repoPath: row.repo_path,
  }));
}

const WORKSPACE_BYTES_SQL = `
select (select coalesce(sum(pg_column_size(c.*)), 0)
          from worker_checkpoints c where c.workspace_id = $1)::bigint as checkpoints,
       (select coalesce(sum(pg_column_size(e.*)), 0) from convoy_events e where e.workspace_id = $1)::bigint as events,
       (select coalesce(sum(pg_column_size(r.*)), 0) from agent_runs r where r.workspace_id = $1)::bigint as runs`;

export interface PostgresBytes {
  checkpoints: number;
  events: number;
  runs: number;
  total: number;
}

/** The workspace's bytes in Postgres: checkpoint rows, events and run rows. */
export async function workspacePostgresBytes(tx: WorkspaceTx): Promise<PostgresBytes> {
  const [row] = await tx.unsafe(WORKSPACE_BYTES_SQL, [tx.workspaceId]);
  const [checkpoints, events, runs] = [Number(row!.checkpoints), Number(row!.events), Number(row!.runs)];
  return { checkpoints, events, runs, total: checkpoints + events + runs };
}

const RUN_BRANCHES_SQL = `
select coalesce(r.job->>'repoPath', $2) as repo_path, r.branch, r.base_oid
  from agent_runs r where r.workspace_id = $1 and r.branch is not null`;

/** Where the workspace's runs keep their git bytes: repository, branch and the commit it started from. */
export async function runBranches(
  tx: WorkspaceTx,
  defaultRepoPath: string,
): Promise<{ repoPath: string; branch: string; baseOid: string | null }[]> {
  const rows = await tx.unsafe(RUN_BRANCHES_SQL, [tx.workspaceId, defaultRepoPath]);
  return rows.map((r) => ({ repoPath: r.repo_path, branch: r.branch, baseOid: r.base_oid }));
}

const CONVOY_BYTES_SQL = `
select x.convoy_id, sum(x.rows)::int as rows, sum(x.bytes)::bigint as bytes
  from (select c.convoy_id, count(*) as rows, sum(pg_column_size(c.*)) as bytes
          from worker_checkpoints c where c.workspace_id = $1 group by c.convoy_id
        union all
        select e.convoy_id, 0, sum(pg_column_size(e.*))
          from convoy_events e where e.workspace_id = $1 group by e.convoy_id) x
 group by x.convoy_id
 order by bytes desc, x.convoy_id
 limit $2`;

/** Postgres bytes per convoy (its checkpoint rows and events), largest first. */
export interface ConvoyBytes {
  convoyId: string;
  checkpointRows: number;
  bytes: number;
}

export async function convoyBytes(tx: WorkspaceTx, limit = 100): Promise<ConvoyBytes[]> {
  const rows = await tx.unsafe(CONVOY_BYTES_SQL, [tx.workspaceId, limit]);
  return rows.map((r) => ({ convoyId: r.convoy_id, checkpointRows: r.rows, bytes: Number(r.bytes) }));
}

const STORAGE_POLICY_SQL = `
select p.keep_last, p.keep_days, p.quota_bytes, p.used_bytes, p.git_bytes, p.measured_at
  from workspace_storage_policies p where p.workspace_id = $1`;

/** The workspace's policy; every field null when none was set. */
export async function storagePolicy(tx: WorkspaceTx): Promise<StoragePolicy> {
  const [row] = await tx.unsafe(STORAGE_POLICY_SQL, [tx.workspaceId]);
  const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));
  return {
    keepLast: num(row?.keep_last),
    keepDays: num(row?.keep_days),
    quotaBytes: num(row?.quota_bytes),
    usedBytes: num(row?.used_bytes),
    gitBytes: num(row?.git_bytes),
    measuredAt: row?.measured_at ?? null,
  };
}

const SET_RETENTION_SQL = `
insert into workspace_storage_policies (workspace_id, keep_last, keep_days) values ($1, $2, $3)
on conflict (workspace_id) do update
   set keep_last = excluded.keep_last, keep_days = excluded.keep_days, updated_at = now()`;

/** Keep the last `keepLast` checkpoints of finished runs older than `keepDays` days (null: no such rule). */
export async function setRetention(tx: WorkspaceTx, keepLast: number | null, keepDays: number | null): Promise<void> {
  await tx.unsafe(SET_RETENTION_SQL, [tx.workspaceId, keepLast, keepDays]);
}

const SET_QUOTA_SQL = `
insert into workspace_storage_policies (workspace_id, quota_bytes) values ($1, $2)
on conflict (workspace_id) do update set quota_bytes = excluded.quota_bytes, updated_at = now()`;

export async function setQuota(tx: WorkspaceTx, bytes: number | null): Promise<void> {
  await tx.unsafe(SET_QUOTA_SQL, [tx.workspaceId, bytes]);
}

const RECORD_USAGE_SQL = `
update workspace_storage_policies set used_bytes = $2, git_bytes = $3, measured_at = now() where workspace_id = $1`;

/** What the sweep measured (Postgres and git together, and the git part): runs start only under the quota. */
export async function recordUsage(tx: WorkspaceTx, usedBytes: number, gitBytes: number): Promise<void> {
  await tx.unsafe(RECORD_USAGE_SQL, [tx.workspaceId, usedBytes, gitBytes]);
}

export interface OverQuota {
  usedBytes: number;
  quotaBytes: number;
  gitBytes: number | null;
  measuredAt: Date | null;
}

const OVER_QUOTA_SQL = `
select p.used_bytes, p.quota_bytes, p.git_bytes, p.measured_at from workspace_storage_policies p
 where p.workspace_id = $1 and p.quota_bytes is not null and p.used_bytes > p.quota_bytes`;

/** Set when the last measure was over the quota: no run starts until a prune brings it under. */
export async function overQuota(tx: WorkspaceTx): Promise<OverQuota | undefined> {
  const [row] = await tx.unsafe(OVER_QUOTA_SQL, [tx.workspaceId]);
  return (
    row && {
      usedBytes: Number(row.used_bytes),
      quotaBytes: Number(row.quota_bytes),
      gitBytes: row.git_bytes === null ? null : Number(row.git_bytes),
      measuredAt: row.measured_at ?? null,
    }
  );
}

const CONVOY_BRANCHES_SQL = `
select r.convoy_id, coalesce(r.job->>'repoPath', $3) as repo_path, r.branch, r.base_oid
  from agent_runs r where r.workspace_id = $1 and r.convoy_id = any($2::text[]) and r.branch is not null`;

/** Where the runs of these convoys keep their git bytes, by convoy. */
export async function convoyBranches(
  tx: WorkspaceTx,
  convoyIds: string[],
  defaultRepoPath: string,
): Promise<Map<string, { repoPath: string; branch: string; baseOid: string | null }[]>> {
  const byConvoy = new Map<string, { repoPath: string; branch: string; baseOid: string | null }[]>();
  if (!convoyIds.length) return byConvoy;
  const rows = await tx.unsafe(CONVOY_BRANCHES_SQL, [tx.workspaceId, convoyIds, defaultRepoPath]);
  for (const r of rows) {
    const loc = { repoPath: r.repo_path as string, branch: r.branch as string, baseOid: r.base_oid as string | null };
    byConvoy.set(r.convoy_id, [...(byConvoy.get(r.convoy_id) ?? []), loc]);
  }
  return byConvoy;
}
