// Connections. One URL (DATABASE_URL, else the embedded server under ECHODO_HOME);
// two clients: `admin` for migrations and cross-workspace system functions, `app`
// for everything a workspace reaches, working as the non-privileged echodo_app role.
import postgres, { type Sql } from 'postgres';
import type { Config } from '../worker/config.ts';
import { ensureEmbeddedPostgres } from './embedded.ts';
import { migrate, assertSchemaNotNewer } from './migrate.ts';

export const APP_ROLE = 'echodo_app';
export const IDLE_IN_TRANSACTION_MS = 5000;

export interface Database {
  url: string;
  /** Owner connection: migrations and the security-definer system functions only. */
  admin: Sql;
  /** Workspace connection: use only through withWorkspace(). */
  app: Sql;
  close(): Promise<void>;
}

export async function resolveDatabaseUrl(config: Pick<Config, 'DATABASE_URL' | 'ECHODO_HOME'>): Promise<string> {
  if (config.DATABASE_URL) return config.DATABASE_URL;
  return (await ensureEmbeddedPostgres(config.ECHODO_HOME)).url;
}

const quiet = { onnotice: () => {} };

export function connect(url: string, options: postgres.Options<{}> = {}): Sql {
  return postgres(url, { ...quiet, max: 4, idle_timeout: 30, connect_timeout: 10, ...options });
}

/**
 * Opens both clients. Migrates first unless told not to, and refuses a schema newer than this code.
 * If the URL's role is a superuser or bypasses RLS, the app client switches to echodo_app at
 * connect (a startup parameter, so every pooled connection gets it).
 */
export async function openDatabase(
  config: Pick<Config, 'DATABASE_URL' | 'ECHODO_HOME'>,
  options: { migrate?: boolean; max?: number } = {},
): Promise<Database> {
  const url = await resolveDatabaseUrl(config);
  const admin = connect(url, { max: 2 });
  try {
    if (options.migrate !== false) await migrate(admin);
    else await assertSchemaNotNewer(admin);
    const [me] = await admin<{ privileged: boolean }[]>`
      select rolsuper or rolbypassrls as privileged from pg_roles where rolname = current_user`;
    const app = connect(url, {
      max: options.max ?? 4,
      connection: {
        // A worker paused mid-transaction (SIGSTOP, a frozen VM) must not hold its row locks
        // forever: the server ends such a session, and the run's stall is handled as usual.
        idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_MS,
        ...(me?.privileged ? { options: `-c role=${APP_ROLE}` } : {}),
      },
    });
    return {
      url,
      admin,
      app,
      close: async () => {
        await Promise.all([app.end({ timeout: 2 }), admin.end({ timeout: 2 })]);
      },
    };
  } catch (err) {
    await admin.end({ timeout: 1 });
    throw err;
  }
}
