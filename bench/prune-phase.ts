// The long run's prune phase: the finished run is
// completed, then pruned through the real code path (operator/prune.ts, what `npm run prune` runs),
// and the bytes are measured at each step of giving them back:
//  - Postgres (worker_checkpoints + checkpoint_manifest + checkpoint_anchors: table, TOAST,
//    indexes): before; after the prune's DELETE; after a plain VACUUM (what autovacuum would run:
//    space reusable inside the files, only empty pages at a table's end returned); after
//    VACUUM FULL (tables and indexes rewritten: the bytes go back to the operating system);
//  - git (the objects directory): before; after the prune (its worktree removed); after the
//    repository's normal `git gc` (unreachable objects kept for gc.pruneExpire, 2 weeks); after
//    `git gc --prune=now`. The prune keeps the run's branch (the run's result lives there) and
//    removes the pruned checkpoints' notes (the notes ref's history squashed), so these figures say
//    what gc gives back while the branch stays; then `npm run prune -- --delete-branches` (the
//    operator's call: the branch and the last checkpoint's note go too) and `git gc --prune=now`.
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { completeRun } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { runGit } from '../worker/git/run-git.ts';
import { pruneFinishedRuns } from '../operator/prune.ts';
import type { BenchEnv } from './env.ts';
import { silentLog, type RunFixture } from './fixture.ts';

export interface PgBytes {
  checkpoints: number;
  manifest: number;
  anchors: number;
  total: number;
}

export interface GitBytes {
  total: number;
  loose: number;
  packData: number;
  packIndex: number;
  /** .rev, .keep, .bitmap, .mtimes, anything else in pack/ and info/. */
  other: number;
  looseObjects: number;
  packs: number;
}

export interface PruneResult {
  rowsDeleted: number;
  worktreeRemoved: boolean;
  postgres: { before: PgBytes; afterDelete: PgBytes; afterVacuum: PgBytes; afterVacuumFull: PgBytes };
  autovacuum: string;
  git: {
    before: GitBytes;
    afterPrune: GitBytes;
    afterGc: GitBytes;
    afterGcPruneNow: GitBytes;
    /** After a second prune with --delete-branches and `git gc --prune=now`. */
    afterDeleteBranches?: GitBytes;
    /** Results written before prune removed notes: what-ifs done by hand instead. */
    whatIfBranchAndNotesDeleted?: GitBytes;
    whatIfNotesHistorySquashed?: GitBytes;
  };
  gcSeconds: { gc: number; gcPruneNow: number };
}

export async function postgresBytes(env: BenchEnv): Promise<PgBytes> {
  const [row] = await env.su<{ checkpoints: string; manifest: string; anchors: string }[]>`
    select pg_total_relation_size('worker_checkpoints')::text as checkpoints,
           pg_total_relation_size('checkpoint_manifest')::text as manifest,
           pg_total_relation_size('checkpoint_anchors')::text as anchors`;
  const b = { checkpoints: Number(row!.checkpoints), manifest: Number(row!.manifest), anchors: Number(row!.anchors) };
  return { ...b, total: b.checkpoints + b.manifest + b.anchors };
}

