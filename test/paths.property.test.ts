// Property: no path the model can send, however it mixes '..', '/', '.', look-alikes, NUL bytes and
// symlinks planted in the root, ever resolves to (or writes) anything outside the root.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  realpath,
  rm,
  symlink,
  writeFile as fsWriteFile,
} from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { ToolRefusedError } from '../core/errors.ts';
import type { ToolContext } from '../worker/tools/context.ts';
import { normalizeRelative, resolveInside } from '../worker/tools/paths.ts';
import { writeFile } from '../worker/tools/write-file.ts';

let base: string;
let root: string;
let outside: string;
let twin: string; // a sibling whose name starts with the root's name: "/x/work-evil" vs "/x/work"

function ctxFor(writePrefixes: string[] | null = null): ToolContext {
  return {
    root,
    writePrefixes,
    allowedCommands: null,
    commandTimeoutMs: 1000,
    beforeTouch: async () => {},
    onTouched: () => {},
  };
}

before(async () => {
  base = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-paths-prop-')));
  root = path.join(base, 'work');
  outside = path.join(base, 'outside');
  twin = path.join(base, 'work-evil');
  for (const dir of [root, outside, twin, path.join(root, 'sub'), path.join(root, '.git'), path.join(root, 'docs')]) {
    await mkdir(dir, { recursive: true });
  }
  await fsWriteFile(path.join(outside, 'secret.txt'), 'outside secret\n');
  await fsWriteFile(path.join(twin, 'secret.txt'), 'twin secret\n');
  await fsWriteFile(path.join(root, 'sub', 'f.txt'), 'inside\n');
  await fsWriteFile(path.join(root, '.git', 'config'), '[core]\n');
  await symlink(outside, path.join(root, 'out'));
  await symlink(path.join(outside, 'secret.txt'), path.join(root, 'outfile'));
  await symlink(path.join(outside, 'nope.txt'), path.join(root, 'dangling'));
  await symlink(path.join(outside, 'nodir', 'x'), path.join(root, 'danglingdir'));
  await symlink(twin, path.join(root, 'twinlink'));
  await symlink('..', path.join(root, 'up'));
  await symlink('../outside', path.join(root, 'relout'));
  await symlink('sub', path.join(root, 'inlink'));
  await symlink('.git', path.join(root, 'gitlink'));
  await symlink('loop', path.join(root, 'loop'));
  await symlink('../../outside', path.join(root, 'sub', 'deepout'));
});

after(async () => {
  await rm(base, { recursive: true, force: true });
});

const LOOKALIKES = [
  '\u2215',
  '\u2044',
  '\uFF0F',
  '\uFF0E',
  '\u2024',
  '\u2025',
  '\u2026',
  '\uFE52',
  '\uFF3C',
  '\uFE68',
  '\u2216',
];

const SYMLINKS = [
  'out',
  'outfile',
  'dangling',
  'danglingdir',
  'twinlink',
  'up',
  'relout',
  'inlink',
  'gitlink',
  'loop',
  'sub/deepout',
];
const token = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('/', '/', '/', '..', '.', 'a', 'sub', 'f.txt', 'docs') },
  { weight: 4, arbitrary: fc.constantFrom(...SYMLINKS, 'deepout', '.git', '.GIT', 'secret.txt') },
  { weight: 2, arbitrary: fc.constantFrom(...LOOKALIKES, '\0', '\\', '~', '\n', 'x'.repeat(256)) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 4 }) },
);
const tokens = fc.array(token, { minLength: 0, maxLength: 10 }).map((parts) => parts.join(''));
// Half the paths start by going through one of the planted symlinks, the likeliest way out.
const modelPath = fc.oneof(
  tokens,
  fc.tuple(fc.constantFrom(...SYMLINKS), fc.constantFrom('/', '/./', '//'), tokens).map((parts) => parts.join('')),
);

const isInside = (p: string) => p === root || p.startsWith(root + path.sep);

/** The realpath of the deepest existing ancestor of `abs` (abs itself when it exists). */
async function realOfDeepestExisting(abs: string): Promise<string> {
  let current = abs;
  for (;;) {
    try {
      await lstat(current);
      return await realpath(current);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw err;
      current = path.dirname(current);
    }
  }
}

