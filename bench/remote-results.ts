// The many-hosts benchmark's figures, its targets and its table.
// Kept apart from results.ts, which only registers them.
import type { Summary } from './stats.ts';

/** How the remote was served on 127.0.0.1: `git daemon` (git://) or git's smart HTTP (`git http-backend`). */
export type RemoteTransport = 'git' | 'http';

export interface RemoteFigure {
  files: number;
  /** Absent in results from before the option: git. */
  transport?: RemoteTransport;
  /** Paths touched per checkpointed round in the checkpoint-cost part. */
  touched: number;
  /** The remote repository's object store right after it was made (one pack: the packed size). */
  repoPackedBytes: number;
  /**
   * What a checkpoint costs the round without / with WORKER_CHECKPOINT_REMOTE (git daemon on
   * 127.0.0.1): CheckpointWriter.write(), plus what is left of readyForTools() after a model call
   * of modelMs (the work behind the round runs during it).
   */
  checkpointOff: Summary;
  checkpointOn: Summary;
  /** The model call between rounds in that measure (bench/remote.ts MODEL_MS). */
  modelMs?: number;
  /** write() start → the checkpoint counted (its row in, after the push with the remote) and its index in step. */
  countedOff?: Summary;
  countedOn?: Summary;
  /** The push alone (RemotePusher.pushCheckpoint), inside countedOn. */
  push: Summary;
  /** checkpointOn.median / checkpointOff.median */
  checkpointRatio: number;
  rounds: number;
  /** How the timed cross-host resumes ended (executeDelivery's result). */
  outcomes: Record<string, number>;
  /**
   * Host B, an older clone that has been up while host A held the run: its warm spare worktree and
   * its remote standby's copy of the run's latest checkpoint made before the claim, the spare aimed
   * at that checkpoint (in results without crossHostResumeUnaimed: the spare at HEAD; without
   * crossHostResumeFetch: the spare only, fetching at the claim). Claim → first resumed tool call.
   */
  crossHostResume: Summary;
  /** The same host with its spare at its clone's HEAD: the take checks out the checkpoint. */
  crossHostResumeUnaimed?: Summary;
  /** The same host with its standby behind: the spare, and the fetch at the claim. */
  crossHostResumeFetch?: Summary;
  /** Host B cold: an older clone and an empty worktree base (no spare), interleaved with the above. */
  crossHostResumeCold: Summary;
  /** run_resumed's fetchedBytes: the pack host B received when it fetched at the claim. */
  fetchedBytes: Summary;
  /** `git clone` of the remote over the transport (full, checked out). */
  cloneGit: Summary;
  /** `git clone --no-local` of the remote's path (file://), as the single-host resume bench does. */
  cloneFile: Summary;
  /** `git clone --filter=blob:none` over the transport (checked out, so HEAD's blobs are fetched too). */
  partialClone: Summary;
  /** Object bytes in the full and in the partial clone. */
  cloneGitBytes: number;
  partialCloneBytes: number;
  speedupVsClone: number;
  speedupVsCloneFile: number;
  speedupVsPartial: number;
  /** cloneGit.median / crossHostResumeUnaimed.median */
  speedupUnaimedVsClone?: number;
  /** cloneGit.median / crossHostResumeFetch.median */
  speedupFetchVsClone?: number;
  /** cloneGit.median / crossHostResumeCold.median */
  speedupColdVsClone: number;
  /** The floor, bare on a fresh host B (bench/remote-resume.ts measureFloor): the worker's fetch, then the spare's checkout. */
  floorFetch?: Summary;
  floorCheckout?: Summary;
  /** fetchedBytes.median / repoPackedBytes */
  fetchedShareOfRepo: number;
  /** The worker's own log lines during one traced cross-host resume, ms after the claim. */
  timeline: { msAfterClaim: number; msg: string }[];
  timelineUnaimed?: { msAfterClaim: number; msg: string }[];
  timelineFetch?: { msAfterClaim: number; msg: string }[];
  timelineCold: { msAfterClaim: number; msg: string }[];
}

interface Target {
  name: string;
  goal: string;
  measured: string;
  met: boolean | null;
}

