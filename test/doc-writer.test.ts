// The doc-writer harness end to end: no worktree, writes straight into WORKER_REPO_ROOT but only
// under docs/ and plans/, no run_command tool at all, checkpoints that hold hashes only. And role
// routing: a job without harnessAlias is routed by the workspace's role_harness_routes.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { withWorkspace } from '../store/workspace.ts';
import { waitFor, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';

const DOC = '# X\n\nHow x works, in a paragraph long enough to be recognised: doc-writer-e2e-marker.\n';
const STEPS: TranscriptStep[] = [
  { toolCalls: [{ toolName: 'write_file', input: { path: 'docs/x.md', content: DOC } }] },
  { toolCalls: [{ toolName: 'write_file', input: { path: 'src/x.ts', content: 'export const x = 1;\n' } }] },
  { toolCalls: [{ toolName: 'run_command', input: { command: 'git status' } }] },
  { text: 'Docs written.' },
];
const ROUTED_DOC = '# Routed\n\nWritten by the role routed to doc-writer.\n';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

let s: Scenario;
let worker: Child;

async function waitForEnd(agentRunId: string): Promise<Record<string, any>> {
  return waitFor(
    async () => {
      const row = await s.run(agentRunId);
      return row.status === 'completed' || row.status === 'failed' ? row : undefined;
    },
    { timeoutMs: 40_000, what: `run ${agentRunId} to finish` },
  ).catch((err: Error) => {
    throw new Error(`${err.message}\nworker output:\n${worker.output()}`);
  });
}

/** A second transcript beside the scenario's, for a job that needs different rounds. */
async function transcript(steps: TranscriptStep[]): Promise<string> {
  const file = path.join(await mkdtemp(path.join(os.tmpdir(), 'echodo-docwriter-')), 'transcript.json');
  await writeFile(file, JSON.stringify({ steps }));
  return `replay:${file}`;
}

before(async () => {
  s = await createScenario({ steps: STEPS });
  worker = s.spawnWorker();
  await worker.waitForLine(/"worker started"/);
});

after(async () => {
  await worker?.stop('SIGTERM', 5000);
  await s?.close();
});

describe('doc-writer harness', () => {
  test('writes docs/ in the repo root, no worktree, refusals come back as errors, hashes only', async () => {
    const { agentRunId } = await s.dispatch({ harnessAlias: 'doc-writer', roleId: 'writer' });
    const run = await waitForEnd(agentRunId);
    assert.equal(run.status, 'completed', `run failed: ${run.failure_reason}`);
    assert.equal(run.harness_alias, 'doc-writer');

    // Straight into WORKER_REPO_ROOT, as an uncommitted change of the repo's own checkout.
    assert.equal(await readFile(path.join(s.repo, 'docs/x.md'), 'utf8'), DOC);
    assert.equal(existsSync(path.join(s.repo, 'src/x.ts')), false, 'the write outside docs/ and plans/ was refused');
    assert.match(await git(s.repo, 'status', '--porcelain'), /\?\? docs\//);
    assert.equal(await git(s.repo, 'branch', '--list', 'echodo/*'), '', 'no run branch');

    // No worktree at all.
    assert.equal(run.worktree_path, null);
    assert.equal(run.branch, null);
    assert.equal((await s.events(agentRunId, 'worktree_created')).length, 0);
    // The repository's own checkout only, beside the host's spare worktree (worker/worktrees/spares.ts).
    const listed = (await git(s.repo, 'worktree', 'list', '--porcelain'))
      .split('\n')
      .filter((l) => l.startsWith('worktree '));
    assert.deepEqual(
      listed.filter((l) => !l.includes(`${path.sep}.spare${path.sep}`)),
      [`worktree ${s.repo}`],
    );
    assert.equal(existsSync(path.join(s.env.WORKER_WORKTREE_BASE!, agentRunId)), false);
    const [completion] = await s.events(agentRunId, 'role_complete');
    assert.equal(completion?.metadata.harnessAlias, 'doc-writer');

    // The refusals: outside the writable folders, and a tool this harness does not have.
    const rows = await s.checkpoints(agentRunId);
    assert.deepEqual(
      rows.map((r) => r.checkpoint_seq),
      [1, 2, 3],
    );
    const history = rows.flatMap((r) => r.tool_history) as {
      round: number;
      tool: string;
      ok: boolean;
      error?: string;
    }[];
    assert.deepEqual(
      history.map((h) => [h.round, h.tool, h.ok]),
      [
        [1, 'write_file', true],
        [2, 'write_file', false],
        [3, 'run_command', false],
      ],
    );
    assert.match(history[1]!.error!, /src\/x\.ts.*outside the writable folders \(docs\/, plans\/\)/);
    assert.match(history[2]!.error!, /run_command/);
    assert.match(history[2]!.error!, /no such tool|not available|unavailable/i);

    // Hashes only: no commit, files as {path, sha256}, never the content.
    // Each row names the files it changed: round 1 wrote docs/x.md; rounds 2 and 3 were refused.
    for (const row of rows) assert.equal(row.commit_oid, null, `checkpoint ${row.checkpoint_seq} has no commit`);
    assert.deepEqual(
      rows.map((row) => row.files_touched.map((f: { path: string; sha256: string }) => [f.path, f.sha256])),
      [[['docs/x.md', sha256(DOC)]], [], []],
    );
    const dumped =
      await s.su`select row_to_json(c)::text as j from worker_checkpoints c where agent_run_id = ${agentRunId}`;
    for (const { j } of dumped) assert.ok(!j.includes('doc-writer-e2e-marker'), 'no file content in a checkpoint row');
    assert.equal(
      await git(s.repo, 'notes', `--ref=${s.config.WORKER_NOTES_REF}`, 'list'),
      '',
      'no git notes without commits',
    );
  });

  test('a job without harnessAlias follows role_harness_routes to doc-writer', async () => {
    await withWorkspace(
      s.t.db.app,
      s.workspaceId,
      (tx) =>
        tx`insert into role_harness_routes (workspace_id, role_id, harness_alias) values (${tx.workspaceId}, 'tech-writer', 'doc-writer')`,
    );
    const model = await transcript([
      { toolCalls: [{ toolName: 'write_file', input: { path: 'plans/routed.md', content: ROUTED_DOC } }] },
      { text: 'Planned.' },
    ]);
    const routed = await s.dispatch({ harnessAlias: undefined, roleId: 'tech-writer', model });
    const [stored] = await s.su`select job from agent_runs where id = ${routed.agentRunId}`;
    assert.equal('harnessAlias' in stored!.job, false, 'the job names no harness');
    const run = await waitForEnd(routed.agentRunId);
    assert.equal(run.status, 'completed', `run failed: ${run.failure_reason}`);
    assert.equal(run.harness_alias, 'doc-writer');
    assert.equal(run.worktree_path, null);
    assert.equal(await readFile(path.join(s.repo, 'plans/routed.md'), 'utf8'), ROUTED_DOC);
    assert.equal((await s.events(routed.agentRunId, 'role_complete'))[0]?.metadata.harnessAlias, 'doc-writer');

    // Control: a role without a route gets the code harness (its own worktree and branch).
    const unrouted = await s.dispatch({ harnessAlias: undefined, roleId: 'coder', model });
    const codeRun = await waitForEnd(unrouted.agentRunId);
    assert.equal(codeRun.status, 'completed', `run failed: ${codeRun.failure_reason}`);
    assert.equal(codeRun.harness_alias, 'code');
    assert.ok(
      codeRun.worktree_path?.startsWith(s.env.WORKER_WORKTREE_BASE!),
      'codeRun.worktree_path?.startsWith(s.env.WORKER_WORKTREE_BASE!)',
    );
    assert.equal(await git(s.repo, 'show', `${codeRun.branch}:plans/routed.md`), ROUTED_DOC.replace(/\n$/, ''));
  });
});
