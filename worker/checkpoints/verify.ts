// Verification of a run's working tree against Postgres (the truth) and the git-notes mirror.
// Read-only: integrity-check prints the findings, resume repairs what it can (resume.ts).
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { CheckpointRow, ManifestEntry } from '../../store/checkpoints.ts';
import type { RunRow } from '../../store/runs.ts';
import { resolveCommit, runGit, type GitResult } from '../git/run-git.ts';
import { inspectWorktree, repoCommonDir, type WorktreeState } from '../worktrees/worktree.ts';
import { describeFiles } from './content.ts';
import { ManifestDigest, verifyChain, type ChainAnchor, type ChainVerdict } from '../../core/checkpoint-hash.ts';
import { lookupNotes, treeOfCommit, type NoteLookup } from './note-lookup.ts';
import { parseNote } from './note-claims.ts';

export type FindingKind =
  | 'hash_chain_broken'
  | 'repo_missing'
  | 'worktree_missing'
  | 'worktree_foreign'
  | 'worktree_half_made' // a killed `git worktree add` left its admin folder or checkout incomplete
  | 'wrong_branch'
  | 'branch_moved'
  | 'commit_unreachable'
  | 'commit_off_branch' // a checkpoint commit no longer on the run's branch (notes-audit.ts)
  | 'note_missing'
  | 'note_mismatch'
  | 'file_changed'
  | 'file_missing'
  | 'uncommitted_changes'
  | 'stale_index_lock'
  | 'manifest_mismatch'
  | 'tree_mismatch';

export interface Finding {
  kind: FindingKind;
  detail: string;
}

export interface Inspection {
  /** The commit the worktree must be at: the latest checkpoint's, or the branch base before any. */
  targetOid: string | null;
  worktree: WorktreeState | null;
  findings: Finding[];
  /** Checkpoints whose git note is missing or wrong: resume rewrites them from Postgres. */
  notesToRewrite: number[];
}

/** Findings resume cannot repair: the run is failed with the finding as its reason. */
export const UNREPAIRABLE: ReadonlySet<FindingKind> = new Set([
  'hash_chain_broken',
  'repo_missing',
  'commit_unreachable',
  'manifest_mismatch',
  'tree_mismatch',
]);

/** `git status` (STATUS_ARGS) started early on `path` by a caller that knew the worktree. */
export interface PrefetchedStatus {
  path: string;
  result: Promise<GitResult>;
}

