// The embedded server is shared by every process of a home, outlives the process that
// started it, recovers from a crash or a stale server.json, and stops on request.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { PROJECT_ROOT } from '../core/config.ts';
import {
  embeddedStatus,
  ensureEmbeddedPostgres,
  stopEmbeddedPostgres,
  type EmbeddedServer,
} from '../store/embedded.ts';
import { spawnNode, waitFor } from './support/child.ts';

process.env.ECHODO_PG_FAST ??= '1'; // test servers need no durability

const homes: string[] = [];
after(async () => {
  for (const home of homes) {
    await stopEmbeddedPostgres(home).catch(() => {});
    await rm(home, { recursive: true, force: true });
  }
});

async function freshHome(): Promise<string> {
  const home = await mkdtemp(path.join(os.tmpdir(), 'echodo-embedded-test-'));
  homes.push(home);
  return home;
}

/** A child process that calls ensureEmbeddedPostgres(home), prints the result, and exits. */
async function ensureInChild(home: string): Promise<EmbeddedServer> {
  const script = path.join(home, `ensure-${Math.random().toString(36).slice(2)}.mts`);
  const embedded = path.join(PROJECT_ROOT, 'store', 'embedded.ts');
  await writeFile(
    script,
    `import { ensureEmbeddedPostgres } from ${JSON.stringify(embedded)};
     console.log('SERVER ' + JSON.stringify(await ensureEmbeddedPostgres(process.argv[2])));`,
  );
  const child = spawnNode(script, [home], { env: { ECHODO_PG_FAST: '1' } });
  const exit = await child.exited;
  assert.equal(exit.code, 0, `child failed:\n${child.output()}`);
  const line = child.stdout.find((l) => l.startsWith('SERVER '));
  assert.ok(line, `no SERVER line in:\n${child.output()}`);
  return JSON.parse(line.slice('SERVER '.length)) as EmbeddedServer;
}

/** Gone, or a zombie that nothing reaps (which is as dead as a server gets). */
function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
}

async function queryDatabase(url: string): Promise<string> {
  const sql = postgres(url, { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    const [row] = await sql<{ db: string }[]>`select current_database() as db`;
    return row!.db;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

async function answers(url: string): Promise<boolean> {
  return queryDatabase(url).then(
    () => true,
    () => false,
  );
}

test('two processes starting the same fresh home at once share one server, which outlives them', async () => {
  const home = await freshHome();
  const [first, second] = await Promise.all([ensureInChild(home), ensureInChild(home)]);
  assert.equal(first.url, second.url);
  assert.equal(first.pid, second.pid);
  // Both children have exited; the server they share is still up and serves database echodo.
  assert.ok(isRunning(first.pid), 'isRunning(first.pid)');
  assert.equal(await queryDatabase(first.url), 'echodo');
  assert.match(first.url, new RegExp(`^postgres://postgres:[^@]+@127\\.0\\.0\\.1:${first.port}/echodo$`));
  const recorded = JSON.parse(readFileSync(path.join(home, 'pg', 'server.json'), 'utf8')) as EmbeddedServer;
  assert.deepEqual(recorded, first);
  const passwordMode = statSync(path.join(home, 'pg', 'password')).mode & 0o777;
  assert.equal(passwordMode, 0o600);
  assert.deepEqual(await ensureEmbeddedPostgres(home), first, 'a later call in another process reuses it');
});

test('a postmaster killed with SIGKILL is detected through its stale server.json and a new one started', async () => {
  const home = await freshHome();
  const before = await ensureEmbeddedPostgres(home);
  process.kill(before.pid, 'SIGKILL');
  await waitFor(() => !isRunning(before.pid), { what: 'the postmaster to die' });

  const afterCrash = await ensureInChild(home);
  assert.notEqual(afterCrash.pid, before.pid);
  assert.ok(isRunning(afterCrash.pid), 'isRunning(afterCrash.pid)');
  assert.equal(await queryDatabase(afterCrash.url), 'echodo');
  assert.equal((await embeddedStatus(home)).pid, afterCrash.pid);
});

test('a server.json naming a dead pid, or a live pid with nothing on its port, is not trusted', async () => {
  const home = await freshHome();
  const original = await ensureEmbeddedPostgres(home);
  assert.equal(await stopEmbeddedPostgres(home), true);
  const serverJson = path.join(home, 'pg', 'server.json');

  // A pid that cannot be alive (above the kernel's pid_max).
  await writeFile(serverJson, JSON.stringify({ ...original, pid: 4_194_305 }));
  assert.equal((await embeddedStatus(home)).running, false);
  const restarted = await ensureEmbeddedPostgres(home);
  assert.notEqual(restarted.pid, 4_194_305);
  assert.ok(isRunning(restarted.pid), 'isRunning(restarted.pid)');
  assert.ok(await answers(restarted.url), 'await answers(restarted.url)');

  // A live pid (this test process) with nothing answering on the recorded port.
  await stopEmbeddedPostgres(home);
  await writeFile(serverJson, JSON.stringify({ ...restarted, pid: process.pid }));
  assert.equal((await embeddedStatus(home)).running, false);
  const again = await ensureEmbeddedPostgres(home);
  assert.notEqual(again.pid, process.pid);
  assert.ok(await answers(again.url), 'await answers(again.url)');
});

test('a start lock left by a dead process is taken over', async () => {
  const home = await freshHome();
  const first = await ensureEmbeddedPostgres(home);
  await stopEmbeddedPostgres(home);
  await writeFile(path.join(home, 'pg', 'start.lock'), '4194305\n');
  const server = await ensureEmbeddedPostgres(home);
  assert.ok(await answers(server.url), 'await answers(server.url)');
  assert.equal(server.url.replace(/:\d+\//, ':PORT/'), first.url.replace(/:\d+\//, ':PORT/'), 'same password');
  assert.equal(existsSync(path.join(home, 'pg', 'start.lock')), false, 'lock released');
});

test('stop stops the server, and a second stop finds nothing to stop', async () => {
  const home = await freshHome();
  const server = await ensureEmbeddedPostgres(home);
  assert.deepEqual(await embeddedStatus(home), { running: true, ...server });

  assert.equal(await stopEmbeddedPostgres(home), true);
  assert.equal(isRunning(server.pid), false);
  assert.equal(await answers(server.url), false);
  assert.deepEqual(await embeddedStatus(home), { running: false });
  assert.equal(existsSync(path.join(home, 'pg', 'server.json')), false);
  assert.equal(await stopEmbeddedPostgres(home), false);
  assert.equal(await stopEmbeddedPostgres(path.join(home, 'never-used')), false);
});
