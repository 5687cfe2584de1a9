// The bounded tool history a checkpoint keeps: each call with its input and a short result.
// File contents become {bytes, sha256}; command output becomes an exit code and a short tail;
// every string is redacted, and only then truncated, before it can reach a row or a log.
import { createHash } from 'node:crypto';
import { redactOrDrop, redactString } from '../../core/redact.ts';

export interface ToolCallRecord {
  round: number;
  tool: string;
  input: unknown;
  ok: boolean;
  result?: unknown;
  error?: string;
}

const TAIL_CHARS = 400;

function digest(text: string): { bytes: number; sha256: string } {
  return { bytes: Buffer.byteLength(text), sha256: createHash('sha256').update(text).digest('hex') };
}

function summarizeInput(tool: string, input: unknown): unknown {
  if (tool === 'write_file' && input && typeof input === 'object') {
    const { path, content } = input as { path?: unknown; content?: unknown };
    return { path, content: typeof content === 'string' ? digest(content) : null };
  }
  return input;
}

function summarizeResult(tool: string, result: unknown): unknown {
  if (!result || typeof result !== 'object') return result;
  const r = result as Record<string, unknown>;
  switch (tool) {
    case 'read_file':
      return { path: r.path, bytes: r.bytes, sha256: r.sha256, truncated: r.truncated, binary: r.binary };
    case 'write_file':
      return { path: r.path, bytes: r.bytes, sha256: r.sha256 };
    case 'grep': {
      const matches = Array.isArray(r.matches) ? (r.matches as { path?: string }[]) : [];
      return {
        matchCount: matches.length,
        files: [...new Set(matches.map((m) => m.path))].slice(0, 20),
        truncated: r.truncated,
      };
    }
    case 'run_command': {
      // The whole output is redacted before the tail is cut: a key straddling the cut would
      // otherwise be stored minus its first characters, which no pattern recognises.
      const output = redactString(`${r.stdout ?? ''}${r.stderr ?? ''}`);
      // The worker's own note (limits hit, a nested repository found) is kept: it explains the round.
      const note = typeof r.note === 'string' ? redactString(r.note).slice(0, TAIL_CHARS) : undefined;
      return { exitCode: r.exitCode, timedOut: r.timedOut, tail: output.slice(-TAIL_CHARS), note };
    }
    default:
      return { keys: Object.keys(r) };
  }
}

export function recordToolCall(args: {
  round: number;
  tool: string;
  input: unknown;
  output?: unknown;
  error?: unknown;
}): ToolCallRecord {
  const record: ToolCallRecord = {
    round: args.round,
    tool: args.tool,
    input: redactOrDrop(summarizeInput(args.tool, args.input), 500),
    ok: args.error === undefined,
  };
  if (args.error !== undefined)
    record.error = redactOrDrop(String(args.error instanceof Error ? args.error.message : args.error), 500) as string;
  else record.result = summarizeOrDrop(args.tool, args.output);
  return record;
}

/** Fail closed: a result whose summary cannot be redacted is dropped, never stored raw. */
function summarizeOrDrop(tool: string, output: unknown): unknown {
  try {
    return redactOrDrop(summarizeResult(tool, output), TAIL_CHARS);
  } catch {
    return { dropped: 'redaction failed' };
  }
}

/** Keeps the last `limit` rounds. */
export function boundHistory(history: ToolCallRecord[], limit: number): ToolCallRecord[] {
  if (!history.length) return history;
  const lastRound = history[history.length - 1]!.round;
  return history.filter((h) => h.round > lastRound - limit);
}

/** Characters of the summary at most: its newest lines are kept, the older ones counted. */
export const MAX_SUMMARY_CHARS = 16 * 1024;

/**
 * Rounds the model no longer sees verbatim, one line per call (a resumed session's, and the live
 * loop's rounds older than its window). Bounded twice: `history` is the checkpoint's bounded window,
 * and the text keeps only its newest lines within MAX_SUMMARY_CHARS; what is left out is counted.
 */
export function summarizeHistoryForPrompt(history: ToolCallRecord[]): string {
  const lines: string[] = [];
  let chars = 0;
  for (let i = history.length - 1; i >= 0; i--) {
    const h = history[i]!;
    const outcome = h.ok ? JSON.stringify(h.result) : `error: ${h.error}`;
    const line = `- round ${h.round}: ${h.tool} ${JSON.stringify(h.input)} -> ${outcome}`;
    if (chars + line.length + 1 > MAX_SUMMARY_CHARS) break;
    lines.push(line);
    chars += line.length + 1;
  }
  lines.reverse();
  const omitted = history.length - lines.length;
  if (omitted > 0 || (history[0]?.round ?? 1) > 1)
    lines.unshift('- (earlier calls not listed: only the newest are kept)');
  return lines.join('\n');
}
