// run_command's command line: split into argv without a shell, then checked against the harness
// allowlist. The rules, kept deliberately small:
//
// splitCommand
//   - words are separated by spaces/tabs; '…' and "…" group (no escapes inside either);
//   - refused anywhere, even inside quotes: ; & | ` $ ( ) < > \ newline, CR and other control
//     characters — nothing that means something to a shell is ever accepted, so nothing can
//     smuggle a second command past a later change that did use a shell;
//   - refused: an empty command, more than 4096 characters, an unterminated quote, and an
//     environment assignment as the first word (FOO=bar cmd).
//
// checkAllowed (in this order, so a refusal names the real reason: `curl https://…` is refused
// as a program not on the allowlist, not for the '//' its URL happens to hold)
//   - git: no global option before the subcommand (-c, -C, --git-dir, --work-tree, --exec-path…);
//   - argv must start with an allowlisted entry, word for word ('git diff' allows
//     'git diff --stat' but not 'git -c x=y diff'); the longest matching entry wins;
//   - every argument: no absolute path, no '~' home path, no '..' path segment (also after '=' or
//     ':'), and none of the options that write, read or execute elsewhere (--output, -o for git,
//     --exec, --upload-pack, --receive-pack, --ext-diff, --textconv, --no-index, --config,
//     --prefix, --dir, -C, --workspace-root, --require, --import…, or an abbreviation of one);
//   - after the allowlisted prefix, only:
//       git        plain operands (relative paths, revisions like HEAD~1 or main..HEAD), '--'
//                  (after which everything is a pathspec), and flags from GIT_FLAGS / GIT_VALUE_FLAGS;
//       npm, pnpm  plain operands, '--', and flags from SCRIPT_FLAGS / SCRIPT_VALUE_FLAGS
//                  (also after '--', since those reach the script's own CLI);
//       others     nothing: the entry must match the whole command (an allowlisted 'env' must not
//                  become 'env sh').
import { ToolRefusedError } from '../../core/errors.ts';

export const MAX_COMMAND_CHARS = 4096;

/** The code harness's default allowlist (WORKER_ALLOWED_COMMANDS overrides it). */
export const DEFAULT_ALLOWED_COMMANDS: readonly string[] = [
  'pnpm lint',
  'pnpm type-check',
  'pnpm test',
  'git status',
  'git diff',
  'npm run lint',
  'npm run type-check',
  'npm test',
  'npm run test',
];

// Shell metacharacters (and the backslash, which would only ever be an escape attempt here).
const METACHARACTERS = new Set([';', '&', '|', '`', '$', '(', ')', '<', '>', '\n', '\r', '\\']);
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f]/;
const ENV_ASSIGNMENT = /^[A-Za-z_][A-Za-z0-9_]*=/;

export function hasMetacharacter(text: string): boolean {
  for (const ch of text) if (METACHARACTERS.has(ch)) return true;
  return false;
}

/** Splits a command into argv without a shell; throws ToolRefusedError for anything a shell would interpret. */
export function splitCommand(command: string): string[] {
  if (typeof command !== 'string') throw refuse('the command must be a string');
  if (command.length > MAX_COMMAND_CHARS) throw refuse(`the command is longer than ${MAX_COMMAND_CHARS} characters`);
  for (const ch of command) {
    if (METACHARACTERS.has(ch)) {
      throw refuse(
        `the command contains the shell metacharacter ${JSON.stringify(ch)}; commands run without a shell ` +
          '(one program and its arguments: no ; & | ` $ ( ) < > \\ or line breaks), so run one command per call',
      );
    }
  }
  if (CONTROL.test(command)) throw refuse('the command contains a control character');

  const words: string[] = [];
  let word: string | null = null;
  let quote: string | null = null;
  for (const ch of command) {
    if (quote !== null) {
      if (ch === quote) quote = null;
      else word += ch;
    } else if (ch === ' ' || ch === '\t') {
      if (word !== null) words.push(word);
      word = null;
    } else if (ch === '"' || ch === "'") {
      quote = ch;
      word ??= '';
    } else {
      word = (word ?? '') + ch;
    }
  }
  if (quote !== null) throw refuse(`the command has an unterminated ${quote} quote`);
  if (word !== null) words.push(word);
  if (words.length === 0) throw refuse('the command is empty');
  if (ENV_ASSIGNMENT.test(words[0]!)) {
    throw refuse(
      `the command starts with an environment assignment (${JSON.stringify(words[0]!.split('=')[0])}=…); that is not allowed`,
    );
  }
  return words;
}

