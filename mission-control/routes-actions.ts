// Operators act: fork, retry and cancel a run, and see what each checkpoint changed.
// JSON: POST /api/runs/:id/{fork,retry,cancel}, GET /api/runs/:id/checkpoints/:seq/diff.
// Pages: GET /runs/:id/checkpoints/:seq (the diff view), POST /runs/:id/actions/:action (the
// panel's forms; answered with a redirect). Reads follow the same rules as the other routes (401
// without a token, 404 for another workspace's run exactly as for a missing one). Writes also
// need a token that may write (403 for a read-only one) and, when the token came from the
// sign-in cookie, the page's CSRF token and the same origin (403 otherwise).
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Hono, MiddlewareHandler } from 'hono';
import type { Database } from '../store/connection.ts';
import type { Principal } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { requestCancel } from '../operator/cancel.ts';
import type { Config } from '../core/config.ts';
import { retryRun } from '../operator/dispatch.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { forkRun } from '../operator/fork.ts';
import type { Logger } from '../worker/log.ts';
import { createQueue, type JobQueue } from '../worker/queue/index.ts';
import { presentedToken, requirePrincipal, workspaceOf } from './auth.ts';
import { runOverview } from '../store/run-timeline.ts';
import { isConfirmed, sendConfirmation } from './confirm.ts';
import { forkPreview, loadForkPoint } from './fork-preview.ts';
import type { McContext, McEnv } from './context.ts';
import { checkpointDiff, loadDiffSource } from './checkpoint-diff.ts';
import { sendPage } from './layout.ts';
import { messageContent } from './pages-admin.ts';
import { diffPageContent, forkPreviewContent } from './pages-actions.ts';
import { noteProblem, publishRun, sendBackRun } from '../operator/publish.ts';
import { docReview } from '../store/doc-review.ts';
import { FILES_IN_EVENT } from '../worker/run/doc-review.ts';
import { reviewFilesList } from './pages-doc-review.ts';
import { html } from './html.ts';

const MAX_BODY_BYTES = 64 * 1024;
const NOT_FOUND = { error: 'not_found', message: 'run not found' } as const;
const FORK_FIELDS = new Set(['at', 'brief', 'model', 'cancelSource']);

export interface ActionDeps {
  db: Database;
  /** Full config for the queue and the repo; without it, actions answer 503. */
  config?: Config;
  queue?: JobQueue;
  log: Logger;
}

/** The CSRF token of a signed-in session: derived from the session token, so nothing is stored. */
export function csrfTokenFor(sessionToken: string): string {
  return createHmac('sha256', sessionToken).update('echodo-mission-control-csrf').digest('base64url');
}

/** The CSRF token to put in a page, or undefined when the request is not cookie-signed-in. */
export function pageCsrfToken(c: McContext): string | undefined {
  const token = presentedToken(c);
  return token && !c.req.header('authorization') ? csrfTokenFor(token) : undefined;
}

/** A read-only token reads everything its workspace token could, and writes nothing. */
export function isReadOnly(principal: Principal): boolean {
  return principal.readOnly === true;
}

