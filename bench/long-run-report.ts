// The long run's targets and tables (bench/long-run.ts measures; results.ts registers these).
import type { GitBytes, PruneResult } from './prune-phase.ts';
import type { LongRunResult } from './long-run.ts';
import type { Target } from './target.ts';

export function longRunTargets(r: LongRunResult): Target[] {
  const t = (n: number) => Math.round(n).toLocaleString('en-US');
  const at100 = r.timeAt[100];
  const last = r.timeAt[r.checkpoints];
  return [
    {
      name: 'long run: flat time',
      goal: `checkpoint ${r.checkpoints} within 1.1× of checkpoint 100 in time (median of the 50 ending there)`,
      measured:
        at100 && last
          ? `${last.median.toFixed(1)} ms vs ${at100.median.toFixed(1)} ms = ${r.timeRatioLastTo100}×`
          : 'not measured',
      met: r.timeRatioLastTo100 === null ? null : r.timeRatioLastTo100 <= 1.1,
    },
    {
      name: 'long run: Postgres bytes',
      goal: 'Postgres per checkpoint ≤ 4 KB + 150 B per changed file + its own tool calls',
      measured: `${t(r.postgresBytesPerCheckpoint)} B vs ${t(r.postgresTargetPerCheckpoint)} B (${r.changedFilesPerCheckpoint} files, ${t(r.toolCallBytesPerCheckpoint)} B of calls; second half ${t(r.postgresBytesPerCheckpointSecondHalf)} B)`,
      met: r.postgresBytesPerCheckpoint <= r.postgresTargetPerCheckpoint,
    },
    {
      name: 'long run: git bytes',
      goal: 'git per checkpoint ≤ 2 × compressed changed content + 1 KB',
      measured: `${t(r.gitJudgedPerCheckpoint ?? r.gitBytesPerCheckpoint)} B vs ${t(r.gitTargetPerCheckpoint)} B (objects directory ${t(r.gitBytesPerCheckpoint)} B, the run's objects + notes + index entries ${r.gitObjectsAndNotesPerCheckpoint === undefined ? '?' : t(r.gitObjectsAndNotesPerCheckpoint)} B; content ${t(r.changedContentCompressedBytesPerCheckpoint)} B deflated; second half ${t(r.gitBytesPerCheckpointSecondHalf)} B; after git gc ${r.prune ? t((r.prune.git.afterGc.total - r.git.before.total) / r.checkpoints) : '?'} B${floorsNote(r)})`,
      met: (r.gitJudgedPerCheckpoint ?? r.gitBytesPerCheckpoint) <= r.gitTargetPerCheckpoint,
    },
    {
      name: 'long run: loose objects',
      goal: `loose objects bounded (≤ ${r.looseObjectsBound}: one roll-up interval of redone commits)`,
      measured: `${r.looseObjectsAtEnd} loose, ${r.packsAtEnd} packs`,
      met: r.looseObjectsAtEnd <= r.looseObjectsBound,
    },
  ];
}

const n = (x: number) => Math.round(x).toLocaleString('en-US');

/** The floor beside the target: git's own repacks of the repository, judged the same way. */
const floorsNote = (r: LongRunResult) =>
  r.gitFloors?.length
    ? `; git's own repack of the whole repository, judged the same way: ${r.gitFloors.map((f) => `${f.label} ${n(f.judgedPerCheckpoint)} B`).join(', ')}`
    : '';

function floorsTable(r: LongRunResult): string[] {
  if (!r.gitFloors?.length) return [];
  return [
    [
      "The floor: copies of the settled repository repacked whole by git, with and without the run's branch and notes. Per checkpoint:",
      '',
      "| | judged (the larger) | objects directory growth | the run's objects + notes + index entries | repack took |",
      '| --- | --- | --- | --- | --- |',
      `| the worker's packing (settled) | ${n(r.gitJudgedPerCheckpoint)} | ${n(r.gitBytesPerCheckpoint)} | ${n(r.gitObjectsAndNotesPerCheckpoint)} | |`,
      ...r.gitFloors.map(
        (f) =>
          `| ${f.label} (\`${f.command}\`) | ${n(f.judgedPerCheckpoint)} | ${n(f.growthPerCheckpoint)} | ${n(f.objectsAndNotesPerCheckpoint)} | ${f.seconds} s |`,
      ),
    ].join('\n'),
  ];
}