const ms = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
const mp = (s: Summary) => `${ms(s.median)} / ${ms(s.p99)}`;
const x = (r: number) => (Number.isNaN(r) ? 'n/a' : `${r.toFixed(2)}×`);
/** The floor's median (fetch + checkout) and the most a resume that fetches at the claim could gain over a clone. */
const floorOf = (f: RemoteFigure) =>
  f.floorFetch && f.floorCheckout
    ? {
        ms: f.floorFetch.median + f.floorCheckout.median,
        speedup: f.cloneGit.median / (f.floorFetch.median + f.floorCheckout.median),
      }
    : undefined;
const floorNote = (f: RemoteFigure) => {
  const floor = floorOf(f);
  return floor ? ` (floor: fetch + spare checkout ${ms(floor.ms)} ms, at most ${x(floor.speedup)})` : '';
};
const fetchNote = (f: RemoteFigure) =>
  f.crossHostResumeFetch
    ? ` (with the standby; fetching at the claim ${ms(f.crossHostResumeFetch.median)} ms = ${x(f.speedupFetchVsClone ?? NaN)})`
    : floorNote(f);
const scheme = (f: RemoteFigure) => (f.transport === 'http' ? 'http://' : 'git://');
const served = (r: RemoteFigure[]) =>
  r[0]?.transport === 'http' ? 'git http-backend behind an HTTP server' : 'git daemon';
const kib = (b: number) => (b >= 1024 * 1024 ? `${(b / 1024 / 1024).toFixed(1)} MiB` : `${(b / 1024).toFixed(1)} KiB`);

export function remoteTargets(figures: RemoteFigure[] | undefined): Target[] {
  const r = figures ?? [];
  const large = r.filter((f) => f.files >= 10_000);
  return [
    {
      name: 'checkpoint with the remote',
      goal: `checkpoint with WORKER_CHECKPOINT_REMOTE ≤ 1.5 × without it (on the round), loopback ${served(r)}, every size`,
      measured: r.length
        ? r
            .map(
              (f) =>
                `${f.files}: ${ms(f.checkpointOn.median)} vs ${ms(f.checkpointOff.median)} ms = ${x(f.checkpointRatio)}`,
            )
            .join(', ')
        : 'not measured',
      met: r.length ? r.every((f) => f.checkpointRatio <= 1.5) : null,
    },
    {
      name: 'cross-host resume vs clone',
      goal: 'cross-host resume (claim → first tool call) ≥ 10× faster than a full git clone of the remote, at 10k files and up',
      measured: large.length
        ? large
            .map(
              (f) =>
                `${f.files}: ${ms(f.crossHostResume.median)} vs ${ms(f.cloneGit.median)} ms (${scheme(f)}) = ${x(f.speedupVsClone)}${fetchNote(f)}`,
            )
            .join(', ')
        : 'not measured',
      met: large.length ? large.every((f) => f.speedupVsClone >= 10) : null,
    },
  ];
}

function table(head: string[], rows: (string | number)[][]): string {
  return [
    `| ${head.join(' | ')} |`,
    `| ${head.map(() => '---').join(' | ')} |`,
    ...rows.map((row) => `| ${row.join(' | ')} |`),
  ].join('\n');
}

