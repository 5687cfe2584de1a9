// Fork: a new run that starts from checkpoint N of another run of the same workspace. It reads
// only committed checkpoints, so forking a running run is safe. The fork gets its own branch
// and worktree, made by its worker at N's commit (prepareWorktree with the commit as base, so
// the branch is created, and owned, by the fork); its model continues after N's step with N's
// history; its checkpoints start at 1 and its chain's anchor is N's hash, so the lineage
// verifies end to end. "Rewind" is a fork that also cancels the source.
import { randomUUID } from 'node:crypto';
import type { Config } from '../core/config.ts';
import type { Database } from '../store/connection.ts';
import { checkpointAt, checkpointChain, type CheckpointRow } from '../store/checkpoints.ts';
import { prunedBelow, recordForkAnchor, recordForkOrigin } from '../store/operator-actions.ts';
import { chainAnchors } from '../store/retention.ts';
import { appendEvent, getRun, recordRun, type RunRow } from '../store/runs.ts';
import { modelProvider } from '../store/settings-lookup.ts';
import { withWorkspace } from '../store/workspace.ts';
import { requestCancel, type CancelAnswer } from './cancel.ts';
import { refuseOverQuota } from '../worker/run/quota.ts';
import { actorLabel } from '../worker/run/cancelled.ts';
import type { ForkSeed } from '../worker/run/fork-start.ts';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { readCheckpointNote } from '../worker/checkpoints/notes.ts';
import { redactString } from '../core/redact.ts';
import { historyWindow } from '../worker/checkpoints/state.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { runGit } from '../worker/git/run-git.ts';
import { replayPathInside } from '../worker/models/replay-dir.ts';
import { branchName, parseJob, type Job } from '../core/job.ts';
import type { Logger } from '../worker/log.ts';
import type { JobQueue } from '../worker/queue/types.ts';

export interface ForkRequest {
  workspaceId: string;
  agentRunId: string;
  at: number;
  brief?: string;
  model?: string;
  cancelSource?: boolean;
  /** Who asked: 'cli', 'api:<tokenId>'. */
  by: string;
}

export interface ForkAnswer {
  jobId: string;
  agentRunId: string;
  branch: string;
  forkedFrom: { agentRunId: string; seq: number };
  sourceCancel?: CancelAnswer | { refused: string };
}

/** 'run_not_found' covers an unknown run, another workspace's run and a missing checkpoint alike. */
function noSuchCheckpoint(req: ForkRequest): EchodoError {
  return new EchodoError(
    'run_not_found',
    `run ${req.agentRunId} has no checkpoint ${req.at} in workspace ${req.workspaceId}`,
  );
}

