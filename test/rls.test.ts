// Row-level security through the app client: workspace A can neither see, change, delete
// nor forge workspace B's rows in any table, and no workspace at all sees nothing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Sql } from 'postgres';
import { withWorkspace, type WorkspaceTx } from '../store/workspace.ts';
import { openDatabase, type Database } from '../store/connection.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';

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
  dead_letters: (tx, ws, n) =>
    tx`insert into dead_letters (workspace_id, job_id, reason, raw) values (${ws}, ${`job-${n}`}, 'invalid', '{}')`,
  checkpoint_anchors: (tx, ws, n) =>
    tx`insert into checkpoint_anchors (workspace_id, agent_run_id, anchor_seq, anchor_hash)
       values (${ws}, ${`${ws}-run-0`}, 1, ${`anchor-${n}`})`,
  mission_control_tokens: (tx, ws, n) =>
    tx`insert into mission_control_tokens (workspace_id, token_sha256)
       values (${ws}, ${(ws === A ? 'a' : 'b').repeat(63) + String(n)})`,
  checkpoint_manifest: (tx, ws, n) =>
    tx`insert into checkpoint_manifest (workspace_id, agent_run_id, path, sha256, seq)
       values (${ws}, ${`${ws}-run-0`}, ${`src/file-${n}.ts`}, null, 1)`,
  model_prices: (tx, ws, n) =>
    tx`insert into model_prices (workspace_id, model, input_per_mtok, output_per_mtok) values (${ws}, ${`model-${n}`}, 1, 2)`,
  workspace_budgets: (tx, ws) => tx`insert into workspace_budgets (workspace_id, daily_usd) values (${ws}, 5)`,
  checkpoint_chain_verdicts: (tx, ws) =>
    tx`insert into checkpoint_chain_verdicts (workspace_id, agent_run_id, verified_seq) values (${ws}, ${`${ws}-run-0`}, 1)`,
  workspace_storage_policies: (tx, ws) =>
    tx`insert into workspace_storage_policies (workspace_id, keep_last) values (${ws}, 3)`,
  // Operator grants: the app role only reads them (written over the owner's connection, see before()).
  key_grants: (tx, ws, n) => tx`insert into key_grants (workspace_id, env_var) values (${ws}, ${`GRANT_${n}_API_KEY`})`,
  repo_grants: (tx, ws, n) =>
    tx`insert into repo_grants (workspace_id, path) values (${ws}, ${`/srv/${ws}/repo-${n}`})`,
  // A workspace never inserts a claim itself (store/migrations/005): it claims through the function.
  branch_claims: (tx, _ws, n) =>
    tx`select echodo_claim_branch('/repo', ${`echodo/b-${tx.workspaceId}-${n}`}, ${`${tx.workspaceId}-run-0`}, true)`,
};
const TABLES = Object.keys(fixtures);
/** Tables the app role may only read: their rows are written as the owner. */
const OPERATOR_ONLY = new Set(['key_grants', 'repo_grants']);

/** A row forged for another workspace, where the fixture would not be a plain insert. */
const forgeries: Record<string, (tx: WorkspaceTx, ws: string, n: number) => Promise<unknown>> = {
  branch_claims: (tx, ws, n) =>
    tx`insert into branch_claims (repo_dir, branch, workspace_id, agent_run_id) values ('/repo', ${`forged-${n}`}, ${ws}, ${`${ws}-run-0`})`,
};

/** Refused by a policy, or by a missing grant (tables a workspace only reads): both are 42501. */
const REFUSED = /row-level security|permission denied/;

let t: TestDatabase;
let app: Sql;
let su: Sql;

