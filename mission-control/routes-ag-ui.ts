// POST /api/ag-ui: mission control as an AG-UI server. A workspace token (read-write) posts a
// RunAgentInput; the last user message is the brief; forwardedProps may name convoyId,
// harnessAlias, model, repoPath, baseRef. The run is dispatched (the role `ag-ui`, so an operator
// may route it to a harness; `code` otherwise) and streamed as AG-UI events until it ends. The run's
// id is derived from the workspace, threadId and runId: posting the same input again (a reconnect)
// streams the same run, never a second run; every event carries an SSE id, and a reconnect naming
// the last one it got (Last-Event-ID, or forwardedProps.lastEventId) goes on right after it.
import { createHash } from 'node:crypto';
import type { Hono } from 'hono';
import { stream } from 'hono/streaming';
import { EventType, type BaseEvent } from '@ag-ui/core';
import { RunAgentInputSchema } from '@ag-ui/core/schemas';
import { EventEncoder } from '@ag-ui/encoder';
import type { Database } from '../store/connection.ts';
import type { Config } from '../core/config.ts';
import { EchodoError } from '../core/errors.ts';
import { redactString } from '../core/redact.ts';
import { dispatchJob } from '../operator/dispatch.ts';
import { withWorkspace } from '../store/workspace.ts';
import { checkpointsAfter, lifecycleEventsAfter, progressRun, type ProgressRun } from '../store/run-progress.ts';
import { createQueue, type JobQueue } from '../worker/queue/index.ts';
import type { Logger } from '../worker/log.ts';
import { requirePrincipal, workspaceOf } from './auth.ts';
import type { McEnv } from './context.ts';
import { mayWrite } from './routes-actions.ts';
import { checkpointEvents, lifecycleEvent } from './ag-ui-events.ts';

const POLL_MS = 250;
/** A stream is closed after this long even if the run has not ended (the client may post again). */
const MAX_STREAM_MS = 30 * 60_000;
const PROPS = ['convoyId', 'harnessAlias', 'model', 'repoPath', 'baseRef'] as const;
const TERMINAL = new Set(['completed', 'failed', 'cancelled', 'budget_exhausted']);

/**
 * Where a stream is, as each event's SSE id: the checkpoint whose events are being sent (`seq`),
 * how many of them were sent (`sent`, 0 once all were), the last lifecycle event sent, and `ended`
 * after the final event. An id names a position in the run's own record, so it means the same on
 * any connection: a reconnect goes on right after it.
 */
interface StreamCursor {
  seq: number;
  sent: number;
  eventId: string;
  ended?: boolean;
}
const START: StreamCursor = { seq: 0, sent: 0, eventId: '0' };
const formatCursor = (c: StreamCursor) => `${c.seq}.${c.sent}.${c.eventId}${c.ended ? '.end' : ''}`;
function parseCursor(id: string): StreamCursor | undefined {
  const m = /^(\d{1,9})\.(\d{1,6})\.(\d{1,18})(\.end)?$/.exec(id.trim());
  return m ? { seq: Number(m[1]), sent: Number(m[2]), eventId: m[3]!, ended: Boolean(m[4]) } : undefined;
}

const digest = (...parts: string[]) => createHash('sha256').update(parts.join('\0')).digest('hex');

