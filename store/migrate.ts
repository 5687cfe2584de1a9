// Numbered plain-SQL migrations, applied in order, each in its own transaction
// under one advisory lock, so any number of processes may migrate at once.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Sql } from 'postgres';
import { EchodoError } from '../core/errors.ts';

const MIGRATIONS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), 'migrations');
const LOCK_KEY = 7_201_411_001; // arbitrary, fixed: "echodo migrations"

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export function loadMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d+_.+\.sql$/.test(f))
    .sort()
    .map((file) => ({
      version: Number(file.split('_')[0]),
      name: file.replace(/\.sql$/, ''),
      sql: readFileSync(path.join(dir, file), 'utf8'),
    }));
}

/** Applies what is missing; returns the names it applied. */
export async function migrate(sql: Sql, migrations = loadMigrations()): Promise<string[]> {
  const applied: string[] = [];
  for (const migration of migrations) {
    const didApply = await sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(${LOCK_KEY})`;
      await tx`create table if not exists schema_migrations (
        version integer primary key, name text not null, applied_at timestamptz not null default now())`;
      const [done] = await tx`select 1 from schema_migrations where version = ${migration.version}`;
      if (done) return false;
      await tx.unsafe(migration.sql);
      await tx`insert into schema_migrations (version, name) values (${migration.version}, ${migration.name})`;
      return true;
    });
    if (didApply) applied.push(migration.name);
  }
  await assertSchemaNotNewer(sql, migrations);
  return applied;
}

/** A database migrated by newer code may hold data this code would misread: refuse to start. */
export async function assertSchemaNotNewer(sql: Sql, migrations = loadMigrations()): Promise<void> {
  const known = Math.max(0, ...migrations.map((m) => m.version));
  const [row] = await sql<{ version: number | null; name: string | null }[]>`
    select version, name from schema_migrations order by version desc limit 1`;
  if (row?.version != null && row.version > known) {
    throw new EchodoError(
      'schema_too_new',
      `database schema is at migration ${row.name} (version ${row.version}), newer than this code knows (${known}); upgrade echodo-worker before starting it against this database`,
    );
  }
}

/** Without a superuser URL nothing can migrate: the schema must already be at this code's version. */
export async function assertSchemaCurrent(sql: Sql, migrations = loadMigrations()): Promise<void> {
  await assertSchemaNotNewer(sql, migrations);
  const known = Math.max(0, ...migrations.map((m) => m.version));
  const [row] = await sql<{ version: number | null }[]>`select max(version) as version from schema_migrations`;
  if ((row?.version ?? 0) < known) {
    throw new EchodoError(
      'internal',
      `database schema is at migration version ${row?.version ?? 0}, this code needs ${known}; only DATABASE_APP_URL is set, ` +
        'which cannot migrate: run `npm run db -- migrate` with DATABASE_URL set to the superuser, or set both',
    );
  }
}
