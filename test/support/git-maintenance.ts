// Someone's maintenance on the repository while checkpoints are written: `git gc --prune=now`
// then `git repack -ad`, over and over until stopped. Each throws (failing the test) if git finds
// an object that an index or a ref names missing.
import { git } from './git.ts';

export interface MaintenanceLoop {
  counts: { gc: number; repack: number };
  /** Stops after the pass in progress; rejects if any pass failed. */
  stop(): Promise<void>;
}

export function gcAndRepackLoop(repo: string): MaintenanceLoop {
  let done = false;
  const counts = { gc: 0, repack: 0 };
  const loop = (async () => {
    while (!done) {
      await git(repo, 'gc', '--prune=now', '--quiet');
      counts.gc++;
      await git(repo, 'repack', '-a', '-d', '-q');
      counts.repack++;
    }
  })();
  return {
    counts,
    stop: async () => {
      done = true;
      await loop;
    },
  };
}