/** The long run's tables (markdown): time, bytes, and the prune phase. */
export function renderLongRun(r: LongRunResult): string {
  const per = (bytes: number) => n(bytes / r.checkpoints);
  const seqs = Object.keys(r.timeAt).map(Number);
  const out = [
    `### 7. Long run: ${n(r.checkpoints)} checkpoints, ${n(r.files)} files, ${r.changedPerRound} changed per round`,
  ];
  out.push(
    [
      `| ${seqs.map((s) => `seq ${n(s)}`).join(' | ')} |`,
      `| ${seqs.map(() => '---').join(' | ')} |`,
      `| ${seqs.map((s) => `${r.timeAt[s]!.median.toFixed(1)} ms (p99 ${r.timeAt[s]!.p99.toFixed(0)})`).join(' | ')} |`,
    ].join('\n'),
  );
  const g = r.git.after;
  const b = r.git.before;
  out.push(
    [
      '| per checkpoint | bytes |',
      '| --- | --- |',
      `| Postgres (rows + manifest + indexes, vacuumed) | ${n(r.postgresBytesPerCheckpoint)} (target ${n(r.postgresTargetPerCheckpoint)}) |`,
      `| Postgres, second half of the run only | ${n(r.postgresBytesPerCheckpointSecondHalf)} |`,
      `| git, judged: the larger of the two below | ${n(r.gitJudgedPerCheckpoint ?? r.gitBytesPerCheckpoint)} (target ${n(r.gitTargetPerCheckpoint)}) |`,
      `| git, objects directory growth, settled (packs consolidated) | ${n(r.gitBytesPerCheckpoint)} |`,
      `| git, the run's objects + notes + their index entries and packs | ${r.gitObjectsAndNotesPerCheckpoint === undefined ? '?' : n(r.gitObjectsAndNotesPerCheckpoint)} |`,
      `| git, before the run's settle / second half of the run only | ${n(r.gitBytesPerCheckpointAsLeft)} / ${n(r.gitBytesPerCheckpointSecondHalf)} |`,
      `| of which pack data / pack indexes / other / loose | ${per(g.packData - b.packData)} / ${per(g.packIndex - b.packIndex)} / ${per(g.other - b.other)} / ${per(g.loose - b.loose)} |`,
      `| the run's objects on disk (branch-only) / notes | ${per(r.git.runContentDiskBytes)} / ${per(r.git.notesDiskBytes)} |`,
      ...(['content', 'notes'] as const)
        .filter(() => r.git.objects)
        .flatMap((from) =>
          (['blob', 'tree', 'commit'] as const).map((type) => {
            const k = r.git.objects[from][type];
            return `| ${from} ${type}s: objects / bytes / of which deltas | ${(k.objects / r.checkpoints).toFixed(1)} / ${per(k.diskBytes)} / ${(k.deltas / r.checkpoints).toFixed(1)} |`;
          }),
        ),
      `| changed content: raw / deflated | ${n(r.changedContentRawBytesPerCheckpoint)} / ${n(r.changedContentCompressedBytesPerCheckpoint)} |`,
      `| row size at ${Object.keys(r.rowBytesAt).join(' / ')} | ${Object.values(r.rowBytesAt).join(' / ')} |`,
    ].join('\n'),
  );
  out.push(...floorsTable(r));
  out.push(
    `Loose objects at the end: ${r.looseObjectsAtEnd} (bound ${r.looseObjectsBound}); packs: ${r.packsAtEnd}. The writer's settle (last note, packs consolidated) took ${r.settleSeconds?.join(' s / ') ?? '?'} s at the middle / end. Load average (1 min) during the run: ${r.loadAverage.min}–${r.loadAverage.max}, median ${r.loadAverage.median}.`,
  );
  const p = r.prune;
  if (!p) return out.concat('Prune phase: failed (see the log).').join('\n\n');
  out.push(
    [
      `Prune (${n(p.rowsDeleted)} rows deleted, worktree removed: ${p.worktreeRemoved ? 'yes' : 'no'}):`,
      '',
      '| Postgres bytes | before | after DELETE | after VACUUM | after VACUUM FULL |',
      '| --- | --- | --- | --- | --- |',
      `| worker_checkpoints | ${n(p.postgres.before.checkpoints)} | ${n(p.postgres.afterDelete.checkpoints)} | ${n(p.postgres.afterVacuum.checkpoints)} | ${n(p.postgres.afterVacuumFull.checkpoints)} |`,
      `| checkpoint_manifest | ${n(p.postgres.before.manifest)} | ${n(p.postgres.afterDelete.manifest)} | ${n(p.postgres.afterVacuum.manifest)} | ${n(p.postgres.afterVacuumFull.manifest)} |`,
      `| total (with anchors) | ${n(p.postgres.before.total)} | ${n(p.postgres.afterDelete.total)} | ${n(p.postgres.afterVacuum.total)} | ${n(p.postgres.afterVacuumFull.total)} |`,
      '',
      gitPruneTable(p),
      '',
      `The objects directory held ${n(r.git.before.total)} bytes before the run. ${p.autovacuum}; git gc ${p.gcSeconds.gc} s, gc --prune=now ${p.gcSeconds.gcPruneNow} s.`,
    ].join('\n'),
  );
  return out.join('\n\n');
}

/** The prune's git bytes; results written before prune removed notes show the what-ifs done by hand instead. */
function gitPruneTable(p: PruneResult): string {
  const g = p.git;
  const cell = (b: GitBytes | undefined) => (b ? n(b.total) : 'n/a');
  const steps = `| total (packs) | ${n(g.before.total)} (${g.before.packs}) | ${n(g.afterPrune.total)} (${g.afterPrune.packs}) | ${n(g.afterGc.total)} (${g.afterGc.packs}) | ${n(g.afterGcPruneNow.total)} (${g.afterGcPruneNow.packs})`;
  const head = '| git objects bytes | before prune | after prune | after `git gc` | after `git gc --prune=now`';
  if (g.afterDeleteBranches) {
    return [
      `${head} | \`prune --delete-branches\`, gc --prune=now |`,
      '| --- | --- | --- | --- | --- | --- |',
      `${steps} | ${cell(g.afterDeleteBranches)} |`,
    ].join('\n');
  }
  return [
    `${head} | what-if: branch + notes deleted, gc --prune=now | what-if: and notes history squashed |`,
    '| --- | --- | --- | --- | --- | --- | --- |',
    `${steps} | ${cell(g.whatIfBranchAndNotesDeleted)} | ${cell(g.whatIfNotesHistorySquashed)} |`,
  ].join('\n');
}
