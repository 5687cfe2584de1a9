// The long run's git bytes beside a floor measured in the same run: what git's own housekeeping
// of the whole repository leaves for the same checkpoints. Two copies of the settled repository's
// git dir: one as it is, one with the run's branch and the notes ref deleted (reflogs expired);
// both repacked the same way, whole, into one pack:
//  - `git gc`: `repack -a -d` (existing deltas reused), what a plain gc past the expiry does;
//  - `git gc --aggressive`: `repack -a -d -f --window=250 --depth=250` (every delta searched anew).
// Each is judged like the worker's own packing: the larger of the objects directory's growth
// (with run minus without) and the run's objects + notes as stored, plus their index entries.
// Neither would be a worker's job (each rewrites the repository's whole pack: seconds to minutes
// on a big one); they say how far from git's own best the worker's per-run packing is.
import { cp, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { runGit } from '../worker/git/run-git.ts';
import { round } from './stats.ts';

export interface GitFloor {
  label: string;
  command: string;
  /** Objects directory with the run minus without it, per checkpoint. */
  growthPerCheckpoint: number;
  /** The run's objects + notes as stored after the repack, plus 28 B of pack index each, per checkpoint. */
  objectsAndNotesPerCheckpoint: number;
  judgedPerCheckpoint: number;
  /** The repack of the copy with the run (the larger of the two). */
  seconds: number;
}

const VARIANTS = [
  { label: 'git gc', args: ['repack', '-a', '-d', '-q'] },
  { label: 'git gc --aggressive', args: ['repack', '-a', '-d', '-f', '-q', '--window=250', '--depth=250'] },
];

export async function measureGitFloors(
  gitDir: string,
  run: { branch: string; notesRef: string; checkpoints: number },
  /** The run's objects + notes bytes and count in a repository (bench/long-run.ts runObjects). */
  objectsOf: (gitDir: string) => Promise<{ bytes: number; count: number }>,
  bytesOf: (objectsDir: string) => Promise<number>,
): Promise<GitFloor[]> {
  const scratch = await mkdtemp(path.join(os.tmpdir(), 'echodo-git-floor-'));
  try {
    const floors: GitFloor[] = [];
    for (const v of VARIANTS) {
      const withRun = await repackedCopy(gitDir, path.join(scratch, 'with'), v.args, []);
      const without = await repackedCopy(gitDir, path.join(scratch, 'without'), v.args, [
        `refs/heads/${run.branch}`,
        run.notesRef,
      ]);
      const growth =
        (await bytesOf(path.join(withRun.dir, 'objects'))) - (await bytesOf(path.join(without.dir, 'objects')));
      const own = await objectsOf(withRun.dir);
      const objectsAndNotes = own.bytes + 28 * own.count;
      floors.push({
        label: v.label,
        command: `git ${v.args.filter((a) => a !== '-q').join(' ')}`,
        growthPerCheckpoint: round(growth / run.checkpoints, 1),
        objectsAndNotesPerCheckpoint: round(objectsAndNotes / run.checkpoints, 1),
        judgedPerCheckpoint: round(Math.max(growth, objectsAndNotes) / run.checkpoints, 1),
        seconds: round(Math.max(withRun.seconds, without.seconds), 1),
      });
      await rm(withRun.dir, { recursive: true, force: true });
      await rm(without.dir, { recursive: true, force: true });
    }
    return floors;
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/**
 * A copy of the git dir without the `drop` refs, repacked whole with `repack` and pruned. The
 * worktrees' admin folders are left out: their HEADs and indexes would keep the run reachable.
 */
async function repackedCopy(
  gitDir: string,
  dir: string,
  repack: string[],
  drop: string[],
): Promise<{ dir: string; seconds: number }> {
  await cp(gitDir, dir, { recursive: true, filter: (src) => path.relative(gitDir, src) !== 'worktrees' });
  for (const ref of drop) await runGit(dir, ['update-ref', '-d', ref]);
  await runGit(dir, ['reflog', 'expire', '--expire=now', '--all']);
  const start = performance.now();
  await runGit(dir, ['-c', 'repack.writeBitmaps=false', ...repack]);
  await runGit(dir, ['prune', '--expire=now']);
  return { dir, seconds: (performance.now() - start) / 1000 };
}
