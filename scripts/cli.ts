// Shared bits of the command-line entry points.
import { parseArgs, type ParseArgsConfig } from 'node:util';

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
