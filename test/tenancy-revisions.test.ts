// With only `git diff` allowed, a run read another workspace's notes
// (`git diff HEAD refs/notes/echodo-checkpoints`) and another run's source (`git diff HEAD
// echodo/<their-branch>`). run_command now lets git arguments name only the run's own history.
// Real git: one repository, the victim's branch with a secret commit and a note, the attacker's
// worktree on its own branch, run_command called as the session calls it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ToolRefusedError } from '../core/errors.ts';
import { sandboxFor, type CommandSandbox } from '../worker/sandbox/index.ts';
import type { ToolContext } from '../worker/tools/context.ts';
import { DEFAULT_ALLOWED_COMMANDS } from '../worker/tools/command-line.ts';
import { revisionAnchors, vetGitRevisions } from '../worker/tools/git-revisions.ts';
import { runCommand } from '../worker/tools/run-command.ts';
import { git, makeRepo } from './support/git.ts';

const SECRET = 'victim-secret-source-7f3a';
let repo: string;
let wt: string;
let baseOid: string;
let victimOid: string;
let victimTree: string;
let danglingOid: string;
let sandbox: CommandSandbox;

before(async () => {
  sandbox = await sandboxFor({ mode: 'bwrap' });
  repo = await makeRepo({ 'README.md': '# shared\n', 'src/index.ts': 'export const answer = 42;\n' });
  baseOid = await git(repo, 'rev-parse', 'main');
  // The victim's run: its branch, a commit with its source, a checkpoint note on it.
  await git(repo, 'checkout', '-q', '-b', 'echodo/brief-1-aaaaaaaa');
  await writeFile(path.join(repo, 'src/secret.ts'), `export const s = '${SECRET}';\n`);
  await git(repo, 'add', 'src/secret.ts');
  await git(repo, 'commit', '-q', '-m', 'victim checkpoint');
  victimOid = await git(repo, 'rev-parse', 'HEAD');
  victimTree = await git(repo, 'rev-parse', 'HEAD^{tree}');
  await git(
    repo,
    'notes',
    '--ref=echodo-checkpoints',
    'add',
    '-m',
    `{"workspaceId":"demo","files":["${SECRET}"]}`,
    'HEAD',
  );
  await git(repo, 'checkout', '-q', 'main');
  // An object on no branch at all.
  danglingOid = await git(repo, 'commit-tree', '-m', 'dangling', '-p', baseOid, victimTree);
  // The attacker's run: its own worktree and branch from main, one checkpoint commit.
  wt = path.join(path.dirname(repo), `${path.basename(repo)}-wt`);
  await git(repo, 'worktree', 'add', '-q', '-b', 'echodo/brief-1-aaaaaaaa-0123abcd', wt, 'main');
  await writeFile(path.join(wt, 'src/mine.ts'), 'export const mine = 1;\n');
  await git(wt, 'add', 'src/mine.ts');
  await git(wt, 'commit', '-q', '-m', 'attacker checkpoint');
  await writeFile(path.join(wt, 'src/mine.ts'), 'export const mine = 2;\n');
});

after(async () => {
  await rm(wt, { recursive: true, force: true });
  await rm(repo, { recursive: true, force: true });
});

function ctx(): ToolContext {
  return {
    root: wt,
    writePrefixes: null,
    allowedCommands: [...DEFAULT_ALLOWED_COMMANDS],
    commandTimeoutMs: 10_000,
    sandbox,
    baseOid,
    beforeTouch: async () => {},
    onTouched: () => {},
  };
}

async function refused(command: string, names: string): Promise<void> {
  await assert.rejects(
    runCommand(ctx(), { command }),
    (err: unknown) =>
      err instanceof ToolRefusedError && err.message.includes(JSON.stringify(names)) && /own history/.test(err.message),
    `${command} is refused, naming ${names}`,
  );
}

