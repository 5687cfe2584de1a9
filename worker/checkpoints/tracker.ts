// Which paths changed since the last checkpoint: what the tools report, what chokidar sees
// (side effects of commands, anything else writing in the worktree), cross-checked by git
// after each command. A checkpoint then stages exactly these paths.
import path from 'node:path';
import { watch, type FSWatcher } from 'chokidar';
import { runGit } from '../git.ts';
import { changedPathsByGit } from './content.ts';

export class TouchTracker {
  private pending = new Set<string>();
  /** Seen only by the watcher: may be .gitignored build output, so git filters them at drain. */
  private watched = new Set<string>();
  private watcher: FSWatcher | undefined;

  constructor(private readonly root: string) {}

  /** Starts watching without waiting for the initial scan: tool writes and git cover that window. */
  start(): void {
    this.watcher = watch(this.root, {
      ignoreInitial: true,
      followSymlinks: false, // a symlink to / in the repo must not make us watch the filesystem
      ignored: (p: string) => p === path.join(this.root, '.git') || p.includes(`${path.sep}.git${path.sep}`) || /\.echodo-tmp-/.test(p) || p.includes(`${path.sep}node_modules${path.sep}`),
      persistent: false,
    });
    const add = (abs: string) => {
      const rel = normalize(path.relative(this.root, abs));
      if (rel && !this.pending.has(rel)) this.watched.add(rel);
    };
    this.watcher.on('add', add).on('change', add).on('unlink', add).on('error', () => {});
  }

  note(rel: string): void {
    const n = normalize(rel);
    if (n) {
      this.pending.add(n);
      this.watched.delete(n);
    }
  }

  /** After run_command: whatever git says changed joins the set. */
  async crossCheckWithGit(): Promise<void> {
    for (const rel of await changedPathsByGit(this.root)) this.note(rel);
  }

  async drain(): Promise<string[]> {
    const paths = new Set(this.pending);
    const watchedOnly = [...this.watched];
    this.pending.clear();
    this.watched.clear();
    if (watchedOnly.length) {
      const ignored = await runGit(this.root, ['check-ignore', '-z', '--stdin'], { input: watchedOnly.join('\0'), allowExitCodes: [1] });
      const skip = new Set(ignored.stdout.split('\0'));
      for (const p of watchedOnly) if (!skip.has(p)) paths.add(p);
    }
    return [...paths].sort();
  }

  async stop(): Promise<void> {
    await this.watcher?.close();
  }
}

function normalize(rel: string): string | undefined {
  if (!rel || rel.startsWith('..') || path.isAbsolute(rel)) return undefined;
  return rel.split(path.sep).join('/');
}
