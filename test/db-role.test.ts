// The database role: every runtime connection logs in as a non-superuser login (echodo_app_login
// with the password kept in ECHODO_HOME, or the operator's DATABASE_APP_URL); the superuser URL
// is used only to migrate, and no app connection can SET ROLE its way back to a privileged role.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres, { type Sql } from 'postgres';
import { APP_LOGIN_ROLE, DatabaseRoleError, appRoleFile } from '../store/app-role.ts';
import { openDatabase, type Database } from '../store/connection.ts';
import { stopEmbeddedPostgres } from '../store/embedded.ts';
import { loadMigrations, migrate } from '../store/migrate.ts';
import { spawnNode, type Child } from './support/child.ts';
import { createTestDatabase, superuserSql, withDatabase, type TestDatabase } from '../testbed/db.ts';

process.env.ECHODO_PG_FAST ??= '1'; // test servers need no durability

let t: TestDatabase;
let su: Sql;
const dirs: string[] = [];
const roles: string[] = [];
const children: Child[] = [];

before(async () => {
  t = await createTestDatabase();
  su = superuserSql(t.url);
});

after(async () => {
  for (const child of children) await child.stop('SIGTERM', 3000).catch(() => {});
  for (const role of roles) await su.unsafe(`drop role if exists ${role}`).catch(() => {});
  await su?.end({ timeout: 1 });
  await t?.drop();
  for (const dir of dirs) {
    await stopEmbeddedPostgres(path.join(dir, 'home')).catch(() => {});
    await rm(dir, { recursive: true, force: true });
  }
});

async function freshDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-db-role-'));
  await chmod(dir, 0o711); // the embedded server runs as user postgres when we are root
  dirs.push(dir);
  return dir;
}

const code = (err: unknown) => (err as { code?: string }).code;

/** What a connection is, and that it cannot become the superuser. */
async function assertAppLogin(db: Database, role: string): Promise<void> {
  for (const client of [db.app, db.admin]) {
    const [me] = await client<{ user: string; session: string; superuser: boolean; bypassrls: boolean }[]>`
      select current_user as user, session_user as session, rolsuper as superuser, rolbypassrls as bypassrls
        from pg_roles where rolname = current_user`;
    assert.deepEqual({ ...me }, { user: role, session: role, superuser: false, bypassrls: false });
    await assert.rejects(client`set role postgres`, (err) => code(err) === '42501', 'SET ROLE postgres accepted');
  }
  assert.equal(db.role, role);
}

/** A login role of the test's own (roles are cluster-wide: dropped after the file). */
async function createLogin(
  options: { memberOf?: string[]; attributes?: string } = {},
): Promise<{ role: string; url: string }> {
  const role = `echodo_test_login_${randomBytes(4).toString('hex')}`;
  const password = randomBytes(16).toString('hex');
  roles.push(role);
  await su.unsafe(`create role ${role} login password '${password}' ${options.attributes ?? ''}`);
  for (const group of options.memberOf ?? []) await su.unsafe(`grant ${group} to ${role}`);
  const url = new URL(t.url);
  url.username = role;
  url.password = password;
  return { role, url: url.toString() };
}

test('embedded defaults: processes opening a fresh home at once agree on one generated password (0600), and log in as echodo_app_login', async () => {
  const dir = await freshDir();
  const home = path.join(dir, 'home');
  const opened = await Promise.all([1, 2, 3].map(() => openDatabase({ ECHODO_HOME: home })));
  try {
    for (const db of opened) await assertAppLogin(db, APP_LOGIN_ROLE);
    const file = appRoleFile(home);
    assert.equal(statSync(file).mode & 0o777, 0o600, 'app-role.json is readable by its owner only');
    const stored = JSON.parse(await readFile(file, 'utf8'));
    assert.equal(stored.role, APP_LOGIN_ROLE);
    assert.equal(new URL(opened[0]!.url).username, APP_LOGIN_ROLE);
    assert.equal(decodeURIComponent(new URL(opened[0]!.url).password), stored.password);
    const superPassword = (await readFile(path.join(home, 'pg', 'password'), 'utf8')).trim();
    assert.ok(!opened[0]!.url.includes(superPassword), 'the app URL carries the superuser password');

    // The superuser connection of the migrate step is closed: every session is the app login's.
    const server = postgres(
      withDatabase(
        `postgres://postgres:${encodeURIComponent(superPassword)}@127.0.0.1:${new URL(opened[0]!.url).port}/x`,
        'echodo',
      ),
      { max: 1, onnotice: () => {} },
    );
    try {
      const users = await server<{ usename: string }[]>`
        select distinct usename from pg_stat_activity where datname = 'echodo' and pid <> pg_backend_pid() and backend_type = 'client backend'`;
      assert.deepEqual(
        users.map((u) => u.usename),
        [APP_LOGIN_ROLE],
      );
    } finally {
      await server.end({ timeout: 1 });
    }

    // A lost file: the embedded server belongs to this home, so the role follows a new password.
    await rm(file);
    const again = await openDatabase({ ECHODO_HOME: home });
    try {
      await assertAppLogin(again, APP_LOGIN_ROLE);
      assert.notEqual(JSON.parse(await readFile(file, 'utf8')).password, stored.password);
    } finally {
      await again.close();
    }
  } finally {
    await Promise.all(opened.map((db) => db.close()));
  }
});

