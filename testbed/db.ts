// A fresh, migrated database per test, cloned from the template database `echodo_template`.
// Under `npm test` the server and template come from scripts/test.ts (ECHODO_TEST_PG_URL);
// a test file run on its own starts its own embedded server under a temp home instead.
import { spawn, spawnSync } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres, { type Sql } from 'postgres';
import { parseConfig, type Config } from '../core/config.ts';
import { openDatabase, type Database } from '../store/connection.ts';
import {
  APP_LOGIN_ROLE,
  appLoginUrl,
  appRoleFile,
  setAppLoginPassword,
  writeCredentialsExclusive,
  type AppCredentials,
} from '../store/app-role.ts';
import { ensureEmbeddedPostgres } from '../store/embedded.ts';
import { migrate } from '../store/migrate.ts';

export const TEMPLATE_DATABASE = 'echodo_template';
const TEMPLATE_LOCK = 7_201_411_002; // arbitrary, fixed: "echodo test template"

export interface TestDatabase {
  /** Superuser URL to this test's own database (what DATABASE_URL is set to). */
  url: string;
  /** The app login's URL to this database (what the processes connect with; usable as DATABASE_APP_URL). */
  appUrl: string;
  /** Superuser URL to the server's `postgres` maintenance database. */
  adminUrl: string;
  db: Database;
  /** parseConfig of `env`: this database, a temp ECHODO_HOME and WORKER_WORKTREE_BASE. */
  config: Config;
  /**
   * DATABASE_URL, ECHODO_HOME, WORKER_WORKTREE_BASE: hand these to a child process. The home holds
   * app-role.json with the test server's app login password, so a process given only the
   * superuser URL logs in as the app role like in production.
   */
  env: Record<string, string>;
  /** Closes `db`, drops the database (even with connections still open) and the temp dirs. */
  drop(): Promise<void>;
}

/** A superuser connection for poking at a database outside RLS; call .end() when done. */
export function superuserSql(url: string): Sql {
  return postgres(url, { max: 2, onnotice: () => {}, idle_timeout: 10 });
}

/** Replaces the database name of a postgres:// URL. */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

let serverPromise: Promise<string> | undefined;

