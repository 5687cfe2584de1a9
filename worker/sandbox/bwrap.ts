// The bubblewrap command line of one sandboxed command. Pure: the caller has found the toolchain,
// the root's git layout and the limits. See docs/security.md, "The sandbox for run_command".
import type { GitLayout } from './git-dirs.ts';
import type { Toolchain } from './toolchain.ts';

export const SANDBOX_UID = 65534;
export const SANDBOX_HOME = '/home/sandbox';
const TMPFS_BYTES = 512 * 1024 * 1024;

export interface BwrapPlan {
  toolchain: Toolchain;
  /** The worktree (or repo root): mounted read-write at its own path, the command's cwd. */
  root: string;
  /** 'git': the git dir read-only, the worktree's admin dir writable. 'script': no git dir at all. */
  access: 'git' | 'script';
  git: GitLayout;
  argv: string[];
}

export function bwrapArgs(plan: BwrapPlan): string[] {
  const args = [
    // New pid, net, ipc, uts, user and cgroup namespaces: no host process, socket or network.
    '--unshare-all',
    '--unshare-user',
    '--uid',
    String(SANDBOX_UID),
    '--gid',
    String(SANDBOX_UID),
    '--hostname',
    'sandbox',
    // Killing bwrap kills pid 1 of the namespace, and with it every process inside (setsid or not).
    '--die-with-parent',
    '--new-session',
  ];
  for (const m of plan.toolchain.mounts) {
    if (m.kind === 'ro-bind') args.push('--ro-bind', m.source, m.dest);
    else args.push('--symlink', m.target, m.dest);
  }
  args.push('--proc', '/proc', '--dev', '/dev');
  args.push('--size', String(TMPFS_BYTES), '--tmpfs', '/tmp');
  args.push('--size', String(TMPFS_BYTES), '--tmpfs', SANDBOX_HOME);
  args.push('--bind', plan.root, plan.root);
  args.push(...gitMounts(plan));
  args.push('--chdir', plan.root, '--clearenv');
  args.push(
    '--setenv',
    'PATH',
    plan.toolchain.path,
    '--setenv',
    'HOME',
    SANDBOX_HOME,
    '--setenv',
    'LANG',
    'C.UTF-8',
    '--setenv',
    'CI',
    'true',
  );
  args.push('--', ...plan.argv);
  return args;
}

function gitMounts(plan: BwrapPlan): string[] {
  const g = plan.git;
  if (g.kind === 'none') return [];
  if (g.kind === 'repo') {
    // A plain repository: git reads its .git folder read-only; a script sees an empty, read-only one.
    return plan.access === 'git' ? ['--ro-bind', g.dotGit, g.dotGit] : ['--tmpfs', g.dotGit, '--remount-ro', g.dotGit];
  }
  // The .git pointer file stays read-only for both: the worker's own git outside follows it, so a
  // script must not be able to point it (or turn it into a folder with hooks) elsewhere.
  const pointer = ['--ro-bind', g.dotGit, g.dotGit];
  if (plan.access === 'script') return pointer;
  return ['--ro-bind', g.commonDir, g.commonDir, '--bind', g.adminDir, g.adminDir, ...pointer];
}

/**
 * The git argv run inside: no hooks, no fsmonitor, no external diff or textconv programs, and any
 * owner accepted (inside, the sandbox user owns the tree). Command-line config wins over the repo's.
 */
export function hardenedGitArgv(argv: string[]): string[] {
  const [git, sub, ...rest] = argv;
  const config = [
    '-c',
    'core.hooksPath=/dev/null',
    '-c',
    'core.fsmonitor=false',
    '-c',
    'safe.directory=*',
    '-c',
    'core.pager=cat',
  ];
  const diffFlags = sub === 'diff' ? ['--no-ext-diff', '--no-textconv'] : [];
  return [git!, ...config, ...(sub === undefined ? [] : [sub]), ...diffFlags, ...rest];
}
