// What a run looks up of its workspace's settings: harness overrides, role routes, model providers (the key
// rules enforced when a provider row is written are here too). Operators list and edit them in settings-edit.ts.
import type { Sql } from 'postgres';
import { assertKeyVarAllowed } from '../core/key-vars.ts';
import { assertKeyGranted } from '../core/key-grants.ts';
import { keyGrantOf } from './grants.ts';
import { nativeBaseUrl, type NativeProvider } from '../core/providers.ts';
import type { WorkspaceTx } from './workspace.ts';

export interface HarnessRow {
  alias: string;
  needs_worktree: boolean;
  allowed_commands: string[];
  write_prefixes: string[] | null;
  /** Who runs the harness: the worker's own loop, or a remote AG-UI agent (worker/adapters/). */
  adapter: HarnessAdapter;
  /** A remote adapter's AG-UI endpoint; null for minimal. */
  endpoint_url: string | null;
  /** The variable whose value goes, as a bearer header, to endpoint_url (granted like a model key). */
  key_env_var: string | null;
}

export const HARNESS_ADAPTERS = ['minimal', 'remote-ag-ui', 'langgraph', 'crewai'] as const;
export type HarnessAdapter = (typeof HARNESS_ADAPTERS)[number];

export interface ModelProviderRow {
  alias: string;
  provider: 'openai-compatible' | NativeProvider;
  /** Null for a native provider on its own endpoint. */
  base_url: string | null;
  model: string;
  api_key_env_var: string | null;
}

export async function harnessOverride(tx: WorkspaceTx, alias: string): Promise<HarnessRow | undefined> {
  const [row] = await tx<HarnessRow[]>`
    select alias, needs_worktree, allowed_commands, write_prefixes, adapter, endpoint_url, key_env_var
      from harness_providers where alias = ${alias}`;
  return row;
}

export async function harnessAliasForRole(tx: WorkspaceTx, roleId: string): Promise<string | undefined> {
  const [row] = await tx<
    { harness_alias: string }[]
  >`select harness_alias from role_harness_routes where role_id = ${roleId}`;
  return row?.harness_alias;
}

export async function modelProvider(tx: WorkspaceTx, alias: string): Promise<ModelProviderRow | undefined> {
  const [row] = await tx<ModelProviderRow[]>`
    select alias, provider, base_url, model, api_key_env_var from model_providers where alias = ${alias}`;
  return row;
}

/** Names of the variables that hold this workspace's API keys: their values must be redacted. */
export async function apiKeyEnvVars(tx: WorkspaceTx): Promise<string[]> {
  const rows = await tx<{ api_key_env_var: string }[]>`
    select distinct api_key_env_var from model_providers where api_key_env_var is not null`;
  return rows.map((r) => r.api_key_env_var);
}

/**
 * Every variable any workspace's provider names as its key (names only), through the
 * security-definer function of migration 010: the start-up registration of secrets.
 */
export async function allApiKeyEnvVars(sql: Sql): Promise<string[]> {
  const rows = await sql<{ api_key_env_var: string }[]>`select api_key_env_var from echodo_api_key_env_vars()`;
  return rows.map((r) => r.api_key_env_var);
}

/**
 * Writes a provider row. Its api_key_env_var must match `keyVarGlobs` (WORKER_PROVIDER_KEY_VARS):
 * ProviderKeyVarRefusedError, naming the variable and the globs, otherwise; and it must be granted
 * to the workspace for the host of base_url: KeyNotGrantedError, naming the variable, otherwise.
 */
export async function upsertModelProvider(
  tx: WorkspaceTx,
  row: ModelProviderRow,
  keyVarGlobs?: readonly string[],
): Promise<void> {
  assertKeyVarAllowed(row.api_key_env_var, keyVarGlobs);
  if (row.api_key_env_var) {
    const url = row.provider === 'openai-compatible' ? (row.base_url ?? '') : nativeBaseUrl(row.provider, row.base_url);
    assertKeyGranted(row.api_key_env_var, await keyGrantOf(tx, row.api_key_env_var), url, tx.workspaceId);
  }
  await tx`insert into model_providers (workspace_id, alias, provider, base_url, model, api_key_env_var)
           values (${tx.workspaceId}, ${row.alias}, ${row.provider}, ${row.base_url}, ${row.model}, ${row.api_key_env_var})
           on conflict (workspace_id, alias) do update
             set provider = excluded.provider, base_url = excluded.base_url, model = excluded.model, api_key_env_var = excluded.api_key_env_var`;
}
