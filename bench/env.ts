// The bench's database and scratch space. A fresh embedded PostgreSQL under a temp ECHODO_HOME
// (the product's own server, default settings: fsync on), or DATABASE_URL when set, in which
// case a fresh database is created next to it when the role may, so nothing is left behind.
import { mkdtemp, rm, mkdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres, { type Sql } from 'postgres';
import { openDatabase, type Database } from '../store/connection.ts';
import { ensureEmbeddedPostgres, stopEmbeddedPostgres } from '../store/embedded.ts';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { parseConfig, type Config } from '../core/config.ts';
import { BENCH_TMP } from './repos.ts';

export interface BenchEnv {
  /** Superuser (or DATABASE_URL's role) URL of the bench database. */
  url: string;
  db: Database;
  /** Outside RLS: bulk loads, floors, counting. */
  su: Sql;
  config: Config;
  /** Env for child worker processes. */
  childEnv: Record<string, string>;
  workspaceId: string;
  /** bench/tmp/run-<pid>: working repos, worktrees, clones; removed at close. */
  workDir: string;
  embedded: boolean;
  serverVersion: string;
  close(): Promise<void>;
}

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

export async function openBenchEnv(log: (line: string) => void): Promise<BenchEnv> {
  const workDir = path.join(BENCH_TMP, `run-${process.pid}`);
  await rm(workDir, { recursive: true, force: true });
  await mkdir(workDir, { recursive: true });
  // The embedded server runs as `postgres` when we are root: its home goes in the system temp
  // dir, which that user can enter.
  let home: string | undefined;
  let url: string;
  let dropDatabase: (() => Promise<void>) | undefined;
  if (process.env.DATABASE_URL) {
    const base = process.env.DATABASE_URL;
    const name = `echodo_bench_${process.pid}`;
    const admin = postgres(base, { max: 1, onnotice: () => {} });
    try {
      await admin.unsafe(`create database "${name}"`);
      url = withDatabase(base, name);
      dropDatabase = async () => {
        const a = postgres(base, { max: 1, onnotice: () => {} });
        await a.unsafe(`drop database if exists "${name}" with (force)`).finally(() => a.end({ timeout: 2 }));
      };
      log(`database: fresh database ${name} on DATABASE_URL's server`);
    } catch {
      url = base;
      log('database: DATABASE_URL as given (could not create a fresh database next to it)');
    } finally {
      await admin.end({ timeout: 2 });
    }
  } else {
    home = await mkdtemp(path.join(os.tmpdir(), 'echodo-bench-home-'));
    const start = performance.now();
    url = (await ensureEmbeddedPostgres(home)).url;
    log(`database: fresh embedded PostgreSQL under ${home} (started in ${((performance.now() - start) / 1000).toFixed(1)} s)`);
  }
  const childEnv: Record<string, string> = {
    DATABASE_URL: url,
    ECHODO_HOME: home ?? path.join(workDir, 'home'),
    WORKER_WORKTREE_BASE: path.join(workDir, 'worktrees'),
  };
  const config = parseConfig({ ...childEnv, LOG_LEVEL: 'silent' });
  const db = await openDatabase(config, { max: 4 });
  const su = postgres(url, { max: 4, onnotice: () => {}, idle_timeout: 30 });
  const [{ version }] = (await su<{ version: string }[]>`select version()`) as unknown as [{ version: string }];
  const workspaceId = 'bench';
  await withWorkspace(db.app, workspaceId, (tx) => createWorkspace(tx));
  return {
    url,
    db,
    su,
    config,
    childEnv,
    workspaceId,
    workDir,
    embedded: !home ? false : true,
    serverVersion: version,
    async close() {
      await db.close();
      await su.end({ timeout: 2 });
      if (dropDatabase) await dropDatabase().catch(() => {});
      if (home) {
        await stopEmbeddedPostgres(home).catch(() => {});
        await rm(home, { recursive: true, force: true });
      }
      await rm(workDir, { recursive: true, force: true });
    },
  };
}