/** The objects directory's bytes (file sizes), by kind. */
export async function gitBytes(objects: string): Promise<GitBytes> {
  const b: GitBytes = { total: 0, loose: 0, packData: 0, packIndex: 0, other: 0, looseObjects: 0, packs: 0 };
  for (const entry of await readdir(objects, { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    const dir = path.join(objects, entry.name);
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const size = (await stat(path.join(dir, name)).catch(() => ({ size: 0 }))).size;
      if (/^[0-9a-f]{2}$/.test(entry.name)) {
        b.loose += size;
        b.looseObjects++;
      } else if (entry.name === 'pack' && name.endsWith('.pack')) {
        b.packData += size;
        b.packs++;
      } else if (entry.name === 'pack' && name.endsWith('.idx')) b.packIndex += size;
      else b.other += size;
    }
  }
  b.total = b.loose + b.packData + b.packIndex + b.other;
  return b;
}

async function vacuum(env: BenchEnv, full: boolean): Promise<void> {
  for (const table of ['worker_checkpoints', 'checkpoint_manifest', 'checkpoint_anchors']) {
    if (full) await env.su.unsafe(`vacuum full ${table}`);
    else await env.su.unsafe(`vacuum ${table}`);
  }
}

export async function measurePrune(
  env: BenchEnv,
  f: RunFixture,
  objects: string,
  checkpoints: number,
  log: (line: string) => void,
): Promise<PruneResult> {
  const done = await withWorkspace(env.db.app, f.run.workspace_id, (tx) =>
    completeRun(tx, { agentRunId: f.run.id, leaseEpoch: f.run.lease_epoch }),
  );
  if (!done) throw new Error(`long run ${f.run.id} could not be completed`);
  await env.su`vacuum analyze worker_checkpoints`; // the run's own dead tuples are not the prune's
  const pgBefore = await postgresBytes(env);
  const gitBefore = await gitBytes(objects);

  // What `npm run prune -- --older-than 0d` runs: every finished run, its rows and its worktree.
  const prune = (deleteBranches: boolean) =>
    pruneFinishedRuns(env.db, {
      olderThanDays: 0,
      dryRun: false,
      log: silentLog,
      notesRef: env.config.WORKER_NOTES_REF,
      deleteBranches,
    });
  const report = await prune(false);
  const pgAfterDelete = await postgresBytes(env);
  await vacuum(env, false);
  const pgAfterVacuum = await postgresBytes(env);
  await vacuum(env, true);
  const pgAfterVacuumFull = await postgresBytes(env);
  const [av] = await env.su<{ on: string; threshold: string; scale: string }[]>`
    select current_setting('autovacuum') as on, current_setting('autovacuum_vacuum_threshold') as threshold,
           current_setting('autovacuum_vacuum_scale_factor') as scale`;
  log(
    `  prune: ${report.rowsDeleted} rows deleted; Postgres ${pgBefore.total} → ${pgAfterDelete.total} (delete) → ${pgAfterVacuum.total} (vacuum) → ${pgAfterVacuumFull.total} (vacuum full)`,
  );

  const gitAfterPrune = await gitBytes(objects);
  let t = performance.now();
  await runGit(f.repo, ['gc', '--quiet']);
  const gcSeconds = (performance.now() - t) / 1000;
  const gitAfterGc = await gitBytes(objects);
  t = performance.now();
  await runGit(f.repo, ['gc', '--quiet', '--prune=now']);
  const gcPruneNowSeconds = (performance.now() - t) / 1000;
  const gitAfterGcPruneNow = await gitBytes(objects);
  log(
    `  prune: git ${gitBefore.total} → ${gitAfterPrune.total} (prune) → ${gitAfterGc.total} (gc) → ${gitAfterGcPruneNow.total} (gc --prune=now)`,
  );

  // The operator's call: the branch goes too, and with it the last checkpoint's commit and note.
  await prune(true);
  await runGit(f.repo, ['gc', '--quiet', '--prune=now']);
  const afterDeleteBranches = await gitBytes(objects);
  log(
    `  prune --delete-branches, then gc --prune=now: git ${afterDeleteBranches.total} bytes (${checkpoints} checkpoints)`,
  );

  return {
    rowsDeleted: report.rowsDeleted,
    worktreeRemoved: report.worktreesRemoved.length > 0,
    postgres: {
      before: pgBefore,
      afterDelete: pgAfterDelete,
      afterVacuum: pgAfterVacuum,
      afterVacuumFull: pgAfterVacuumFull,
    },
    autovacuum: `autovacuum=${av!.on}, vacuum threshold ${av!.threshold} + ${av!.scale} × rows`,
    git: {
      before: gitBefore,
      afterPrune: gitAfterPrune,
      afterGc: gitAfterGc,
      afterGcPruneNow: gitAfterGcPruneNow,
      afterDeleteBranches,
    },
    gcSeconds: { gc: Math.round(gcSeconds * 10) / 10, gcPruneNow: Math.round(gcPruneNowSeconds * 10) / 10 },
  };
}
