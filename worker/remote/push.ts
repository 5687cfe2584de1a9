// The checkpoint remote (WORKER_CHECKPOINT_REMOTE, docs/checkpoints.md "Many hosts"): every
// checkpoint commit is pushed before its row is written, so every row's commit_oid is on the
// remote, and a worker on another host resumes by fetching (never cloning). One `git push` per
// checkpoint carries the branch and the run's notes ref (one connection, a thin pack).
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { DEFAULT_REMOTE_TIMEOUT_MS } from '../../core/config.ts';
import { EchodoError } from '../../core/errors.ts';
import { gitErrorDetail, remoteForGit, runGit, type GitResult } from '../git/run-git.ts';
import type { Logger } from '../log.ts';
import { repoCommonDir } from '../worktrees/worktree.ts';
import { redactString } from '../../core/redact.ts';

/** The remote could not take (or give) a checkpoint: the run stops at its last checkpoint and is released. */
export class CheckpointRemoteError extends EchodoError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('transient', redactString(message), options);
    this.name = 'CheckpointRemoteError';
  }
}

/**
 * The run's own notes ref, locally and on the remote. One ref per run: only the run's lease holder
 * ever writes it, so hosts never race on a notes ref and a push is always a fast-forward.
 */
export function runNotesRef(workspaceId: string, agentRunId: string): string {
  return `refs/notes/echodo-runs/${workspaceId}/${agentRunId}`;
}

/**
 * Every git that talks to the checkpoint remote: `command`, the remote's URL without its
 * credentials (remoteForGit: they reach git through its environment), then `operands`; stopped
 * after timeoutMs (WORKER_REMOTE_TIMEOUT_MS in the daemon), and the remote then counts as down.
 */
export function runRemoteGit(
  cwd: string,
  command: string[],
  remote: string,
  operands: string[],
  options: { allowExitCodes?: number[]; timeoutMs?: number } = {},
): Promise<GitResult> {
  const { allowExitCodes, timeoutMs = DEFAULT_REMOTE_TIMEOUT_MS } = options;
  return runGit(cwd, [...command, remoteForGit(remote), ...operands], { allowExitCodes, timeoutMs });
}

/** One line of `git push --porcelain`: `<flag>\t<from>:<to>\t<summary>`. */
interface PushedRef {
  flag: string;
  to: string;
  summary: string;
}

function parsePorcelain(stdout: string): PushedRef[] {
  return stdout
    .split('\n')
    .filter((l) => /^[ +\-*=!]\t/.test(l))
    .map((l) => {
      const [flag, spec, summary] = l.split('\t');
      return { flag: flag!, to: spec!.slice(spec!.lastIndexOf(':') + 1), summary: summary ?? '' };
    });
}

export async function push(
  cwd: string,
  remote: string,
  refspecs: string[],
  options: { flags?: string[]; timeoutMs?: number } = {},
): Promise<PushedRef[]> {
  const command = ['push', '--porcelain', '--no-verify', ...(options.flags ?? [])];
  const r = await runRemoteGit(cwd, command, remote, refspecs, {
    allowExitCodes: [1, 128],
    timeoutMs: options.timeoutMs,
  }).catch((err: unknown) => {
    throw new CheckpointRemoteError(`git push to the checkpoint remote failed: ${(err as Error).message}`, {
      cause: err,
    });
  });
  const refs = parsePorcelain(r.stdout);
  if (r.exitCode !== 0 && refs.length === 0) {
    // No per-ref verdict: the remote was not reached (down, refused, unknown).
    throw new CheckpointRemoteError(
      `git push to the checkpoint remote failed (exit ${r.exitCode}): ${r.stderr.trim().slice(0, 400)}`,
    );
  }
  return refs;
}

/**
 * Pushes one run's checkpoints. The branch goes as a fast-forward; a rejection means the remote
 * holds a commit no row points at (a worker killed after its push, before its row) or a fenced
 * worker's: with the lease confirmed in Postgres, the branch is then forced to our commit.
 */
export class RemotePusher {
  private notesRefExists: boolean | undefined;

  constructor(
    private readonly deps: {
      cwd: string;
      remote: string;
      branch: string;
      notesRef: string;
      /** The fencing check (Lease.assertHeld): only the lease holder may force the branch. */
      assertHeld: () => Promise<void>;
      log: Logger;
      /** Per push or ref listing (runRemoteGit's default when unset). */
      timeoutMs?: number;
    },
  ) {}

