// Benchmark 5: mission control's pages and API as a user gets them (the Hono app's own routes,
// a workspace token, each read through withWorkspace as the app role, RLS on) while
// worker_checkpoints grows (10^4 to 10^6 rows): the convoy detail, the convoy list's and the runs
// list's first page and a filtered page, the run page (the only page of a 20-checkpoint run, the
// first and the last of a 2,000-checkpoint run), GET /api/runs/:id/checkpoints' last page of that
// run, and the Storage page of a workspace of 10^3 runs, each run a branch of a real repository
// (the page measures the git bytes of the runs and convoys it shows), as loaded again and just
// after a git write. What is read stays the same size; the rest of the table is other convoys of
// the same workspace, bulk-loaded with generate_series, then VACUUM ANALYZE.
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import type { Sql } from 'postgres';
import { CONVOY_DETAIL_SQL } from '../store/mission-control.ts';
import { createWorkspace } from '../store/runs.ts';
import type { RunFilter } from '../store/run-search.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { createMissionControl } from '../mission-control/server.ts';
import { createLogger } from '../worker/log.ts';
import { runGit } from '../worker/git/run-git.ts';
import { checkpointHash, type FileTouched } from '../core/checkpoint-hash.ts';
import type { RowPayload } from './checkpoint-cost.ts';
import type { BenchEnv } from './env.ts';
import type { McRead } from './results.ts';
import type { Samples } from './stats.ts';

const TARGET_CONVOY = 'mc-target';
const RUNS_PER_CONVOY = 10;
const CHECKPOINTS_PER_RUN = 50;
/** The run page's timeline is read for a short and a long run: a page must cost the same for both. */
export const TIMELINE_RUNS = { short: 20, long: 2_000 } as const;
const PAGE = 50;
const TIMELINE_CONVOY = 'mc-timeline';
/** A workspace of its own for the Storage page: 10^3 runs, two checkpoints and an event each. */
const STORAGE_WORKSPACE = 'bench-storage';
const STORAGE_RUNS = 1_000;
/** Every other background run has this model: the filtered page reads two rows per match. */
const FILTER: RunFilter = { status: 'completed', model: 'bench:filtered' };
/** Matches one run of the target convoy (its id and brief id) and nothing in the background. */
const RARE_SEARCH = 'mc-target-run-7';

export interface MissionControlLevel {
  rows: number;
  loadSeconds: number;
  tableMiB: number;
  convoyDetailPlan: string;
  convoyDetailExecMs: number;
}

/** `count` checkpoints of one run, linked into a real hash chain, inserted in batches. */
async function insertChainedRun(
  tx: Sql,
  at: { ws: string; convoyId: string; runId: string; briefId: string },
  count: number,
  payload: RowPayload,
): Promise<void> {
  const rows = [];
  let prev: string | null = null;
  for (let seq = 1; seq <= count; seq++) {
    const commitOid = seq.toString(16).padStart(40, '0');
    const hash = checkpointHash(prev, {
      workspaceId: at.ws,
      agentRunId: at.runId,
      checkpointSeq: seq,
      step: seq,
      toolHistory: payload.toolHistory,
      filesTouched: payload.filesTouched as FileTouched[],
      branch: 'echodo/bench',
      worktreePath: '/tmp/bench',
      commitOid,
    });
    rows.push({
      workspace_id: at.ws,
      agent_run_id: at.runId,
      convoy_id: at.convoyId,
      brief_id: at.briefId,
      checkpoint_seq: seq,
      step: seq,
      attempt: 1,
      lease_epoch: 1,
      tool_history: tx.json(payload.toolHistory as never),
      files_touched: tx.json(payload.filesTouched as never),
      branch: 'echodo/bench',
      worktree_path: '/tmp/bench',
      commit_oid: commitOid,
      prev_hash: prev,
      hash,
    });
    prev = hash;
  }
  for (let i = 0; i < rows.length; i += 500) await tx`insert into worker_checkpoints ${tx(rows.slice(i, i + 500))}`;
}

