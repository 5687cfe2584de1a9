// Many hosts, the checkpoint remote checked and pruned: `integrity-check --remote`
// compares every row with the commit and the note on the remote, and `prune` prunes a run's refs
// there too. A bare remote behind a real `git daemon` on 127.0.0.1; a host's own clone as
// WORKER_REPO_ROOT; real workers, real Postgres, the real CLIs as child processes.
import assert from 'node:assert/strict';
import { mkdtemp, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runNotesRef } from '../worker/remote/push.ts';
import { spawnNode, type Child } from './support/child.ts';
import { startGitDaemon, type GitDaemon } from '../testbed/git-daemon.ts';
import { git } from './support/git.ts';
import { createScenario, sampleSteps, type Scenario, type TranscriptStep } from './support/scenario.ts';

const ROUNDS = 4;
let s: Scenario;
let daemon: GitDaemon;
let root: string;
let remoteDir: string;
let hostRepo: string;
let hostEnv: Record<string, string>;
const children: Child[] = [];
const names = ['checked', 'pruned', 'branches', 'down', 'killed'] as const;
const runs: Record<(typeof names)[number], string> = {} as never;

interface Report {
  intact: boolean;
  findings: { kind: string; detail: string }[];
  remote?: { branchTip: string | null; aheadOfCheckpoint: number; rowsChecked: number; notesRef: string };
}

async function cli(script: string, args: string[], env: Record<string, string | undefined> = {}) {
  const c = spawnNode(script, args, { env: { ...s.env, ...hostEnv, LOG_LEVEL: 'warn', ...env } });
  children.push(c);
  const exit = await c.exited;
  return { exit, stdout: c.stdout.join('\n'), stderr: c.stderr.join('\n'), output: c.output() };
}

async function integrity(id: string, env: Record<string, string | undefined> = {}) {
  const r = await cli(
    'scripts/integrity-check.ts',
    ['--workspace', s.workspaceId, '--run', id, '--remote', '--json'],
    env,
  );
  return {
    ...r,
    code: r.exit.code,
    report: r.exit.code === 0 || r.exit.code === 1 ? (JSON.parse(r.stdout) as Report) : undefined,
  };
}

async function prune(args: string[] = [], env: Record<string, string | undefined> = {}) {
  const r = await cli('scripts/prune.ts', ['--older-than', '30d', ...args], env);
  return { ...r, report: r.exit.code === 0 ? JSON.parse(r.stdout) : undefined };
}

const age = (id: string) => s.su`update agent_runs set finished_at = now() - interval '40 days' where id = ${id}`;
const unage = (id: string) => s.su`update agent_runs set finished_at = now() where id = ${id}`;
/** The kinds found, sorted, and the detail of one kind. */
const kinds = (r: Report) => r.findings.map((f) => f.kind).sort();
const detailOf = (r: Report, kind: string) => r.findings.find((f) => f.kind === kind)?.detail ?? '';
const onRemote = (...args: string[]) => git(remoteDir, ...args);
const remoteHas = async (ref: string) => (await onRemote('for-each-ref', '--format=%(objectname)', ref)) || undefined;
/** The notes in a notes commit on the remote: annotated commit → note JSON. */
async function remoteNotes(notesRef: string): Promise<Map<string, Record<string, any>>> {
  const notes = new Map<string, Record<string, any>>();
  for (const line of (await onRemote('ls-tree', '-r', notesRef)).split('\n').filter(Boolean)) {
    const [meta, name] = line.split('\t');
    notes.set(name!.replaceAll('/', ''), JSON.parse(await onRemote('cat-file', 'blob', meta!.split(' ')[2]!)));
  }
  return notes;
}

/**
 * What one checkpoint adds to the remote: the objects reachable from the run's branch and notes ref
 * and not from main (commits, trees, blobs, notes commits, note blobs), with their size on disk.
 */
async function remoteObjects(branch: string, notesRef: string): Promise<{ count: number; bytes: number }> {
  const listed = await onRemote('rev-list', '--objects', `refs/heads/${branch}`, notesRef, '--not', 'refs/heads/main');
  const oids = listed
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(' ')[0]!);
  const { execFileSync } = await import('node:child_process');
  const sizes = execFileSync('git', ['cat-file', '--batch-check=%(objectsize:disk)'], {
    cwd: remoteDir,
    input: `${oids.join('\n')}\n`,
  }).toString();
  return {
    count: oids.length,
    bytes: sizes
      .split('\n')
      .filter(Boolean)
      .reduce((n, v) => n + Number(v), 0),
  };
}

