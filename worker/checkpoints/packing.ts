// Checkpoint objects never accumulate as loose files: each checkpoint's commit is one small pack
// (content.ts, via fast-import), and so is each note batch. Every `every` checkpoints, behind the
// run, the small packs are rolled up geometrically (`git repack -d --geometric=2`: packs are
// merged only while the smaller ones add up to half of the next, so a run of n checkpoints
// leaves O(log n) packs and each object is rewritten O(log n) times; loose objects met on the
// way, anyone's, are packed too). A roll-up writes the new pack from exactly the objects of the
// packs it replaces (--stdin-packs) before deleting them, and skips packs with a .keep (a
// fast-import in flight): safe next to a concurrent `git gc` or `git repack -ad`.
import { readdir, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { errorMessage } from '../../core/errors.ts';
import { runGit } from '../git.ts';
import type { Logger } from '../log.ts';
import { commonDirOf } from './notes.ts';

export class ObjectPacker {
  private sinceLastPack = 0;
  private running: Promise<void> = Promise.resolve();

  constructor(
    private readonly worktree: string,
    private readonly every: number,
    private readonly log: Logger,
  ) {}

  /** Called after each checkpoint's note; rolls packs up in the background every `every` checkpoints. */
  afterCheckpoint(): void {
    if (++this.sinceLastPack < this.every) return;
    this.sinceLastPack = 0;
    this.running = this.running.then(() => this.packNow());
  }

  /** Waits for a roll-up in progress (the run is finishing or stopping). */
  async settle(): Promise<void> {
    await this.running;
  }

  async packNow(): Promise<void> {
    await removeOrphanKeeps(path.join(await commonDirOf(this.worktree), 'objects', 'pack'));
    await runGit(this.worktree, ['repack', '-d', '-q', '--geometric=2', '--no-write-bitmap-index']).catch((err) => {
      // A concurrent repack (someone's gc) may hold a pack we wanted: the next roll-up gets it.
      this.log.warn({ error: errorMessage(err) }, 'rolling up checkpoint packs failed; retried at the next one');
    });
  }
}

/**
 * A fast-import that failed (a concurrent `git gc --prune=now` deleted its temporary pack) leaves
 * its .keep without a pack. One older than a minute is nobody's in-flight import: removed.
 */
async function removeOrphanKeeps(packDir: string): Promise<void> {
  const names = await readdir(packDir).catch(() => [] as string[]);
  const present = new Set(names);
  for (const name of names) {
    if (!name.endsWith('.keep') || present.has(name.replace(/\.keep$/, '.pack'))) continue;
    const st = await stat(path.join(packDir, name)).catch(() => undefined);
    if (st && Date.now() - st.mtimeMs > 60_000) await unlink(path.join(packDir, name)).catch(() => {});
  }
}