/** A completed run (and its brief) in `convoyId`, with `count` chained checkpoints. */
async function seedRun(env: BenchEnv, payload: RowPayload, convoyId: string, runId: string, count: number) {
  const ws = env.workspaceId;
  await env.su.begin(async (tx) => {
    await tx`insert into convoys (workspace_id, id) values (${ws}, ${convoyId}) on conflict do nothing`;
    await tx`insert into briefs (workspace_id, id, convoy_id, role_id, status)
             values (${ws}, ${runId}, ${convoyId}, 'coder', 'done')`;
    await tx`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, status, attempt, step, branch,
               worktree_path, harness_alias, started_at, finished_at)
             values (${runId}, ${ws}, ${convoyId}, ${runId}, ${runId}, ${tx.json({ bench: true } as never)}, 'completed',
                     1, ${count}, 'echodo/bench', '/tmp/bench', 'code', now(), now())`;
    await insertChainedRun(tx as unknown as Sql, { ws, convoyId, runId, briefId: runId }, count, payload);
  });
}

/** The Storage page's workspace: 10^3 runs over 100 convoys, generated in one statement per table. */
async function seedStorageWorkspace(env: BenchEnv): Promise<void> {
  await withWorkspace(env.db.app, STORAGE_WORKSPACE, (tx) => createWorkspace(tx));
  await env.su.begin(async (tx) => {
    await tx`set local session_replication_role = replica`;
    const ws = STORAGE_WORKSPACE;
    await tx`insert into convoys (workspace_id, id) select ${ws}, 'st-convoy-' || c from generate_series(0, 99) c`;
    await tx`insert into briefs (workspace_id, id, convoy_id, role_id, status)
             select ${ws}, 'st-brief-' || r, 'st-convoy-' || (r % 100), 'coder', 'done'
               from generate_series(1, ${STORAGE_RUNS}) r`;
    await tx`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, status, attempt, step,
               harness_alias, started_at, finished_at)
             select 'st-run-' || r, ${ws}, 'st-convoy-' || (r % 100), 'st-brief-' || r, 'st-job-' || r,
                    '{"bench": true}'::jsonb, 'completed', 1, 2, 'code', now(), now()
               from generate_series(1, ${STORAGE_RUNS}) r`;
    await tx`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step,
               attempt, lease_epoch, tool_history, files_touched, branch, worktree_path, commit_oid, prev_hash, hash)
             select ${ws}, 'st-run-' || r, 'st-convoy-' || (r % 100), 'st-brief-' || r, s, s, 1, 1,
                    jsonb_build_array(jsonb_build_object('round', s, 'tool', 'write_file', 'ok', true,
                      'input', jsonb_build_object('path', 'src/f' || r || '.ts'))),
                    jsonb_build_array(jsonb_build_object('path', 'src/f' || r || '.ts', 'sha256', md5(r || ':' || s)
                      || md5(s || ':' || r), 'bytes', 100 + r, 'deleted', false)),
                    'echodo/st-' || r, '/tmp/bench/st-' || r, md5('c' || r || s) || '00000000',
                    case when s > 1 then md5('h' || r || (s - 1)) || md5('h' || r || (s - 1)) end,
                    md5('h' || r || s) || md5('h' || r || s)
               from generate_series(1, ${STORAGE_RUNS}) r cross join generate_series(1, 2) s`;
    await tx`insert into convoy_events (workspace_id, convoy_id, agent_run_id, type, metadata)
             select ${ws}, 'st-convoy-' || (r % 100), 'st-run-' || r, 'run_completed', '{}'::jsonb
               from generate_series(1, ${STORAGE_RUNS}) r`;
  });
}

/** One repository with a branch per Storage run (a commit of one file of its own off a shared base). */
async function seedStorageRepo(env: BenchEnv): Promise<string> {
  const repo = path.join(env.workDir, 'storage-repo');
  await mkdir(repo, { recursive: true });
  await runGit(repo, ['init', '-q', '-b', 'main']);
  const data = (text: string) => `data ${Buffer.byteLength(text)}\n${text}\n`;
  const who = 'committer bench <bench@localhost> 1700000000 +0000\n';
  let stream = `commit refs/heads/main\nmark :1\n${who}${data('base')}M 644 inline README\n${data('base\n')}`;
  for (let r = 1; r <= STORAGE_RUNS; r++) {
    const file = `export const f${r} = ${JSON.stringify('x'.repeat(100 + r))};\n`;
    stream += `commit refs/heads/echodo/st-${r}\n${who}${data(`run ${r}`)}from :1\n`;
    stream += `M 644 inline src/f${r}.ts\n${data(file)}`;
  }
  await runGit(repo, ['fast-import', '--quiet'], { input: stream });
  const base = (await runGit(repo, ['rev-parse', 'main'])).stdout.trim();
  await env.su`update agent_runs set branch = 'echodo/st-' || substr(id, 8), base_oid = ${base},
                 job = job || jsonb_build_object('repoPath', ${repo}::text)
               where workspace_id = ${STORAGE_WORKSPACE}`;
  return repo;
}

