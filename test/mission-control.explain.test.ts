// The convoy panel's query at 10^6 checkpoint rows: its plan must read worker_checkpoints
// through an index (index-only, given a vacuumed table), never a sequential scan, under the
// same row-level security the server runs with.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Sql } from 'postgres';
import { CONVOY_DETAIL_SQL, convoyDetail } from '../store/mission-control.ts';
import { withWorkspace } from '../store/workspace.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';

const ROWS = 1_000_000;
const RUNS = 1_000; // 1000 checkpoints each; 10 runs per convoy
const BIG = 'ws-big';

let t: TestDatabase;
let su: Sql;
let fillSeconds = 0;

before(async () => {
  t = await createTestDatabase();
  su = superuserSql(t.url);
  // Runs 0..899 belong to ws-big (convoys 0..89), 900..999 to ws-other (convoys 90..99).
  const ws = (i: string) => `case when ${i} < 900 then '${BIG}' else 'ws-other' end`;
  await su.unsafe(`insert into workspaces (workspace_id) values ('${BIG}'), ('ws-other')`);
  await su.unsafe(`insert into convoys (workspace_id, id)
                   select ${ws('c * 10')}, 'convoy-' || c from generate_series(0, 99) c`);
  await su.unsafe(`insert into briefs (workspace_id, id, convoy_id, role_id)
                   select ${ws('i')}, 'brief-' || i, 'convoy-' || (i / 10), 'coder' from generate_series(0, ${RUNS - 1}) i`);
  await su.unsafe(`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, status, worker_id, heartbeat_at, lease_expires_at)
                   select 'run-' || i, ${ws('i')}, 'convoy-' || (i / 10), 'brief-' || i, 'job-' || i, '{}', 'running',
                          'worker-' || (i % 7), now(), now() + interval '10 seconds'
                     from generate_series(0, ${RUNS - 1}) i`);
  // Bulk fill as superuser: replica mode skips the per-row NOTIFY trigger and FK checks (the
  // rows are consistent by construction), which keeps a million inserts to seconds. The commit
  // is synchronous because VACUUM cannot mark a page all-visible (what an index-only scan
  // needs) while the commit of its rows is not yet flushed, and test servers run with
  // synchronous_commit=off.
  const started = Date.now();
  await su.begin(async (tx) => {
    await tx.unsafe(`set local session_replication_role = replica`);
    await tx.unsafe(`set local synchronous_commit = on`);
    await tx.unsafe(`
      insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt,
                                      lease_epoch, tool_history, files_touched, commit_oid, prev_hash, hash, occurred_at)
      select ${ws('r')}, 'run-' || r, 'convoy-' || (r / 10), 'brief-' || r, s, s, 1, 1, '[]', '[]',
             md5(g::text), null, md5('h' || g), now() - make_interval(secs => ${ROWS} - g)
        from generate_series(0, ${ROWS - 1}) g,
             lateral (select g % ${RUNS} as r, g / ${RUNS} + 1 as s) k`);
  });
  await su.unsafe(`vacuum analyze worker_checkpoints`);
  await su.unsafe(`vacuum analyze agent_runs`);
  await su.unsafe(`analyze convoys`);
  fillSeconds = (Date.now() - started) / 1000;
});

after(async () => {
  await su?.end();
  await t?.drop();
});

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Heap Fetches'?: number;
  Plans?: PlanNode[];
}

function nodesOf(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(nodesOf)];
}

test('convoyDetail at 10^6 checkpoint rows: no Seq Scan on worker_checkpoints, and the counts are right', async () => {
  const [{ n }] = (await su`select count(*)::int as n from worker_checkpoints`) as unknown as [{ n: number }];
  assert.equal(n, ROWS);

  const plan = await withWorkspace(t.db.app, BIG, async (tx) => {
    const [row] = await tx.unsafe(`explain (analyze, format json) ${CONVOY_DETAIL_SQL}`, [BIG, 'convoy-42']);
    return (row!['QUERY PLAN'] as [{ Plan: PlanNode; 'Execution Time': number }])[0];
  });
  const onCheckpoints = nodesOf(plan.Plan).filter((node) => node['Relation Name'] === 'worker_checkpoints');
  const heapFetches = onCheckpoints.reduce((n, node) => n + (node['Heap Fetches'] ?? 0), 0);
  process.stdout.write(
    `convoyDetail over ${ROWS} checkpoint rows (filled and vacuumed in ${fillSeconds.toFixed(1)} s): execution ${plan['Execution Time'].toFixed(2)} ms; ` +
      `worker_checkpoints read by ${onCheckpoints.map((node) => `${node['Node Type']} ${node['Index Name'] ?? ''}`.trim()).join(', ')} ` +
      `(${heapFetches} heap fetches)\n`,
  );
  assert.ok(onCheckpoints.length > 0, 'the plan reads worker_checkpoints');
  assert.deepEqual(
    onCheckpoints.filter((node) => node['Node Type'] === 'Seq Scan'),
    [],
    'no Seq Scan on worker_checkpoints',
  );
  assert.ok(
    onCheckpoints.every((node) => node['Node Type'] === 'Index Only Scan'),
    `worker_checkpoints is read index-only: ${JSON.stringify(onCheckpoints.map((node) => node['Node Type']))}`,
  );

  const detail = await withWorkspace(t.db.app, BIG, (tx) => convoyDetail(tx, 'convoy-42'));
  assert.equal(detail?.runs.length, 10);
  assert.equal(detail?.checkpointCount, 10 * (ROWS / RUNS));
  assert.ok(
    detail!.runs.every((run) => run.checkpointCount === ROWS / RUNS),
    'detail!.runs.every((run) => run.checkpointCount === ROWS / RUNS)',
  );
  // A convoy of the other workspace does not exist for ws-big.
  assert.equal(await withWorkspace(t.db.app, BIG, (tx) => convoyDetail(tx, 'convoy-95')), undefined);
});
