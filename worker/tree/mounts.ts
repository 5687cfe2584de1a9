// The bubblewrap command line of a tree process: the same kind of sandbox as an agent's command
// (sandbox/bwrap.ts), with the run's tree read-write, its git dir writable except the config, and
// nothing else of the host but the read-only toolchain. Pure: the caller found the layout.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { SANDBOX_HOME, SANDBOX_UID } from '../sandbox/bwrap.ts';
import type { GitLayout } from '../sandbox/git-dirs.ts';
import type { Toolchain } from '../sandbox/toolchain.ts';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const PROJECT = path.resolve(HERE, '..', '..');
export const SERVER_FILE = path.join(HERE, 'server.mjs');
/** Where the server, its watcher and ripgrep appear inside: outside every folder of the host's own layout. */
const INSIDE = '/opt/echodo';
export const INSIDE_SERVER = `${INSIDE}/worker/tree/server.mjs`;
export const INSIDE_RG = `${INSIDE}/rg`;
/** The files the server runs, each bound alone (the project folder itself may hold anything). */
const CODE = [
  'worker/tree/server.mjs',
  'worker/checkpoints/watcher-thread.mjs',
  'node_modules/chokidar',
  'node_modules/readdirp',
];
const TMPFS_BYTES = 256 * 1024 * 1024;

export interface TreePlan {
  toolchain: Toolchain;
  root: string;
  git: GitLayout;
  rgPath?: string;
}

export function treeBwrapArgs(plan: TreePlan): string[] {
  const args = ['--unshare-all', '--unshare-user', '--uid', String(SANDBOX_UID), '--gid', String(SANDBOX_UID)];
  args.push('--hostname', 'tree', '--die-with-parent', '--new-session');
  for (const m of plan.toolchain.mounts) {
    if (m.kind === 'ro-bind') args.push('--ro-bind', m.source, m.dest);
    else args.push('--symlink', m.target, m.dest);
  }
  args.push('--proc', '/proc', '--dev', '/dev');
  args.push('--size', String(TMPFS_BYTES), '--tmpfs', '/tmp', '--size', String(TMPFS_BYTES), '--tmpfs', SANDBOX_HOME);
  for (const file of CODE) args.push('--ro-bind', path.join(PROJECT, file), `${INSIDE}/${file}`);
  if (plan.rgPath) args.push('--ro-bind', plan.rgPath, INSIDE_RG);
  args.push('--bind', plan.root, plan.root);
  args.push(...gitMounts(plan.git));
  args.push('--chdir', plan.root, '--clearenv');
  args.push('--setenv', 'PATH', plan.toolchain.path, '--setenv', 'HOME', SANDBOX_HOME, '--setenv', 'LANG', 'C.UTF-8');
  return args;
}

/**
 * git writes objects, refs and the index, so the git dir is writable; its config is not (a
 * setting written there would outlive the run), and the `.git` pointer stays read-only.
 */
function gitMounts(g: GitLayout): string[] {
  if (g.kind === 'none') return [];
  const dir = g.kind === 'repo' ? g.dotGit : g.commonDir;
  const out = ['--bind', dir, dir, '--ro-bind', path.join(dir, 'config'), path.join(dir, 'config')];
  if (g.kind === 'worktree') out.push('--ro-bind', g.dotGit, g.dotGit);
  return out;
}
