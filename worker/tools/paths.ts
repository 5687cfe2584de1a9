// Confines a model-supplied path to the tool root. Every file tool goes through resolveInside;
// it refuses, with a message naming the problem, anything that could reach outside the root or
// into git's internals, before any file is opened. A symlink swapped in afterwards (a command of
// the same step) is not followed either: the tree process opens every folder on the way itself.
import { realpath } from 'node:fs/promises';
import path from 'node:path';
import { ToolRefusedError } from '../../core/errors.ts';
import { runGit } from '../git/run-git.ts';
import { withTree } from '../tree/registry.ts';
import type { ToolContext } from './context.ts';

export const MAX_PATH_BYTES = 4096;
export const MAX_COMPONENT_BYTES = 255;

export interface ResolvedPath {
  /** Absolute path inside the root (lexically normalized; no `..`). */
  abs: string;
  /** Root-relative POSIX path; '.' for the root itself. */
  rel: string;
  /** Where it lands once symlinks inside the tree are followed: the path the tree process opens. */
  real: string;
}

export interface ResolveOptions {
  forWrite: boolean;
}

// Characters that give a path structure. A look-alike of one is refused: the file system would not
// treat it as a separator or dot, but a later normalization, or a human reading a diff, would.
// Two sources: anything whose NFKC form adds one (U+FF0F FULLWIDTH SOLIDUS, U+FF0E FULLWIDTH FULL
// STOP, U+2024 ONE DOT LEADER, U+2025, U+FE68 …), and symbols from Unicode's confusables list that
// NFKC leaves alone (U+2215 DIVISION SLASH, U+2044 FRACTION SLASH …). Letters of real scripts that
// merely resemble a stroke (katakana ノ, CJK 丿) are not refused: they occur in genuine file names.
const STRUCTURAL = ['/', '.', '\\'] as const;
const CONFUSABLES = new Set(
  [
    0x2215,
    0x2044,
    0x29f8,
    0x2571,
    0x1735, // look like '/'
    0x2216,
    0x29f5,
    0x29f9,
    0x2572, // look like a backslash
    0x0701,
    0x0702,
    0xa4f8,
    0xa60e,
    0x10a50,
    0x2e33,
    0x1d16d, // look like '.'
  ].map((cp) => String.fromCodePoint(cp)),
);

export async function resolveInside(ctx: ToolContext, relPath: string, options: ResolveOptions): Promise<ResolvedPath> {
  const rel = normalizeRelative(relPath);
  if (options.forWrite && rel === '.') throw refuse(relPath, 'is the root folder, not a file');

  const root = await realpath(ctx.root);
  const abs = rel === '.' ? root : path.join(root, rel);
  // Where it lands is asked of the tree process: this process never follows a link in the tree.
  const landed = await withTree(root, (tree) => tree.realRel(rel));
  if (landed.outside || landed.real === undefined)
    throw refuse(relPath, 'leads outside the worktree through a symlink');
  const realRel = landed.real;
  if (touchesGit(realRel)) throw refuse(relPath, 'leads into .git/ through a symlink (git internals are off limits)');

  if (options.forWrite && ctx.writePrefixes !== null) {
    // Both the path as given and where it really lands must be under an allowed prefix, so a
    // symlinked docs/ cannot redirect a doc-writer's write elsewhere in the repo.
    const allowed = (p: string) => ctx.writePrefixes!.some((prefix) => underPrefix(p, prefix));
    if (!allowed(rel) || !allowed(realRel)) {
      throw refuse(relPath, `is outside the writable folders (${ctx.writePrefixes.join(', ')})`);
    }
  }
  if (!options.forWrite && ctx.readScope === 'tracked') await assertTrackedOrWritable(ctx, relPath, realRel);
  return { abs, rel, real: realRel };
}

