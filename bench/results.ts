// The shape of bench/results.json, the targets of the issue judged on it, and the printed tables
// (markdown, so docs/benchmarks.md can quote them as printed).
import { renderUsageMetrics, usageMetricsTarget, type UsageMetricsFigure } from './usage-metrics.ts';
import type { LongRunResult } from './long-run.ts';
import type { OutageFigure } from './outage.ts';
import type { WholeCostResult } from './whole-cost.ts';
import { longRunTargets, renderLongRun } from './long-run-report.ts';
import { renderRounds, roundsTarget, type RoundsResult } from './rounds.ts';
import type { MissionControlLevel } from './mission-control.ts';
import type { ThroughputResult } from './throughput.ts';
import { remoteTargets, renderRemote, type RemoteFigure } from './remote-results.ts';
import { ratio, type Summary } from './stats.ts';

export interface CheckpointFigure {
  files: number;
  touched: number;
  payloadBytes: number;
  total: Summary;
  /** What the writer leaves behind the round (the note, and the index when git stores the bytes as-is), awaited after `total`. */
  behind?: Summary;
  parts: {
    fence: Summary;
    content: Summary;
    hash: Summary;
    row: Summary;
    note: Summary;
    partsSum: Summary;
    indexBehind?: Summary;
  };
  /** The replayed checkpoint up to the row (fence + content + hash + row): the round's wait if the note went async. */
  withoutNote: Summary;
  floors: { insert: Summary; gitCommit: Summary; sumOfMedians: number };
  gitSpawn: Summary;
  /** Each git command of the content commit, and the note's two lookups before fast-import. */
  gitParts: Record<string, Summary>;
  /** total.median / (insert.median + gitCommit.median) */
  ratioToFloors: number;
  withoutNoteRatioToFloors: number;
  /** Samples behind each figure (fewer at 250k files). */
  samples?: number;
  /** The peers' git snapshots of the same change (bench/peers-git.ts), and our total over each. */
  gitPeers?: { cline: Summary; opencode: Summary; oursOverCline: number; oursOverOpencode: number };
}

export interface IntegrityFigure {
  files: number;
  touched: number;
  checkpoints: number;
  intact: boolean;
  findings: string[];
  check: Summary;
  gitStatus: Summary;
  ratioToGitStatus: number;
  profile: Record<string, Summary>;
}

export interface ResumeFigure {
  files: number;
  rounds: number;
  outcomes: Record<string, number>;
  resume: Summary;
  /** What-if: the same resume with the TouchTracker's chokidar watcher not started. */
  resumeNoWatcher: Summary;
  verifyOnly: Summary;
  clone: Summary;
  cloneAndRedo: Summary;
  /** clone.median / resume.median */
  speedupVsClone: number;
  speedupVsCloneAndRedo: number;
  speedupNoWatcherVsClone: number;
  /** Commits of history in the cloned repo (bench/repos.ts), and samples taken. */
  history?: number;
  samples?: number;
  /** The same files with one commit of history, cloned in the same rotation (not at 250k). */
  cloneNoHistory?: Summary;
  speedupVsCloneNoHistory?: number;
  /** The worker's own log lines during one traced resume, ms after the claim. */
  timeline: { msAfterClaim: number; msg: string }[];
}

export interface PeersFigure {
  payloadBytes: number;
  ours: Summary;
  floorInsert: Summary;
  langgraphPut: Summary;
  dbosStep: Summary | null;
  dbos: { ok: true; version: string } | { ok: false; error: string };
  oursOverLanggraph: number;
  oursOverDbos: number | null;
  oursOverFloor: number;
  profile: { emptyTx: Summary; insertOnly: Summary; leaseUpdateOnly: Summary; fencedInsertForShare: Summary };
  forShareOverLanggraph: number;
}

