// Tampering with a crashed run's worktree, notes or rows: integrity-check reports each (exit 1),
// resume repairs what can be repaired (a "repaired" resume in the worker's metrics) and fails the run
// on what cannot. Also: the check is scoped to a workspace (another workspace's run is "not found", exit 2).
import assert from 'node:assert/strict';
import { rm, appendFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { workerMetricsPort } from './support/metrics.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

let s: Scenario;
let baselineTree: string;
const children: Child[] = [];

async function integrityCheck(workspace: string, run: string) {
  const c = spawnNode('scripts/integrity-check.ts', ['--workspace', workspace, '--run', run], { env: s.env });
  const exit = await c.exited;
  return { code: exit.code, out: c.output() };
}

before(async () => {
  s = await createScenario({ steps: sampleSteps(20, 8) });
  const { agentRunId } = await s.dispatch();
  const w = s.spawnWorker();
  await s.waitForStatus(agentRunId, 'completed', 120_000); // generous: a loaded 2-core machine
  await w.stop('SIGTERM');
  baselineTree = await s.branchTree(agentRunId);
});
after(async () => {
  await Promise.all(children.map((c) => c.stop('SIGKILL', 100)));
  await s?.close();
});

const tampers: {
  name: string;
  kinds: string[];
  repairable: boolean;
  apply(run: Record<string, any>): Promise<void>;
}[] = [
  {
    name: 'a file edited',
    kinds: ['file_changed', 'uncommitted_changes'],
    repairable: true,
    apply: (r) => appendFile(path.join(r.worktree_path, 'src/greet.ts'), '// edited\n'),
  },
  {
    name: 'a file deleted',
    kinds: ['file_missing', 'uncommitted_changes'],
    repairable: true,
    apply: (r) => rm(path.join(r.worktree_path, 'src/greet.ts')),
  },
  {
    name: 'the worktree folder removed',
    kinds: ['worktree_missing'],
    repairable: true,
    apply: (r) => rm(r.worktree_path, { recursive: true, force: true }),
  },
  {
    name: 'a note deleted',
    kinds: ['note_missing'],
    repairable: true,
    apply: async (r) => {
      const [latest] =
        await s.su`select commit_oid from worker_checkpoints where agent_run_id = ${r.id} order by checkpoint_seq desc limit 1`;
      await git(s.repo, 'notes', `--ref=${s.config.WORKER_NOTES_REF}`, 'remove', latest!.commit_oid);
    },
  },
  {
    name: "a row's hash altered",
    kinds: ['hash_chain_broken'],
    repairable: false,
    apply: async (r) => {
      await s.su`update worker_checkpoints set hash = repeat('0', 64) where agent_run_id = ${r.id} and checkpoint_seq = 2`;
    },
  },
];

test('integrity-check reports every tamper and resume repairs what it can', { timeout: 400_000 }, async () => {
  const ids: string[] = [];
  for (const _ of tampers) ids.push((await s.dispatch()).agentRunId);
  const crashed = tampers.map(() => s.spawnWorker({ ECHODO_FAULT: 'after-note@4' }));
  children.push(...crashed);
  await Promise.all(crashed.map((c) => c.exited));

  // Clean before tampering: the crash itself left nothing integrity-check would flag.
  for (const id of ids)
    assert.equal((await integrityCheck(s.workspaceId, id)).code, 0, `run ${id} intact after the crash`);
  // Workspace isolation: the same run seen from another workspace does not exist.
  assert.equal((await integrityCheck('someone-else', ids[0]!)).code, 2);

  for (const [i, tamper] of tampers.entries()) {
    await tamper.apply(await s.run(ids[i]!));
    const { code, out } = await integrityCheck(s.workspaceId, ids[i]!);
    assert.equal(code, 1, `${tamper.name}: drift found\n${out}`);
    for (const kind of tamper.kinds)
      assert.match(out, new RegExp(`DRIFT ${kind}`), `${tamper.name} is reported as ${kind}`);
  }

  const metrics = await workerMetricsPort();
  const finisher = s.spawnWorker(metrics.env);
  children.push(finisher);
  await waitFor(
    async () => {
      await s.sweep();
      const rows = await s.su`select status from agent_runs where id in ${s.su(ids)}`;
      return rows.every((r) => r.status === 'completed' || r.status === 'failed');
    },
    { timeoutMs: 60_000, intervalMs: 200, what: 'every tampered run to finish' },
  );
  // Each repairable run was resumed once, repaired first; the unrepairable one never resumed.
  assert.deepEqual((await metrics.scrape()).byLabel('echodo_resumes_total', 'kind'), {
    repaired: String(tampers.filter((t) => t.repairable).length),
  });

  for (const [i, tamper] of tampers.entries()) {
    const run = await s.run(ids[i]!);
    const [resumed] = await s.events(ids[i]!, 'run_resumed');
    if (tamper.repairable) {
      assert.equal(run.status, 'completed', `${tamper.name}: ${run.failure_reason}`);
      assert.equal(await s.branchTree(ids[i]!), baselineTree, `${tamper.name}: repaired to the same final tree`);
      assert.equal(resumed?.metadata.recloned, false);
      assert.ok(resumed?.metadata.repairs.length > 0, `${tamper.name}: a repair is recorded`);
      const after = await integrityCheck(s.workspaceId, ids[i]!);
      assert.equal(after.code, 0, `${tamper.name}: intact after the resume\n${after.out}`);
    } else {
      assert.equal(run.status, 'failed');
      assert.match(run.failure_reason, /hash/);
    }
  }
});
