// The run's working tree before its first tool call: for a code run a worktree on a branch it
// owns (made, taken from the spare, or on a resume verified against Postgres and the notes and
// repaired, fetched first from the checkpoint remote when the run was on another host); for a
// doc-writer run the repository root, verified on a resume. Then the worktree and, on a resume,
// its run_resumed event are recorded in one transaction fenced on the lease.
import { existsSync } from 'node:fs';
import type { ChainAnchor } from '../../core/checkpoint-hash.ts';
import type { Config } from '../../core/config.ts';
import { LeaseLostError, errorMessage } from '../../core/errors.ts';
import { checkpointChain, type CheckpointRow, type ManifestEntry } from '../../store/checkpoints.ts';
import type { Database } from '../../store/connection.ts';
import { claimBranch, ownBranchesAmong } from '../../store/branches.ts';
import { appendEvent, setRunWorkspace, type RunRow } from '../../store/runs.ts';
import { inWorkspace, withWorkspace } from '../../store/workspace.ts';
import { assertOwnBranch, chooseBranch, vetBaseRef, type ClaimBranch } from '../worktrees/branches.ts';
import { gitStatus, type PrefetchedStatus } from '../checkpoints/verify.ts';
import type { WorkingTree } from '../checkpoints/writer.ts';
import { faultPoint } from '../faults.ts';
import { workerMetrics, type ResumeKind } from '../metrics.ts';
import { recordSpan } from '../tracing.ts';
import type { Harness } from './harnesses.ts';
import type { Logger } from '../log.ts';
import {
  ensureLocalRepo,
  mirrorNotesLocally,
  prepareRemoteResume,
  scheduleNotesMirror,
  type NotesMirror,
  type PrefetchedRun,
} from '../remote/resume.ts';
import { verifyAndRepair } from '../checkpoints/resume.ts';
import { removeStaleTempFiles } from '../tools/temp-files.ts';
import { prepareWorktree, repoCommonDir, type PreparedWorktree } from '../worktrees/worktree.ts';

export interface TreeDeps {
  config: Config;
  db: Database;
  log: Logger;
}

/** `git status` of the run's recorded worktree, when it is on this host and there: for verifyAndRepair. */
export function prefetchStatus(run: RunRow, config: Config): PrefetchedStatus | undefined {
  const worktree = run.worktree_path;
  if (!worktree || !run.branch || (run.host_id && run.host_id !== config.WORKER_HOST_ID) || !existsSync(worktree))
    return undefined;
  const result = gitStatus(worktree);
  result.catch(() => {}); // unused when verification takes another path; its own reads then report
  return { path: worktree, result };
}

/**
 * The run's recorded branch is still its own (worker/worktrees/branches.ts), checked from the claim on, in
 * a transaction beside the run's reads: a cross-host resume moves the branch onto the standby's
 * copy as soon as this holds (worker/remote/resume.ts prefetchRun). None when the run has no branch yet
 * or its repository is not on this host: prepareTree checks then. Awaited by prepareTree (and by
 * the prefetch); its rejection is never left unhandled when neither runs (a run that fails first).
 */
export function checkRecordedBranch(deps: TreeDeps, run: RunRow): Promise<void> | undefined {
  const repoPath = run.job.repoPath ?? deps.config.WORKER_REPO_ROOT;
  if (!run.branch || !existsSync(repoPath)) return undefined;
  const branch = run.branch;
  const owned = repoCommonDir(repoPath).then((repoDir) => assertOwnBranch(branch, branchClaimer(deps, run, repoDir)));
  owned.catch(() => {});
  return owned;
}

/** Claims of the run's branches in the repository whose common git dir is repoDir (store/branches.ts). */
function branchClaimer(deps: TreeDeps, run: RunRow, repoDir: string): ClaimBranch {
  const scoped = inWorkspace(deps.db.app, run.workspace_id, deps.log);
  return (branch, mayCreate) => scoped((tx) => claimBranch(tx, { repoDir, branch, agentRunId: run.id, mayCreate }));
}

