// `integrity-check --repair-notes`: the notes come back from Postgres. A real run (the real
// checkpoint writer, a real worktree) loses its notes ref, has a note overwritten, has its branch
// rebased; the check reports each as drift (exit 1), and the repair rewrites the notes of the
// checkpoint commits still on the branch from their rows, reports those no longer on it, and leaves
// the worktree byte-identical.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmod, lstat, mkdtemp, readdir, readFile, readlink, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { checkpointChain, type CheckpointRow } from '../store/checkpoints.ts';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { noteOfRow, readCheckpointNote } from '../worker/checkpoints/notes.ts';
import { createTestDatabase, type TestDatabase } from '../testbed/db.ts';
import { spawnNode } from './support/child.ts';
import { startDrivenRun, type DrivenRun } from './support/checkpoint-run.ts';
import { git, makeRepo } from './support/git.ts';

const WS = 'acme';
let t: TestDatabase;

before(async () => {
  t = await createTestDatabase();
  await withWorkspace(t.db.app, WS, (tx) => createWorkspace(tx));
});
after(async () => {
  await t?.drop();
});

/** A run with `n` checkpoints, each a commit on its branch with its note. */
async function runOf(n: number): Promise<{ repo: string; r: DrivenRun; chain: CheckpointRow[] }> {
  const repo = await makeRepo({ 'src/a.ts': 'export const a = 0;\n' });
  const r = await startDrivenRun({ db: t.db, config: t.config, workspaceId: WS, repo });
  for (let i = 1; i <= n; i++) await r.round({ 'src/a.ts': `export const a = ${i};\n`, [`src/f${i}.ts`]: `${i}\n` });
  await r.writer.settleNotes();
  const chain = await withWorkspace(t.db.app, WS, (tx) => checkpointChain(tx, r.run.id));
  assert.equal(chain.length, n);
  return { repo, r, chain };
}
const runOfThree = () => runOf(3);

/** Every entry under `dir` (the worktree's .git file included): path → type and content hash. */
async function snapshot(dir: string, into = new Map<string, string>(), rel = ''): Promise<Map<string, string>> {
  for (const name of (await readdir(path.join(dir, rel))).sort()) {
    const p = path.join(rel, name);
    const full = path.join(dir, p);
    const st = await lstat(full);
    if (st.isDirectory()) {
      into.set(p, `dir ${st.mode}`);
      await snapshot(dir, into, p);
    } else if (st.isSymbolicLink()) into.set(p, `link ${await readlink(full)}`);
    else
      into.set(
        p,
        `file ${st.mode} ${createHash('sha256')
          .update(await readFile(full))
          .digest('hex')}`,
      );
  }
  return into;
}

