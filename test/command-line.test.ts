// splitCommand and checkAllowed: examples of each rule, and properties over generated input.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ToolRefusedError } from '../core/errors.ts';
import {
  checkAllowed,
  DEFAULT_ALLOWED_COMMANDS,
  hasMetacharacter,
  MAX_COMMAND_CHARS,
  parseAllowedCommands,
  splitCommand,
} from '../worker/tools/command-line.ts';

const METACHARACTERS = [';', '&', '|', '`', '$', '(', ')', '<', '>', '\n', '\r', '\\'];
const ALLOWED = [...DEFAULT_ALLOWED_COMMANDS];

function refusedWith(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ToolRefusedError, `expected ToolRefusedError, got ${String(err)}`);
    assert.match(err.message, pattern);
    return true;
  });
}

const check = (command: string) => checkAllowed(splitCommand(command), ALLOWED);

describe('splitCommand', () => {
  test('splits on whitespace; quotes group words', () => {
    assert.deepEqual(splitCommand('git  diff\t--stat'), ['git', 'diff', '--stat']);
    assert.deepEqual(splitCommand(`pnpm test -- --test-name-pattern="greets a user" 'src/a b.ts'`), [
      'pnpm',
      'test',
      '--',
      '--test-name-pattern=greets a user',
      'src/a b.ts',
    ]);
    assert.deepEqual(splitCommand(`git diff "" 'it'"x"`), ['git', 'diff', '', 'itx']);
    assert.deepEqual(splitCommand(` git status `), ['git', 'status']);
  });

  test('refuses every shell metacharacter, even inside quotes', () => {
    for (const ch of METACHARACTERS) {
      refusedWith(() => splitCommand(`git status ${ch}x`), /shell metacharacter/);
      refusedWith(() => splitCommand(`git status "a${ch}b"`), /shell metacharacter/);
    }
  });

  test('refuses empty commands, unterminated quotes, env assignments, over-long commands, control characters', () => {
    refusedWith(() => splitCommand(''), /empty/);
    refusedWith(() => splitCommand('   \t '), /empty/);
    refusedWith(() => splitCommand('git diff "open'), /unterminated " quote/);
    refusedWith(() => splitCommand("git diff 'open"), /unterminated ' quote/);
    refusedWith(() => splitCommand('FOO=bar git status'), /environment assignment \("FOO"=…\)/);
    refusedWith(() => splitCommand('GIT_DIR=x git status'), /environment assignment/);
    refusedWith(() => splitCommand(`git diff ${'a'.repeat(MAX_COMMAND_CHARS)}`), /longer than 4096 characters/);
    refusedWith(() => splitCommand('git status\0'), /control character/);
    refusedWith(() => splitCommand('git status\u001b[2J'), /control character/);
  });
});

describe('checkAllowed', () => {
  test('allowlist entries are command prefixes', () => {
    assert.equal(check('git diff'), 'git diff');
    assert.equal(check('git diff --stat'), 'git diff');
    assert.equal(check('git diff -- src/a.ts'), 'git diff');
    assert.equal(check('git diff main..HEAD --name-only'), 'git diff');
    assert.equal(check('git diff HEAD~1 --unified=5 -U3'), 'git diff');
    assert.equal(check('git status --porcelain=v1 -uall'), 'git status');
    assert.equal(check('pnpm test'), 'pnpm test');
    assert.equal(check('pnpm test -- src/greet.test.ts --test-name-pattern=greets'), 'pnpm test');
    assert.equal(check('npm run lint -- --fix'), 'npm run lint');
    assert.equal(check('npm test'), 'npm test');
  });

  test('refuses commands that are not on the allowlist, or with no allowlist at all', () => {
    refusedWith(() => check('git push'), /"git push" is not on the allowlist of this harness: pnpm lint, /);
    refusedWith(() => check('rm -rf src'), /not on the allowlist/);
    refusedWith(() => check('gitx diff'), /not on the allowlist/);
    refusedWith(() => check('npm run build'), /not on the allowlist/);
    refusedWith(() => checkAllowed(['git', 'status'], null), /not available in this harness/);
    refusedWith(() => checkAllowed(['git', 'status'], null, 'doc-writer'), /not available in harness doc-writer/);
  });

  test('an unlisted program is refused as unlisted, whatever its arguments hold', () => {
    // Its URL holds '//' and its path '..': neither is the reason, the program is.
    const unlisted = /^command "curl[^"]*" is not on the allowlist of harness code: pnpm lint, .*npm run test$/;
    refusedWith(() => checkAllowed(splitCommand('curl https://example.com/x'), ALLOWED, 'code'), unlisted);
    refusedWith(() => checkAllowed(splitCommand('curl -o ../x /etc/passwd'), ALLOWED, 'code'), unlisted);
    refusedWith(() => check('cat /etc/passwd'), /"cat \/etc\/passwd" is not on the allowlist of this harness/);
    refusedWith(() => check('npm run build -- --prefix=/x'), /not on the allowlist/);
    // an allowlisted program still has its arguments checked
    refusedWith(() => check('git diff -- /etc/passwd'), /absolute path/);
  });

  test('refuses git global options before the subcommand', () => {
    refusedWith(() => check('git -c core.pager=sh status'), /git global option "-c"/);
    refusedWith(() => check('git -C .. status'), /git global option "-C"/);
    refusedWith(() => check('git --git-dir=.git status'), /git global option/);
    refusedWith(() => check('git --work-tree=x diff'), /git global option/);
    refusedWith(() => check('git --exec-path=x status'), /git global option/);
  });

  test('refuses options that reach outside the worktree or run programs', () => {
    refusedWith(() => check('git diff --output=x.patch'), /--output/);
    refusedWith(() => check('git diff --output x.patch'), /--output/);
    refusedWith(() => check('git diff --outp=x'), /--output/); // git accepts abbreviations
    refusedWith(() => check('git diff -o x'), /writes output to a file/);
    refusedWith(() => check('git diff --ext-diff'), /--ext-diff/);
    refusedWith(() => check('git diff --textconv'), /--textconv/);
    refusedWith(() => check('git diff --no-index a b'), /--no-index/);
    refusedWith(() => check('git diff --upload-pack=x'), /--upload-pack/);
    refusedWith(() => check('git diff --receive-pack=x'), /--receive-pack/);
    refusedWith(() => check('git diff --exec=x'), /--exec/);
    refusedWith(() => check('git diff --config=x'), /--config/);
    refusedWith(() => check('pnpm test --prefix ../x'), /--prefix/);
    refusedWith(() => check('pnpm test --dir=x'), /--dir/);
    refusedWith(() => check('pnpm test -C x'), /changes the directory/);
    refusedWith(() => check('pnpm test --workspace-root'), /--workspace-root/);
    refusedWith(() => check('npm test -- --require=x.js'), /--require/);
  });

  test('refuses absolute paths, home paths and .. segments in any argument', () => {
    refusedWith(() => check('git diff -- /etc/passwd'), /absolute path/);
    refusedWith(() => check('git diff --relative=/x'), /absolute path/);
    refusedWith(() => check('git diff HEAD:/x'), /absolute path/);
    refusedWith(() => check('git diff ~/x'), /home folder/);
    refusedWith(() => check('git diff ../x'), /leaves the worktree/);
    refusedWith(() => check('git diff src/../../x'), /leaves the worktree/);
    refusedWith(() => check('pnpm test -- --reporter=..'), /leaves the worktree/);
  });

  test('only flags from the small safe set follow the allowlisted prefix', () => {
    refusedWith(() => check('git diff --foo'), /"--foo" is not allowed after "git diff"/);
    refusedWith(() => check('git status --porcelain=v9'), /not allowed after "git status"/);
    refusedWith(() => check('pnpm test --filter x'), /"--filter" is not allowed after "pnpm test"/);
    refusedWith(() => check('pnpm test -- --script-shell=x'), /not allowed after "pnpm test"/);
    refusedWith(() => check('npm test --watch=true'), /not allowed after "npm test"/);
    // after '--', git takes everything as a pathspec
    assert.equal(check('git diff -- -weird-name.ts'), 'git diff');
  });

  test('an allowlisted program of no known family must match exactly', () => {
    assert.equal(checkAllowed(['env'], ['env']), 'env');
    refusedWith(() => checkAllowed(['env', 'sh'], ['env']), /"env" takes no extra arguments/);
  });

  test('WORKER_ALLOWED_COMMANDS parsing', () => {
    assert.deepEqual(parseAllowedCommands(undefined), ALLOWED);
    assert.deepEqual(parseAllowedCommands(' '), ALLOWED);
    assert.deepEqual(parseAllowedCommands('git  status, pnpm test ,,'), ['git status', 'pnpm test']);
  });
});

describe('properties', () => {
  const alphabet = fc.constantFrom(...'ab-=./~ "\'\t'.split(''), ...METACHARACTERS, '\0', '\u001b');
  const commandish = fc.string({ unit: alphabet, maxLength: 40 });

  test('input holding a metacharacter is always refused; accepted input yields argv without one', () => {
    fc.assert(
      fc.property(commandish, (command) => {
        let argv: string[];
        try {
          argv = splitCommand(command);
        } catch (err) {
          assert.ok(err instanceof ToolRefusedError, 'err instanceof ToolRefusedError');
          return;
        }
        assert.ok(!hasMetacharacter(command), `accepted ${JSON.stringify(command)}`);
        assert.ok(argv.length > 0, 'argv.length > 0');
        for (const word of argv) {
          assert.ok(!hasMetacharacter(word), `argv word ${JSON.stringify(word)}`);
          assert.ok(
            !/[\u0000-\u001f\u007f]/.test(word.replace(/\t/g, '')),
            `control character in ${JSON.stringify(word)}`,
          );
        }
      }),
      { numRuns: 5000 },
    );
  });

  test('any unicode string with a metacharacter is refused', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'binary', maxLength: 30 }),
        fc.constantFrom(...METACHARACTERS),
        fc.string({ unit: 'binary', maxLength: 30 }),
        (a, meta, b) => {
          assert.throws(() => splitCommand(`${a}${meta}${b}`), ToolRefusedError);
        },
      ),
      { numRuns: 3000 },
    );
  });

  test('plain words survive a round trip, quoted or not', () => {
    const word = fc.string({ unit: fc.constantFrom(...'abcXYZ019-_./:@+,= '.split('')), minLength: 1, maxLength: 12 });
    fc.assert(
      fc.property(fc.array(word, { minLength: 1, maxLength: 6 }), fc.boolean(), (words, doubleQuotes) => {
        fc.pre(!/^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0]!));
        const q = doubleQuotes ? '"' : "'";
        assert.deepEqual(splitCommand(words.map((w) => `${q}${w}${q}`).join(' ')), words);
        const bare = words.filter((w) => !w.includes(' ') && w !== '');
        fc.pre(bare.length > 0 && !/^[A-Za-z_][A-Za-z0-9_]*=/.test(bare[0]!));
        assert.deepEqual(splitCommand(bare.join('  ')), bare);
      }),
      { numRuns: 2000 },
    );
  });

  test('an argv holding a denied option, an absolute path or a .. segment is never allowed', () => {
    const safeArg = fc.constantFrom('--stat', '--name-only', 'src/a.ts', 'HEAD~1', 'main..HEAD', '--', '-U3', 'docs');
    const badArg = fc.constantFrom(
      '--output=x',
      '--ext-diff',
      '--upload-pack=x',
      '--receive-pack',
      '--exec=x',
      '--no-index',
      '--textconv',
      '--config',
      '-c',
      '-C',
      '-o',
      '/etc/passwd',
      '../x',
      'a/../../b',
      '--git-dir=x',
      '--work-tree=x',
      '~/x',
      '--prefix=x',
    );
    fc.assert(
      fc.property(
        fc.constantFrom(['git', 'diff'], ['git', 'status'], ['pnpm', 'test'], ['npm', 'run', 'lint']),
        fc.array(safeArg, { maxLength: 4 }),
        badArg,
        fc.array(safeArg, { maxLength: 4 }),
        (prefix, before, bad, after) => {
          assert.throws(() => checkAllowed([...prefix, ...before, bad, ...after], ALLOWED), ToolRefusedError);
          assert.throws(() => checkAllowed([prefix[0]!, bad, ...prefix.slice(1), ...after], ALLOWED), ToolRefusedError);
        },
      ),
      { numRuns: 3000 },
    );
  });
});