before(async () => {
  s = await createScenario({
    steps: sampleSteps(20, ROUNDS),
    env: { WORKER_LEASE_MS: '8000', WORKER_HEARTBEAT_MS: '500' },
  });
  root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-hosts-retention-')));
  remoteDir = path.join(root, 'remote.git');
  await git(root, 'clone', '-q', '--bare', s.repo, remoteDir);
  daemon = await startGitDaemon(root);
  hostRepo = path.join(root, 'host-a');
  await git(root, 'clone', '-q', daemon.url('remote.git'), hostRepo); // over the real transport
  hostEnv = {
    WORKER_REPO_ROOT: hostRepo,
    WORKER_WORKTREE_BASE: path.join(root, 'worktrees-a'),
    WORKER_HOST_ID: 'host-a',
    WORKER_CHECKPOINT_REMOTE: daemon.url('remote.git'),
  };
  // Jobs leave repoPath out: the host serves them from its own WORKER_REPO_ROOT.
  for (const name of names) runs[name] = (await s.dispatch({ repoPath: undefined })).agentRunId;
  const worker = s.spawnWorker(hostEnv);
  children.push(worker);
  for (const name of names) await s.waitForStatus(runs[name], 'completed', 180_000);
  await worker.stop('SIGTERM', 8000);
  for (const name of names)
    assert.equal((await s.checkpoints(runs[name])).length, ROUNDS, `run ${name}: ${ROUNDS} checkpoints`);
});

