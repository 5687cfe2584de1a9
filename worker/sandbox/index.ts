// The sandbox every run_command runs in (WORKER_SANDBOX=bwrap, the default): bubblewrap namespaces,
// rlimits set by prlimit, and a cgroup for the process count and memory when the host allows one.
// Probed once per process; when it is unusable, run_command is refused with the probe's reason
// (fail closed). docs/security.md, "The sandbox for run_command", is the description.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, realpath, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Config } from '../../core/config.ts';
import { bwrapArgs, hardenedGitArgv } from './bwrap.ts';
import { detectLimiter, type CommandCgroup, type Limiter, type LimiterKind } from './cgroup.ts';
import { gitLayout } from './git-dirs.ts';
import { discoverToolchain, type Toolchain } from './toolchain.ts';

export interface SandboxLimits {
  /** RLIMIT_CPU, per process. */
  cpuSeconds: number;
  /** RLIMIT_FSIZE: the largest file a command can write. */
  fileBytes: number;
  /** cgroup pids.max (no effective fallback: see cgroup.ts). */
  pids: number;
  /** cgroup memory.max / memory.limit_in_bytes, else RLIMIT_AS. */
  memoryBytes: number;
}

export const DEFAULT_LIMITS: SandboxLimits = {
  cpuSeconds: 600,
  fileBytes: 1024 * 1024 * 1024,
  pids: 256,
  memoryBytes: 2048 * 1024 * 1024,
};

export type CommandSandbox =
  | { mode: 'off' }
  | { mode: 'bwrap'; usable: false; reason: string }
  | {
      mode: 'bwrap';
      usable: true;
      bwrap: string;
      prlimit: string;
      toolchain: Toolchain;
      limiter: Limiter;
      limits: SandboxLimits;
    };

export interface SandboxOptions {
  mode: 'bwrap' | 'off';
  /** The bwrap binary; default: `bwrap` on PATH. */
  bwrapPath?: string;
  limits?: Partial<SandboxLimits>;
  /** Folders no toolchain mount may contain or lie in (ECHODO_HOME, the worktree base, the repo root). */
  forbidden?: string[];
}

export function sandboxOptionsFromConfig(config: Config): SandboxOptions {
  const mb = (v: number | undefined) => (v === undefined ? undefined : v * 1024 * 1024);
  return {
    mode: config.WORKER_SANDBOX,
    bwrapPath: config.WORKER_SANDBOX_BWRAP,
    limits: {
      cpuSeconds: config.WORKER_SANDBOX_CPU_S,
      fileBytes: mb(config.WORKER_SANDBOX_FILE_MB),
      pids: config.WORKER_SANDBOX_PIDS,
      memoryBytes: mb(config.WORKER_SANDBOX_MEMORY_MB),
    },
    forbidden: [config.ECHODO_HOME, config.WORKER_WORKTREE_BASE, config.WORKER_REPO_ROOT],
  };
}

function which(name: string): string | null {
  if (name.includes('/')) return existsSync(name) ? name : null;
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (path.isAbsolute(dir) && existsSync(path.join(dir, name))) return path.join(dir, name);
  }
  return null;
}

function mergeLimits(partial: Partial<SandboxLimits> = {}): SandboxLimits {
  const limits = { ...DEFAULT_LIMITS };
  for (const [k, v] of Object.entries(partial)) if (typeof v === 'number') limits[k as keyof SandboxLimits] = v;
  return limits;
}

