// The agent's tools against real temp repositories, real files, real child processes and signals.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import {
  chmod,
  mkdtemp,
  open,
  readdir,
  readFile as fsReadFile,
  rm,
  stat,
  symlink,
  writeFile as fsWriteFile,
} from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { ToolRefusedError } from '../core/errors.ts';
import type { ToolContext } from '../worker/tools/context.ts';
import { grep } from '../worker/tools/grep.ts';
import { TOOLS, toolsForHarness, removeStaleTempFiles } from '../worker/tools/index.ts';
import { readFile, READ_CAP_BYTES } from '../worker/tools/read-file.ts';
import { runCommand, COMMAND_OUTPUT_CAP_BYTES } from '../worker/tools/run-command.ts';
import { writeFile, WRITE_MAX_BYTES } from '../worker/tools/write-file.ts';
import { probeSandbox } from '../worker/sandbox/index.ts';
import { makeRepo } from './support/git.ts';
import { spawnNode, waitFor } from './support/child.ts';

interface TestContext extends ToolContext {
  touched: string[];
  touches: number;
}

// The real sandbox (bwrap), as the worker runs commands by default.
const sandbox = await probeSandbox({ mode: 'bwrap' });

function makeCtx(root: string, overrides: Partial<ToolContext> = {}): TestContext {
  const ctx: TestContext = {
    root,
    writePrefixes: null,
    allowedCommands: ['git status', 'git diff', 'pnpm test'],
    commandTimeoutMs: 30_000,
    sandbox,
    touched: [],
    touches: 0,
    async beforeTouch() {
      ctx.touches++;
    },
    onTouched(paths) {
      ctx.touched.push(...paths);
    },
    ...overrides,
  };
  return ctx;
}

const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');

async function refused(promise: Promise<unknown>, pattern: RegExp): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    assert.ok(err instanceof ToolRefusedError, `expected ToolRefusedError, got ${String(err)}`);
    assert.match(err.message, pattern);
    return true;
  });
}

async function exists(p: string): Promise<boolean> {
  return stat(p).then(
    () => true,
    () => false,
  );
}

let repo: string;
let outside: string;
const scratch: string[] = [];

before(async () => {
  repo = await makeRepo({
    'README.md': '# demo\n',
    'src/greet.ts':
      'export function greet(name: string) {\n  return `hello ${name}`;\n}\n// -foo marks a dash pattern\n',
    'docs/guide.md': 'guide\n',
  });
  outside = await mkdtemp(path.join(os.tmpdir(), 'echodo-tools-outside-'));
  await fsWriteFile(path.join(outside, 'secret.txt'), 'TOP-SECRET-OUTSIDE\n');
  await symlink(outside, path.join(repo, 'out-dir'));
  await symlink(path.join(outside, 'secret.txt'), path.join(repo, 'out-file'));
  await symlink(path.join(outside, 'not-there-yet.txt'), path.join(repo, 'dangling'));
  scratch.push(repo, outside);
});

after(async () => {
  for (const dir of scratch) await rm(dir, { recursive: true, force: true });
});

