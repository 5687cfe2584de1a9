// The one door to workspace data: a transaction with app.workspace_id set locally.
// Row-level security does the rest, so a forgotten WHERE cannot leak across workspaces.
import type { Sql, TransactionSql } from 'postgres';
import { isStaleStatement, retryTransient } from './transient-retry.ts';

export type WorkspaceTx = TransactionSql & { readonly workspaceId: string };

/** More than the pool's connections: each may hold its own copy of a statement a migration made stale. */
const STALE_STATEMENT_ATTEMPTS = 8;

export async function withWorkspace<T>(sql: Sql, workspaceId: string, fn: (tx: WorkspaceTx) => Promise<T>): Promise<T> {
  if (!workspaceId) throw new Error('withWorkspace: a workspace id is required');
  for (let attempt = 1; ; attempt++) {
    try {
      return await inTransaction(sql, workspaceId, fn);
    } catch (err) {
      // The transaction rolled back whole and the driver forgot the stale statement: run it again.
      if (!isStaleStatement(err) || attempt >= STALE_STATEMENT_ATTEMPTS) throw err;
    }
  }
}

async function inTransaction<T>(sql: Sql, workspaceId: string, fn: (tx: WorkspaceTx) => Promise<T>): Promise<T> {
  return (await sql.begin(async (tx) => {
    // Sent now, not awaited: the first query of fn follows it on the same connection in one
    // round trip (pipelined), and runs after it, so it already sees the setting.
    const setting = tx`select set_config('app.workspace_id', ${workspaceId}, true)`.execute();
    const [, result] = await Promise.all([setting, fn(Object.assign(tx, { workspaceId }) as WorkspaceTx)]);
    return result;
  })) as T;
}

/** withWorkspace bound to one workspace, retrying transient database errors (each retry logged). */
export function inWorkspace(sql: Sql, workspaceId: string, log?: { warn(obj: object, msg: string): void }) {
  const onRetry =
    log &&
    ((err: unknown, attempt: number, delayMs: number) =>
      log.warn(
        { attempt, delayMs: Math.round(delayMs), error: (err as Error).message },
        'transient database error; retrying',
      ));
  return <T>(fn: (tx: WorkspaceTx) => Promise<T>): Promise<T> =>
    retryTransient(() => withWorkspace(sql, workspaceId, fn), { onRetry });
}