/** Runs `true` in a full sandbox over an empty folder: the sandbox is usable iff that exits 0. */
export async function probeSandbox(options: SandboxOptions): Promise<CommandSandbox> {
  if (options.mode === 'off') return { mode: 'off' };
  const bwrap = which(options.bwrapPath ?? 'bwrap');
  if (!bwrap)
    return {
      mode: 'bwrap',
      usable: false,
      reason: `bubblewrap was not found (${options.bwrapPath ?? 'bwrap on PATH'})`,
    };
  const prlimit = which('prlimit');
  if (!prlimit)
    return {
      mode: 'bwrap',
      usable: false,
      reason: 'prlimit (util-linux) was not found on PATH; it sets the sandbox limits',
    };
  const toolchain = discoverToolchain({ forbidden: options.forbidden });
  const limiter = await detectLimiter();
  const sandbox: CommandSandbox = {
    mode: 'bwrap',
    usable: true,
    bwrap,
    prlimit,
    toolchain,
    limiter,
    limits: mergeLimits(options.limits),
  };
  const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-sandbox-probe-')));
  try {
    const spec = await sandboxedCommand(sandbox, { root: dir, argv: ['true'] });
    const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(spec.file, spec.args, { env: spec.env, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (c: Buffer) => (stderr = (stderr + c.toString('utf8')).slice(0, 2000)));
      child.on('error', (err) => resolve({ code: -1, stderr: err.message }));
      child.on('close', (code) => resolve({ code, stderr }));
    });
    await spec.cgroup?.remove();
    if (result.code !== 0) {
      const why = result.stderr.trim().split('\n')[0] || `exit code ${result.code}`;
      return { mode: 'bwrap', usable: false, reason: `bubblewrap (${bwrap}) is not usable here: ${why}` };
    }
    return sandbox;
  } catch (err) {
    return { mode: 'bwrap', usable: false, reason: `the sandbox could not be set up: ${(err as Error).message}` };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const probes = new Map<string, Promise<CommandSandbox>>();

/** The probe, once per process and option set (the daemon logs it at start-up; every run reuses it). */
export function sandboxFor(options: SandboxOptions): Promise<CommandSandbox> {
  const key = JSON.stringify(options);
  let probe = probes.get(key);
  if (!probe) probes.set(key, (probe = probeSandbox(options)));
  return probe;
}

/** One line for the start-up log, the dry-run banner and the tool result's note. */
export function describeSandbox(s: CommandSandbox): string {
  if (s.mode === 'off')
    return "WORKER_SANDBOX=off: commands run unconfined with the worker's user, files and network (see docs/security.md)";
  if (!s.usable) return `sandbox unusable, run_command is refused: ${s.reason}`;
  const mib = (b: number) => `${Math.round(b / 1024 / 1024)} MiB`;
  const memory =
    s.limiter.kind === 'none'
      ? `memory ${mib(s.limits.memoryBytes)} (RLIMIT_AS)`
      : `memory ${mib(s.limits.memoryBytes)} (${s.limiter.kind})`;
  const pids =
    s.limiter.kind === 'none'
      ? 'process count not limited (no writable cgroup)'
      : `${s.limits.pids} processes (${s.limiter.kind} pids)`;
  return `bwrap sandbox: no network, worktree only; cpu ${s.limits.cpuSeconds} s (RLIMIT_CPU), files ≤ ${mib(s.limits.fileBytes)} (RLIMIT_FSIZE), ${memory}, ${pids}`;
}

export interface SandboxedSpawn {
  file: string;
  args: string[];
  /** The environment of the wrapper outside; bwrap clears it for the command. */
  env: Record<string, string>;
  cgroup: CommandCgroup | null;
  limiterKind: LimiterKind;
}

let counter = 0;

/** How to spawn `argv` sandboxed in `root`. git gets its git dir read-only; anything else none. */
export async function sandboxedCommand(
  sandbox: Extract<CommandSandbox, { usable: true }>,
  command: { root: string; argv: string[]; name?: string },
): Promise<SandboxedSpawn> {
  const isGit = command.argv[0] === 'git';
  const git = await gitLayout(command.root);
  const inner = bwrapArgs({
    toolchain: sandbox.toolchain,
    root: command.root,
    access: isGit ? 'git' : 'script',
    git,
    argv: isGit ? hardenedGitArgv(command.argv) : command.argv,
  });
  const { limits, limiter } = sandbox;
  const rlimits = [`--cpu=${limits.cpuSeconds}`, `--fsize=${limits.fileBytes}`, '--core=0'];
  if (limiter.kind === 'none') rlimits.push(`--as=${limits.memoryBytes}`);
  const limited = [sandbox.prlimit, ...rlimits, '--', sandbox.bwrap, ...inner];
  const env = { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' };
  const cgroup = await limiter.create(command.name ?? `cmd-${process.pid}-${++counter}`, {
    pids: limits.pids,
    memoryBytes: limits.memoryBytes,
  });
  if (!cgroup) return { file: limited[0]!, args: limited.slice(1), env, cgroup, limiterKind: limiter.kind };
  // The first process joins the cgroup(s) before it becomes bwrap, so every descendant is inside.
  const join =
    'IFS=:; for f in $0; do echo $$ > "$f" || { echo "echodo: could not join the cgroup $f" >&2; exit 125; }; done; exec "$@"';
  return {
    file: '/bin/sh',
    args: ['-c', join, cgroup.procsFiles.join(':'), ...limited],
    env,
    cgroup,
    limiterKind: limiter.kind,
  };
}
