// Every checkpoint object is written by `git fast-import` (the commit in content.ts, the notes in
// notes.ts), each import one pack that a .keep file protects until its ref points at it.
// `git gc --prune=now` deletes the temporary pack of an import in flight; that import then dies
// after writing its pack's .keep, and the same stream again would make the same pack, whose .keep
// fast-import then refuses to create. So an import after a failed one is stamped (its committer
// time) at least a second after it: the same objects are never written as the same pack twice.
import { runGit, type GitResult } from '../../git/run-git.ts';

let failedStamp = 0;

/** One fast-import of `stream(stamp)`; unpackLimit=1: even a one-object import stays a (kept) pack, never loose. */
export async function fastImport(
  cwd: string,
  stream: (stamp: number) => string | Buffer,
  args: string[] = [],
): Promise<GitResult> {
  const stamp = Math.max(Math.floor(Date.now() / 1000), failedStamp + 1);
  try {
    return await runGit(cwd, ['-c', 'fastimport.unpackLimit=1', 'fast-import', '--quiet', ...args], {
      input: stream(stamp),
    });
  } catch (err) {
    failedStamp = stamp;
    throw err;
  }
}
