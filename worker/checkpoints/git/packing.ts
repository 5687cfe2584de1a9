// Checkpoint objects never accumulate as loose files: each checkpoint's commit is one small pack
// (content.ts, via fast-import), and so is each note batch. Two steps keep the packs few and the
// bytes close to what changed:
//  - during the run, every `every` checkpoints, behind the run, the small packs are rolled up
//    geometrically: the smallest are merged while they add up to half of the next one, so a run of
//    n checkpoints leaves O(log n) packs and each object is rewritten O(log n) times (loose objects,
//    anyone's, are packed on the way);
//  - when the run settles (finishes or stops), every pack written since this attempt started is
//    merged (once per run: O(the run's objects)). Older packs, the repository's and earlier runs',
//    are never rewritten, nor the largest pack when someone else wrote it (a `git gc` mid-run).
// A merge writes two packs: the trees, their deltas searched afresh with each tree's path
// (tree-names.ts: without paths git's search leaves ~3 of the 22 trees of a 10-file checkpoint
// whole, 2,237 B per checkpoint against 1,433 with them), and everything else with the deltas it
// already has (fast-import's blob deltas are better than a fresh search finds: 478 B per
// checkpoint against 1,744). A pack can only delta against objects in itself, which is why the
// settle merges the whole attempt: one copy of each tree's base, not one per pack.
// Both packs are written from exactly the objects of the packs they replace before those are
// deleted (a pack is deleted only by whoever copied all of it), and packs with a .keep (a
// fast-import in flight) are skipped: safe next to a concurrent `git gc` or `git repack -ad` (a
// pack gc replaced mid-merge is left out, its objects being in gc's pack; any other failure of a
// step is retried at the next one) and next to another run's packer.
import { readdir, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { errorMessage } from '../../../core/errors.ts';
import { packObjectIds, type ObjectType } from '../../git/objects.ts';
import { runGit } from '../../git/run-git.ts';
import type { Logger } from '../../log.ts';
import { commonDirOf } from '../notes.ts';
import { nameTrees } from './tree-names.ts';

/** git's own for `gc --aggressive`: deep enough that each folder's versions chain (docs/checkpoints.md, packing). */
const TREE_DELTA_DEPTH = 250;

interface PackFile {
  name: string;
  size: number;
  mtimeMs: number;
}

export class ObjectPacker {
  private sinceLastPack = 0;
  /** Roll-ups since the last consolidation: settling consolidates only when there were some. */
  private rolledUp = 0;
  private running: Promise<void> = Promise.resolve();
  /** The packs this packer wrote: the largest pack is merged only when it is one of them. */
  private readonly written = new Set<string>();

  constructor(
    private readonly worktree: string,
    private readonly every: number,
    private readonly log: Logger,
    /** Packs last modified before this (ms since the epoch) are not this run's: never merged. */
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
   * packs up at all, consolidates them (a short run leaves its few small packs as they are).
   */
  async settle(): Promise<void> {
    await this.running;
    if (this.rolledUp === 0) return;
    this.running = this.consolidate().then(() => {});
    await this.running;
  }

  /** A geometric roll-up of this run's packs, and of every loose object. */
  async packNow(): Promise<void> {
    const dir = await this.packDir();
    await removeOrphanKeeps(dir);
    const smallest = geometricPrefix(await this.candidates(dir));
    try {
      if (smallest.length >= 2) {
        if (await this.merge(dir, smallest)) this.rolledUp++;
      } else if (await hasLooseObjects(path.dirname(dir))) {
        await runGit(this.worktree, ['repack', '-d', '-q', '--no-write-bitmap-index']); // the loose objects alone
      }
    } catch (err) {
      // A concurrent repack (someone's gc) may hold a pack we wanted: the next roll-up gets it.
      this.log.warn({ error: errorMessage(err) }, 'rolling up checkpoint packs failed; retried at the next one');
    }
  }

  /** Every pack of this run's (see `candidates`) merged; false when there was nothing to do. */
  async consolidate(): Promise<boolean> {
    const dir = await this.packDir();
    await removeOrphanKeeps(dir);
    const packs = await this.candidates(dir);
    if (packs.length < 2) return false;
    try {
      const merged = await this.merge(dir, packs);
      this.rolledUp = 0;
      return merged;
    } catch (err) {
      this.log.warn(
        { error: errorMessage(err) },
        'consolidating checkpoint packs failed; the roll-ups keep them bounded',
      );
      return false;
    }
  }

  /** Packs written since `since`, without a .keep, smallest first; the largest only if this packer wrote it. */
  private async candidates(dir: string): Promise<PackFile[]> {
    const packs = (await packsBySize(dir)).filter((p) => p.mtimeMs >= this.since);
    if (packs[0] && !this.written.has(packs[0].name)) packs.shift();
    return packs.reverse();
  }

  /**
   * `packs` into a pack of their trees (fresh deltas, by path) and a pack of everything else
   * (deltas reused), plus the loose objects; then the packs merged are deleted. False when the
   * result is the packs given (merged already).
   */
  private async merge(dir: string, packs: PackFile[]): Promise<boolean> {
    const ids = [...new Set(packs.flatMap((p) => packObjectIds(path.join(dir, p.name.replace(/\.pack$/, '.idx')))))];
    const types = await runGit(this.worktree, ['cat-file', '--batch-check=%(objecttype)'], { input: lines(ids) });
    const objects = new Map<string, ObjectType>();
    types.stdout.split('\n').forEach((type, i) => ids[i] && objects.set(ids[i]!, type as ObjectType));
    const trees = await nameTrees(this.worktree, objects);
    const made: string[] = [];
    // One thread: the worker's own work keeps the other core, and the same input gives the same pack.
    const packObjects = async (args: string[], input: string) => {
      const common = ['pack-objects', '-q', '--delta-base-offset', '--threads=1'];
      const out = await runGit(this.worktree, [...common, ...args, path.join(dir, 'pack')], { input });
      made.push(`pack-${out.stdout.trim()}.pack`);
    };
    if (trees.length) {
      const named = trees.map((t) => (t.path ? `${t.oid} ${t.path}` : t.oid));
      await packObjects(['--no-reuse-delta', `--depth=${TREE_DELTA_DEPTH}`], lines(named));
    }
    // The rest comes from the packs still there: one a concurrent `git gc` replaced meanwhile has
    // its objects in gc's pack, and a merged pack that *is* the trees' pack (same objects, same
    // name) is only excluded (git refuses a pack both in and out).
    const present = new Set(await readdir(dir).catch(() => [] as string[]));
    const rest = packs.filter((p) => present.has(p.name) && !made.includes(p.name));
    const input = lines([...rest.map((p) => p.name), ...made.map((name) => `^${name}`)]);
    const loose = await hasLooseObjects(path.dirname(dir));
    if (rest.length || loose) await packObjects(['--stdin-packs', ...(loose ? ['--unpacked'] : [])], input);
    for (const name of made) this.written.add(name);
    // A pack is named by its content's hash: when a pack merged held exactly what a new one holds
    // (an earlier merge's), the new pack *is* that file, and it stays.
    for (const p of packs) if (!made.includes(p.name)) await removePack(dir, p.name);
    if (loose) await runGit(this.worktree, ['prune-packed', '-q']); // the loose objects now in the pack
    return packs.some((p) => !made.includes(p.name));
  }

  private async packDir(): Promise<string> {
    return path.join(await commonDirOf(this.worktree), 'objects', 'pack');
  }
}

/** Lines for a git command's standard input. */
const lines = (items: string[]) => items.join('\n') + '\n';

/**
 * The smallest packs, taken while the next one is under twice what is taken (git's
 * `--geometric=2`): merged, they leave packs that each hold more than the sum of all smaller ones.
 * `packs` smallest first; fewer than two: nothing to merge.
 */
function geometricPrefix(packs: PackFile[]): PackFile[] {
  let sum = packs[0]?.size ?? 0;
  let k = 1;
  while (k < packs.length && packs[k]!.size < 2 * sum) sum += packs[k++]!.size;
  return k >= 2 ? packs.slice(0, k) : [];
}

/** Whether any object is stored loose (a fan-out folder with a file in it). */
async function hasLooseObjects(objectsDir: string): Promise<boolean> {
  const folders = (await readdir(objectsDir).catch(() => [] as string[])).filter((n) => /^[0-9a-f]{2}$/.test(n));
  for (const folder of folders) if ((await readdir(path.join(objectsDir, folder)).catch(() => [])).length) return true;
  return false;
}

/** The packs without a .keep, largest first. */
async function packsBySize(packDir: string): Promise<PackFile[]> {
  const names = await readdir(packDir).catch(() => [] as string[]);
  const present = new Set(names);
  const packs: PackFile[] = [];
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
  if (
    await stat(`${stem}.keep`).then(
      () => true,
      () => false,
    )
  )
    return;
  for (const ext of ['.pack', '.idx', '.rev', '.bitmap', '.promisor', '.mtimes'])
    await unlink(`${stem}${ext}`).catch(() => {});
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
