// Row-level security through the app client: workspace A can neither see, change, delete
// nor forge workspace B's rows in any table, and no workspace at all sees nothing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Sql } from 'postgres';
import { withWorkspace, type WorkspaceTx } from '../store/workspace.ts';
import { openDatabase, type Database } from '../store/connection.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from './support/db.ts';

const A = 'ws-a';
const B = 'ws-b';

/** One row per table, in FK order. `n` distinguishes a second row of the same workspace. */
const fixtures: Record<string, (tx: WorkspaceTx, ws: string, n: number) => Promise<unknown>> = {
  workspaces: (tx, ws, n) => tx`insert into workspaces (workspace_id, name) values (${n ? `${ws}-${n}` : ws}, ${ws})`,
  convoys: (tx, ws, n) => tx`insert into convoys (workspace_id, id) values (${ws}, ${`convoy-${n}`})`,
  briefs: (tx, ws, n) =>
    tx`insert into briefs (workspace_id, id, convoy_id, role_id) values (${ws}, ${`brief-${n}`}, 'convoy-0', 'coder')`,
  agent_runs: (tx, ws, n) =>
    tx`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job)
       values (${`${ws}-run-${n}`}, ${ws}, 'convoy-0', 'brief-0', ${`job-${n}`}, ${tx.json({ brief: 'redacted' })})`,
  worker_checkpoints: (tx, ws, n) =>
    tx`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt,
         lease_epoch, tool_history, files_touched, hash)
       values (${ws}, ${`${ws}-run-0`}, 'convoy-0', 'brief-0', ${n + 1}, 1, 1, 0, '[]', '[]', ${`hash-${n}`})`,
  convoy_events: (tx, ws) =>
    tx`insert into convoy_events (workspace_id, convoy_id, agent_run_id, type, metadata)
       values (${ws}, 'convoy-0', ${`${ws}-run-0`}, 'role_complete', ${tx.json({ harnessAlias: 'code' })})`,
  model_providers: (tx, ws, n) =>
    tx`insert into model_providers (workspace_id, alias, provider, base_url, model, api_key_env_var)
       values (${ws}, ${`model-${n}`}, 'openai-compatible', 'http://127.0.0.1:9/v1', 'm', 'SOME_KEY_VAR')`,
  harness_providers: (tx, ws, n) =>
    tx`insert into harness_providers (workspace_id, alias, needs_worktree) values (${ws}, ${`harness-${n}`}, true)`,
  role_harness_routes: (tx, ws, n) =>
    tx`insert into role_harness_routes (workspace_id, role_id, harness_alias) values (${ws}, ${`role-${n}`}, 'harness-0')`,
  dead_letters: (tx, ws, n) => tx`insert into dead_letters (workspace_id, job_id, reason, raw) values (${ws}, ${`job-${n}`}, 'invalid', '{}')`,
  checkpoint_anchors: (tx, ws, n) =>
    tx`insert into checkpoint_anchors (workspace_id, agent_run_id, anchor_seq, anchor_hash)
       values (${ws}, ${`${ws}-run-0`}, 1, ${`anchor-${n}`})`,
  mission_control_tokens: (tx, ws, n) =>
    tx`insert into mission_control_tokens (workspace_id, token_sha256)
       values (${ws}, ${(ws === A ? 'a' : 'b').repeat(63) + String(n)})`,
};
const TABLES = Object.keys(fixtures);

let t: TestDatabase;
let app: Sql;
let su: Sql;

before(async () => {
  t = await createTestDatabase();
  app = t.db.app;
  su = superuserSql(t.url);
  for (const ws of [A, B]) {
    await withWorkspace(app, ws, async (tx) => {
      for (const insert of Object.values(fixtures)) await insert(tx, ws, 0);
    });
  }
  // Rows of no workspace: an admin token and an unreadable job, written by the system functions.
  await t.db.admin`select echodo_admin_token_create(${'f'.repeat(64)})`;
  await t.db.admin`select echodo_dead_letter('', null, 'unreadable', 'not json')`;
});

after(async () => {
  await su?.end({ timeout: 1 });
  await t?.drop();
});

async function countAs(ws: string, table: string, where: string): Promise<number> {
  return withWorkspace(app, ws, async (tx) => {
    const [row] = await tx.unsafe<{ n: number }[]>(`select count(*)::int as n from ${table} where ${where}`, [B]);
    return row!.n;
  });
}