export async function prepareTree(
  deps: TreeDeps,
  run: RunRow,
  harness: Harness,
  chain: CheckpointRow[],
  anchor: readonly ChainAnchor[] | string | null,
  resuming: boolean,
  manifest?: ManifestEntry[],
  prefetched: { status?: PrefetchedStatus; run?: PrefetchedRun; branchOwned?: Promise<void> } = {},
): Promise<{ tree: WorkingTree; baseOid: string | null; mirroring?: NotesMirror; notesOnRemote?: boolean }> {
  const { config, db, log } = deps;
  const scoped = inWorkspace(db.app, run.workspace_id, log);
  const job = run.job;
  const began = performance.now();
  let resumed: ResumeEvent | undefined;
  let resumeKind: ResumeKind = 'same_host';
  let mirroring: NotesMirror | undefined;
  let notesOnRemote = false;
  if (!harness.needsWorktree) {
    const root = config.WORKER_REPO_ROOT;
    if (resuming) {
      // A write_file killed between its temp file and the rename leaves the temp behind.
      for (const prefix of harness.writePrefixes ?? ['']) await removeStaleTempFiles(root, prefix || '.');
      const report = await verifyAndRepair({
        run,
        chain,
        anchor,
        manifest,
        repoRoot: root,
        worktreeBase: config.WORKER_WORKTREE_BASE,
        notesRef: config.WORKER_NOTES_REF,
        log,
      });
      resumed = resumeEvent(
        run,
        report.fromSeq,
        report.findings.map((f) => f.detail),
        [],
      );
    }
    await recordWorkspace(deps, run, harness, null, resumed);
    if (resumed) countResume(resumed, 'same_host', began);
    return { tree: { root, git: null }, baseOid: null };
  }

  let worktree: PreparedWorktree;
  // Branch ownership (worker/worktrees/branches.ts): the run works only on a branch it owns.
  const repoPath = job.repoPath ?? config.WORKER_REPO_ROOT;
  // Many hosts: a host with no copy of the repository makes a partial clone of the checkpoint remote.
  const partialClone = config.WORKER_CHECKPOINT_REMOTE
    ? await ensureLocalRepo(repoPath, config.WORKER_CHECKPOINT_REMOTE, log)
    : false;
  const repoDir = await repoCommonDir(repoPath);
  const claim = branchClaimer(deps, run, repoDir);
  if (run.branch) await (prefetched.branchOwned ?? assertOwnBranch(run.branch, claim));
  if (resuming && run.worktree_path) {
    // With a checkpoint remote: fetched from it when the run was last on another host (worker/remote/resume.ts).
    const fromRemote = config.WORKER_CHECKPOINT_REMOTE
      ? await prepareRemoteResume({ config, run, chain, repoPath, prefetched: prefetched.run, log })
      : undefined;
    const report = await verifyAndRepair({
      run: fromRemote?.run ?? run,
      chain,
      anchor,
      manifest,
      repoRoot: config.WORKER_REPO_ROOT,
      worktreeBase: config.WORKER_WORKTREE_BASE,
      notesRef: fromRemote?.notesRef ?? config.WORKER_NOTES_REF,
      branchAt: fromRemote?.branchAt,
      prefetchedStatus: prefetched.status,
      log,
    });
    worktree = report.worktree!;
    notesOnRemote =
      !!fromRemote?.fetched && !report.findings.some((f) => f.kind === 'note_missing' || f.kind === 'note_mismatch');
    if (fromRemote) {
      // Every checkpoint's note under the local notes ref too (`git notes show` on this host): for
      // people, not for verification, so it is written while the run goes on, once the run is
      // under way (scheduleNotesMirror). Note writes are serialized per repository (notes.ts), and
      // the run waits for it before it ends. On every resume with a remote, not only after a
      // fetch: a note the resume rewrote from Postgres (a kill between the row and its notes) went
      // to the run's notes ref only, and a kill during an earlier mirror left this host's ref short.
      const wt = worktree;
      mirroring = scheduleNotesMirror(() =>
        scoped((tx) => checkpointChain(tx, run.id)).then(
          (all) => mirrorNotesLocally(wt.path, config.WORKER_NOTES_REF, all, log),
          (err) =>
            log.warn(
              { error: errorMessage(err) },
              'could not read the checkpoints to mirror their notes locally; continuing',
            ),
        ),
      );
    }
    log.info(
      { fromSeq: report.fromSeq, findings: report.findings, repairs: report.repairs },
      'worktree verified against Postgres and the git notes',
    );
    // aimedSpare: the worktree was the host's spare, aimed at the checkpoint ahead by the standby.
    const aimed = worktree.spareAimed ? { aimedSpare: true } : {};
    const fetched = fromRemote?.fetched && {
      ...fromRemote.fetched,
      ...(partialClone ? { partialClone: true } : {}),
      ...aimed,
    };
    resumed = resumeEvent(
      run,
      report.fromSeq,
      report.findings.map((f) => `${f.kind}: ${f.detail}`),
      report.repairs,
      fetched,
    );
    resumeKind = worktree.spareAimed
      ? 'spare'
      : fromRemote?.fetched
        ? 'remote'
        : report.repairs.length
          ? 'repaired'
          : 'same_host';
  } else {
    const knownBaseOid =
      run.base_oid ??
      (await vetBaseRef({
        repoPath,
        baseRef: job.baseRef,
        ownBranchesAmong: (names) => scoped((tx) => ownBranchesAmong(tx, repoDir, names)),
      }));
    const branch =
      run.branch ??
      (await chooseBranch({
        repoPath,
        workspaceId: run.workspace_id,
        briefId: run.brief_id,
        agentRunId: run.id,
        claim,
      }));
    worktree = await prepareWorktree({
      repoPath,
      worktreeBase: config.WORKER_WORKTREE_BASE,
      workspaceId: run.workspace_id,
      agentRunId: run.id,
      briefId: run.brief_id,
      baseRef: job.baseRef,
      knownBaseOid,
      branch,
      log,
    });
    if (worktree.created) {
      await scoped((tx) =>
        appendEvent(tx, {
          convoyId: run.convoy_id,
          agentRunId: run.id,
          type: 'worktree_created',
          metadata: { branch: worktree.branch, attempt: run.attempt },
        }),
      );
    }
  }
  faultPoint('before-branch-recorded');
  await recordWorkspace(deps, run, harness, worktree, resumed);
  if (resumed) countResume(resumed, resumeKind, began);
  return {
    tree: { root: worktree.path, git: { branch: worktree.branch, worktreePath: worktree.path } },
    baseOid: run.base_oid ?? worktree.baseOid,
    mirroring,
    notesOnRemote,
  };
}

