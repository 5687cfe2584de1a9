// Generated repositories: N files in nested folders (50 top-level modules, 10 parts each), with
// a history of HISTORY_COMMITS commits after the first (each rewriting HISTORY_TOUCH files), as a
// real project has: a clone then copies and indexes history, not just one snapshot. Built by
// one `git fast-import` stream (no file written to disk, no `git add` of N files: the 250k-file
// repo takes seconds, not minutes), packed, and cached under bench/tmp/repos between runs. The
// cached repo has no checkout. A bench run never writes into the cache: it works in a local
// clone (hardlinked pack, so instant and normal).
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { PROJECT_ROOT } from '../core/config.ts';
import { runGit, safeGitEnv } from '../worker/git/run-git.ts';

export const BENCH_TMP = path.join(PROJECT_ROOT, 'bench', 'tmp');
const CACHE = path.join(BENCH_TMP, 'repos');
const MODULES = 50;
const PARTS = 10;
/** Bump when the layout or content changes, so stale caches are rebuilt. */
const LAYOUT_VERSION = 2;
/** Commits of history after the first (a real 28k-file repository resumed in the issue had 4,000). */
export const HISTORY_COMMITS = 3_000;
/** Files each history commit rewrites. */
const HISTORY_TOUCH = 3;

export function filePath(i: number): string {
  const module = i % MODULES;
  const part = Math.floor(i / MODULES) % PARTS;
  return `src/m${String(module).padStart(2, '0')}/p${part}/f${String(i).padStart(6, '0')}.ts`;
}

/** ~400 bytes of plausible source, unique per file (so every blob is distinct). */
export function fileContent(i: number, revision = 0): string {
  const lines = [`// generated file ${i}, revision ${revision}`, `export const id${i} = ${i};`];
  for (let k = 0; k < 8; k++)
    lines.push(`export function f${i}_${k}(x: number): number { return x * ${k + 1} + ${i % 97}; }`);
  return lines.join('\n') + '\n';
}

/** `count` paths spread evenly over the repo (different modules and parts). */
export function spreadPaths(files: number, count: number): string[] {
  const step = Math.max(1, Math.floor(files / count));
  return Array.from({ length: count }, (_, k) => filePath((k * step + 7) % files));
}

/**
 * fast-import grows and trims its heap thousands of times over a long stream, and each brk costs
 * ~150 µs on this VM: 22 s instead of 1.3 s for 3,000 small commits. A larger pad and trim
 * threshold keep the heap in place.
 */
const MALLOC_TUNABLES = { GLIBC_TUNABLES: 'glibc.malloc.top_pad=268435456:glibc.malloc.trim_threshold=1073741824' };

/** Streams the whole history into `git fast-import` in `dir`: one commit of every file, then the history. */
async function importHistory(dir: string, files: number, history: number): Promise<void> {
  const child = spawn('git', ['fast-import', '--quiet', '--done'], {
    cwd: dir,
    env: { ...(await safeGitEnv(dir)), ...MALLOC_TUNABLES },
    stdio: ['pipe', 'ignore', 'pipe'],
  });
  const errors: Buffer[] = [];
  child.stderr.on('data', (d: Buffer) => errors.push(d));
  const exited = new Promise<number>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve(code ?? -1));
  });
  const write = (text: string) =>
    child.stdin.write(text) ? Promise.resolve() : new Promise<void>((r) => child.stdin.once('drain', () => r()));
  const t0 = 1_600_000_000;
  const commit = (n: number, message: string) =>
    `commit refs/heads/main\ncommitter bench <bench@localhost> ${t0 + n * 600} +0000\ndata ${Buffer.byteLength(message)}\n${message}\n`;
  const file = (p: string, content: string) => `M 100644 inline ${p}\ndata ${Buffer.byteLength(content)}\n${content}\n`;
  let chunk = commit(0, `generated ${files} files`) + file('README.md', `# generated repo, ${files} files\n`);
  for (let i = 0; i < files; i++) {
    chunk += file(filePath(i), fileContent(i));
    if (chunk.length > 1 << 20) {
      await write(chunk);
      chunk = '';
    }
  }
  // Each later commit rewrites a few files spread over the repo, as day-to-day work does.
  for (let n = 1; n <= history; n++) {
    chunk += commit(n, `change ${n}`);
    for (let k = 0; k < HISTORY_TOUCH; k++) {
      const i = (n * 7919 + k * 104_729) % files;
      chunk += file(filePath(i), fileContent(i, 1_000_000 + n));
    }
    if (chunk.length > 1 << 20) {
      await write(chunk);
      chunk = '';
    }
  }
  await write(chunk + 'done\n');
  child.stdin.end();
  const code = await exited;
  if (code !== 0)
    throw new Error(`git fast-import failed (exit ${code}): ${Buffer.concat(errors).toString().slice(0, 500)}`);
}

/**
 * The cached, packed repository with `files` files on branch main (built on first use), with
 * `history` commits after the first (0: one snapshot commit, the layout of the first benches).
 */
export async function ensurePristineRepo(
  files: number,
  log: (line: string) => void,
  options: { history?: number } = {},
): Promise<string> {
  const history = options.history ?? HISTORY_COMMITS;
  const dir = path.join(CACHE, `files-${files}-h${history}-v${LAYOUT_VERSION}`);
  const ready = `${dir}.ready`;
  if (existsSync(ready) && existsSync(path.join(dir, 'HEAD'))) return dir;
  const start = performance.now();
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  // Bare: nothing reads the cache's files, and a checkout of 250k files would cost minutes.
  await runGit(dir, ['init', '-q', '--bare', '-b', 'main']);
  await importHistory(dir, files, history);
  // A real repository is packed (one pack, deltas found): clone and object lookups then behave
  // as they would in production.
  await runGit(dir, ['repack', '-a', '-d', '-q'], { env: MALLOC_TUNABLES });
  await writeFile(ready, new Date().toISOString() + '\n');
  log(
    `  generated ${files}-file repo with ${history} commits of history in ${((performance.now() - start) / 1000).toFixed(1)} s (${dir})`,
  );
  return dir;
}

/** A working clone of the cached repo for this bench run (local clone: hardlinked pack). */
export async function workingRepo(pristine: string, dest: string): Promise<string> {
  await rm(dest, { recursive: true, force: true });
  await mkdir(path.dirname(dest), { recursive: true });
  await runGit(path.dirname(dest), ['clone', '-q', '--no-checkout', pristine, dest]);
  return dest;
}