export async function forkRun(
  deps: {
    db: Database;
    queue: JobQueue;
    config: Pick<
      Config,
      'WORKER_REPO_ROOT' | 'WORKER_NOTES_REF' | 'WORKER_CHECKPOINT_HISTORY_LIMIT' | 'WORKER_REPLAY_DIR'
    >;
    log: Logger;
  },
  req: ForkRequest,
): Promise<ForkAnswer> {
  const { db, config } = deps;
  if (!Number.isInteger(req.at) || req.at < 1)
    throw new EchodoError('invalid_job', `at: must be a checkpoint number (1, 2, …), got ${req.at}`);
  const source = await withWorkspace(db.app, req.workspaceId, async (tx) => {
    const run = await getRun(tx, req.agentRunId);
    if (!run) throw noSuchCheckpoint(req);
    await refuseOverQuota(tx); // a fork is a new run
    const row = await checkpointAt(tx, run.id, req.at);
    if (!row) {
      const keptFrom = await prunedBelow(tx, run.id);
      if (keptFrom !== undefined && req.at < keptFrom) {
        throw new EchodoError(
          'run_not_found',
          `checkpoint ${req.at} of run ${run.id} was pruned by retention (npm run prune keeps a finished run's last checkpoint, ${keptFrom} here, and an anchor); fork from checkpoint ${keptFrom} or later`,
        );
      }
      throw noSuchCheckpoint(req);
    }
    const chain = (await checkpointChain(tx, run.id)).filter((r) => r.checkpoint_seq <= req.at);
    const verdict = verifyChain(chain, await chainAnchors(tx, run.id));
    if (!verdict.ok)
      throw new EchodoError(
        'action_refused',
        `run ${run.id}'s checkpoint chain does not verify up to ${req.at}: ${verdict.problems.join('; ')}`,
      );
    // A replay transcript only from the operator's folder, checked before anything is recorded.
    if (req.model?.startsWith('replay:'))
      await replayPathInside(req.model.slice('replay:'.length), config.WORKER_REPLAY_DIR);
    if (req.model && !req.model.startsWith('replay:') && !(await modelProvider(tx, req.model))) {
      throw new EchodoError(
        'invalid_job',
        `model: "${req.model}" is neither replay:<path> nor a model alias of workspace ${req.workspaceId}`,
      );
    }
    return { run, row, history: historyWindow(chain, config.WORKER_CHECKPOINT_HISTORY_LIMIT) };
  });
  const { run, row, history } = source;
  if (!row.commit_oid || !run.branch) {
    throw new EchodoError(
      'action_refused',
      `run ${run.id} has no commits to fork from (a doc-writer run writes in the repo root)`,
    );
  }
  const repoPath = run.job.repoPath ?? config.WORKER_REPO_ROOT;
  const noteVerified = await verifyCommit(repoPath, config.WORKER_NOTES_REF, run, row);

  const forkId = randomUUID();
  const parsed = parseJob({
    jobId: `fork-${forkId}`,
    workspaceId: req.workspaceId,
    convoyId: run.convoy_id,
    briefId: run.brief_id,
    roleId: run.job.roleId,
    harnessAlias: run.harness_alias ?? run.job.harnessAlias,
    ...(run.job.repoPath ? { repoPath: run.job.repoPath } : {}),
    baseRef: run.job.baseRef,
    brief: req.brief ?? run.job.brief,
    model: req.model ?? run.job.model,
    agentRunId: forkId,
  });
  if (!parsed.ok) throw new EchodoError('invalid_job', parsed.problems.join('; '));
  const job: Job = { ...parsed.job, brief: redactString(parsed.job.brief) };
  const seed: ForkSeed = {
    step: row.step,
    hash: row.hash,
    commitOid: row.commit_oid,
    history,
    ...(row.agent_state ? { agentState: row.agent_state } : {}),
  };
  const by = actorLabel(req.by);
  const from = {
    agentRunId: run.id,
    seq: row.checkpoint_seq,
    hash: row.hash,
    commitOid: row.commit_oid,
    step: row.step,
  };

  await withWorkspace(db.app, req.workspaceId, async (tx) => {
    await recordRun(tx, job);
    await recordForkOrigin(tx, {
      agentRunId: forkId,
      fromRun: run.id,
      fromSeq: row.checkpoint_seq,
      baseOid: row.commit_oid!,
      seed,
    });
    await recordForkAnchor(tx, { agentRunId: forkId, hash: row.hash });
    await appendEvent(tx, {
      convoyId: run.convoy_id,
      agentRunId: forkId,
      type: 'run_forked',
      metadata: { role: 'fork', from, by, noteVerified, cancelSource: !!req.cancelSource },
    });
    await appendEvent(tx, {
      convoyId: run.convoy_id,
      agentRunId: run.id,
      type: 'run_forked',
      metadata: { role: 'source', fork: forkId, atSeq: row.checkpoint_seq, by, cancelSource: !!req.cancelSource },
    });
  });
  await deps.queue.enqueue(job);
  const answer: ForkAnswer = {
    jobId: job.jobId,
    agentRunId: forkId,
    branch: branchName(job.briefId, forkId),
    forkedFrom: { agentRunId: run.id, seq: row.checkpoint_seq },
  };
  if (req.cancelSource) {
    try {
      answer.sourceCancel = await requestCancel(db, req.workspaceId, run.id, req.by, {
        repoRoot: config.WORKER_REPO_ROOT,
        log: deps.log,
      });
    } catch (err) {
      // A finished source stays as it is: the rewind is then just a fork.
      answer.sourceCancel = { refused: errorMessage(err) };
    }
  }
  deps.log.info({ workspaceId: req.workspaceId, source: run.id, at: row.checkpoint_seq, fork: forkId }, 'run forked');
  return answer;
}

/**
 * Checkpoint N's commit must exist in the repo, be on the source's branch history, and carry a
 * note naming this row. A missing note is accepted (the latest checkpoint's note is mirrored
 * behind the run and may lag); a note that names something else is not.
 */
async function verifyCommit(repoPath: string, notesRef: string, run: RunRow, row: CheckpointRow): Promise<boolean> {
  const oid = row.commit_oid!;
  const exists = await runGit(repoPath, ['cat-file', '-e', `${oid}^{commit}`], { allowExitCodes: [1, 128] }).catch(
    () => ({ exitCode: 128 }),
  );
  if (exists.exitCode !== 0) {
    throw new EchodoError('action_refused', `checkpoint ${row.checkpoint_seq}'s commit ${oid} is not in ${repoPath}`);
  }
  const note = await readCheckpointNote(repoPath, notesRef, oid);
  if (!note) return false;
  if (note.agentRunId !== run.id || note.checkpointSeq !== row.checkpoint_seq || note.hash !== row.hash) {
    throw new EchodoError(
      'action_refused',
      `checkpoint ${row.checkpoint_seq}'s commit ${oid.slice(0, 12)} carries a note for run ${note.agentRunId} seq ${note.checkpointSeq} hash ${String(note.hash).slice(0, 12)}, not this checkpoint (hash ${row.hash.slice(0, 12)}): refusing to fork from it`,
    );
  }
  return true;
}
