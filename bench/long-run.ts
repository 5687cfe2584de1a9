// Benchmark 7 (issue 14): one long run. `checkpoints` checkpoints on a `files`-file repository,
// `changed` files rewritten per round (spread over the repo, a new set every round, so the
// manifest grows), through the real CheckpointWriter (commit via fast-import, row + manifest
// upsert, note, pack roll-up). Reported: time per checkpoint around seq 1, 100, 1,000, 2,000
// (median of the 10 checkpoints ending there); Postgres bytes per checkpoint (worker_checkpoints
// and checkpoint_manifest: table + TOAST + indexes, measured before/after); git bytes per
// checkpoint (objects dir: loose + packs + notes); loose objects and packs at the end; the
// row size at the first and last sample point.
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { runGit } from '../worker/git.ts';
import { commonDirOf } from '../worker/checkpoints/notes.ts';
import type { BenchEnv } from './env.ts';
import { createRunFixture } from './fixture.ts';
import { filePath } from './repos.ts';
import { round, summarize, type Summary } from './stats.ts';

export interface LongRunResult {
  checkpoints: number;
  files: number;
  changedPerRound: number;
  /** seq → ms per checkpoint (median of the 10 ending at that seq; seq 1: the first alone). */
  timeAt: Record<number, Summary>;
  postgresBytesPerCheckpoint: number;
  rowBytesAt: Record<number, number>;
  gitBytesPerCheckpoint: number;
  changedContentBytesPerCheckpoint: number;
  looseObjectsAtEnd: number;
  packsAtEnd: number;
}

async function dirBytes(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) total += await dirBytes(p);
    else total += (await stat(p).catch(() => ({ size: 0 }))).size;
  }
  return total;
}

async function postgresBytes(env: BenchEnv): Promise<number> {
  const [row] = await env.su<{ bytes: string }[]>`
    select (pg_total_relation_size('worker_checkpoints') + pg_total_relation_size('checkpoint_manifest'))::text as bytes`;
  return Number(row!.bytes);
}

export async function measureLongRun(
  env: BenchEnv,
  repo: string,
  o: { files: number; checkpoints: number; changed: number; at: number[] },
  log: (line: string) => void,
): Promise<LongRunResult> {
  const f = await createRunFixture(env, repo, { historyRounds: 0 });
  const objects = path.join(await commonDirOf(f.worktree), 'objects');
  await env.su`vacuum analyze worker_checkpoints`;
  const pgBefore = await postgresBytes(env);
  const gitBefore = await dirBytes(objects);
  const times: number[] = [];
  let changedBytes = 0;
  for (let seq = 1; seq <= o.checkpoints; seq++) {
    // A different spread of `changed` files every round: seq walks the repo.
    const paths = Array.from({ length: o.changed }, (_, k) => filePath((seq * o.changed + k * 97) % o.files));
    await f.playRound(paths);
    const start = performance.now();
    await f.writer.write();
    times.push(performance.now() - start);
    if (o.at.includes(seq)) log(`  long run: checkpoint ${seq} in ${times.at(-1)!.toFixed(1)} ms`);
  }
  await f.writer.settleNotes();
  changedBytes = o.changed * 420; // fileContent(): ~420 bytes per file
  await env.su`vacuum analyze worker_checkpoints`;
  await env.su`vacuum analyze checkpoint_manifest`;
  const pgAfter = await postgresBytes(env);
  const gitAfter = await dirBytes(objects);
  const count = await runGit(repo, ['count-objects', '-v']);
  const loose = Number(/^count: (\d+)/m.exec(count.stdout)![1]);
  const packs = Number(/^packs: (\d+)/m.exec(count.stdout)![1]);
  const rowBytesAt: Record<number, number> = {};
  for (const seq of o.at) {
    const [row] = await env.su<{ bytes: number }[]>`
      select pg_column_size(c.*) as bytes from worker_checkpoints c where agent_run_id = ${f.run.id} and checkpoint_seq = ${seq}`;
    if (row) rowBytesAt[seq] = row.bytes;
  }
  const timeAt: Record<number, Summary> = {};
  for (const seq of o.at) if (seq <= o.checkpoints) timeAt[seq] = summarize(times.slice(Math.max(0, seq - 10), seq));
  return {
    checkpoints: o.checkpoints,
    files: o.files,
    changedPerRound: o.changed,
    timeAt,
    postgresBytesPerCheckpoint: round((pgAfter - pgBefore) / o.checkpoints, 1),
    rowBytesAt,
    gitBytesPerCheckpoint: round((gitAfter - gitBefore) / o.checkpoints, 1),
    changedContentBytesPerCheckpoint: changedBytes,
    looseObjectsAtEnd: loose,
    packsAtEnd: packs,
  };
}