/**
 * Background convoys/runs/checkpoints from run index `fromRun` (inclusive) to `toRun` (exclusive): history
 * written before today (UTC), as a table grows over days. Today's checkpoints are the bench's own runs, so
 * the convoy list's spend-today card sums the same rows at every table size.
 */
async function loadBackground(su: Sql, ws: string, fromRun: number, toRun: number): Promise<void> {
  const CHUNK = 4000; // runs per transaction: 200k rows
  const end = new Date(new Date().setUTCHours(0, 0, 0, 0) - 3_600_000);
  for (let a = fromRun; a < toRun; a += CHUNK) {
    const b = Math.min(toRun, a + CHUNK);
    await su.begin(async (tx) => {
      // A bulk load of generated, consistent rows: skip per-row triggers (FK checks, NOTIFY).
      await tx`set local session_replication_role = replica`;
      await tx`insert into convoys (workspace_id, id, created_at)
               select ${ws}, 'bg-convoy-' || c, ${end}::timestamptz - make_interval(mins => c)
                 from generate_series(${Math.floor(a / RUNS_PER_CONVOY)}::int, ${Math.floor((b - 1) / RUNS_PER_CONVOY)}::int) c
               on conflict do nothing`;
      await tx`insert into briefs (workspace_id, id, convoy_id, role_id, status)
               select ${ws}, 'bg-brief-' || r, 'bg-convoy-' || (r / ${RUNS_PER_CONVOY}), 'coder', 'done'
                 from generate_series(${a}::int, ${b - 1}::int) r`;
      await tx`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, status, attempt, step, harness_alias, started_at, finished_at, created_at)
               select 'bg-run-' || r, ${ws}, 'bg-convoy-' || (r / ${RUNS_PER_CONVOY}), 'bg-brief-' || r, 'bg-job-' || r,
                      jsonb_build_object('bench', true, 'model', case when r % 2 = 0 then ${FILTER.model!} else 'bench:other' end),
                      'completed', 1, ${CHECKPOINTS_PER_RUN}, 'code', ${end}::timestamptz - interval '1 hour', ${end}::timestamptz - interval '30 minutes',
                      ${end}::timestamptz - make_interval(secs => r)
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
                      ${end}::timestamptz - make_interval(secs => r) + make_interval(secs => s)
                 from generate_series(${a}::int, ${b - 1}::int) r cross join generate_series(1, ${CHECKPOINTS_PER_RUN}) s`;
    });
  }
}

/** A page or an API answer as a user gets it: through the app's routes, auth and rendering included. */
type Get = (path: string, token: string) => Promise<string>;

function routeGetter(env: BenchEnv): Get {
  const { app } = createMissionControl({
    db: env.db,
    config: { MISSION_CONTROL_PORT: 0, LOG_LEVEL: 'silent' },
    logger: createLogger({ level: 'silent' }),
  });
  return async (path, token) => {
    const res = await app.request(path, { headers: { authorization: `Bearer ${token}` } });
    const body = await res.text();
    if (res.status !== 200) throw new Error(`GET ${path}: ${res.status} ${body.slice(0, 200)}`);
    return body;
  };
}

const count = (body: string, marker: string) => body.split(marker).length - 1;