async function snapshot(dir: string): Promise<string> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  const lines: string[] = [];
  for (const entry of entries) {
    const full = path.join(entry.parentPath, entry.name);
    lines.push(entry.isFile() ? `${full}:${await readFile(full, 'utf8')}` : full);
  }
  return lines.sort().join('\n');
}

test('a resolved path always lies inside the root, also after following symlinks', async () => {
  await fc.assert(
    fc.asyncProperty(modelPath, fc.boolean(), async (p, forWrite) => {
      let resolved;
      try {
        resolved = await resolveInside(ctxFor(), p, { forWrite });
      } catch (err) {
        assert.ok(err instanceof ToolRefusedError, `unexpected ${String(err)} for ${JSON.stringify(p)}`);
        return;
      }
      assert.ok(isInside(resolved.abs), `abs ${resolved.abs} for ${JSON.stringify(p)}`);
      assert.ok(!resolved.rel.split('/').includes('..'), "!resolved.rel.split('/').includes('..')");
      assert.ok(
        !resolved.rel.split('/').some((c) => c.toLowerCase() === '.git'),
        "!resolved.rel.split('/').some((c) => c.toLowerCase() === '.git')",
      );
      const real = await realOfDeepestExisting(resolved.abs);
      assert.ok(isInside(real), `${JSON.stringify(p)} resolved to ${real}`);
      assert.ok(!path.relative(root, real).split(path.sep).includes('.git'), `${JSON.stringify(p)} reaches .git`);
    }),
    { numRuns: 3000 },
  );
});

test('writing any generated path never changes anything outside the root or in .git', async () => {
  const before = [await snapshot(outside), await snapshot(twin), await snapshot(path.join(root, '.git'))];
  await fc.assert(
    fc.asyncProperty(modelPath, fc.boolean(), async (p, docWriter) => {
      try {
        await writeFile(ctxFor(docWriter ? ['docs/'] : null), { path: p, content: `written via ${JSON.stringify(p)}` });
      } catch (err) {
        assert.ok(err instanceof ToolRefusedError, `unexpected ${String(err)} for ${JSON.stringify(p)}`);
        return;
      }
      const after = [await snapshot(outside), await snapshot(twin), await snapshot(path.join(root, '.git'))];
      assert.deepEqual(after, before, `writing ${JSON.stringify(p)} changed something outside the root`);
    }),
    { numRuns: 600 },
  );
});

test('a doc-writer write lands under docs/ and nowhere else', async () => {
  await fc.assert(
    fc.asyncProperty(modelPath, async (p) => {
      let resolved;
      try {
        resolved = await resolveInside(ctxFor(['docs/']), p, { forWrite: true });
      } catch (err) {
        assert.ok(err instanceof ToolRefusedError, 'err instanceof ToolRefusedError');
        return;
      }
      assert.ok(resolved.rel.startsWith('docs/'), resolved.rel);
      const real = await realOfDeepestExisting(resolved.abs);
      assert.ok(real === path.join(root, 'docs') || real.startsWith(path.join(root, 'docs') + path.sep), real);
    }),
    { numRuns: 1500 },
  );
});

test('any path holding a look-alike of "/", "\\" or "." is refused', () => {
  fc.assert(
    fc.property(
      fc.string({ unit: 'grapheme', maxLength: 8 }),
      fc.constantFrom(...LOOKALIKES),
      fc.string({ unit: 'grapheme', maxLength: 8 }),
      (a, lookalike, b) => {
        assert.throws(() => normalizeRelative(`${a}${lookalike}${b}`), ToolRefusedError);
      },
    ),
    { numRuns: 2000 },
  );
});

test('arbitrary unicode is either refused as a ToolRefusedError or normalized without .. or a leading /', () => {
  fc.assert(
    fc.property(fc.string({ unit: 'binary', maxLength: 40 }), (p) => {
      let rel: string;
      try {
        rel = normalizeRelative(p);
      } catch (err) {
        assert.ok(err instanceof ToolRefusedError, 'err instanceof ToolRefusedError');
        return;
      }
      assert.ok(!rel.startsWith('/'), "!rel.startsWith('/')");
      assert.ok(!rel.split('/').includes('..'), "!rel.split('/').includes('..')");
      assert.ok(!rel.includes('\0') && !rel.includes('\\'), "!rel.includes('0') && !rel.includes('')");
      assert.equal(rel.normalize('NFKC').split('/').length, rel.split('/').length, 'NFKC adds no separator');
    }),
    { numRuns: 5000 },
  );
});