export function renderRemote(r: RemoteFigure[]): string {
  const out: string[] = [];
  out.push(`### 7. Many hosts: checkpoint remote (${served(r)} on 127.0.0.1) and cross-host resume (ms, median / p99)`);
  const clone = `git clone ${r[0] ? scheme(r[0]) : 'git://'}`;
  const model = r.find((f) => f.modelMs !== undefined)?.modelMs;
  if (model !== undefined) {
    out.push(
      `"On the round": write() plus what the next tool call still waits for after a ${model} ms model call; "counted after": write() start → the row in (after the push with the remote) and the index in step.`,
    );
  }
  out.push(
    table(
      [
        'files',
        'touched',
        'on the round, remote off',
        'on the round, remote on',
        'on / off',
        'counted after, off',
        'counted after, on',
        'the push',
      ],
      r.map((f) => [
        f.files,
        f.touched,
        mp(f.checkpointOff),
        mp(f.checkpointOn),
        x(f.checkpointRatio),
        f.countedOff ? mp(f.countedOff) : 'n/a',
        f.countedOn ? mp(f.countedOn) : 'n/a',
        mp(f.push),
      ]),
    ),
  );
  out.push(
    table(
      [
        'files',
        'cross-host resume: claim → first tool call (standby + spare aimed)',
        'standby + spare at HEAD',
        'standby behind: fetch at the claim (spare)',
        'cold host (no spare, no standby)',
        clone,
        'git clone --no-local (path)',
        'partial clone --filter=blob:none',
        'speed-up vs clone',
        'spare at HEAD vs clone',
        'fetching vs clone',
        'cold vs clone',
        'vs --no-local',
        'vs partial',
      ],
      r.map((f) => [
        f.files,
        mp(f.crossHostResume),
        f.crossHostResumeUnaimed ? mp(f.crossHostResumeUnaimed) : 'n/a',
        f.crossHostResumeFetch ? mp(f.crossHostResumeFetch) : 'n/a',
        f.crossHostResumeCold ? mp(f.crossHostResumeCold) : 'n/a',
        mp(f.cloneGit),
        mp(f.cloneFile),
        mp(f.partialClone),
        x(f.speedupVsClone),
        x(f.speedupUnaimedVsClone ?? NaN),
        x(f.speedupFetchVsClone ?? NaN),
        x(f.speedupColdVsClone ?? NaN),
        x(f.speedupVsCloneFile),
        x(f.speedupVsPartial),
      ]),
    ),
  );
  out.push(
    table(
      [
        'files',
        'repository (packed)',
        'resume fetched (median)',
        'fetched / repository',
        'full clone objects',
        'partial clone objects',
      ],
      r.map((f) => [
        f.files,
        kib(f.repoPackedBytes),
        kib(f.fetchedBytes.median),
        `${(f.fetchedShareOfRepo * 100).toFixed(2)}%`,
        kib(f.cloneGitBytes),
        kib(f.partialCloneBytes),
      ]),
    ),
  );
  if (r.some((f) => floorOf(f))) {
    out.push(
      "The floor of a resume that fetches at the claim: on a fresh host B, bare, the worker's fetch of the run's branch and notes, then the spare's `read-tree -m -u` at the checkpoint (no Postgres, no verification). A clone divided by it is the most such a resume could gain.",
    );
    out.push(
      table(
        [
          'files',
          'fetch',
          'spare checkout',
          'floor (sum of medians)',
          clone,
          'clone / floor',
          'cross-host resume fetching at the claim',
          'resume / floor',
        ],
        r
          .filter((f) => floorOf(f))
          .map((f) => {
            const floor = floorOf(f)!;
            const fetching = f.crossHostResumeFetch ?? f.crossHostResume;
            return [
              f.files,
              mp(f.floorFetch!),
              mp(f.floorCheckout!),
              ms(floor.ms),
              ms(f.cloneGit.median),
              x(floor.speedup),
              ms(fetching.median),
              x(fetching.median / floor.ms),
            ];
          }),
      ),
    );
  }
  out.push(
    'How the timed cross-host resumes ended: ' +
      r
        .map(
          (f) =>
            `${f.files} files: ${Object.entries(f.outcomes)
              .map(([k, n]) => `${n} ${k}`)
              .join(', ')}`,
        )
        .join('; '),
  );
  const trace = (t: { msAfterClaim: number; msg: string }[]) => t.map((e) => `${e.msAfterClaim} ${e.msg}`).join(' → ');
  for (const f of r)
    if (f.timeline.length)
      out.push(
        `Traced cross-host resume (standby + spare aimed) at ${f.files} files (ms after claim): ${trace(f.timeline)}`,
      );
  for (const f of r)
    if (f.timelineUnaimed?.length)
      out.push(
        `Traced cross-host resume (standby + spare at HEAD) at ${f.files} files (ms after claim): ${trace(f.timelineUnaimed)}`,
      );
  for (const f of r)
    if (f.timelineFetch?.length)
      out.push(
        `Traced cross-host resume fetching at the claim at ${f.files} files (ms after claim): ${trace(f.timelineFetch)}`,
      );
  for (const f of r)
    if (f.timelineCold?.length)
      out.push(`Traced cold cross-host resume at ${f.files} files (ms after claim): ${trace(f.timelineCold)}`);
  return out.join('\n\n');
}
