// Resume: verify the run's worktree against Postgres and the notes, repair what can be
// repaired, and hand back the state to continue from. Never a clone: a missing worktree is
// added again from the local repo's objects.
import { rm, unlink } from 'node:fs/promises';
import path from 'node:path';
import type { CheckpointRow, ManifestEntry } from '../../store/checkpoints.ts';
import type { RunRow } from '../../store/runs.ts';
import type { ChainAnchor } from '../../core/checkpoint-hash.ts';
import { EchodoError } from '../../core/errors.ts';
import { runGit } from '../git/run-git.ts';
import type { Logger } from '../log.ts';
import { noteOfRow, writeCheckpointNotes } from './notes.ts';
import { inspectRun, UNREPAIRABLE, type Finding, type PrefetchedStatus } from './verify.ts';
import { prepareWorktree, type PreparedWorktree } from '../worktrees/worktree.ts';

export interface ResumeReport {
  fromSeq: number;
  findings: Finding[];
  repairs: string[];
  worktree: PreparedWorktree | null;
}

export async function verifyAndRepair(args: {
  run: RunRow;
  chain: CheckpointRow[];
  anchor: readonly ChainAnchor[] | string | null;
  /** The run's manifest (store/checkpoints.ts runManifest): every file the run touched is verified. */
  manifest?: ManifestEntry[];
  repoRoot: string;
  worktreeBase: string;
  notesRef: string;
  /** The commit the caller just moved the run's branch onto (worker/remote/resume.ts): no lookup of it again. */
  branchAt?: string;
  /** `git status` of the recorded worktree, started by the caller while Postgres answered. */
  prefetchedStatus?: PrefetchedStatus;
  log: Logger;
}): Promise<ResumeReport> {
  const { run, chain, log } = args;
  const latest = chain.at(-1);
  const inspection = await inspectRun({
    run,
    chain,
    anchor: args.anchor,
    manifest: args.manifest,
    repoRoot: args.repoRoot,
    notesRef: args.notesRef,
    branchAt: args.branchAt,
    prefetchedStatus: args.prefetchedStatus,
  });
  const fatal = inspection.findings.filter((f) => UNREPAIRABLE.has(f.kind));
  if (fatal.length) {
    throw new EchodoError(
      'worktree_unrecoverable',
      `cannot resume run ${run.id}: ${fatal.map((f) => f.detail).join('; ')}`,
    );
  }
  const report: ResumeReport = {
    fromSeq: latest?.checkpoint_seq ?? 0,
    findings: inspection.findings,
    repairs: [],
    worktree: null,
  };
  if (!run.worktree_path || !run.branch) return report; // doc-writer: findings are reported, nothing to repair

  const kinds = new Set(inspection.findings.map((f) => f.kind));
  const target = inspection.targetOid!;
  const repoPath = run.job.repoPath ?? args.repoRoot;

  if (kinds.has('worktree_foreign')) {
    await rm(run.worktree_path, { recursive: true, force: true });
    report.repairs.push(`removed ${run.worktree_path}: it was not a worktree of ${repoPath}`);
  }
  const worktree = await prepareWorktree({
    repoPath,
    worktreeBase: args.worktreeBase,
    workspaceId: run.workspace_id,
    agentRunId: run.id,
    briefId: run.brief_id,
    baseRef: run.job.baseRef,
    knownBaseOid: run.base_oid,
    // The recorded branch and path: the run's own (run-job checked the branch's owner first).
    branch: run.branch,
    worktreePath: run.worktree_path,
    // A worktree made now (from the host's spare) is checked out at the checkpoint directly.
    checkoutOid: target ?? undefined,
    branchAt: args.branchAt,
    log,
  });
  report.worktree = worktree;
  // Half-made admin folders (a worker killed inside `git worktree add`), the run's own included.
  report.repairs.push(...worktree.repairs);
  if (worktree.created) {
    const at = target ? ` at checkpoint commit ${target.slice(0, 12)}` : '';
    const spare = worktree.spareAimed
      ? 'already checked out there (aimed by the remote standby)'
      : 'made with git worktree add';
    const how = worktree.fromSpare ? `; the host's spare worktree, ${spare}, taken` : '';
    report.repairs.push(`worktree re-added with git worktree add from ${repoPath}${at} (no clone${how})`);
  }

  if (kinds.has('stale_index_lock') && inspection.worktree?.gitDir) {
    // We hold the lease and the previous holder is fenced off: nobody else may be using this index.
    await unlink(path.join(inspection.worktree.gitDir, 'index.lock')).catch(() => {});
    report.repairs.push('removed the stale index.lock left by the killed worker');
  }
  if (kinds.has('wrong_branch')) {
    await runGit(worktree.path, ['symbolic-ref', 'HEAD', `refs/heads/${run.branch}`]);
    report.repairs.push(`put HEAD back on ${run.branch}`);
  }
  const drift = ['branch_moved', 'uncommitted_changes', 'file_changed', 'file_missing', 'wrong_branch'].some((k) =>
    kinds.has(k as never),
  );
  // A worktree made just now at the checkpoint commit is clean there: nothing to reset or clean.
  const madeAtTarget = worktree.created && !!target && worktree.headOid === target;
  if (drift || (worktree.created && !madeAtTarget)) {
    // Inside the worktree only: back to the last checkpoint, dropping the interrupted round.
    await runGit(worktree.path, ['reset', '--hard', '--quiet', target]);
    await runGit(worktree.path, ['clean', '-fd', '--quiet']);
    if (drift)
      report.repairs.push(
        `reset the worktree to checkpoint commit ${target.slice(0, 12)} and cleaned it (interrupted round discarded)`,
      );
  }
  if (inspection.notesToRewrite.length) {
    const rows = chain.filter((row) => row.commit_oid && inspection.notesToRewrite.includes(row.checkpoint_seq));
    try {
      await writeCheckpointNotes(
        worktree.path,
        args.notesRef,
        rows.map((row) => ({ commitOid: row.commit_oid!, note: noteOfRow(row) })),
      );
      report.repairs.push(
        `rewrote the git note(s) of checkpoint(s) ${inspection.notesToRewrite.join(', ')} from Postgres`,
      );
    } catch (err) {
      // The mirror never blocks the run: integrity-check keeps reporting it until a later write succeeds.
      log.warn({ error: (err as Error).message }, 'could not rewrite the git notes; continuing without them');
    }
  }
  return report;
}
