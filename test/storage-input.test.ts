// A storage policy as typed: the command line (`retention set`, `quota set`) and the Settings page's
// Storage form read sizes and counts with the same functions, so both take `20G` and refuse `lots`
// with the same words, naming their own field.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { byteSize, wholeNumber } from '../operator/storage-input.ts';
import { SettingRefusedError } from '../operator/settings.ts';
import { storagePolicyInput } from '../mission-control/storage-policy-form.ts';
import { spawnNode } from './support/child.ts';

test('byteSize: bytes as typed, binary units; empty is no value; anything else refused naming the field', () => {
  const cases: [string, number][] = [
    ['500000', 500_000],
    ['500M', 500 * 2 ** 20],
    ['20G', 20 * 2 ** 30],
    ['10GiB', 10 * 2 ** 30],
    [' 1.5 TiB ', 1.5 * 2 ** 40],
    ['64kb', 64 * 2 ** 10],
  ];
  for (const [text, bytes] of cases) assert.equal(byteSize(text, '--bytes'), bytes, text);
  assert.equal(byteSize('', '--bytes'), null);
  assert.equal(byteSize(undefined, '--bytes'), null);
  for (const bad of ['lots', '-1', '20X', '1e30', '99999999999999999999']) {
    assert.throws(() => byteSize(bad, '--bytes'), { name: 'SettingRefusedError', message: /^--bytes: bytes, e\.g\./ });
  }
  assert.deepEqual(storagePolicyInput({ keepLast: '5', keepDays: '', quota: '20G' }), {
    keepLast: 5,
    keepDays: null,
    quotaBytes: 20 * 2 ** 30,
  });
  assert.throws(() => storagePolicyInput({ quota: 'lots' }), new SettingRefusedError('quota: bytes, e.g. 500M or 20G'));
});

test('wholeNumber: from its minimum, at most nine digits', () => {
  assert.equal(wholeNumber('0', '--keep-days', 0), 0);
  assert.equal(wholeNumber(' 3 ', '--keep-last', 1), 3);
  for (const bad of ['0', 'many', '2.5', '1234567890']) {
    assert.throws(
      () => wholeNumber(bad, '--keep-last', 1),
      new SettingRefusedError('--keep-last: a whole number from 1'),
    );
  }
});

test('quota set and retention set refuse with the same words before opening a database (exit 2)', async () => {
  for (const [args, words] of [
    [['quota', 'set', '--workspace', 'acme', '--bytes', 'lots'], '--bytes: bytes, e.g. 500M or 20G'],
    [['retention', 'set', '--workspace', 'acme', '--keep-last', 'many'], '--keep-last: a whole number from 1'],
  ] as const) {
    const cli = spawnNode('scripts/workspace.ts', [...args], {
      env: { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' },
    });
    const { code } = await cli.exited;
    assert.equal(code, 2, cli.output());
    assert.match(cli.output(), new RegExp(words.replace(/[.]/g, '\\.')));
  }
});
