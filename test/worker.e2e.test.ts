// The baseline loop, end to end, on both queue backends: dispatch → a real worker process →
// a completed run whose files are on its branch, in a worktree made with `git worktree add`,
// with the lifecycle rows and events of the contract. Refused tool calls go back to the model
// as errors and the run goes on; a job for a workspace that does not exist is dead-lettered
// and the same worker serves the next job.
import assert from 'node:assert/strict';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { branchName } from '../core/job.ts';
import { waitFor, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { startRedis, type RedisServer } from '../testbed/redis.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';

const GREET = 'export function greet(name: string) {\n  return `hello ${name}`;\n}\n';
const GREET_TEST = "import { greet } from '../src/greet';\nconsole.assert(greet('a') === 'hello a');\n";

const STEPS: TranscriptStep[] = [
  { toolCalls: [{ toolName: 'write_file', input: { path: 'src/greet.ts', content: GREET } }] },
  { toolCalls: [{ toolName: 'write_file', input: { path: '../x', content: 'escape attempt\n' } }] },
  { toolCalls: [{ toolName: 'run_command', input: { command: 'ls' } }] },
  { toolCalls: [{ toolName: 'write_file', input: { path: 'test/greet.test.ts', content: GREET_TEST } }] },
  { toolCalls: [{ toolName: 'run_command', input: { command: 'git status' } }] },
  { text: 'Done: greet module and its test.' },
];
const ROUNDS = STEPS.length - 1;

/** Waits until the run is completed or failed; fails the test with the reason when it failed. */
async function waitForEnd(s: Scenario, agentRunId: string, worker?: Child): Promise<Record<string, any>> {
  const run = await waitFor(
    async () => {
      const row = await s.run(agentRunId);
      return row.status === 'completed' || row.status === 'failed' ? row : undefined;
    },
    { timeoutMs: 40_000, what: `run ${agentRunId} to finish` },
  ).catch((err: Error) => {
    throw new Error(`${err.message}\nworker output:\n${worker?.output() ?? ''}`);
  });
  return run;
}

/** Every folder under `dir` that is a git dir with its own object store (a clone would have one). */
async function gitDirsWithObjects(dir: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    const full = path.join(dir, entry.name);
    if (entry.name === '.git' || entry.name === 'objects') found.push(full);
    else found.push(...(await gitDirsWithObjects(full)));
  }
  return found;
}

