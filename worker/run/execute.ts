// One delivery, start to finish: validate → claim → the run's reads (one transaction, while a
// resume's git status, branch check and cross-host fetch already run) → model → worktree (prepare-tree.ts:
// made, reused, or verified and repaired on resume) → session → outcome. An error here fails
// this run with a reason; it never escapes to kill the daemon.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { Config } from '../../core/config.ts';
import type { Database } from '../../store/connection.ts';
import { runManifest } from '../../store/checkpoints.ts';
import { appendEvent, getRun, completeRun, failRun, requeueRun, type RunRow } from '../../store/runs.ts';
import { apiKeyEnvVars, modelProvider } from '../../store/settings-lookup.ts';
import { workspaceKeyGrants } from '../../store/grants.ts';
import { assertRepoGranted, repoNeedingGrant } from './repo-access.ts';
import { inWorkspace } from '../../store/workspace.ts';
import { isTransientDbError } from '../../store/transient-retry.ts';
import { EchodoError, errorMessage, LeaseLostError, toEchodoError } from '../../core/errors.ts';
import { faultPoint } from '../faults.ts';
import { resolveHarnessForJob } from './harnesses.ts';
import { parseRawJob, type Job } from '../../core/job.ts';
import { Lease } from './lease.ts';
import type { Logger } from '../log.ts';
import { isReplayModel, resolveModel } from '../models/resolve.ts';
import { parseKeyVarGlobs } from '../../core/key-vars.ts';
import type { Delivery, JobQueue } from '../queue/types.ts';
import { redactString, registerSecretsFromEnv } from '../../core/redact.ts';
import { TouchTracker } from '../checkpoints/tracker.ts';
import { loadResumeChain } from '../checkpoints/resume-chain.ts';
import { stateFromChain } from '../checkpoints/state.ts';
import { checkpointWriterFor } from '../checkpoints/writer.ts';
import { checkRecordedBranch, prefetchStatus, prepareTree } from './prepare-tree.ts';
import { admitDelivery } from './claim.ts';
import { runSession } from './session.ts';
import { budgetGuard } from './budget.ts';
import { exhaustRun } from '../../store/budget.ts';
import { remoteAgentModel } from '../adapters/index.ts';
import type { CheckpointState } from '../checkpoints/state.ts';
import { acquireTree } from '../tree/registry.ts';
import { sandboxFor, sandboxOptionsFromConfig } from '../sandbox/index.ts';
import { finishCancelledRun } from './cancelled.ts';
import { forkAgentState, forkStartState } from './fork-start.ts';
import { endsInReview, enterDocReview } from './doc-review.ts';
import { CheckpointRemoteError, RemotePusher, runNotesRef } from '../remote/push.ts';
import { discardPrefetch, finishMirror, prefetchRun, type PrefetchedRun } from '../remote/resume.ts';
import { inSpan } from '../tracing.ts';

/** `given_up`: the lease lapsed while Postgres was unreachable; `lease_lost`: this process is suspect. */
export type JobResult = 'completed' | 'failed' | 'released' | 'skipped' | 'dead_lettered' | 'given_up' | 'lease_lost';

export interface JobDeps {
  config: Config;
  db: Database;
  queue: JobQueue;
  workerId: string;
  log: Logger;
  shutdown: AbortSignal;
}

