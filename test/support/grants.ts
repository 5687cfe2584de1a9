// Operator grants for tests, written as the operator does: over the owner's (superuser) connection.
import type { Sql } from 'postgres';

/** Grants `variable` to a workspace's provider rows, for `hosts` (none: any host). */
export async function grantKey(su: Sql, workspaceId: string, variable: string, hosts: string[] = []): Promise<void> {
  await su`insert into key_grants (workspace_id, env_var, hosts) values (${workspaceId}, ${variable}, ${hosts})
           on conflict (workspace_id, env_var) do update set hosts = excluded.hosts`;
}

/** Registers a repository (by its realpath) to a workspace. */
export async function registerRepo(su: Sql, workspaceId: string, realPath: string, shared = false): Promise<void> {
  await su`insert into repo_grants (workspace_id, path, shared) values (${workspaceId}, ${realPath}, ${shared})
           on conflict (workspace_id, path) do update set shared = excluded.shared`;
}
