// Bytes in git, one estimate for every figure: the on-disk size of the objects reachable from a
// set of branches and not from the commits they started from (git rev-list --disk-usage
// --objects), each object once, i.e. what deleting the branches would let `git gc` give back. A
// workspace's figure adds the notes on those branches' commits (their blobs' size on disk), which
// retention removes. Only branches that exist are counted: a set none of whose branches exists, or
// whose repository git cannot read, is null (unknown), never 0. Every git process reads the
// repository's object store and refs, through runGit; none reads a worktree.
//
// A figure depends only on the branches' tips, their bases and how the objects are stored (loose,
// or in which packs): the process keeps the figures it measured under that key, so a Storage page
// loaded again with nothing changed costs a few git processes per repository, not one per run.
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { runGit } from './run-git.ts';

const TIMEOUT_MS = 10_000;
/** Git jobs one measure runs at once, however many runs and convoys it covers. */
const AT_ONCE = 4;
const OID = /^[0-9a-f]{40,64}$/;
const REF = /^[A-Za-z0-9._\/-]+$/;
/** Figures kept (the oldest dropped first): a few pages' worth for a handful of repositories. */
const KEPT = 5_000;
const measured = new Map<string, number>();

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

type Limit = <T>(job: () => Promise<T>) => Promise<T>;

/** Runs jobs at most `n` at a time, in the order they were asked for. */
function limiter(n: number): Limit {
  let active = 0;
  const waiting: (() => void)[] = [];
  return async (job) => {
    while (active >= n) await new Promise<void>((resolve) => waiting.push(resolve));
    active++;
    try {
      return await job();
    } finally {
      active--;
      waiting.shift()?.();
    }
  };
}

interface RepoState {
  /** Each branch's tip: full ref name to commit. */
  tips: Map<string, string>;
  /** How the objects are stored: loose (count-objects) and the packs by name (a pack's name is its checksum). */
  storage: string;
}

/** The repository's branch tips and object storage, three git processes; null when git cannot read it. */
async function repoState(repoPath: string): Promise<RepoState | null> {
  if (!repoPath || !existsSync(repoPath)) return null;
  const git = (args: string[]) => runGit(repoPath, args, { timeoutMs: TIMEOUT_MS });
  try {
    const [refs, loose, objects] = await Promise.all([
      git(['for-each-ref', '--format=%(objectname) %(refname)', 'refs/heads/']),
      git(['count-objects', '-v']),
      git(['rev-parse', '--path-format=absolute', '--git-path', 'objects']),
    ]);
    const tips = new Map<string, string>();
    for (const line of refs.stdout.split('\n').filter(Boolean)) {
      const [oid, ref] = line.split(' ');
      tips.set(ref!, oid!);
    }
    const packs = await readdir(path.resolve(repoPath, objects.stdout.trim(), 'pack')).catch(() => []);
    return { tips, storage: `${loose.stdout}${packs.sort().join('\n')}` };
  } catch {
    return null;
  }
}

/** rev-list's input: each branch's tip, less the commits they started from (a base git no longer has is skipped). */
function revsOf(locs: GitLocation[], tips: Map<string, string>): string {
  const heads = locs.map((l) => tips.get(`refs/heads/${l.branch}`)!);
  const bases = locs.filter((l) => l.baseOid && OID.test(l.baseOid)).map((l) => `^${l.baseOid}`);
  return [...new Set([...heads, ...bases])].sort().join('\n');
}

/** The estimate, from those kept when the tips, bases and storage are the same, else measured and kept. */
async function keptReachableBytes(repoPath: string, state: RepoState, revs: string): Promise<number> {
  const key = `${repoPath}\0${revs}\0${state.storage}`;
  const kept = measured.get(key);
  if (kept !== undefined) return kept;
  const bytes = await reachableBytes(repoPath, revs);
  measured.set(key, bytes);
  if (measured.size > KEPT) measured.delete(measured.keys().next().value!);
  return bytes;
}

/** The estimate, for branches of one repository that exist. */
async function reachableBytes(repoPath: string, revs: string): Promise<number> {
  const usage = await runGit(repoPath, ['rev-list', '--ignore-missing', '--stdin', '--disk-usage', '--objects'], {
    input: `${revs}\n`,
    timeoutMs: TIMEOUT_MS,
  });
  const bytes = Number(usage.stdout.trim());
  if (!usage.stdout.trim() || !Number.isFinite(bytes)) throw new Error('rev-list --disk-usage printed no number');
  return bytes;
}

