// Benchmark 5: mission control's reads (store/mission-control.ts convoyDetail and runHistory,
// through withWorkspace as the app role, RLS on) while worker_checkpoints grows to 10^4, 10^5,
// 10^6 rows. The convoy and run read stay the same size (10 runs × 50 checkpoints, a real
// chain with the checkpoint bench's steady-state payload); the rest of the table is other
// convoys of the same workspace, bulk-loaded with generate_series, then VACUUM ANALYZE.
import type { Sql } from 'postgres';
import { convoyDetail, runHistory, CONVOY_DETAIL_SQL } from '../store/mission-control.ts';
import { chainVerdict } from '../store/chain-verdict.ts';
import { checkpointPage, runOverview } from '../store/run-timeline.ts';
import { withWorkspace } from '../store/workspace.ts';
import { checkpointHash, type FileTouched } from '../core/checkpoint-hash.ts';
import type { RowPayload } from './checkpoint-cost.ts';
import type { BenchEnv } from './env.ts';
import { Samples } from './stats.ts';

const TARGET_CONVOY = 'mc-target';
const RUNS_PER_CONVOY = 10;
const CHECKPOINTS_PER_RUN = 50;
/** The run page's timeline is read for a short and a long run: a page must cost the same for both. */
export const TIMELINE_RUNS = { short: 20, long: 2_000 } as const;
const TIMELINE_PAGE = 50;
const TIMELINE_CONVOY = 'mc-timeline';

export interface MissionControlLevel {
  rows: number;
  loadSeconds: number;
  tableMiB: number;
  convoyDetailPlan: string;
  convoyDetailExecMs: number;
  runHistoryCheckpoints: number;
}

/** A run of `count` chained checkpoints in the target convoy, for the timeline page reads. */
async function seedTimelineRun(env: BenchEnv, payload: RowPayload, count: number): Promise<string> {
  const ws = env.workspaceId;
  const runId = `mc-timeline-${count}`;
  await env.su.begin(async (tx) => {
    // A convoy of their own: the convoy detail read keeps its ten runs.
    await tx`insert into convoys (workspace_id, id) values (${ws}, ${TIMELINE_CONVOY}) on conflict do nothing`;
    await tx`insert into briefs (workspace_id, id, convoy_id, role_id, status) values (${ws}, ${runId}, ${TIMELINE_CONVOY}, 'coder', 'done')`;
    await tx`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, status, attempt, step, branch, harness_alias,
               started_at, finished_at)
             values (${runId}, ${ws}, ${TIMELINE_CONVOY}, ${runId}, ${runId}, ${tx.json({ bench: true } as never)}, 'completed', 1, ${count},
                     'echodo/bench', 'code', now(), now())`;
    let prev: string | null = null;
    for (let seq = 1; seq <= count; seq++) {
      const commitOid = seq.toString(16).padStart(40, '0');
      const row = {
        workspaceId: ws,
        agentRunId: runId,
        checkpointSeq: seq,
        step: seq,
        toolHistory: payload.toolHistory,
        filesTouched: payload.filesTouched as FileTouched[],
        branch: 'echodo/bench',
        worktreePath: '/tmp/bench',
        commitOid,
      };
      const hash = checkpointHash(prev, row);
      await tx`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt,
                 lease_epoch, tool_history, files_touched, branch, worktree_path, commit_oid, prev_hash, hash)
               values (${ws}, ${runId}, ${TIMELINE_CONVOY}, ${runId}, ${seq}, ${seq}, 1, 1, ${tx.json(payload.toolHistory as never)},
                 ${tx.json(payload.filesTouched as never)}, 'echodo/bench', '/tmp/bench', ${commitOid}, ${prev}, ${hash})`;
      prev = hash;
    }
  });
  return runId;
}

/** What the run page reads: the run's row, its newest checkpoint page and the (stored) chain verdict. */
async function timelinePage(env: BenchEnv, runId: string, before: number | null): Promise<number> {
  return withWorkspace(env.db.app, env.workspaceId, async (tx) => {
    const run = await runOverview(tx, runId);
    const page = await checkpointPage(tx, runId, before, TIMELINE_PAGE);
    const verdict = await chainVerdict(tx, runId);
    if (!run || verdict.state !== 'verifies') throw new Error(`timeline of ${runId} came back wrong`);
    return page.checkpoints.length;
  });
}

