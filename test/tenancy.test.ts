// Run ids were a global primary key, so a job of
// workspace `other` naming a run id of workspace `demo` got a constraint error confirming the
// id existed. Run ids are now unique per workspace (migration 005), and branch ownership is
// answered only as "yours" or "taken". Real Postgres; the migration is also run over old rows.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { Sql } from 'postgres';
import { claimBranch, ownBranchesAmong } from '../store/branches.ts';
import { loadMigrations, migrate } from '../store/migrate.ts';
import { createWorkspace, getRun } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { dispatchJob } from '../operator/dispatch.ts';
import { createQueue } from '../worker/queue/index.ts';
import type { JobQueue } from '../worker/queue/types.ts';
import { createTestDatabase, superuserSql, testServerUrl, withDatabase, type TestDatabase } from '../testbed/db.ts';

const DEMO = 'demo';
const OTHER = 'other';
let t: TestDatabase;
let su: Sql;
let queue: JobQueue;

before(async () => {
  t = await createTestDatabase();
  su = superuserSql(t.url);
  queue = createQueue({ config: t.config, db: t.db, workerId: 'tenancy-test' });
  for (const ws of [DEMO, OTHER]) await withWorkspace(t.db.app, ws, (tx) => createWorkspace(tx));
});

after(async () => {
  await queue?.close();
  await su?.end({ timeout: 2 });
  await t?.drop();
});

const job = (workspaceId: string, agentRunId: string, extra: Record<string, unknown> = {}) => ({
  workspaceId,
  convoyId: 'convoy-1',
  briefId: 'brief-1',
  roleId: 'coder',
  harnessAlias: 'code',
  repoPath: '/nonexistent/repo',
  baseRef: 'main',
  brief: 'Do it.',
  model: 'replay:/dev/null',
  agentRunId,
  ...extra,
});

test('a run id of another workspace is recorded as a new, independent run, answered exactly like an unknown id', async () => {
  const victim = await dispatchJob(t.db, queue, job(DEMO, 'run-dup-1', { brief: 'the victim brief' }));
  assert.equal(victim.agentRunId, 'run-dup-1');

  const unknown = await dispatchJob(t.db, queue, job(OTHER, 'run-never-seen'));
  const duplicate = await dispatchJob(t.db, queue, job(OTHER, 'run-dup-1'));
  // Same answer shape for "exists elsewhere" as for "does not exist": the id, a fresh job, no error.
  assert.deepEqual(Object.keys(duplicate).sort(), Object.keys(unknown).sort());
  assert.equal(duplicate.agentRunId, 'run-dup-1');

  const rows = await su<{ workspace_id: string; status: string; brief: string; attempt: number }[]>`
    select workspace_id, status, job->>'brief' as brief, attempt from agent_runs where id = 'run-dup-1' order by workspace_id`;
  assert.deepEqual(
    rows.map((r) => [r.workspace_id, r.status, r.brief, r.attempt]),
    [
      [DEMO, 'queued', 'the victim brief', 1],
      [OTHER, 'queued', 'Do it.', 1],
    ],
  );
  const seenByOther = await withWorkspace(t.db.app, OTHER, (tx) => getRun(tx, 'run-dup-1'));
  assert.equal(seenByOther?.job.brief, 'Do it.', "workspace other sees its own run, not demo's");

  // Checkpoint rows of both runs can exist side by side: seq 1 of each.
  for (const ws of [DEMO, OTHER]) {
    await su`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt,
                                             lease_epoch, tool_history, files_touched, hash)
             values (${ws}, 'run-dup-1', 'convoy-1', 'brief-1', 1, 1, 1, 1, '[]', '[]', ${`h-${ws}`})`;
  }
  // Deleting demo's run takes only demo's checkpoints (the foreign key is (workspace_id, agent_run_id)).
  await su`delete from agent_runs where workspace_id = ${DEMO} and id = 'run-dup-1'`;
  const left = await su`select workspace_id from worker_checkpoints where agent_run_id = 'run-dup-1'`;
  assert.deepEqual(
    left.map((r) => r.workspace_id),
    [OTHER],
  );
});

