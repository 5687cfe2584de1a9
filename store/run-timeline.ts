// A run's page, read in parts that each cost the same whatever the run's length: the run's
// own row, one page of its checkpoints (newest first, keyset on checkpoint_seq) and the
// events that fall among them. The chain verdict comes from store/chain-verdict.ts.
import type { FileTouched } from '../core/checkpoint-hash.ts';
import type { RunStatus } from './runs.ts';
import type { WorkspaceTx } from './workspace.ts';

export interface RunOverview {
  agentRunId: string;
  convoyId: string;
  briefId: string;
  brief: string | null;
  model: string | null;
  harnessAlias: string | null;
  /** The adapter the run was claimed with; before its first claim, the one its harness names now. */
  adapter: string;
  /** A remote agent's AG-UI thread (the one the last checkpoint recorded, else the run's id); null for minimal. */
  threadId: string | null;
  status: RunStatus;
  /** Running with its lease expired: the stall detector has not re-dispatched it yet. */
  stalled: boolean;
  attempt: number;
  step: number;
  workerId: string | null;
  hostId: string | null;
  heartbeatAt: Date | null;
  leaseExpiresAt: Date | null;
  branch: string | null;
  worktreePath: string | null;
  failureReason: string | null;
  createdAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
  checkpointCount: number;
  lastCheckpointAt: Date | null;
  lastCommitOid: string | null;
  /** The newest checkpoint's seq (pruning keeps it), null before the first. */
  lastSeq: number | null;
}

export interface ToolCall {
  round: number;
  tool: string;
  input: unknown;
  ok: boolean;
  result?: unknown;
  error?: string;
}

export interface TimelineCheckpoint {
  seq: number;
  occurredAt: Date;
  step: number;
  attempt: number;
  calls: ToolCall[];
  files: { path: string; sha256: string | null; deleted: boolean }[];
  commitOid: string | null;
  hash: string;
}

export interface TimelinePage {
  checkpoints: TimelineCheckpoint[];
  /** The seq to pass as `before` for the next (older) page; null when this page reaches the first. */
  older: number | null;
}

// The newest checkpoint's commit and the count come from the unique (workspace_id, agent_run_id,
// checkpoint_seq) index: a backward scan of one row and an index-only count.
const RUN_OVERVIEW_SQL = `
select r.id as agent_run_id, r.convoy_id, r.brief_id, r.job->>'brief' as brief, r.job->>'model' as model,
       r.harness_alias, r.status, (r.status = 'running' and r.lease_expires_at < now()) as stalled,
       coalesce(r.adapter,
                (select h.adapter from harness_providers h where h.workspace_id = r.workspace_id
                    and h.alias = coalesce(r.harness_alias, r.job->>'harnessAlias')),
                'minimal') as adapter, last.agent_state->>'threadId' as thread_id,
       r.attempt, r.step, r.worker_id, r.host_id, r.heartbeat_at, r.lease_expires_at, r.branch, r.worktree_path,
       r.failure_reason, r.created_at, r.started_at, r.finished_at,
       (select count(*)::int from worker_checkpoints c
         where c.workspace_id = r.workspace_id and c.agent_run_id = r.id) as checkpoint_count,
       last.occurred_at as last_checkpoint_at, last.commit_oid as last_commit_oid,
       last.checkpoint_seq as last_seq
  from agent_runs r
  left join lateral (
    select c.occurred_at, c.commit_oid, c.checkpoint_seq, c.agent_state from worker_checkpoints c
     where c.workspace_id = r.workspace_id and c.agent_run_id = r.id
     order by c.checkpoint_seq desc limit 1) last on true
 where r.workspace_id = $1 and r.id = $2`;

/** What the run page heads with; undefined when the run does not exist in this workspace. */
export async function runOverview(tx: WorkspaceTx, agentRunId: string): Promise<RunOverview | undefined> {
  const [row] = await tx.unsafe(RUN_OVERVIEW_SQL, [tx.workspaceId, agentRunId]);
  if (!row) return undefined;
  return {
    agentRunId: row.agent_run_id,
    convoyId: row.convoy_id,
    briefId: row.brief_id,
    brief: row.brief,
    model: row.model,
    harnessAlias: row.harness_alias,
    adapter: row.adapter,
    threadId: row.adapter === 'minimal' ? null : (row.thread_id ?? row.agent_run_id),
    status: row.status,
    stalled: row.stalled,
    attempt: row.attempt,
    step: row.step,
    workerId: row.worker_id,
    hostId: row.host_id,
    heartbeatAt: row.heartbeat_at,
    leaseExpiresAt: row.lease_expires_at,
    branch: row.branch,
    worktreePath: row.worktree_path,
    failureReason: row.failure_reason,
    createdAt: row.created_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    checkpointCount: row.checkpoint_count,
    lastCheckpointAt: row.last_checkpoint_at,
    lastCommitOid: row.last_commit_oid,
    lastSeq: row.last_seq,
  };
}