export async function inspectRun(args: {
  run: Pick<RunRow, 'id' | 'status' | 'branch' | 'worktree_path' | 'base_oid' | 'job'>;
  chain: CheckpointRow[];
  /** What the first row (or a row after a pruned gap) links to: chainAnchors, or the hash before a tail. */
  anchor?: readonly ChainAnchor[] | string | null;
  /** The run's manifest (runManifest); without it, rebuilt by folding the chain's deltas. */
  manifest?: ManifestEntry[];
  repoRoot: string;
  notesRef: string;
  /** The commit the caller just moved the run's branch onto: present in the repository, not looked up. */
  branchAt?: string;
  /**
   * `git status` already started on `path` (STATUS_ARGS) by a caller that guessed the worktree
   * before the run row arrived: used only when the row names that same path.
   */
  prefetchedStatus?: PrefetchedStatus;
  /**
   * The text of each note on the chain's commits, already being read by a caller that reads them
   * anyway (readRunNotes): the verification's note reads come from it.
   */
  notes?: Promise<ReadonlyMap<string, string>>;
}): Promise<Inspection> {
  const findings: Finding[] = [];
  const latest = args.chain.at(-1);
  let verdict: ChainVerdict | undefined;
  const chainFindings = (): Finding[] => {
    verdict ??= verifyChain(args.chain, args.anchor ?? null);
    return [
      ...verdict.problems.map((problem): Finding => ({ kind: 'hash_chain_broken', detail: problem })),
      ...manifestFindings(args.chain, verdict, manifest),
    ];
  };
  const manifest = args.manifest ?? foldManifest(args.chain);

  // Doc-writer runs have no worktree: files are checked in the repo root, hashes only.
  if (!args.run.worktree_path || !args.run.branch) {
    findings.push(...chainFindings());
    if (latest) findings.push(...(await compareFiles(args.repoRoot, manifest)));
    return { targetOid: null, worktree: null, findings, notesToRewrite: [] };
  }

  const targetOid = latest?.commit_oid ?? args.run.base_oid;
  const repoPath = args.run.job.repoPath ?? args.repoRoot;
  let commonDir: string;
  try {
    commonDir = await repoCommonDir(repoPath);
  } catch (err) {
    findings.push(...chainFindings(), { kind: 'repo_missing', detail: (err as Error).message });
    return { targetOid, worktree: null, findings, notesToRewrite: [] };
  }
  const wt = await inspectWorktree(args.run.worktree_path, commonDir);
  const unreachable = async (): Promise<Finding[]> => {
    if (!targetOid || args.branchAt === targetOid) return [];
    const reachable = await runGit(repoPath, ['cat-file', '-e', `${targetOid}^{commit}`], { allowExitCodes: [1, 128] });
    return reachable.exitCode === 0
      ? []
      : [{ kind: 'commit_unreachable', detail: `checkpoint commit ${targetOid} is not in ${repoPath}` }];
  };
  if (wt.halfMade && (wt.belongsToRepo || !wt.gitDir)) {
    // A worker killed inside `git worktree add`: resume makes it again at the checkpoint commit.
    findings.push(...chainFindings(), {
      kind: 'worktree_half_made',
      detail: `${args.run.worktree_path}: ${wt.halfMade}`,
    });
    // The commit's presence and the notes: two git processes, side by side.
    const [missingCommit, notes] = await Promise.all([
      unreachable(),
      compareNotes(repoPath, args.notesRef, args.chain, args.notes),
    ]);
    findings.push(...missingCommit, ...notes.findings);
    return { targetOid, worktree: wt, findings, notesToRewrite: notes.seqs };
  }
  if (!wt.exists && ['completed', 'failed', 'cancelled'].includes(args.run.status)) {
    // A finished run's worktree is disposable (prune removes it): the branch and notes are the record.
    findings.push(...chainFindings());
    const [missingCommit, tip, notes] = await Promise.all([
      unreachable(),
      resolveCommit(repoPath, `refs/heads/${args.run.branch}`),
      compareNotes(repoPath, args.notesRef, args.chain, args.notes),
    ]);
    findings.push(...missingCommit);
    if (targetOid && tip !== targetOid)
      findings.push({
        kind: 'branch_moved',
        detail: `branch ${args.run.branch} is at ${tip ?? '(missing)'}, the last checkpoint at ${targetOid}`,
      });
    findings.push(...notes.findings);
    return { targetOid, worktree: wt, findings, notesToRewrite: notes.seqs };
  }
  if (!wt.exists) {
    // Resume adds it again (another host's run, or a removed worktree): the commit and the notes
    // are read side by side.
    findings.push(...chainFindings());
    const [missingCommit, notes] = await Promise.all([
      unreachable(),
      compareNotes(repoPath, args.notesRef, args.chain, args.notes),
    ]);
    findings.push(
      ...missingCommit,
      { kind: 'worktree_missing', detail: `worktree ${args.run.worktree_path} does not exist` },
      ...notes.findings,
    );
    return { targetOid, worktree: wt, findings, notesToRewrite: notes.seqs };
  }
  if (!wt.belongsToRepo) {
    findings.push(...chainFindings(), ...(await unreachable()));
    findings.push({ kind: 'worktree_foreign', detail: `${args.run.worktree_path} is not a worktree of ${repoPath}` });
    return { targetOid, worktree: wt, findings, notesToRewrite: [] };
  }
  if (wt.branch !== args.run.branch)
    findings.push({
      kind: 'wrong_branch',
      detail: `worktree is on ${wt.branch ?? '(detached)'}, not ${args.run.branch}`,
    });
  if (wt.gitDir && existsSync(path.join(wt.gitDir, 'index.lock'))) {
    findings.push({ kind: 'stale_index_lock', detail: `${path.join(wt.gitDir, 'index.lock')} left behind` });
  }

  // The git reads and the file hashes are independent: they run side by side, and the hash
  // chain is verified (CPU) while the git processes work.
  const prefetched = args.prefetchedStatus?.path === args.run.worktree_path ? args.prefetchedStatus.result : undefined;
  const reads = Promise.all([
    prefetched ?? gitStatus(args.run.worktree_path),
    compareNotes(
      args.run.worktree_path,
      args.notesRef,
      args.chain,
      args.notes,
      latest?.tree_oid ? (targetOid ?? undefined) : undefined,
    ),
    latest ? compareFiles(args.run.worktree_path, manifest) : Promise.resolve([]),
  ]);
  findings.push(...chainFindings());
  const [status, noteFindings, fileFindings] = await reads;
  const tree = noteFindings.tree;
  if (tree && tree !== latest!.tree_oid) {
    findings.push({
      kind: 'tree_mismatch',
      detail: `commit ${targetOid} has tree ${tree}, checkpoint ${latest!.checkpoint_seq} recorded ${latest!.tree_oid}`,
    });
  }
  const entries = status.stdout.split('\0').filter(Boolean);
  const tip = entries.find((e) => e.startsWith('# branch.oid '))?.slice('# branch.oid '.length);
  if (targetOid && tip !== targetOid) {
    // A branch at its checkpoint commit proves that commit is there; otherwise look it up.
    findings.push(...(await unreachable()));
    if (tip) findings.push({ kind: 'branch_moved', detail: `branch tip is ${tip}, the checkpoint is at ${targetOid}` });
  }
  const changed = entries.filter((e) => !e.startsWith('#'));
  if (changed.length) {
    const paths = changed.map((e) => (e.startsWith('? ') ? e.slice(2) : e.split(' ').slice(8).join(' '))).slice(0, 20);
    findings.push({
      kind: 'uncommitted_changes',
      detail: `${changed.length} path(s) differ from the checkpoint commit: ${paths.join(', ')}`,
    });
  }
  findings.push(...noteFindings.findings, ...fileFindings);
  return { targetOid, worktree: wt, findings, notesToRewrite: noteFindings.seqs };
}

