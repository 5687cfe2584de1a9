// The doc-writer works in the repo root, where ECHODO_HOME (`.echodo/`,
// ignored by git) holds the embedded database's credentials. It reads only what git tracks and its
// own write prefixes; read_file and grep of anything else are refused or find nothing.
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, test } from 'node:test';
import { ToolRefusedError } from '../core/errors.ts';
import type { ToolContext } from '../worker/tools/context.ts';
import { grep } from '../worker/tools/grep.ts';
import { readFile } from '../worker/tools/read-file.ts';
import { makeRepo } from './support/git.ts';

const SECRET = 'postgres://postgres:doc-writer-must-not-see-this@127.0.0.1:5432/postgres';

function docWriterCtx(root: string): ToolContext {
  return {
    root,
    writePrefixes: ['docs/', 'plans/'],
    readScope: 'tracked',
    allowedCommands: null,
    commandTimeoutMs: 1000,
    async beforeTouch() {},
    onTouched() {},
  };
}

async function repoWithEchodoHome(): Promise<string> {
  const repo = await makeRepo({
    '.gitignore': '.echodo/\nbuild/\n',
    'README.md': '# r\nsee postgres docs\n',
    'src/a.ts': 'export const a = 1;\n',
  });
  await mkdir(path.join(repo, '.echodo', 'pg'), { recursive: true });
  await writeFile(path.join(repo, '.echodo', 'pg', 'server.json'), JSON.stringify({ url: SECRET }));
  await mkdir(path.join(repo, 'build'), { recursive: true });
  await writeFile(path.join(repo, 'build', 'out.txt'), `built with ${SECRET}\n`);
  await writeFile(path.join(repo, 'notes.txt'), `untracked, not ignored: ${SECRET}\n`);
  await mkdir(path.join(repo, 'docs'), { recursive: true });
  await writeFile(path.join(repo, 'docs', 'draft.md'), '# draft, untracked but under docs/\n');
  return repo;
}

describe('the doc-writer reads only tracked files and its write prefixes', () => {
  test('read_file of ECHODO_HOME, ignored and untracked files is refused; tracked files and docs/ are read', async () => {
    const ctx = docWriterCtx(await repoWithEchodoHome());
    for (const p of ['.echodo/pg/server.json', '.echodo', 'build/out.txt', 'notes.txt']) {
      await assert.rejects(readFile(ctx, { path: p }), (err: Error) => {
        assert.ok(err instanceof ToolRefusedError, `${p}: a refusal, got ${err.message}`);
        assert.match(err.message, /not a file git tracks/, `${p}: the reason names the rule`);
        return true;
      });
    }
    assert.match((await readFile(ctx, { path: 'README.md' })).content ?? '', /# r/, 'a tracked file is read');
    assert.match((await readFile(ctx, { path: 'docs/draft.md' })).content ?? '', /draft/, 'a file under docs/ is read');
  });

  test('grep finds nothing outside tracked files, and is refused on an ignored folder', async () => {
    const ctx = docWriterCtx(await repoWithEchodoHome());
    const all = await grep(ctx, { pattern: 'postgres' });
    assert.deepEqual(
      all.matches.map((m) => m.path),
      ['README.md'],
      'only the tracked README matches',
    );
    assert.ok(!JSON.stringify(all).includes('doc-writer-must-not-see-this'), 'the secret is in no result');
    await assert.rejects(grep(ctx, { pattern: 'postgres', path: '.echodo' }), ToolRefusedError);
  });

  test('the code harness (readScope all) still reads untracked files of its worktree', async () => {
    const ctx = { ...docWriterCtx(await repoWithEchodoHome()), readScope: 'all' as const, writePrefixes: null };
    assert.match((await readFile(ctx, { path: 'notes.txt' })).content ?? '', /untracked/, 'an untracked file is read');
  });
});
