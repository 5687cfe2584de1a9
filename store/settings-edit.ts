// A workspace's settings as operators manage them (npm run workspace, the Settings page):
// model providers, harnesses, role → harness routes. One query per function; adding a model
// goes through upsertModelProvider (settings-lookup.ts), which enforces WORKER_PROVIDER_KEY_VARS.
import type { HarnessRow, ModelProviderRow } from './settings-lookup.ts';
import { assertKeyGranted } from '../core/key-grants.ts';
import { keyGrantOf } from './grants.ts';
import type { WorkspaceTx } from './workspace.ts';

export interface RouteRow {
  role_id: string;
  harness_alias: string;
}

export async function listModelProviders(tx: WorkspaceTx): Promise<ModelProviderRow[]> {
  return tx<ModelProviderRow[]>`
    select alias, provider, base_url, model, api_key_env_var from model_providers order by alias`;
}

export async function removeModelProvider(tx: WorkspaceTx, alias: string): Promise<boolean> {
  return (await tx`delete from model_providers where alias = ${alias} returning 1`).length > 0;
}

export async function listHarnesses(tx: WorkspaceTx): Promise<HarnessRow[]> {
  return tx<HarnessRow[]>`
    select alias, needs_worktree, allowed_commands, write_prefixes, adapter, endpoint_url, key_env_var
      from harness_providers order by alias`;
}

/**
 * Writes a harness row. A header key variable must be granted to the workspace for the endpoint's
 * host (KeyNotGrantedError otherwise): a remote agent's key is a secret exactly like a model's.
 */
export async function upsertHarness(tx: WorkspaceTx, row: HarnessRow): Promise<void> {
  if (row.key_env_var) {
    assertKeyGranted(row.key_env_var, await keyGrantOf(tx, row.key_env_var), row.endpoint_url ?? '', tx.workspaceId);
  }
  await tx`insert into harness_providers
             (workspace_id, alias, needs_worktree, allowed_commands, write_prefixes, adapter, endpoint_url, key_env_var)
           values (${tx.workspaceId}, ${row.alias}, ${row.needs_worktree}, ${row.allowed_commands},
                   ${row.write_prefixes}, ${row.adapter}, ${row.endpoint_url}, ${row.key_env_var})
           on conflict (workspace_id, alias) do update
             set needs_worktree = excluded.needs_worktree, allowed_commands = excluded.allowed_commands,
                 write_prefixes = excluded.write_prefixes, adapter = excluded.adapter,
                 endpoint_url = excluded.endpoint_url, key_env_var = excluded.key_env_var`;
}

export async function removeHarness(tx: WorkspaceTx, alias: string): Promise<boolean> {
  return (await tx`delete from harness_providers where alias = ${alias} returning 1`).length > 0;
}

export async function listRoutes(tx: WorkspaceTx): Promise<RouteRow[]> {
  return tx<RouteRow[]>`select role_id, harness_alias from role_harness_routes order by role_id`;
}

export async function upsertRoute(tx: WorkspaceTx, route: RouteRow): Promise<void> {
  await tx`insert into role_harness_routes (workspace_id, role_id, harness_alias)
           values (${tx.workspaceId}, ${route.role_id}, ${route.harness_alias})
           on conflict (workspace_id, role_id) do update set harness_alias = excluded.harness_alias`;
}

export async function removeRoute(tx: WorkspaceTx, roleId: string): Promise<boolean> {
  return (await tx`delete from role_harness_routes where role_id = ${roleId} returning 1`).length > 0;
}