async function integrityCheck(
  runId: string,
  ...flags: string[]
): Promise<{ code: number | null; out: string; gits: string[] }> {
  // git on the script's PATH is a wrapper that logs each git process (its subcommand and first
  // argument after the -c settings) before running the real one.
  const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-gitlog-'));
  const log = path.join(dir, 'log');
  const real = path.join(await git(dir, '--exec-path'), 'git');
  await writeFile(
    path.join(dir, 'git'),
    `#!/bin/sh\nprintf '%s\\037' "$@" >> '${log}'\necho >> '${log}'\nexec '${real}' "$@"\n`,
  );
  await chmod(path.join(dir, 'git'), 0o755);
  try {
    const env = { ...t.env, PATH: `${dir}:${process.env.PATH}`, WORKER_SANDBOX: 'off' };
    const c = spawnNode('scripts/integrity-check.ts', ['--workspace', WS, '--run', runId, ...flags], { env });
    const code = (await c.exited).code;
    const lines = (await readFile(log, 'utf8').catch(() => '')).split('\n').filter(Boolean);
    const gits = lines.map((line) => {
      const args = line.split('\x1f');
      let i = 0;
      while (args[i] === '-c') i += 2;
      return args.slice(i, i + 2).join(' ');
    });
    return { code, out: c.output(), gits };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test('notes ref deleted and a note overwritten: reported (exit 1), then rewritten from Postgres (exit 0)', async () => {
  const { repo, r, chain } = await runOfThree();
  const notesRef = t.config.WORKER_NOTES_REF;
  // A wrong note on an older checkpoint, nothing else amiss: the plain check finds it too.
  const forged = ['notes', `--ref=${notesRef}`, 'add', '-f', '-m', '{"agentRunId":"forged"}', chain[0]!.commit_oid!];
  await git(repo, ...forged);
  const older = await integrityCheck(r.run.id);
  assert.equal(older.code, 1, older.out);
  assert.match(older.out, /DRIFT note_mismatch: the note of checkpoint\(s\) 1 /);
  await git(repo, 'update-ref', '-d', notesRef);
  await git(repo, 'notes', `--ref=${notesRef}`, 'add', '-m', '{"agentRunId":"someone else"}', chain[1]!.commit_oid!);
  const before = await snapshot(r.worktree);

  const report = await integrityCheck(r.run.id);
  assert.equal(report.code, 1, report.out);
  assert.match(report.out, /DRIFT note_missing: no note under \S+ for checkpoint\(s\) 1, 3/);
  assert.match(report.out, /DRIFT note_mismatch: the note of checkpoint\(s\) 2 /);

  const repaired = await integrityCheck(r.run.id, '--repair-notes');
  assert.equal(repaired.code, 0, repaired.out);
  assert.match(
    repaired.out,
    /notes rewritten from Postgres for checkpoint\(s\) 1, 2, 3; no longer on the branch: none/,
  );
  for (const row of chain) {
    const note = await readCheckpointNote(repo, notesRef, row.commit_oid!);
    assert.deepEqual(note, JSON.parse(JSON.stringify(noteOfRow(row))), `checkpoint ${row.checkpoint_seq}'s note`);
  }
  assert.deepEqual(await snapshot(r.worktree), before, 'the worktree is byte-identical');
  assert.equal((await integrityCheck(r.run.id)).code, 0, 'intact afterwards');
});

test('a rebased branch: the note of the commit still on it is rewritten, the rewritten ones reported', async () => {
  const { repo, r, chain } = await runOfThree();
  const notesRef = t.config.WORKER_NOTES_REF;
  const [c1, c2, c3] = chain.map((row) => row.commit_oid!);
  // An operator rebases the run's branch (every commit after the first rewritten) and loses the notes.
  await git(r.worktree, '-c', 'user.name=op', '-c', 'user.email=op@x', 'rebase', '-q', '--force-rebase', c1!);
  const tip = await git(repo, 'rev-parse', `refs/heads/${r.branch}`);
  assert.notEqual(tip, c3, 'the branch was rewritten');
  await git(repo, 'update-ref', '-d', notesRef);
  const before = await snapshot(r.worktree);

  const report = await checkRunIntegrity(t.db, t.config, WS, r.run.id);
  assert.equal(report?.intact, false);
  const kinds = report!.findings.map((f) => f.kind);
  assert.ok(kinds.includes('note_missing') && kinds.includes('branch_moved'), kinds.join(', '));
  const off = report!.findings.find((f) => f.kind === 'commit_off_branch');
  assert.match(off?.detail ?? '', new RegExp(`checkpoint\\(s\\) 2 at ${c2!.slice(0, 12)}, 3 at ${c3!.slice(0, 12)}`));

  const repaired = await checkRunIntegrity(t.db, t.config, WS, r.run.id, { repairNotes: true });
  assert.deepEqual(repaired?.notesRepair, { rewritten: [1], offBranch: [2, 3] });
  assert.equal(repaired?.intact, false, 'drift is left: the rebased commits');
  const left = repaired!.findings.map((f) => f.kind);
  assert.ok(left.includes('commit_off_branch') && !left.includes('note_missing'), left.join(', '));
  assert.deepEqual(await readCheckpointNote(repo, notesRef, c1!), JSON.parse(JSON.stringify(noteOfRow(chain[0]!))));
  for (const oid of [c2!, c3!]) assert.equal(await readCheckpointNote(repo, notesRef, oid), undefined);
  assert.deepEqual(await snapshot(r.worktree), before, 'the worktree is byte-identical');
  assert.equal(await git(repo, 'rev-parse', `refs/heads/${r.branch}`), tip, 'the branch is where the operator put it');
});

test('a run of many checkpoints: each note read once, and a repair reads again only the notes it rewrote', async () => {
  const { repo, r, chain } = await runOf(25);
  const notesRef = t.config.WORKER_NOTES_REF;
  const count = (gits: string[], command: RegExp) => gits.filter((g) => command.test(g)).length;
  const intact = await integrityCheck(r.run.id);
  assert.equal(intact.code, 0, intact.out);
  // Every note found in this process, for the verification and the audit: no git reads one.
  assert.deepEqual(
    intact.gits.filter((g) => /^(ls-tree|notes|cat-file --batch(-command)?)( |$)/.test(g)),
    [],
    intact.gits.join('; '),
  );

  await git(repo, 'update-ref', '-d', notesRef);
  await git(repo, 'notes', `--ref=${notesRef}`, 'add', '-m', '{"agentRunId":"someone else"}', chain[5]!.commit_oid!);
  const repaired = await integrityCheck(r.run.id, '--repair-notes');
  assert.equal(repaired.code, 0, repaired.out);
  const seqs = chain.map((row) => row.checkpoint_seq).join(', ');
  assert.match(
    repaired.out,
    new RegExp(`rewritten from Postgres for checkpoint\\(s\\) ${seqs}; no longer on the branch: none`),
  );
  assert.match(repaired.out, /intact: /);
  // git lists the notes and reads them once; the inspection is not run again (one status), and the
  // rewritten notes are read again in this process.
  const gits = repaired.gits.join('; ');
  assert.equal(count(repaired.gits, /^ls-tree /), 1, gits);
  assert.equal(count(repaired.gits, /^cat-file --batch$/), 1, gits);
  assert.equal(count(repaired.gits, /^(notes|cat-file --batch-command)( |$)/), 0, gits);
  assert.equal(count(repaired.gits, /(^| )status( |$)/), 1, gits);
  assert.equal(count(repaired.gits, /^fast-import /), 1, gits);
});
