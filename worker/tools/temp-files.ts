// Names of write_file's temp files, and a sweep for those a crash left behind (the lead runs it on
// resume, before the tree is checkpointed, so a half-written temp never lands in a commit).
import { withTree } from '../tree/registry.ts';

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

/** Removes every write_file temp file under `under` of root (skipping .git and node_modules); returns their root-relative paths. */
export async function removeStaleTempFiles(root: string, under = '.'): Promise<string[]> {
  const rel = under.replace(/\/+$/, '') || '.';
  return withTree(root, (tree) => tree.sweep(rel));
}
