// Benchmark 1: the cost of one checkpoint after a tool round, on the product's real write path.
// Samples alternate on one run: odd rounds time CheckpointWriter.write() whole; even rounds
// replay its exact sequence (the same functions, same order, same state update) with a timer
// around each part. Floors are measured between them on the same database and repository:
// a bare one-row INSERT transaction with the same payload, and `git add <paths>` + `git commit`
// of the same change in a second worktree of the same repo; and, on that worktree, the peers'
// git snapshots of the same change (peers-git.ts: Cline-style and OpenCode-style).
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { appendCheckpoint } from '../store/checkpoints.ts';
import { withWorkspace } from '../store/workspace.ts';
import { commitTouchedPaths } from '../worker/checkpoints/content.ts';
import {
  checkpointHash,
  DELTA_FORMAT,
  ManifestDigest,
  type CheckpointPayload,
  type FileTouched,
} from '../core/checkpoint-hash.ts';
import { boundHistory } from '../worker/checkpoints/history.ts';
import { writeCheckpointNote } from '../worker/checkpoints/notes.ts';
import { redactOrDrop } from '../core/redact.ts';
import { runGit } from '../worker/git/run-git.ts';
import type { BenchEnv } from './env.ts';
import type { RunFixture } from './fixture.ts';
import { measureGitPeers, type GitPeers } from './peers-git.ts';
import { fileContent } from './repos.ts';
import { Samples } from './stats.ts';

export interface FloorWorktree {
  path: string;
}

/** A plain branch checked out in a second worktree of the same repo, for the bare `git commit`. */
export async function createFloorWorktree(env: BenchEnv, repo: string, name: string): Promise<FloorWorktree> {
  const dir = path.join(env.workDir, 'floor', name);
  await runGit(repo, ['worktree', 'add', '-q', '-b', `bench-floor-${name}`, dir, 'main']);
  return { path: dir };
}

export async function ensureFloorTable(env: BenchEnv): Promise<void> {
  await env.su`create table if not exists bench_floor_insert (id bigint generated always as identity primary key, payload jsonb not null, created_at timestamptz not null default now())`;
}

/** What one replayed checkpoint stored: the payload the floor INSERT and the peers write too. */
export interface RowPayload {
  toolHistory: unknown[];
  filesTouched: unknown[];
  bytes: number;
}

/** The writer's running manifest digest (private there): the replay continues it and hands it back. */
type WithDigest = { digest: ManifestDigest | undefined };
/** The writer's note mirror (private there), written behind the run: awaited before a floor is timed. */
type WithMirror = { mirroring: Promise<void> };

/**
 * CheckpointWriter.write(), step by step with a timer on each part. Mirrors writer.ts exactly
 * (fence, drain, content commit, describe + hash, row, state update, note); a change there
 * must be mirrored here, and the sum of parts is reported next to the total to catch drift.
 */
