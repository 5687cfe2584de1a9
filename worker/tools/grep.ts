// grep: ripgrep (no shell, no config file, the pattern after -e so '-x' is never an option), confined
// to the root, with results capped; `git grep` when the rg binary is missing.
import { access } from 'node:fs/promises';
import { rgPath as bundledRgPath } from '@vscode/ripgrep';
import { z } from 'zod';
import { ToolRefusedError } from '../../core/errors.ts';
import type { ToolContext, ToolDefinition } from './context.ts';
import { displayPath, resolveInside } from './paths.ts';
import { commandEnvironment } from './run-command.ts';
import { SANDBOX_HOME } from '../sandbox/bwrap.ts';
import { rgInside, withTree } from '../tree/registry.ts';

export const GREP_MAX_MATCHES = 200;
export const GREP_MAX_TEXT_BYTES = 64 * 1024;
const MAX_COLUMNS = 300;
const MAX_PER_FILE = 50;
const MAX_PATTERN_CHARS = 1000;

export const grepInput = z.object({
  pattern: z.string().describe('A regular expression (Rust regex syntax, like ripgrep), e.g. "function \\\\w+Config".'),
  path: z
    .string()
    .optional()
    .describe('File or folder to search, relative to the worktree root; the whole worktree when omitted.'),
});
export type GrepInput = z.infer<typeof grepInput>;

export interface GrepMatch {
  path: string;
  line: number;
  text: string;
}

export interface GrepResult {
  matches: GrepMatch[];
  truncated: boolean;
  note?: string;
}

export interface GrepOptions {
  /** The ripgrep binary; tests point it at a missing file to exercise the git grep fallback. */
  rgPath?: string;
}

export async function grep(ctx: ToolContext, input: GrepInput, options: GrepOptions = {}): Promise<GrepResult> {
  const pattern = input.pattern;
  if (typeof pattern !== 'string' || pattern.length === 0) throw new ToolRefusedError('the pattern is empty');
  if (pattern.length > MAX_PATTERN_CHARS)
    throw new ToolRefusedError(`the pattern is longer than ${MAX_PATTERN_CHARS} characters`);
  if (pattern.includes('\0')) throw new ToolRefusedError('the pattern contains a NUL byte');
  const { real: rel } = await resolveInside(ctx, input.path ?? '.', { forWrite: false });
  const at = rel === '.' ? undefined : (await withTree(ctx.root, (tree) => tree.files([rel], false)))[0]!.kind;
  if (at === 'missing' || at === 'outside')
    throw new ToolRefusedError(`path ${displayPath(input.path ?? '.')} does not exist`);

  const rg = options.rgPath ?? bundledRgPath;
  // The doc-writer (readScope 'tracked') searches what git tracks, with git grep: ripgrep would
  // also read untracked files that the repository does not ignore.
  const tracked = ctx.readScope === 'tracked';
  const useRg =
    !tracked &&
    (await access(rg).then(
      () => true,
      () => false,
    ));
  {
    // ripgrep and git grep run in the tree process: a folder swapped for a symlink while they walk
    // leads nowhere outside the tree (nothing else of the host is there to read).
    const env = commandEnvironment(SANDBOX_HOME);
    if (useRg) {
      const args = [
        '--no-config',
        '--null',
        '--line-number',
        '--with-filename',
        '--no-heading',
        '--color',
        'never',
        '--max-columns',
        String(MAX_COLUMNS),
        '--max-columns-preview',
        '--max-count',
        String(MAX_PER_FILE),
        '--max-filesize',
        '10M',
        '--hidden',
        '--glob',
        '!.git',
        '--sort',
        'path',
        '-e',
        pattern,
        '--',
        rel,
      ];
      return await search(ctx, rgInside(rg), args, env, parseRgLine, 'rg');
    }
    const args = [
      'grep',
      '--no-color',
      '-n',
      '-z',
      '-I',
      ...(tracked ? [] : ['--untracked']),
      '-E',
      '-e',
      pattern,
      '--',
      rel,
    ];
    return await search(ctx, 'git', args, env, parseGitGrepLine, 'git grep');
  }
}

