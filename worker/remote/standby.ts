// The remote standby (docs/checkpoints.md "Many hosts"): every host keeps the latest checkpoint of
// each run another host holds already fetched, so that taking such a run over (its host died, or
// released it) needs no fetch: the resume moves the run's branch and notes onto what the standby
// holds (resume.ts) and goes straight to the worktree. Without it, the fetch (a ref
// listing, a negotiation, index-pack, a connectivity check, and a network's round
// trips) sits on the resume's critical path. A crashed run is handed on only once its
// lease has expired (WORKER_LEASE_MS), so a standby sweeping more often than that is current.
//
// Every WORKER_REMOTE_STANDBY_MS, one worker process of the host (a lock in the common git dir):
//  1. asks Postgres which runs are running or queued on other hosts, with their latest checkpoint;
//  2. fetches, in one `git fetch`, the branch and notes of those whose standby ref is not at that
//     checkpoint, onto refs/echodo-standby/{branches,notes}/<workspace>/<run>: never onto the run's
//     own refs, whose branch ownership is checked by whoever resumes the run;
//  3. deletes the standby refs of runs no longer held elsewhere (finished, or taken over here);
//  4. aims the host's spare worktree (worker/worktrees/spares.ts) at the latest checkpoint of the run that
//     looks abandoned (queued, or its lease unrenewed for two heartbeats: pickAim), so that the
//     take-over of that run writes no file either: a two-way checkout reads every tree of both
//     commits (most of a resume from the standby). One spare, so one run;
//     once that run has not looked abandoned for AIM_HOLD_MS, the spare goes back to the repository's HEAD.
// A failed fetch is tried again for that commit after STANDBY_RETRY_MS (a resume meanwhile fetches
// for itself, as without a standby). Fetched objects are packed, never loose (fetchMeasured), and
// the packs are rolled up geometrically, as a run's checkpoint packs are (worker/checkpoints/git/packing.ts).
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Sql } from 'postgres';
import { errorMessage } from '../../core/errors.ts';
import { withFileLock } from '../../core/file-lock.ts';
import { runsOnOtherHosts, type StandbyRun } from '../../store/standby.ts';
import { ObjectPacker } from '../checkpoints/git/packing.ts';
import { fetchMeasured, runNotesRef } from './push.ts';
import { commonDirOnDisk, runGit } from '../git/run-git.ts';
import { ObjectReader } from '../git/objects.ts';
import type { Logger } from '../log.ts';
import { repoCommonDir } from '../worktrees/worktree.ts';

const STANDBY_PREFIX = 'refs/echodo-standby/';
/** A fetch that failed is not tried again for the same commit before this. */
export const STANDBY_RETRY_MS = 30_000;
/** Fetches between two geometric roll-ups of the packs they leave. */
const ROLL_UP_EVERY = 8;

/** Where the standby keeps a run's branch and notes in the host's repository. */
export function standbyRefs(workspaceId: string, agentRunId: string): { branch: string; notes: string } {
  return {
    branch: `${STANDBY_PREFIX}branches/${workspaceId}/${agentRunId}`,
    notes: `${STANDBY_PREFIX}notes/${workspaceId}/${agentRunId}`,
  };
}

/** `git for-each-ref` of `patterns`: ref name → oid. */
async function refsUnder(repoPath: string, patterns: string[]): Promise<Map<string, string>> {
  const out = (await runGit(repoPath, ['for-each-ref', '--format=%(objectname) %(refname)', ...patterns])).stdout;
  return new Map(
    out
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        const [oid, ref] = line.split(' ');
        return [ref!, oid!] as const;
      }),
  );
}

/**
 * What the standby holds for one run: its branch's oid and its notes', if any. Read in this process
 * (ref files, as git reads them) at a take-over's claim, where a git process costs its fork from a
 * large worker (blocking the event loop while Postgres answers); by git when the
 * repository keeps its refs another way (reftable).
 */