for (const backend of ['postgres', 'redis'] as const) {
  describe(`worker end to end on the ${backend} queue`, () => {
    let redis: RedisServer | null = null;
    let s: Scenario;
    let worker: Child;
    const workerId = `e2e-${backend}-worker`;

    before(async () => {
      if (backend === 'redis') redis = await startRedis();
      s = await createScenario({ steps: STEPS, env: redis ? { REDIS_URL: redis.url } : {} });
      worker = s.spawnWorker({ WORKER_ID: workerId });
      await worker.waitForLine(/"worker started"/);
    });

    after(async () => {
      await worker?.stop('SIGTERM', 5000);
      await s?.close();
      await redis?.stop();
    });

    test('a dispatched brief is run to completion on its own branch and worktree', async () => {
      assert.ok(
        worker.lines.some((l) => l.includes(`"queue":"${backend}"`)),
        `worker uses the ${backend} queue`,
      );
      const briefId = `brief-greet-${backend}`;
      const { agentRunId } = await s.dispatch({ briefId });
      const run = await waitForEnd(s, agentRunId, worker);
      assert.equal(run.status, 'completed', `run failed: ${run.failure_reason}\n${worker.output()}`);

      // Lifecycle rows.
      assert.ok(run.finished_at instanceof Date, 'finished_at is set');
      assert.equal(run.lease_epoch, 1);
      assert.equal(run.attempt, 1);
      assert.equal(run.worker_id, workerId);
      const [brief] = await s.su`select status from briefs where workspace_id = ${s.workspaceId} and id = ${briefId}`;
      assert.equal(brief?.status, 'done');
      const completions = await s.events(agentRunId, 'role_complete');
      assert.equal(completions.length, 1);
      assert.equal(completions[0]!.metadata.harnessAlias, 'code');

      // Branch and content: the files are committed on echodo/<briefId>-<first 8 of agentRunId>.
      const branch = `echodo/${briefId}-${agentRunId.slice(0, 8)}`;
      assert.equal(branchName(briefId, agentRunId), branch);
      assert.equal(run.branch, branch);
      assert.equal(await git(s.repo, 'show', `${branch}:src/greet.ts`), GREET.replace(/\n$/, ''));
      assert.equal(await git(s.repo, 'show', `${branch}:test/greet.test.ts`), GREET_TEST.replace(/\n$/, ''));
      await assert.rejects(git(s.repo, 'show', `${branch}:x`), 'nothing was written for ../x inside the tree');
      assert.equal(await git(s.repo, 'rev-parse', '--abbrev-ref', 'HEAD'), 'main', 'the repo itself stays on main');
      assert.equal(await git(s.repo, 'status', '--porcelain'), '', 'the repo checkout is untouched');

      // Worktree: under WORKER_WORKTREE_BASE, registered with the repo, sharing its object store.
      const base = s.env.WORKER_WORKTREE_BASE!;
      const wt = run.worktree_path as string;
      assert.ok(wt.startsWith(base + path.sep), `${wt} is under ${base}`);
      const listed = (await git(s.repo, 'worktree', 'list', '--porcelain'))
        .split('\n')
        .filter((l) => l.startsWith('worktree '))
        .map((l) => l.slice(9));
      assert.ok(listed.includes(wt), `git worktree list shows ${wt}: ${listed.join(', ')}`);
      assert.ok((await stat(path.join(wt, '.git'))).isFile(), 'the worktree has a .git pointer file, not a repository');
      assert.equal(await git(wt, 'rev-parse', '--path-format=absolute', '--git-common-dir'), path.join(s.repo, '.git'));
      assert.deepEqual(await gitDirsWithObjects(base), [], 'no clone under the worktree base');
      assert.equal(await git(wt, 'rev-parse', '--abbrev-ref', 'HEAD'), branch);
      assert.equal((await s.events(agentRunId, 'worktree_created')).length, 1);

      // Checkpoints: one per round, seqs without gaps, each a commit on the branch.
      const rows = await s.checkpoints(agentRunId);
      assert.deepEqual(
        rows.map((r) => r.checkpoint_seq),
        Array.from({ length: ROUNDS }, (_, i) => i + 1),
      );
      assert.equal(rows.at(-1)!.step, ROUNDS);
      assert.equal(rows.at(-1)!.commit_oid, await git(s.repo, 'rev-parse', `refs/heads/${branch}`));

      // Refused calls came back as errors, and the rounds after them ran.
      const history = rows.flatMap((r) => r.tool_history) as {
        round: number;
        tool: string;
        ok: boolean;
        error?: string;
      }[];
      const escape = history.find((h) => h.round === 2);
      assert.equal(escape?.tool, 'write_file');
      assert.equal(escape?.ok, false);
      assert.match(escape!.error!, /path "?\.\.\/x"? leaves the worktree/);
      const banned = history.find((h) => h.round === 3);
      assert.equal(banned?.tool, 'run_command');
      assert.equal(banned?.ok, false);
      assert.match(banned!.error!, /command "ls" is not on the allowlist/);
      assert.deepEqual(
        history.filter((h) => h.ok).map((h) => h.round),
        [1, 4, 5],
      );
    });

    test('a job for a workspace that does not exist is dead-lettered; the worker serves the next job', async () => {
      const badJob = {
        jobId: `job-ghost-${backend}`,
        workspaceId: 'ghost',
        convoyId: 'convoy-1',
        briefId: 'brief-ghost',
        roleId: 'coder',
        harnessAlias: 'code',
        repoPath: s.repo,
        baseRef: 'main',
        brief: 'This workspace does not exist.',
        model: `replay:${s.transcriptPath}`,
      };
      let handInsertedRunId: string | undefined;
      if (backend === 'redis') {
        const client = new Redis(redis!.url);
        try {
          // Any orchestrator may push: a job for a missing workspace, and one that is not even JSON.
          await client.lpush(s.config.WORKER_QUEUE_KEY, JSON.stringify(badJob), '{"workspaceId": "acme", ');
        } finally {
          client.disconnect();
        }
      } else {
        // The Postgres queue is agent_runs: a row whose stored job names a missing workspace
        // (inserted at once, so the worker cannot take it half made).
        handInsertedRunId = 'run-ghost-postgres';
        const job = { ...badJob, agentRunId: handInsertedRunId, resumeFromCheckpoint: false };
        await s.su.begin(async (tx) => {
          await tx`insert into convoys (workspace_id, id) values (${s.workspaceId}, 'convoy-1') on conflict do nothing`;
          await tx`insert into briefs (workspace_id, id, convoy_id, role_id) values (${s.workspaceId}, 'brief-ghost', 'convoy-1', 'coder')`;
          await tx`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, harness_alias)
                   values (${handInsertedRunId!}, ${s.workspaceId}, 'convoy-1', 'brief-ghost', ${badJob.jobId}, ${tx.json(job)}, 'code')`;
        });
      }
      const { agentRunId } = await s.dispatch({ briefId: `brief-after-ghost-${backend}` });

      const dead = await waitFor(
        async () => {
          const rows = await s.su`select * from dead_letters where job_id = ${badJob.jobId}`;
          return rows[0];
        },
        { what: 'the dead letter' },
      );
      const next = await waitForEnd(s, agentRunId, worker);
      assert.equal(next.status, 'completed', `next run: ${next.failure_reason}`);
      assert.equal(next.worker_id, workerId, 'the same worker process ran the next job');
      assert.equal(worker.process.exitCode, null, 'the worker is still running');

      assert.match(dead.reason, /workspace "ghost" does not exist/);
      assert.equal(dead.workspace_id, 'ghost');
      assert.equal(JSON.parse(dead.raw).workspaceId, 'ghost');
      if (handInsertedRunId) {
        const ghostRun = await s.run(handInsertedRunId);
        assert.equal(ghostRun.status, 'failed', 'a dead-lettered stored run is not taken again');
        assert.match(ghostRun.failure_reason, /workspace "ghost" does not exist/);
      } else {
        const client = new Redis(redis!.url);
        try {
          const mirrored = (await client.lrange(`${s.config.WORKER_QUEUE_KEY}:dead`, 0, -1)).map((e) => JSON.parse(e));
          assert.ok(
            mirrored.some((e) => /workspace "ghost" does not exist/.test(e.reason)),
            'dead list mirrors the reason',
          );
          // The ack of the last job lands just after its claim: give it a moment.
          await waitFor(async () => (await client.llen(s.config.WORKER_QUEUE_KEY)) === 0, {
            timeoutMs: 5000,
            what: 'nothing left on the queue',
          });
          await waitFor(async () => (await client.llen(`${s.config.WORKER_QUEUE_KEY}:processing:${workerId}`)) === 0, {
            timeoutMs: 5000,
            what: 'every taken job acked',
          });
          const [garbage] = await s.su`select * from dead_letters where raw = '{"workspaceId": "acme", '`;
          assert.match(garbage?.reason, /invalid job: not valid JSON/);
        } finally {
          client.disconnect();
        }
      }
      assert.equal((await s.su`select count(*)::int as n from agent_runs where workspace_id = 'ghost'`)[0]!.n, 0);
      assert.ok(
        worker.lines.some((l) => l.includes('"job dead-lettered"')),
        'worker.lines.some((l) => l.includes(\'"job dead-lettered"\'))',
      );
    });
  });
}