async function seedTarget(env: BenchEnv, payload: RowPayload): Promise<string> {
  const ws = env.workspaceId;
  await env.su.begin(async (tx) => {
    await tx`insert into convoys (workspace_id, id) values (${ws}, ${TARGET_CONVOY}) on conflict do nothing`;
    for (let r = 0; r < RUNS_PER_CONVOY; r++) {
      const runId = `mc-target-run-${r}`;
      await tx`insert into briefs (workspace_id, id, convoy_id, role_id, status) values (${ws}, ${`mc-target-brief-${r}`}, ${TARGET_CONVOY}, 'coder', 'done')`;
      await tx`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, status, attempt, step, branch, worktree_path, harness_alias, started_at, finished_at)
               values (${runId}, ${ws}, ${TARGET_CONVOY}, ${`mc-target-brief-${r}`}, ${`mc-target-job-${r}`}, ${tx.json({ bench: true } as never)}, 'completed', 1, ${CHECKPOINTS_PER_RUN}, 'echodo/bench', '/tmp/bench', 'code', now(), now())`;
      let prev: string | null = null;
      for (let seq = 1; seq <= CHECKPOINTS_PER_RUN; seq++) {
        const commitOid = seq.toString(16).padStart(40, '0');
        const row = {
          workspaceId: ws,
          agentRunId: runId,
          checkpointSeq: seq,
          step: seq,
          toolHistory: payload.toolHistory,
          filesTouched: payload.filesTouched as FileTouched[],
          branch: 'echodo/bench',
          worktreePath: '/tmp/bench',
          commitOid,
        };
        const hash = checkpointHash(prev, row);
        await tx`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt, lease_epoch,
                   tool_history, files_touched, branch, worktree_path, commit_oid, prev_hash, hash)
                 values (${ws}, ${runId}, ${TARGET_CONVOY}, ${`mc-target-brief-${r}`}, ${seq}, ${seq}, 1, 1, ${tx.json(payload.toolHistory as never)},
                   ${tx.json(payload.filesTouched as never)}, 'echodo/bench', '/tmp/bench', ${commitOid}, ${prev}, ${hash})`;
        prev = hash;
      }
    }
  });
  return 'mc-target-run-0';
}

/** Background convoys/runs/checkpoints from run index `fromRun` (inclusive) to `toRun` (exclusive). */
async function loadBackground(su: Sql, ws: string, fromRun: number, toRun: number): Promise<void> {
  const CHUNK = 4000; // runs per transaction: 200k rows
  for (let a = fromRun; a < toRun; a += CHUNK) {
    const b = Math.min(toRun, a + CHUNK);
    await su.begin(async (tx) => {
      // A bulk load of generated, consistent rows: skip per-row triggers (FK checks, NOTIFY).
      await tx`set local session_replication_role = replica`;
      await tx`insert into convoys (workspace_id, id, created_at)
               select ${ws}, 'bg-convoy-' || c, now() - make_interval(mins => c)
                 from generate_series(${Math.floor(a / RUNS_PER_CONVOY)}::int, ${Math.floor((b - 1) / RUNS_PER_CONVOY)}::int) c
               on conflict do nothing`;
      await tx`insert into briefs (workspace_id, id, convoy_id, role_id, status)
               select ${ws}, 'bg-brief-' || r, 'bg-convoy-' || (r / ${RUNS_PER_CONVOY}), 'coder', 'done'
                 from generate_series(${a}::int, ${b - 1}::int) r`;
      await tx`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, status, attempt, step, harness_alias, started_at, finished_at, created_at)
               select 'bg-run-' || r, ${ws}, 'bg-convoy-' || (r / ${RUNS_PER_CONVOY}), 'bg-brief-' || r, 'bg-job-' || r, '{"bench": true}'::jsonb,
                      'completed', 1, ${CHECKPOINTS_PER_RUN}, 'code', now() - interval '1 hour', now() - interval '30 minutes', now() - make_interval(secs => r)
                 from generate_series(${a}::int, ${b - 1}::int) r`;
      await tx`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt, lease_epoch,
                 tool_history, files_touched, branch, worktree_path, commit_oid, prev_hash, hash, occurred_at)
               select ${ws}, 'bg-run-' || r, 'bg-convoy-' || (r / ${RUNS_PER_CONVOY}), 'bg-brief-' || r, s, s, 1, 1,
                      jsonb_build_array(jsonb_build_object('round', s, 'tool', 'write_file', 'ok', true,
                        'input', jsonb_build_object('path', 'src/m' || (s % 50) || '/f' || r || '.ts', 'content', jsonb_build_object('bytes', 412, 'sha256', md5(r || ':' || s) || md5(s || ':' || r))),
                        'result', jsonb_build_object('path', 'src/m' || (s % 50) || '/f' || r || '.ts', 'bytes', 412))),
                      jsonb_build_array(jsonb_build_object('path', 'src/m' || (s % 50) || '/f' || r || '.ts', 'sha256', md5(s || '/' || r) || md5(r || '/' || s), 'bytes', 412, 'deleted', false)),
                      'echodo/bg-' || r, '/tmp/bench/bg-' || r, md5('c' || r || ':' || s) || '00000000',
                      case when s > 1 then md5('h' || r || ':' || (s - 1)) || md5('h' || r || ':' || (s - 1)) end,
                      md5('h' || r || ':' || s) || md5('h' || r || ':' || s),
                      now() - make_interval(secs => r) + make_interval(secs => s)
                 from generate_series(${a}::int, ${b - 1}::int) r cross join generate_series(1, ${CHECKPOINTS_PER_RUN}) s`;
    });
  }
}

