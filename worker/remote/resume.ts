// Resume on another host (docs/checkpoints.md "Many hosts"): with WORKER_CHECKPOINT_REMOTE set,
// a run last recorded by another host (or whose checkpoint commit is not in the local repo) has
// its branch and notes fetched from the remote into the local repository (only the missing
// objects, never a clone); then the normal resume runs: worktree added at the checkpoint commit,
// the same verification, against the run's own notes ref.
import { existsSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Config } from '../../core/config.ts';
import type { CheckpointRow } from '../../store/checkpoints.ts';
import type { RunRow } from '../../store/runs.ts';
import { EchodoError } from '../../core/errors.ts';
import { remoteForGit, runGit } from '../git/run-git.ts';
import type { Logger } from '../log.ts';
import { notedCommits, writeCheckpointNotes } from '../checkpoints/notes.ts';
import { fetchBase, fetchRun, runNotesRef } from './push.ts';
import { readStandby } from './standby.ts';
import { noteOfRow } from '../checkpoints/notes.ts';
import { worktreePathFor } from '../worktrees/worktree.ts';

export interface RemoteResume {
  /** The run as this host sees it: another host's worktree path is replaced by this host's. */
  run: RunRow;
  /** The run's own notes ref: what the remote holds, so what resume verifies. */
  notesRef: string;
  /** The commit the run's branch was just moved onto here (so present): what resume need not look up again. */
  branchAt?: string;
  /**
   * For run_resumed, when the run's checkpoints came from the remote: fetched by the resume, or
   * earlier by this host's remote standby (`standby: true`; fetchedBytes is what the resume fetched: 0).
   */
  fetched?: {
    fromHost: string | null;
    toHost: string;
    fetchedBytes: number;
    recloned: false;
    partialClone?: true;
    standby?: true;
  };
}

/**
 * A host with no copy of the repository at all: the one case where a clone is unavoidable, and it
 * is a partial one (`--filter=blob:none`: commits and trees, blobs fetched when checked out). Made
 * beside the target and renamed into place, so two workers of one host never see a half-made one.
 * Returns true when it cloned.
 */
export async function ensureLocalRepo(repoPath: string, remote: string, log: Logger): Promise<boolean> {
  if (existsSync(repoPath)) return false;
  await mkdir(path.dirname(repoPath), { recursive: true });
  const temp = `${repoPath}.partial-${process.pid}-${Date.now()}`;
  try {
    await runGit(path.dirname(repoPath), [
      'clone',
      '--quiet',
      '--filter=blob:none',
      '--no-checkout',
      remoteForGit(remote),
      temp,
    ]);
    await rename(temp, repoPath).catch(async (err: NodeJS.ErrnoException) => {
      if (!existsSync(repoPath)) throw err; // else another worker of this host made it first: theirs is used
    });
  } catch (err) {
    throw new EchodoError(
      'repo_invalid',
      `${repoPath} does not exist and a partial clone of the checkpoint remote failed: ${(err as Error).message}`,
      { cause: err },
    );
  } finally {
    await rm(temp, { recursive: true, force: true });
  }
  log.info({ repoPath }, 'no local repository: made a partial clone (--filter=blob:none) of the checkpoint remote');
  return true;
}

/**
 * A fetch of the run's branch (onto a scratch ref) and notes started at the claim (prefetchRun);
 * none when this host's remote standby holds the run: then `standby` is what it holds, and the
 * run's branch and notes ref were moved onto it.
 */
export interface PrefetchedRun {
  repoPath: string;
  scratchRef: string;
  result: Promise<{ fetchedBytes: number; standby?: { branch: string; notes?: string } } | Error>;
  /** Set once the scratch ref was moved onto the branch or deleted. */
  settled?: boolean;
}

/**
 * The scratch ref of a prefetch the resume did not use (the run failed, was cancelled or released
 * before its worktree, or had no checkpoint): deleted once the fetch is over, so it neither
 * outlives the run nor lands after the delete. Never throws. (A worker killed in between leaves
 * the ref, and the few KB of the run's objects it holds, until that run is prefetched here again.)
 */
