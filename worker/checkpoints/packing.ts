// Checkpoint objects go into packs, not loose files. A checkpoint writes its objects loose (the
// fast path: update-index, write-tree, the commit object, the note via fast-import), and every
// `every` checkpoints, behind the run, the objects new since the last pack (reachable from the
// branch and the notes ref, not from where the last pack stopped, not already packed) become one
// pack (`git pack-objects --revs --incremental`) and their loose copies go (`git prune-packed`).
// The run's packs are rolled up geometrically (`git pack-objects --stdin-packs`: exactly the
// objects of the packs named, so nothing can be lost), so a run of n checkpoints keeps
// O(log n) packs and at most `every` checkpoints' worth of loose objects.
// All of it is what `git repack -d` does, with the same safety against a concurrent `git gc`:
// objects are only ever deleted when a pack holding them exists.
import { open, unlink } from 'node:fs/promises';
import path from 'node:path';
import { errorMessage } from '../errors.ts';
import { resolveCommit, runGit } from '../git.ts';
import type { Logger } from '../log.ts';
import { commonDirOf } from './notes.ts';

interface OwnPack {
  name: string; // pack-<hash>
  objects: number;
}

export class ObjectPacker {
  private sinceLastPack = 0;
  private packedTips: { branch: string | null; notes: string | null } = { branch: null, notes: null };
  private packs: OwnPack[] = [];
  private running: Promise<void> = Promise.resolve();

  constructor(
    private readonly worktree: string,
    private readonly branch: string,
    private readonly notesRef: string,
    private readonly every: number,
    private readonly log: Logger,
  ) {}

  /** Called after each checkpoint's note; packs in the background every `every` checkpoints. */
  afterCheckpoint(): void {
    if (++this.sinceLastPack < this.every) return;
    this.sinceLastPack = 0;
    this.running = this.running.then(() => this.packNow()).catch((err) => {
      this.log.warn({ error: errorMessage(err) }, 'packing checkpoint objects failed; they stay loose until the next pack');
    });
  }

  /** Waits for a pack in progress, then packs whatever is left (the run is finishing or stopping). */
  async settle(): Promise<void> {
    await this.running;
    if (this.sinceLastPack > 0) {
      this.sinceLastPack = 0;
      await this.packNow().catch((err) => this.log.warn({ error: errorMessage(err) }, 'packing checkpoint objects failed'));
    }
  }

  /** One incremental pack of the objects since the last one, then the geometric roll-up. */
  async packNow(): Promise<void> {
    const packDir = path.join(await commonDirOf(this.worktree), 'objects', 'pack');
    const [branchTip, notesTip] = await Promise.all([
      resolveCommit(this.worktree, `refs/heads/${this.branch}`),
      resolveCommit(this.worktree, this.notesRef),
    ]);
    const revs = [branchTip, this.packedTips.branch && `^${this.packedTips.branch}`, notesTip, this.packedTips.notes && `^${this.packedTips.notes}`];
    const input = revs.filter(Boolean).join('\n');
    if (!branchTip && !notesTip) return;
    const out = await runGit(this.worktree, ['pack-objects', '--revs', '--incremental', '--delta-base-offset', '-q', path.join(packDir, 'pack')], { input: `${input}\n` });
    const hash = out.stdout.trim();
    this.packedTips = { branch: branchTip ?? null, notes: notesTip ?? null };
    if (hash) this.packs.push({ name: `pack-${hash}`, objects: await countObjects(packDir, `pack-${hash}`) });
    await runGit(this.worktree, ['prune-packed', '-q']);
    await this.rollUp(packDir);
  }

  /** While the newest pack is at least half the size of the one before, merge them (2× geometric). */
  private async rollUp(packDir: string): Promise<void> {
    let take = 1;
    let total = this.packs.at(-1)?.objects ?? 0;
    while (take < this.packs.length && this.packs[this.packs.length - 1 - take]!.objects <= 2 * total) {
      total += this.packs[this.packs.length - 1 - take]!.objects;
      take++;
    }
    if (take < 2) return;
    const merging = this.packs.slice(-take);
    const out = await runGit(this.worktree, ['pack-objects', '--stdin-packs', '--delta-base-offset', '-q', path.join(packDir, 'pack')], {
      input: `${merging.map((p) => `${p.name}.pack`).join('\n')}\n`,
      allowExitCodes: [128],
    });
    // A pack removed meanwhile by someone's `git repack -ad` (its objects are in their pack now).
    if (out.exitCode !== 0) {
      this.packs = this.packs.slice(0, -take);
      return;
    }
    const hash = out.stdout.trim();
    this.packs = [...this.packs.slice(0, -take), { name: `pack-${hash}`, objects: total }];
    for (const p of merging) {
      if (p.name === `pack-${hash}`) continue;
      // The index goes first: git then no longer looks in the pack (what `git repack -d` does).
      for (const ext of ['.idx', '.pack', '.rev', '.bitmap']) await unlink(path.join(packDir, `${p.name}${ext}`)).catch(() => {});
    }
  }
}

/** Objects in a pack: the last entry of its v2 index's fan-out table. */
async function countObjects(packDir: string, name: string): Promise<number> {
  const file = await open(path.join(packDir, `${name}.idx`), 'r');
  try {
    const buf = Buffer.alloc(4);
    await file.read(buf, 0, 4, 8 + 255 * 4);
    return buf.readUInt32BE(0);
  } finally {
    await file.close();
  }
}