type ResumeEvent = Record<string, unknown>;

/** A resume recorded: in the metrics by kind, and as a span from the start of the tree's preparation. */
function countResume(resumed: ResumeEvent, kind: ResumeKind, began: number): void {
  workerMetrics.resumes.inc({ kind });
  const attrs = { 'echodo.resume_kind': kind, 'echodo.from_seq': Number(resumed.fromSeq) };
  recordSpan('echodo.resume', attrs, began, performance.now());
}

function resumeEvent(
  run: RunRow,
  fromSeq: number,
  findings: string[],
  repairs: string[],
  fetched?: Record<string, unknown>,
): ResumeEvent {
  return { fromSeq, attempt: run.attempt, findings, repairs, recloned: false, ...fetched };
}

/**
 * The run's harness and adapter, its worktree (branch, path, base, host) and, on a resume, its
 * run_resumed event: one transaction, fenced on the lease epoch (recorded only by the lease holder).
 */
async function recordWorkspace(
  deps: TreeDeps,
  run: RunRow,
  harness: Pick<Harness, 'alias' | 'adapter'>,
  worktree: PreparedWorktree | null,
  resumed?: ResumeEvent,
): Promise<void> {
  const ok = await withWorkspace(deps.db.app, run.workspace_id, async (tx) => {
    const set = await setRunWorkspace(tx, {
      agentRunId: run.id,
      leaseEpoch: run.lease_epoch,
      harnessAlias: harness.alias,
      adapter: harness.adapter,
      branch: worktree?.branch ?? null,
      worktreePath: worktree?.path ?? null,
      baseOid: worktree?.baseOid ?? null,
      hostId: deps.config.WORKER_HOST_ID,
    });
    if (set && resumed)
      await appendEvent(tx, { convoyId: run.convoy_id, agentRunId: run.id, type: 'run_resumed', metadata: resumed });
    return set;
  });
  if (!ok) throw new LeaseLostError(`run ${run.id}: lease lost while preparing the ${worktree ? 'worktree' : 'run'}`);
}
