// Benchmark 4: the integrity check (operator/integrity.ts checkRunIntegrity: chain from Postgres,
// worktree, notes, file hashes), against `git status` on the same worktree, alternating.
import { checkpointChain, runManifest } from '../store/checkpoints.ts';
import { chainAnchors } from '../store/retention.ts';
import { getRun } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { describeFiles } from '../worker/checkpoints/content.ts';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { lookupNotes } from '../worker/checkpoints/note-lookup.ts';
import { STATUS_ARGS } from '../worker/checkpoints/verify.ts';
import { runGit } from '../worker/git/run-git.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import type { BenchEnv } from './env.ts';
import type { RunFixture } from './fixture.ts';
import { Samples } from './stats.ts';

export interface IntegrityResult {
  intact: boolean;
  findings: string[];
  filesTouched: number;
  checkpoints: number;
}

/** Checkpoints the checked run keeps: the check verifies the whole chain, so it is held constant. */
export const INTEGRITY_CHAIN = 10;

/**
 * Trims the run's chain to its last `keep` rows the way retention does (store/retention.ts):
 * the hash of the last deleted row becomes the run's anchor, so the chain still verifies.
 */
async function trimChain(env: BenchEnv, agentRunId: string, keep: number): Promise<void> {
  await env.su.begin(async (tx) => {
    const [last] = await tx<
      { seq: number }[]
    >`select max(checkpoint_seq)::int as seq from worker_checkpoints where agent_run_id = ${agentRunId}`;
    const cut = (last?.seq ?? 0) - keep;
    if (cut < 1) return;
    const [anchor] = await tx<
      { hash: string }[]
    >`select hash from worker_checkpoints where agent_run_id = ${agentRunId} and checkpoint_seq = ${cut}`;
    await tx`insert into checkpoint_anchors (workspace_id, agent_run_id, anchor_seq, anchor_hash)
             values (${env.workspaceId}, ${agentRunId}, ${cut}, ${anchor!.hash})
             on conflict (workspace_id, agent_run_id) do update set anchor_seq = excluded.anchor_seq, anchor_hash = excluded.anchor_hash, pruned_at = now()`;
    await tx`delete from worker_checkpoints where agent_run_id = ${agentRunId} and checkpoint_seq <= ${cut}`;
  });
}

export async function measureIntegrity(
  env: BenchEnv,
  f: RunFixture,
  samples: number,
  s: Samples,
  key: string,
): Promise<IntegrityResult> {
  await trimChain(env, f.run.id, INTEGRITY_CHAIN);
  const check = () => checkRunIntegrity(env.db, env.config, env.workspaceId, f.run.id);
  // The plain status a person would run, with the same untracked-files setting the check uses.
  const status = () => runGit(f.worktree, ['status', '--porcelain', '--untracked-files=all']);
  for (let i = 0; i < 3; i++) {
    await check();
    await status();
  }
  let report = await check();
  for (let i = 0; i < samples; i++) {
    report = await s.time(`${key}.check`, check);
    await s.time(`${key}.gitStatus`, status);
  }
  if (!report) throw new Error(`integrity check found no run ${f.run.id}`);
  // Every file the run touched is verified: the manifest's size, not the last row's.
  return {
    intact: report.intact,
    findings: report.findings.map((x) => `${x.kind}: ${x.detail}`),
    filesTouched: report.manifest.length,
    checkpoints: report.checkpoints,
  };
}

/** Where the check's time goes: each of its reads on its own (one sample set per part). */
export async function profileIntegrity(
  env: BenchEnv,
  f: RunFixture,
  samples: number,
  s: Samples,
  key: string,
): Promise<void> {
  const chain = await withWorkspace(env.db.app, env.workspaceId, (tx) => checkpointChain(tx, f.run.id));
  const anchor = await withWorkspace(env.db.app, env.workspaceId, (tx) => chainAnchors(tx, f.run.id));
  const latest = chain.at(-1)!;
  const manifest = await withWorkspace(env.db.app, env.workspaceId, (tx) => runManifest(tx, f.run.id));
  for (let i = 0; i < samples; i++) {
    await s.time(`${key}.profile.load`, () =>
      withWorkspace(env.db.app, env.workspaceId, async (tx) => [
        await getRun(tx, f.run.id),
        await checkpointChain(tx, f.run.id),
        await runManifest(tx, f.run.id),
        await chainAnchors(tx, f.run.id),
      ]),
    );
    await s.time(`${key}.profile.verifyChain`, async () => verifyChain(chain, anchor));
    await s.time(`${key}.profile.statusV2`, () => runGit(f.worktree, [...STATUS_ARGS]));
    // Every chain commit's note, the latest note's text and the commit's tree: one cat-file process.
    const commits = chain.map((row) => row.commit_oid!).filter(Boolean);
    await s.time(`${key}.profile.notesBatch`, () =>
      lookupNotes(f.worktree, env.config.WORKER_NOTES_REF, commits, latest.commit_oid!, latest.commit_oid!),
    );
    await s.time(`${key}.profile.hashFiles`, () =>
      describeFiles(
        f.worktree,
        manifest.map((x) => x.path),
      ),
    );
  }
}
