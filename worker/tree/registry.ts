// Which tree process serves a tree: one per root, started on first use, kept while a run attempt
// holds it (acquire/release) and closed once idle. Every read, write, hash and git call of the
// worker inside a run's tree goes through it (git through worker/git/run-git.ts's router), so the process
// holding keys and the database never opens a path there nor runs git there.
//
// `confineTrees` (every process that serves runs or inspects them calls it at start-up) makes the
// tree processes sandboxed; without it (WORKER_SANDBOX=off, or code driven directly by a test) the
// same server runs unconfined, so there is one implementation of every operation either way.
import { realpathSync } from 'node:fs';
import path from 'node:path';
import { gitSubcommand, routeGitThrough, type GitResult } from '../git/run-git.ts';
import { hydrateFor } from './hydrate.ts';
import { INSIDE_RG, SERVER_FILE } from './mounts.ts';
import { TreeProcess, type TreeSandbox } from './process.ts';

const IDLE_CLOSE_MS = 1000;

interface Entry {
  tree: Promise<TreeProcess>;
  holders: number;
  idle?: NodeJS.Timeout;
}

const entries = new Map<string, Entry>();
let sandbox: TreeSandbox | undefined;
/** Folders every tree lies in (the worktree base): git there runs in a tree process, never here. */
let confinedBases: string[] = [];

export function confineTrees(options: { sandbox: TreeSandbox; bases: string[] }): void {
  sandbox = options.sandbox;
  confinedBases = options.bases.map((b) => realOrSelf(path.resolve(b)));
  routeGitThrough({ claims: confinedRootOf, run: runGitInTree });
}

/** Whether trees run sandboxed in this process (confineTrees was called). */
export function treesConfined(): boolean {
  return sandbox !== undefined;
}

function realOrSelf(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return p;
  }
}

const under = (p: string, base: string) => p === base || p.startsWith(`${base}/`);

/** The tree root serving a git call in cwd, when cwd lies in a confined base; undefined: git runs here. */
function confinedRootOf(cwd: string): string | undefined {
  const resolved = path.resolve(cwd);
  for (const root of entries.keys()) if (under(resolved, root)) return root;
  if (confinedBases.some((base) => under(resolved, base) || under(realOrSelf(resolved), base))) return resolved;
  return undefined;
}

async function runGitInTree(
  root: string,
  cwd: string,
  argv: string[],
  input: string | Buffer | undefined,
  env: Record<string, string>,
  timeoutMs?: number,
): Promise<GitResult> {
  await hydrateFor(root, argv, gitSubcommand(argv));
  const lease = await acquireTree(root);
  try {
    const r = await lease.tree.run(['git', '-c', 'safe.directory=*', ...argv], { env, input, timeoutMs, cwd });
    const stderr = r.stderr + (r.exitCode === -1 && timeoutMs ? `\nno answer within ${timeoutMs} ms: stopped` : '');
    return { stdout: r.stdout.toString('utf8'), stderr, exitCode: r.exitCode };
  } finally {
    lease.release();
  }
}

export interface TreeLease {
  tree: TreeProcess;
  release(): void;
}

function startTree(root: string): Promise<TreeProcess> {
  if (sandbox) return TreeProcess.start(sandbox, root);
  return TreeProcess.startUnconfined(root, SERVER_FILE);
}

/** The tree process of `root`, started if none runs; release() when done (it closes once idle). */
export async function acquireTree(root: string): Promise<TreeLease> {
  const key = path.resolve(root);
  let entry = entries.get(key);
  if (!entry) {
    entry = { tree: startTree(key), holders: 0 };
    entries.set(key, entry);
    entry.tree.catch(() => entries.delete(key));
  }
  entry.holders++;
  clearTimeout(entry.idle);
  const e = entry;
  let tree: TreeProcess;
  try {
    tree = await e.tree;
    if (tree.gone) throw tree.gone;
  } catch (err) {
    if (entries.get(key) === e) entries.delete(key);
    throw err;
  }
  let released = false;
  return {
    tree,
    release: () => {
      if (released) return;
      released = true;
      if (--e.holders > 0) return;
      e.idle = setTimeout(() => {
        if (e.holders > 0 || entries.get(key) !== e) return;
        entries.delete(key);
        tree.close();
      }, IDLE_CLOSE_MS);
      e.idle.unref();
    },
  };
}

/** Runs fn with the tree process of root. */
export async function withTree<T>(root: string, fn: (tree: TreeProcess) => Promise<T>): Promise<T> {
  const lease = await acquireTree(root);
  try {
    return await fn(lease.tree);
  } finally {
    lease.release();
  }
}

/** ripgrep's path as the tree process sees it (sandboxed: bound at a fixed place). */
export function rgInside(hostPath: string): string {
  return sandbox?.rgPath ? INSIDE_RG : hostPath;
}