test("the queue take reserves one run of a duplicated id, not every workspace's", async () => {
  await dispatchJob(t.db, queue, job(DEMO, 'run-dup-2'));
  await dispatchJob(t.db, queue, job(OTHER, 'run-dup-2'));
  await su`update agent_runs set available_at = now() - interval '1 hour' where status = 'queued'`;
  await su`update agent_runs set available_at = now() + interval '1 hour' where status = 'queued' and id <> 'run-dup-2'`;
  const [taken] = await su<
    { workspace_id: string; agent_run_id: string }[]
  >`select * from echodo_take_queued_run(60000)`;
  assert.equal(taken?.agent_run_id, 'run-dup-2');
  const reserved = await su`select workspace_id from agent_runs where id = 'run-dup-2' and available_at > now()`;
  assert.deepEqual(
    reserved.map((r) => r.workspace_id),
    [taken!.workspace_id],
    'only the taken run is reserved',
  );
});

test('a branch claim answers only "yours" or "taken"; a workspace reads and writes no other workspace\'s claims', async () => {
  await dispatchJob(t.db, queue, job(DEMO, 'run-claim-a'));
  await dispatchJob(t.db, queue, job(OTHER, 'run-claim-b'));
  await dispatchJob(t.db, queue, job(OTHER, 'run-claim-a')); // the same id, in the other workspace
  const repoDir = '/repos/shared/.git';
  const claim = (ws: string, run: string, branch: string, mayCreate = true) =>
    withWorkspace(t.db.app, ws, (tx) => claimBranch(tx, { repoDir, branch, agentRunId: run, mayCreate }));

  assert.equal(await claim(DEMO, 'run-claim-a', 'echodo/brief-1-run-clai'), 'yours');
  assert.equal(
    await claim(DEMO, 'run-claim-a', 'echodo/brief-1-run-clai'),
    'yours',
    'a re-dispatch of the same run keeps it',
  );
  assert.equal(
    await claim(OTHER, 'run-claim-a', 'echodo/brief-1-run-clai'),
    'taken',
    'the same run id in another workspace does not own it',
  );
  assert.equal(await claim(OTHER, 'run-claim-b', 'echodo/brief-1-run-clai'), 'taken');
  assert.equal(
    await claim(OTHER, 'run-claim-b', 'echodo/unclaimed', false),
    'taken',
    'an existing git branch without an owner is not adopted',
  );
  assert.equal(await claim(OTHER, 'run-claim-b', 'echodo/unclaimed'), 'yours');
  // The same name in another repository is another branch.
  assert.equal(
    await withWorkspace(t.db.app, OTHER, (tx) =>
      claimBranch(tx, {
        repoDir: '/repos/other/.git',
        branch: 'echodo/brief-1-run-clai',
        agentRunId: 'run-claim-b',
        mayCreate: true,
      }),
    ),
    'yours',
  );

  const visible = await withWorkspace(
    t.db.app,
    OTHER,
    (tx) => tx`select branch, agent_run_id from branch_claims order by branch`,
  );
  assert.ok(
    visible.every((r) => r.agent_run_id === 'run-claim-b'),
    `other sees only its own claims: ${JSON.stringify(visible)}`,
  );
  assert.deepEqual(
    [
      ...(await withWorkspace(t.db.app, OTHER, (tx) =>
        ownBranchesAmong(tx, repoDir, ['echodo/brief-1-run-clai', 'echodo/unclaimed']),
      )),
    ],
    ['echodo/unclaimed'],
  );
  await assert.rejects(
    withWorkspace(
      t.db.app,
      OTHER,
      (tx) =>
        tx`insert into branch_claims (repo_dir, branch, workspace_id, agent_run_id) values (${repoDir}, 'echodo/x', ${OTHER}, 'run-claim-b')`,
    ),
    /permission denied|row-level security/,
    "a workspace cannot insert claims directly (a unique violation would confirm another's)",
  );
  await assert.rejects(
    claim(OTHER, 'run-claim-c', 'echodo/y'),
    /does not exist in this workspace/,
    'only a run of the workspace can claim',
  );
  await assert.rejects(
    t.db.app.begin((tx) => tx`select echodo_claim_branch(${repoDir}, 'echodo/z', 'run-claim-a', true)`),
    /no workspace is set/,
  );
});