export async function readStandby(
  repoPath: string,
  workspaceId: string,
  agentRunId: string,
): Promise<{ branch: string; notes?: string } | undefined> {
  const refs = standbyRefs(workspaceId, agentRunId);
  const commonDir = commonDirOnDisk(repoPath);
  const reader = commonDir ? ObjectReader.open(commonDir) : undefined;
  const held = reader
    ? new Map([refs.branch, refs.notes].map((ref) => [ref, reader.resolveRef(ref)] as const))
    : await refsUnder(repoPath, [refs.branch, refs.notes]);
  const branch = held.get(refs.branch);
  return branch ? { branch, notes: held.get(refs.notes) } : undefined;
}

async function deleteRefs(repoPath: string, refs: string[]): Promise<void> {
  if (refs.length)
    await runGit(repoPath, ['update-ref', '--stdin'], { input: refs.map((ref) => `delete ${ref}\n`).join('') });
}

/** The standby switched off (WORKER_REMOTE_STANDBY_MS=0): what it held is let go. Returns how many refs. */
export async function dropStandby(repoPath: string): Promise<number> {
  if (!existsSync(repoPath)) return 0;
  const held = [...(await refsUnder(repoPath, [STANDBY_PREFIX])).keys()];
  await deleteRefs(repoPath, held);
  return held.length;
}

export interface StandbyOptions {
  repoPath: string;
  remote: string;
  hostId: string;
  intervalMs: number;
  timeoutMs: number;
  /** The system connection: the runs of other hosts are listed across workspaces (migrations 013, 014). */
  admin: Sql;
  /**
   * Brings the host's spare worktree to a commit (null: back to the repository's HEAD); none when
   * spares are off. Runs whose lease has less than `overdueLeftMs` left look abandoned.
   */
  aimSpare?: (commit: string | null) => Promise<unknown>;
  overdueLeftMs?: number;
  log: Logger;
}

/**
 * The run whose take-over is likeliest next, among those the standby holds current: a queued one
 * (released, waiting for a taker), else the running one whose lease has least left, if that is
 * under `overdueLeftMs` (WORKER_LEASE_MS less two heartbeats: its holder stopped renewing it).
 */
export function pickAim(runs: StandbyRun[], overdueLeftMs: number): StandbyRun | undefined {
  const left = (run: StandbyRun) => (run.status === 'queued' ? -Infinity : (run.lease_left_ms ?? Infinity));
  const [first] = runs.filter((run) => left(run) < overdueLeftMs).sort((a, b) => left(a) - left(b));
  return first;
}

export interface SweepOutcome {
  fetched: number;
  fetchedBytes: number;
  removed: number;
}

export class RemoteStandby {
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<unknown> | undefined;
  private stopped = false;
  /** Standby branch ref → the commit last tried and when, for runs whose fetch failed. */
  private readonly failed = new Map<string, { commit: string; at: number }>();
  private readonly packer: ObjectPacker;
  /** The commit this process last aimed the spare at (null: let go), for the log. */
  private aimed: string | null = null;

  constructor(private readonly o: StandbyOptions) {
    this.packer = new ObjectPacker(o.repoPath, ROLL_UP_EVERY, o.log);
  }

  start(): void {
    if (this.stopped || this.timer) return;
    this.timer = setTimeout(() => {
      this.sweeping = this.sweepOnce().finally(() => {
        this.sweeping = this.timer = undefined;
        this.start();
      });
    }, this.o.intervalMs);
    this.timer.unref();
  }

  /** No new sweep; the one in flight (a fetch at most WORKER_REMOTE_TIMEOUT_MS) is waited for. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.sweeping;
  }

  /**
   * One sweep, unless another worker of this host is sweeping (then nothing: it does the same).
   * Never throws: the standby only ever saves a resume its fetch.
   */
  async sweepOnce(): Promise<SweepOutcome | undefined> {
    if (!existsSync(this.o.repoPath)) return undefined; // a host with no copy yet: the first run makes it
    try {
      const lock = path.join(await repoCommonDir(this.o.repoPath), 'echodo-standby.lock');
      return await withFileLock(lock, () => this.sweep(), { timeoutMs: 0, what: 'remote standby' });
    } catch (err) {
      this.o.log.debug({ error: errorMessage(err) }, 'remote standby: sweep skipped');
      return undefined;
    }
  }

