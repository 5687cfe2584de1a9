// One pino logger per process; a child per run carries workspaceId, agentRunId and attempt.
// Every string logged passes the redactor (redact.ts): the message, every field (deep), the
// child bindings, and finally the whole serialized line on its way to the stream. pino's path
// redaction alone cannot know where a key ends up inside free text. Fail closed: a line that
// cannot be redacted is replaced, never written raw.
import pino, { type Logger } from 'pino';
import { redactString } from '../core/redact.ts';

export type { Logger };

const MAX_DEPTH = 6;

export function createLogger(
  options: { level?: string; name?: string; destination?: pino.DestinationStream } = {},
): Logger {
  return pino(
    {
      name: options.name ?? 'echodo',
      level: options.level ?? process.env.LOG_LEVEL ?? 'info',
      redact: {
        paths: [
          'apiKey',
          '*.apiKey',
          'authorization',
          '*.authorization',
          'headers.authorization',
          'env',
          '*.env',
          'password',
          '*.password',
          'token',
          '*.token',
          'content',
          '*.content',
        ],
        censor: '[redacted]',
      },
      formatters: {
        log(object) {
          return redactDeep(object) as Record<string, unknown>;
        },
        bindings(bindings) {
          return redactDeep(bindings) as Record<string, unknown>;
        },
      },
      hooks: {
        logMethod(args, method) {
          method.apply(this, args.map((a) => (typeof a === 'string' ? safeRedact(a) : a)) as Parameters<typeof method>);
        },
      },
    },
    redactingStream(options.destination ?? pino.destination({ dest: 2, sync: true })),
  );
}

/** The last pass: the serialized line itself (catches what a serializer or pino's own fields added). */
function redactingStream(dest: pino.DestinationStream): pino.DestinationStream {
  return {
    write(line: string) {
      let out: string;
      try {
        out = redactString(line);
      } catch {
        out = `${JSON.stringify({ level: 50, time: Date.now(), msg: 'log line dropped: redaction failed' })}\n`;
      }
      return dest.write(out);
    },
  } as pino.DestinationStream;
}

function safeRedact(text: string): string {
  try {
    return redactString(text);
  } catch {
    return '[dropped: redaction failed]';
  }
}

function redactDeep(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return safeRedact(value);
  if (value === null || typeof value !== 'object') return value;
  if (depth > MAX_DEPTH) return '[dropped: nested too deep to redact]';
  if (value instanceof Error)
    return { name: value.name, message: safeRedact(value.message), code: (value as { code?: unknown }).code };
  if (value instanceof Date) return value;
  if (Array.isArray(value)) return value.map((v) => redactDeep(v, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = redactDeep(v, depth + 1);
  return out;
}
