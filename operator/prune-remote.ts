// A prune's first step, with WORKER_CHECKPOINT_REMOTE set (docs/checkpoints.md "Retention on the
// remote"): each pruned run's notes ref there keeps only the kept checkpoints' notes, or with
// branch removal its branch and notes ref go. One `git ls-remote` for every run, the kept rows read
// once per workspace, then one push per run. A run whose refs could not be pruned is pending: its
// rows stay for the next prune (operator/prune-runs.ts).
import { existsSync } from 'node:fs';
import { redactString } from '../core/redact.ts';
import type { CheckpointRow } from '../store/checkpoints.ts';
import type { Database } from '../store/connection.ts';
import { keptCheckpoints } from '../store/retention.ts';
import { withWorkspace } from '../store/workspace.ts';
import { faultPoint } from '../worker/faults.ts';
import { runGit } from '../worker/git/run-git.ts';
import { runNotesRef } from '../worker/remote/push.ts';
import { pruneRemoteRefs, remoteRefs, type RemotePrunePlan } from '../worker/remote/retention.ts';
import type { PrunedRuns, PruneSteps, RunPrune } from './prune-runs.ts';

/** The runs pruned on the remote (or with nothing to change there); the others are added to `out.pending`. */
export async function pruneOnRemote(
  db: Database,
  plans: RunPrune[],
  steps: PruneSteps,
  out: PrunedRuns,
): Promise<RunPrune[]> {
  const wanting = plans.filter((p) => p.run.branch && (p.rows > 0 || p.deleteBranch));
  if (!wanting.length) return plans;
  const failed = new Set<RunPrune>();
  const pending = (plan: RunPrune, reason: string) => {
    failed.add(plan);
    out.pending.push({ agentRunId: plan.run.id, reason });
    const what = `${steps.who}: the run's refs on the checkpoint remote could not be pruned; its rows wait for the next`;
    steps.log.warn({ agentRunId: plan.run.id, reason }, what);
  };
  const names = wanting.flatMap((p) => [
    ...(p.deleteBranch ? [`refs/heads/${p.run.branch}`] : []),
    runNotesRef(p.workspaceId, p.run.id),
  ]);
  const cwd = steps.repoRoot && existsSync(steps.repoRoot) ? steps.repoRoot : process.cwd();
  let present: Map<string, string>;
  try {
    present = await remoteRefs(cwd, steps.remote!, names);
  } catch (err) {
    const reason = redactString((err as Error).message);
    steps.log.warn({ error: reason }, `${steps.who}: the checkpoint remote cannot be reached; its runs wait`);
    for (const plan of wanting) pending(plan, reason);
    return plans.filter((p) => !failed.has(p));
  }
  const specs = wanting.map((plan) => ({ plan, spec: remoteSpec(plan, steps, present) }));
  const rewrites = specs.filter(({ spec }) => !spec.deleteBranch && changes(spec).length > 0);
  const kept = await keptRows(db, rewrites, steps);
  for (const { plan, spec } of specs) {
    const change = changes(spec);
    if (!change.length) continue;
    if (!plan.repoPath || !existsSync(plan.repoPath)) {
      pending(plan, `no local repository at ${plan.repoPath ?? '(unset)'} to push from`);
      continue;
    }
    if (steps.dryRun) {
      out.remoteRefsUpdated.push(...change.map((c) => `${c.ref} -> ${c.to}`));
      continue;
    }
    faultPoint('before-remote-prune');
    try {
      const result = await pruneRemoteRefs({ ...spec, repoPath: plan.repoPath, kept: kept.get(plan.run.id) ?? [] });
      // Killed here: the remote is pruned, the rows not yet; the run is still prunable and the next
      // prune does it again (the same kept notes, or refs already gone: nothing to push).
      faultPoint('after-remote-prune');
      out.remoteRefsUpdated.push(...result.updated);
      // This host's copy of the run's notes ref follows the remote (a later push of it fast-forwards).
      if (result.notesCommit) await setLocalRef(plan.repoPath, spec.notesRef, result.notesCommit);
    } catch (err) {
      pending(plan, redactString((err as Error).message));
    }
  }
  return plans.filter((p) => !failed.has(p));
}

type RemoteSpec = Omit<RemotePrunePlan, 'repoPath' | 'kept'>;

function remoteSpec(plan: RunPrune, steps: PruneSteps, present: Map<string, string>): RemoteSpec {
  return {
    remote: steps.remote!,
    notesRef: runNotesRef(plan.workspaceId, plan.run.id),
    branch: plan.run.branch!,
    rewriteNotes: plan.rows > 0,
    deleteBranch: plan.deleteBranch,
    present,
  };
}

/** What a push changes on the remote: the refs deleted, or the notes ref rewritten to the kept notes. */
function changes(spec: RemoteSpec): { ref: string; to: string }[] {
  if (spec.deleteBranch) {
    const refs = [`refs/heads/${spec.branch}`, spec.notesRef].filter((r) => spec.present.has(r));
    return refs.map((ref) => ({ ref, to: 'deleted' }));
  }
  return spec.rewriteNotes && spec.present.has(spec.notesRef)
    ? [{ ref: spec.notesRef, to: "(the kept checkpoint's note only)" }]
    : [];
}

/** The kept rows of the runs whose notes ref is rewritten: one query per workspace. */
async function keptRows(db: Database, specs: { plan: RunPrune }[], steps: PruneSteps) {
  const kept = new Map<string, CheckpointRow[]>();
  if (steps.dryRun) return kept;
  const byWorkspace = new Map<string, string[]>();
  for (const { plan } of specs)
    byWorkspace.set(plan.workspaceId, [...(byWorkspace.get(plan.workspaceId) ?? []), plan.run.id]);
  for (const [workspaceId, ids] of byWorkspace) {
    const rows = await withWorkspace(db.app, workspaceId, (tx) => keptCheckpoints(tx, ids, steps.keep));
    for (const row of rows) kept.set(row.agent_run_id, [...(kept.get(row.agent_run_id) ?? []), row]);
  }
  return kept;
}

/** Moves this host's copy of a ref, when it has one, to `oid`. */
async function setLocalRef(repoPath: string, ref: string, oid: string): Promise<void> {
  const exists = await runGit(repoPath, ['rev-parse', '--verify', '--quiet', ref], { allowExitCodes: [1] });
  if (exists.exitCode === 0) await runGit(repoPath, ['update-ref', ref, oid]);
}