export async function executeDelivery(deps: JobDeps, delivery: Delivery): Promise<JobResult> {
  const { db, log } = deps;
  faultPoint('after-take');
  const parsed = parseRawJob(delivery.raw);
  if (!parsed.ok) return deadLetter(deps, delivery, `invalid job: ${parsed.problems.join('; ')}`);
  // A job pushed straight on the queue by an orchestrator is redacted like a dispatched one.
  const job = { ...parsed.job, brief: redactString(parsed.job.brief) };
  const scoped = inWorkspace(db.app, job.workspaceId, log);
  // New run, served, re-dispatched or refused: one decision (worker/run/admission.ts), claimed at once.
  const admitted = await admitDelivery(deps, delivery, job, parsed.agentRunIdGiven);
  if (admitted.kind === 'dead') return deadLetter(deps, delivery, admitted.reason, job);
  if (admitted.kind === 'skipped') return 'skipped';
  const { run } = admitted;
  const runLog = log.child({ workspaceId: run.workspace_id, agentRunId: run.id, attempt: run.attempt });
  const lease = new Lease(db.app, run.workspace_id, run.id, run.lease_epoch, {
    heartbeatMs: deps.config.WORKER_HEARTBEAT_MS,
    leaseMs: deps.config.WORKER_LEASE_MS,
    log: runLog,
  });
  lease.start();
  // From now on, while Postgres answers: the recorded branch is checked to be the run's own, and a
  // run last on another host has its checkpoints fetched from the remote, or its branch moved onto
  // this host's standby copy (worker/remote/resume.ts); however the run ends, the fetch leaves no ref behind.
  const runDeps = { ...deps, log: runLog };
  const branchOwned = checkRecordedBranch(runDeps, run);
  const prefetchedRun = prefetchRun(deps.config, run, branchOwned);
  try {
    const attempt = {
      'echodo.workspace_id': run.workspace_id,
      'echodo.agent_run_id': run.id,
      'echodo.attempt': run.attempt,
    };
    return await inSpan('echodo.run_attempt', attempt, async (span) => {
      const result = await executeRun(runDeps, run, lease, { run: prefetchedRun, branchOwned });
      span.setAttribute('echodo.result', result);
      return result;
    });
  } catch (err) {
    if (err instanceof LeaseLostError || lease.isLost) {
      const cause = lease.classifyLoss();
      if (cause === 'cut_off') {
        runLog.warn(
          { cause, error: errorMessage(err) },
          'lease lapsed while Postgres was unreachable: the run is given up',
        );
        return 'given_up';
      }
      runLog.warn({ cause, error: errorMessage(err) }, 'lease lost: this worker stops touching the run');
      return 'lease_lost';
    }
    if (isTransientDbError(err) || err instanceof CheckpointRemoteError) {
      // The database went away for longer than the retries: not the run's fault. Hand the run
      // back if we can; else the lease expires and the stall detector re-dispatches it.
      runLog.warn(
        { error: errorMessage(err) },
        err instanceof CheckpointRemoteError
          ? 'checkpoint remote unavailable; releasing the run at its last checkpoint'
          : 'database unavailable; releasing the run',
      );
      const released = await scoped((tx) =>
        requeueRun(tx, { agentRunId: run.id, leaseEpoch: run.lease_epoch, nextAttempt: false }),
      ).catch(() => undefined);
      if (released) await deps.queue.enqueue(released.job).catch(() => {});
      return 'released';
    }
    const e = toEchodoError(err);
    runLog.error({ code: e.code, error: e.message }, 'run failed');
    await scoped(async (tx) => {
      if (await failRun(tx, { agentRunId: run.id, leaseEpoch: run.lease_epoch, reason: `${e.code}: ${e.message}` })) {
        await appendEvent(tx, {
          convoyId: run.convoy_id,
          agentRunId: run.id,
          type: 'run_failed',
          metadata: { reason: e.message, code: e.code, attempt: run.attempt },
        });
      }
    }).catch((dbErr) =>
      runLog.error(
        { error: errorMessage(dbErr) },
        'could not record the failure; the stall detector will retry the run',
      ),
    );
    return 'failed';
  } finally {
    lease.stop();
    await discardPrefetch(prefetchedRun);
  }
}

