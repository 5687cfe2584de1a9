// A branch belongs to the run that created it (branch_claims in Postgres). This module picks the
// run's branch name, checks a recorded branch is still the run's own, and vets baseRef: a run
// never checks out, bases itself on, or commits to a branch or commit of another run/workspace.
//
// The naming rule (docs/checkpoints.md): echodo/<briefId>-<first 8 of agentRunId>; if that name
// is owned by another run, or exists in git without an owner (made outside the product), then
// echodo/<briefId>-<first 8>-<8 hex of sha256(workspaceId NUL agentRunId)>, then 16 hex; if all
// three are taken the run fails with ref_refused.
import { createHash } from 'node:crypto';
import type { ClaimAnswer } from '../../store/branches.ts';
import { EchodoError } from '../../core/errors.ts';
import { faultPoint } from '../faults.ts';
import { resolveCommit, runGit } from '../git/run-git.ts';
import { branchName } from '../../core/job.ts';

/** Claims a branch of the run's repository for the run (echodo_claim_branch in its workspace). */
export type ClaimBranch = (branch: string, mayCreate: boolean) => Promise<ClaimAnswer>;
/** Which of these branches of the run's repository belong to runs of the run's workspace. */
export type OwnBranchesAmong = (branches: string[]) => Promise<Set<string>>;

const ECHODO_PREFIX = 'echodo/';

export function branchCandidates(workspaceId: string, briefId: string, agentRunId: string): string[] {
  const short = branchName(briefId, agentRunId);
  const digest = createHash('sha256').update(`${workspaceId}\0${agentRunId}`).digest('hex');
  return [short, `${short}-${digest.slice(0, 8)}`, `${short}-${digest.slice(0, 16)}`];
}

/** The run's branch: the first candidate that is the run's own already or that it can claim. */
export async function chooseBranch(args: {
  repoPath: string;
  workspaceId: string;
  briefId: string;
  agentRunId: string;
  claim: ClaimBranch;
}): Promise<string> {
  const candidates = branchCandidates(args.workspaceId, args.briefId, args.agentRunId);
  for (const branch of candidates) {
    // A git branch of that name that nobody claimed was made outside the product: never adopted.
    const exists = (await resolveCommit(args.repoPath, `refs/heads/${branch}`)) !== undefined;
    if ((await args.claim(branch, !exists)) === 'yours') {
      faultPoint('after-branch-claim');
      return branch;
    }
  }
  throw new EchodoError(
    'ref_refused',
    `no branch name is free for this run: ${candidates.join(', ')} all belong to other runs or exist without an owner`,
  );
}

/**
 * A resume or re-dispatch works on the branch recorded on the run; it must still be the run's own.
 * A run recorded before branch ownership existed claims its recorded branch now.
 */
export async function assertOwnBranch(branch: string, claim: ClaimBranch): Promise<void> {
  if ((await claim(branch, true)) !== 'yours') {
    throw new EchodoError(
      'ref_refused',
      `branch ${branch} recorded on this run belongs to another run; the run will not touch it`,
    );
  }
}

/** `refs/heads/echodo/x` or `refs/remotes/<remote>/echodo/x` → `echodo/x`; anything else → undefined. */
export function echodoBranchOf(refname: string): string | undefined {
  const m = /^refs\/(?:heads\/|remotes\/[^/]+\/)(echodo\/.+)$/.exec(refname);
  return m?.[1];
}

/**
 * Resolves baseRef to the commit a new branch starts from, refusing a baseRef that is an echodo/
 * branch of another workspace, or a commit reachable only from such branches (or from no branch
 * or tag at all, such as the notes ref or a dangling object). Returns the commit.
 */
export async function vetBaseRef(args: {
  repoPath: string;
  baseRef: string;
  ownBranchesAmong: OwnBranchesAmong;
}): Promise<string> {
  const { repoPath, baseRef } = args;
  if (baseRef.startsWith('-')) throw refused(baseRef, 'it starts with "-"');
  const oid = await resolveCommit(repoPath, baseRef);
  if (!oid) throw new EchodoError('repo_invalid', `baseRef "${baseRef}" does not exist in ${repoPath}`);
  // No --end-of-options here: git 2.39 echoes it with --symbolic-full-name. baseRef cannot start
  // with '-' (the job schema refuses it), and resolveCommit above already used it safely.
  const named = await runGit(repoPath, ['rev-parse', '--symbolic-full-name', baseRef], { allowExitCodes: [1, 128] });
  const fullName = named.exitCode === 0 ? (named.stdout.trim().split('\n')[0] ?? '') : '';
  const echodo = echodoBranchOf(fullName);
  if (echodo !== undefined) {
    if ((await args.ownBranchesAmong([echodo])).has(echodo)) return oid;
    throw refused(baseRef, `it names the branch ${echodo}, which belongs to no run of this workspace`);
  }
  // The usual case: the tip of a plain branch or a tag.
  if (/^refs\/(heads|tags)\//.test(fullName)) return oid;

  const containing = await runGit(repoPath, [
    'for-each-ref',
    '--contains',
    oid,
    '--format=%(refname)',
    'refs/heads',
    'refs/tags',
    'refs/remotes',
  ]);
  const refs = containing.stdout.split('\n').filter(Boolean);
  if (refs.some((ref) => echodoBranchOf(ref) === undefined)) return oid;
  const echodoBranches = [...new Set(refs.map((ref) => echodoBranchOf(ref)!))];
  if ((await args.ownBranchesAmong(echodoBranches)).size > 0) return oid;
  throw refused(
    baseRef,
    refs.length
      ? 'its commit is reachable only from echodo/ branches of other runs'
      : 'its commit is on no branch or tag of the repository',
  );
}

function refused(baseRef: string, why: string): EchodoError {
  return new EchodoError('ref_refused', `baseRef "${baseRef}" is refused: ${why}`);
}