describe('path confinement (read_file and write_file)', () => {
  const cases: Array<[string, string, RegExp]> = [
    ['a .. escape', '../x', /path "\.\.\/x" leaves the worktree/],
    ['a deeper .. escape', 'src/../../x', /leaves the worktree/],
    ['an absolute path', '/etc/passwd', /is absolute/],
    ['a NUL byte', 'src/a\0.ts', /NUL byte/],
    ['an empty path', '', /is empty/],
    ['a backslash', 'src\\greet.ts', /backslash/],
    ['DIVISION SLASH look-alike', '\u2215etc\u2215passwd', /look-alike/],
    ['FULLWIDTH FULL STOP look-alike', '\uFF0E\uFF0E/x', /look-alike/],
    ['ONE DOT LEADER look-alike', '\u2024\u2024/x', /look-alike/],
    ['FULLWIDTH SOLIDUS look-alike', 'src\uFF0Fgreet.ts', /look-alike/],
    ['a component over 255 bytes', `${'a'.repeat(256)}.txt`, /component longer than 255 bytes/],
    ['a path over 4096 bytes', 'abcdefg/'.repeat(520), /longer than 4096 bytes/],
    ['.git internals', '.git/config', /\.git/],
    ['.git in another case', '.GIT/HEAD', /\.git/],
    ['a nested .git', 'sub/.git/hooks/pre-commit', /\.git/],
    ['a symlinked folder outside', 'out-dir/secret.txt', /outside the worktree through a symlink/],
    ['a symlinked file outside', 'out-file', /outside the worktree through a symlink/],
  ];
  for (const [name, p, pattern] of cases) {
    test(`refuses ${name}`, async () => {
      const ctx = makeCtx(repo);
      await refused(readFile(ctx, { path: p }), pattern);
      await refused(writeFile(ctx, { path: p, content: 'x' }), pattern);
      assert.equal(ctx.touches, 0, 'a refused write never reaches beforeTouch');
      assert.deepEqual(ctx.touched, []);
    });
  }

  test('refuses writing through a dangling symlink that points outside, creating nothing there', async () => {
    const ctx = makeCtx(repo);
    await refused(writeFile(ctx, { path: 'dangling', content: 'pwned' }), /symlink/);
    assert.equal(await exists(path.join(outside, 'not-there-yet.txt')), false);
    assert.equal(await fsReadFile(path.join(outside, 'secret.txt'), 'utf8'), 'TOP-SECRET-OUTSIDE\n');
  });

  test('a doc-writer may write under docs/ and plans/ only', async () => {
    const ctx = makeCtx(repo, { writePrefixes: ['docs/', 'plans/'], allowedCommands: null });
    await refused(
      writeFile(ctx, { path: 'src/evil.ts', content: 'x' }),
      /outside the writable folders \(docs\/, plans\/\)/,
    );
    await refused(writeFile(ctx, { path: 'docs/../src/evil.ts', content: 'x' }), /outside the writable folders/);
    await refused(writeFile(ctx, { path: 'docsx/a.md', content: 'x' }), /outside the writable folders/);
    assert.equal(await exists(path.join(repo, 'src/evil.ts')), false);
    const result = await writeFile(ctx, { path: 'plans/next.md', content: '# next\n' });
    assert.equal(result.path, 'plans/next.md');
    assert.deepEqual(ctx.touched, ['plans/next.md']);
    // reading is not limited to the writable folders
    assert.equal((await readFile(ctx, { path: 'src/greet.ts' })).path, 'src/greet.ts');
  });

  test('a doc-writer cannot redirect docs/ elsewhere in the repo through a symlink', async () => {
    const root = await makeRepo({ 'src/a.ts': 'a\n' });
    scratch.push(root);
    await symlink('src', path.join(root, 'docs'));
    const ctx = makeCtx(root, { writePrefixes: ['docs/'] });
    await refused(writeFile(ctx, { path: 'docs/a.ts', content: 'changed' }), /outside the writable folders/);
    assert.equal(await fsReadFile(path.join(root, 'src/a.ts'), 'utf8'), 'a\n');
  });

  test('names that merely start with .git are ordinary files', async () => {
    const root = await makeRepo({ '.gitignore': 'node_modules\n', '.github/workflows/ci.yml': 'on: push\n' });
    scratch.push(root);
    const ctx = makeCtx(root);
    assert.equal((await readFile(ctx, { path: '.gitignore' })).content, 'node_modules\n');
    assert.equal(
      (await writeFile(ctx, { path: '.github/workflows/ci.yml', content: 'on: pull_request\n' })).path,
      '.github/workflows/ci.yml',
    );
  });

  test('a symlink inside the root that stays inside is followed', async () => {
    const root = await makeRepo({ 'src/a.ts': 'inside\n' });
    scratch.push(root);
    await symlink('src', path.join(root, 'alias'));
    const result = await readFile(makeCtx(root), { path: 'alias/a.ts' });
    assert.equal(result.content, 'inside\n');
  });
});

