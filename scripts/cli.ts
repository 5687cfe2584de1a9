// Shared bits of the command-line entry points. Each command describes itself once (command()):
// its --help, its usage line and the refusal of an unknown flag or a stray argument all come from
// that one description, before the command has touched anything.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { redactString } from '../core/redact.ts';
import { ENV_HELP } from './cli-env.ts';

export interface FlagSpec {
  type: 'string' | 'boolean';
  /** The value's placeholder in the help (`--at N`); string flags only. */
  value?: string;
  help: string;
  multiple?: boolean;
}

export interface CommandSpec<F extends Record<string, FlagSpec>> {
  /** The npm script's name. */
  name: string;
  /** What it does, in a sentence or three. */
  summary: string;
  /** Each form of the command after `npm run NAME`, e.g. `-- --workspace W --run R`. */
  usage: string[];
  flags: F;
  /** Positional arguments, none unless given; `help` explains them. */
  positionals?: { min: number; max: number; help?: string[] };
  exitCodes: Record<number, string>;
  /** Environment variables it reads (described from cli-env.ts unless given as [name, meaning]). */
  env: readonly (string | readonly [string, string])[];
}

type FlagValue<S extends FlagSpec> = S['type'] extends 'boolean'
  ? S['multiple'] extends true
    ? boolean[]
    : boolean
  : S['multiple'] extends true
    ? string[]
    : string;

export type FlagValues<F extends Record<string, FlagSpec>> = { [K in keyof F]?: FlagValue<F[K]> };

export interface ParsedCommand<F extends Record<string, FlagSpec>> {
  values: FlagValues<F>;
  positionals: string[];
  /** A user's mistake: the problem, the usage, exit 2. */
  fail(problem: string): never;
}

const HELP_FLAG: FlagSpec = { type: 'boolean', help: 'print this help and exit' };

/** True when --help (or -h) comes before any `--` terminator. */
export function wantsHelp(args: readonly string[]): boolean {
  for (const arg of args) {
    if (arg === '--') return false;
    if (arg === '--help' || arg === '-h') return true;
  }
  return false;
}

function flagLabel(name: string, flag: FlagSpec): string {
  const value = flag.type === 'string' ? ` ${flag.value ?? 'VALUE'}` : '';
  return `--${name}${value}${flag.multiple ? ' …' : ''}`;
}

function usageLines<F extends Record<string, FlagSpec>>(spec: CommandSpec<F>): string[] {
  return spec.usage.map((form) => `npm run ${spec.name}${form ? ` ${form}` : ''}`);
}

function table(rows: [string, string][]): string[] {
  const width = Math.max(...rows.map(([left]) => left.length));
  return rows.map(([left, right]) => `  ${left.padEnd(width)}  ${right}`);
}

/** Words wrapped at `width` columns. */
function wrap(text: string, width = 100): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  return line ? [...lines, line] : lines;
}

export function renderHelp<F extends Record<string, FlagSpec>>(spec: CommandSpec<F>): string {
  const flags = { ...spec.flags, help: HELP_FLAG } as Record<string, FlagSpec>;
  const env = spec.env.map((e): [string, string] => (typeof e === 'string' ? [e, ENV_HELP[e] ?? ''] : [e[0], e[1]]));
  const lines = [
    ...wrap(`npm run ${spec.name}: ${spec.summary}`),
    '',
    'usage:',
    ...usageLines(spec).map((l) => `  ${l}`),
    ...(spec.positionals?.help?.length ? ['', 'arguments:', ...spec.positionals.help.map((l) => `  ${l}`)] : []),
    '',
    'flags:',
    ...table(Object.entries(flags).map(([name, flag]) => [flagLabel(name, flag), flag.help])),
    '',
    'exit codes:',
    ...table(Object.entries(spec.exitCodes).map(([code, meaning]) => [code, meaning])),
    '',
    'environment:',
    ...(env.length ? table(env) : ['  (none)']),
  ];
  return `${lines.join('\n')}\n`;
}

/**
 * The description as data, with its text: ECHODO_CLI_HELP=json makes --help print this instead,
 * so the reference docs and the tests read the same declarations the command uses.
 */
function helpJson<F extends Record<string, FlagSpec>>(spec: CommandSpec<F>): string {
  const env = spec.env.map((e) => (typeof e === 'string' ? e : e[0]));
  return `${JSON.stringify({ ...spec, flags: { ...spec.flags, help: HELP_FLAG }, env, text: renderHelp(spec) })}\n`;
}

function printUsageAndExit(lines: string[], name: string, problem?: string): never {
  if (problem) process.stderr.write(`${name}: ${problem}\n`);
  process.stderr.write(`usage: ${lines.join('\n       ')}\n(npm run ${name} -- --help says more)\n`);
  process.exit(2);
}

/**
 * Parses the command line against the description. --help prints the help and exits 0; an
 * unknown flag, a flag without its value or a wrong number of arguments prints the usage and
 * exits 2. Nothing else has happened by then, so neither has a side effect.
 */
export function command<const F extends Record<string, FlagSpec>>(
  spec: CommandSpec<F>,
  args = process.argv.slice(2),
): ParsedCommand<F> {
  if (wantsHelp(args)) {
    process.stdout.write(process.env.ECHODO_CLI_HELP === 'json' ? helpJson(spec) : renderHelp(spec));
    process.exit(0);
  }
  const fail: (problem: string) => never = (problem) => printUsageAndExit(usageLines(spec), spec.name, problem);
  const options = Object.fromEntries(
    Object.entries(spec.flags).map(([name, f]) => [name, { type: f.type, multiple: f.multiple ?? false }]),
  ) as NonNullable<ParseArgsConfig['options']>;
  let parsed: { values: Record<string, unknown>; positionals: string[] };
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (err) {
    // node's own message suggests quoting the flag as a positional, which no command accepts.
    fail((err as Error).message.replace(/\. To specify a positional argument.*$/s, ''));
  }
  const { min, max } = spec.positionals ?? { min: 0, max: 0 };
  const extra = parsed.positionals.slice(max);
  if (extra.length) fail(`unexpected argument(s): ${extra.join(' ')}`);
  if (parsed.positionals.length < min) fail('missing argument(s)');
  return { values: parsed.values as FlagValues<F>, positionals: parsed.positionals, fail };
}

/**
 * Start-up errors (a schema newer than the code, an unreachable database) end the process with
 * one line naming the problem instead of a stack trace.
 */
export function exitOnStartupError(name: string): void {
  const fail = (err: unknown) => {
    // one line, and a log line too
    process.stderr.write(`${name}: ${redactString(err instanceof Error ? err.message : String(err))}\n`);
    process.exit(1);
  };
  process.on('uncaughtException', fail);
  process.on('unhandledRejection', fail);
}
