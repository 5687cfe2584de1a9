// Branch ownership: which run of which workspace made a branch of a repository. Claims are
// written only through echodo_claim_branch (it sees every workspace's claims, and answers only
// "yours" or "taken"); a workspace reads back its own claims through row-level security.
import type { WorkspaceTx } from './workspace.ts';

export type ClaimAnswer = 'yours' | 'taken';

/**
 * Claims `branch` of the repository whose common git dir is `repoDir` for the run, when nobody
 * owns it and `mayCreate` (no git branch of that name exists). 'yours' also when the run owns it.
 */
export async function claimBranch(
  tx: WorkspaceTx,
  args: { repoDir: string; branch: string; agentRunId: string; mayCreate: boolean },
): Promise<ClaimAnswer> {
  const [row] = await tx<{ answer: ClaimAnswer }[]>`
    select echodo_claim_branch(${args.repoDir}, ${args.branch}, ${args.agentRunId}, ${args.mayCreate}) as answer`;
  return row!.answer;
}

/** Which of `branches` of the repository this workspace's runs own. */
export async function ownBranchesAmong(tx: WorkspaceTx, repoDir: string, branches: string[]): Promise<Set<string>> {
  if (branches.length === 0) return new Set();
  const rows = await tx<{ branch: string }[]>`
    select branch from branch_claims where repo_dir = ${repoDir} and branch = any(${branches})`;
  return new Set(rows.map((r) => r.branch));
}
