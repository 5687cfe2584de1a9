// The integrity check: resume's verification, read-only, from any process. Every checkpoint note
// is audited against its row and its commit against the run's branch (notes-audit.ts), so a
// wrong note on an old checkpoint shows as drift too. The run's notes are read once, for the
// verification and the audit alike. The repair rewrites missing and wrong notes from Postgres and
// never touches the worktree; then only the notes it rewrote are read and judged again.
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Config } from '../core/config.ts';
import type { Database } from '../store/connection.ts';
import { checkpointChain, runManifest, type ManifestEntry } from '../store/checkpoints.ts';
import { chainAnchors } from '../store/retention.ts';
import { getRun } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { gitStatus, inspectRun, type Finding, type FindingKind } from '../worker/checkpoints/verify.ts';
import {
  auditFindings,
  auditNotes,
  auditRepaired,
  repairNotes,
  type NotesAudit,
} from '../worker/checkpoints/notes-audit.ts';
import { readRunNotes } from '../worker/checkpoints/note-lookup.ts';
import {
  inspectRemote,
  RemoteVerifyError,
  type RemoteFinding,
  type RemoteInspection,
} from '../worker/remote/verify.ts';
import type { GitResult } from '../worker/git/run-git.ts';
import { worktreePathFor } from '../worker/worktrees/worktree.ts';

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
  /** With repairNotes: the checkpoints whose notes were rewritten from Postgres, and those off the branch. */
  notesRepair?: { rewritten: number[]; offBranch: number[] };
}

export interface IntegrityOptions {
  /** Also compare with the checkpoint remote (WORKER_CHECKPOINT_REMOTE). */
  remote?: boolean;
  /** Rewrite the missing and wrong notes of checkpoint commits still on the branch from Postgres. */
  repairNotes?: boolean;
}

/** undefined when the run does not exist in that workspace (row-level security decides). */
export async function checkRunIntegrity(
  db: Database,
  config: Config,
  workspaceId: string,
  agentRunId: string,
  options: IntegrityOptions = {},
): Promise<IntegrityReport | undefined> {
  const first = await inspectIntegrity(db, config, workspaceId, agentRunId, options);
  if (!options.repairNotes || !first) return first && reportOf(first);
  if (!first.audit) return { ...reportOf(first), notesRepair: { rewritten: [], offBranch: [] } };
  const { repoPath, audit } = first.audit;
  const rewritten = await repairNotes(repoPath, config.WORKER_NOTES_REF, audit);
  // What is left is the drift a note cannot fix, and any note the repair did not make right.
  const after = rewritten.length
    ? { ...first, audit: { repoPath, audit: await auditRepaired(repoPath, config.WORKER_NOTES_REF, audit) } }
    : first;
  const offBranch = audit.offBranch.map((r) => r.checkpoint_seq);
  return { ...reportOf(after), notesRepair: { rewritten, offBranch } };
}

interface Inspected {
  /** The report without its findings. */
  base: Omit<IntegrityReport, 'intact' | 'findings'>;
  /** The verification's findings; its note findings give way to the audit's when it ran. */
  local: Finding[];
  remote: RemoteFinding[];
  notesRef: string;
  /** The notes audit, when it ran: what a repair works from. */
  audit?: { repoPath: string; audit: NotesAudit };
}

function reportOf(inspected: Inspected): IntegrityReport {
  const { base, local, remote, notesRef, audit } = inspected;
  // The audit's note findings cover every row (the verification reads only the latest note's text).
  const notes = audit
    ? [...local.filter((f) => !NOTE_KINDS.has(f.kind)), ...auditFindings(audit.audit, notesRef)]
    : local;
  const findings = [...notes, ...remote];
  const { remote: remoteInspection, manifest, ...head } = base;
  return {
    ...head,
    intact: findings.length === 0,
    findings,
    ...(remoteInspection ? { remote: remoteInspection } : {}),
    manifest,
  };
}