describe('read_file', () => {
  test('reads a text file with its size and sha256', async () => {
    const result = await readFile(makeCtx(repo), { path: './src//greet.ts' });
    const raw = await fsReadFile(path.join(repo, 'src/greet.ts'));
    assert.deepEqual(result, {
      path: 'src/greet.ts',
      bytes: raw.length,
      sha256: sha256(raw),
      content: raw.toString('utf8'),
    });
  });

  test('a missing file and a folder are refused with a clear message', async () => {
    await refused(readFile(makeCtx(repo), { path: 'src/nope.ts' }), /file "src\/nope.ts" does not exist/);
    await refused(readFile(makeCtx(repo), { path: 'src' }), /is a folder/);
  });

  test('a 50 MB file is capped, hashed whole, and never held in memory', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-tools-big-'));
    scratch.push(dir);
    const file = path.join(dir, 'big.log');
    const hash = createHash('sha256');
    const out = createWriteStream(file);
    const line = Buffer.from(`${'0123456789abcdef'.repeat(6)} log line\n`);
    let written = 0;
    while (written < 50 * 1024 * 1024) {
      hash.update(line);
      written += line.length;
      if (!out.write(line)) await new Promise<void>((resolve) => out.once('drain', () => resolve()));
    }
    await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));

    const baseline = process.memoryUsage().arrayBuffers;
    let peak = baseline;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().arrayBuffers)), 1);
    const result = await readFile(makeCtx(dir), { path: 'big.log' });
    clearInterval(sampler);
    peak = Math.max(peak, process.memoryUsage().arrayBuffers);

    assert.equal(result.bytes, written);
    assert.equal(result.sha256, hash.digest('hex'));
    assert.equal(result.truncated, true);
    assert.equal(Buffer.byteLength(result.content!), READ_CAP_BYTES);
    assert.equal(result.note, `file is ${written} bytes; showing the first ${READ_CAP_BYTES}`);
    assert.ok(peak - baseline < 16 * 1024 * 1024, `buffer memory grew by ${peak - baseline} bytes while reading`);
  });

  test('a binary file is described, not shown', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-tools-bin-'));
    scratch.push(dir);
    const data = Buffer.concat([Buffer.from('PNG'), Buffer.alloc(10, 0), Buffer.from('rest')]);
    await fsWriteFile(path.join(dir, 'image.png'), data);
    const result = await readFile(makeCtx(dir), { path: 'image.png' });
    assert.deepEqual(result, {
      path: 'image.png',
      bytes: data.length,
      sha256: sha256(data),
      binary: true,
      note: `binary file, ${data.length} bytes, sha256 ${sha256(data)}`,
    });
  });

  test('a large sparse (all-zero) file is reported as binary with the hash of all of it', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-tools-sparse-'));
    scratch.push(dir);
    const handle = await open(path.join(dir, 'zeros.bin'), 'w');
    await handle.truncate(20 * 1024 * 1024);
    await handle.close();
    const result = await readFile(makeCtx(dir), { path: 'zeros.bin' });
    assert.equal(result.binary, true);
    assert.equal(result.content, undefined);
    assert.equal(result.sha256, sha256(Buffer.alloc(20 * 1024 * 1024)));
  });

  test('invalid UTF-8 is decoded with replacement characters and a note', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-tools-utf-'));
    scratch.push(dir);
    await fsWriteFile(path.join(dir, 'latin1.txt'), Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a])); // "café" in Latin-1
    const result = await readFile(makeCtx(dir), { path: 'latin1.txt' });
    assert.equal(result.content, 'caf\uFFFD\n');
    assert.match(result.note!, /not valid UTF-8/);
  });

  test('a multi-byte character cut by the cap is not reported as invalid UTF-8', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-tools-cut-'));
    scratch.push(dir);
    await fsWriteFile(path.join(dir, 'euro.txt'), 'a' + '€'.repeat(READ_CAP_BYTES)); // the cap falls inside a '€'
    const result = await readFile(makeCtx(dir), { path: 'euro.txt' });
    assert.equal(result.truncated, true);
    assert.doesNotMatch(result.note!, /UTF-8/);
    assert.ok(!result.content!.includes('\uFFFD'), "!result.content!.includes('uFFFD')");
  });
});

