// Bytes in git, estimated from the objects a run (or a workspace) alone holds: the objects
// reachable from its branches and not from the commits they started from (git rev-list
// --disk-usage), i.e. what deleting the branches would let `git gc` give back, and for a workspace
// also the notes on its checkpoint commits (their blobs' size on disk), which retention removes.
// Every git process reads the repository's object store and refs, through runGit; none reads a
// worktree. A run whose repository or branch is gone counts as null (unknown), never as zero.
import { existsSync } from 'node:fs';
import { runGit } from './run-git.ts';

const TIMEOUT_MS = 10_000;
const OID = /^[0-9a-f]{40,64}$/;
const REF = /^[A-Za-z0-9._\/-]+$/;

const usableBranch = (branch: string | null): branch is string =>
  !!branch && REF.test(branch) && !branch.startsWith('-');

/** The run's branch: objects reachable from it and not from the commit it started from. */
export async function runGitBytes(
  repoPath: string | null,
  branch: string | null,
  baseOid: string | null,
): Promise<number | null> {
  if (!repoPath || !usableBranch(branch) || !existsSync(repoPath)) return null;
  const not = baseOid && OID.test(baseOid) ? ['--not', baseOid] : [];
  try {
    const result = await runGit(repoPath, ['rev-list', '--disk-usage', '--objects', `refs/heads/${branch}`, ...not], {
      allowExitCodes: [128],
      timeoutMs: TIMEOUT_MS,
    });
    if (result.exitCode !== 0) return null;
    const bytes = Number(result.stdout.trim());
    return Number.isFinite(bytes) ? bytes : null;
  } catch {
    return null;
  }
}

/**
 * A set of runs' branches (a convoy's): objects reachable from any of them and not from the commits
 * they started from, each object once. Null when none of the branches' repositories can be read.
 */
export async function branchesGitBytes(locations: GitLocation[]): Promise<number | null> {
  const byRepo = new Map<string, GitLocation[]>();
  for (const loc of locations) {
    if (usableBranch(loc.branch)) byRepo.set(loc.repoPath, [...(byRepo.get(loc.repoPath) ?? []), loc]);
  }
  const sizes = await Promise.all(
    [...byRepo].map(async ([repoPath, locs]) => {
      if (!existsSync(repoPath)) return null;
      try {
        const usage = await runGit(repoPath, ['rev-list', '--ignore-missing', '--stdin', '--disk-usage', '--objects'], {
          input: `${revsOf(locs)}\n`,
          timeoutMs: TIMEOUT_MS,
        });
        const bytes = Number(usage.stdout.trim());
        return Number.isFinite(bytes) ? bytes : null;
      } catch {
        return null;
      }
    }),
  );
  const known = sizes.filter((n): n is number => n !== null);
  return known.length ? known.reduce((a, b) => a + b, 0) : null;
}

/** rev-list's input for these branches: each branch, less the commits they started from. */
function revsOf(locs: GitLocation[]): string {
  return [
    ...new Set([
      ...locs.map((l) => `refs/heads/${l.branch}`),
      ...locs.filter((l) => l.baseOid && OID.test(l.baseOid)).map((l) => `^${l.baseOid}`),
    ]),
  ].join('\n');
}

export interface GitLocation {
  repoPath: string;
  branch: string | null;
  baseOid: string | null;
}

export interface GitBytes {
  /** Objects reachable only from the branches (each object once, however many runs share it). */
  branches: number;
  /** The notes under the notes ref on the branches' commits. */
  notes: number;
  total: number;
}

/**
 * A workspace's bytes in git: per repository, one rev-list over all its runs' branches (missing
 * ones ignored) and one look at the notes of their commits. A repository git cannot read adds 0:
 * the sweep must not stop on one lost repository.
 */
export async function workspaceGitBytes(locations: GitLocation[], notesRef: string): Promise<GitBytes> {
  const byRepo = new Map<string, GitLocation[]>();
  for (const loc of locations) {
    if (!usableBranch(loc.branch)) continue;
    byRepo.set(loc.repoPath, [...(byRepo.get(loc.repoPath) ?? []), loc]);
  }
  const sizes = await Promise.all(
    [...byRepo].map(([repoPath, locs]) =>
      existsSync(repoPath) ? repoGitBytes(repoPath, locs, notesRef).catch(() => ({ branches: 0, notes: 0 })) : null,
    ),
  );
  const branches = sizes.reduce((n, s) => n + (s?.branches ?? 0), 0);
  const notes = sizes.reduce((n, s) => n + (s?.notes ?? 0), 0);
  return { branches, notes, total: branches + notes };
}

async function repoGitBytes(
  repoPath: string,
  locs: GitLocation[],
  notesRef: string,
): Promise<{ branches: number; notes: number }> {
  const revs = revsOf(locs);
  const revList = (extra: string[]) =>
    runGit(repoPath, ['rev-list', '--ignore-missing', '--stdin', ...extra], {
      input: `${revs}\n`,
      timeoutMs: TIMEOUT_MS,
    });
  const [usage, commits, notes] = await Promise.all([
    revList(['--disk-usage', '--objects']),
    revList([]),
    runGit(repoPath, ['notes', `--ref=${notesRef}`, 'list'], { allowExitCodes: [1, 128], timeoutMs: TIMEOUT_MS }),
  ]);
  const ours = new Set(commits.stdout.split('\n').filter(Boolean));
  const blobs = notes.stdout
    .split('\n')
    .map((line) => line.split(' '))
    .filter(([blob, commit]) => blob && commit && ours.has(commit))
    .map(([blob]) => blob!);
  let noteBytes = 0;
  if (blobs.length) {
    const sizes = await runGit(repoPath, ['cat-file', '--batch-check=%(objectsize:disk)'], {
      input: `${blobs.join('\n')}\n`,
      timeoutMs: TIMEOUT_MS,
    });
    for (const line of sizes.stdout.split('\n')) noteBytes += Number(line) || 0;
  }
  return { branches: Number(usage.stdout.trim()) || 0, notes: noteBytes };
}
