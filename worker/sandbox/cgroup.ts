// Process-count and memory limits per command, from a cgroup when the host lets the worker make
// one. RLIMIT_NPROC is no substitute: it counts processes per real uid, and the sandbox's uid maps
// to the worker's (root is exempt from it altogether). Preference: cgroup v2 (pids.max,
// memory.max), else the v1 pids and memory hierarchies, else none (the caller falls back to
// RLIMIT_AS for memory and says that the process count is not limited).
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

export type LimiterKind = 'cgroup2' | 'cgroup1' | 'none';

export interface CommandCgroup {
  /** The cgroup.procs files the command's first process writes its pid into before exec. */
  procsFiles: string[];
  /** SIGKILLs every process left in the cgroup(s). */
  kill(): Promise<void>;
  /** Kills what is left and removes the cgroup(s). */
  remove(): Promise<void>;
}

export interface Limiter {
  kind: LimiterKind;
  create(name: string, limits: { pids: number; memoryBytes: number }): Promise<CommandCgroup | null>;
}

const ROOT = '/sys/fs/cgroup';
const PARENT = 'echodo-sandbox';

async function write(file: string, value: string): Promise<void> {
  await writeFile(file, value);
}

async function pidsIn(dir: string): Promise<number[]> {
  const text = await readFile(path.join(dir, 'cgroup.procs'), 'utf8').catch(() => '');
  return text.split('\n').filter(Boolean).map(Number);
}

function cgroupOf(dirs: string[], useKillFile: boolean): CommandCgroup {
  const kill = async () => {
    for (const dir of dirs) {
      if (useKillFile && existsSync(path.join(dir, 'cgroup.kill'))) {
        await write(path.join(dir, 'cgroup.kill'), '1').catch(() => {});
        continue;
      }
      for (const pid of await pidsIn(dir)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
  };
  return {
    procsFiles: dirs.map((d) => path.join(d, 'cgroup.procs')),
    kill,
    remove: async () => {
      for (let attempt = 0; attempt < 50; attempt++) {
        await kill();
        const left: string[] = [];
        for (const dir of dirs)
          await rmdir(dir).catch((err: NodeJS.ErrnoException) => err.code !== 'ENOENT' && left.push(dir));
        if (left.length === 0) return;
        dirs = left;
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}

async function cgroup2(): Promise<Limiter | null> {
  const controllers = await readFile(path.join(ROOT, 'cgroup.controllers'), 'utf8').catch(() => '');
  if (!/\bpids\b/.test(controllers) || !/\bmemory\b/.test(controllers)) return null;
  const parent = path.join(ROOT, PARENT);
  try {
    await write(path.join(ROOT, 'cgroup.subtree_control'), '+pids +memory').catch(() => {});
    await mkdir(parent, { recursive: true });
    await write(path.join(parent, 'cgroup.subtree_control'), '+pids +memory');
  } catch {
    return null;
  }
  const limiter: Limiter = {
    kind: 'cgroup2',
    create: async (name, limits) => {
      const dir = path.join(parent, name);
      await mkdir(dir);
      const group = cgroupOf([dir], true);
      try {
        await write(path.join(dir, 'pids.max'), String(limits.pids));
        await write(path.join(dir, 'memory.max'), String(limits.memoryBytes));
        await write(path.join(dir, 'memory.swap.max'), '0').catch(() => {});
      } catch (err) {
        await group.remove();
        throw err;
      }
      return group;
    },
  };
  return limiter;
}

async function cgroup1(): Promise<Limiter | null> {
  const pidsRoot = path.join(ROOT, 'pids');
  const memoryRoot = path.join(ROOT, 'memory');
  if (!existsSync(path.join(pidsRoot, 'cgroup.procs')) || !existsSync(path.join(memoryRoot, 'cgroup.procs')))
    return null;
  try {
    await mkdir(path.join(pidsRoot, PARENT), { recursive: true });
    await mkdir(path.join(memoryRoot, PARENT), { recursive: true });
  } catch {
    return null;
  }
  return {
    kind: 'cgroup1',
    create: async (name, limits) => {
      const pids = path.join(pidsRoot, PARENT, name);
      const memory = path.join(memoryRoot, PARENT, name);
      await mkdir(pids);
      await mkdir(memory).catch(async (err) => {
        await rmdir(pids);
        throw err;
      });
      const group = cgroupOf([pids, memory], false);
      try {
        await write(path.join(pids, 'pids.max'), String(limits.pids));
        await write(path.join(memory, 'memory.limit_in_bytes'), String(limits.memoryBytes));
      } catch (err) {
        await group.remove();
        throw err;
      }
      return group;
    },
  };
}

const NONE: Limiter = { kind: 'none', create: async () => null };

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Removes the empty cgroups of worker processes that died before they could (named cmd-<pid>-n). */
async function sweepStale(): Promise<void> {
  for (const parent of [path.join(ROOT, PARENT), path.join(ROOT, 'pids', PARENT), path.join(ROOT, 'memory', PARENT)]) {
    const entries = await readdir(parent, { withFileTypes: true }).catch(() => []);
    for (const entry of entries) {
      const pid = /^(?:cmd|probe)-(\d+)-/.exec(entry.name)?.[1];
      if (entry.isDirectory() && pid && !alive(Number(pid))) await rmdir(path.join(parent, entry.name)).catch(() => {});
    }
  }
}

/** Finds the best limiter this host allows and proves it by making and removing one cgroup. */
export async function detectLimiter(): Promise<Limiter> {
  await sweepStale();
  for (const candidate of [cgroup2, cgroup1]) {
    const limiter = await candidate();
    if (!limiter) continue;
    try {
      const probe = await limiter.create(`probe-${process.pid}-0`, { pids: 8, memoryBytes: 64 * 1024 * 1024 });
      await probe?.remove();
      return limiter;
    } catch {
      // this hierarchy is not writable after all; try the next
    }
  }
  return NONE;
}