export async function discardPrefetch(prefetched: PrefetchedRun | undefined): Promise<void> {
  if (!prefetched || prefetched.settled) return;
  const result = await prefetched.result;
  prefetched.settled = true;
  if (!(result instanceof Error) && result.standby) return; // the standby held the run: no scratch ref was made
  await runGit(prefetched.repoPath, ['update-ref', '-d', prefetched.scratchRef]).catch(() => {});
}

/**
 * A run last recorded by another host: its branch and notes are fetched from the remote at once,
 * while Postgres answers, unless this host's remote standby already holds them. The fetch lands on
 * a scratch ref: the branch's ownership (`branchOwned`, checked beside the fetch) is not known yet;
 * prepareRemoteResume moves it onto the branch (or fetches again if this failed). A standby's copy
 * is moved onto the branch and the run's notes ref here, once the branch is known to be the run's:
 * the git process a take-over waited for after Postgres (most of it the fork from the worker) runs
 * while Postgres answers. prepareRemoteResume then checks the copy against the latest
 * checkpoint and fetches if it is behind; a copy ahead of it (pushed, killed before its row) is where
 * a fetch would have put the branch too, and verification resets the worktree to the checkpoint.
 */
export function prefetchRun(
  config: Config,
  run: RunRow,
  branchOwned: Promise<void> | undefined,
): PrefetchedRun | undefined {
  const remote = config.WORKER_CHECKPOINT_REMOTE;
  const repoPath = run.job.repoPath ?? config.WORKER_REPO_ROOT;
  const elsewhere = !!run.host_id && run.host_id !== config.WORKER_HOST_ID;
  if (!remote || !run.branch || !elsewhere || !branchOwned || !existsSync(repoPath)) return undefined;
  const scratchRef = `refs/echodo-prefetch/${run.workspace_id}/${run.id}`;
  const notesRef = runNotesRef(run.workspace_id, run.id);
  const timeoutMs = config.WORKER_REMOTE_TIMEOUT_MS;
  const branch = run.branch;
  // The standby holds only runs of WORKER_REPO_ROOT (no job repoPath), and nothing when it is off.
  const standbyMayHold = config.WORKER_REMOTE_STANDBY_MS > 0 && !run.job.repoPath;
  const result = (async () => {
    const standby = standbyMayHold ? await readStandby(repoPath, run.workspace_id, run.id) : undefined;
    if (standby) {
      await branchOwned;
      const notes = standby.notes ? `update ${notesRef} ${standby.notes}\n` : '';
      await runGit(repoPath, ['update-ref', '--stdin'], {
        input: `update refs/heads/${branch} ${standby.branch}\n${notes}`,
      });
      return { fetchedBytes: 0, standby };
    }
    return fetchRun({ repoPath, remote, branch, notesRef, branchInto: scratchRef, timeoutMs });
  })().catch((err: unknown) => err as Error);
  return { repoPath, scratchRef, result };
}

export async function prepareRemoteResume(args: {
  config: Config;
  run: RunRow;
  chain: CheckpointRow[];
  repoPath: string;
  prefetched?: PrefetchedRun;
  log: Logger;
}): Promise<RemoteResume> {
  const { config, run } = args;
  const notesRef = runNotesRef(run.workspace_id, run.id);
  const otherHost = !!run.host_id && run.host_id !== config.WORKER_HOST_ID;
  const here = otherHost
    ? { ...run, worktree_path: worktreePathFor(config.WORKER_WORKTREE_BASE, run.workspace_id, run.id) }
    : run;
  const latest = args.chain.at(-1)?.commit_oid;
  // Nothing checkpointed yet: the worktree starts again at the run's base, which a clone that is
  // behind the host that started the run may lack (only then is it fetched).
  const target = latest ?? run.base_oid;
  // Awaited first whatever follows: a standby's branch move has landed before anything reads the branch.
  const early = await args.prefetched?.result;
  if (!target || !run.branch) return { run: here, notesRef };
  const got = otherHost && latest && !(early instanceof Error) ? early : undefined;
  if (got?.standby && got.standby.branch === latest) {
    // The standby fetched the run's latest checkpoint ahead, and the branch and notes ref were moved
    // onto it: no fetch at all. (Its notes ref is the remote's as of that fetch: a note it lacks is
    // rewritten from Postgres by the verification.)
    args.prefetched!.settled = true;
    return { ...fetchedFrom(args, here, notesRef, 0, true), branchAt: latest };
  }
  if (got && !got.standby) {
    // Fetched at the claim; the branch is the run's own (run-job checked): moved onto it in one go.
    const scratch = args.prefetched!.scratchRef;
    await runGit(args.repoPath, ['update-ref', '--stdin'], {
      input: `update refs/heads/${run.branch} ${scratch}\ndelete ${scratch}\n`,
    });
    args.prefetched!.settled = true;
    return fetchedFrom(args, here, notesRef, got.fetchedBytes);
  }
  await discardPrefetch(args.prefetched);
  const present =
    (await runGit(args.repoPath, ['cat-file', '-e', `${target}^{commit}`], { allowExitCodes: [1, 128] })).exitCode ===
    0;
  if (present && (!otherHost || !latest)) return { run: here, notesRef };
  const remote = config.WORKER_CHECKPOINT_REMOTE!;
  const timeoutMs = config.WORKER_REMOTE_TIMEOUT_MS;
  const { fetchedBytes } = latest
    ? await fetchRun({ repoPath: args.repoPath, remote, branch: run.branch, notesRef, timeoutMs })
    : await fetchBase({ repoPath: args.repoPath, remote, oid: target, branch: run.branch, timeoutMs });
  return fetchedFrom(args, here, notesRef, fetchedBytes);
}