test('every table has workspace_id, forced row-level security, and a fixture in this test', async () => {
  const tables = await su<{ table: string; rls: boolean; forced: boolean; has_ws: boolean; policies: number }[]>`
    select c.relname as table, c.relrowsecurity as rls, c.relforcerowsecurity as forced,
           exists (select 1 from information_schema.columns col
                    where col.table_schema = 'public' and col.table_name = c.relname and col.column_name = 'workspace_id') as has_ws,
           (select count(*)::int from pg_policies p where p.schemaname = 'public' and p.tablename = c.relname) as policies
      from pg_class c join pg_namespace ns on ns.oid = c.relnamespace
     where ns.nspname = 'public' and c.relkind = 'r' and c.relname <> 'schema_migrations'
     order by 1`;
  for (const row of tables) {
    assert.ok(row.has_ws && row.rls && row.forced && row.policies > 0, `table ${row.table} is not workspace-isolated: ${JSON.stringify(row)}`);
    assert.ok(TABLES.includes(row.table), `table ${row.table} has no fixture in test/rls.test.ts: add one so its isolation is tested`);
  }
});

test('the app client is echodo_app, neither superuser nor BYPASSRLS', async () => {
  const [me] = await app<{ user: string; superuser: boolean; bypassrls: boolean }[]>`
    select current_user as user, rolsuper as superuser, rolbypassrls as bypassrls from pg_roles where rolname = current_user`;
  assert.deepEqual(me, { user: 'echodo_app', superuser: false, bypassrls: false });
});

test('workspace A sees only its own rows in every table', async () => {
  for (const table of TABLES) {
    assert.equal(await countAs(A, table, 'workspace_id = $1'), 0, `${table}: A sees B's rows`);
    const all = await withWorkspace(app, A, (tx) => tx.unsafe<{ workspace_id: string }[]>(`select workspace_id from ${table}`));
    assert.ok(all.length > 0, `${table}: A sees its own row`);
    assert.ok(all.every((r) => r.workspace_id === A), `${table}: A sees ${JSON.stringify(all)}`);
  }
});

test('hand-written SQL through withWorkspace(A) returns only A runs', async () => {
  const runs = await withWorkspace(app, A, (tx) => tx.unsafe<{ id: string; workspace_id: string }[]>('select * from agent_runs'));
  assert.deepEqual(
    runs.map((r) => [r.id, r.workspace_id]),
    [[`${A}-run-0`, A]],
  );
});

test("workspace A cannot update or delete B's rows: zero rows affected, B's rows intact", async () => {
  for (const table of TABLES) {
    const updated = await withWorkspace(app, A, (tx) => tx.unsafe(`update ${table} set workspace_id = workspace_id where workspace_id = $1`, [B]));
    assert.equal(updated.count, 0, `${table}: update reached B`);
    const deleted = await withWorkspace(app, A, (tx) => tx.unsafe(`delete from ${table} where workspace_id = $1`, [B]));
    assert.equal(deleted.count, 0, `${table}: delete reached B`);
    const [row] = await su.unsafe<{ n: number }[]>(`select count(*)::int as n from ${table} where workspace_id = $1`, [B]);
    assert.ok(row!.n > 0, `${table}: B's row is gone`);
  }
});

test('workspace A cannot insert a row with workspace_id B, nor move its own rows to B', async () => {
  for (const [table, insert] of Object.entries(fixtures)) {
    await assert.rejects(
      withWorkspace(app, A, (tx) => insert(tx, B, 1)),
      (err: { code?: string; message?: string }) => {
        assert.equal(err.code, '42501', `${table}: ${err.message}`);
        assert.match(err.message ?? '', /row-level security/);
        return true;
      },
      `${table}: insert as B accepted`,
    );
    await assert.rejects(
      withWorkspace(app, A, (tx) => tx.unsafe(`update ${table} set workspace_id = $1`, [B])),
      (err: { code?: string }) => err.code === '42501',
      `${table}: moving A's rows to B accepted`,
    );
  }
});

test('a query on the app client outside withWorkspace sees nothing, even on a connection that had a workspace', async () => {
  // One connection, so the later queries surely run where a workspace transaction ran before
  // (after which the session's app.workspace_id reads as '' rather than null).
  const single: Database = await openDatabase(t.config, { migrate: false, max: 1 });
  const visible = async () => {
    const seen: string[] = [];
    for (const table of TABLES) {
      const [row] = await single.app.unsafe<{ n: number }[]>(`select count(*)::int as n from ${table}`);
      if (row!.n > 0) seen.push(`${table} (${row!.n})`);
    }
    return seen;
  };
  try {
    assert.deepEqual(await visible(), [], 'visible on a fresh connection with no workspace set');
    await withWorkspace(single.app, A, (tx) => tx`select 1`);
    assert.deepEqual(await visible(), [], 'visible outside withWorkspace after a workspace transaction');
  } finally {
    await single.close();
  }
});
