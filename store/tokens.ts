// Mission control bearer tokens. A token is shown once at creation and stored only as
// its sha256, so a database dump cannot be replayed against the panel.
import { createHash, randomBytes } from 'node:crypto';
import type { Sql } from 'postgres';
import { EchodoError } from '../worker/errors.ts';
import { workspaceExists } from './runs.ts';
import { withWorkspace } from './workspace.ts';

export const TOKEN_PREFIX = 'emc_';

/** Who a token speaks for: one workspace, or the fleet (admin, no workspace). */
export type Principal = { kind: 'workspace'; workspaceId: string } | { kind: 'admin' };

export function tokenSha256(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

export function generateToken(): string {
  return TOKEN_PREFIX + randomBytes(32).toString('base64url');
}

/** Creates a token for a workspace (which must exist). Returns the token text: the only time it is seen. */
export async function createWorkspaceToken(app: Sql, workspaceId: string): Promise<string> {
  const token = generateToken();
  await withWorkspace(app, workspaceId, async (tx) => {
    if (!(await workspaceExists(tx))) {
      throw new EchodoError('workspace_not_found', `workspace "${workspaceId}" does not exist; create it first (npm run workspace -- create ${workspaceId})`);
    }
    await tx`insert into mission_control_tokens (workspace_id, is_admin, token_sha256)
             values (${tx.workspaceId}, false, ${tokenSha256(token)})`;
  });
  return token;
}

/** Creates an admin (fleet) token through the security-definer function: it belongs to no workspace. */
export async function createAdminToken(admin: Sql): Promise<string> {
  const token = generateToken();
  await admin`select echodo_admin_token_create(${tokenSha256(token)})`;
  return token;
}

/**
 * Resolves a presented token, or undefined when it is unknown (or its workspace is gone).
 * Cheap rejects first: anything without our prefix never reaches the database.
 */
export async function lookupToken(admin: Sql, token: string | undefined | null): Promise<Principal | undefined> {
  if (!token || !token.startsWith(TOKEN_PREFIX) || token.length > 200) return undefined;
  const [row] = await admin<{ workspace_id: string; is_admin: boolean }[]>`
    select workspace_id, is_admin from echodo_token_lookup(${tokenSha256(token)})`;
  if (!row) return undefined;
  return row.is_admin ? { kind: 'admin' } : { kind: 'workspace', workspaceId: row.workspace_id };
}