/** The reads measured at every table size, by results key; the labels are the table's rows. */
export const MC_READS = {
  convoyDetail: 'convoy detail (10 runs × 50 checkpoints)',
  runsFirst: 'runs list: first page (50)',
  runsFiltered: 'runs list: filtered page (model + status)',
  runsSearchRare: 'runs list: text search matching one run',
  convoysFirst: 'convoy list: first page (50)',
  convoysFiltered: 'convoy list: filtered page (a status no run has)',
  timelineShort: 'run page: 20-checkpoint run',
  timelineLongFirst: 'run page: 2,000-checkpoint run, first page',
  timelineLongLast: 'run page: 2,000-checkpoint run, last page',
  checkpointsLongLast: 'GET /api/runs/:id/checkpoints: 2,000-checkpoint run, last page',
  storagePage: 'Storage page: workspace of 10^3 runs, git bytes of the 50 runs and 50 convoys shown',
  storagePageChanged: 'Storage page just after a git write (every git figure measured again)',
} as const;
export type McRead = keyof typeof MC_READS;

/** Each read of MC_READS at one table size; older result files also hold `runHistory` (the whole run's read). */
export type MissionControlFigure = MissionControlLevel & Partial<Record<McRead | 'runHistory', Summary>>;

/** The read that grew most from the smallest table to the largest, and by how much (medians). */
export function worstMissionControlRatio(figures: MissionControlFigure[]): { read: string; ratio: number } | null {
  const [first, last] = [figures[0], figures.at(-1)];
  if (!first || !last || first === last) return null;
  let worst: { read: string; ratio: number } | null = null;
  for (const read of [...Object.keys(MC_READS), 'runHistory'] as (McRead | 'runHistory')[]) {
    const [a, b] = [first[read], last[read]];
    if (!a || !b) continue;
    const r = ratio(b.median, a.median);
    if (!worst || r > worst.ratio) worst = { read, ratio: r };
  }
  return worst;
}

export interface Target {
  name: string;
  goal: string;
  measured: string;
  met: boolean | null;
}

export interface BenchResults {
  generatedAt: string;
  mode: 'full' | 'quick';
  durationSeconds: number;
  machine: Record<string, unknown>;
  versions: Record<string, unknown>;
  database: { embedded: boolean; server: string };
  plan: Record<string, unknown>;
  checkpoint: CheckpointFigure[];
  integrity: IntegrityFigure[];
  resume: ResumeFigure[];
  peers: PeersFigure | null;
  missionControl: MissionControlFigure[];
  missionControlRatio: number | null;
  throughput: ThroughputResult[];
  /** The many-hosts bench (checkpoint remote, cross-host resume), when it ran. */
  remote?: RemoteFigure[];
  /** The long run (with its prune phase), when it ran. */
  longRun?: LongRunResult;
  /** Rounds of one long run through the live loop (bench/rounds.ts), when it ran. */
  rounds?: RoundsResult;
  /** Recovery from a Postgres outage (bench/outage.ts), when it ran. */
  outage?: OutageFigure;
  /** The whole cost of checkpointing a run against the bare floor (bench/whole-cost.ts), when it ran. */
  wholeCost?: WholeCostResult;
  /** Usage recording and metrics on against off (bench/usage-metrics.ts), when it ran. */
  usageMetrics?: UsageMetricsFigure;
  targets: Target[];
}

const ms = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
const mp = (s: Summary) => `${ms(s.median)} / ${ms(s.p99)}`;
const x = (r: number | null) => (r === null || Number.isNaN(r) ? 'n/a' : `${r.toFixed(2)}×`);