before(async () => {
  t = await createTestDatabase();
  app = t.db.app;
  su = superuserSql(t.url);
  for (const ws of [A, B]) {
    await withWorkspace(app, ws, async (tx) => {
      for (const [table, insert] of Object.entries(fixtures)) if (!OPERATOR_ONLY.has(table)) await insert(tx, ws, 0);
    });
    await withWorkspace(su, ws, async (tx) => {
      for (const table of OPERATOR_ONLY) await fixtures[table]!(tx, ws, 0);
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
    assert.ok(
      row.has_ws && row.rls && row.forced && row.policies > 0,
      `table ${row.table} is not workspace-isolated: ${JSON.stringify(row)}`,
    );
    assert.ok(
      TABLES.includes(row.table),
      `table ${row.table} has no fixture in test/rls.test.ts: add one so its isolation is tested`,
    );
  }
});

test('the app client logs in as echodo_app_login (a member of echodo_app), neither superuser nor BYPASSRLS', async () => {
  for (const client of [app, t.db.admin]) {
    const [me] = await client<
      { user: string; session: string; superuser: boolean; bypassrls: boolean; app: boolean }[]
    >`
      select current_user as user, session_user as session, rolsuper as superuser, rolbypassrls as bypassrls,
             pg_has_role(current_user, 'echodo_app', 'USAGE') as app
        from pg_roles where rolname = current_user`;
    assert.deepEqual(me, {
      user: 'echodo_app_login',
      session: 'echodo_app_login',
      superuser: false,
      bypassrls: false,
      app: true,
    });
  }
});

test('the login is a member of no privileged role, and can run every system function', async () => {
  const privileged = await app<{ rolname: string }[]>`
    select r.rolname from pg_roles r
     where pg_has_role(current_user, r.oid, 'MEMBER')
       and (r.rolsuper or r.rolbypassrls or r.rolcreaterole or r.rolcreatedb or r.rolreplication or r.rolname like 'pg\_%')`;
  assert.deepEqual([...privileged], [], 'a privileged role the login could SET ROLE to');
  // Nothing runs as the superuser after migrating: a SECURITY DEFINER function the login cannot
  // execute is one that no process can call.
  const uncallable = await su<{ fn: string }[]>`
    select p.oid::regprocedure::text as fn from pg_proc p
     where p.pronamespace = 'public'::regnamespace and p.prosecdef
       and not has_function_privilege('echodo_app_login', p.oid, 'EXECUTE')`;
  assert.deepEqual([...uncallable], [], 'grant execute on these to echodo_app in their migration');
});

test('no app connection can SET ROLE to the superuser, inside or outside a workspace transaction', async () => {
  await assert.rejects(
    app`set role postgres`,
    (err: { code?: string }) => err.code === '42501',
    'set role postgres accepted',
  );
  await assert.rejects(
    withWorkspace(app, A, (tx) => tx`set local role postgres`),
    (err: { code?: string }) => err.code === '42501',
    'set local role postgres accepted in a workspace transaction',
  );
  await assert.rejects(app`set session authorization postgres`, (err: { code?: string }) => err.code === '42501');
  const [me] = await app<{ user: string }[]>`select current_user as user`;
  assert.equal(me!.user, 'echodo_app_login');
});

test('workspace A sees only its own rows in every table', async () => {
  for (const table of TABLES) {
    assert.equal(await countAs(A, table, 'workspace_id = $1'), 0, `${table}: A sees B's rows`);
    const all = await withWorkspace(app, A, (tx) =>
      tx.unsafe<{ workspace_id: string }[]>(`select workspace_id from ${table}`),
    );
    assert.ok(all.length > 0, `${table}: A sees its own row`);
    assert.ok(
      all.every((r) => r.workspace_id === A),
      `${table}: A sees ${JSON.stringify(all)}`,
    );
  }
});

test('hand-written SQL through withWorkspace(A) returns only A runs', async () => {
  const runs = await withWorkspace(app, A, (tx) =>
    tx.unsafe<{ id: string; workspace_id: string }[]>('select * from agent_runs'),
  );
  assert.deepEqual(
    runs.map((r) => [r.id, r.workspace_id]),
    [[`${A}-run-0`, A]],
  );
});

test("workspace A cannot update or delete B's rows: zero rows affected, B's rows intact", async () => {
  // Zero rows, or refused outright on a table the workspace only reads.
  const affected = (sql: string) =>
    withWorkspace(app, A, (tx) => tx.unsafe(sql, [B])).then(
      (r) => r.count,
      (err: { code?: string; message?: string }) => {
        assert.equal(err.code, '42501', err.message);
        return 0;
      },
    );
  for (const table of TABLES) {
    assert.equal(
      await affected(`update ${table} set workspace_id = workspace_id where workspace_id = $1`),
      0,
      `${table}: update reached B`,
    );
    assert.equal(await affected(`delete from ${table} where workspace_id = $1`), 0, `${table}: delete reached B`);
    const [row] = await su.unsafe<{ n: number }[]>(`select count(*)::int as n from ${table} where workspace_id = $1`, [
      B,
    ]);
    assert.ok(row!.n > 0, `${table}: B's row is gone`);
  }
});

test('workspace A cannot insert a row with workspace_id B, nor move its own rows to B', async () => {
  for (const [table, fixture] of Object.entries(fixtures)) {
    const insert = forgeries[table] ?? fixture;
    await assert.rejects(
      withWorkspace(app, A, (tx) => insert(tx, B, 1)),
      (err: { code?: string; message?: string }) => {
        assert.equal(err.code, '42501', `${table}: ${err.message}`);
        assert.match(err.message ?? '', REFUSED);
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
