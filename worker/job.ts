// The job shape of the contract: the same on Redis, in `dispatch --job`, and in the Postgres queue.
import { createHash, randomUUID } from 'node:crypto';
import path from 'node:path';
import { z } from 'zod';

export const MAX_BRIEF_BYTES = 256 * 1024;

const id = (what: string) =>
  z
    .string({ error: (issue) => (issue.input === undefined ? `${what} is required` : `${what} must be a string`) })
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
  repoPath: z
    .string()
    .refine((p) => path.isAbsolute(p), 'repoPath must be an absolute path')
    .optional(),
  baseRef: z.string().min(1).max(250).regex(/^[^\s~^:?*[\\]+$/, 'baseRef is not a valid git ref').refine((r) => !r.startsWith('-'), 'baseRef must not start with -'),
  brief: z
    .string()
    .min(1, 'brief must not be empty')
    .refine((b) => Buffer.byteLength(b) <= MAX_BRIEF_BYTES, `brief is larger than ${MAX_BRIEF_BYTES} bytes`),
  model: z.string().min(1, 'model must not be empty').max(4096),
  agentRunId: id('agentRunId').optional(),
  resumeFromCheckpoint: z.boolean().default(false),
});

export type JobInput = z.input<typeof jobSchema>;
export type Job = z.output<typeof jobSchema> & { jobId: string; agentRunId: string };

export type JobParse = { ok: true; job: Job } | { ok: false; problems: string[] };

/** Validates a job; fills jobId and agentRunId when absent. Never throws. */
export function parseJob(input: unknown): JobParse {
  const result = jobSchema.safeParse(input);
  if (!result.success) {
    return {
      ok: false,
      problems: result.error.issues.map((i) => {
        if (i.code === 'unrecognized_keys') return `unknown field(s): ${i.keys.join(', ')}`;
        const field = i.path.length ? i.path.join('.') : '(job)';
        return `${field}: ${i.message}`;
      }),
    };
  }
  const job = result.data;
  // A job pushed without a jobId gets one derived from its content, so a redelivery of the
  // same message maps to the same run (runs are idempotent on jobId).
  const jobId = job.jobId ?? `job-${createHash('sha256').update(JSON.stringify(input)).digest('hex').slice(0, 32)}`;
  return { ok: true, job: { ...job, jobId, agentRunId: job.agentRunId ?? randomUUID() } };
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
