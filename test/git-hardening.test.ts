// The git the worker itself runs (worktree add, checkpoint commits, notes, resume
// verification and repair) runs none of the repository's programs: hooks (reference-transaction
// on update-ref and fast-import, post-checkout, post-index-change …), an fsmonitor hook, filter
// drivers and diff drivers from .git/config + .gitattributes. Each of them, planted in the repo,
// would touch a marker file; after a full run with a crash and a resume, no marker exists.
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { runGit, safeGitEnv } from '../worker/git/run-git.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { waitFor, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

const HOOKS = [
  'reference-transaction',
  'post-checkout',
  'post-index-change',
  'pre-commit',
  'post-commit',
  'post-rewrite',
  'pre-auto-gc',
];

let s: Scenario;
let markers: string;
const workers: Child[] = [];

/** A script that touches markers/<name>; a filter also passes stdin through (it must return content). */
async function script(dir: string, name: string): Promise<string> {
  const file = path.join(dir, `${name}.sh`);
  await writeFile(file, `#!/bin/sh\ntouch '${path.join(markers, name)}'\n${name.startsWith('filter-') ? 'cat\n' : ''}`);
  await chmod(file, 0o755);
  return file;
}

async function markersFound(): Promise<string[]> {
  return (await readdir(markers)).sort();
}

before(async () => {
  const scripts = await mkdtemp(path.join(os.tmpdir(), 'echodo-hostile-scripts-'));
  markers = await mkdtemp(path.join(os.tmpdir(), 'echodo-markers-'));
  s = await createScenario({
    steps: sampleSteps(10, 3), // write_file, grep, write_file: no run_command, so every git is the worker's
    files: {
      'README.md': '# hostile\n',
      'src/index.ts': 'export const answer = 42;\n',
      '.gitattributes': '* filter=evil diff=evil\n',
    },
    env: {
      WORKER_WORKTREE_BASE: path.join(await mkdtemp(path.join(os.tmpdir(), 'echodo-hardening-')), 'wt'),
      WORKER_LEASE_MS: '6000',
      WORKER_HEARTBEAT_MS: '300',
    },
  });
  for (const hook of HOOKS)
    await writeFile(
      path.join(s.repo, '.git', 'hooks', hook),
      `#!/bin/sh\ntouch '${path.join(markers, `hook-${hook}`)}'\n`,
      { mode: 0o755 },
    );
  const config = async (key: string, value: string) => git(s.repo, 'config', key, value);
  await config('core.fsmonitor', await script(scripts, 'fsmonitor'));
  await config('filter.evil.clean', await script(scripts, 'filter-clean'));
  await config('filter.evil.smudge', await script(scripts, 'filter-smudge'));
  await config('filter.evil.required', 'true');
  await config('diff.evil.textconv', await script(scripts, 'textconv'));
  await config('diff.external', await script(scripts, 'external-diff'));
  await config('core.pager', await script(scripts, 'pager'));
  await config('core.sshCommand', await script(scripts, 'ssh'));
  await config('credential.helper', `!${await script(scripts, 'credential')}`);
  await config('uploadpack.packObjectsHook', await script(scripts, 'pack-objects-hook'));
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL', 100)));
  await s?.close();
});

test('the planted programs are live: plain git in the repository runs them', async () => {
  await git(s.repo, 'update-ref', 'refs/heads/probe', 'HEAD');
  await git(
    s.repo,
    'worktree',
    'add',
    '-q',
    path.join(await mkdtemp(path.join(os.tmpdir(), 'echodo-probe-')), 'wt'),
    'probe',
  );
  await writeFile(path.join(s.repo, 'src', 'index.ts'), 'export const answer = 43;\n');
  await git(s.repo, 'add', 'src/index.ts');
  await git(s.repo, 'diff', '--cached', '--stat');
  await git(s.repo, 'diff', 'HEAD', '--', 'README.md', 'src/index.ts').catch(() => '');
  await git(s.repo, 'status', '--porcelain');
  const found = await markersFound();
  for (const m of ['hook-reference-transaction', 'hook-post-checkout', 'fsmonitor', 'filter-clean', 'filter-smudge']) {
    assert.ok(found.includes(m), `${m} fired under plain git (found: ${found.join(', ')})`);
  }
  // Back to a clean repository and no markers before the real test.
  await git(s.repo, 'reset', '-q', '--hard', 'HEAD');
  await rm(markers, { recursive: true, force: true });
  await mkdir(markers);
});

test(
  'a full run (worktree add, checkpoints, notes, a crash, resume verification and repair) runs none of them',
  { timeout: 180_000 },
  async () => {
    assert.deepEqual(await markersFound(), []);
    const { agentRunId } = await s.dispatch();
    const crashing = s.spawnWorker({ ECHODO_FAULT: 'after-checkpoint-row@2' });
    workers.push(crashing);
    assert.equal((await crashing.exited).signal, 'SIGKILL');
    // Damage the worktree so that resume repairs (reset, clean) and rewrites the missing note.
    const run = await s.run(agentRunId);
    await writeFile(path.join(run.worktree_path, 'stray.txt'), 'left by the crash\n');
    const finisher = s.spawnWorker();
    workers.push(finisher);
    // Sweep until the stall detector re-dispatches it (once its lease has run out) and it finishes.
    const done = await waitFor(
      async () => {
        await s.sweep();
        const row = await s.run(agentRunId);
        return row.status === 'completed' || row.status === 'failed' ? row : undefined;
      },
      { timeoutMs: 150_000, intervalMs: 300, what: `run ${agentRunId} to finish` },
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${finisher.output().slice(-3000)}`);
    });
    assert.equal(done.status, 'completed', done.failure_reason);
    const resumed = await s.events(agentRunId, 'run_resumed');
    assert.ok(resumed.length >= 1, 'the run was verified and repaired on resume');
    const report = await checkRunIntegrity(s.t.db, s.config, s.workspaceId, agentRunId);
    assert.deepEqual(report?.findings, []);
    await finisher.stop('SIGTERM', 5000);
    assert.deepEqual(await markersFound(), [], 'no hook, fsmonitor, filter or diff driver ran');
  },
);

test("the worker's own diff and status with SAFE_GIT_CONFIG: no driver runs, even when asked for a diff", async () => {
  const [row] = await s.su`select worktree_path from agent_runs where status = 'completed' limit 1`;
  assert.ok(row, 'a completed run from the test before');
  const wt = row.worktree_path as string;
  await writeFile(path.join(wt, 'src', 'index.ts'), 'export const answer = 44;\n');
  await runGit(wt, ['status', '--porcelain']);
  await runGit(wt, ['diff', '--no-ext-diff', '--no-textconv', 'HEAD']);
  await assert.rejects(
    runGit(wt, ['diff', 'HEAD']),
    /external diff|cannot run/,
    'a diff without --no-ext-diff fails instead of running a program',
  );
  await runGit(wt, ['add', 'src/index.ts']);
  await runGit(wt, ['checkout', '-q', 'HEAD', '--', 'src/index.ts']);
  const env = await safeGitEnv(wt);
  assert.ok(
    Object.entries(env).some(([k, v]) => k.startsWith('GIT_CONFIG_KEY_') && v === 'filter.evil.clean'),
    "the repo's filter is emptied by name",
  );
  assert.deepEqual(await markersFound(), []);
});