/**
 * The status the verification reads: the branch tip and every path that differs, untracked
 * included. Without optional locks: a read-only check must not take index.lock (which a
 * concurrent stale-lock check, or the run's own checkpoint, would then trip over).
 */
export const STATUS_ARGS: readonly string[] = [
  '--no-optional-locks',
  'status',
  '--porcelain=v2',
  '--branch',
  '-z',
  '--untracked-files=all',
  '--no-renames',
];

/** `git status` of a worktree (exit 128: not a worktree, judged by the caller). */
export function gitStatus(worktree: string): Promise<GitResult> {
  return runGit(worktree, [...STATUS_ARGS], { allowExitCodes: [128] });
}

/**
 * Every checkpoint commit must carry a note; the latest one's must match its row. With
 * `treeOf`, the same git process also reads that commit's tree (the tree_mismatch check).
 */
async function compareNotes(
  cwd: string,
  notesRef: string,
  chain: CheckpointRow[],
  read: Promise<ReadonlyMap<string, string>> | undefined,
  treeOf?: string,
): Promise<{ findings: Finding[]; seqs: number[]; tree?: string }> {
  const latest = chain.at(-1);
  if (!latest?.commit_oid) return { findings: [], seqs: [] };
  const commits = chain.map((row) => row.commit_oid).filter((oid): oid is string => !!oid);
  // The caller's read failing (git could not read the notes), the lookup asks git on its own.
  const { noted, note, tree } =
    (read && (await notesRead(cwd, read, latest.commit_oid, treeOf).catch(() => undefined))) ??
    (await lookupNotes(cwd, notesRef, commits, latest.commit_oid, treeOf));
  const findings: Finding[] = [];
  const missing = chain
    .filter((row) => row !== latest && row.commit_oid && !noted.has(row.commit_oid))
    .map((row) => row.checkpoint_seq);
  if (!note) missing.push(latest.checkpoint_seq);
  else if (
    note.checkpointSeq !== latest.checkpoint_seq ||
    note.hash !== latest.hash ||
    note.agentRunId !== latest.agent_run_id
  ) {
    findings.push({
      kind: 'note_mismatch',
      detail: `note says seq ${note.checkpointSeq} hash ${String(note.hash).slice(0, 12)}, Postgres says seq ${latest.checkpoint_seq} hash ${latest.hash.slice(0, 12)}`,
    });
  }
  if (missing.length)
    findings.push({
      kind: 'note_missing',
      detail: `no note under ${notesRef} for checkpoint(s) ${missing.join(', ')}`,
    });
  return {
    findings,
    seqs: findings.some((f) => f.kind === 'note_mismatch') ? [...missing, latest.checkpoint_seq] : missing,
    tree,
  };
}