/** Superuser URL to the `postgres` database of the test server, with the template in place. */
export function testServerUrl(): Promise<string> {
  serverPromise ??= (async () => {
    const shared = process.env.ECHODO_TEST_PG_URL;
    const adminUrl = shared ?? (await startStandaloneServer());
    await ensureTemplate(adminUrl);
    return adminUrl;
  })();
  return serverPromise;
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const adminUrl = await testServerUrl();
  const name = `echodo_test_${process.pid}_${randomBytes(5).toString('hex')}`;
  await cloneTemplate(adminUrl, name);
  const url = withDatabase(adminUrl, name);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-testdb-'));
  const env = {
    DATABASE_URL: url,
    ECHODO_HOME: path.join(dir, 'home'),
    WORKER_WORKTREE_BASE: path.join(dir, 'worktrees'),
    // Tests write their replay transcripts into temp folders of their own (mkdtemp): the temp root.
    WORKER_REPLAY_DIR: realpathSync(os.tmpdir()),
  };
  const credentials = testAppCredentials(adminUrl);
  await mkdir(env.ECHODO_HOME, { recursive: true, mode: 0o700 });
  await writeCredentialsExclusive(appRoleFile(env.ECHODO_HOME), credentials);
  const config = parseConfig(env);
  const db = await openDatabase(config);
  return {
    url,
    appUrl: appLoginUrl(url, credentials),
    adminUrl,
    db,
    config,
    env,
    async drop() {
      await db.close();
      const sql = superuserSql(adminUrl);
      try {
        await sql.unsafe(`drop database if exists "${name}" with (force)`);
      } finally {
        await sql.end({ timeout: 2 });
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * The app login's password on a test server. Roles are cluster-wide while every test has its own
 * database and home: every test process derives the same password from the server's superuser
 * URL, and each test home gets it in app-role.json.
 */
export function testAppCredentials(adminUrl: string): AppCredentials {
  const password = createHmac('sha256', withDatabase(adminUrl, 'postgres'))
    .update('echodo test app login')
    .digest('base64url');
  return { role: APP_LOGIN_ROLE, password };
}

/**
 * Creates and migrates echodo_template unless it exists (under a lock: test files run in parallel),
 * and gives the app login role the test password.
 */
export async function ensureTemplate(adminUrl: string): Promise<void> {
  const sql = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    await sql`select pg_advisory_lock(${TEMPLATE_LOCK})`;
    const [found] = await sql`select 1 from pg_database where datname = ${TEMPLATE_DATABASE}`;
    if (!found) await createTemplate(sql, adminUrl);
    await setAppLoginPassword(sql, testAppCredentials(adminUrl), { mayReset: true, home: '(test server)' });
  } finally {
    await sql.end({ timeout: 2 }); // ends the session, so the lock goes with it
  }
}

async function createTemplate(sql: Sql, adminUrl: string): Promise<void> {
  await sql.unsafe(`create database "${TEMPLATE_DATABASE}"`);
  const template = postgres(withDatabase(adminUrl, TEMPLATE_DATABASE), { max: 1, onnotice: () => {} });
  try {
    await migrate(template);
  } catch (err) {
    await template.end({ timeout: 2 });
    await sql.unsafe(`drop database if exists "${TEMPLATE_DATABASE}" with (force)`);
    throw err;
  }
  await template.end({ timeout: 2 });
  await sql.unsafe(`alter database "${TEMPLATE_DATABASE}" is_template true`);
}

/** A clone needs the template free of other sessions: retry briefly while it is not. */
async function cloneTemplate(adminUrl: string, name: string): Promise<void> {
  const sql = postgres(adminUrl, { max: 1, onnotice: () => {} });
  const deadline = Date.now() + 30_000;
  try {
    for (;;) {
      try {
        await sql.unsafe(`create database "${name}" template "${TEMPLATE_DATABASE}"`);
        return;
      } catch (err) {
        const busy = (err as { code?: string }).code === '55006';
        if (!busy || Date.now() > deadline) throw err;
        await new Promise((resolve) => setTimeout(resolve, 50 + Math.random() * 100));
      }
    }
  } finally {
    await sql.end({ timeout: 2 });
  }
}

/** A server of this process's own, stopped and removed when the process exits. */
async function startStandaloneServer(): Promise<string> {
  const home = mkdtempSync(path.join(os.tmpdir(), 'echodo-test-home-'));
  process.on('exit', () => stopStandaloneSync(home));
  cleanUpWhenGone(home);
  const previousFast = process.env.ECHODO_PG_FAST;
  process.env.ECHODO_PG_FAST = '1';
  try {
    const server = await ensureEmbeddedPostgres(home);
    return withDatabase(server.url, 'postgres');
  } finally {
    if (previousFast === undefined) delete process.env.ECHODO_PG_FAST;
    else process.env.ECHODO_PG_FAST = previousFast;
  }
}

/**
 * Exit handlers do not run when a process is killed (a timeout, SIGKILL): a detached shell
 * then stops the home's PostgreSQL (and a Redis whose pidfile is <home>/redis.pid) and
 * removes the home, once this process is gone.
 */
export function cleanUpWhenGone(home: string): void {
  const script = `while kill -0 "$OWNER" 2>/dev/null; do sleep 1; done
    [ -f "$HOME_DIR/redis.pid" ] && kill "$(cat "$HOME_DIR/redis.pid")" 2>/dev/null
    f="$HOME_DIR/pg/data/postmaster.pid"
    if [ -f "$f" ]; then kill -QUIT "$(head -n 1 "$f")" 2>/dev/null; sleep 2; fi
    rm -rf "$HOME_DIR"`;
  const child = spawn('sh', ['-c', script], {
    detached: true,
    stdio: 'ignore',
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', OWNER: String(process.pid), HOME_DIR: home },
  });
  child.unref();
}

/** Synchronous, for the exit handler: immediate shutdown (SIGQUIT), wait, remove the home. */
function stopStandaloneSync(home: string): void {
  try {
    const pid = Number(readFileSync(path.join(home, 'pg', 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
    if (pid > 0) {
      process.kill(pid, 'SIGQUIT');
      // Wait for it to go (or become a zombie nobody reaps) before removing its files.
      spawnSync('sh', [
        '-c',
        `for i in $(seq 50); do s=$(cut -d' ' -f3 /proc/${pid}/stat 2>/dev/null) || exit 0; [ "$s" = Z ] && exit 0; sleep 0.1; done`,
      ]);
    }
  } catch {
    // not started, or already gone
  }
  rmSync(home, { recursive: true, force: true });
}
