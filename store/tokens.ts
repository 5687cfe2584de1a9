// Mission control bearer tokens. A token is shown once at creation and stored only as
// its sha256, so a database dump cannot be replayed against the panel. A token has a kind
// (admin, read-write, read-only), may expire, and may be revoked (migration 011): an expired
// or revoked token is answered exactly like an unknown one.
import { createHash, randomBytes } from 'node:crypto';
import type { Sql } from 'postgres';
import { EchodoError } from '../core/errors.ts';
import { workspaceExists } from './runs.ts';
import { withWorkspace } from './workspace.ts';

export const TOKEN_PREFIX = 'emc_';

export type TokenKind = 'admin' | 'read-write' | 'read-only';

/**
 * Who a token speaks for: one workspace (read-only when it may not write), or the fleet (admin,
 * no workspace). tokenId names the token in events ("who cancelled"); expiresAt caps the cookie.
 */
export type Principal =
  | { kind: 'workspace'; workspaceId: string; tokenId: string; readOnly: boolean; expiresAt: Date | null }
  | { kind: 'admin'; tokenId: string; readOnly: false; expiresAt: Date | null };

export interface TokenInfo {
  id: string;
  workspaceId: string;
  kind: TokenKind;
  createdAt: Date;
  lastUsedAt: Date | null;
  expiresAt: Date | null;
  revokedAt: Date | null;
}

export interface CreatedToken {
  id: string;
  /** The token text: the only time it is seen. */
  token: string;
}

export function tokenSha256(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

export function generateToken(): string {
  return TOKEN_PREFIX + randomBytes(32).toString('base64url');
}

/** Creates a token for a workspace (which must exist). Returns the token text: the only time it is seen. */
export async function createWorkspaceToken(
  app: Sql,
  workspaceId: string,
  options: { readOnly?: boolean; expiresAt?: Date } = {},
): Promise<string> {
  return (await createWorkspaceTokenWithId(app, workspaceId, options)).token;
}

export async function createWorkspaceTokenWithId(
  app: Sql,
  workspaceId: string,
  options: { readOnly?: boolean; expiresAt?: Date } = {},
): Promise<CreatedToken> {
  const token = generateToken();
  const kind: TokenKind = options.readOnly ? 'read-only' : 'read-write';
  const id = await withWorkspace(app, workspaceId, async (tx) => {
    if (!(await workspaceExists(tx))) {
      throw new EchodoError(
        'workspace_not_found',
        `workspace "${workspaceId}" does not exist; create it first (npm run workspace -- create ${workspaceId})`,
      );
    }
    const [row] = await tx<{ id: string }[]>`
      insert into mission_control_tokens (workspace_id, is_admin, kind, token_sha256, expires_at)
      values (${tx.workspaceId}, false, ${kind}, ${tokenSha256(token)}, ${options.expiresAt ?? null})
      returning id::text`;
    return row!.id;
  });
  return { id, token };
}

/** Creates an admin (fleet) token through the security-definer function: it belongs to no workspace. */
export async function createAdminToken(admin: Sql, options: { expiresAt?: Date } = {}): Promise<string> {
  return (await createAdminTokenWithId(admin, options)).token;
}

export async function createAdminTokenWithId(admin: Sql, options: { expiresAt?: Date } = {}): Promise<CreatedToken> {
  const token = generateToken();
  const [row] = await admin<{ id: string }[]>`
    select echodo_admin_token_create(${tokenSha256(token)}, ${options.expiresAt ?? null})::text as id`;
  return { id: row!.id, token };
}

/**
 * Resolves a presented token, or undefined when it is unknown, expired, revoked (or its workspace
 * is gone). Cheap rejects first: anything without our prefix never reaches the database.
 */
export async function lookupToken(admin: Sql, token: string | undefined | null): Promise<Principal | undefined> {
  if (!token || !token.startsWith(TOKEN_PREFIX) || token.length > 200) return undefined;
  const [row] = await admin<
    { id: string; workspace_id: string; is_admin: boolean; kind: TokenKind; expires_at: Date | null }[]
  >`
    select id::text, workspace_id, is_admin, kind, expires_at from echodo_token_lookup(${tokenSha256(token)})`;
  if (!row) return undefined;
  if (row.is_admin) return { kind: 'admin', tokenId: row.id, readOnly: false, expiresAt: row.expires_at };
  return {
    kind: 'workspace',
    workspaceId: row.workspace_id,
    tokenId: row.id,
    readOnly: row.kind === 'read-only',
    expiresAt: row.expires_at,
  };
}

/** Every token, or one workspace's: never the token nor its hash. */
export async function listTokens(admin: Sql, workspaceId?: string): Promise<TokenInfo[]> {
  const rows = await admin<
    {
      id: string;
      workspace_id: string;
      kind: TokenKind;
      created_at: Date;
      last_used_at: Date | null;
      expires_at: Date | null;
      revoked_at: Date | null;
    }[]
  >`select id::text, workspace_id, kind, created_at, last_used_at, expires_at, revoked_at
         from echodo_token_list(${workspaceId ?? null})`;
  return rows.map((r) => ({
    id: r.id,
    workspaceId: r.workspace_id,
    kind: r.kind,
    createdAt: r.created_at,
    lastUsedAt: r.last_used_at,
    expiresAt: r.expires_at,
    revokedAt: r.revoked_at,
  }));
}

/** Revokes token `id`: 'revoked', 'already revoked', or 'unknown'. */
export async function revokeToken(admin: Sql, id: string): Promise<'revoked' | 'already revoked' | 'unknown'> {
  if (!/^\d{1,18}$/.test(id)) return 'unknown';
  const [row] = await admin<
    { outcome: 'revoked' | 'already revoked' | null }[]
  >`select echodo_token_revoke(${id}::bigint) as outcome`;
  return row?.outcome ?? 'unknown';
}

/** `30d`, `12h`, `90m`, `2w` → milliseconds; undefined when it is not such a duration. */
export function parseDuration(text: string): number | undefined {
  const m = /^(\d{1,6})([mhdw])$/.exec(text.trim());
  if (!m) return undefined;
  const unit = { m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }[m[2] as 'm' | 'h' | 'd' | 'w'];
  const ms = Number(m[1]) * unit;
  return ms > 0 ? ms : undefined;
}
