// Connections. The superuser URL (DATABASE_URL, else the embedded server under ECHODO_HOME) is
// used only to migrate and to give the app's login role its password; every runtime connection
// logs in as that role (echodo_app_login, or the login of DATABASE_APP_URL), which is neither
// superuser nor BYPASSRLS and cannot SET ROLE to one. See docs/security.md, "The database role".
import postgres, { type Sql } from 'postgres';
import type { Config } from '../core/config.ts';
import { ensureEmbeddedPostgres } from './embedded.ts';
import { migrate, assertSchemaCurrent, assertSchemaNotNewer } from './migrate.ts';
import {
  APP_GROUP_ROLE,
  APP_LOGIN_ROLE,
  DatabaseRoleError,
  appLoginUrl,
  assertUnprivileged,
  isAuthFailure,
  readOrCreateAppCredentials,
  setAppLoginPassword,
  type AppCredentials,
} from './app-role.ts';

export const APP_ROLE = APP_GROUP_ROLE;
export { APP_LOGIN_ROLE };
export const IDLE_IN_TRANSACTION_MS = 5000;

type DbConfig = Pick<Config, 'DATABASE_URL' | 'ECHODO_HOME'> & Partial<Pick<Config, 'DATABASE_APP_URL'>>;

export interface Database {
  /** The app login's URL (never the superuser's). */
  url: string;
  /** The role every connection logs in as. */
  role: string;
  /**
   * System connection, same login as `app`: the cross-workspace SECURITY DEFINER functions
   * (queue take, stall sweep, dead letters, tokens, fleet) and LISTEN. Not a superuser.
   */
  admin: Sql;
  /** Workspace connection: use only through withWorkspace(). */
  app: Sql;
  close(): Promise<void>;
}

/** The superuser URL: DATABASE_URL, else the embedded server's (started when needed). For migrating only. */
export async function resolveDatabaseUrl(config: Pick<Config, 'DATABASE_URL' | 'ECHODO_HOME'>): Promise<string> {
  if (config.DATABASE_URL) return config.DATABASE_URL;
  return (await ensureEmbeddedPostgres(config.ECHODO_HOME)).url;
}

const quiet = { onnotice: () => {} };

/** Longest wait between two attempts to reconnect, in seconds. */
export const RECONNECT_MAX_S = 1;

/**
 * The driver's own delay before it reconnects grows to 20 s over a long outage, and the first
 * query after Postgres is back waits for it; capped here, a fleet is back within a second.
 */
export function reconnectDelayS(retries: number): number {
  return (0.5 + Math.random() / 2) * Math.min(0.05 * 2 ** retries, RECONNECT_MAX_S);
}

export function connect(url: string, options: postgres.Options<{}> = {}): Sql {
  return postgres(url, {
    ...quiet,
    max: 4,
    idle_timeout: 30,
    connect_timeout: 10,
    backoff: reconnectDelayS,
    ...options,
  });
}

/** What the superuser step leaves behind: the app URL, and how to fix the login if it is refused. */
interface Prepared {
  appUrl: string;
  source: string;
  repairLogin?: () => Promise<void>;
  close(): Promise<void>;
}

/**
 * Migrates (or only checks the schema) with the superuser URL and works out the app URL:
 * DATABASE_APP_URL when set, else echodo_app_login with the password kept in ECHODO_HOME.
 * DATABASE_APP_URL without DATABASE_URL: no superuser at all; the schema must already be current.
 */
async function prepare(config: DbConfig, migrateNow: boolean): Promise<Prepared> {
  if (config.DATABASE_APP_URL && !config.DATABASE_URL) {
    return { appUrl: config.DATABASE_APP_URL, source: 'DATABASE_APP_URL', close: async () => {} };
  }
  const superUrl = await resolveDatabaseUrl(config);
  const su = connect(superUrl, { max: 1 });
  try {
    if (migrateNow) await migrate(su);
    else await assertSchemaNotNewer(su);
  } catch (err) {
    await su.end({ timeout: 1 });
    throw err;
  }
  if (config.DATABASE_APP_URL) {
    await su.end({ timeout: 2 });
    return { appUrl: config.DATABASE_APP_URL, source: 'DATABASE_APP_URL', close: async () => {} };
  }
  let credentials: AppCredentials;
  try {
    credentials = await readOrCreateAppCredentials(config.ECHODO_HOME);
  } catch (err) {
    await su.end({ timeout: 1 });
    throw err;
  }
  const mayReset = !config.DATABASE_URL; // the embedded server belongs to this home
  return {
    appUrl: appLoginUrl(superUrl, credentials),
    source: `the app login ${credentials.role}`,
    repairLogin: () => setAppLoginPassword(su, credentials, { mayReset, home: config.ECHODO_HOME }),
    close: () => su.end({ timeout: 2 }),
  };
}

/**
 * Opens both clients as the app login. Migrates first unless told not to, and refuses a schema
 * newer than this code, or a login that is (or can become) privileged.
 */
export async function openDatabase(
  config: DbConfig,
  options: { migrate?: boolean; max?: number } = {},
): Promise<Database> {
  const prepared = await prepare(config, options.migrate !== false);
  const admin = connect(prepared.appUrl, { max: 2 });
  const app = connect(prepared.appUrl, {
    max: options.max ?? 4,
    connection: {
      // A worker paused mid-transaction (SIGSTOP, a frozen VM) must not hold its row locks
      // forever: the server ends such a session, and the run's stall is handled as usual.
      idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_MS,
    },
  });
  const closeClients = () => Promise.all([app.end({ timeout: 2 }), admin.end({ timeout: 2 })]);
  try {
    let role: string;
    try {
      role = await assertUnprivileged(admin, prepared.source);
    } catch (err) {
      // First start, or a home whose password the role does not have yet: set it, then log in again.
      if (!isAuthFailure(err) || !prepared.repairLogin) throw loginError(err, prepared.source);
      await prepared.repairLogin();
      role = await assertUnprivileged(admin, prepared.source).catch((again: unknown) => {
        throw loginError(again, prepared.source);
      });
    }
    await prepared.close();
    // No superuser connection left: a schema applied by someone else must still fit this code.
    if (options.migrate !== false && !config.DATABASE_URL && config.DATABASE_APP_URL) await assertSchemaCurrent(admin);
    else await assertSchemaNotNewer(admin);
    return {
      url: prepared.appUrl,
      role,
      admin,
      app,
      close: async () => {
        await closeClients();
      },
    };
  } catch (err) {
    await Promise.all([closeClients(), prepared.close()]).catch(() => {});
    throw err;
  }
}

function loginError(err: unknown, source: string): unknown {
  if (err instanceof DatabaseRoleError || !(err instanceof Error)) return err;
  if (isAuthFailure(err) || (err as { code?: string }).code === '28000') {
    return new DatabaseRoleError(`${source} could not log in: ${err.message}`, { cause: err });
  }
  return err;
}
