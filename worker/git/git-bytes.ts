// A run's bytes in git: the objects reachable from its branch and not from the commit it started
// from (git rev-list --disk-usage), i.e. what deleting the branch would let `git gc` give back.
// Measured on request for the runs the Storage page shows; a run whose repository or branch is
// gone counts as null (unknown), never as zero.
import { existsSync } from 'node:fs';
import { runGit } from '../worker/git/run-git.ts';

const TIMEOUT_MS = 10_000;
const OID = /^[0-9a-f]{40,64}$/;
const REF = /^[A-Za-z0-9._\/-]+$/;

export async function runGitBytes(
  repoPath: string | null,
  branch: string | null,
  baseOid: string | null,
): Promise<number | null> {
  if (!repoPath || !branch || !REF.test(branch) || branch.startsWith('-') || !existsSync(repoPath)) return null;
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