describe('write_file', () => {
  test('creates parent folders, reports the path, calls beforeTouch first and leaves no temp file', async () => {
    const root = await makeRepo({});
    scratch.push(root);
    const ctx = makeCtx(root);
    const result = await writeFile(ctx, { path: 'src/deep/new.ts', content: 'export const x = 1;\n' });
    assert.deepEqual(result, { path: 'src/deep/new.ts', bytes: 20, sha256: sha256('export const x = 1;\n') });
    assert.equal(await fsReadFile(path.join(root, 'src/deep/new.ts'), 'utf8'), 'export const x = 1;\n');
    assert.equal(ctx.touches, 1);
    assert.deepEqual(ctx.touched, ['src/deep/new.ts']);
    assert.deepEqual(await readdir(path.join(root, 'src/deep')), ['new.ts']);
  });

  test('overwriting keeps the file mode and leaves no temp file', async () => {
    const root = await makeRepo({ 'run.sh': '#!/bin/sh\necho old\n' });
    scratch.push(root);
    await chmod(path.join(root, 'run.sh'), 0o755);
    for (let i = 0; i < 5; i++) await writeFile(makeCtx(root), { path: 'run.sh', content: `#!/bin/sh\necho ${i}\n` });
    assert.equal((await stat(path.join(root, 'run.sh'))).mode & 0o777, 0o755);
    assert.equal(await fsReadFile(path.join(root, 'run.sh'), 'utf8'), '#!/bin/sh\necho 4\n');
    assert.deepEqual((await readdir(root)).sort(), ['.git', 'run.sh']);
  });

  test('writing over a folder, or below a file, is refused', async () => {
    const root = await makeRepo({ 'src/a.ts': 'a\n' });
    scratch.push(root);
    await refused(writeFile(makeCtx(root), { path: 'src', content: 'x' }), /path "src" is a folder/);
    await refused(
      writeFile(makeCtx(root), { path: 'src/a.ts/b.ts', content: 'x' }),
      /needs a folder where a file already exists/,
    );
    await refused(writeFile(makeCtx(root), { path: '.', content: 'x' }), /is the root folder/);
    assert.deepEqual(await readdir(path.join(root, 'src')), ['a.ts']);
  });

  test('a lease check that throws stops the write before anything changes', async () => {
    const root = await makeRepo({ 'a.txt': 'old\n' });
    scratch.push(root);
    const ctx = makeCtx(root, {
      beforeTouch: async () => {
        throw new Error('lease lost');
      },
    });
    await assert.rejects(writeFile(ctx, { path: 'new/a.txt', content: 'new' }), /lease lost/);
    assert.equal(await exists(path.join(root, 'new')), false);
  });

  test('content over 10 MiB is refused without writing', async () => {
    const root = await makeRepo({});
    scratch.push(root);
    const ctx = makeCtx(root);
    await refused(
      writeFile(ctx, { path: 'big.txt', content: 'a'.repeat(WRITE_MAX_BYTES + 1) }),
      /larger than the 10485760-byte \(10 MiB\) write limit/,
    );
    // fewer UTF-16 units than the limit, but more UTF-8 bytes
    await refused(writeFile(ctx, { path: 'big.txt', content: '€'.repeat(4 * 1024 * 1024) }), /write limit/);
    const hundred = 'b'.repeat(100 * 1024 * 1024);
    const before = process.memoryUsage().arrayBuffers;
    await refused(writeFile(ctx, { path: 'big.txt', content: hundred }), /write limit/);
    assert.ok(
      process.memoryUsage().arrayBuffers - before < 8 * 1024 * 1024,
      'the refused 100 MB write allocated a buffer',
    );
    assert.equal(await exists(path.join(root, 'big.txt')), false);
    assert.equal(ctx.touches, 0);
  });

  test('an I/O error mid-write (injected ENOSPC) keeps the old file and removes the temp file', async () => {
    const root = await makeRepo({ 'a.txt': 'old\n' });
    scratch.push(root);
    process.env.ECHODO_FAULT_ERRNO = 'write-file:ENOSPC';
    try {
      await assert.rejects(writeFile(makeCtx(root), { path: 'a.txt', content: 'new\n' }), { code: 'ENOSPC' });
    } finally {
      delete process.env.ECHODO_FAULT_ERRNO;
    }
    assert.equal(await fsReadFile(path.join(root, 'a.txt'), 'utf8'), 'old\n');
    assert.deepEqual((await readdir(root)).sort(), ['.git', 'a.txt']);
  });

  test('a crash between temp file and rename leaves the old file whole; the sweep removes the temp', async () => {
    const root = await makeRepo({ 'a.txt': 'old\n' });
    const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-tools-fault-'));
    scratch.push(root, dir);
    const script = path.join(dir, 'write.mts');
    await fsWriteFile(
      script,
      `import { writeFile } from ${JSON.stringify(pathToFileURL(path.resolve('worker/tools/write-file.ts')).href)};\n` +
        `const ctx = { root: process.argv[2], writePrefixes: null, allowedCommands: null, commandTimeoutMs: 1000, beforeTouch: async () => {}, onTouched() {} };\n` +
        `await writeFile(ctx, { path: 'a.txt', content: 'new\\n' });\n` +
        `console.log('renamed');\n`,
    );
    const child = spawnNode(script, [root], { env: { ECHODO_FAULT: 'mid-write-file', TMPDIR: dir } });
    const exit = await child.exited;
    assert.equal(exit.signal, 'SIGKILL', child.output());
    assert.match(child.output(), /fault point mid-write-file reached/);
    assert.doesNotMatch(child.output(), /renamed/);
    assert.equal(await fsReadFile(path.join(root, 'a.txt'), 'utf8'), 'old\n');
    const leftovers = (await readdir(root)).filter((n) => n.includes('.echodo-tmp-'));
    assert.equal(leftovers.length, 1);
    assert.equal(
      await fsReadFile(path.join(root, leftovers[0]!), 'utf8'),
      'new\n',
      'the temp file was fully written and synced',
    );
    assert.deepEqual(await removeStaleTempFiles(root), [leftovers[0]]);
    assert.deepEqual((await readdir(root)).sort(), ['.git', 'a.txt']);
  });
});