// One row more than the page: its step bounds the oldest row's rounds, and its presence says
// there is an older page.
const CHECKPOINT_PAGE_SQL = `
select c.checkpoint_seq, c.step, c.attempt, c.tool_history, c.files_touched, c.commit_oid, c.hash, c.occurred_at
  from worker_checkpoints c
 where c.workspace_id = $1 and c.agent_run_id = $2 and ($3::int is null or c.checkpoint_seq < $3)
 order by c.checkpoint_seq desc
 limit $4`;

/** Up to `limit` checkpoints older than `before` (all when null), newest first, with each round's tool calls. */
export async function checkpointPage(
  tx: WorkspaceTx,
  agentRunId: string,
  before: number | null,
  limit = 50,
): Promise<TimelinePage> {
  const rows = await tx.unsafe(CHECKPOINT_PAGE_SQL, [tx.workspaceId, agentRunId, before, limit + 1]);
  const page = rows.slice(0, limit);
  return {
    checkpoints: page.map((row, i) => {
      const previousStep: number = rows[i + 1]?.step ?? row.step - 1;
      return {
        seq: row.checkpoint_seq,
        occurredAt: row.occurred_at,
        step: row.step,
        attempt: row.attempt,
        calls: callsOfRounds(row.tool_history, previousStep, row.step),
        files: (row.files_touched as FileTouched[]).map((f) => ({
          path: f.path,
          sha256: f.sha256,
          deleted: Boolean(f.deleted),
        })),
        commitOid: row.commit_oid,
        hash: row.hash,
      };
    }),
    older: rows.length > limit ? (page.at(-1)?.checkpoint_seq ?? null) : null,
  };
}

/** tool_history may hold earlier rounds too (older row formats keep a window): only this checkpoint's own. */
function callsOfRounds(history: unknown, after: number, upTo: number): ToolCall[] {
  if (!Array.isArray(history)) return [];
  return history.filter((c): c is ToolCall => {
    const round = c && typeof c === 'object' ? (c as ToolCall).round : undefined;
    return typeof round === 'number' && round > after && round <= upTo;
  });
}

export interface TimelineEvent {
  type: string;
  occurredAt: Date;
  metadata: Record<string, unknown>;
}

const RUN_EVENTS_BETWEEN_SQL = `
select e.type, e.metadata, e.occurred_at
  from convoy_events e
 where e.workspace_id = $1 and e.agent_run_id = $2
   and ($3::timestamptz is null or e.occurred_at >= $3)
   and ($4::timestamptz is null or e.occurred_at < $4)
 order by e.occurred_at desc, e.id desc
 limit 500`;

/** The run's events in [from, to) (open ends when null), newest first. */
export async function runEventsBetween(
  tx: WorkspaceTx,
  agentRunId: string,
  from: Date | null,
  to: Date | null,
): Promise<TimelineEvent[]> {
  const params = [tx.workspaceId, agentRunId, from?.toISOString() ?? null, to?.toISOString() ?? null];
  const rows = await tx.unsafe(RUN_EVENTS_BETWEEN_SQL, params);
  return rows.map((e) => ({ type: e.type, occurredAt: e.occurred_at, metadata: e.metadata }));
}

const CHECKPOINT_TIME_SQL = `
select c.occurred_at from worker_checkpoints c
 where c.workspace_id = $1 and c.agent_run_id = $2 and c.checkpoint_seq = $3`;

/** When checkpoint `seq` was written: the upper bound of the events on the page before it. */
export async function checkpointTime(tx: WorkspaceTx, agentRunId: string, seq: number): Promise<Date | null> {
  const [row] = await tx.unsafe(CHECKPOINT_TIME_SQL, [tx.workspaceId, agentRunId, seq]);
  return row?.occurred_at ?? null;
}
