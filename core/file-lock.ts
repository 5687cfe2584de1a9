// A cross-process lock file, created with O_EXCL. Its holder refreshes the file's mtime while it
// works, so a holder that is dead (its pid is gone) or paused (SIGSTOP, a frozen VM: the mtime
// stops moving) cannot keep it forever: a waiter takes it over. Used per repository (in its common
// git dir) by the notes writer and by worktree creation and repair, and per ECHODO_HOME to start
// or stop the embedded PostgreSQL.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { open, readFile, stat, unlink, utimes, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { EchodoError } from './errors.ts';

export interface FileLockOptions {
  /** A lock whose mtime is older than this is taken over (its holder refreshes it at a quarter of it). */
  staleMs?: number;
  /** How long to wait for the lock before giving up with a clear error. */
  timeoutMs?: number;
  /** What the lock protects, for the timeout message. */
  what?: string;
}

/** kill(pid, 0) succeeds on zombies too, and a killed process may stay one when nothing reaps it. */
export function pidAlive(pid: number): boolean {
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

async function lockStamp(lockPath: string): Promise<{ content: string; mtimeMs: number } | undefined> {
  const [content, st] = await Promise.all([
    readFile(lockPath, 'utf8').catch(() => undefined),
    stat(lockPath).catch(() => undefined),
  ]);
  return content === undefined || !st ? undefined : { content, mtimeMs: st.mtimeMs };
}

/** Is the lock's holder provably gone: its pid is dead, or it stopped refreshing the file. */
function isStale(stamp: { content: string; mtimeMs: number }, staleMs: number): boolean {
  const holder = Number(stamp.content.split(' ')[0]);
  return (holder > 0 && !pidAlive(holder)) || Date.now() - stamp.mtimeMs > staleMs;
}

/**
 * Removes the stale lock whose content is `stale`, unless it has changed; false when another waiter
 * is taking it over. Takeovers are serialized by a second lock file: unserialized, two waiters can
 * both see the stale lock, the first remove it and create its own, and the second then remove that
 * one, so both hold the lock (seen in a stress test: 115 times in 300 rounds of 8 waiters).
 */
async function takeOver(lockPath: string, stale: string, staleMs: number): Promise<boolean> {
  const takeoverPath = `${lockPath}.takeover`;
  const mine = `${process.pid} ${randomUUID()}`;
  try {
    await writeFile(takeoverPath, mine, { flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    // Another waiter is taking over (a few file operations), or was killed doing it: that file is
    // removed as a stale lock was before, unserialized, a race only a kill inside it can open.
    const other = await lockStamp(takeoverPath);
    if (other && isStale(other, staleMs)) await unlinkIfContent(takeoverPath, other.content);
    return false;
  }
  try {
    const now = await lockStamp(lockPath);
    if (now && now.content === stale && isStale(now, staleMs)) await unlink(lockPath).catch(() => {});
  } finally {
    await unlinkIfContent(takeoverPath, mine);
  }
  return true;
}

async function unlinkIfContent(file: string, content: string): Promise<void> {
  if ((await readFile(file, 'utf8').catch(() => undefined)) === content) await unlink(file).catch(() => {});
}

async function acquire(
  lockPath: string,
  mine: string,
  staleMs: number,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const handle = await open(lockPath, 'wx');
      await handle.writeFile(mine);
      await handle.close();
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const seen = await lockStamp(lockPath);
    if (seen && isStale(seen, staleMs) && (await takeOver(lockPath, seen.content, staleMs))) continue;
    if (Date.now() > deadline) {
      throw new EchodoError(
        'transient',
        `timed out after ${timeoutMs} ms waiting for the ${what} lock ${lockPath} (held by pid ${seen?.content.split(' ')[0] ?? '?'})`,
      );
    }
    await sleep(2 + Math.random() * 8);
  }
}

/** Runs fn holding the lock file at lockPath; released (only if still ours) when fn settles. */
export async function withFileLock<T>(
  lockPath: string,
  fn: () => Promise<T>,
  options: FileLockOptions = {},
): Promise<T> {
  const staleMs = options.staleMs ?? 2_000;
  const mine = `${process.pid} ${randomUUID()}`;
  await acquire(lockPath, mine, staleMs, options.timeoutMs ?? 15_000, options.what ?? 'file');
  // The refresh says "alive and working" to waiters; a paused process stops refreshing.
  const refresh = setInterval(
    () => {
      const t = new Date();
      void utimes(lockPath, t, t).catch(() => {});
    },
    Math.max(50, Math.floor(staleMs / 4)),
  );
  refresh.unref();
  try {
    return await fn();
  } finally {
    clearInterval(refresh);
    // Only our own lock: if ours was taken over as stale, the file is someone else's now.
    await unlinkIfContent(lockPath, mine);
  }
}
