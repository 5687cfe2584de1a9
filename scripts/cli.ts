// Shared bits of the command-line entry points.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { redactString } from '../core/redact.ts';

export function usageError(usage: string, problem?: string): never {
  if (problem) process.stderr.write(`${problem}\n`);
  process.stderr.write(`usage: ${usage}\n`);
  process.exit(2);
}

export function parseCli<T extends NonNullable<ParseArgsConfig['options']>>(options: T, usage: string, args = process.argv.slice(2)) {
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (err) {
    usageError(usage, (err as Error).message);
  }
}

/**
 * Start-up errors (a schema newer than the code, an unreachable database) end the process with
 * one line naming the problem instead of a stack trace.
 */
export function exitOnStartupError(name: string): void {
  const fail = (err: unknown) => {
    process.stderr.write(`${name}: ${redactString(err instanceof Error ? err.message : String(err))}\n`); // a log line too
    process.exit(1);
  };
  process.on('uncaughtException', fail);
  process.on('unhandledRejection', fail);
}