export function mountAgUiRoutes(
  app: Hono<McEnv>,
  deps: { db: Database; config?: Partial<Config>; queue?: JobQueue; log: Logger },
): { close(): Promise<void> } {
  let made: JobQueue | undefined;
  // Dispatch needs the worker configuration (the queue, WORKER_REPO_ROOT); the queue is made on first use.
  const queueOf = (): JobQueue | undefined =>
    deps.queue ??
    (deps.config?.WORKER_REPO_ROOT
      ? (made ??= createQueue({
          config: deps.config as Config,
          db: deps.db,
          workerId: `mission-control-ag-ui-${process.pid}`,
        }))
      : undefined);
  const api = requirePrincipal(deps.db.admin, { surface: 'api', need: 'workspace' });
  const bad = (message: string) => ({ error: 'bad_request', message: redactString(message).slice(0, 2000) });

  app.post('/api/ag-ui', api, mayWrite('api'), async (c) => {
    const workspaceId = workspaceOf(c);
    let body: unknown;
    try {
      body = JSON.parse(await c.req.text());
    } catch {
      return c.json(bad('the body is not JSON'), 400);
    }
    const parsed = RunAgentInputSchema.safeParse(body);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
      return c.json(bad(`not a RunAgentInput: ${issues}`), 400);
    }
    const input = parsed.data;
    const user = [...input.messages].reverse().find((m) => m.role === 'user');
    const brief = !user
      ? ''
      : typeof user.content === 'string'
        ? user.content
        : user.content.map((p) => (p.type === 'text' ? p.text : '')).join('');
    if (!brief.trim()) return c.json(bad('no user message with text: the brief is the last user message'), 400);
    const props = (input.forwardedProps ?? {}) as Record<string, unknown>;
    const chosen: Record<string, string> = {};
    for (const key of PROPS) {
      if (props[key] === undefined) continue;
      if (typeof props[key] !== 'string') return c.json(bad(`forwardedProps.${key} must be a string`), 400);
      chosen[key] = props[key] as string;
    }
    const agentRunId = `agui-${digest(workspaceId, input.threadId, input.runId).slice(0, 32)}`;
    // Where a reconnecting client stopped: the SSE Last-Event-ID header (a plain SSE reconnect: the
    // stream goes on after that event, RUN_STARTED not repeated), or forwardedProps.lastEventId (an
    // AG-UI client's new request: RUN_STARTED first, as its client expects, then after that event).
    const fromHeader = c.req.header('last-event-id');
    const fromProps = props.lastEventId;
    const resumeFrom = fromHeader ?? (typeof fromProps === 'string' ? fromProps : undefined);
    let cursor: StreamCursor = START;
    if (resumeFrom !== undefined) {
      const parsedCursor = parseCursor(resumeFrom);
      if (!parsedCursor)
        return c.json(bad('Last-Event-ID / forwardedProps.lastEventId: not an id this stream sent'), 400);
      cursor = parsedCursor;
    }
    const existing = await withWorkspace(deps.db.app, workspaceId, (tx) => progressRun(tx, agentRunId));
    // A reconnect is to a run of this workspace: one it does not have (another workspace's) is not
    // started afresh under a stream position it never had.
    if (!existing && resumeFrom !== undefined) {
      return c.json({ error: 'not_found', message: 'no run of this workspace has this threadId and runId' }, 404);
    }
    if (!existing) {
      const queue = queueOf();
      if (!queue || !deps.config?.WORKER_REPO_ROOT) {
        return c.json({ error: 'unavailable', message: 'dispatch needs the worker configuration' }, 503);
      }
      try {
        await dispatchJob(
          deps.db,
          queue,
          {
            workspaceId,
            agentRunId,
            roleId: 'ag-ui',
            baseRef: 'main',
            brief,
            convoyId: `agui-${digest(workspaceId, input.threadId).slice(0, 24)}`,
            briefId: `agui-${digest(input.runId).slice(0, 16)}`,
            ...chosen,
          },
          { defaultRepoPath: deps.config.WORKER_REPO_ROOT },
        );
      } catch (err) {
        if (err instanceof EchodoError && ['invalid_job', 'repo_invalid', 'workspace_not_found'].includes(err.code)) {
          return c.json(bad(err.message), 400);
        }
        // Refused by admission (over the storage quota, say): the reason, not a server error.
        if (err instanceof EchodoError && err.code === 'action_refused') {
          return c.json({ error: 'action_refused', message: redactString(err.message).slice(0, 2000) }, 409);
        }
        throw err;
      }
    }
    // Always SSE: the protobuf framing a client may also accept is not spoken here.
    const encoder = new EventEncoder();
    c.header('content-type', encoder.getContentType());
    c.header('x-accel-buffering', 'no');
    return stream(
      c,
      async (out) => {
        const write = (event: BaseEvent & Record<string, unknown>, id?: string) =>
          out.write(`${id === undefined ? '' : `id: ${id}\n`}${encoder.encodeSSE(event as BaseEvent)}`);
        const { threadId, runId } = input;
        const final = (run: ProgressRun, seq: number): BaseEvent & Record<string, unknown> =>
          run.status === 'completed'
            ? { type: EventType.RUN_FINISHED, threadId, runId, result: { agentRunId, checkpoints: seq } }
            : {
                type: EventType.RUN_ERROR,
                message: `run ${run.status}: ${redactString(run.failure_reason ?? run.status).slice(0, 500)}`,
                code: run.status,
              };
        // After the final event an SSE reconnect has nothing left to read.
        if (cursor.ended && fromHeader !== undefined) return;
        // Resumed from forwardedProps: RUN_STARTED again, without an id (the client's last id stands).
        if (fromHeader === undefined) {
          await write({ type: EventType.RUN_STARTED, threadId, runId }, resumeFrom ? undefined : formatCursor(START));
        }
        // An AG-UI client's repost after the final event: that event again, so its run is well formed.
        if (cursor.ended) {
          const run = await withWorkspace(deps.db.app, workspaceId, (tx) => progressRun(tx, agentRunId));
          if (run && TERMINAL.has(run.status)) await write(final(run, cursor.seq), formatCursor(cursor));
          return;
        }
        let { seq, sent, eventId } = cursor;
        const deadline = Date.now() + MAX_STREAM_MS;
        while (!out.aborted && !out.closed) {
          // The checkpoint part-sent when the client left is read again: its events are the same.
          const { run, rows, events } = await withWorkspace(deps.db.app, workspaceId, async (tx) => ({
            run: await progressRun(tx, agentRunId),
            rows: await checkpointsAfter(tx, agentRunId, sent > 0 ? seq - 1 : seq),
            events: await lifecycleEventsAfter(tx, agentRunId, eventId),
          }));
          for (const e of events) {
            eventId = e.id;
            await write(lifecycleEvent(e), formatCursor({ seq, sent, eventId }));
          }
          for (const row of rows) {
            const all = checkpointEvents(agentRunId, row);
            const from = row.checkpoint_seq === seq ? sent : 0;
            seq = row.checkpoint_seq;
            if (from >= all.length) sent = 0; // an id past the checkpoint's last event: it was all sent
            for (let i = from; i < all.length; i++) {
              sent = i + 1 === all.length ? 0 : i + 1;
              await write(all[i]!, formatCursor({ seq, sent, eventId }));
            }
          }
          // Finished only once every checkpoint was sent (a page of rows may still be pending).
          if (run && TERMINAL.has(run.status) && rows.length < 50) {
            await write(final(run, seq), formatCursor({ seq, sent, eventId, ended: true }));
            break;
          }
          if (Date.now() > deadline) break;
          await out.sleep(POLL_MS);
        }
      },
      async (err) => {
        deps.log.warn({ agentRunId, error: redactString(String(err)) }, 'ag-ui stream ended by an error');
      },
    );
  });
  return { close: async () => made?.close() };
}
