// Replay transcripts: the offline model's script (contract § "Replay transcripts").
// Each entry is one model response; an entry with tool calls is one tool round.

import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { z } from 'zod';
import { EchodoError } from '../../core/errors.ts';

const toolCallSchema = z.strictObject({
  toolName: z.string().min(1),
  input: z.record(z.string(), z.unknown()),
});

const tokens = z.number().int().nonnegative().optional();

/** What the entry's response reports as its usage, as a provider would; absent counts are unknown. */
const usageSchema = z.strictObject({
  inputTokens: tokens,
  outputTokens: tokens,
  cacheReadTokens: tokens,
  cacheWriteTokens: tokens,
  reasoningTokens: tokens,
});

const entrySchema = z
  .strictObject({
    toolCalls: z.array(toolCallSchema).min(1).optional(),
    text: z.string().optional(),
    delayMs: z.number().int().nonnegative().optional(),
    usage: usageSchema.optional(),
  })
  .refine((entry) => entry.toolCalls !== undefined || entry.text !== undefined, {
    message: 'an entry needs toolCalls or text (or both)',
  });

export const transcriptSchema = z.strictObject({
  steps: z.array(entrySchema).min(1),
});

export type Transcript = z.infer<typeof transcriptSchema>;
export type TranscriptEntry = Transcript['steps'][number];
export type TranscriptUsage = NonNullable<TranscriptEntry['usage']>;
export type TranscriptToolCall = NonNullable<TranscriptEntry['toolCalls']>[number];

/** A transcript that cannot be used: missing, not JSON, or not the contract's shape. */
export class TranscriptError extends EchodoError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('model_unknown', message, options);
    this.name = 'TranscriptError';
  }
}

/**
 * Where JSON.parse stopped, without its words: V8's message quotes the input around the problem,
 * and a transcript path may name any file, so only the position (or the kind of problem) is kept.
 */
function jsonPosition(err: unknown, text: string): string {
  const message = err instanceof Error ? err.message : '';
  const at = /at position (\d+)/.exec(message);
  if (at) {
    const before = text.slice(0, Number(at[1]));
    const line = before.split('\n').length;
    return ` (at line ${line}, column ${before.length - before.lastIndexOf('\n')})`;
  }
  if (/^Unexpected token/.test(message)) return ' (an unexpected character)';
  return /end of JSON input/i.test(message) ? ' (it ends too early)' : '';
}

/** `steps[2].toolCalls[0].toolName` from zod's path array (the schema's own field names only). */
function fieldPath(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const key of path) {
    out += typeof key === 'number' ? `[${key}]` : `${out ? '.' : ''}${String(key)}`;
  }
  return out || '(root)';
}

/**
 * One issue in words that never come from the file: zod's own messages may quote the input's
 * keys (an unrecognised field) or values, so each kind gets a fixed description of its shape.
 */
function shapeProblem(issue: z.core.$ZodIssue): string {
  const at = fieldPath(issue.path);
  switch (issue.code) {
    case 'unrecognized_keys':
      return `${at}: ${issue.keys.length} unexpected field(s)`;
    case 'invalid_type':
      return `${at}: expected ${issue.expected}`;
    case 'too_small':
      return `${at}: ${issue.origin === 'array' ? 'too few entries' : 'too small'}`;
    case 'too_big':
      return `${at}: ${issue.origin === 'array' ? 'too many entries' : 'too large'}`;
    case 'custom':
      return `${at}: an entry needs toolCalls or text (or both)`;
    default:
      return `${at}: not the expected shape`;
  }
}

const NOT_A_TRANSCRIPT = 'is not a valid replay transcript';

/** Validates already-parsed JSON; `source` names where it came from in error messages. */
export function parseTranscript(value: unknown, source = 'transcript'): Transcript {
  const result = transcriptSchema.safeParse(value);
  if (result.success) return result.data;
  const problems = result.error.issues.slice(0, 5).map(shapeProblem);
  return failWith(`replay transcript ${source} ${NOT_A_TRANSCRIPT}: ${problems.join('; ')}`);
}

function failWith(message: string, cause?: unknown): never {
  throw new TranscriptError(message, cause === undefined ? undefined : { cause });
}

/** A transcript larger than this is refused unread: the worker holds it in memory whole. */
export const MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024;

/**
 * Reads a transcript at a path already checked to be inside WORKER_REPLAY_DIR (replay-dir.ts).
 * Opened without following a final symlink and without blocking (a FIFO would hang the run), and
 * read only when it is a regular file.
 */
export async function loadTranscript(path: string): Promise<Transcript> {
  let text: string;
  try {
    text = await readRegularFile(path);
  } catch (err) {
    if (err instanceof TranscriptError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') failWith(`replay transcript ${path} does not exist`, err);
    if (code === 'EISDIR') failWith(`replay transcript ${path} is a directory, not a file`, err);
    if (code === 'ELOOP') failWith(`replay transcript ${path} is a symbolic link, not a file`, err);
    failWith(`replay transcript ${path} cannot be read (${code ?? 'error'})`, err);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    failWith(`replay transcript ${path} ${NOT_A_TRANSCRIPT}: it is not valid JSON${jsonPosition(err, text)}`);
  }
  return parseTranscript(json, path);
}

async function readRegularFile(path: string): Promise<string> {
  const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const info = await handle.stat();
    if (info.isDirectory()) failWith(`replay transcript ${path} is a directory, not a file`);
    if (!info.isFile()) failWith(`replay transcript ${path} is not a regular file`);
    if (info.size > MAX_TRANSCRIPT_BYTES) {
      failWith(`replay transcript ${path} is larger than ${MAX_TRANSCRIPT_BYTES} bytes`);
    }
    return await handle.readFile('utf8');
  } finally {
    await handle.close();
  }
}
