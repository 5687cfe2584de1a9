// Names of write_file's temp files, and a sweep for those a crash left behind (the lead runs it on
// resume, before the tree is checkpointed, so a half-written temp never lands in a commit).
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';

const MARKER = '.echodo-tmp-';
const TEMP_NAME = /^\..*\.echodo-tmp-[0-9a-f]+$/s;
// The temp name must stay under the 255-byte component limit whatever the target's name.
const MAX_STEM_CHARS = 100;

export function tempNameFor(baseName: string, randomHex: string): string {
  const stem = Array.from(baseName).slice(0, MAX_STEM_CHARS).join('');
  return `.${stem}${MARKER}${randomHex}`;
}

export function isTempFileName(name: string): boolean {
  return TEMP_NAME.test(name);
}

/** Removes every write_file temp file under root (skipping .git and node_modules); returns their root-relative paths. */
export async function removeStaleTempFiles(root: string): Promise<string[]> {
  const removed: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    let entries;
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    for (const entry of entries) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== '.git' && entry.name !== 'node_modules') await walk(full);
      } else if (entry.isFile() && isTempFileName(entry.name)) {
        await rm(full, { force: true });
        removed.push(path.relative(root, full).split(path.sep).join('/'));
      }
    }
  };
  await walk(root);
  return removed.sort();
}