/** The lookup's answer from notes a caller read (readRunNotes); the tree read beside them. */
async function notesRead(
  cwd: string,
  read: Promise<ReadonlyMap<string, string>>,
  latest: string,
  treeOf?: string,
): Promise<NoteLookup> {
  const [texts, tree] = await Promise.all([read, treeOf ? treeOfCommit(cwd, treeOf) : undefined]);
  const text = texts.get(latest);
  return { noted: new Set(texts.keys()), note: text === undefined ? undefined : parseNote(text), tree };
}

/**
 * The manifest must be the one the latest row vouches for (its digest is in the hash chain): a
 * manifest row edited, added or removed is caught here, before the files are compared with it.
 */
function manifestFindings(
  chain: CheckpointRow[],
  verdict: ChainVerdict,
  manifest: ManifestEntry[] | undefined,
): Finding[] {
  const latest = chain.at(-1);
  if (!latest || !verdict.manifestDigest || !manifest) return [];
  const have = ManifestDigest.of(manifest);
  if (have.hex() === verdict.manifestDigest) return [];
  return [
    {
      kind: 'manifest_mismatch',
      detail: `the run's manifest (${have.count} path(s)) does not match the digest of checkpoint ${latest.checkpoint_seq} (${verdict.manifestDigest.slice(0, 12)})`,
    },
  ];
}

/**
 * Without checkpoint_manifest: every path the chain's rows name, with its latest sha256. Complete
 * when the chain is (it starts at seq 1, or at a pre-008 row that holds the whole list); a pruned
 * chain of delta rows gives undefined, and only the files the rows name are compared.
 */
export function foldManifest(chain: CheckpointRow[]): ManifestEntry[] | undefined {
  const files = new Map<string, ManifestEntry>();
  for (const row of chain) {
    if ((row.payload_format ?? 1) === 1) files.clear();
    for (const f of row.files_touched)
      files.set(f.path, { path: f.path, sha256: f.deleted ? null : f.sha256, seq: row.checkpoint_seq });
  }
  const first = chain[0];
  const complete = !first || first.checkpoint_seq === 1 || (first.payload_format ?? 1) === 1;
  return complete ? [...files.values()] : undefined;
}

async function compareFiles(root: string, manifest: ManifestEntry[] | undefined): Promise<Finding[]> {
  const recorded = manifest ?? [];
  const actual = await describeFiles(
    root,
    recorded.map((f) => f.path),
  );
  const findings: Finding[] = [];
  recorded.forEach((want, i) => {
    const have = actual[i]!;
    if (want.sha256 === null && have.deleted) return;
    if (have.deleted)
      findings.push({
        kind: 'file_missing',
        detail: `${want.path} is gone (expected sha256 ${want.sha256?.slice(0, 12)})`,
      });
    else if (have.sha256 !== want.sha256)
      findings.push({
        kind: 'file_changed',
        detail: `${want.path} has sha256 ${have.sha256?.slice(0, 12)}, checkpoint recorded ${want.sha256 === null ? 'deleted' : want.sha256.slice(0, 12)}`,
      });
  });
  return findings;
}