export function evaluateTargets(r: Omit<BenchResults, 'targets'>): Target[] {
  const targets: Target[] = [];
  targets.push({
    name: 'checkpoint vs floors',
    goal: 'checkpoint total ≤ 1.0 × (bare INSERT + bare git add + git commit of the same change), at every repo size and touched count',
    measured: r.checkpoint.length
      ? r.checkpoint.map((c) => `${c.files}/${c.touched}: ${x(c.ratioToFloors)}`).join(', ')
      : 'not measured',
    met: r.checkpoint.length ? r.checkpoint.every((c) => c.ratioToFloors <= 1) : null,
  });
  targets.push({
    name: 'Postgres part vs LangGraph put',
    goal: "our Postgres write ≤ the peer's put (same database, same payload)",
    measured: r.peers
      ? `${ms(r.peers.ours.median)} ms vs ${ms(r.peers.langgraphPut.median)} ms = ${x(r.peers.oursOverLanggraph)}${r.peers.dbosStep ? `; DBOS step ${ms(r.peers.dbosStep.median)} ms = ${x(r.peers.oursOverDbos)}` : ''}`
      : 'not measured',
    met: r.peers ? r.peers.oursOverLanggraph <= 1 : null,
  });
  const big = r.resume.filter((f) => f.files >= 10_000);
  const speedups = [...r.resume].sort((a, b) => a.files - b.files).map((f) => f.speedupVsClone);
  // "Grows" means clearly: at least 10% more at each larger size, not noise around a constant.
  const grows = speedups.length > 1 ? speedups.every((v, i) => i === 0 || v >= 1.1 * speedups[i - 1]!) : null;
  targets.push({
    name: 'resume vs clone',
    goal: 'resume (claim → first resumed tool call) ≥ 20× faster than git clone --no-local, at 10k files and above',
    measured: big.length
      ? big
          .map((f) => `${f.files}: ${ms(f.resume.median)} ms vs ${ms(f.clone.median)} ms = ${x(f.speedupVsClone)}`)
          .join(', ')
      : 'not measured',
    met: big.length ? big.every((f) => f.speedupVsClone >= 20) : null,
  });
  targets.push({
    name: 'resume ratio grows with repo size',
    goal: 'the speed-up grows with repo size (≥ 10% per size step)',
    measured: r.resume.length
      ? [...r.resume]
          .sort((a, b) => a.files - b.files)
          .map((f) => `${f.files}: ${x(f.speedupVsClone)}`)
          .join(', ')
      : 'not measured',
    met: grows,
  });
  const worst = [...r.integrity].sort((a, b) => b.ratioToGitStatus - a.ratioToGitStatus)[0];
  targets.push({
    name: 'integrity check vs git status',
    goal: 'integrity check ≤ 1.5 × git status on the same worktree, at every size',
    measured: r.integrity.length
      ? r.integrity.map((f) => `${f.files}/${f.touched}: ${x(f.ratioToGitStatus)}`).join(', ')
      : 'not measured',
    met: worst ? worst.ratioToGitStatus <= 1.5 : null,
  });
  const worstRead = worstMissionControlRatio(r.missionControl);
  targets.push({
    name: 'mission control reads at 10^6 rows',
    goal: 'every mission control read at 10^6 rows ≤ 2 × its time at 10^4 rows',
    measured:
      r.missionControlRatio !== null && worstRead
        ? `worst: ${worstRead.read} ${x(worstRead.ratio)} (${r.missionControl.map((m) => m.rows).join(' → ')} rows)`
        : 'not measured',
    met:
      r.missionControlRatio !== null && r.missionControl.some((m) => m.rows >= 1_000_000)
        ? r.missionControlRatio <= 2
        : null,
  });
  if (r.longRun) targets.push(...longRunTargets(r.longRun));
  if (r.rounds) targets.push(roundsTarget(r.rounds));
  targets.push(...remoteTargets(r.remote));
  if (r.outage) {
    targets.push({
      name: 'recovery after a Postgres outage',
      goal: 'Postgres answering again → every lapsed run running again ≤ 2 × WORKER_LEASE_MS',
      measured: `median ${ms(r.outage.recovery.median)} ms, max ${x(r.outage.recoveryOverLeaseMax)} the lease (${r.outage.leaseMs} ms)`,
      met: r.outage.recoveryOverLeaseMax <= 2,
    });
  }
  if (r.wholeCost) {
    const w = r.wholeCost;
    targets.push({
      name: 'whole cost of checkpointing',
      goal:
        `a ${w.rounds}-round run at ${w.files} files, a checkpoint every round, start to finish: its cost ` +
        `≤ ${w.target} × bare git add + git commit + INSERT per round`,
      measured: `${ms(w.cost.ours.median)} ms vs ${ms(w.cost.floor.median)} ms = ${x(w.ratio)}`,
      met: w.met,
    });
  }
  if (r.usageMetrics) targets.push(usageMetricsTarget(r.usageMetrics));
  return targets;
}

