// Generated repositories: N files in nested folders (50 top-level modules, 10 parts each),
// committed once and packed, cached under bench/tmp/repos between runs. A bench run never
// writes into the cache: it works in a local clone (hardlinked pack, so instant and normal).
import { existsSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { PROJECT_ROOT } from '../core/config.ts';
import { runGit } from '../worker/git.ts';

export const BENCH_TMP = path.join(PROJECT_ROOT, 'bench', 'tmp');
const CACHE = path.join(BENCH_TMP, 'repos');
const MODULES = 50;
const PARTS = 10;
/** Bump when the layout or content changes, so stale caches are rebuilt. */
const LAYOUT_VERSION = 1;

export function filePath(i: number): string {
  const module = i % MODULES;
  const part = Math.floor(i / MODULES) % PARTS;
  return `src/m${String(module).padStart(2, '0')}/p${part}/f${String(i).padStart(6, '0')}.ts`;
}

/** ~400 bytes of plausible source, unique per file (so every blob is distinct). */
export function fileContent(i: number, revision = 0): string {
  const lines = [`// generated file ${i}, revision ${revision}`, `export const id${i} = ${i};`];
  for (let k = 0; k < 8; k++) lines.push(`export function f${i}_${k}(x: number): number { return x * ${k + 1} + ${i % 97}; }`);
  return lines.join('\n') + '\n';
}

/** `count` paths spread evenly over the repo (different modules and parts). */
export function spreadPaths(files: number, count: number): string[] {
  const step = Math.max(1, Math.floor(files / count));
  return Array.from({ length: count }, (_, k) => filePath((k * step + 7) % files));
}

async function inBatches<T>(items: T[], size: number, fn: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}

/** The cached, packed repository with `files` files on branch main (built on first use). */
export async function ensurePristineRepo(files: number, log: (line: string) => void): Promise<string> {
  const dir = path.join(CACHE, `files-${files}-v${LAYOUT_VERSION}`);
  const ready = `${dir}.ready`;
  if (existsSync(ready) && existsSync(path.join(dir, '.git'))) return dir;
  const start = performance.now();
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  await runGit(dir, ['init', '-q', '-b', 'main']);
  const dirs = new Set(Array.from({ length: files }, (_, i) => path.dirname(filePath(i))));
  for (const d of dirs) await mkdir(path.join(dir, d), { recursive: true });
  await inBatches(Array.from({ length: files }, (_, i) => i), 256, (i) => writeFile(path.join(dir, filePath(i)), fileContent(i)));
  await writeFile(path.join(dir, 'README.md'), `# generated repo, ${files} files\n`);
  await runGit(dir, ['add', '-A']);
  await runGit(dir, ['commit', '-q', '-m', `generated ${files} files`]);
  // A real repository is packed: clone and object lookups then behave as they would in production.
  await runGit(dir, ['repack', '-a', '-d', '-q']);
  await runGit(dir, ['prune-packed']);
  await writeFile(ready, new Date().toISOString() + '\n');
  log(`  generated ${files}-file repo in ${((performance.now() - start) / 1000).toFixed(1)} s (${dir})`);
  return dir;
}

/** A working clone of the cached repo for this bench run (local clone: hardlinked pack). */
export async function workingRepo(pristine: string, dest: string): Promise<string> {
  await rm(dest, { recursive: true, force: true });
  await mkdir(path.dirname(dest), { recursive: true });
  await runGit(path.dirname(dest), ['clone', '-q', '--no-checkout', pristine, dest]);
  return dest;
}