export async function writeCheckpointInParts(
  env: BenchEnv,
  f: RunFixture,
  s: Samples,
  key: string,
): Promise<RowPayload> {
  const state = f.writer.state;
  const ident = f.identity;
  const start = performance.now();
  await s.time(`${key}.fence`, () => f.lease.assertHeld());
  const seq = state.seq + 1;
  const prevHash = state.prevHash;
  const paths = await f.tracker.drain();
  const manifest = state.manifest ?? new Map<string, string | null>();
  state.manifest = manifest;
  const { commitOid, treeOid, files, indexNow } = await s.time(`${key}.content`, () =>
    commitTouchedPaths({
      worktree: f.worktree,
      branch: f.branch,
      parentOid: state.headOid!,
      paths,
      message: `echodo checkpoint ${seq} (run ${ident.agentRunId} of workspace ${ident.workspaceId})`,
    }),
  );
  const hashStart = performance.now();
  // The writer's running digest, continued as the writer does (O(changed) per checkpoint): the
  // whole and replayed checkpoints alternate on one run, so both must fold every change.
  const writer = f.writer as unknown as WithDigest;
  const digest = (
    writer.digest ?? ManifestDigest.of([...manifest].map(([p, sha256]) => ({ path: p, sha256 })))
  ).clone();
  const changed: FileTouched[] = [];
  for (const file of files) {
    const sha256 = file.deleted ? null : file.sha256;
    const before = manifest.get(file.path);
    if (before === sha256) continue;
    if (before !== undefined) digest.remove(file.path, before);
    digest.add(file.path, sha256);
    manifest.set(file.path, sha256);
    changed.push(sha256 === null ? { path: file.path, sha256: null, deleted: true } : { path: file.path, sha256 });
  }
  const history = boundHistory(state.history, env.config.WORKER_CHECKPOINT_HISTORY_LIMIT);
  const payload: CheckpointPayload = {
    format: DELTA_FORMAT,
    workspaceId: ident.workspaceId,
    agentRunId: ident.agentRunId,
    checkpointSeq: seq,
    step: state.step,
    toolHistory: history.filter((h) => h.round === state.step),
    filesTouched: changed,
    branch: f.branch,
    worktreePath: f.worktree,
    commitOid,
    treeOid,
    manifestDigest: digest.hex(),
    manifestCount: digest.count,
  };
  const safe = redactOrDrop(payload) as CheckpointPayload;
  const hash = checkpointHash(prevHash, safe);
  s.add(`${key}.hash`, performance.now() - hashStart);
  const inserted = await s.time(`${key}.row`, () =>
    withWorkspace(env.db.app, ident.workspaceId, (tx) =>
      appendCheckpoint(
        tx,
        {
          ...ident,
          checkpointSeq: seq,
          step: safe.step,
          toolHistory: safe.toolHistory,
          filesTouched: safe.filesTouched,
          branch: safe.branch,
          worktreePath: safe.worktreePath,
          commitOid,
          treeOid,
          manifestDigest: digest.hex(),
          manifestCount: digest.count,
          prevHash,
          hash,
        },
        { leaseEpoch: f.lease.epoch, leaseMs: 3_600_000 },
      ),
    ),
  );
  if (!inserted) throw new Error('bench checkpoint was fenced off');
  f.lease.renewed();
  // The index work the writer starts behind the round once the row is in (content.ts): timed on
  // its own and kept out of the parts' sum (the round does not wait for it).
  const indexStart = performance.now();
  await indexNow();
  const indexBehind = performance.now() - indexStart;
  s.add(`${key}.indexBehind`, indexBehind);
  Object.assign(state, { seq, prevHash: hash, headOid: commitOid, history });
  writer.digest = digest;
  const noteStart = performance.now();
  await s.time(`${key}.note`, () =>
    writeCheckpointNote(f.worktree, env.config.WORKER_NOTES_REF, commitOid, {
      workspaceId: ident.workspaceId,
      agentRunId: ident.agentRunId,
      checkpointSeq: seq,
      step: safe.step,
      hash,
      prevHash,
      branch: f.branch,
      files: safe.filesTouched.map((x) => ({ path: x.path, sha256: x.sha256 })),
    }),
  );
  s.add(`${key}.partsSum`, performance.now() - start - indexBehind);
  // What the round waits for if the note (a mirror, never fatal) were written off the critical path.
  s.add(`${key}.withoutNote`, noteStart - start - indexBehind);
  const bytes =
    Buffer.byteLength(JSON.stringify(safe.toolHistory)) + Buffer.byteLength(JSON.stringify(safe.filesTouched));
  return { toolHistory: safe.toolHistory, filesTouched: safe.filesTouched, bytes };
}

/** The bare git floor: the same change, `git add <paths>` + `git commit -q -m x`. */
async function bareGitCommit(
  floor: FloorWorktree,
  paths: string[],
  round: number,
  s: Samples,
  key: string,
): Promise<void> {
  await Promise.all(paths.map((p) => writeFile(path.join(floor.path, p), `${fileContent(round, round)}// ${p}\n`)));
  await s.time(`${key}.floorGit`, async () => {
    await runGit(floor.path, ['add', '--', ...paths]);
    await runGit(floor.path, ['commit', '-q', '-m', 'x']);
  });
}

async function bareInsert(env: BenchEnv, payload: RowPayload, s: Samples, key: string): Promise<void> {
  const value = { tool_history: payload.toolHistory, files_touched: payload.filesTouched };
  await s.time(`${key}.floorInsert`, () =>
    env.su.begin((tx) => tx`insert into bench_floor_insert (payload) values (${tx.json(value as never)})`),
  );
}

