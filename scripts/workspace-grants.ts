// The operator's grants, as `npm run workspace -- key …` and `repo …` make them (store/grants.ts):
// input checked before any database is opened, then written over the owner's connection
// (DATABASE_URL, or the embedded server's), which the app role and mission control never hold.
import { realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Sql } from 'postgres';
import { EchodoError } from '../core/errors.ts';
import { normalizeGrantHost } from '../core/key-grants.ts';
import { keyVarAllowed } from '../core/key-vars.ts';
import {
  deleteKeyGrant,
  deleteRepoGrant,
  listKeyGrants,
  listRepoGrants,
  lockRepoPath,
  otherRepoGrants,
  upsertKeyGrant,
  upsertRepoGrant,
} from '../store/grants.ts';
import { withWorkspace } from '../store/workspace.ts';

/** A grant refused before anything was written (exit 2). */
export class GrantRefusedError extends EchodoError {
  constructor(message: string) {
    super('invalid_job', message);
    this.name = 'GrantRefusedError';
  }
}

const VARIABLE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The variable of a key grant: a variable name matching WORKER_PROVIDER_KEY_VARS (else no row could use it). */
export function grantVariable(variable: string, keyVarGlobs: readonly string[]): string {
  if (!VARIABLE.test(variable)) throw new GrantRefusedError(`${JSON.stringify(variable)} is not a variable name`);
  if (!keyVarAllowed(variable, keyVarGlobs)) {
    throw new GrantRefusedError(
      `${variable} does not match WORKER_PROVIDER_KEY_VARS (${keyVarGlobs.join(', ')}): no provider may name it`,
    );
  }
  return variable;
}

/** Granted hosts, normalised and without repeats; none: any host. */
export function grantHosts(hosts: readonly string[] | undefined): string[] {
  try {
    return [...new Set((hosts ?? []).map(normalizeGrantHost))];
  } catch (err) {
    throw new GrantRefusedError((err as Error).message);
  }
}

/**
 * The realpath of a folder to register; refused when it is not an existing folder, or when it holds
 * ECHODO_HOME (the database password and the app role file): agents read and write in a repository.
 */
export async function repoRealpath(given: string, echodoHome: string): Promise<string> {
  if (!path.isAbsolute(given)) throw new GrantRefusedError(`${given} must be an absolute path`);
  const real = await realpath(given).catch(() => undefined);
  if (!real || !(await stat(real)).isDirectory()) throw new GrantRefusedError(`${given} is not an existing folder`);
  const home = await realpath(echodoHome).catch(() => path.resolve(echodoHome));
  if (home === real || home.startsWith(`${real}${path.sep}`)) {
    throw new GrantRefusedError(`${given} holds ECHODO_HOME (${echodoHome}): a repository agents work in may not`);
  }
  return real;
}

export const keyGrant = (owner: Sql, workspaceId: string, variable: string, hosts: string[]) =>
  upsertKeyGrant(owner, workspaceId, variable, hosts);

export async function keyRevoke(owner: Sql, workspaceId: string, variable: string): Promise<void> {
  if (!(await deleteKeyGrant(owner, workspaceId, variable))) {
    throw new GrantRefusedError(`${variable} is not granted to workspace ${workspaceId}`);
  }
}

export async function keyList(owner: Sql, workspaceId: string | null): Promise<string[]> {
  const rows = await listKeyGrants(owner, workspaceId);
  return rows.map((r) =>
    JSON.stringify({ workspace: r.workspace_id, variable: r.env_var, hosts: r.hosts.length ? r.hosts : 'any' }),
  );
}

/**
 * Registers a repository to a workspace. Unshared, it must be no other workspace's; shared, no
 * other workspace may hold it unshared. Decided under a lock on the path, so two registrations
 * racing cannot both pass.
 */
export async function repoAdd(owner: Sql, workspaceId: string, realPath: string, shared: boolean): Promise<void> {
  await withWorkspace(owner, workspaceId, async (tx) => {
    await lockRepoPath(tx, realPath);
    const others = await otherRepoGrants(tx, workspaceId, realPath);
    const exclusive = others.find((o) => !o.shared);
    if (exclusive) {
      throw new GrantRefusedError(`${realPath} is registered to workspace ${exclusive.workspace_id}, not shared`);
    }
    if (!shared && others.length) {
      throw new GrantRefusedError(
        `${realPath} is also registered to workspace(s) ${others.map((o) => o.workspace_id).join(', ')}: ` +
          'register it with --shared, or remove the others first',
      );
    }
    await upsertRepoGrant(tx, workspaceId, realPath, shared);
  });
}

/** Removes a registration, named by its path as given or as resolved (the folder may be gone). */
export async function repoRemove(owner: Sql, workspaceId: string, given: string): Promise<void> {
  const real = await realpath(given).catch(() => path.resolve(given));
  const removed =
    (await deleteRepoGrant(owner, workspaceId, real)) ||
    (await deleteRepoGrant(owner, workspaceId, path.resolve(given)));
  if (!removed) throw new GrantRefusedError(`${given} is not registered to workspace ${workspaceId}`);
}

export async function repoList(owner: Sql, workspaceId: string | null): Promise<string[]> {
  const rows = await listRepoGrants(owner, workspaceId);
  return rows.map((r) => JSON.stringify({ workspace: r.workspace_id, path: r.path, shared: r.shared }));
}