  /** One push of this run's refs to the remote. */
  private push(refspecs: string[], flags: string[] = []): Promise<PushedRef[]> {
    return push(this.deps.cwd, this.deps.remote, refspecs, { flags, timeoutMs: this.deps.timeoutMs });
  }

  /** The oid the remote's branch points at ('' when it has none: a lease that expects no branch). */
  private async remoteBranchOid(branchRef: string): Promise<string> {
    const refs = await lsRemote(this.deps.cwd, this.deps.remote, [branchRef], this.deps.timeoutMs).catch(
      (err: unknown) => {
        throw new CheckpointRemoteError(`git ls-remote of the checkpoint remote failed: ${gitErrorDetail(err)}`, {
          cause: err,
        });
      },
    );
    return refs.get(branchRef) ?? '';
  }

  /** The local run notes ref now exists (a note was written to it). */
  notesWritten(): void {
    this.notesRefExists = true;
  }

  private async notesRefspec(): Promise<string[]> {
    const ref = this.deps.notesRef;
    if (this.notesRefExists === undefined) {
      this.notesRefExists =
        (await runGit(this.deps.cwd, ['rev-parse', '--verify', '--quiet', ref], { allowExitCodes: [1] })).exitCode ===
        0;
    }
    return this.notesRefExists ? [`${ref}:${ref}`] : [];
  }

  /** The checkpoint commit (and the run's notes so far) on the remote; throws CheckpointRemoteError. */
  async pushCheckpoint(commitOid: string): Promise<void> {
    const branchRef = `refs/heads/${this.deps.branch}`;
    const notes = await this.notesRefspec();
    let refs = await this.push([`${commitOid}:${branchRef}`, ...notes]);
    let branch = refs.find((r) => r.to === branchRef);
    // The force replaces exactly what the remote held when the lease was confirmed, read before the
    // check: a newer lease holder's push landing between the check and the force (this worker fenced
    // meanwhile) makes the force fail, and the next check then stops this worker. A plain force would
    // take a counted checkpoint's commit off the remote branch.
    for (let attempt = 1; branch?.flag === '!' && attempt <= 3; attempt++) {
      const seen = await this.remoteBranchOid(branchRef);
      await this.deps.assertHeld();
      this.deps.log.warn(
        { branch: this.deps.branch, summary: branch.summary },
        'remote branch is past the last checkpoint (a killed or fenced push); forcing it to the checkpoint',
      );
      refs = await this.push([`${commitOid}:${branchRef}`], [`--force-with-lease=${branchRef}:${seen}`]);
      branch = refs.find((r) => r.to === branchRef);
    }
    if (!branch || branch.flag === '!') {
      throw new CheckpointRemoteError(
        `the checkpoint remote refused ${branchRef} at ${commitOid}: ${branch?.summary ?? 'no answer for the branch'}`,
      );
    }
    await this.settleRefusedNotes(refs);
  }

  /** The run's notes ref alone (at completion or release: the latest note follows its commit). */
  async pushNotes(): Promise<void> {
    const notes = await this.notesRefspec();
    if (!notes.length) return;
    await this.settleRefusedNotes(await this.push(notes));
  }

  /**
   * A refused notes ref: the remote's copy does not descend from ours. Prune replaced it with a
   * parentless commit holding the kept checkpoint's note while this host kept the old history (a
   * pruned failed run re-dispatched here), or a fenced worker pushed. With the lease confirmed,
   * ours is forced (it holds every note the rows need: resume rewrote the missing ones from
   * Postgres). The mirror never blocks the run: anything else is a warning, and the next resume
   * on any host rewrites missing notes from Postgres.
   */
  private async settleRefusedNotes(refs: PushedRef[]): Promise<void> {
    const ref = this.deps.notesRef;
    const notes = refs.find((r) => r.to === ref);
    if (notes?.flag !== '!') return;
    try {
      await this.deps.assertHeld();
      const forced = (await this.push([`+${ref}:${ref}`])).find((r) => r.to === ref);
      if (forced && forced.flag !== '!') return;
    } catch (err) {
      this.deps.log.warn(
        { notesRef: ref, error: (err as Error).message },
        "could not force the run's notes ref on the checkpoint remote",
      );
    }
    this.deps.log.warn({ notesRef: ref, summary: notes.summary }, "the checkpoint remote refused the run's notes ref");
  }
}

/** Bytes in a repository's object store (loose + packs; `git count-objects -v` reports KiB). */
export async function objectStoreBytes(cwd: string): Promise<number> {
  const out = (await runGit(cwd, ['count-objects', '-v'])).stdout;
  const kib = (key: string) => Number(new RegExp(`^${key}: (\\d+)`, 'm').exec(out)?.[1] ?? 0);
  return (kib('size') + kib('size-pack')) * 1024;
}