export interface CheckpointCostResult {
  key: string;
  files: number;
  touched: number;
  payloadBytes: number;
  lastPayload: RowPayload;
}

/**
 * `samples` checkpoints timed whole and `samples` in parts, with both floors each round, on
 * fixture `f` touching `paths` every round. Samples land in `s` under `key`.
 */
export async function measureCheckpointCost(
  env: BenchEnv,
  f: RunFixture,
  floor: FloorWorktree,
  paths: string[],
  samples: number,
  s: Samples,
  key: string,
  peers?: GitPeers,
): Promise<CheckpointCostResult> {
  const warm = new Samples();
  let payload: RowPayload | undefined;
  // Warm-up: caches, pools, JIT; not recorded.
  for (let i = 0; i < 3; i++) {
    await f.playRound(paths);
    await f.writer.write();
    await Promise.all([(f.writer as unknown as WithMirror).mirroring, f.writer.readyForTools()]);
    await f.playRound(paths);
    payload = await writeCheckpointInParts(env, f, warm, 'warm');
    await bareGitCommit(floor, paths, f.round, warm, 'warm');
    if (peers) await measureGitPeers(peers, warm, 'warm', false);
    await bareInsert(env, payload, warm, 'warm');
  }
  for (let i = 0; i < samples; i++) {
    await f.playRound(paths);
    await s.time(`${key}.total`, () => f.writer.write());
    // The note and the index are brought up behind the run (while the model thinks): timed apart,
    // and never during a floor's timing.
    await s.time(`${key}.behind`, () =>
      Promise.all([(f.writer as unknown as WithMirror).mirroring, f.writer.readyForTools()]),
    );
    await bareGitCommit(floor, paths, f.round, s, key);
    // The peers snapshot the floor worktree, which now holds the same change (their own index
    // and object store: the floor's commit is invisible to them).
    if (peers) await measureGitPeers(peers, s, key);
    await f.playRound(paths);
    payload = await writeCheckpointInParts(env, f, s, key);
    await bareInsert(env, payload, s, key);
    // One git process that does nothing: the fixed price of each of the checkpoint's git spawns.
    await s.time(`${key}.gitSpawn`, () => runGit(f.worktree, ['rev-parse', '--git-common-dir']));
  }
  return { key, files: 0, touched: paths.length, payloadBytes: payload!.bytes, lastPayload: payload! };
}

/**
 * Where the content commit and the note spend their time: the same git commands
 * commitTouchedPaths runs (update-index, write-tree, commit-tree, update-ref), each timed, and
 * the two lookups the note write does before its fast-import. The commits made here move the
 * branch and the writer's head like a checkpoint's would; no row is written for them.
 */
export async function profileGitParts(
  env: BenchEnv,
  f: RunFixture,
  paths: string[],
  samples: number,
  s: Samples,
  key: string,
): Promise<void> {
  const state = f.writer.state;
  for (let i = 0; i < samples; i++) {
    await f.playRound(paths);
    const drained = await f.tracker.drain();
    await s.time(`${key}.git.updateIndex`, () =>
      runGit(f.worktree, ['update-index', '--add', '--remove', '-z', '--stdin'], { input: drained.join('\0') }),
    );
    const tree = (await s.time(`${key}.git.writeTree`, () => runGit(f.worktree, ['write-tree']))).stdout.trim();
    const commit = (
      await s.time(`${key}.git.commitTree`, () =>
        runGit(f.worktree, ['commit-tree', tree, '-p', state.headOid!, '-m', 'profile']),
      )
    ).stdout.trim();
    await s.time(`${key}.git.updateRef`, () =>
      runGit(f.worktree, ['update-ref', `refs/heads/${f.branch}`, commit, state.headOid!]),
    );
    state.headOid = commit;
    await s.time(`${key}.git.noteCommonDir`, () => runGit(f.worktree, ['rev-parse', '--git-common-dir']));
    await s.time(`${key}.git.noteRefLookup`, () =>
      runGit(f.worktree, ['rev-parse', '--verify', '--quiet', env.config.WORKER_NOTES_REF], { allowExitCodes: [1] }),
    );
  }
  // The tracker's next drain must not replay these paths: the profile commits hold them.
  await f.tracker.drain();
}