/** The doc-writer's reads: a path git tracks (a folder holding tracked files), or one under its write prefixes. */
async function assertTrackedOrWritable(ctx: ToolContext, relPath: string, realRel: string): Promise<void> {
  if (realRel === '.') return;
  if (ctx.writePrefixes?.some((prefix) => underPrefix(realRel, prefix))) return;
  const r = await runGit(ctx.root, ['ls-files', '-z', '--', `:(literal)${realRel}`], { allowExitCodes: [128] });
  if (r.exitCode === 0 && r.stdout.length > 0) return;
  const where = ctx.writePrefixes?.length ? ` or under ${ctx.writePrefixes.join(', ')}` : '';
  throw refuse(relPath, `is not a file git tracks${where} (this harness reads only the repository's tracked files)`);
}

/**
 * The purely lexical checks: returns the normalized root-relative POSIX path or throws.
 * Exported for the property tests and for callers that only need the normalized name.
 */
export function normalizeRelative(relPath: string): string {
  if (typeof relPath !== 'string' || relPath.length === 0) throw refuse(relPath, 'is empty');
  if (relPath.includes('\0')) throw refuse(relPath, 'contains a NUL byte');
  // Other control characters are never a sensible file name and confuse line-based output.
  if (/[\u0001-\u001f\u007f]/.test(relPath)) throw refuse(relPath, 'contains a control character');
  if (Buffer.byteLength(relPath, 'utf8') > MAX_PATH_BYTES)
    throw refuse(relPath, `is longer than ${MAX_PATH_BYTES} bytes`);
  if (relPath.includes('\\')) throw refuse(relPath, 'contains a backslash; use "/" as the separator');
  if (introducesStructure(relPath)) {
    throw refuse(relPath, 'contains a unicode look-alike of "/", "\\" or "." (it normalizes to a different path)');
  }
  if (path.posix.isAbsolute(relPath)) throw refuse(relPath, 'is absolute; give a path relative to the worktree');

  const parts: string[] = [];
  for (const component of relPath.split('/')) {
    if (Buffer.byteLength(component, 'utf8') > MAX_COMPONENT_BYTES) {
      throw refuse(relPath, `has a path component longer than ${MAX_COMPONENT_BYTES} bytes`);
    }
    if (component === '' || component === '.') continue;
    if (component === '..') {
      if (parts.length === 0) throw refuse(relPath, 'leaves the worktree');
      parts.pop();
      continue;
    }
    parts.push(component);
  }
  const rel = parts.length === 0 ? '.' : parts.join('/');
  if (touchesGit(rel)) throw refuse(relPath, 'is inside .git/ (git internals are off limits)');
  return rel;
}

/** Any component named .git (any case: some file systems fold case), including a worktree's .git file. */
function touchesGit(rel: string): boolean {
  return rel.split('/').some((component) => component.toLowerCase() === '.git');
}

function introducesStructure(raw: string): boolean {
  for (const ch of raw) if (CONFUSABLES.has(ch)) return true;
  const normalized = raw.normalize('NFKC');
  if (normalized === raw) return false;
  return STRUCTURAL.some((ch) => count(normalized, ch) > count(raw, ch));
}

function count(text: string, ch: string): number {
  let n = 0;
  for (const c of text) if (c === ch) n++;
  return n;
}

function underPrefix(rel: string, prefix: string): boolean {
  const clean = prefix.replace(/\/+$/, '');
  return rel.startsWith(`${clean}/`); // inside the folder; the folder itself is not a file to write
}

function refuse(relPath: unknown, problem: string): ToolRefusedError {
  return new ToolRefusedError(`path ${displayPath(relPath)} ${problem}`, 'path');
}

/** Shown to the model: JSON-quoted (NUL and controls escaped) and shortened. */
export function displayPath(relPath: unknown): string {
  const text = typeof relPath === 'string' ? relPath : String(relPath);
  if (text.length <= 120) return JSON.stringify(text);
  return `${JSON.stringify(`${text.slice(0, 60)}…${text.slice(-40)}`)} (${text.length} characters)`;
}