describe('grep', () => {
  test('finds matches with path, line and text', async () => {
    const result = await grep(makeCtx(repo), { pattern: 'hello \\$\\{name\\}' });
    assert.deepEqual(result, {
      matches: [{ path: 'src/greet.ts', line: 2, text: '  return `hello ${name}`;' }],
      truncated: false,
    });
  });

  test('no match is an empty result, not an error', async () => {
    assert.deepEqual(await grep(makeCtx(repo), { pattern: 'no-such-text-anywhere-42' }), {
      matches: [],
      truncated: false,
    });
  });

  test('a pattern starting with "-" is a pattern, not an option', async () => {
    const result = await grep(makeCtx(repo), { pattern: '-foo' });
    assert.deepEqual(
      result.matches.map((m) => [m.path, m.line]),
      [['src/greet.ts', 4]],
    );
    const files = await grep(makeCtx(repo), { pattern: '--files' });
    assert.deepEqual(files.matches, []);
  });

  test('the search path is confined, and symlinks and .git are not searched', async () => {
    await refused(grep(makeCtx(repo), { pattern: 'x', path: '../' }), /leaves the worktree/);
    await refused(grep(makeCtx(repo), { pattern: 'x', path: 'out-dir' }), /outside the worktree/);
    await refused(grep(makeCtx(repo), { pattern: 'x', path: 'nope' }), /does not exist/);
    assert.deepEqual((await grep(makeCtx(repo), { pattern: 'TOP-SECRET-OUTSIDE' })).matches, []);
    assert.deepEqual((await grep(makeCtx(repo), { pattern: 'repositoryformatversion' })).matches, []);
    const scoped = await grep(makeCtx(repo), { pattern: 'guide', path: 'docs' });
    assert.deepEqual(scoped.matches, [{ path: 'docs/guide.md', line: 1, text: 'guide' }]);
  });

  test('an invalid regular expression is refused with the reason', async () => {
    await refused(grep(makeCtx(repo), { pattern: '(unclosed' }), /invalid pattern "\(unclosed".*unclosed group/s);
  });

  test('results are capped with a truncation note', async () => {
    const root = await makeRepo({});
    scratch.push(root);
    for (let f = 0; f < 6; f++) {
      await fsWriteFile(path.join(root, `f${f}.txt`), Array.from({ length: 60 }, (_, i) => `match ${i}`).join('\n'));
    }
    const result = await grep(makeCtx(root), { pattern: 'match' });
    assert.equal(result.matches.length, 200);
    assert.equal(result.truncated, true);
    assert.match(result.note!, /showing the first 200 matches/);
  });

  test('falls back to git grep (untracked files included) when the rg binary is missing', async () => {
    const root = await makeRepo({ 'a.ts': 'const alpha = 1;\n' });
    scratch.push(root);
    await fsWriteFile(path.join(root, 'b.ts'), 'const alphabet = 2;\n-dash line\n');
    const result = await grep(makeCtx(root), { pattern: 'alpha' }, { rgPath: path.join(root, 'no-rg-here') });
    assert.deepEqual(result.matches, [
      { path: 'a.ts', line: 1, text: 'const alpha = 1;' },
      { path: 'b.ts', line: 1, text: 'const alphabet = 2;' },
    ]);
    const dash = await grep(makeCtx(root), { pattern: '-dash' }, { rgPath: '/nonexistent/rg' });
    assert.deepEqual(dash.matches, [{ path: 'b.ts', line: 2, text: '-dash line' }]);
    const none = await grep(makeCtx(root), { pattern: 'zzz-nothing' }, { rgPath: '/nonexistent/rg' });
    assert.deepEqual(none, { matches: [], truncated: false });
  });
});