/** Each read as the panel makes it: a GET of its page (or of the checkpoints API) with a workspace token. */
async function reads(env: BenchEnv, runs: { short: string; long: string }, storageRepo: string) {
  const get = routeGetter(env);
  const token = await createWorkspaceToken(env.db.app, env.workspaceId);
  const storageToken = await createWorkspaceToken(env.db.app, STORAGE_WORKSPACE);
  const lastPage = PAGE + 1;
  const enc = encodeURIComponent;
  /** The run page: the run's row, one checkpoint page, its events, costs and the (stored) chain verdict. */
  const runPage = async (runId: string, before: number | null) => {
    const body = await get(`/runs/${enc(runId)}${before === null ? '' : `?before=${before}`}`, token);
    if (!body.includes('data-testid="chain-verdict">verifies<') || !count(body, '<li class="checkpoint"'))
      throw new Error(`run page of ${runId} wrong`);
  };
  /** The Storage page: its Postgres reads, and the git bytes of the 50 runs and 50 convoys (500 branches) it shows. */
  const storagePage = async () => {
    const body = await get('/storage', storageToken);
    if (count(body, '<tr data-run-id=') !== PAGE || /data-field="gitBytes"\s+data-bytes=""/.test(body))
      throw new Error('storage page came back wrong');
  };
  const filtered = `?status=${FILTER.status}&model=${enc(FILTER.model!)}`;
  const all: Record<McRead, () => Promise<void>> = {
    convoyDetail: async () => {
      const body = await get(`/convoys/${TARGET_CONVOY}`, token);
      if (count(body, '<tr data-run-id=') !== RUNS_PER_CONVOY) throw new Error('convoy detail came back wrong');
    },
    runsFirst: async () => {
      if (count(await get('/runs', token), '<tr data-run-id=') !== PAGE) throw new Error('runs page came back short');
    },
    runsFiltered: async () => {
      const body = await get(`/runs${filtered}`, token);
      if (!count(body, '<tr data-run-id=') || body.includes('bench:other')) throw new Error('filter came back wrong');
    },
    // A search matching one run: a keyset walk would look at every run of the workspace for the rest of the page.
    runsSearchRare: async () => {
      const body = await get(`/runs?q=${enc(RARE_SEARCH)}`, token);
      if (count(body, '<tr data-run-id=') !== 1) throw new Error('rare search came back wrong');
    },
    convoysFirst: async () => {
      if (!count(await get('/', token), '<tr data-convoy-id=')) throw new Error('convoy page came back empty');
    },
    // The worst filter for a keyset walk: nothing matches, so every convoy of the workspace is looked at.
    convoysFiltered: async () => {
      if (count(await get('/?status=failed', token), '<tr data-convoy-id=')) throw new Error('filter matched');
    },
    timelineShort: () => runPage(runs.short, null),
    timelineLongFirst: () => runPage(runs.long, null),
    timelineLongLast: () => runPage(runs.long, lastPage),
    // The verdict carried forward and one page hashed again.
    checkpointsLongLast: async () => {
      const body = await get(`/api/runs/${enc(runs.long)}/checkpoints?cursor=${lastPage}`, token);
      const page = JSON.parse(body) as { checkpoints: { verified: boolean }[] };
      if (!page.checkpoints.length || !page.checkpoints.every((c) => c.verified))
        throw new Error(`checkpoints page of ${runs.long} wrong`);
    },
    storagePage,
    // Just after a git write (one loose object, as a checkpoint adds): every git figure is measured again.
    storagePageChanged: async () => {
      await runGit(storageRepo, ['hash-object', '-w', '--stdin'], { input: `${performance.now()} ${Math.random()}` });
      await storagePage();
    },
  };
  return all;
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
  for (let r = 0; r < RUNS_PER_CONVOY; r++) {
    await seedRun(env, payload, TARGET_CONVOY, `mc-target-run-${r}`, CHECKPOINTS_PER_RUN);
  }
  const short = `mc-timeline-${TIMELINE_RUNS.short}`;
  const long = `mc-timeline-${TIMELINE_RUNS.long}`;
  await seedRun(env, payload, TIMELINE_CONVOY, short, TIMELINE_RUNS.short);
  await seedRun(env, payload, TIMELINE_CONVOY, long, TIMELINE_RUNS.long);
  await seedStorageWorkspace(env);
  const measured = await reads(env, { short, long }, await seedStorageRepo(env));
  const [{ n: existing }] = (await env.su<
    { n: number }[]
  >`select count(*)::int as n from worker_checkpoints`) as unknown as [{ n: number }];
  let backgroundRuns = 0;
  const out: MissionControlLevel[] = [];
  for (const rows of levels) {
    // The filtered page needs a full page of matches even at the smallest level.
    const wantRuns = Math.max(2 * PAGE + 10, Math.ceil((rows - existing) / CHECKPOINTS_PER_RUN));
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
    const names = Object.keys(measured) as McRead[];
    for (let i = 0; i < 3; i++) for (const name of names) await measured[name]();
    // Interleaved: each sample reads every read once, so drift in the machine hits them alike.
    for (let i = 0; i < samples; i++) {
      for (const name of names) await s.time(`mc.${rows}.${name}`, measured[name]);
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
