// The job shape of the contract: the same on Redis, in `dispatch --job`, and in the Postgres queue.
import { createHash, randomUUID } from 'node:crypto';
import path from 'node:path';
import { z } from 'zod';

export const MAX_BRIEF_BYTES = 256 * 1024;

// NUL and lone surrogates: Postgres refuses them in text and jsonb, so a job holding one could
// never be recorded (and would be redelivered forever). Refused at parse time, in every field.
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const text = (what: string) =>
  z
    .string({ error: (issue) => (issue.input === undefined ? `${what} is required` : `${what} must be a string`) })
    .refine((s) => !UNSTORABLE.test(s), { message: `${what} holds a NUL character or a lone surrogate`, abort: true });

const id = (what: string) =>
  text(what)
    .min(1, `${what} must not be empty`)
    .max(200, `${what} is longer than 200 characters`)
    .regex(/^[A-Za-z0-9][A-Za-z0-9._:-]*$/, `${what} may hold only letters, digits, '.', '_', ':' and '-'`);

export const jobSchema = z.strictObject({
  jobId: id('jobId').optional(),
  workspaceId: id('workspaceId'),
  convoyId: id('convoyId'),
  briefId: id('briefId'),
  roleId: id('roleId'),
  harnessAlias: id('harnessAlias').optional(),
  repoPath: text('repoPath')
    .refine((p) => path.isAbsolute(p), 'repoPath must be an absolute path')
    .optional(),
  baseRef: text('baseRef')
    .min(1)
    .max(250)
    .regex(/^[^\s~^:?*[\\]+$/, 'baseRef is not a valid git ref')
    .refine((r) => !r.startsWith('-'), 'baseRef must not start with -'),
  brief: text('brief')
    .min(1, 'brief must not be empty')
    .refine((b) => Buffer.byteLength(b) <= MAX_BRIEF_BYTES, `brief is larger than ${MAX_BRIEF_BYTES} bytes`),
  // Absent only for a harness whose adapter is not minimal (the remote agent has its own model).
  model: text('model').min(1, 'model must not be empty').max(4096).optional(),
  agentRunId: id('agentRunId').optional(),
  resumeFromCheckpoint: z.boolean().default(false),
  // Budgets: a run stops (budget_exhausted) before a round that would start over one of them.
  maxCostUsd: z
    .number({ error: 'maxCostUsd must be a number' })
    .finite()
    .nonnegative('maxCostUsd must be >= 0')
    .optional(),
  maxTokens: z
    .number({ error: 'maxTokens must be a number' })
    .int('maxTokens must be a whole number')
    .nonnegative('maxTokens must be >= 0')
    .optional(),
});

export type JobInput = z.input<typeof jobSchema>;
export type Job = z.output<typeof jobSchema> & { jobId: string; agentRunId: string };

/** `agentRunIdGiven`: the job named its run (a re-dispatch when that run exists); else one was generated. */
export type JobParse = { ok: true; job: Job; agentRunIdGiven: boolean } | { ok: false; problems: string[] };

/** The orchestrator's stall detector spells it resume_from_checkpoint: accepted as an alias. */
function unalias(input: unknown): { value: unknown; problem?: string } {
  if (!input || typeof input !== 'object' || Array.isArray(input) || !('resume_from_checkpoint' in input))
    return { value: input };
  const { resume_from_checkpoint: alias, ...rest } = input as Record<string, unknown>;
  if ('resumeFromCheckpoint' in rest && rest.resumeFromCheckpoint !== alias) {
    return {
      value: rest,
      problem: 'resume_from_checkpoint: differs from resumeFromCheckpoint (give one of them, or the same value)',
    };
  }
  return { value: { ...rest, resumeFromCheckpoint: alias } };
}

/** Validates a job; fills jobId and agentRunId when absent. Never throws. */
export function parseJob(input: unknown): JobParse {
  const { value, problem } = unalias(input);
  const result = jobSchema.safeParse(value);
  if (!result.success || problem) {
    return {
      ok: false,
      problems: [
        ...(problem ? [problem] : []),
        ...(result.success ? [] : result.error.issues).map((i) => {
          if (i.code === 'unrecognized_keys') return `unknown field(s): ${i.keys.join(', ')}`;
          const field = i.path.length ? i.path.join('.') : '(job)';
          return `${field}: ${i.message}`;
        }),
      ],
    };
  }
  const job = result.data;
  // A job pushed without a jobId gets one derived from its content, so a redelivery of the
  // same message maps to the same run (runs are idempotent on jobId).
  const jobId = job.jobId ?? `job-${createHash('sha256').update(JSON.stringify(input)).digest('hex').slice(0, 32)}`;
  return {
    ok: true,
    job: { ...job, jobId, agentRunId: job.agentRunId ?? randomUUID() },
    agentRunIdGiven: job.agentRunId !== undefined,
  };
}

/** Parses a raw queue message: bad JSON and schema failures both come back as problems. */
export function parseRawJob(raw: string): JobParse {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (err) {
    return { ok: false, problems: [`not valid JSON: ${(err as Error).message}`] };
  }
  return parseJob(value);
}

export function branchName(briefId: string, agentRunId: string): string {
  return `echodo/${briefId}-${agentRunId.slice(0, 8)}`;
}