export async function measureMissionControl(
  env: BenchEnv,
  levels: number[],
  samples: number,
  payload: RowPayload,
  s: Samples,
  log: (line: string) => void,
): Promise<MissionControlLevel[]> {
  const ws = env.workspaceId;
  const targetRun = await seedTarget(env, payload);
  const shortRun = await seedTimelineRun(env, payload, TIMELINE_RUNS.short);
  const longRun = await seedTimelineRun(env, payload, TIMELINE_RUNS.long);
  const [{ n: existing }] = (await env.su<
    { n: number }[]
  >`select count(*)::int as n from worker_checkpoints`) as unknown as [{ n: number }];
  let backgroundRuns = 0;
  const out: MissionControlLevel[] = [];
  for (const rows of levels) {
    const wantRuns = Math.max(0, Math.ceil((rows - existing) / CHECKPOINTS_PER_RUN));
    const start = performance.now();
    if (wantRuns > backgroundRuns) await loadBackground(env.su, ws, backgroundRuns, wantRuns);
    backgroundRuns = Math.max(backgroundRuns, wantRuns);
    await env.su.unsafe('vacuum (analyze) worker_checkpoints, agent_runs, convoys, briefs, convoy_events');
    const loadSeconds = (performance.now() - start) / 1000;
    const [{ n, bytes }] = (await env.su<{ n: number; bytes: string }[]>`
      select count(*)::int as n, pg_total_relation_size('worker_checkpoints')::text as bytes from worker_checkpoints`) as unknown as [
      { n: number; bytes: string },
    ];
    log(
      `  ${n} checkpoint rows (${(Number(bytes) / 2 ** 20).toFixed(0)} MiB with indexes), loaded in ${loadSeconds.toFixed(1)} s`,
    );
    const key = `mc.${rows}`;
    const detail = () => withWorkspace(env.db.app, ws, (tx) => convoyDetail(tx, TARGET_CONVOY));
    const history = () => withWorkspace(env.db.app, ws, (tx) => runHistory(tx, targetRun));
    for (let i = 0; i < 3; i++) {
      await detail();
      await history();
    }
    let checkpointsRead = 0;
    for (let i = 0; i < samples; i++) {
      const d = await s.time(`${key}.convoyDetail`, detail);
      const h = await s.time(`${key}.runHistory`, history);
      if (!d || d.runs.length !== RUNS_PER_CONVOY || !h?.chain.ok)
        throw new Error(`mission control read came back wrong at ${n} rows`);
      checkpointsRead = h.checkpoints.length;
      // The first and the last page of the long run, and the only page of the short one.
      await s.time(`${key}.timelineShort`, () => timelinePage(env, shortRun, null));
      await s.time(`${key}.timelineLongFirst`, () => timelinePage(env, longRun, null));
      await s.time(`${key}.timelineLongLast`, () => timelinePage(env, longRun, TIMELINE_PAGE + 1));
    }
    // The plan, as the app role sees it (RLS on), for the record.
    const plan = await withWorkspace(env.db.app, ws, (tx) =>
      tx.unsafe(`explain (analyze, format json) ${CONVOY_DETAIL_SQL}`, [ws, TARGET_CONVOY]),
    );
    const root = (plan[0] as unknown as { 'QUERY PLAN': [{ Plan: unknown; 'Execution Time': number }] })[
      'QUERY PLAN'
    ][0];
    out.push({
      rows: n,
      loadSeconds: Math.round(loadSeconds * 10) / 10,
      tableMiB: Math.round(Number(bytes) / 2 ** 20),
      convoyDetailPlan: scansOf(root.Plan).join('; '),
      convoyDetailExecMs: root['Execution Time'],
      runHistoryCheckpoints: checkpointsRead,
    });
  }
  return out;
}

/** The scans a plan does, e.g. "Index Only Scan using worker_checkpoints_convoy on worker_checkpoints". */
function scansOf(node: unknown, acc: string[] = []): string[] {
  const n = node as { 'Node Type': string; 'Index Name'?: string; 'Relation Name'?: string; Plans?: unknown[] };
  if (n['Relation Name'])
    acc.push(`${n['Node Type']}${n['Index Name'] ? ` using ${n['Index Name']}` : ''} on ${n['Relation Name']}`);
  for (const child of n.Plans ?? []) scansOf(child, acc);
  return acc;
}