/** The notes under `notesRef` on the commits reachable only from these branches: their blobs' size on disk. */
async function notesBytes(repoPath: string, revs: string, notesRef: string): Promise<number> {
  const [commits, notes] = await Promise.all([
    runGit(repoPath, ['rev-list', '--ignore-missing', '--stdin'], { input: `${revs}\n`, timeoutMs: TIMEOUT_MS }),
    runGit(repoPath, ['notes', `--ref=${notesRef}`, 'list'], { allowExitCodes: [1, 128], timeoutMs: TIMEOUT_MS }),
  ]);
  const ours = new Set(commits.stdout.split('\n').filter(Boolean));
  const blobs = notes.stdout
    .split('\n')
    .map((line) => line.split(' '))
    .filter(([blob, commit]) => blob && commit && ours.has(commit))
    .map(([blob]) => blob!);
  if (!blobs.length) return 0;
  const sizes = await runGit(repoPath, ['cat-file', '--batch-check=%(objectsize:disk)'], {
    input: `${blobs.join('\n')}\n`,
    timeoutMs: TIMEOUT_MS,
  });
  return sizes.stdout.split('\n').reduce((n, line) => n + (Number(line) || 0), 0);
}

/** Per repository, its state and the locations whose branch it still has; one git cannot read is left out. */
async function liveByRepo(
  locations: GitLocation[],
  limit: Limit,
): Promise<Map<string, { state: RepoState; live: GitLocation[] }>> {
  const repos = [...new Set(locations.map((l) => l.repoPath))];
  const states = await Promise.all(repos.map((repo) => limit(() => repoState(repo))));
  const byRepo = new Map<string, { state: RepoState; live: GitLocation[] }>();
  repos.forEach((repo, i) => {
    const state = states[i];
    if (!state) return;
    const live = locations.filter(
      (l) =>
        l.repoPath === repo &&
        !!l.branch &&
        REF.test(l.branch) &&
        !l.branch.startsWith('-') &&
        state.tips.has(`refs/heads/${l.branch}`),
    );
    if (live.length) byRepo.set(repo, { state, live });
  });
  return byRepo;
}

/**
 * The estimate for each set of branches (a run's one, a convoy's several): null when none of its
 * branches exists or git fails on every repository it has some in. Per repository its state (three
 * git processes), then one rev-list per distinct set not measured before with the same tips, bases
 * and storage (a convoy of one run reuses that run's), at most AT_ONCE at a time.
 */
export async function gitBytesOf(sets: GitLocation[][]): Promise<(number | null)[]> {
  const limit = limiter(AT_ONCE);
  const byRepo = await liveByRepo(sets.flat(), limit);
  const asked = new Map<string, Promise<number | null>>();
  const measure = (repoPath: string, state: RepoState, revs: string) => {
    const key = `${repoPath}\0${revs}`;
    if (!asked.has(key))
      asked.set(
        key,
        limit(() => keptReachableBytes(repoPath, state, revs)).catch(() => null),
      );
    return asked.get(key)!;
  };
  return Promise.all(
    sets.map(async (set) => {
      const mine = new Set(set);
      const parts = await Promise.all(
        [...byRepo].map(([repoPath, { state, live }]) => {
          const here = live.filter((l) => mine.has(l));
          return here.length ? measure(repoPath, state, revsOf(here, state.tips)) : undefined;
        }),
      );
      const known = parts.filter((n): n is number => typeof n === 'number');
      return known.length ? known.reduce((a, b) => a + b, 0) : null;
    }),
  );
}

/**
 * A workspace's bytes in git, for the quota: per repository, the estimate over all its runs'
 * branches and the notes on their commits. A repository git cannot read adds 0: the sweep must not
 * stop on one lost repository.
 */
export async function workspaceGitBytes(locations: GitLocation[], notesRef: string): Promise<GitBytes> {
  const limit = limiter(AT_ONCE);
  const sizes = await Promise.all(
    [...(await liveByRepo(locations, limit))].map(async ([repoPath, { state, live }]) => {
      const revs = revsOf(live, state.tips);
      const [branches, notes] = await Promise.all([
        limit(() => keptReachableBytes(repoPath, state, revs)).catch(() => 0),
        limit(() => notesBytes(repoPath, revs, notesRef)).catch(() => 0),
      ]);
      return { branches, notes };
    }),
  );
  const branches = sizes.reduce((n, s) => n + s.branches, 0);
  const notes = sizes.reduce((n, s) => n + s.notes, 0);
  return { branches, notes, total: branches + notes };
}
