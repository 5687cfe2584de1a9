// The bench's database and scratch space. A fresh embedded PostgreSQL under a temp ECHODO_HOME
// (the product's own server, default settings: fsync on), or DATABASE_URL when set, in which
// case a fresh database is created next to it when the role may, so nothing is left behind, not
// even when the bench is stopped with Ctrl-C or SIGTERM.
import { mkdtemp, rm, mkdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres, { type Sql } from 'postgres';
import { openDatabase, type Database } from '../store/connection.ts';
import { ensureEmbeddedPostgres, stopEmbeddedPostgres } from '../store/embedded.ts';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { parseConfig, type Config } from '../core/config.ts';
import { setUpTrees } from '../worker/tree/setup.ts';
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

/** What the bench started, in the order it is given back. */
interface Started {
  connections: (() => Promise<void>)[];
  dropDatabase?: () => Promise<void>;
  home?: string;
  workDir: string;
}

/** Connections first (bounded: a query in flight must not hold the rest up), then the server, then the folders. */
async function release(started: Started): Promise<void> {
  const connections = Promise.allSettled(started.connections.map((end) => end()));
  await Promise.race([connections, new Promise((resolve) => setTimeout(resolve, 5_000).unref())]);
  if (started.dropDatabase) await started.dropDatabase().catch(() => {});
  if (started.home) {
    await stopEmbeddedPostgres(started.home).catch(() => {});
    await rm(started.home, { recursive: true, force: true, maxRetries: 3 });
  }
  // A phase may still be writing here when a signal stops it: rm retries a folder that refills.
  await rm(started.workDir, { recursive: true, force: true, maxRetries: 3 });
}

/** Once, whoever asks first: the end of the bench or a signal. A signal then ends the process. */
function releaseOnce(started: Started): () => Promise<void> {
  let releasing: Promise<void> | undefined;
  const once = () => (releasing ??= release(started));
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      process.stderr.write(`bench: ${signal}: stopping the database and removing the bench's temp folders\n`);
      // The phase under way fails as its server goes: that error must not end the process before the cleanup.
      process.on('uncaughtException', () => {});
      process.on('unhandledRejection', () => {});
      void once().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
    });
  }
  return once;
}

export async function openBenchEnv(log: (line: string) => void): Promise<BenchEnv> {
  const workDir = path.join(BENCH_TMP, `run-${process.pid}`);
  const started: Started = { connections: [], workDir };
  // Registered before anything starts, so a signal during start-up cleans up too.
  const close = releaseOnce(started);
  await rm(workDir, { recursive: true, force: true });
  await mkdir(workDir, { recursive: true });
  // The embedded server runs as `postgres` when we are root: its home goes in the system temp
  // dir, which that user can enter.
  let home: string | undefined;
  let url: string;
  if (process.env.DATABASE_URL) {
    const base = process.env.DATABASE_URL;
    const name = `echodo_bench_${process.pid}`;
    const admin = postgres(base, { max: 1, onnotice: () => {} });
    try {
      await admin.unsafe(`create database "${name}"`);
      url = withDatabase(base, name);
      started.dropDatabase = async () => {
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
    started.home = home;
    const start = performance.now();
    url = (await ensureEmbeddedPostgres(home)).url;
    log(
      `database: fresh embedded PostgreSQL under ${home} (started in ${((performance.now() - start) / 1000).toFixed(1)} s)`,
    );
  }
  const childEnv: Record<string, string> = {
    DATABASE_URL: url,
    ECHODO_HOME: home ?? path.join(workDir, 'home'),
    WORKER_WORKTREE_BASE: path.join(workDir, 'worktrees'),
    WORKER_REPLAY_DIR: workDir, // the benches write their transcripts under it
  };
  const config = parseConfig({ ...childEnv, LOG_LEVEL: 'silent' });
  // As the daemon does at start-up: the benches drive the checkpoint writer and resume in this
  // process, and without it their trees would be read and committed unsandboxed, here.
  log(await setUpTrees(config));
  const db = await openDatabase(config, { max: 4 });
  started.connections.push(() => db.close());
  const su = postgres(url, { max: 4, onnotice: () => {}, idle_timeout: 30 });
  started.connections.push(() => su.end({ timeout: 2 }));
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
    close,
  };
}
