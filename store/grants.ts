// Operator grants (migration 015): key grants (which variable a workspace's provider rows may name,
// and the hosts its value may go to) and repository grants (which repoPath its jobs may name).
// Reads go through a workspace transaction of the app role; writes take the owner's connection
// (DATABASE_URL), which the app role and mission control never hold. One query per function.
import type { Sql, TransactionSql } from 'postgres';
import type { KeyGrant } from '../core/key-grants.ts';
import { withWorkspace, type WorkspaceTx } from './workspace.ts';

export interface KeyGrantRow {
  workspace_id: string;
  env_var: string;
  hosts: string[];
  granted_at: Date;
}

export interface RepoGrantRow {
  workspace_id: string;
  path: string;
  shared: boolean;
  registered_at: Date;
}

/** What echodo_repo_access answers for the current workspace. */
export type RepoAccess = 'granted' | 'unregistered' | 'exclusive';

// ------------------------------------------------------------------ reads (app role, one workspace)

/** Every key grant of the transaction's workspace. */
export async function workspaceKeyGrants(tx: WorkspaceTx): Promise<KeyGrant[]> {
  const rows = await tx<{ env_var: string; hosts: string[] }[]>`select env_var, hosts from key_grants order by env_var`;
  return rows.map((r) => ({ variable: r.env_var, hosts: r.hosts }));
}

/** The grant of one variable to the transaction's workspace, if any. */
export async function keyGrantOf(tx: WorkspaceTx, variable: string): Promise<KeyGrant | undefined> {
  const [row] = await tx<{ env_var: string; hosts: string[] }[]>`
    select env_var, hosts from key_grants where env_var = ${variable}`;
  return row && { variable: row.env_var, hosts: row.hosts };
}

/** Whether the transaction's workspace may name the repository whose realpath is `realPath`. */
export async function repoAccess(tx: WorkspaceTx, realPath: string): Promise<RepoAccess> {
  const [row] = await tx<{ access: RepoAccess }[]>`select echodo_repo_access(${realPath}) as access`;
  return row!.access;
}

/**
 * Every registered repository's path, across workspaces (SECURITY DEFINER, migration 015): for the
 * start-up check that ECHODO_HOME lies in none of them (core/config.ts homePlacementProblem).
 */
export async function registeredRepoPaths(sql: Sql): Promise<string[]> {
  const rows = await sql<{ path: string }[]>`select path from echodo_registered_repo_paths()`;
  return rows.map((r) => r.path);
}

// ------------------------------------------------------------------ operator writes (owner connection)

export async function upsertKeyGrant(
  owner: Sql,
  workspaceId: string,
  variable: string,
  hosts: readonly string[],
): Promise<void> {
  await withWorkspace(
    owner,
    workspaceId,
    (tx) => tx`
    insert into key_grants (workspace_id, env_var, hosts) values (${workspaceId}, ${variable}, ${[...hosts]})
    on conflict (workspace_id, env_var) do update set hosts = excluded.hosts, granted_at = now()`,
  );
}

export async function deleteKeyGrant(owner: Sql, workspaceId: string, variable: string): Promise<boolean> {
  const rows = await withWorkspace(
    owner,
    workspaceId,
    (tx) => tx`
    delete from key_grants where workspace_id = ${workspaceId} and env_var = ${variable} returning 1`,
  );
  return rows.length > 0;
}

/** Every key grant, or one workspace's (null: all). */
export async function listKeyGrants(owner: Sql, workspaceId: string | null): Promise<KeyGrantRow[]> {
  return owner<KeyGrantRow[]>`
    select workspace_id, env_var, hosts, granted_at from key_grants
     where ${workspaceId}::text is null or workspace_id = ${workspaceId}
     order by workspace_id, env_var`;
}

/** Serialises registrations of one path, so the exclusivity check and the insert are one decision. */
export async function lockRepoPath(tx: TransactionSql, realPath: string): Promise<void> {
  await tx`select pg_advisory_xact_lock(hashtext('echodo repo grant'), hashtext(${realPath}))`;
}

/** Other workspaces' registrations of a path (the owner sees every workspace). */
export async function otherRepoGrants(
  tx: TransactionSql,
  workspaceId: string,
  realPath: string,
): Promise<RepoGrantRow[]> {
  return tx<RepoGrantRow[]>`
    select workspace_id, path, shared, registered_at from repo_grants
     where path = ${realPath} and workspace_id <> ${workspaceId} order by workspace_id`;
}

export async function upsertRepoGrant(
  tx: TransactionSql,
  workspaceId: string,
  realPath: string,
  shared: boolean,
): Promise<void> {
  await tx`insert into repo_grants (workspace_id, path, shared) values (${workspaceId}, ${realPath}, ${shared})
           on conflict (workspace_id, path) do update set shared = excluded.shared`;
}

export async function deleteRepoGrant(owner: Sql, workspaceId: string, realPath: string): Promise<boolean> {
  const rows = await withWorkspace(
    owner,
    workspaceId,
    (tx) => tx`
    delete from repo_grants where workspace_id = ${workspaceId} and path = ${realPath} returning 1`,
  );
  return rows.length > 0;
}

/** Every repository grant, or one workspace's (null: all). */
export async function listRepoGrants(owner: Sql, workspaceId: string | null): Promise<RepoGrantRow[]> {
  return owner<RepoGrantRow[]>`
    select workspace_id, path, shared, registered_at from repo_grants
     where ${workspaceId}::text is null or workspace_id = ${workspaceId}
     order by workspace_id, path`;
}