test('a shared server: a home without the password is refused and the role keeps its password', async () => {
  const dir = await freshDir();
  const home = path.join(dir, 'home');
  await assert.rejects(openDatabase({ DATABASE_URL: t.url, ECHODO_HOME: home }), (err) => {
    assert.ok(err instanceof DatabaseRoleError, String(err));
    assert.match(err.message, /echodo_app_login already has a password/);
    assert.match(err.message, /app-role\.json/);
    assert.match(err.message, /DATABASE_APP_URL/);
    return true;
  });
  // Every other home's processes still log in.
  const sql = postgres(t.appUrl, { max: 1, onnotice: () => {} });
  try {
    const [me] = await sql<{ user: string }[]>`select current_user as user`;
    assert.equal(me!.user, APP_LOGIN_ROLE);
  } finally {
    await sql.end({ timeout: 1 });
  }
});

test('DATABASE_APP_URL is the app login, DATABASE_URL only migrates, and nothing is written in the home', async () => {
  const login = await createLogin({ memberOf: ['echodo_app'] });
  const dir = await freshDir();
  const home = path.join(dir, 'home');
  const db = await openDatabase({ DATABASE_URL: t.url, DATABASE_APP_URL: login.url, ECHODO_HOME: home });
  try {
    await assertAppLogin(db, login.role);
    assert.equal(db.url, login.url);
    assert.equal(existsSync(appRoleFile(home)), false, 'no password generated when the operator manages the login');
  } finally {
    await db.close();
  }
  // Without DATABASE_URL there is no superuser at all: no embedded server is started either.
  const only = await openDatabase({ DATABASE_APP_URL: login.url, ECHODO_HOME: home });
  try {
    await assertAppLogin(only, login.role);
    assert.equal(existsSync(path.join(home, 'pg')), false, 'an embedded server was started');
  } finally {
    await only.close();
  }
});

test('a DATABASE_APP_URL that is, or can become, privileged, or is not in echodo_app, is refused by name', async () => {
  const home = path.join(await freshDir(), 'home');
  const open = (url: string) => openDatabase({ DATABASE_URL: t.url, DATABASE_APP_URL: url, ECHODO_HOME: home });
  await assert.rejects(open(t.url), /logs in as postgres, which is or can become a privileged role/);
  const creator = await createLogin({ attributes: 'createdb' });
  const member = await createLogin({ memberOf: ['echodo_app', creator.role] });
  await assert.rejects(
    open(member.url),
    new RegExp(`${member.role}, which is or can become a privileged role \\(${creator.role}\\)`),
  );
  const reader = await createLogin({ memberOf: ['echodo_app', 'pg_read_all_data'] });
  await assert.rejects(open(reader.url), /privileged role \(pg_read_all_data\)/);
  const outsider = await createLogin();
  await assert.rejects(
    open(outsider.url),
    new RegExp(`not a member of echodo_app: grant echodo_app to ${outsider.role}`),
  );
  const wrong = new URL(member.url);
  wrong.password = 'not-the-password';
  await assert.rejects(
    open(wrong.toString()),
    (err) => err instanceof DatabaseRoleError && /DATABASE_APP_URL could not log in/.test(err.message),
  );
});

test('DATABASE_APP_URL alone cannot migrate: an older schema is refused with what to run', async () => {
  const name = `echodo_dbrole_${randomBytes(4).toString('hex')}`;
  await su.unsafe(`create database "${name}"`);
  const url = withDatabase(t.url, name);
  const partial = postgres(url, { max: 1, onnotice: () => {} });
  const login = await createLogin({ memberOf: ['echodo_app'] });
  try {
    const upTo006 = loadMigrations().filter((m) => m.version <= 6);
    await migrate(partial, upTo006);
    await partial.end({ timeout: 1 });
    const appUrl = withDatabase(login.url, name);
    await assert.rejects(
      openDatabase({ DATABASE_APP_URL: appUrl, ECHODO_HOME: path.join(await freshDir(), 'home') }),
      /schema is at migration version 6, this code needs \d+; only DATABASE_APP_URL is set.*npm run db -- migrate/,
    );
    // And `npm run db -- migrate` refuses rather than migrate some other (embedded) database.
    const dbMigrate = spawnNode('scripts/db.ts', ['migrate'], {
      env: { DATABASE_URL: undefined, DATABASE_APP_URL: appUrl, ECHODO_HOME: path.join(await freshDir(), 'home') },
    });
    assert.equal((await dbMigrate.exited).code, 2, dbMigrate.output());
    assert.match(dbMigrate.output(), /only DATABASE_APP_URL is set, and that login cannot migrate/);
  } finally {
    await partial.end({ timeout: 1 });
    await su.unsafe(`drop database if exists "${name}" with (force)`);
  }
});

test('processes started with the superuser DATABASE_URL keep no superuser session', async () => {
  // A database of its own, so the only superuser session on it is the one asking.
  const own = await createTestDatabase();
  const check = postgres(own.url, { max: 1, onnotice: () => {} });
  try {
    const created = spawnNode('scripts/workspace.ts', ['create', 'ws-role'], {
      env: { ...own.env, LOG_LEVEL: 'warn' },
    });
    assert.equal((await created.exited).code, 0, created.output());
    const panel = spawnNode('scripts/mission-control.ts', [], {
      env: { ...own.env, MISSION_CONTROL_PORT: '0', LOG_LEVEL: 'warn' },
    });
    children.push(panel);
    const line = await panel.waitForLine(/mission control on http/, { timeoutMs: 30_000 });
    const users = await check<{ usename: string }[]>`
      select distinct usename from pg_stat_activity
       where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'`;
    assert.deepEqual(
      users.map((u) => u.usename),
      [APP_LOGIN_ROLE],
      `sessions while ${line}`,
    );
    const res = await fetch(`${line.match(/http\S+/)![0]}/api/convoys`);
    assert.equal(res.status, 401, 'the panel answers');
  } finally {
    await check.end({ timeout: 1 });
    await own.drop();
  }
});
