// One pino logger per process; a child per run carries workspaceId, agentRunId and attempt.
// Every string logged passes the redactor too (see redact.ts): pino's path redaction alone
// cannot know where a key ends up inside free text.
import pino, { type Logger } from 'pino';
import { redactString } from './checkpoints/redact.ts';

export type { Logger };

export function createLogger(options: { level?: string; name?: string; destination?: pino.DestinationStream } = {}): Logger {
  return pino(
    {
      name: options.name ?? 'echodo',
      level: options.level ?? process.env.LOG_LEVEL ?? 'info',
      redact: {
        paths: ['apiKey', '*.apiKey', 'authorization', '*.authorization', 'headers.authorization', 'env', '*.env', 'password', '*.password', 'token', '*.token', 'content', '*.content'],
        censor: '[redacted]',
      },
      formatters: {
        log(object) {
          return redactDeep(object) as Record<string, unknown>;
        },
      },
      hooks: {
        logMethod(args, method) {
          method.apply(this, args.map((a) => (typeof a === 'string' ? redactString(a) : a)) as Parameters<typeof method>);
        },
      },
    },
    options.destination ?? pino.destination({ dest: 2, sync: true }),
  );
}

function redactDeep(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return redactString(value);
  if (depth > 6 || value === null || typeof value !== 'object') return value;
  if (value instanceof Error) return { name: value.name, message: redactString(value.message), code: (value as { code?: unknown }).code };
  if (Array.isArray(value)) return value.map((v) => redactDeep(v, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = redactDeep(v, depth + 1);
  return out;
}
