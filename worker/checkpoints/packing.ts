// Checkpoint objects never accumulate as loose files: each checkpoint's commit is one small pack
// (content.ts, via fast-import), and so is each note batch. Two steps keep the packs few and the
// bytes close to what changed:
//  - during the run, every `every` checkpoints, behind the run, the small packs are rolled up
//    geometrically (`git repack -d --geometric=2`: packs are merged only while the smaller ones
//    add up to half of the next, so a run of n checkpoints leaves O(log n) packs and each object
//    is rewritten O(log n) times; loose objects met on the way, anyone's, are packed too);
//  - when the run settles (finishes or stops), the packs written since this attempt started (but
//    the largest) are consolidated into one pack (once per run: O(the run's objects); older packs,
//    earlier runs' included, are left as they are, or every settle would rewrite them again).
//    Why: a pack can only delta against objects in itself, so each pack stores the first version
//    of every tree it holds whole (a 10-file change rewrites ~22 trees of ~600 B), and O(log n)
//    packs hold O(log n) such copies: measured, ~300 B per checkpoint over a 2,000-checkpoint run.
//    Existing deltas are reused (a fresh delta search, --no-reuse-delta, measured larger: 5,448 ->
//    6,556 B per checkpoint over 300).
// Both write the new pack from exactly the objects of the packs they replace (--stdin-packs)
// before deleting those, and skip packs with a .keep (a fast-import in flight): safe next to a
// concurrent `git gc` or `git repack -ad` (a pack that vanished under us fails the step, retried
// at the next one).
import { readdir, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { errorMessage } from '../../core/errors.ts';
import { runGit } from '../git.ts';
import type { Logger } from '../log.ts';
import { commonDirOf } from './notes.ts';

export class ObjectPacker {
  private sinceLastPack = 0;
  /** Roll-ups since the last consolidation: settling consolidates only when there were some. */
  private rolledUp = 0;
  private running: Promise<void> = Promise.resolve();

  constructor(
    private readonly worktree: string,
    private readonly every: number,
    private readonly log: Logger,
    /** Packs last modified before this (ms since the epoch) are not this run's: never consolidated. */
    private readonly since = Date.now() - 1000,
  ) {}

  /** Called after each checkpoint's note; rolls packs up in the background every `every` checkpoints. */
  afterCheckpoint(): void {
    if (++this.sinceLastPack < this.every) return;
    this.sinceLastPack = 0;
    this.running = this.running.then(() => this.packNow());
  }

  /**
   * The run is finishing or stopping: waits for a roll-up in progress, then, if the run rolled
   * packs up at all, consolidates them into one (a short run leaves its few small packs as they are).
   */
  async settle(): Promise<void> {
    await this.running;
    if (this.rolledUp === 0) return;
    this.running = this.consolidate().then(() => {});
    await this.running;
  }

  async packNow(): Promise<void> {
    await removeOrphanKeeps(await this.packDir());
    await runGit(this.worktree, ['repack', '-d', '-q', '--geometric=2', '--no-write-bitmap-index'])
      .then(() => this.rolledUp++)
      .catch((err) => {
        // A concurrent repack (someone's gc) may hold a pack we wanted: the next roll-up gets it.
        this.log.warn({ error: errorMessage(err) }, 'rolling up checkpoint packs failed; retried at the next one');
      });
  }

  /**
   * The packs written since `since` (but the largest, and those with a .keep) into one; false when
   * there was nothing to do. Only the largest is excluded (its objects not copied): a pack is
   * deleted only by whoever copied it, and two consolidations can never each rely on a pack the
   * other deletes (each keeps the larger of the two).
   */
  async consolidate(): Promise<boolean> {
    const dir = await this.packDir();
    await removeOrphanKeeps(dir);
    const [largest, ...others] = await packsBySize(dir);
    const rest = others.filter((p) => p.mtimeMs >= this.since);
    if (!largest || rest.length < 2) return false; // at most one pack of the run's: already consolidated
    try {
      const input = [...rest.map((p) => p.name), `^${largest.name}`].join('\n') + '\n';
      const out = await runGit(this.worktree, ['pack-objects', '--stdin-packs', '--delta-base-offset', '-q', path.join(dir, 'pack')], { input });
      // Everything of `rest` is in the new pack now (or in the largest): their files can go. A pack
      // is named by its content's hash: when `rest` held a pack of exactly these objects packed the
      // same way (an earlier consolidation's, or a repack's), the new pack *is* that file: it stays.
      const made = `pack-${out.stdout.trim()}.pack`;
      for (const p of rest) if (p.name !== made) await removePack(dir, p.name);
      this.rolledUp = 0;
      return true;
    } catch (err) {
      this.log.warn({ error: errorMessage(err) }, 'consolidating checkpoint packs failed; the roll-ups keep them bounded');
      return false;
    }
  }

  private async packDir(): Promise<string> {
    return path.join(await commonDirOf(this.worktree), 'objects', 'pack');
  }
}

/** The packs without a .keep, largest first. */
async function packsBySize(packDir: string): Promise<{ name: string; size: number; mtimeMs: number }[]> {
  const names = await readdir(packDir).catch(() => [] as string[]);
  const present = new Set(names);
  const packs: { name: string; size: number; mtimeMs: number }[] = [];
  for (const name of names) {
    if (!/^pack-[0-9a-f]+\.pack$/.test(name) || present.has(name.replace(/\.pack$/, '.keep'))) continue;
    const st = await stat(path.join(packDir, name)).catch(() => undefined);
    if (st) packs.push({ name, size: st.size, mtimeMs: st.mtimeMs });
  }
  return packs.sort((a, b) => b.size - a.size);
}

/**
 * Removes a pack the way `git repack -d` does: not when a .keep appeared meanwhile, the .pack
 * first (a reader that still finds the .idx re-reads the pack directory and finds the object in
 * the new pack), then the .idx and the rest.
 */
async function removePack(packDir: string, packName: string): Promise<void> {
  const stem = path.join(packDir, packName.replace(/\.pack$/, ''));
  if (await stat(`${stem}.keep`).then(() => true, () => false)) return;
  for (const ext of ['.pack', '.idx', '.rev', '.bitmap', '.promisor', '.mtimes']) await unlink(`${stem}${ext}`).catch(() => {});
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