describe('run_command', () => {
  const escapes: Array<[string, RegExp]> = [
    ['git status; touch pwned', /metacharacter ";"/],
    ['git status && touch pwned', /metacharacter "&"/],
    ['git diff `touch pwned`', /metacharacter "`"/],
    ['git diff $(touch pwned)', /metacharacter "\$"/],
    ['git status > pwned', /metacharacter ">"/],
    ['git status | tee pwned', /metacharacter "\|"/],
    ['git status\ntouch pwned', /metacharacter "\\n"/],
    ['git -c core.pager=touch status', /git global option "-c"/],
    ['git -C .. status', /git global option "-C"/],
    ['git --git-dir=x status', /git global option "--git-dir=x"/],
    ['git diff --output=pwned', /--output/],
    ['git diff --ext-diff', /--ext-diff/],
    ['git diff --upload-pack=touch', /--upload-pack/],
    ['git diff --no-index a b', /--no-index/],
    ['git diff -- /etc/passwd', /absolute path/],
    ['git diff ../other', /leaves the worktree/],
    ['FOO=1 git status', /environment assignment/],
    ['touch pwned', /not on the allowlist/],
    ['git push', /not on the allowlist/],
    ['pnpm test --prefix=elsewhere', /--prefix/],
    ['', /empty/],
  ];
  for (const [command, pattern] of escapes) {
    test(`refuses ${JSON.stringify(command)}`, async () => {
      const ctx = makeCtx(repo);
      await refused(runCommand(ctx, { command }), pattern);
      assert.equal(ctx.touches, 0);
      assert.equal(await exists(path.join(repo, 'pwned')), false);
    });
  }

  test('git diff --output to an absolute path writes nothing there', async () => {
    const target = path.join(outside, 'diff-output.txt');
    await refused(runCommand(makeCtx(repo), { command: `git diff --output=${target}` }), /--output/);
    assert.equal(await exists(target), false);
  });

  test('a harness without an allowlist has no run_command', async () => {
    await refused(
      runCommand(makeCtx(repo, { allowedCommands: null }), { command: 'git status' }),
      /not available in this harness/,
    );
    assert.equal('run_command' in toolsForHarness(false), false);
    assert.deepEqual(Object.keys(toolsForHarness(true)).sort(), ['grep', 'read_file', 'run_command', 'write_file']);
    assert.deepEqual(
      TOOLS.map((t) => t.name),
      ['read_file', 'write_file', 'grep', 'run_command'],
    );
    assert.ok(
      toolsForHarness(false).read_file.inputSchema.safeParse({ path: 'a' }).success,
      "toolsForHarness(false).read_file.inputSchema.safeParse({ path: 'a' }).success",
    );
  });

  test('runs an allowlisted git command; a non-zero exit is a normal result', async () => {
    const root = await makeRepo({ 'a.txt': 'one\n' });
    scratch.push(root);
    await fsWriteFile(path.join(root, 'a.txt'), 'two\n');
    const ctx = makeCtx(root);
    const { note, ...status } = await runCommand(ctx, { command: 'git status --short' });
    assert.deepEqual(status, {
      command: 'git status --short',
      exitCode: 0,
      stdout: ' M a.txt\n',
      stderr: '',
      mayHaveChangedFiles: true,
    });
    assert.match(note!, /ran in the bwrap sandbox/);
    const diff = await runCommand(ctx, { command: "git diff --exit-code --stat -- 'a.txt'" });
    assert.equal(diff.exitCode, 1);
    assert.match(diff.stdout, /a\.txt \| 2 \+-/);
    assert.equal(ctx.touches, 2);
    assert.deepEqual(ctx.touched, [], 'commands report no paths; the lead checks with git');
  });

  for (const mode of ['bwrap', 'off'] as const)
    test(`the environment is built from scratch (sandbox ${mode}): no keys, tokens or database URLs`, async () => {
      const planted = {
        OPENAI_API_KEY: 'sk-test-do-not-leak',
        GITHUB_TOKEN: 'ghp-test-do-not-leak',
        DATABASE_URL: 'postgres://secret@db/x',
        REDIS_URL: 'redis://secret@cache',
        NODE_OPTIONS: '--require ./evil.js',
      };
      const saved = Object.fromEntries(Object.keys(planted).map((k) => [k, process.env[k]]));
      Object.assign(process.env, planted);
      try {
        const ctx = makeCtx(repo, { allowedCommands: ['env'], sandbox: mode === 'off' ? { mode: 'off' } : sandbox });
        const result = await runCommand(ctx, { command: 'env' });
        assert.equal(result.exitCode, 0);
        for (const value of Object.values(planted)) assert.ok(!result.stdout.includes(value), `leaked ${value}`);
        const names = result.stdout
          .trim()
          .split('\n')
          .map((line) => line.split('=')[0])
          .sort();
        const home = /^HOME=(.*)$/m.exec(result.stdout)![1]!;
        assert.notEqual(home, os.homedir());
        if (mode === 'bwrap') {
          // bwrap --clearenv: exactly these four (PWD is the shell-less exec's own, set by bwrap --chdir).
          assert.deepEqual(
            names.filter((n) => n !== 'PWD'),
            ['CI', 'HOME', 'LANG', 'PATH'],
          );
          assert.equal(home, '/home/sandbox', 'a private tmpfs HOME');
        } else {
          assert.deepEqual(names, ['GIT_CONFIG_NOSYSTEM', 'GIT_TERMINAL_PROMPT', 'HOME', 'LANG', 'PATH', 'TERM']);
          assert.equal(await exists(home), false, 'the per-command HOME is removed afterwards');
        }
      } finally {
        for (const [k, v] of Object.entries(saved)) {
          if (v === undefined) delete process.env[k];
          else process.env[k] = v;
        }
      }
    });

  test('a timeout kills the command and its children with SIGKILL', async () => {
    const root = await makeRepo({});
    scratch.push(root);
    // The child's pid inside the sandbox means nothing outside: it proves it is gone by never writing.
    await fsWriteFile(
      path.join(root, 'hang.js'),
      "const { spawn } = require('node:child_process');\n" +
        "const fs = require('node:fs');\n" +
        "spawn('sh', ['-c', 'sleep 2.5; echo late > late.txt'], { stdio: 'inherit' });\n" +
        "fs.writeFileSync('child.pid', '');\n" +
        "process.on('SIGTERM', () => {});\n" +
        'setInterval(() => {}, 1000);\n',
    );
    const ctx = makeCtx(root, { allowedCommands: ['node hang.js'], commandTimeoutMs: 1500 });
    const result = await runCommand(ctx, { command: 'node hang.js' });
    assert.equal(result.timedOut, true);
    assert.equal(result.signal, 'SIGKILL');
    assert.equal(result.exitCode, null);
    assert.match(result.note!, /timed out after 1500 ms and was killed \(SIGKILL\)/);
    assert.ok(await exists(path.join(root, 'child.pid')), 'the command had started its child');
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal(await exists(path.join(root, 'late.txt')), false, "the command's child was killed with it");
  });

  test('a cancelled run stops its command', async () => {
    const root = await makeRepo({});
    scratch.push(root);
    await fsWriteFile(
      path.join(root, 'wait.js'),
      "require('node:fs').writeFileSync('started', '');\nsetInterval(() => {}, 1000);\n",
    );
    const abort = new AbortController();
    const ctx = makeCtx(root, { allowedCommands: ['node wait.js'], signal: abort.signal });
    const running = runCommand(ctx, { command: 'node wait.js' });
    await waitFor(() => exists(path.join(root, 'started')), { what: 'the command to start' });
    abort.abort();
    const result = await running;
    assert.equal(result.signal, 'SIGKILL');
    assert.match(result.note!, /cancelled/);
  });

  test('output is capped to its last 64 KiB', async () => {
    const root = await makeRepo({});
    scratch.push(root);
    await fsWriteFile(
      path.join(root, 'spew.js'),
      "for (let i = 0; i < 20000; i++) process.stdout.write(`line ${i} ${'x'.repeat(40)}\\n`);\n" +
        "process.stdout.write('THE-END\\n');\nprocess.stderr.write('short\\n');\n",
    );
    const result = await runCommand(makeCtx(root, { allowedCommands: ['node spew.js'] }), { command: 'node spew.js' });
    assert.equal(result.exitCode, 0);
    assert.equal(result.truncated, true);
    assert.ok(
      Buffer.byteLength(result.stdout) <= COMMAND_OUTPUT_CAP_BYTES,
      'Buffer.byteLength(result.stdout) <= COMMAND_OUTPUT_CAP_BYTES',
    );
    assert.ok(
      Buffer.byteLength(result.stdout) > COMMAND_OUTPUT_CAP_BYTES - 100,
      'Buffer.byteLength(result.stdout) > COMMAND_OUTPUT_CAP_BYTES - 100',
    );
    assert.ok(
      result.stdout.endsWith('line 19999 ' + 'x'.repeat(40) + '\nTHE-END\n'),
      "result.stdout.endsWith('line 19999 ' + 'x'.repeat(40) + 'nTHE-ENDn')",
    );
    assert.equal(result.stderr, 'short\n');
    assert.match(result.note!, /stdout was longer than 65536 bytes/);
  });

  test('a program missing from PATH is refused by name', async () => {
    const ctx = makeCtx(repo, { allowedCommands: ['no-such-program-echodo'] });
    await refused(
      runCommand(ctx, { command: 'no-such-program-echodo' }),
      /program "no-such-program-echodo" was not found on PATH/,
    );
  });

  test('the during-command fault point fires after the child is spawned', async () => {
    const root = await makeRepo({});
    const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-tools-fault-'));
    scratch.push(root, dir);
    const script = path.join(dir, 'run.mts');
    await fsWriteFile(
      script,
      `import { runCommand } from ${JSON.stringify(pathToFileURL(path.resolve('worker/tools/run-command.ts')).href)};\n` +
        `import { probeSandbox } from ${JSON.stringify(pathToFileURL(path.resolve('worker/sandbox/index.ts')).href)};\n` +
        `const sandbox = await probeSandbox({ mode: 'bwrap' });\n` +
        `const ctx = { root: process.argv[2], writePrefixes: null, allowedCommands: ['git status'], commandTimeoutMs: 5000, sandbox, beforeTouch: async () => {}, onTouched() {} };\n` +
        `console.log(JSON.stringify(await runCommand(ctx, { command: 'git status' })));\n`,
    );
    // TMPDIR: the killed child cannot remove its per-command HOME; let it land in our scratch folder.
    const child = spawnNode(script, [root], { env: { ECHODO_FAULT: 'during-command', TMPDIR: dir } });
    const exit = await child.exited;
    assert.equal(exit.signal, 'SIGKILL', child.output());
    assert.match(child.output(), /fault point during-command reached/);
    assert.doesNotMatch(child.output(), /exitCode/);
  });
});