async function executeRun(
  deps: JobDeps,
  run: RunRow,
  lease: Lease,
  started: { run?: PrefetchedRun; branchOwned?: Promise<void> },
): Promise<JobResult> {
  const { config, db, log } = deps;
  const job = run.job;
  const scoped = inWorkspace(db.app, run.workspace_id, log);
  // A resume's slowest read, `git status` of the worktree the row names on this host, starts now
  // and runs while Postgres answers (verify.ts uses it only if the row still names that path).
  // The repository first (worker/run/repo-access.ts): a job enqueued past dispatch, or a registration
  // revoked since, fails here with the reason before anything touches the repository.
  const repoReal = await repoNeedingGrant(job.repoPath, config.WORKER_REPO_ROOT);
  const prefetchedStatus = prefetchStatus(run, config);
  // Every read the run starts from, pipelined in one transaction: the harness, the API key
  // variables to redact, the last rows (a bounded tail, resume-chain.ts), the run's whole
  // manifest (for verification) and the model alias's provider row.
  const { harness, keyVars, chain, anchor, manifest, provider, keyGrants } = await scoped(async (tx) => {
    const [, harness, keyVars, tail, manifest, provider, keyGrants] = await Promise.all([
      repoReal === null ? undefined : assertRepoGranted(tx, job.repoPath!, repoReal),
      resolveHarnessForJob(tx, job, config),
      apiKeyEnvVars(tx),
      loadResumeChain(tx, run.id, config.WORKER_CHECKPOINT_HISTORY_LIMIT),
      runManifest(tx, run.id),
      !job.model || isReplayModel(job.model) ? undefined : modelProvider(tx, job.model),
      job.model && isReplayModel(job.model) ? [] : workspaceKeyGrants(tx),
    ]);
    return { harness, keyVars, ...tail, manifest, provider, keyGrants };
  });
  registerSecretsFromEnv(process.env, harness.keyEnvVar ? [...keyVars, harness.keyEnvVar] : keyVars);
  const resuming = chain.length > 0 || run.attempt > 1 || run.worktree_path !== null || job.resumeFromCheckpoint;
  // The model first: a run with an unknown model alias fails before any worktree is made.
  // A remote adapter's agent has its own model (worker/adapters/); its rounds run in the same loop.
  if (harness.adapter === 'minimal' && !job.model) {
    throw new EchodoError(
      'model_unknown',
      `the job names no model, and harness ${harness.alias} runs the worker's own loop`,
    );
  }
  let state: CheckpointState | undefined;
  const remoteAgent =
    harness.adapter !== 'minimal'
      ? remoteAgentModel(harness, {
          agentRunId: run.id,
          attempt: run.attempt,
          history: () => state?.history ?? [],
          nextRound: () => (state?.step ?? 0) + 1,
          // A fork's first attempt: its source's agent state at the fork's checkpoint.
          resumed: chain.length ? chain.at(-1)?.agent_state : forkAgentState(run.fork_seed),
          keyGrant: keyGrants.find((g) => g.variable === harness.keyEnvVar),
          keyVarGlobs: parseKeyVarGlobs(config.WORKER_PROVIDER_KEY_VARS),
        })
      : undefined;
  const { model, description } =
    remoteAgent ??
    (await resolveModel({
      model: job.model ?? '',
      lookupProvider: async (alias) => (alias === job.model ? provider : scoped((tx) => modelProvider(tx, alias))),
      startAt: chain.at(-1)?.step ?? run.fork_seed?.step ?? 0, // a fork continues after its source's step
      signal: deps.shutdown,
      keyVarGlobs: parseKeyVarGlobs(config.WORKER_PROVIDER_KEY_VARS),
      replayDir: config.WORKER_REPLAY_DIR,
      lookupKeyGrant: async (variable) => keyGrants.find((g) => g.variable === variable),
    }));
  if (run.cancel_requested_at) {
    // Asked while nobody could act on it (its worker died after the request): cancelled at once.
    await finishCancelledRun({
      db,
      run,
      by: run.cancel_requested_by ?? 'unknown',
      seq: chain.at(-1)?.checkpoint_seq ?? 0,
      step: run.step,
      repoPath: job.repoPath ?? config.WORKER_REPO_ROOT,
      worktreePath: run.worktree_path,
      log,
    });
    return 'released';
  }
  const { tree, baseOid, mirroring, notesOnRemote } = await prepareTree(
    deps,
    run,
    harness,
    chain,
    anchor,
    resuming,
    manifest,
    { ...started, status: prefetchedStatus },
  );

  // A fork's first attempt starts from its source's checkpoint (step, history, hash as anchor).
  state =
    chain.length || !run.fork_seed
      ? stateFromChain(chain, baseOid, config.WORKER_CHECKPOINT_HISTORY_LIMIT, manifest)
      : forkStartState(run.fork_seed, baseOid);
  // The run's tree process, kept for the whole attempt (every read, write and git call in the tree).
  const treeLease = await acquireTree(tree.root);
  const tracker = new TouchTracker(tree.root);
  tracker.start();
  try {
    log.info(
      { harness: harness.alias, model: description, step: state.step, seq: state.seq, root: tree.root },
      resuming ? 'run resumed' : 'run started',
    );
    // Many hosts: every checkpoint commit on WORKER_CHECKPOINT_REMOTE before its row (worker/remote/push.ts).
    const remoteNotesRef = runNotesRef(run.workspace_id, run.id);
    const remote =
      config.WORKER_CHECKPOINT_REMOTE && tree.git
        ? {
            notesRef: remoteNotesRef,
            pusher: new RemotePusher({
              cwd: tree.root,
              remote: config.WORKER_CHECKPOINT_REMOTE,
              branch: tree.git.branch,
              notesRef: remoteNotesRef,
              assertHeld: () => lease.assertHeld(),
              log,
              timeoutMs: config.WORKER_REMOTE_TIMEOUT_MS,
            }),
          }
        : undefined;
    const identity = {
      workspaceId: run.workspace_id,
      agentRunId: run.id,
      convoyId: run.convoy_id,
      briefId: run.brief_id,
      attempt: run.attempt,
    };
    const writer = checkpointWriterFor(
      config,
      {
        sql: db.app,
        run: identity,
        lease,
        tree,
        tracker,
        log,
        remote,
        agentState: remoteAgent && (() => remoteAgent.model.agentState()),
      },
      state,
    );
    // Notes a resume rewrote from Postgres (the latest one a kill kept off the remote) go out now;
    // not when they were all just fetched from it.
    if (remote && resuming && !notesOnRemote) await remote.pusher.pushNotes();
    const outcome = await runSession({
      model,
      harness,
      root: tree.root,
      roleId: job.roleId,
      brief: job.brief,
      rolePrompt: readRolePrompt(config.WORKER_REPO_ROOT, job.roleId),
      writer,
      tracker,
      lease,
      maxSteps: config.WORKER_MAX_TOOL_STEPS,
      checkpointEvery: config.WORKER_CHECKPOINT_EVERY_N_STEPS,
      contextRounds: config.WORKER_CONTEXT_ROUNDS,
      commandTimeoutMs: config.WORKER_COMMAND_TIMEOUT_MS,
      sandbox: harness.allowedCommands ? await sandboxFor(sandboxOptionsFromConfig(config)) : undefined,
      baseOid,
      shutdown: deps.shutdown,
      log,
      budget: await budgetGuard(scoped, run.id, job),
    });
    await finishMirror(mirroring); // never rejects (mirrorNotesLocally logs); before a cancel removes the worktree
    switch (outcome.kind) {
      case 'lease_lost':
        throw outcome.error;
      case 'cancelled': {
        await tracker.stop(); // before its worktree goes
        await finishCancelledRun({
          db,
          run,
          by: outcome.by,
          seq: state.seq,
          step: state.step,
          repoPath: job.repoPath ?? config.WORKER_REPO_ROOT,
          worktreePath: tree.git?.worktreePath ?? null,
          log,
        });
        return 'released';
      }
      case 'stopped': {
        const released = await scoped((tx) =>
          requeueRun(tx, { agentRunId: run.id, leaseEpoch: run.lease_epoch, nextAttempt: false }),
        );
        if (released) await deps.queue.enqueue(released.job);
        log.info(
          { step: state.step, seq: state.seq },
          'stopped on request: state checkpointed, run released to the queue',
        );
        return 'released';
      }
      case 'budget_exhausted': {
        const { exhausted } = outcome;
        await scoped(async (tx) => {
          if (!(await exhaustRun(tx, { agentRunId: run.id, leaseEpoch: run.lease_epoch }))) {
            throw new LeaseLostError(`run ${run.id}: lease lost before it stopped on its budget`);
          }
          await appendEvent(tx, {
            convoyId: run.convoy_id,
            agentRunId: run.id,
            type: 'run_budget_exhausted',
            metadata: { ...exhausted, seq: state!.seq, step: state!.step },
          });
        });
        log.warn(
          { ...exhausted, seq: state.seq, step: state.step },
          'budget reached: run stopped at its last checkpoint',
        );
        return 'released';
      }
      case 'finished': {
        await scoped(async (tx) => {
          if (
            !(await completeRun(tx, {
              agentRunId: run.id,
              leaseEpoch: run.lease_epoch,
              finalUsage: outcome.finalUsage,
            }))
          ) {
            // A retry after a lost connection: our first attempt may have completed it.
            const now = await getRun(tx, run.id);
            if (now?.status === 'completed' && now.lease_epoch === run.lease_epoch) return;
            throw new LeaseLostError(`run ${run.id}: lease lost before completion`);
          }
          await appendEvent(tx, {
            convoyId: run.convoy_id,
            agentRunId: run.id,
            type: 'role_complete',
            metadata: {
              harnessAlias: harness.alias,
              roleId: job.roleId,
              steps: state.step,
              checkpoints: state.seq,
              reason: outcome.reason,
              branch: tree.git?.branch ?? null,
            },
          });
          if (endsInReview(harness)) await enterDocReview(tx, run);
        });
        log.info(
          { steps: state.step, checkpoints: state.seq, seq: state.seq, reason: outcome.reason },
          'run completed',
        );
        return 'completed';
      }
    }
  } finally {
    await finishMirror(mirroring);
    await tracker.stop();
    treeLease.release();
  }
}

async function deadLetter(deps: JobDeps, delivery: Delivery, reason: string, job?: Job): Promise<JobResult> {
  deps.log.warn({ reason }, 'job dead-lettered');
  let ids: { workspaceId?: string; jobId?: string } = job ?? {};
  if (!job) {
    try {
      const raw = JSON.parse(delivery.raw) as Record<string, unknown>;
      ids = {
        workspaceId: typeof raw.workspaceId === 'string' ? raw.workspaceId : undefined,
        jobId: typeof raw.jobId === 'string' ? raw.jobId : undefined,
      };
    } catch {
      /* unreadable: no ids */
    }
  }
  // The queue records it (and, for the Postgres queue, fails the run so it is not taken again).
  try {
    await deps.queue.deadLetter(delivery.raw, reason, ids);
  } catch (err) {
    // Not recorded (the database away): hand the message back rather than strand it.
    await delivery.release?.().catch(() => {});
    throw err;
  }
  await delivery.ack();
  return 'dead_lettered';
}

function readRolePrompt(repoRoot: string, roleId: string): string | undefined {
  const file = path.join(repoRoot, 'roles', `${roleId}.md`);
  return existsSync(file) ? readFileSync(file, 'utf8').slice(0, 20_000) : undefined;
}