  private async sweep(): Promise<SweepOutcome> {
    const { repoPath, log } = this.o;
    const runs = (await runsOnOtherHosts(this.o.admin, this.o.hostId)).map((run) => ({
      run,
      refs: standbyRefs(run.workspace_id, run.agent_run_id),
    }));
    const held = await refsUnder(repoPath, [STANDBY_PREFIX]);
    const wanted = new Set(runs.flatMap(({ refs }) => [refs.branch, refs.notes]));
    const gone = [...held.keys()].filter((ref) => !wanted.has(ref));
    await deleteRefs(repoPath, gone);
    for (const ref of this.failed.keys()) if (!wanted.has(ref)) this.failed.delete(ref);
    const now = Date.now();
    const due = runs.filter(({ run, refs }) => {
      const tried = this.failed.get(refs.branch);
      return (
        held.get(refs.branch) !== run.commit_oid &&
        !(tried?.commit === run.commit_oid && now - tried.at < STANDBY_RETRY_MS)
      );
    });
    const outcome = { fetched: 0, fetchedBytes: 0, removed: gone.length };
    if (due.length) {
      try {
        const what = `the checkpoints of ${due.length} run(s) held by other hosts`;
        const { fetchedBytes } = await fetchMeasured(
          repoPath,
          this.o.remote,
          due.flatMap(refspecs),
          what,
          this.o.timeoutMs,
        );
        log.debug({ runs: due.length, fetchedBytes, removed: gone.length }, 'remote standby: fetched');
        if (fetchedBytes) this.packer.afterCheckpoint();
        Object.assign(outcome, { fetched: due.length, fetchedBytes });
        for (const { run, refs } of due) held.set(refs.branch, run.commit_oid);
      } catch (err) {
        for (const { run, refs } of due) this.failed.set(refs.branch, { commit: run.commit_oid, at: now });
        log.warn(
          { runs: due.length, error: errorMessage(err) },
          `remote standby: fetch failed; tried again in ${STANDBY_RETRY_MS / 1000} s`,
        );
      }
    }
    const current = runs.filter(({ run, refs }) => held.get(refs.branch) === run.commit_oid).map(({ run }) => run);
    await this.aim(pickAim(current, this.o.overdueLeftMs ?? 0)?.commit_oid ?? null);
    return outcome;
  }

  /**
   * The spare to `commit` (null: let go), every sweep: the spare's mark holds the state for every
   * process of the host (makeSpareLocked), and a run of this host may have taken the aimed spare
   * meanwhile (then the new one is aimed). Otherwise a few file reads, no git. Never throws.
   */
  private async aim(commit: string | null): Promise<void> {
    if (!this.o.aimSpare) return;
    try {
      await this.o.aimSpare(commit);
      if (commit !== this.aimed)
        this.o.log.debug(
          { commit },
          commit
            ? "remote standby: spare worktree aimed at an abandoned run's checkpoint"
            : 'remote standby: nothing to aim at',
        );
      this.aimed = commit;
    } catch (err) {
      this.o.log.warn(
        { commit, error: errorMessage(err) },
        'remote standby: could not aim the spare worktree; a take-over checks it out as before',
      );
    }
  }
}

/**
 * A run's branch and notes onto its standby refs. The notes ref is a pattern (as in fetchRun): a
 * run whose first note has not reached the remote yet (it follows its commit) fetches none.
 */
function refspecs({ run, refs }: { run: StandbyRun; refs: { branch: string; notes: string } }): string[] {
  return [
    `+refs/heads/${run.branch}:${refs.branch}`,
    `+${runNotesRef(run.workspace_id, run.agent_run_id)}*:${refs.notes}*`,
  ];
}