function table(head: string[], rows: (string | number)[][]): string {
  const lines = [`| ${head.join(' | ')} |`, `| ${head.map(() => '---').join(' | ')} |`];
  for (const row of rows) lines.push(`| ${row.join(' | ')} |`);
  return lines.join('\n');
}

/** Every table, in markdown. Times are median / p99 in milliseconds. */
export function renderTables(r: BenchResults): string {
  const out: string[] = [];
  if (r.checkpoint.length) {
    out.push('### 1. Checkpoint cost per tool round (ms, median / p99)');
    out.push(
      table(
        [
          'files',
          'touched',
          'checkpoint total',
          'behind the round (note, index)',
          'content commit',
          'Postgres row',
          'git note',
          'fence',
          'describe+hash',
          'floor INSERT',
          'floor git commit',
          'total / floors',
          'without note / floors',
        ],
        r.checkpoint.map((c) => [
          c.files,
          c.touched,
          mp(c.total),
          c.behind ? mp(c.behind) : '',
          mp(c.parts.content),
          mp(c.parts.row),
          mp(c.parts.note),
          mp(c.parts.fence),
          mp(c.parts.hash),
          mp(c.floors.insert),
          mp(c.floors.gitCommit),
          x(c.ratioToFloors),
          x(c.withoutNoteRatioToFloors),
        ]),
      ),
    );
    if (r.checkpoint.some((c) => c.gitPeers)) {
      out.push(
        "#### Repository size: our checkpoint vs the floor and the peers' git snapshots of the same change (ms, median / p99)",
      );
      out.push(
        table(
          [
            'files',
            'touched',
            'samples',
            'ours (total)',
            'floor (INSERT + git add + commit)',
            'ours / floor',
            'Cline-style (add -A + commit)',
            'ours / Cline',
            'OpenCode-style (add . + write-tree)',
            'ours / OpenCode',
          ],
          r.checkpoint
            .filter((c) => c.gitPeers)
            .map((c) => [
              c.files,
              c.touched,
              c.samples ?? '',
              mp(c.total),
              `${ms(c.floors.sumOfMedians)}`,
              x(c.ratioToFloors),
              mp(c.gitPeers!.cline),
              x(c.gitPeers!.oursOverCline),
              mp(c.gitPeers!.opencode),
              x(c.gitPeers!.oursOverOpencode),
            ]),
        ),
      );
    }
    out.push(
      `One git process doing nothing (rev-parse) costs ${mp(r.checkpoint[0]!.gitSpawn)} ms here; a checkpoint spawns 4 (content: update-index, write-tree, update-ref; the commit object is written in-process), plus 1 for the note (fast-import), which runs behind the next round.`,
    );
    out.push('The git commands one by one (ms, median / p99):');
    const parts = Object.keys(r.checkpoint[0]!.gitParts);
    if (parts.length)
      out.push(
        table(
          ['files', 'touched', ...parts],
          r.checkpoint.map((c) => [c.files, c.touched, ...parts.map((p) => (c.gitParts[p] ? mp(c.gitParts[p]) : ''))]),
        ),
      );
  }
  if (r.peers) {
    const p = r.peers;
    out.push(`### 2. Postgres write vs peers (same database, ${p.payloadBytes}-byte payload; ms, median / p99)`);
    out.push(
      table(
        [
          'ours (fenced insert)',
          'bare INSERT txn',
          'LangGraph PostgresSaver.put',
          'DBOS step',
          'ours / LangGraph',
          'ours / DBOS',
        ],
        [
          [
            mp(p.ours),
            mp(p.floorInsert),
            mp(p.langgraphPut),
            p.dbosStep ? mp(p.dbosStep) : `n/a (${p.dbos.ok ? '' : p.dbos.error})`,
            x(p.oursOverLanggraph),
            x(p.oursOverDbos),
          ],
        ],
      ),
    );
    out.push(
      `Our write, taken apart (same rotation): empty workspace transaction ${mp(p.profile.emptyTx)} ms, row insert without the lease update ${mp(p.profile.insertOnly)} ms, lease update alone ${mp(p.profile.leaseUpdateOnly)} ms. What-if, fenced by a FOR SHARE row lock instead of the lease UPDATE: ${mp(p.profile.fencedInsertForShare)} ms = ${x(p.forShareOverLanggraph)} LangGraph's put.`,
    );
  }
  if (r.resume.length) {
    out.push('### 3. Resume vs starting over (ms, median / p99)');
    out.push(
      table(
        [
          'files',
          'resume: claim → first tool call',
          'verification alone',
          'git clone --no-local',
          'clone + redo rounds',
          'speed-up vs clone',
          'vs clone + redo',
          'what-if: resume without watcher',
          'its speed-up vs clone',
        ],
        r.resume.map((f) => [
          f.files,
          mp(f.resume),
          mp(f.verifyOnly),
          mp(f.clone),
          mp(f.cloneAndRedo),
          x(f.speedupVsClone),
          x(f.speedupVsCloneAndRedo),
          mp(f.resumeNoWatcher),
          x(f.speedupNoWatcherVsClone),
        ]),
      ),
    );
    if (r.resume.some((f) => f.history !== undefined)) {
      out.push('Clone with and without history (the resumed repo has the history; ms, median / p99):');
      out.push(
        table(
          [
            'files',
            'commits of history',
            'samples',
            'resume',
            'clone (with history)',
            'speed-up',
            'clone (1 commit)',
            'speed-up vs that',
          ],
          r.resume.map((f) => [
            f.files,
            f.history ?? '',
            f.samples ?? '',
            mp(f.resume),
            mp(f.clone),
            x(f.speedupVsClone),
            f.cloneNoHistory ? mp(f.cloneNoHistory) : 'not measured',
            x(f.speedupVsCloneNoHistory ?? null),
          ]),
        ),
      );
    }
    out.push(
      'How the timed resumes ended: ' +
        r.resume
          .map(
            (f) =>
              `${f.files} files: ${Object.entries(f.outcomes)
                .map(([k, n]) => `${n} ${k}`)
                .join(', ')}`,
          )
          .join('; '),
    );
    for (const f of r.resume)
      out.push(
        `Traced resume at ${f.files} files (ms after claim): ${f.timeline.map((t) => `${t.msAfterClaim} ${t.msg}`).join(' → ')}`,
      );
  }
  if (r.integrity.length) {
    out.push('### 4. Integrity check (ms, median / p99)');
    out.push(
      table(
        ['files', 'files touched', 'checkpoints', 'integrity check', 'git status', 'check / status', 'intact'],
        r.integrity.map((f) => [
          f.files,
          f.touched,
          f.checkpoints,
          mp(f.check),
          mp(f.gitStatus),
          x(f.ratioToGitStatus),
          f.intact ? 'yes' : `no: ${f.findings.join('; ')}`,
        ]),
      ),
    );
    out.push(
      'Its parts, each alone (ms, median): ' +
        r.integrity
          .map(
            (f) =>
              `${f.files}/${f.touched}: ` +
              Object.entries(f.profile)
                .map(([k, v]) => `${k} ${ms(v.median)}`)
                .join(', '),
          )
          .join(' · '),
    );
  }
  if (r.missionControl.length) {
    out.push('### 5. Mission control reads (ms, median / p99; ratio of medians, largest table to smallest)');
    const [first, last] = [r.missionControl[0]!, r.missionControl.at(-1)!];
    const labels: Record<string, string> = { ...MC_READS, runHistory: 'run history (50 checkpoints)' };
    const read = Object.keys(labels).filter((k) => r.missionControl.every((m) => m[k as McRead]));
    out.push(
      table(
        ['read', ...r.missionControl.map((m) => `${m.rows} rows (${m.tableMiB} MiB)`), 'ratio'],
        read.map((k) => {
          const key = k as McRead | 'runHistory';
          return [
            labels[k]!,
            ...r.missionControl.map((m) => mp(m[key]!)),
            x(ratio(last[key]!.median, first[key]!.median)),
          ];
        }),
      ),
    );
    out.push(`Convoy detail plan at ${last.rows} rows: ${last.convoyDetailPlan}`);
  }
  if (r.throughput.length) {
    out.push('### 6. Throughput (real worker processes, zero-delay replay)');
    out.push(
      table(
        [
          'workers',
          'runs × rounds',
          'wall s',
          'checkpoints/s',
          'rounds/s',
          'checkpoint interval ms (median / p99)',
          'CPU s per worker (own + git)',
          'machine busy',
        ],
        r.throughput.map((t) => [
          t.workers,
          `${t.runs} × ${t.roundsPerRun}`,
          t.wallSeconds,
          t.checkpointsPerSecond,
          t.roundsPerSecond,
          mp(t.checkpointInterval),
          t.perWorker.map((w) => `${w.cpuSeconds}+${w.childCpuSeconds}`).join(', '),
          `${Math.round(t.machineBusy * 100)}%`,
        ]),
      ),
    );
    for (const t of r.throughput)
      if (t.failed)
        out.push(
          `${t.workers} worker(s): ${t.failed} of ${t.runs} runs failed${t.failures?.length ? `: ${t.failures.join(' | ')}` : ''}.`,
        );
  }
  if (r.longRun) out.push(renderLongRun(r.longRun));
  if (r.rounds) out.push(renderRounds(r.rounds));
  if (r.remote?.length) out.push(renderRemote(r.remote));
  if (r.wholeCost) out.push(renderWholeCost(r.wholeCost));
  if (r.usageMetrics) out.push(renderUsageMetrics(r.usageMetrics));
  out.push('### Targets');
  out.push(
    table(
      ['target', 'measured', 'met'],
      r.targets.map((t) => [t.goal, t.measured, t.met === null ? 'not measured' : t.met ? 'yes' : 'NO']),
    ),
  );
  return out.join('\n\n');
}

export { ratio };

function renderWholeCost(w: WholeCostResult): string {
  const phases = Object.entries(w.phases)
    .map(([p, v]) => `${p} ${ms(v.median)}`)
    .join(', ');
  return [
    `### Whole cost of checkpointing (${w.rounds} rounds at ${w.files} files, ${w.changed} changed a round; ` +
      `ms, median / p99 of ${w.repetitions})`,
    table(
      ['run', 'start to finish', 'cost over no checkpoint'],
      [
        ['no checkpoint', mp(w.runs.none), ''],
        ['ours (CheckpointWriter, settle included)', mp(w.runs.ours), mp(w.cost.ours)],
        ['floor (git add + git commit + INSERT)', mp(w.runs.floor), mp(w.cost.floor)],
      ],
    ),
    `Ours over the floor: ${x(w.ratio)} (target ≤ ${w.target}×). Ours by phase, summed over the run: ${phases}.`,
  ].join('\n\n');
}