test("git diff naming another run's branch, the notes ref, or a raw id of their commit is refused", async () => {
  await refused('git diff HEAD echodo/brief-1-aaaaaaaa', 'echodo/brief-1-aaaaaaaa');
  await refused('git diff HEAD refs/notes/echodo-checkpoints', 'refs/notes/echodo-checkpoints');
  await refused('git diff HEAD notes/echodo-checkpoints', 'notes/echodo-checkpoints');
  await refused(`git diff HEAD ${victimOid}`, victimOid);
  await refused(`git diff HEAD ${victimOid.slice(0, 10)}`, victimOid.slice(0, 10));
  await refused(`git diff ${danglingOid}`, danglingOid);
  await refused(`git diff --stat ${victimTree} HEAD^{tree}`, victimTree);
});

test("range, peel, parent and path forms of another run's revision are refused", async () => {
  for (const operand of [
    'HEAD..echodo/brief-1-aaaaaaaa',
    'HEAD...echodo/brief-1-aaaaaaaa',
    '^echodo/brief-1-aaaaaaaa',
    'echodo/brief-1-aaaaaaaa~0',
    'echodo/brief-1-aaaaaaaa^!',
    'echodo/brief-1-aaaaaaaa^{commit}',
    'heads/echodo/brief-1-aaaaaaaa',
    'refs/heads/echodo/brief-1-aaaaaaaa:src/secret.ts',
    `${victimOid}:src/secret.ts`,
  ]) {
    await refused(`git diff HEAD ${operand}`, operand);
  }
  await refused('git diff HEAD@{1}', 'HEAD@{1}');
  await refused('git diff main@{0}', 'main@{0}');
});

test("the run's own history, its base and paths pass; the output holds nothing of the victim", async () => {
  for (const command of [
    'git diff',
    'git diff HEAD',
    'git diff HEAD~1',
    'git diff --stat main',
    `git diff ${baseOid}`,
    'git diff main..HEAD',
    'git diff HEAD~1...HEAD -- src',
    'git diff HEAD:src/index.ts HEAD:src/mine.ts',
    'git diff -- src/mine.ts',
    'git diff src/mine.ts',
    'git status --short',
    'git diff HEAD -- echodo/brief-1-aaaaaaaa',
  ]) {
    const result = await runCommand(ctx(), { command });
    assert.ok(
      result.exitCode === 0 || command.includes('echodo/'),
      `${command}: exit ${result.exitCode}, ${result.stderr}`,
    );
    assert.ok(
      !result.stdout.includes(SECRET) && !result.stderr.includes(SECRET),
      `${command} shows nothing of the victim`,
    );
  }
  const diff = await runCommand(ctx(), { command: 'git diff --stat HEAD~1' });
  assert.match(diff.stdout, /src\/mine\.ts/, 'the run sees its own changes');
});

test('revision anchors: ranges split, suffixes cut, reflog and :/ refused', async () => {
  assert.deepEqual(revisionAnchors('a..b'), ['a', 'b']);
  assert.deepEqual(revisionAnchors('a...b'), ['a', 'b']);
  assert.deepEqual(revisionAnchors('..b'), ['b']);
  assert.deepEqual(revisionAnchors('^a~2'), ['a']);
  assert.deepEqual(revisionAnchors('a^@'), ['a']);
  assert.deepEqual(revisionAnchors('a^-2'), ['a']);
  assert.deepEqual(revisionAnchors('a:src/x.ts'), ['a']);
  assert.deepEqual(revisionAnchors(':0:src/x.ts'), []);
  assert.deepEqual(revisionAnchors('src/x.ts'), ['src/x.ts']);
  assert.ok(!Array.isArray(revisionAnchors('@{-1}')), '@{-1} refused');
  assert.ok(!Array.isArray(revisionAnchors(':/secret')), ':/ refused');
  assert.ok(!Array.isArray(revisionAnchors('HEAD..:/secret')), ':/ as one side of a range refused');
  // Vetting without a base still allows HEAD's history and refuses the rest.
  await vetGitRevisions({ root: wt, baseOid: null }, ['HEAD~1', 'main']);
  await assert.rejects(vetGitRevisions({ root: wt, baseOid: null }, ['echodo/brief-1-aaaaaaaa']), ToolRefusedError);
});