async function inspectIntegrity(
  db: Database,
  config: Config,
  workspaceId: string,
  agentRunId: string,
  options: IntegrityOptions,
): Promise<Inspected | undefined> {
  if (options.remote && !config.WORKER_CHECKPOINT_REMOTE)
    throw new RemoteVerifyError('--remote needs WORKER_CHECKPOINT_REMOTE (the checkpoint remote) to be set');
  // `git status` is the long pole: started on the worktree the run is expected to have while
  // Postgres answers, and used only if the row names that same path (inspectRun checks).
  const prefetchedStatus = guessStatus(config, workspaceId, agentRunId);
  // The four reads in one round trip (pipelined in the transaction); a missing run returns empty reads.
  const loaded = await withWorkspace(db.app, workspaceId, async (tx) => {
    const [run, chain, manifest, anchor] = await Promise.all([
      getRun(tx, agentRunId),
      checkpointChain(tx, agentRunId),
      runManifest(tx, agentRunId),
      chainAnchors(tx, agentRunId),
    ]);
    return run ? { run, chain, manifest, anchor } : undefined;
  });
  if (!loaded) {
    await prefetchedStatus?.result.catch(() => {});
    return undefined;
  }
  const { run, chain, manifest, anchor } = loaded;
  const repoPath = run.job.repoPath ?? config.WORKER_REPO_ROOT;
  const notesRef = config.WORKER_NOTES_REF;
  // Read once for the verification and the audit. Notes git cannot read leave the audit out, and
  // the verification asks git on its own (or returns before it waits for them: hence the catch).
  const notes = run.branch
    ? readRunNotes(
        repoPath,
        notesRef,
        chain.flatMap((row) => (row.commit_oid ? [row.commit_oid] : [])),
      )
    : undefined;
  notes?.catch(() => {});
  const audited =
    run.branch && notes
      ? auditNotes({ repoPath, branch: run.branch, chain, notes }).then(
          (audit) => ({ repoPath, audit }),
          () => undefined,
        )
      : undefined;
  const inspection = await inspectRun({
    run,
    chain,
    anchor,
    manifest,
    repoRoot: config.WORKER_REPO_ROOT,
    notesRef,
    prefetchedStatus,
    notes,
  });
  if (prefetchedStatus && prefetchedStatus.path !== run.worktree_path) await prefetchedStatus.result.catch(() => {});
  const remote = options.remote
    ? await inspectRemote({
        repoPath,
        remote: config.WORKER_CHECKPOINT_REMOTE!,
        run,
        chain,
      })
    : undefined;
  const audit = await audited;
  const latest = chain.at(-1);
  return {
    base: {
      workspaceId,
      agentRunId,
      status: run.status,
      checkpoints: chain.length,
      latestSeq: latest?.checkpoint_seq ?? null,
      commitOid: latest?.commit_oid ?? null,
      worktreePath: run.worktree_path,
      ...(remote ? { remote } : {}),
      manifest,
    },
    local: inspection.findings,
    remote: remote?.findings ?? [],
    notesRef,
    ...(audit ? { audit } : {}),
  };
}

const NOTE_KINDS: ReadonlySet<FindingKind> = new Set(['note_missing', 'note_mismatch']);

const PLAIN_ID = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** `git status` of the worktree the run would have (worktreePathFor), if that folder exists. */
function guessStatus(
  config: Config,
  workspaceId: string,
  agentRunId: string,
): { path: string; result: Promise<GitResult> } | undefined {
  if (!PLAIN_ID.test(workspaceId) || !PLAIN_ID.test(agentRunId)) return undefined;
  const guess = worktreePathFor(config.WORKER_WORKTREE_BASE, workspaceId, agentRunId);
  // Its .git file, or git would walk up and report on whatever repository holds the folder.
  if (!existsSync(path.join(guess, '.git'))) return undefined;
  const result = gitStatus(guess);
  result.catch(() => {}); // judged (or dropped) by inspectRun; never an unhandled rejection
  return { path: guess, result };
}