/** The repository's pack files and their sizes. */
async function packs(commonDir: string): Promise<Map<string, number>> {
  const dir = path.join(commonDir, 'objects', 'pack');
  const names = (await readdir(dir).catch(() => [] as string[])).filter((n) => n.endsWith('.pack'));
  const sizes = await Promise.all(
    names.map((n) =>
      stat(path.join(dir, n)).then(
        (st) => st.size,
        () => 0,
      ),
    ),
  );
  return new Map(names.map((n, i) => [n, sizes[i]!]));
}

/**
 * Fetches a run's branch and notes ref from the remote into the local repository: only the
 * objects it lacks (no clone). The notes ref is a pattern so that a run whose first note never
 * reached the remote fetches nothing for it instead of failing. `--update-head-ok`: a worktree of
 * this repository may have the branch checked out from an earlier attempt on this host; resume
 * resets it to the checkpoint.
 */
export async function fetchRun(args: {
  repoPath: string;
  remote: string;
  branch: string;
  notesRef: string;
  /** Where the branch lands (default: the local branch): a scratch ref when fetched ahead of the ownership check. */
  branchInto?: string;
  timeoutMs?: number;
}): Promise<{ fetchedBytes: number }> {
  const branchRef = `refs/heads/${args.branch}`;
  const refspecs = [`+${branchRef}:${args.branchInto ?? branchRef}`, `+${args.notesRef}*:${args.notesRef}*`];
  return fetchMeasured(args.repoPath, args.remote, refspecs, branchRef, args.timeoutMs);
}

/**
 * One fetch from the checkpoint remote, measured exactly: the received pack is kept as it came
 * (unpackLimit=1, like every checkpoint object here: packed, never loose), and its size is the
 * bytes fetched. Nothing after the objects: no `maintenance --auto` (most of a resume's fetch;
 * its gc is for loose objects and pack counts, which the worker's own packing keeps down, worker/checkpoints/git/packing.ts)
 * and no forced-update check (a history walk per ref, which the worker never reports).
 */
export async function fetchMeasured(
  repoPath: string,
  remote: string,
  refspecs: string[],
  what: string,
  timeoutMs?: number,
): Promise<{ fetchedBytes: number }> {
  const commonDir = await repoCommonDir(repoPath);
  const before = await packs(commonDir);
  const command = [
    '-c',
    'fetch.unpackLimit=1',
    'fetch',
    '--quiet',
    '--no-tags',
    '--no-write-fetch-head',
    '--update-head-ok',
    '--no-auto-maintenance',
    '--no-show-forced-updates',
  ];
  await runRemoteGit(repoPath, command, remote, refspecs, { timeoutMs }).catch((err: unknown) => {
    throw new CheckpointRemoteError(`could not fetch ${what} from the checkpoint remote: ${gitErrorDetail(err)}`, {
      cause: err,
    });
  });
  let fetchedBytes = 0;
  for (const [name, size] of await packs(commonDir)) if (!before.has(name)) fetchedBytes += size;
  return { fetchedBytes };
}

/** `git ls-remote` of exactly these refs: name → oid; absent refs are not listed (ls-remote matches by tail). */
export async function lsRemote(
  cwd: string,
  remote: string,
  refs: string[],
  timeoutMs?: number,
): Promise<Map<string, string>> {
  const found = new Map<string, string>();
  if (!refs.length) return found;
  const wanted = new Set(refs);
  const r = await runRemoteGit(cwd, ['ls-remote'], remote, [...wanted], { timeoutMs });
  for (const line of r.stdout.split('\n').filter(Boolean)) {
    const [oid, name] = line.split('\t');
    if (wanted.has(name!)) found.set(name!, oid!);
  }
  return found;
}

/**
 * Fetches a run's base commit by its oid into the run's branch, for a run resumed before its first
 * checkpoint on a host whose clone is behind (the remote may hold no branch for the run yet). Into
 * the branch, so the objects are referenced at once; the worktree is then added on it. Fetching a
 * reachable oid needs protocol v2 (git's default) or uploadpack.allowReachableSHA1InWant on the remote.
 */
export async function fetchBase(args: {
  repoPath: string;
  remote: string;
  oid: string;
  branch: string;
  timeoutMs?: number;
}): Promise<{ fetchedBytes: number }> {
  return fetchMeasured(
    args.repoPath,
    args.remote,
    [`+${args.oid}:refs/heads/${args.branch}`],
    `the run's base ${args.oid}`,
    args.timeoutMs,
  );
}
