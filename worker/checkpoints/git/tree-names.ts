// The path each tree of a pack merge sits at, for git's delta search (packing.ts).
// pack-objects sorts the objects it deltifies by a hash of their path and looks for a base only
// among the next few (its window). `--stdin-packs`, which `git repack --geometric` uses, knows no
// paths, so the hundreds of same-sized folders of a repository mix in that window and a tree
// rarely meets its own previous version, so many trees stay whole (docs/checkpoints.md has the
// figures).
// git finds the paths: `rev-list --objects` of the merge's commits, newest first. It reads the
// first commit's whole snapshot of folders (O(the repository's folders)), then only what changed;
// reading the trees in this process instead was far slower.
import type { ObjectType } from '../../git/objects.ts';
import { runGit } from '../../git/run-git.ts';

export interface NamedTree {
  oid: string;
  /** '' for a commit's root tree. */
  path: string;
}

/**
 * The trees among `objects` that the commits among them hold, each with its path, the newest
 * commit's first (pack-objects keeps the first of equal-sized versions whole and makes the others
 * deltas of it: the newest checkpoint is the one a resume reads).
 */
export async function nameTrees(cwd: string, objects: Map<string, ObjectType>): Promise<NamedTree[]> {
  const commits = [...objects].filter(([, type]) => type === 'commit').map(([oid]) => oid);
  if (!commits.length) return [];
  const stdin = (oids: string[]) => oids.join('\n') + '\n';
  const walk = ['rev-list', '--no-walk=unsorted', '--stdin'];
  const parents = await runGit(cwd, [...walk, '--parents'], { input: stdin(commits) });
  const graph = new Map<string, string[]>();
  for (const line of parents.stdout.split('\n')) if (line) graph.set(line.slice(0, 40), line.split(' ').slice(1));
  const listed = await runGit(cwd, [...walk, '--objects', '--filter=blob:none'], { input: stdin(newestFirst(graph)) });
  const named: NamedTree[] = [];
  for (const line of listed.stdout.split('\n')) {
    // "<commit>", or "<tree> <path>" ("<tree> " for a root); a tree older than the merge is in its own pack
    const oid = line.slice(0, 40);
    if (line.length > 40 && objects.get(oid) === 'tree') named.push({ oid, path: line.slice(41) });
  }
  return named;
}

/** Commits tips first, each followed by its ancestors among them (a run's chain, newest first). */
function newestFirst(graph: Map<string, string[]>): string[] {
  const hasChild = new Set<string>();
  for (const parents of graph.values()) for (const p of parents) hasChild.add(p);
  const order: string[] = [];
  const done = new Set<string>();
  const visit = (tip: string) => {
    const stack = [tip];
    while (stack.length) {
      const oid = stack.pop()!;
      if (done.has(oid)) continue;
      done.add(oid);
      order.push(oid);
      for (const p of [...graph.get(oid)!].reverse()) if (graph.has(p) && !done.has(p)) stack.push(p);
    }
  };
  for (const oid of graph.keys()) if (!hasChild.has(oid)) visit(oid);
  for (const oid of graph.keys()) visit(oid); // only commits in a loop of parents, which git cannot write
  return order;
}