/** Who asked, for run_cancelled and run_forked: the token's id when the principal carries one. */
function actorOf(c: McContext, surface: 'api' | 'panel'): string {
  return `${surface}:${c.get('principal').tokenId}`;
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/**
 * The write gate, after requirePrincipal: read-only tokens get 403; a cookie-authenticated
 * write must come from our own origin (Origin, else Sec-Fetch-Site) and carry the CSRF token
 * (X-CSRF-Token header, or the form's _csrf field).
 */
export function mayWrite(surface: 'api' | 'html'): MiddlewareHandler<McEnv> {
  return async (c, next) => {
    const deny = (message: string) => c.json({ error: 'forbidden', message }, 403);
    if (isReadOnly(c.get('principal'))) return deny('this token is read-only: it cannot act on runs');
    if (c.req.header('authorization')) return next(); // a bearer token is not sent by a browser on its own
    const origin = c.req.header('origin');
    const site = c.req.header('sec-fetch-site');
    const ownOrigin = new URL(c.req.url).origin;
    const sameOrigin = origin ? origin === ownOrigin : site === 'same-origin';
    if (!sameOrigin) return deny('cross-origin request refused');
    let presented = c.req.header('x-csrf-token');
    if (!presented && surface === 'html') {
      const body = await c.req.parseBody().catch(() => ({}) as Record<string, unknown>);
      presented = typeof body._csrf === 'string' ? body._csrf : undefined;
    }
    const session = presentedToken(c);
    if (!presented || !session || !sameText(presented, csrfTokenFor(session)))
      return deny('missing or wrong CSRF token');
    return next();
  };
}

const ACTIONS = ['fork', 'retry', 'cancel', 'publish', 'send-back'] as const;
type ActionName = (typeof ACTIONS)[number];
type Outcome = { status: 200 | 400 | 404 | 409 | 503; body: Record<string, unknown> };

/** Input of a fork, from JSON or a form: unknown fields and bad types are refused by name. */
function forkInput(
  body: Record<string, unknown>,
): { at: number; brief?: string; model?: string; cancelSource: boolean } | string {
  const unknown = Object.keys(body).filter((k) => !FORK_FIELDS.has(k) && k !== '_csrf');
  if (unknown.length) return `unknown field(s): ${unknown.join(', ')}`;
  const at = typeof body.at === 'string' && /^\d+$/.test(body.at) ? Number(body.at) : body.at;
  if (typeof at !== 'number' || !Number.isInteger(at) || at < 1) return 'at: must be a checkpoint number (1, 2, …)';
  const text = (name: 'brief' | 'model') => {
    const v = body[name];
    if (v === undefined || v === '') return undefined;
    if (typeof v !== 'string') return null;
    return v;
  };
  const brief = text('brief');
  const model = text('model');
  if (brief === null) return 'brief: must be a string';
  if (model === null) return 'model: must be a string';
  const cs = body.cancelSource;
  const cancelSource = cs === true || cs === 'true' || cs === 'on' || cs === '1';
  if (cs !== undefined && typeof cs !== 'boolean' && typeof cs !== 'string') return 'cancelSource: must be a boolean';
  return { at, brief, model, cancelSource };
}

function failure(err: unknown, log: Logger): Outcome {
  if (err instanceof EchodoError) {
    if (err.code === 'run_not_found') {
      // A missing checkpoint of a visible run says which; a run not visible is just not found.
      return {
        status: 404,
        body: err.message.includes('checkpoint') ? { error: 'not_found', message: err.message } : NOT_FOUND,
      };
    }
    if (err.code === 'invalid_job') return { status: 400, body: { error: 'bad_request', message: err.message } };
    if (err.code === 'action_refused') return { status: 409, body: { error: 'conflict', message: err.message } };
  }
  log.error({ error: errorMessage(err) }, 'operator action failed');
  throw err;
}

/** Mounts the routes; close() closes the queue this made (one given in deps is the caller's). */
export function mountActionRoutes(app: Hono<McEnv>, deps: ActionDeps): { close(): Promise<void> } {
  const { db, log } = deps;
  const api = requirePrincipal(db.admin, { surface: 'api', need: 'workspace' });
  const pages = requirePrincipal(db.admin, { surface: 'html', need: 'workspace' });
  let made: JobQueue | undefined;
  const queueOf = (): JobQueue =>
    deps.queue ?? (made ??= createQueue({ config: deps.config!, db, workerId: `mission-control-${process.pid}` }));

  async function act(
    c: McContext,
    action: ActionName,
    body: Record<string, unknown>,
    surface: 'api' | 'panel',
  ): Promise<Outcome> {
    if (!deps.config)
      return { status: 503, body: { error: 'unavailable', message: 'actions need the worker configuration' } };
    const workspaceId = workspaceOf(c);
    const agentRunId = c.req.param('agentRunId')!;
    const by = actorOf(c, surface);
    try {
      if (action === 'cancel') {
        const answer = await requestCancel(db, workspaceId, agentRunId, by, {
          repoRoot: deps.config.WORKER_REPO_ROOT,
          log,
        });
        return { status: 200, body: { ...answer } };
      }
      if (action === 'publish')
        return { status: 200, body: { ...(await publishRun(db, { workspaceId, agentRunId, by })) } };
      if (action === 'send-back') {
        const unknown = Object.keys(body).filter((k) => k !== 'note' && k !== '_csrf');
        const problem = unknown.length ? `unknown field(s): ${unknown.join(', ')}` : noteProblem(body.note);
        if (problem) return { status: 400, body: { error: 'bad_request', message: problem } };
        const answer = await sendBackRun(db, queueOf(), { workspaceId, agentRunId, note: String(body.note), by });
        return {
          status: 200,
          body: { agentRunId: answer.agentRunId, jobId: answer.jobId, outcome: answer.outcome, status: 'queued' },
        };
      }
      if (action === 'retry') {
        const answer = await retryRun(db, queueOf(), { workspaceId, agentRunId });
        return {
          status: 200,
          body: { agentRunId: answer.agentRunId, jobId: answer.jobId, outcome: answer.outcome, status: 'queued' },
        };
      }
      const input = forkInput(body);
      if (typeof input === 'string') return { status: 400, body: { error: 'bad_request', message: input } };
      const answer = await forkRun(
        { db, queue: queueOf(), config: deps.config, log },
        { workspaceId, agentRunId, ...input, by },
      );
      return { status: 200, body: { ...answer, status: 'queued' } };
    } catch (err) {
      return failure(err, log);
    }
  }

  // ------------------------------------------------------------------ JSON
  for (const action of ACTIONS) {
    app.post(`/api/runs/:agentRunId/${action}`, api, mayWrite('api'), async (c) => {
      let body: Record<string, unknown> = {};
      const length = Number(c.req.header('content-length') ?? 0);
      if (length > MAX_BODY_BYTES)
        return c.json({ error: 'payload_too_large', message: `body over ${MAX_BODY_BYTES} bytes` }, 413);
      const text = await c.req.text();
      if (text.length > MAX_BODY_BYTES)
        return c.json({ error: 'payload_too_large', message: `body over ${MAX_BODY_BYTES} bytes` }, 413);
      if (text.trim()) {
        try {
          const parsed: unknown = JSON.parse(text);
          if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
          body = parsed as Record<string, unknown>;
        } catch {
          return c.json({ error: 'bad_request', message: 'the body must be a JSON object' }, 400);
        }
      }
      const outcome = await act(c, action, body, 'api');
      return c.json(outcome.body, outcome.status);
    });
  }

  app.get('/api/runs/:agentRunId/checkpoints/:seq/diff', api, async (c) => {
    const diff = await loadDiff(c);
    return diff ? c.json(diff) : c.json(NOT_FOUND, 404);
  });

  // ------------------------------------------------------------------ pages
  app.get('/runs/:agentRunId/checkpoints/:seq', pages, async (c) => {
    const diff = await loadDiff(c);
    const who = `workspace ${workspaceOf(c)}`;
    if (!diff)
      return sendPage(
        c,
        { title: 'Not found', who, content: messageContent('Not found', 'checkpoint not found') },
        404,
      );
    const run = await withWorkspace(db.app, workspaceOf(c), (tx) => runOverview(tx, diff.agentRunId));
    const place = run && { convoyId: run.convoyId, lastSeq: run.lastSeq ?? diff.seq };
    return sendPage(c, {
      title: `checkpoint ${diff.seq} · run ${diff.agentRunId}`,
      who,
      content: diffPageContent(diff, place),
    });
  });

  app.post('/runs/:agentRunId/actions/:action', pages, mayWrite('html'), async (c) => {
    const action = ACTIONS.find((a) => a === c.req.param('action'));
    if (!action) return c.json({ error: 'not_found', message: 'no such action' }, 404);
    const form = (await c.req.parseBody()) as Record<string, unknown>;
    const runId = c.req.param('agentRunId');
    if (action === 'cancel' && !isConfirmed(form)) {
      return sendConfirmation(c, `workspace ${workspaceOf(c)}`, {
        title: `Cancel run ${runId}?`,
        consequence:
          'The worker stops it before its next tool call; its checkpoints and branch are kept. A cancelled run cannot be resumed.',
        action: `/runs/${encodeURIComponent(runId)}/actions/cancel`,
        csrf: pageCsrfToken(c) ?? '',
        back: `/runs/${encodeURIComponent(runId)}`,
        button: 'Yes, cancel the run',
      });
    }
    if (action === 'fork' && !isConfirmed(form)) {
      const preview = await previewFork(c, runId, form);
      if (preview) return preview;
    }
    if ((action === 'publish' || action === 'send-back') && !isConfirmed(form)) {
      const preview = await previewReview(c, runId, action, form);
      if (preview) return preview;
    }
    // The confirmation's own field is not the action's: a fork refuses fields it does not know.
    const { confirmed: _confirmed, ...fields } = form;
    const outcome = await act(c, action, fields, 'panel');
    if (outcome.status !== 200) {
      return sendPage(
        c,
        {
          title: 'Refused',
          who: `workspace ${workspaceOf(c)}`,
          content: messageContent(`${action} refused`, String(outcome.body.message)),
        },
        outcome.status,
      );
    }
    const target = action === 'fork' ? String(outcome.body.agentRunId) : runId;
    return c.redirect(`/runs/${encodeURIComponent(target)}`, 303);
  });

  /** The fork's confirmation: what differs between checkpoint `at` and the tip; undefined when `at` is not there. */
  async function previewFork(
    c: McContext,
    runId: string,
    form: Record<string, unknown>,
  ): Promise<Response | undefined> {
    const at = Number(form.at);
    if (!Number.isInteger(at) || at < 1) return undefined; // the action itself answers with the reason
    const repoRoot = deps.config?.WORKER_REPO_ROOT;
    const point = await withWorkspace(db.app, workspaceOf(c), (tx) => loadForkPoint(tx, runId, at, repoRoot));
    if (!point) return undefined;
    const fields: Record<string, string> = {};
    for (const name of ['at', 'brief', 'model', 'cancelSource']) {
      if (typeof form[name] === 'string') fields[name] = form[name];
    }
    const rewind = form.cancelSource === 'true';
    return sendConfirmation(c, `workspace ${workspaceOf(c)}`, {
      title: rewind ? `Rewind run ${runId} to checkpoint ${at}?` : `Fork run ${runId} at checkpoint ${at}?`,
      consequence: `A new run starts from checkpoint ${at} on its own branch and worktree.${
        rewind ? ' This run is cancelled.' : ''
      }`,
      details: forkPreviewContent(await forkPreview(point), rewind),
      action: `/runs/${encodeURIComponent(runId)}/actions/fork`,
      csrf: pageCsrfToken(c) ?? '',
      back: `/runs/${encodeURIComponent(runId)}`,
      button: rewind ? 'Yes, rewind' : 'Yes, fork',
      fields,
    });
  }

  /** Publish's and Send back's confirmation: the files as they stand; undefined when the action itself answers. */
  async function previewReview(
    c: McContext,
    runId: string,
    action: 'publish' | 'send-back',
    form: Record<string, unknown>,
  ): Promise<Response | undefined> {
    if (action === 'send-back' && noteProblem(form.note)) return undefined; // refused with the reason
    const review = await withWorkspace(db.app, workspaceOf(c), (tx) => docReview(tx, runId, FILES_IN_EVENT));
    if (review?.brief.status !== 'doc_review') return undefined;
    const publish = action === 'publish';
    const note = publish ? '' : html`<p>Note: <q class="brief" data-testid="confirm-note">${String(form.note)}</q></p>`;
    return sendConfirmation(c, `workspace ${workspaceOf(c)}`, {
      title: publish ? `Publish the docs of run ${runId}?` : `Send run ${runId} back?`,
      consequence: publish
        ? `Brief ${review.brief.briefId} becomes published with these ${review.total} file(s) as they are now.`
        : `The note is appended to the brief and the run is retried from its last checkpoint to work on it; ` +
          `brief ${review.brief.briefId} comes back to review when it finishes.`,
      details: html`${note}${reviewFilesList(review.files, review.total, 'confirm-files')}`,
      action: `/runs/${encodeURIComponent(runId)}/actions/${action}`,
      csrf: pageCsrfToken(c) ?? '',
      back: `/runs/${encodeURIComponent(runId)}`,
      button: publish ? 'Yes, publish' : 'Yes, send it back',
      fields: publish ? {} : { note: String(form.note) },
    });
  }

  async function loadDiff(c: McContext) {
    const seq = Number(c.req.param('seq'));
    if (!Number.isInteger(seq) || seq < 1) return undefined;
    const source = await withWorkspace(db.app, workspaceOf(c), (tx) =>
      loadDiffSource(tx, c.req.param('agentRunId')!, seq),
    );
    if (!source?.row.commit_oid) return undefined;
    const repoPath = source.run.job.repoPath ?? deps.config?.WORKER_REPO_ROOT;
    if (!repoPath) return undefined;
    return checkpointDiff(repoPath, source);
  }

  return { close: async () => made?.close() };
}