/** rg --null: `path\0line:text`. */
function parseRgLine(line: string): GrepMatch | null {
  const nul = line.indexOf('\0');
  if (nul < 0) return null;
  const m = /^(\d+):(.*)$/s.exec(line.slice(nul + 1));
  if (!m) return null;
  return { path: cleanPath(line.slice(0, nul)), line: Number(m[1]), text: m[2]! };
}

/** git grep -z -n: `path\0line\0text`. */
function parseGitGrepLine(line: string): GrepMatch | null {
  const [file, lineNo, ...text] = line.split('\0');
  if (file === undefined || !lineNo || !/^\d+$/.test(lineNo)) return null;
  let shown = text.join('\0');
  if (shown.length > MAX_COLUMNS) shown = `${shown.slice(0, MAX_COLUMNS)} [... omitted end of long line]`;
  return { path: cleanPath(file), line: Number(lineNo), text: shown };
}

function cleanPath(p: string): string {
  return p.startsWith('./') ? p.slice(2) : p;
}

async function search(
  ctx: ToolContext,
  program: string,
  args: string[],
  env: Record<string, string>,
  parse: (line: string) => GrepMatch | null,
  label: string,
): Promise<GrepResult> {
  // Enough bytes for every match we keep, however long the lines ripgrep cut: the rest is not read.
  const maxBytes = GREP_MAX_TEXT_BYTES * 4 + GREP_MAX_MATCHES * (MAX_COLUMNS * 4 + 4200);
  const r = await withTree(ctx.root, (tree) =>
    tree.run([program, ...args], { env, timeoutMs: ctx.commandTimeoutMs, maxBytes }),
  );
  const matches: GrepMatch[] = [];
  let textBytes = 0;
  let truncated = r.truncated;
  const lines = r.stdout.toString('utf8').split('\n');
  if (r.truncated) lines.pop(); // cut mid-line
  for (const line of lines) {
    const match = parse(line);
    if (!match) continue;
    textBytes += Buffer.byteLength(match.text) + Buffer.byteLength(match.path);
    if (matches.length >= GREP_MAX_MATCHES || textBytes > GREP_MAX_TEXT_BYTES) {
      truncated = true;
      break;
    }
    matches.push(match);
  }
  const code = r.exitCode;
  const notes: string[] = [];
  if (truncated) notes.push(`showing the first ${matches.length} matches; narrow the pattern or the path to see more`);
  if (r.timedOut) notes.push(`search timed out after ${ctx.commandTimeoutMs} ms; results are partial`);
  if (!truncated && !r.timedOut && code !== 0 && code !== 1) {
    const problem = r.stderr.trim().split('\n').slice(0, 6).join('\n');
    // rg: 'regex parse error'; git grep: "fatal: command line, '(': Unmatched ( or \\("
    if (/regex parse error|fatal: command line/.test(problem) && matches.length === 0) {
      throw new ToolRefusedError(`invalid pattern ${JSON.stringify(args[args.indexOf('-e') + 1])}: ${problem}`);
    }
    if (matches.length === 0) throw new Error(`${label} failed (exit ${code}): ${problem}`);
    notes.push(`some files could not be searched: ${problem}`);
  }
  const result: GrepResult = { matches, truncated: truncated || r.timedOut };
  if (notes.length > 0) result.note = notes.join('; ');
  return result;
}

export const grepTool: ToolDefinition<typeof grepInput, GrepResult> = {
  name: 'grep',
  description:
    'Search the worktree (or one file or folder of it) for a regular expression. Returns matching lines as ' +
    `{path, line, text}, at most ${GREP_MAX_MATCHES}; lines are cut at ${MAX_COLUMNS} characters. Ignored files (.gitignore) are skipped.`,
  inputSchema: grepInput,
  execute: (ctx, input) => grep(ctx, input),
};
