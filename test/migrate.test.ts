// Migrations: any number of processes may migrate one database at once, each migration is
// applied exactly once, and a schema newer than the code is refused by name.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PROJECT_ROOT } from '../core/config.ts';
import { EchodoError } from '../core/errors.ts';
import { openDatabase } from '../store/connection.ts';
import { assertSchemaNotNewer, loadMigrations, migrate } from '../store/migrate.ts';
import { createTestDatabase, superuserSql, testServerUrl, withDatabase } from '../testbed/db.ts';
import { spawnNode } from './support/child.ts';

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** An empty database of its own (not a template clone: nothing is migrated yet). */
async function emptyDatabase(): Promise<string> {
  const adminUrl = await testServerUrl();
  const name = `echodo_migrate_${randomBytes(5).toString('hex')}`;
  const admin = superuserSql(adminUrl);
  await admin.unsafe(`create database "${name}"`);
  cleanups.push(async () => {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end({ timeout: 1 });
  });
  return withDatabase(adminUrl, name);
}

async function migrateInChild(url: string, dir: string, index: number): Promise<string[]> {
  const script = path.join(dir, `migrate-${index}.mts`);
  await writeFile(
    script,
    `import postgres from ${JSON.stringify(import.meta.resolve('postgres'))};
     import { migrate } from ${JSON.stringify(path.join(PROJECT_ROOT, 'store', 'migrate.ts'))};
     const sql = postgres(process.argv[2], { max: 1, onnotice: () => {} });
     console.log('APPLIED ' + JSON.stringify(await migrate(sql)));
     await sql.end();`,
  );
  const child = spawnNode(script, [url]);
  const exit = await child.exited;
  assert.equal(exit.code, 0, `migrating child failed:\n${child.output()}`);
  const line = child.stdout.find((l) => l.startsWith('APPLIED '));
  assert.ok(line, child.output());
  return JSON.parse(line.slice('APPLIED '.length)) as string[];
}

test('processes and connections migrating one empty database at once apply each migration exactly once', async () => {
  const url = await emptyDatabase();
  const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-migrate-test-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  const migrations = loadMigrations();
  assert.ok(migrations.length >= 2, 'there are migrations to race on');

  const inProcess = [superuserSql(url), superuserSql(url)];
  const results = await Promise.all([
    migrateInChild(url, dir, 1),
    migrateInChild(url, dir, 2),
    ...inProcess.map((sql) => migrate(sql)),
  ]);
  await Promise.all(inProcess.map((sql) => sql.end({ timeout: 1 })));

  const appliedAnywhere = results.flat().sort();
  assert.deepEqual(
    appliedAnywhere,
    migrations.map((m) => m.name).sort(),
    'each migration applied by exactly one caller',
  );

  const sql = superuserSql(url);
  try {
    const rows = await sql<
      { version: number; name: string }[]
    >`select version, name from schema_migrations order by version`;
    assert.deepEqual(
      rows.map((r) => ({ version: r.version, name: r.name })),
      migrations.map((m) => ({ version: m.version, name: m.name })),
    );
    assert.deepEqual(await migrate(sql), [], 'a later migrate has nothing to do');
  } finally {
    await sql.end({ timeout: 1 });
  }
});

test('a schema newer than the code is refused with schema_too_new naming its version', async () => {
  const t = await createTestDatabase();
  cleanups.push(() => t.drop());
  const sql = superuserSql(t.url);
  cleanups.push(() => sql.end({ timeout: 1 }));
  await sql`insert into schema_migrations (version, name) values (999, '999_from_the_future')`;

  const isTooNew = (err: unknown) => {
    assert.ok(err instanceof EchodoError, `expected an EchodoError, got ${String(err)}`);
    assert.equal(err.code, 'schema_too_new');
    assert.match(err.message, /999/);
    assert.match(err.message, /999_from_the_future/);
    return true;
  };
  await assert.rejects(assertSchemaNotNewer(sql), isTooNew);
  await assert.rejects(openDatabase(t.config), isTooNew);
  await assert.rejects(openDatabase(t.config, { migrate: false }), isTooNew);
});