/** WORKER_ALLOWED_COMMANDS: comma-separated entries; unset or empty means the default list. */
export function parseAllowedCommands(value: string | undefined): string[] {
  const entries = (value ?? '')
    .split(',')
    .map((e) => e.trim().split(/\s+/).join(' '))
    .filter(Boolean);
  return entries.length > 0 ? entries : [...DEFAULT_ALLOWED_COMMANDS];
}

// Options that make a program write, read or run something outside the worktree, or change
// which tree/config it works on. Matched on the name before '=' and on unambiguous abbreviations
// (git accepts abbreviated long options).
const DENIED_OPTIONS = [
  '--output',
  '--exec',
  '--upload-pack',
  '--receive-pack',
  '--ext-diff',
  '--textconv',
  '--no-index',
  '--config',
  '--git-dir',
  '--work-tree',
  '--exec-path',
  '--namespace',
  '--super-prefix',
  '--prefix',
  '--dir',
  '--workspace-root',
  '--global',
  '--userconfig',
  '--globalconfig',
  '--cache',
  '--cwd',
  '--require',
  '--import',
  '--loader',
  '--experimental-loader',
  '--eval',
  '--node-options',
];
const DENIED_SHORT = new Set(['-C', '-c']);
const GIT_DENIED_SHORT = new Set(['-o']);

const GIT_FLAGS = new Set([
  '--stat',
  '--numstat',
  '--shortstat',
  '--dirstat',
  '--name-only',
  '--name-status',
  '--summary',
  '--raw',
  '--cached',
  '--staged',
  '--patch',
  '-p',
  '--no-patch',
  '--no-color',
  '--no-ext-diff',
  '--no-textconv',
  '--no-renames',
  '--find-renames',
  '-M',
  '-w',
  '--ignore-all-space',
  '--ignore-space-change',
  '-b',
  '--ignore-blank-lines',
  '--check',
  '--quiet',
  '--exit-code',
  '--minimal',
  '--patience',
  '--histogram',
  '--word-diff',
  '--full-index',
  '--binary',
  '-R',
  '-z',
  '--relative',
  // git status
  '-s',
  '--short',
  '--branch',
  '--long',
  '--porcelain',
  '--untracked-files',
  '-u',
  '--ignored',
  '--ahead-behind',
  '--no-ahead-behind',
  '--show-stash',
  '--renames',
  '-v',
  '--verbose',
]);
const GIT_VALUE_FLAGS: Record<string, RegExp> = {
  '--unified': /^\d{1,4}$/,
  '--stat': /^\d{1,4}(,\d{1,4}){0,2}$/,
  '--color': /^(never|always|auto)$/,
  '--porcelain': /^v?[12]$/,
  '--untracked-files': /^(no|normal|all)$/,
  '--ignored': /^(traditional|no|matching)$/,
  '--diff-filter': /^[ACDMRTUXBacdmrtuxb*]{1,20}$/,
  '--word-diff': /^(plain|porcelain|color|none)$/,
  '--find-renames': /^\d{1,3}%?$/,
  '--abbrev': /^\d{1,2}$/,
  '--ignore-submodules': /^(none|untracked|dirty|all)$/,
  '--relative': /^[^-].*$/,
};
const GIT_ATTACHED = /^-(U\d{1,4}|M\d{1,3}%?|u(no|normal|all))$/;

const SCRIPT_FLAGS = new Set(['--', '--silent', '-s', '--if-present', '--run', '--bail', '--verbose', '--fix']);
const SCRIPT_VALUE_FLAGS: Record<string, RegExp> = {
  '--reporter': /^[A-Za-z0-9._-]{1,64}$/,
  '--test-name-pattern': /^.{1,200}$/s,
  '--testNamePattern': /^.{1,200}$/s,
  '--grep': /^.{1,200}$/s,
  '--watch': /^false$/,
};

/**
 * Checks argv against the allowlist (entries are command prefixes); returns the matching entry.
 * Throws ToolRefusedError naming the first problem found; `harness` (its alias) is named in it.
 */