function fetchedFrom(
  args: { config: Config; run: RunRow; log: Logger },
  here: RunRow,
  notesRef: string,
  fetchedBytes: number,
  standby = false,
): RemoteResume {
  const { config, run } = args;
  const fetched = {
    fromHost: run.host_id ?? null,
    toHost: config.WORKER_HOST_ID,
    fetchedBytes,
    recloned: false as const,
  };
  args.log.info(
    { ...fetched, branch: run.branch, standby },
    standby
      ? "the run's checkpoints were already here, fetched ahead by the remote standby"
      : "fetched the run's checkpoints from the checkpoint remote",
  );
  return { run: here, notesRef, fetched: standby ? { ...fetched, standby: true } : fetched };
}

/** How long after a resume the local notes mirror starts (scheduleNotesMirror). */
export const NOTES_MIRROR_DELAY_MS = 1_000;

/** A notes mirror waiting to start: `finish()` starts it now if it has not started, and waits for it. */
export interface NotesMirror {
  finish(): Promise<void>;
}

/**
 * The local notes mirror (mirrorNotesLocally) of a resumed run, started NOTES_MIRROR_DELAY_MS
 * later: it is for people (`git notes show` on this host), not for verification, and started at
 * once its Postgres read, `git notes list` and fast-import competed with the run's first model
 * call and tool round. The run calls finish() before it ends, so a short run still gets every note.
 */
export function scheduleNotesMirror(start: () => Promise<void>): NotesMirror {
  let running: Promise<void> | undefined;
  const run = () => (running ??= start());
  const timer = setTimeout(run, NOTES_MIRROR_DELAY_MS);
  timer.unref();
  return {
    finish: () => {
      clearTimeout(timer);
      return run();
    },
  };
}

/**
 * Starts a scheduled mirror now if it has not started, and waits for it; nothing without one. A
 * function, not `mirroring?.finish()` inline: run-job's exhaustive switch right after it then
 * still type-checks as returning on every path.
 */
export async function finishMirror(mirror: NotesMirror | undefined): Promise<void> {
  await mirror?.finish();
}

/**
 * After a verified resume: every checkpoint's note under the local WORKER_NOTES_REF too (from
 * Postgres, the truth), so `git notes show` works on this host as on a single one.
 */
export async function mirrorNotesLocally(
  cwd: string,
  notesRef: string,
  chain: CheckpointRow[],
  log: Logger,
): Promise<void> {
  try {
    const noted = await notedCommits(cwd, notesRef);
    const rows = chain.filter((row) => row.commit_oid && !noted.has(row.commit_oid));
    if (rows.length)
      await writeCheckpointNotes(
        cwd,
        notesRef,
        rows.map((row) => ({ commitOid: row.commit_oid!, note: noteOfRow(row) })),
      );
  } catch (err) {
    log.warn(
      { error: (err as Error).message },
      "could not mirror the run's notes under the local notes ref; continuing",
    );
  }
}
