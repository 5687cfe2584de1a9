// Benchmark 7: one long run. `checkpoints` checkpoints on a `files`-file repository,
// `changed` files rewritten per round (spread over the repo, a new set every round, so the
// manifest grows), through the real CheckpointWriter (commit via fast-import, row + manifest
// upsert, note, pack roll-up). Reported: time per checkpoint around seq 1, 100, 1,000, 2,000
// (median of the 50 checkpoints ending there: 10 were too few for a 10% verdict on a shared
// machine); Postgres bytes per checkpoint (worker_checkpoints and checkpoint_manifest: table +
// TOAST + indexes, vacuumed, before/after); git bytes per checkpoint (the objects directory:
// loose + packs + their indexes, notes included) once the run has settled (its packs
// consolidated, as a finishing run's settle leaves them), split into the run's content, its notes and pack overhead; the compressed size of the
// changed content (each changed blob deflated as git stores a loose object); loose objects and
// packs at the end; the load average during the run. Then the prune phase (bench/prune-phase.ts).
// The git figure is judged on the larger of the objects directory's growth and the run's own
// objects + notes (+ their index entries), split by type (content blobs/trees/commits, notes
// blobs/trees/commits: count, bytes, deltas). BENCH_LONG_RUN_KEEP=<dir> copies the repository's
// git dir there before the prune phase, for a look with `git verify-pack -v` or `git cat-file`.
import { cp, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { deflateSync } from 'node:zlib';
import { runGit } from '../worker/git/run-git.ts';
import { commonDirOf } from '../worker/checkpoints/notes.ts';
import type { BenchEnv } from './env.ts';
import { createRunFixture } from './fixture.ts';
import { measureGitFloors, type GitFloor } from './git-floor.ts';
import { gitBytes, measurePrune, postgresBytes, type GitBytes, type PgBytes, type PruneResult } from './prune-phase.ts';
import { filePath } from './repos.ts';
import { round, summarize, type Summary } from './stats.ts';

/** Checkpoints per time sample (the median of the `TIME_WINDOW` ending at a sample seq). */
const TIME_WINDOW = 50;

export interface LongRunResult {
  checkpoints: number;
  files: number;
  changedPerRound: number;
  /** seq → ms per checkpoint (median of the 50 ending at that seq; seq 1: the first alone). */
  timeAt: Record<number, Summary>;
  timeRatioLastTo100: number | null;
  postgresBytesPerCheckpoint: number;
  /** Per checkpoint: 4 KB + 150 B × its changed files + the bytes of its own tool calls (JSON), averaged. */
  postgresTargetPerCheckpoint: number;
  toolCallBytesPerCheckpoint: number;
  changedFilesPerCheckpoint: number;
  rowBytesAt: Record<number, number>;
  /** Between the middle and the end of the run (both settled): what one more checkpoint costs. */
  postgresBytesPerCheckpointSecondHalf: number;
  /** The bytes the run added to the objects directory, settled (last note, last roll-up), per checkpoint. */
  gitBytesPerCheckpoint: number;
  /**
   * What the target names, from the objects themselves: the run's objects and notes as stored
   * (`%(objectsize:disk)`), plus their pack index entries (28 B each) and the fixed bytes of each
   * pack the run added (header, fan-out, trailers), per checkpoint. Immune to changes of the
   * repository's own packs (a roll-up that drops the base pack's bitmap does not credit the run).
   */
  gitObjectsAndNotesPerCheckpoint: number;
  /** The target is judged on the larger of this and the objects directory's growth. */
  gitJudgedPerCheckpoint: number;
  /** The same checkpoints after git's own repack of the whole repository, judged the same way. */
  gitFloors?: GitFloor[];
  /** How long the writer's settle took at the middle and at the end (last note, packs consolidated). */
  settleSeconds: number[];
  /** After the last checkpoint, before the run's settle: geometric roll-ups, not consolidated yet. */
  gitBytesPerCheckpointAsLeft: number;
  gitBytesPerCheckpointSecondHalf: number;
  /** The objects directory before and after the run, by kind. */
  git: {
    before: GitBytes;
    asLeft: GitBytes;
    after: GitBytes;
    runContentDiskBytes: number;
    notesDiskBytes: number;
    objects: RunObjects;
  };
  /** Mean per round of the changed blobs, each zlib-deflated as a loose git object. */
  changedContentCompressedBytesPerCheckpoint: number;
  changedContentRawBytesPerCheckpoint: number;
  gitTargetPerCheckpoint: number;
  looseObjectsAtEnd: number;
  looseObjectsBound: number;
  packsAtEnd: number;
  loadAverage: { samples: number; min: number; median: number; max: number };
  /** Undefined when the prune phase failed (its error is in the log). */
  prune: PruneResult | undefined;
}

export async function measureLongRun(
  env: BenchEnv,
  repo: string,
  o: { files: number; checkpoints: number; changed: number; at: number[]; packEvery?: number },
  log: (line: string) => void,
): Promise<LongRunResult> {
  const packEvery = o.packEvery ?? 16;
  const f = await createRunFixture(env, repo, { historyRounds: 0 });
  const objects = path.join(await commonDirOf(f.worktree), 'objects');
  await env.su`vacuum analyze worker_checkpoints`;
  await env.su`vacuum analyze checkpoint_manifest`;
  const pgBefore = await postgresBytes(env);
  const gitBefore = await gitBytes(objects);
  // The steady state: notes written, the run's packs consolidated (what the writer's settle does
  // when a run finishes or stops: ObjectPacker.settle), the tables vacuumed (what autovacuum does).
  // Measured at the middle (as if the run had stopped and resumed there) and at the end.
  const settled = async () => {
    const start = performance.now();
    await f.writer.settleNotes();
    settleSeconds.push(round((performance.now() - start) / 1000, 2));
    await env.su`vacuum analyze worker_checkpoints`;
    await env.su`vacuum analyze checkpoint_manifest`;
    return { pg: await postgresBytes(env), git: await gitBytes(objects) };
  };
  const settleSeconds: number[] = [];
  const mid = Math.floor(o.checkpoints / 2);
  let midPoint: { pg: PgBytes; git: GitBytes } | undefined;
  const times: number[] = [];
  const load: number[] = [];
  let compressed = 0;
  let raw = 0;
  for (let seq = 1; seq <= o.checkpoints; seq++) {
    // A different spread of `changed` files every round: seq walks the repo.
    const paths = Array.from({ length: o.changed }, (_, k) => filePath((seq * o.changed + k * 97) % o.files));
    await f.playRound(paths);
    // What git would store for each changed file on its own: `blob <size>\0<content>`, deflated.
    for (const p of paths) {
      const data = await readFile(path.join(f.worktree, p));
      raw += data.length;
      compressed += deflateSync(Buffer.concat([Buffer.from(`blob ${data.length}\0`), data])).length;
    }
    const start = performance.now();
    await f.writer.write();
    times.push(performance.now() - start);
    if (seq % 50 === 0) load.push(os.loadavg()[0]!);
    if (o.at.includes(seq))
      log(`  long run: checkpoint ${seq} in ${times.at(-1)!.toFixed(1)} ms (load ${os.loadavg()[0]!.toFixed(2)})`);
    if (seq === mid) midPoint = await settled(); // outside the timed write: a stop and resume there
  }
  const asLeft = await gitBytes(objects); // the last note written, the last background roll-up done
  const end = await settled();
  const pgAfter = end.pg;
  const gitAfter = end.git;
  const objectsByKind = await runObjects(f.worktree, f.branch, env.config.WORKER_NOTES_REF);
  // Per object: a 20-byte name, a CRC and a 4-byte offset in the .idx (v2); per pack: the .idx's
  // 8-byte header, 1,024-byte fan-out and two trailer hashes, the .pack's 12-byte header and trailer.
  const objectsAndNotes =
    kindTotal(objectsByKind.content) +
    kindTotal(objectsByKind.notes) +
    28 * (kindCount(objectsByKind.content) + kindCount(objectsByKind.notes)) +
    Math.max(0, gitAfter.packs - gitBefore.packs) * (8 + 1024 + 40 + 12 + 20);
  const split = {
    runContentDiskBytes: kindTotal(objectsByKind.content),
    notesDiskBytes: kindTotal(objectsByKind.notes),
    objects: objectsByKind,
  };
  log('  long run: repacking copies of the repository as git gc and git gc --aggressive would (the floor)');
  // As the prune phase below: a failure here is reported, and the run's figures are kept.
  const gitFloors = await measureGitFloors(
    path.join(f.repo, '.git'),
    { branch: f.branch, notesRef: env.config.WORKER_NOTES_REF, checkpoints: o.checkpoints },
    async (gitDir) => {
      const k = await runObjects(gitDir, f.branch, env.config.WORKER_NOTES_REF);
      return { bytes: kindTotal(k.content) + kindTotal(k.notes), count: kindCount(k.content) + kindCount(k.notes) };
    },
    async (objectsDir) => (await gitBytes(objectsDir)).total,
  ).catch((err: unknown) => {
    log(`  git floor failed: ${err instanceof Error ? err.stack : String(err)}`);
    return undefined;
  });
  if (process.env.BENCH_LONG_RUN_KEEP) {
    await cp(path.join(f.repo, '.git'), process.env.BENCH_LONG_RUN_KEEP, { recursive: true });
    log(`  long run: branch ${f.branch}, repository kept at ${process.env.BENCH_LONG_RUN_KEEP}`);
  }

  const [perRow] = await env.su<{ tool: number; files: number; target: number }[]>`
    select avg(octet_length(tool_history::text))::float8 as tool,
           avg(jsonb_array_length(files_touched))::float8 as files,
           avg(4096 + 150 * jsonb_array_length(files_touched) + octet_length(tool_history::text))::float8 as target
      from worker_checkpoints where agent_run_id = ${f.run.id}`;
  const rowBytesAt: Record<number, number> = {};
  for (const seq of o.at) {
    const [row] = await env.su<{ bytes: number }[]>`
      select pg_column_size(c.*) as bytes from worker_checkpoints c where agent_run_id = ${f.run.id} and checkpoint_seq = ${seq}`;
    if (row) rowBytesAt[seq] = row.bytes;
  }
  const timeAt: Record<number, Summary> = {};
  for (const seq of o.at)
    if (seq <= o.checkpoints) timeAt[seq] = summarize(times.slice(Math.max(0, seq - TIME_WINDOW), seq));
  const last = timeAt[o.checkpoints];
  const at100 = timeAt[100];
  const compressedPer = compressed / o.checkpoints;
  const sortedLoad = [...load].sort((a, b) => a - b);
  const result: Omit<LongRunResult, 'prune'> = {
    checkpoints: o.checkpoints,
    files: o.files,
    changedPerRound: o.changed,
    timeAt,
    timeRatioLastTo100: last && at100 ? round(last.median / at100.median, 3) : null,
    postgresBytesPerCheckpoint: round((pgAfter.total - pgBefore.total) / o.checkpoints, 1),
    postgresTargetPerCheckpoint: round(perRow!.target, 1),
    toolCallBytesPerCheckpoint: round(perRow!.tool, 1),
    changedFilesPerCheckpoint: round(perRow!.files, 2),
    rowBytesAt,
    postgresBytesPerCheckpointSecondHalf: round((pgAfter.total - midPoint!.pg.total) / (o.checkpoints - mid), 1),
    gitBytesPerCheckpoint: round((gitAfter.total - gitBefore.total) / o.checkpoints, 1),
    settleSeconds,
    gitObjectsAndNotesPerCheckpoint: round(objectsAndNotes / o.checkpoints, 1),
    gitJudgedPerCheckpoint: round(Math.max(objectsAndNotes, gitAfter.total - gitBefore.total) / o.checkpoints, 1),
    gitFloors,
    gitBytesPerCheckpointAsLeft: round((asLeft.total - gitBefore.total) / o.checkpoints, 1),
    gitBytesPerCheckpointSecondHalf: round((gitAfter.total - midPoint!.git.total) / (o.checkpoints - mid), 1),
    git: { before: gitBefore, asLeft, after: gitAfter, ...split },
    changedContentCompressedBytesPerCheckpoint: round(compressedPer, 1),
    changedContentRawBytesPerCheckpoint: round(raw / o.checkpoints, 1),
    gitTargetPerCheckpoint: round(2 * compressedPer + 1024, 1),
    looseObjectsAtEnd: gitAfter.looseObjects,
    // Nothing of a checkpoint is written loose (fast-import packs); the one exception, a commit
    // redone from the index when a filter changes the bytes, is packed at the next roll-up.
    looseObjectsBound: packEvery,
    packsAtEnd: gitAfter.packs,
    loadAverage: {
      samples: load.length,
      min: sortedLoad[0] ?? NaN,
      median: sortedLoad[Math.floor(load.length / 2)] ?? NaN,
      max: sortedLoad.at(-1) ?? NaN,
    },
  };
  log(
    `  long run done: Postgres ${result.postgresBytesPerCheckpoint} B/checkpoint (target ${result.postgresTargetPerCheckpoint}), git ${result.gitJudgedPerCheckpoint} B/checkpoint (objects dir ${result.gitBytesPerCheckpoint}, objects + notes ${result.gitObjectsAndNotesPerCheckpoint}; target ${result.gitTargetPerCheckpoint}); pruning`,
  );
  // A failure here must not lose the run's figures (30 minutes of them): it is reported instead.
  const prune = await measurePrune(env, f, objects, o.checkpoints, log).catch((err: unknown) => {
    log(`  prune phase failed: ${err instanceof Error ? err.stack : String(err)}`);
    return undefined;
  });
  return { ...result, prune };
}

export interface ObjectKind {
  objects: number;
  /** Bytes in the packs (compressed, as a delta when `deltas`) or as loose files. */
  diskBytes: number;
  deltas: number;
}

/** The run's objects by where they come from and their type, as they sit on disk. */
export interface RunObjects {
  content: { blob: ObjectKind; tree: ObjectKind; commit: ObjectKind };
  notes: { blob: ObjectKind; tree: ObjectKind; commit: ObjectKind };
}

const kind = (): ObjectKind => ({ objects: 0, diskBytes: 0, deltas: 0 });
const kindTotal = (k: Record<string, ObjectKind>) => Object.values(k).reduce((a, b) => a + b.diskBytes, 0);
const kindCount = (k: Record<string, ObjectKind>) => Object.values(k).reduce((a, b) => a + b.objects, 0);

/**
 * The objects only this run's branch reaches (blobs, trees, commits) and the notes ref's objects,
 * by type: disk bytes (`%(objectsize:disk)`: compressed, delta'd in packs) and how many are deltas.
 */
export async function runObjects(worktree: string, branch: string, notesRef: string): Promise<RunObjects> {
  const tally = async (revs: string[]) => {
    const out = { blob: kind(), tree: kind(), commit: kind() };
    const list = await runGit(worktree, ['rev-list', '--objects', ...revs]);
    const oids = list.stdout
      .split('\n')
      .filter(Boolean)
      .map((l) => l.slice(0, 40));
    if (!oids.length) return out;
    const check = await runGit(worktree, ['cat-file', '--batch-check=%(objecttype) %(objectsize:disk) %(deltabase)'], {
      input: oids.join('\n') + '\n',
    });
    for (const line of check.stdout.split('\n').filter(Boolean)) {
      const [type, disk, base] = line.split(' ') as [keyof typeof out, string, string];
      const k = out[type];
      if (!k) continue;
      k.objects++;
      k.diskBytes += Number(disk);
      if (!/^0+$/.test(base)) k.deltas++;
    }
    return out;
  };
  return { content: await tally([`refs/heads/${branch}`, '--not', 'main']), notes: await tally([notesRef]) };
}
