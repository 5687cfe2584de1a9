// What a fork (or a rewind) at checkpoint N changes, shown before it is made: the files that
// differ between N's commit and the run's newest checkpoint (what the new run starts without,
// and what a rewind leaves behind), and that the source branch is kept. Read-only git.
import { latestCheckpoint, checkpointAt } from '../store/checkpoints.ts';
import { getRun } from '../store/runs.ts';
import type { WorkspaceTx } from '../store/workspace.ts';
import { runGit } from '../worker/git/run-git.ts';

export interface ForkPreview {
  seq: number;
  tipSeq: number;
  branch: string | null;
  /** `M src/a.ts`-style lines (git diff --name-status), capped; null when git could not tell. */
  files: { status: string; path: string }[] | null;
}

const MAX_FILES = 200;
const OID = /^[0-9a-f]{40,64}$/;

interface ForkPoint {
  seq: number;
  tipSeq: number;
  branch: string | null;
  atOid: string | null;
  tipOid: string | null;
  repoPath: string | null;
}

/** The rows a preview needs, in the caller's workspace; undefined when the run or checkpoint is not there. */
export async function loadForkPoint(
  tx: WorkspaceTx,
  agentRunId: string,
  seq: number,
  repoRoot?: string,
): Promise<ForkPoint | undefined> {
  const run = await getRun(tx, agentRunId);
  const at = run && (await checkpointAt(tx, agentRunId, seq));
  const tip = at && (await latestCheckpoint(tx, agentRunId));
  if (!run || !at || !tip) return undefined;
  const repoPath = run.job.repoPath ?? repoRoot ?? null;
  return {
    seq,
    tipSeq: tip.checkpoint_seq,
    branch: run.branch,
    atOid: at.commit_oid,
    tipOid: tip.commit_oid,
    repoPath,
  };
}

export async function forkPreview(point: ForkPoint): Promise<ForkPreview> {
  const { seq, tipSeq, branch } = point;
  if (point.atOid === point.tipOid) return { seq, tipSeq, branch, files: [] };
  const readable = point.repoPath && point.atOid && point.tipOid && OID.test(point.atOid) && OID.test(point.tipOid);
  if (!readable) {
    return { seq, tipSeq, branch, files: null };
  }
  try {
    const args = ['diff', '--name-status', '--no-renames', point.atOid!, point.tipOid!];
    const diff = await runGit(point.repoPath!, args, {
      allowExitCodes: [128],
      timeoutMs: 10_000,
    });
    if (diff.exitCode !== 0) return { seq, tipSeq, branch, files: null };
    const files = diff.stdout
      .split('\n')
      .filter(Boolean)
      .slice(0, MAX_FILES)
      .map((line) => {
        const [status = '', ...rest] = line.split('\t');
        return { status, path: rest.join('\t') };
      });
    return { seq, tipSeq, branch, files };
  } catch {
    return { seq, tipSeq, branch, files: null };
  }
}
