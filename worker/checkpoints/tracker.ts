// Which paths changed since the last checkpoint: what the tools report, what chokidar sees in the
// tree process (side effects of commands, anything else writing in the worktree), cross-checked by
// git after each command. A checkpoint then stages exactly these paths.
import path from 'node:path';
import { runGit } from '../git/run-git.ts';
import { changedPathsByGit } from './content.ts';
import { acquireTree, withTree, type TreeLease } from '../tree/registry.ts';

export class TouchTracker {
  private pending = new Set<string>();
  /** Seen only by the watcher: may be .gitignored build output, so git filters them at drain. */
  private watched = new Set<string>();
  private watching: Promise<TreeLease | undefined> | undefined;
  private readonly onChange = (abs: string) => {
    const rel = normalize(path.relative(this.root, abs));
    if (rel && !this.pending.has(rel)) this.watched.add(rel);
  };

  constructor(private readonly root: string) {}

  /**
   * Starts chokidar in the tree process (which alone looks into the tree), without waiting for its
   * initial scan: tool writes and the git cross-check cover that window.
   */
  start(): void {
    this.watching = acquireTree(this.root)
      .then(async (lease) => {
        await lease.tree.watch(this.onChange);
        return lease;
      })
      .catch(() => undefined); // no watcher: the tools' reports and git's cross-check remain
  }

  note(rel: string): void {
    const n = normalize(rel);
    if (n) {
      this.pending.add(n);
      this.watched.delete(n);
    }
  }

  /**
   * After run_command: whatever git says changed joins the set. Returns the nested repositories
   * git saw (an untracked folder listed as a whole, `name/`): never staged, named to the model.
   */
  async crossCheckWithGit(): Promise<string[]> {
    const nested: string[] = [];
    for (const rel of await changedPathsByGit(this.root)) {
      if (rel.endsWith('/')) nested.push(rel.slice(0, -1));
      else this.note(rel);
    }
    return nested;
  }

  async drain(): Promise<string[]> {
    const paths = new Set(this.pending);
    const watchedOnly = [...this.watched];
    this.pending.clear();
    this.watched.clear();
    if (watchedOnly.length) {
      // A path below a folder that became a symlink is gone from the tree (git refuses to look at it).
      const facts = await withTree(this.root, (tree) => tree.files(watchedOnly, false));
      const beyondLink = new Set(facts.filter((f) => f.kind === 'outside').map((f) => f.rel));
      const askGit = watchedOnly.filter((p) => !beyondLink.has(p));
      const ignored = askGit.length
        ? await runGit(this.root, ['check-ignore', '-z', '--stdin'], { input: askGit.join('\0'), allowExitCodes: [1] })
        : { stdout: '' };
      const skip = new Set(ignored.stdout.split('\0'));
      for (const p of watchedOnly) if (!skip.has(p)) paths.add(p);
    }
    return [...paths].sort();
  }

  async stop(): Promise<void> {
    const watching = this.watching;
    this.watching = undefined;
    const lease = await watching;
    if (!lease) return;
    await lease.tree.unwatch(this.onChange).catch(() => {});
    lease.release();
  }
}

function normalize(rel: string): string | undefined {
  if (!rel || rel.startsWith('..') || path.isAbsolute(rel)) return undefined;
  return rel.split(path.sep).join('/');
}
