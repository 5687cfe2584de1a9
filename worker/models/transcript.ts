// Replay transcripts: the offline model's script (contract § "Replay transcripts").
// Each entry is one model response; an entry with tool calls is one tool round.

import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { EchodoError } from '../../core/errors.ts';

const toolCallSchema = z.strictObject({
  toolName: z.string().min(1),
  input: z.record(z.string(), z.unknown()),
});

const entrySchema = z
  .strictObject({
    toolCalls: z.array(toolCallSchema).min(1).optional(),
    text: z.string().optional(),
    delayMs: z.number().int().nonnegative().optional(),
  })
  .refine((entry) => entry.toolCalls !== undefined || entry.text !== undefined, {
    message: 'an entry needs toolCalls or text (or both)',
  });

export const transcriptSchema = z.strictObject({
  steps: z.array(entrySchema).min(1),
});

export type Transcript = z.infer<typeof transcriptSchema>;
export type TranscriptEntry = Transcript['steps'][number];
export type TranscriptToolCall = NonNullable<TranscriptEntry['toolCalls']>[number];

/** A transcript that cannot be used: missing, not JSON, or not the contract's shape. */
export class TranscriptError extends EchodoError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('model_unknown', message, options);
    this.name = 'TranscriptError';
  }
}

/** V8's JSON.parse message quotes the input; keep only the problem so file contents are never echoed. */
function jsonProblem(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.replace(/,\s*".*" is not valid JSON$/s, '');
}

/** `steps[2].toolCalls[0].toolName` from zod's path array. */
function fieldPath(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const key of path) {
    out += typeof key === 'number' ? `[${key}]` : `${out ? '.' : ''}${String(key)}`;
  }
  return out || '(root)';
}

/** Validates already-parsed JSON; `source` names where it came from in error messages. */
export function parseTranscript(value: unknown, source = 'transcript'): Transcript {
  const result = transcriptSchema.safeParse(value);
  if (result.success) return result.data;
  const problems = result.error.issues.map((issue) => `${fieldPath(issue.path)}: ${issue.message}`);
  return failWith(`replay transcript ${source} is invalid: ${problems.join('; ')}`);
}

function failWith(message: string, cause?: unknown): never {
  throw new TranscriptError(message, cause === undefined ? undefined : { cause });
}

export async function loadTranscript(path: string): Promise<Transcript> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') failWith(`replay transcript ${path} does not exist`, err);
    if (code === 'EISDIR') failWith(`replay transcript ${path} is a directory, not a file`, err);
    failWith(`replay transcript ${path} cannot be read (${code ?? 'error'})`, err);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    failWith(`replay transcript ${path} is not valid JSON: ${jsonProblem(err)}`);
  }
  return parseTranscript(json, path);
}
