// Run search finds the same runs by the trigram index as by walking the columns one by one: a match in
// each searched column, `%` and `_` as literal characters, never a match across two columns or in
// another workspace, a term held by many runs, and the same answers on a server without the index.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Sql } from 'postgres';
import { searchRuns, type RunFilter } from '../store/run-search.ts';
import { withWorkspace } from '../store/workspace.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';

const WS = 'search-ws';
const OTHER = 'search-other';
/** More runs than a term may match and still be looked up by id: "task" walks instead. */
const RUNS = 1_200;

let t: TestDatabase;
let su: Sql;

async function seed(ws: string, prefix: string): Promise<void> {
  await su`insert into convoys (workspace_id, id) values (${ws}, ${`${prefix}convoy`})`;
  await su`insert into briefs (workspace_id, id, convoy_id, role_id)
           select ${ws}, ${prefix} || 'brief-' || g, ${`${prefix}convoy`}, 'coder' from generate_series(1, ${RUNS}) g`;
  await su`insert into agent_runs (workspace_id, id, convoy_id, brief_id, job_id, job, harness_alias, status, attempt,
             worker_id, host_id, branch, created_at)
           select ${ws}, ${prefix} || 'run-' || g, ${`${prefix}convoy`}, ${prefix} || 'brief-' || g, 'job-' || g,
                  jsonb_build_object('brief', case g when 7 then 'Fix the 100% CPU_spin' when 8 then 'fix 100 cpu'
                                                     else 'task ' || g end),
                  'code', 'running', 1, case when g = 9 then 'worker-zeta' end, case when g = 10 then 'host-omega' end,
                  case when g = 11 then 'echodo/needle-branch' end, now() - make_interval(secs => g)
             from generate_series(1, ${RUNS}) g`;
}

before(async () => {
  t = await createTestDatabase();
  su = superuserSql(t.url);
  await su`insert into workspaces (workspace_id, name) values (${WS}, ${WS}), (${OTHER}, ${OTHER})`;
  await seed(WS, '');
  await seed(OTHER, 'o-');
  await su`analyze agent_runs`;
});
after(async () => {
  await su?.end({ timeout: 2 });
  await t?.drop();
});

/** Every run of the workspace the search finds, all pages. */
async function found(q: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  do {
    const page = await withWorkspace(t.db.app, WS, (tx) => searchRuns(tx, { q } as RunFilter, cursor, 200));
    ids.push(...page.runs.map((r) => r.agentRunId));
    cursor = page.cursor;
  } while (cursor);
  return ids;
}

/** The runs each column's own ILIKE matches, newest first: what the search meant before the index. */
async function expected(q: string): Promise<string[]> {
  const pattern = `%${q.replace(/[\\%_]/g, (ch) => `\\${ch}`)}%`;
  const rows = await su<{ id: string }[]>`
    select id from agent_runs
     where workspace_id = ${WS}
       and (job->>'brief' ilike ${pattern} or brief_id ilike ${pattern} or id ilike ${pattern}
            or branch ilike ${pattern} or worker_id ilike ${pattern} or host_id ilike ${pattern})
     order by created_at desc, id desc`;
  return rows.map((r) => r.id);
}

const TERMS: [string, number][] = [
  ['cpu_SPIN', 1], // brief text, any case; `_` literal
  ['100%', 1], // `%` literal: "fix 100 cpu" is not found
  ['brief-42', 11], // brief id
  ['run-1199', 1], // run id
  ['needle-branch', 1], // branch
  ['worker-zeta', 1], // worker
  ['host-omega', 1], // host
  ['task 12', 12], // brief text, several runs
  ['task', RUNS - 2], // too many to look up by id: walked
  ['ta', RUNS - 2], // no trigram to look up
  ['spin brief-7', 0], // the brief's end and the brief id's start: not one column
  ['o-run-1', 0], // another workspace's run
];

async function assertSameAsColumns(): Promise<void> {
  for (const [q, n] of TERMS) {
    const want = await expected(q);
    assert.equal(want.length, n, `${q}: the fixture holds ${n}`);
    assert.deepEqual(await found(q), want, `q=${q}`);
  }
}

test('the trigram index finds what each column finds', { timeout: 60_000 }, async () => {
  const [index] = await su`select indexdef from pg_indexes where indexname = 'agent_runs_search'`;
  assert.match(String(index?.indexdef), /gin_trgm_ops/, 'embedded Postgres has pg_trgm: the index is there');
  await assertSameAsColumns();
});

test('without the index (no pg_trgm on the server) the search finds the same', { timeout: 60_000 }, async () => {
  await su`drop index agent_runs_search`;
  await assertSameAsColumns();
});
