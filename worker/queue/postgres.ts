// Postgres backend (REDIS_URL unset): the queued runs in agent_runs ARE the queue.
// A take reserves the oldest visible queued run for a visibility timeout (the lease); the
// claim in agent_runs is the ack, so a worker that dies between take and claim leaves the
// run to become visible again. enqueue only rings the doorbell (NOTIFY), since recordRun
// already put the run in the queue.
import type { Sql } from 'postgres';
import type { Database } from '../../store/connection.ts';
import { failQueuedRun } from '../../store/runs.ts';
import { withWorkspace } from '../../store/workspace.ts';
import { EchodoError } from '../../core/errors.ts';
import { storableText } from '../../core/redact.ts';
import type { Job } from '../../core/job.ts';
import type { Delivery, JobQueue } from './types.ts';

export const QUEUE_CHANNEL = 'echodo_queue';

interface TakenRow {
  workspace_id: string;
  agent_run_id: string;
  job: unknown;
}

interface Taken {
  workspaceId: string;
  agentRunId: string;
}

/** Records a dead letter in Postgres through the security-definer function (any workspace). */
export async function recordDeadLetter(
  admin: Sql,
  raw: string,
  reason: string,
  ids: { workspaceId?: string; jobId?: string } = {},
): Promise<void> {
  const stored = deadLetterText(raw);
  await admin`select echodo_dead_letter(${ids.workspaceId ?? null}, ${ids.jobId ?? null}, ${deadLetterReason(reason)}, ${stored})`;
}

const DEAD_LETTER_MAX_CHARS = 64 * 1024;

// Longer than any key the redactor knows (a PEM private key is ~3 KB), so a key straddling the
// window's end lies wholly past the cap and no fragment of it is kept.
const REDACT_MARGIN_CHARS = 16 * 1024;

/**
 * What a dead letter keeps of the message: redacted (a brief may hold a key), then capped (a 10 MB
 * brief). Only a window a margin longer than the cap is redacted, so a huge message costs little.
 */
export function deadLetterText(raw: string): string {
  const window =
    raw.length > DEAD_LETTER_MAX_CHARS + REDACT_MARGIN_CHARS
      ? raw.slice(0, DEAD_LETTER_MAX_CHARS + REDACT_MARGIN_CHARS)
      : raw;
  const text = storableText(window);
  if (text.length <= DEAD_LETTER_MAX_CHARS && window.length === raw.length) return text;
  // Cut after redaction; the second pass only makes a surrogate pair cut in half storable.
  return `${storableText(text.slice(0, DEAD_LETTER_MAX_CHARS))}…[message of ${raw.length} chars cut]`;
}

/** A dead letter's reason: redacted, then capped. */
export function deadLetterReason(reason: string): string {
  return storableText(reason, 2000);
}

export function createPostgresQueue(args: {
  db: Database;
  /** How long a taken, unclaimed run stays invisible to other workers (the lease). */
  visibilityMs: number;
  onError?: (err: unknown) => void;
}): JobQueue {
  const { db } = args;
  const visibilityMs = Math.max(1, Math.round(args.visibilityMs));
  // Bumped by every NOTIFY and every (re)LISTEN: a take compares it across its check so a
  // doorbell rung between the check and the wait is not missed.
  let generation = 0;
  const waiters = new Set<() => void>();
  let listening: Promise<{ unlisten(): Promise<void> }> | undefined;
  let closed = false;
  // Deliveries handed out, by raw: deadLetter needs the run behind a raw to take it out of the queue.
  const outstanding = new Map<string, Taken[]>();

  const ring = () => {
    generation++;
    for (const wake of waiters) wake();
  };

  function ensureListening(): Promise<unknown> {
    if (!listening) {
      // onlisten runs after every reconnect too: notifications may have been missed, so re-check.
      listening = db.admin.listen(QUEUE_CHANNEL, ring, ring);
      listening.catch(() => {
        listening = undefined;
      });
    }
    return listening;
  }

  function waitForBell(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const done = () => {
        clearTimeout(timer);
        waiters.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      waiters.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  function forget(raw: string): Taken | undefined {
    const list = outstanding.get(raw);
    const taken = list?.shift();
    if (list && list.length === 0) outstanding.delete(raw);
    return taken;
  }

  async function takeOne(): Promise<Delivery | null> {
    const [row] = await db.admin<TakenRow[]>`select * from echodo_take_queued_run(${visibilityMs}::integer)`;
    if (!row) return null;
    const raw = JSON.stringify(row.job);
    const taken = { workspaceId: row.workspace_id, agentRunId: row.agent_run_id };
    outstanding.set(raw, [...(outstanding.get(raw) ?? []), taken]);
    let acked = false;
    const forgetThis = async () => {
      if (acked) return;
      acked = true;
      const list = outstanding.get(raw);
      const i = list?.indexOf(taken) ?? -1;
      if (list && i >= 0) list.splice(i, 1);
      if (list && list.length === 0) outstanding.delete(raw);
    };
    return {
      raw,
      // The claim in agent_runs is the ack; only the bookkeeping is dropped here.
      ack: forgetThis,
      // The run is still queued: it comes back when its visibility timeout lapses.
      release: forgetThis,
    };
  }

  return {
    backend: 'postgres',

    async enqueue(_job: Job): Promise<void> {
      await db.admin`select pg_notify(${QUEUE_CHANNEL}, '')`;
    },

    async take({ timeoutMs, signal }): Promise<Delivery | null> {
      if (closed) throw new EchodoError('internal', 'postgres queue: take on a closed queue');
      await ensureListening();
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        if (signal?.aborted || closed) return null;
        const seen = generation;
        const delivery = await takeOne();
        if (delivery) return delivery;
        const remaining = deadline - Date.now();
        if (remaining <= 0) return null;
        // No busy polling: sleep until the doorbell, the deadline or an abort, then check again.
        // A run whose visibility timeout lapses rings no bell; the next take's check finds it.
        if (generation === seen) await waitForBell(remaining, signal);
      }
    },

    async deadLetter(raw, reason, ids = {}): Promise<void> {
      const taken = forget(raw);
      await recordDeadLetter(db.admin, raw, reason, { ...ids, workspaceId: ids.workspaceId ?? taken?.workspaceId });
      // A stored run that cannot be run would otherwise come back after every visibility timeout.
      if (taken) {
        await withWorkspace(db.app, taken.workspaceId, (tx) =>
          failQueuedRun(tx, { agentRunId: taken.agentRunId, reason: `dead-lettered: ${reason}` }),
        );
      }
    },

    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      for (const wake of waiters) wake();
      const current = listening;
      listening = undefined;
      if (current) {
        try {
          await (await current).unlisten();
        } catch (err) {
          args.onError?.(err);
        }
      }
    },
  };
}
