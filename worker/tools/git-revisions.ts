// Revision vetting for run_command's git commands: arguments may name only revisions of the
// run's own history, that is commits that are ancestors of (or equal to) the worktree's HEAD
// (the run's branch tip) or of the run's base commit. Every workspace shares one repository, so
// without this `git diff HEAD echodo/<their-branch>` or `git diff HEAD refs/notes/…` would
// print another run's source or every workspace's checkpoint notes.
//
// For each operand before `--` that is not an option:
//   - refused outright: reflog forms (`@{…}`, also `@{-1}`) and the `:/text` search, which
//     look across all refs;
//   - ranges are split (`A..B`, `A...B`, `^A`, `A^!`, `A^@`, `A^-n`), `<rev>:<path>` keeps its
//     revision, and `~n` / `^n` / `^{…}` suffixes are cut to the revision they start from;
//   - that revision is resolved with the worker's own git (outside any sandbox) in the worktree:
//     a commit must pass `git merge-base --is-ancestor` against HEAD or the base; an object that
//     is not a commit (a raw tree or blob id, a tag of one) is refused; a word that is no
//     revision at all is a path, which command-line.ts has already kept relative.
import { ToolRefusedError } from '../../core/errors.ts';
import { runGit } from '../git/run-git.ts';

// git must not run anything of the repository's while it only resolves names.
const SAFE = ['-c', 'core.hooksPath=/dev/null', '-c', 'core.fsmonitor=false'];

export interface RevisionScope {
  /** The worktree: its HEAD is the run's branch tip. */
  root: string;
  /** The commit the run's branch started from; null: HEAD's history only. */
  baseOid: string | null;
}

/** The revision names an operand refers to, or null when it uses a form that is refused outright. */
export function revisionAnchors(operand: string): string[] | { refused: string } {
  if (operand.includes('@{')) return { refused: 'reflog forms (@{…}) are not allowed' };
  // `:/text` searches every ref's history, also as one side of a range (`HEAD..:/text`).
  if (operand.includes(':/')) return { refused: 'the :/text commit search is not allowed' };
  const sides = operand.includes('...') ? operand.split('...') : operand.split('..');
  const anchors: string[] = [];
  for (let side of sides) {
    side = side.replace(/^\^+/, '').replace(/\^(!|@|-\d*)$/, '');
    const colon = side.indexOf(':');
    if (colon >= 0) side = side.slice(0, colon); // <rev>:<path>; ':path' and ':0:path' are the index
    const cut = side.search(/[~^]/);
    const anchor = cut >= 0 ? side.slice(0, cut) : side;
    if (anchor) anchors.push(anchor); // an empty side of a range is HEAD
  }
  return anchors;
}

/** Throws ToolRefusedError naming the first operand that reaches outside the run's history. */
export async function vetGitRevisions(scope: RevisionScope, operands: readonly string[]): Promise<void> {
  for (const operand of operands) {
    if (operand === '--') return; // pathspecs only from here on
    if (operand.startsWith('-')) continue; // options were vetted by checkAllowed
    const anchors = revisionAnchors(operand);
    if (!Array.isArray(anchors)) throw refuse(operand, anchors.refused);
    for (const anchor of anchors) await vetAnchor(scope, operand, anchor);
  }
}

async function vetAnchor(scope: RevisionScope, operand: string, anchor: string): Promise<void> {
  const commit = await revParse(scope.root, `${anchor}^{commit}`);
  if (commit === undefined) {
    if ((await revParse(scope.root, anchor)) !== undefined) {
      throw refuse(operand, `${JSON.stringify(anchor)} is an object that is not a commit of this run's history`);
    }
    return; // not a revision: a path
  }
  if (await isAncestor(scope.root, commit, 'HEAD')) return;
  if (scope.baseOid && (await isAncestor(scope.root, commit, scope.baseOid))) return;
  throw refuse(operand, `${JSON.stringify(anchor)} is not part of this run's history`);
}

async function revParse(root: string, spec: string): Promise<string | undefined> {
  const r = await runGit(root, [...SAFE, 'rev-parse', '--verify', '--quiet', '--end-of-options', spec], {
    allowExitCodes: [1, 128],
  });
  return r.exitCode === 0 ? r.stdout.trim() : undefined;
}

async function isAncestor(root: string, commit: string, of: string): Promise<boolean> {
  const r = await runGit(root, [...SAFE, 'merge-base', '--is-ancestor', commit, of], { allowExitCodes: [1, 128] });
  return r.exitCode === 0;
}

function refuse(operand: string, why: string): ToolRefusedError {
  return new ToolRefusedError(
    `argument ${JSON.stringify(operand)} is refused: ${why}. git arguments may name only this run's own history ` +
      "(HEAD, its branch, its base, their ancestors such as HEAD~2, and paths); other branches, refs/notes and other runs' commits are off limits",
    'revision',
  );
}