after(async () => {
  await Promise.all(children.map((c) => c.stop('SIGKILL', 100)));
  await daemon?.stop();
  await s?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

describe('integrity-check --remote', () => {
  test(
    "intact after a run with the remote: every row's commit and note there, the branch at the last checkpoint",
    { timeout: 300_000 },
    async () => {
      const rows = await s.checkpoints(runs.checked);
      const r = await integrity(runs.checked);
      assert.equal(r.code, 0, r.output);
      assert.deepEqual(r.report!.findings, []);
      assert.equal(r.report!.remote!.branchTip, rows.at(-1)!.commit_oid);
      assert.equal(r.report!.remote!.rowsChecked, ROUNDS);
      assert.equal(r.report!.remote!.aheadOfCheckpoint, 0);
      assert.equal(await git(hostRepo, 'for-each-ref', 'refs/echodo-verify/'), '', 'the scratch refs are gone');
      const text = await cli('scripts/integrity-check.ts', [
        '--workspace',
        s.workspaceId,
        '--run',
        runs.checked,
        '--remote',
      ]);
      assert.equal(text.exit.code, 0, text.output);
      assert.match(text.stdout, /intact: worktree, Postgres, git notes and the checkpoint remote agree/);
    },
  );

  test('a missing remote note: one note removed, then the whole notes ref deleted', { timeout: 300_000 }, async () => {
    const rows = await s.checkpoints(runs.checked);
    const notesRef = runNotesRef(s.workspaceId, runs.checked);
    const saved = await onRemote('rev-parse', notesRef);
    try {
      await onRemote(
        '-c',
        'user.name=t',
        '-c',
        'user.email=t@t',
        'notes',
        `--ref=${notesRef}`,
        'remove',
        rows[1]!.commit_oid,
      );
      let r = await integrity(runs.checked);
      assert.equal(r.code, 1, r.output);
      assert.deepEqual(kinds(r.report!), ['remote_note_missing']);
      assert.match(detailOf(r.report!, 'remote_note_missing'), /checkpoint\(s\) 2$/);
      await onRemote('update-ref', '-d', notesRef);
      r = await integrity(runs.checked);
      assert.equal(r.code, 1, r.output);
      assert.deepEqual(kinds(r.report!), ['remote_note_missing']);
      assert.match(
        detailOf(r.report!, 'remote_note_missing'),
        /not on the checkpoint remote: no note for checkpoint\(s\) 1, 2, 3, 4/,
      );
    } finally {
      await onRemote('update-ref', notesRef, saved);
    }
    assert.equal((await integrity(runs.checked)).code, 0, 'intact again once the notes ref is back');
  });

  test(
    "a tampered remote note: one file's sha256 changed, seq and hash left as they were",
    { timeout: 300_000 },
    async () => {
      const rows = await s.checkpoints(runs.checked);
      const notesRef = runNotesRef(s.workspaceId, runs.checked);
      const saved = await onRemote('rev-parse', notesRef);
      const row = rows.find((r) => r.files_touched.length > 0)!;
      const note = (await remoteNotes(notesRef)).get(row.commit_oid)!;
      note.files[0].sha256 = 'f'.repeat(64);
      try {
        await onRemote(
          '-c',
          'user.name=t',
          '-c',
          'user.email=t@t',
          'notes',
          `--ref=${notesRef}`,
          'add',
          '-f',
          '-m',
          JSON.stringify(note),
          row.commit_oid,
        );
        const r = await integrity(runs.checked);
        assert.equal(r.code, 1, r.output);
        assert.deepEqual(kinds(r.report!), ['remote_note_mismatch']);
        assert.match(detailOf(r.report!, 'remote_note_mismatch'), new RegExp(`seq ${row.checkpoint_seq} \\(`));
      } finally {
        await onRemote('update-ref', notesRef, saved);
      }
    },
  );

  test('the remote branch moved back, moved past, and moved aside', { timeout: 300_000 }, async () => {
    const rows = await s.checkpoints(runs.checked);
    const branchRef = `refs/heads/${(await s.run(runs.checked)).branch}`;
    const last = rows.at(-1)!.commit_oid;
    try {
      await onRemote('update-ref', branchRef, rows[1]!.commit_oid);
      let r = await integrity(runs.checked);
      assert.equal(r.code, 1, r.output);
      assert.deepEqual(kinds(r.report!), ['remote_branch_behind', 'remote_commit_missing']);
      assert.match(detailOf(r.report!, 'remote_commit_missing'), /checkpoint\(s\) 3, 4:/);

      // Past the last checkpoint: a push whose row never came (killed at after-push). Every row is
      // still on the remote: intact, and the report says by how much the branch is ahead.
      const past = await onRemote(
        '-c',
        'user.name=t',
        '-c',
        'user.email=t@t',
        'commit-tree',
        `${last}^{tree}`,
        '-p',
        last,
        '-m',
        'pushed, no row',
      );
      await onRemote('update-ref', branchRef, past);
      r = await integrity(runs.checked);
      assert.equal(r.code, 0, r.output);
      assert.equal(r.report!.remote!.aheadOfCheckpoint, 1);

      const aside = await onRemote(
        '-c',
        'user.name=t',
        '-c',
        'user.email=t@t',
        'commit-tree',
        `${last}^{tree}`,
        '-p',
        rows[1]!.commit_oid,
        '-m',
        'aside',
      );
      await onRemote('update-ref', branchRef, aside);
      r = await integrity(runs.checked);
      assert.equal(r.code, 1, r.output);
      assert.deepEqual(kinds(r.report!), ['remote_branch_diverged', 'remote_commit_missing']);
    } finally {
      await onRemote('update-ref', branchRef, last);
    }
  });

  test('without WORKER_CHECKPOINT_REMOTE: a clear error naming it, exit 2', { timeout: 120_000 }, async () => {
    const r = await integrity(runs.checked, { WORKER_CHECKPOINT_REMOTE: undefined });
    assert.equal(r.code, 2, r.output);
    assert.match(r.stderr, /--remote needs WORKER_CHECKPOINT_REMOTE/);
    assert.equal(r.stdout, '');
  });
});

describe('prune on the remote', () => {
  test(
    "prune leaves the kept checkpoint's note alone in the run's notes ref; the branch stays; gc gives the space back",
    { timeout: 300_000 },
    async () => {
      const id = runs.pruned;
      const rows = await s.checkpoints(id);
      const run = await s.run(id);
      const notesRef = runNotesRef(s.workspaceId, id);
      const oldNotes = await onRemote('rev-list', notesRef);
      assert.equal(oldNotes.split('\n').length, ROUNDS, 'one notes commit per checkpoint before');
      const before = await remoteObjects(run.branch, notesRef);
      console.log(
        `remote objects of a ${ROUNDS}-checkpoint run: ${before.count} objects, ${before.bytes} bytes on disk (loose): ${Math.round(before.bytes / ROUNDS)} bytes per checkpoint`,
      );

      await age(id);
      try {
        const r = await prune();
        assert.equal(r.exit.code, 0, r.output);
        assert.equal(r.report.rowsDeleted, ROUNDS - 1);
        assert.deepEqual(r.report.remotePending, []);
        assert.equal(r.report.remoteRefsUpdated.length, 1);
        assert.match(r.report.remoteRefsUpdated[0], new RegExp(`^${notesRef} -> [0-9a-f]{40}$`));
        assert.deepEqual(r.report.branchesDeleted, []);
      } finally {
        await unage(id);
      }
      const notes = await remoteNotes(notesRef);
      assert.deepEqual([...notes.keys()], [rows.at(-1)!.commit_oid], "only the kept checkpoint's note is left");
      assert.equal(notes.get(rows.at(-1)!.commit_oid)!.hash, rows.at(-1)!.hash);
      assert.equal(
        await onRemote('rev-list', '--count', notesRef),
        '1',
        'a parentless notes commit: the old ones are unreachable',
      );
      assert.equal(
        await remoteHas(`refs/heads/${run.branch}`),
        rows.at(-1)!.commit_oid,
        'the branch stays at the last checkpoint',
      );
      assert.equal(
        await git(hostRepo, 'rev-parse', notesRef),
        await onRemote('rev-parse', notesRef),
        "the host's copy of the notes ref follows",
      );
      const r = await integrity(id);
      assert.equal(r.code, 0, r.output);
      assert.equal(r.report!.remote!.rowsChecked, 1);

      await onRemote('gc', '--quiet', '--prune=now');
      for (const old of oldNotes.split('\n')) {
        await assert.rejects(onRemote('cat-file', '-e', old), `old notes commit ${old} deleted by the remote's gc`);
      }
      const kept = await remoteObjects(run.branch, notesRef);
      console.log(`after prune and the remote's gc: ${kept.count} objects, ${kept.bytes} bytes on disk (packed)`);
    },
  );

  test(
    'prune --delete-branches deletes the branch and the notes ref on the remote and here; other runs keep theirs',
    { timeout: 300_000 },
    async () => {
      const id = runs.branches;
      const run = await s.run(id);
      const notesRef = runNotesRef(s.workspaceId, id);
      assert.ok(await remoteHas(`refs/heads/${run.branch}`));
      await age(id);
      try {
        const r = await prune(['--delete-branches']);
        assert.equal(r.exit.code, 0, r.output);
        assert.deepEqual(r.report.remotePending, []);
        assert.deepEqual(r.report.branchesDeleted, [run.branch]);
        assert.deepEqual(
          [...r.report.remoteRefsUpdated].sort(),
          [`${notesRef} -> deleted`, `refs/heads/${run.branch} -> deleted`].sort(),
        );
      } finally {
        await unage(id);
      }
      assert.equal(await remoteHas(`refs/heads/${run.branch}`), undefined, 'branch gone from the remote');
      assert.equal(await remoteHas(notesRef), undefined, 'notes ref gone from the remote');
      assert.equal(await git(hostRepo, 'for-each-ref', `refs/heads/${run.branch}`, notesRef), '', 'and from the host');
      assert.equal((await s.checkpoints(id)).length, 1);
      // Without the flag, a branch is never deleted (the run pruned just before keeps its branch).
      const kept = await s.run(runs.pruned);
      assert.ok(await remoteHas(`refs/heads/${kept.branch}`));
      assert.ok(await remoteHas(runNotesRef(s.workspaceId, runs.pruned)));
    },
  );

  test(
    'the remote down during prune: the run is left as it was and reported; the next prune does it',
    { timeout: 300_000 },
    async () => {
      const id = runs.down;
      const notesRef = runNotesRef(s.workspaceId, id);
      const notesBefore = await onRemote('rev-parse', notesRef);
      await age(id);
      try {
        await daemon.stop();
        try {
          const r = await prune();
          assert.equal(r.exit.code, 0, r.output);
          assert.equal(r.report.rowsDeleted, 0, 'no row deleted while its remote refs could not be pruned');
          assert.deepEqual(
            r.report.remotePending.map((p: { agentRunId: string }) => p.agentRunId),
            [id],
          );
          assert.match(r.report.remotePending[0].reason, /could not reach the checkpoint remote/);
          assert.match(r.stderr, new RegExp(`run ${id} left for the next prune`));
          assert.equal((await s.checkpoints(id)).length, ROUNDS, 'every row kept');
          assert.ok((await s.run(id)).worktree_path && r.report.worktreesRemoved.length === 0, 'the worktree too');
          const check = await integrity(id);
          assert.equal(check.code, 2, check.output);
          assert.match(check.stderr, /could not reach the checkpoint remote/);
        } finally {
          await daemon.start();
        }
        assert.equal(await onRemote('rev-parse', notesRef), notesBefore, 'the remote untouched');
        const again = await prune();
        assert.equal(again.exit.code, 0, again.output);
        assert.equal(again.report.rowsDeleted, ROUNDS - 1);
        assert.deepEqual(again.report.remotePending, []);
      } finally {
        await unage(id);
      }
      assert.equal((await remoteNotes(notesRef)).size, 1);
      assert.equal((await integrity(id)).code, 0);
    },
  );

  test(
    'prune killed after the remote was pruned and before the rows: the next prune finishes it',
    { timeout: 300_000 },
    async () => {
      const id = runs.killed;
      const notesRef = runNotesRef(s.workspaceId, id);
      await age(id);
      try {
        const killed = await prune([], { ECHODO_FAULT: 'after-remote-prune' });
        assert.equal(killed.exit.signal, 'SIGKILL', killed.output);
        assert.equal((await s.checkpoints(id)).length, ROUNDS, 'rows not yet deleted');
        assert.equal((await remoteNotes(notesRef)).size, 1, 'the remote already pruned');
        // In between, --remote says so: the rows still there have no note on the remote.
        const between = await integrity(id);
        assert.equal(between.code, 1, between.output);
        assert.deepEqual(kinds(between.report!), ['remote_note_missing']);
        assert.match(detailOf(between.report!, 'remote_note_missing'), /checkpoint\(s\) 1, 2, 3$/);
        const r = await prune();
        assert.equal(r.exit.code, 0, r.output);
        assert.equal(r.report.rowsDeleted, ROUNDS - 1);
      } finally {
        await unage(id);
      }
      assert.equal((await s.checkpoints(id)).length, 1);
      assert.equal((await integrity(id)).code, 0);
    },
  );

  test(
    'a pruned failed run retried on its host, pruned from another: its notes ref is forced past the pruned one',
    { timeout: 400_000 },
    async () => {
      // Three rounds, then a write on a full disk fails the run; retried without the fault, it completes.
      const steps: TranscriptStep[] = [
        { toolCalls: [{ toolName: 'grep', input: { pattern: 'answer' } }] },
        { toolCalls: [{ toolName: 'read_file', input: { path: 'README.md' } }] },
        { toolCalls: [{ toolName: 'run_command', input: { command: 'git status' } }] },
        { toolCalls: [{ toolName: 'write_file', input: { path: 'x.txt', content: 'x\n' } }] },
        { text: 'Done.' },
      ];
      const model = path.join(root, 'failing.json');
      await writeFile(model, JSON.stringify({ steps }));
      const { agentRunId: id } = await s.dispatch({ repoPath: undefined, model: `replay:${model}` });
      const full = s.spawnWorker({ ...hostEnv, ECHODO_FAULT_ERRNO: 'write-file:ENOSPC' });
      children.push(full);
      await s.waitForStatus(id, 'failed', 180_000);
      await full.stop('SIGTERM', 8000);
      const rows = await s.checkpoints(id);
      assert.ok(rows.length >= 2, `${rows.length} checkpoints before the failure`);
      const notesRef = runNotesRef(s.workspaceId, id);
      const hostA = await git(hostRepo, 'rev-parse', notesRef);

      // Pruned from host B: the remote's notes ref is replaced; host A keeps its own (older) copy.
      const hostB = path.join(root, 'host-b');
      await git(root, 'clone', '-q', daemon.url('remote.git'), hostB);
      await age(id);
      try {
        const r = await prune([], { WORKER_REPO_ROOT: hostB, WORKER_HOST_ID: 'host-b' });
        assert.equal(r.exit.code, 0, r.output);
        assert.equal(r.report.rowsDeleted, rows.length - 1);
      } finally {
        await unage(id);
      }
      assert.equal((await remoteNotes(notesRef)).size, 1);
      assert.equal(await git(hostRepo, 'rev-parse', notesRef), hostA, "host A's copy predates the prune");

      const retried = await cli('scripts/retry.ts', ['--workspace', s.workspaceId, '--run', id]);
      assert.equal(retried.exit.code, 0, retried.output);
      const worker = s.spawnWorker(hostEnv);
      children.push(worker);
      await s.waitForStatus(id, 'completed', 180_000);
      await worker.stop('SIGTERM', 8000);
      const now = await s.checkpoints(id);
      assert.ok(
        now.length >= 2 && now.at(-1)!.checkpoint_seq > rows.at(-1)!.checkpoint_seq,
        'checkpoints written after the retry',
      );
      const notes = await remoteNotes(notesRef);
      for (const row of now)
        assert.equal(notes.get(row.commit_oid)?.hash, row.hash, `seq ${row.checkpoint_seq}: its note on the remote`);
      const r = await integrity(id);
      assert.equal(r.code, 0, r.output);
    },
  );
});