test('migration 005 keeps existing rows and re-keys them by (workspace_id, id)', async () => {
  const adminUrl = await testServerUrl();
  const name = `echodo_tenancy_${randomBytes(5).toString('hex')}`;
  const admin = superuserSql(adminUrl);
  await admin.unsafe(`create database "${name}"`);
  const sql = superuserSql(withDatabase(adminUrl, name));
  try {
    const all = loadMigrations();
    await migrate(
      sql,
      all.filter((m) => m.version < 5),
    );
    await sql`insert into workspaces (workspace_id) values ('demo'), ('other')`;
    await sql`insert into convoys (workspace_id, id) values ('demo', 'c')`;
    await sql`insert into briefs (workspace_id, id, convoy_id, role_id) values ('demo', 'b', 'c', 'coder')`;
    await sql`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, status)
              values ('old-run', 'demo', 'c', 'b', 'j', '{}', 'completed')`;
    await sql`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt,
                                              lease_epoch, tool_history, files_touched, hash)
              values ('demo', 'old-run', 'c', 'b', 1, 1, 1, 1, '[]', '[]', 'h1'), ('demo', 'old-run', 'c', 'b', 2, 2, 1, 1, '[]', '[]', 'h2')`;
    await sql`insert into checkpoint_anchors (workspace_id, agent_run_id, anchor_seq, anchor_hash) values ('demo', 'old-run', 1, 'h1')`;
    // Before: the id alone is the key, so the other workspace cannot have a run of that id.
    await sql`insert into convoys (workspace_id, id) values ('other', 'c')`;
    await sql`insert into briefs (workspace_id, id, convoy_id, role_id) values ('other', 'b', 'c', 'coder')`;
    await assert.rejects(
      sql`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job) values ('old-run', 'other', 'c', 'b', 'j', '{}')`,
      /agent_runs_pkey/,
    );

    await migrate(sql, all);
    const [pk] = await sql<{ cols: string[] }[]>`
      select array_agg(a.attname::text order by k.ord) as cols
        from pg_constraint c, unnest(c.conkey) with ordinality k(attnum, ord)
        join pg_attribute a on a.attnum = k.attnum
       where c.conname = 'agent_runs_pkey' and a.attrelid = 'agent_runs'::regclass`;
    assert.deepEqual(pk?.cols, ['workspace_id', 'id']);
    const fks = await sql<{ tbl: string; def: string }[]>`
      select conrelid::regclass::text as tbl, pg_get_constraintdef(oid) as def from pg_constraint
       where contype = 'f' and confrelid = 'agent_runs'::regclass order by 1`;
    assert.ok(fks.length >= 3, `foreign keys to agent_runs: ${JSON.stringify(fks)}`);
    for (const fk of fks)
      assert.match(fk.def, /^FOREIGN KEY \(workspace_id, \w+\) REFERENCES agent_runs\(workspace_id, id\)/, fk.tbl);
    assert.equal(
      (await sql`select 1 from worker_checkpoints where agent_run_id = 'old-run'`).length,
      2,
      'checkpoints kept',
    );
    assert.equal((await sql`select 1 from checkpoint_anchors where agent_run_id = 'old-run'`).length, 1, 'anchor kept');
    await sql`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job) values ('old-run', 'other', 'c', 'b', 'j', '{}')`;
    assert.equal(
      (await sql`select 1 from agent_runs where id = 'old-run'`).length,
      2,
      'after: one run of that id per workspace',
    );
  } finally {
    await sql.end({ timeout: 2 });
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end({ timeout: 2 });
  }
});