export function checkAllowed(
  argv: readonly string[],
  allowedCommands: readonly string[] | null,
  harness?: string,
): string {
  const which = harness ? `harness ${harness}` : 'this harness';
  if (allowedCommands === null) throw refuse(`run_command is not available in ${which}`);
  if (argv.length === 0) throw refuse('the command is empty');
  const program = argv[0]!;

  if (program === 'git' && argv.length > 1 && argv[1]!.startsWith('-')) {
    throw refuse(
      `git global option ${JSON.stringify(argv[1])} is not allowed (it can change git's configuration or directory)`,
    );
  }
  const entry = longestMatchingEntry(argv, allowedCommands);
  if (entry === null) {
    const allowed = allowedCommands.join(', ');
    throw refuse(`command ${JSON.stringify(argv.join(' '))} is not on the allowlist of ${which}: ${allowed}`);
  }
  for (const arg of argv.slice(1)) checkArgument(program, arg);

  const rest = argv.slice(entry.length);
  const prefix = entry.join(' ');
  if (program === 'git') checkGitRest(prefix, rest);
  else if (program === 'npm' || program === 'pnpm') checkScriptRest(prefix, rest);
  else if (rest.length > 0)
    throw refuse(`${JSON.stringify(prefix)} takes no extra arguments (only the allowlisted command exactly)`);
  return prefix;
}

function longestMatchingEntry(argv: readonly string[], allowedCommands: readonly string[]): string[] | null {
  let best: string[] | null = null;
  for (const raw of allowedCommands) {
    const words = raw.trim().split(/\s+/).filter(Boolean);
    if (words.length === 0 || words.length > argv.length) continue;
    if (!words.every((w, i) => argv[i] === w)) continue;
    if (best === null || words.length > best.length) best = words;
  }
  return best;
}

/** Checks that apply to every argument of every command. */
function checkArgument(program: string, arg: string): void {
  const name = arg.startsWith('-') ? arg.split('=')[0]! : '';
  if (name.startsWith('--') && name.length > 2) {
    const denied = DENIED_OPTIONS.find((d) => d === name || (name.length >= 5 && d.startsWith(name)));
    if (denied)
      throw refuse(
        `argument ${JSON.stringify(arg)} is not allowed (${denied} can reach outside the worktree or run other programs)`,
      );
  }
  if (DENIED_SHORT.has(name) || (DENIED_SHORT.has(arg.slice(0, 2)) && !arg.startsWith('--'))) {
    throw refuse(`argument ${JSON.stringify(arg)} is not allowed (it changes the directory or configuration)`);
  }
  if (program === 'git' && (GIT_DENIED_SHORT.has(name) || arg.startsWith('-o'))) {
    throw refuse(`argument ${JSON.stringify(arg)} is not allowed (it writes output to a file)`);
  }
  const pieces = arg.split(/[=:]/);
  if (pieces.some((p) => p.startsWith('/')))
    throw refuse(`argument ${JSON.stringify(arg)} is an absolute path; use paths relative to the worktree`);
  if (pieces.some((p) => p.startsWith('~')))
    throw refuse(`argument ${JSON.stringify(arg)} refers to a home folder; use paths relative to the worktree`);
  if (arg.split(/[/=:]/).includes('..')) throw refuse(`argument ${JSON.stringify(arg)} leaves the worktree ('..')`);
}

function checkGitRest(prefix: string, rest: readonly string[]): void {
  let pathspecsOnly = false;
  for (const arg of rest) {
    if (pathspecsOnly || !arg.startsWith('-')) continue;
    if (arg === '--') {
      pathspecsOnly = true;
      continue;
    }
    if (GIT_FLAGS.has(arg) || GIT_ATTACHED.test(arg)) continue;
    const eq = arg.indexOf('=');
    const valueRule = eq > 0 ? GIT_VALUE_FLAGS[arg.slice(0, eq)] : undefined;
    if (valueRule?.test(arg.slice(eq + 1))) continue;
    throw refuse(
      `argument ${JSON.stringify(arg)} is not allowed after ${JSON.stringify(prefix)}; allowed are relative paths, ` +
        'revisions and flags such as --stat, --name-only, --cached, --short, --porcelain, --unified=N',
    );
  }
}

function checkScriptRest(prefix: string, rest: readonly string[]): void {
  for (const arg of rest) {
    if (!arg.startsWith('-') || SCRIPT_FLAGS.has(arg)) continue;
    const eq = arg.indexOf('=');
    const valueRule = eq > 0 ? SCRIPT_VALUE_FLAGS[arg.slice(0, eq)] : undefined;
    if (valueRule?.test(arg.slice(eq + 1))) continue;
    throw refuse(
      `argument ${JSON.stringify(arg)} is not allowed after ${JSON.stringify(prefix)}; allowed are relative paths, '--' and ` +
        `the flags ${[...SCRIPT_FLAGS].filter((f) => f !== '--').join(', ')}, ${Object.keys(SCRIPT_VALUE_FLAGS)
          .map((f) => `${f}=…`)
          .join(', ')}`,
    );
  }
}

function refuse(message: string): ToolRefusedError {
  return new ToolRefusedError(message, 'command');
}
