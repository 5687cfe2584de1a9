// The integrity check: resume's verification, read-only, from any process.
import type { Config } from '../core/config.ts';
import type { Database } from '../store/connection.ts';
import { checkpointChain, runManifest, type ManifestEntry } from '../store/checkpoints.ts';
import { anchorOf } from '../store/retention.ts';
import { getRun } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { inspectRun, type Finding } from './checkpoints/verify.ts';
import { inspectRemote, RemoteVerifyError, type RemoteFinding, type RemoteInspection } from './checkpoints/remote-verify.ts';

export interface IntegrityReport {
  workspaceId: string;
  agentRunId: string;
  status: string;
  checkpoints: number;
  latestSeq: number | null;
  commitOid: string | null;
  worktreePath: string | null;
  intact: boolean;
  findings: (Finding | RemoteFinding)[];
  /** With --remote: what the checkpoint remote holds for the run (its findings are in `findings`). */
  remote?: RemoteInspection;
  /** Every path the run ever touched, with its sha256 (null: deleted) and the checkpoint that last changed it. */
  manifest: ManifestEntry[];
}

/** undefined when the run does not exist in that workspace (row-level security decides). */
export async function checkRunIntegrity(
  db: Database,
  config: Config,
  workspaceId: string,
  agentRunId: string,
  options: { remote?: boolean } = {},
): Promise<IntegrityReport | undefined> {
  if (options.remote && !config.WORKER_CHECKPOINT_REMOTE) throw new RemoteVerifyError('--remote needs WORKER_CHECKPOINT_REMOTE (the checkpoint remote) to be set');
  const loaded = await withWorkspace(db.app, workspaceId, async (tx) => {
    const run = await getRun(tx, agentRunId);
    if (!run) return undefined;
    const [chain, manifest, anchor] = await Promise.all([checkpointChain(tx, agentRunId), runManifest(tx, agentRunId), anchorOf(tx, agentRunId)]);
    return { run, chain, manifest, anchor: anchor ?? null };
  });
  if (!loaded) return undefined;
  const { run, chain, manifest, anchor } = loaded;
  const inspection = await inspectRun({ run, chain, anchor, manifest, repoRoot: config.WORKER_REPO_ROOT, notesRef: config.WORKER_NOTES_REF });
  const remote = options.remote
    ? await inspectRemote({ repoPath: run.job.repoPath ?? config.WORKER_REPO_ROOT, remote: config.WORKER_CHECKPOINT_REMOTE!, run, chain })
    : undefined;
  const findings = [...inspection.findings, ...(remote?.findings ?? [])];
  const latest = chain.at(-1);
  return {
    workspaceId,
    agentRunId,
    status: run.status,
    checkpoints: chain.length,
    latestSeq: latest?.checkpoint_seq ?? null,
    commitOid: latest?.commit_oid ?? null,
    worktreePath: run.worktree_path,
    intact: findings.length === 0,
    findings,
    ...(remote ? { remote } : {}),
    manifest,
  };
}
