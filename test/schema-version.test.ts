// Schema newer than the code: a database migrated by a newer echodo-worker may hold
// data this code would misread, so every process that opens it refuses to start, exits non-zero,
// and says why in one line naming the version, without a stack trace.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { spawnNode } from './support/child.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';

let t: TestDatabase;
let jobFile: string;

before(async () => {
  t = await createTestDatabase();
  const su = superuserSql(t.url);
  try {
    await su`insert into schema_migrations (version, name) values (999, '999_future')`;
  } finally {
    await su.end({ timeout: 2 });
  }
  jobFile = path.join(path.dirname(t.env.ECHODO_HOME), 'job.json');
  await writeFile(
    jobFile,
    JSON.stringify({
      workspaceId: 'acme',
      convoyId: 'c',
      briefId: 'b',
      roleId: 'coder',
      baseRef: 'main',
      brief: 'x',
      model: 'replay:/nonexistent.json',
    }),
  );
});
after(async () => {
  await t?.drop();
});

const entryPoints: { name: string; script: string; args: () => string[] }[] = [
  { name: 'the worker', script: 'scripts/worker.ts', args: () => [] },
  { name: 'the stall detector (--once)', script: 'scripts/stall-detector.ts', args: () => ['--once'] },
  { name: 'prune', script: 'scripts/prune.ts', args: () => ['--older-than', '30d', '--dry-run'] },
  { name: 'dispatch', script: 'scripts/dispatch.ts', args: () => ['--job', jobFile] },
  { name: 'integrity-check', script: 'scripts/integrity-check.ts', args: () => ['--workspace', 'acme', '--run', 'r1'] },
  { name: 'workspace create', script: 'scripts/workspace.ts', args: () => ['create', 'acme'] },
  { name: 'mission control', script: 'scripts/mission-control.ts', args: () => [] },
];

describe('a schema newer than the code', () => {
  for (const entry of entryPoints) {
    test(`${entry.name} refuses to start with a clear message`, { timeout: 60_000 }, async () => {
      const child = spawnNode(entry.script, entry.args(), {
        env: { ...t.env, LOG_LEVEL: 'info', MISSION_CONTROL_PORT: '0' },
      });
      // A process that did start would keep running: stop it, and the assertions below fail.
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      const exit = await child.exited.finally(() => clearTimeout(timer));
      const output = child.output();
      assert.notEqual(exit.code, 0, `exits non-zero\n${output}`);
      assert.equal(exit.signal, null, `exited by itself\n${output}`);
      assert.match(output, /newer than this code/, `says the schema is newer\n${output}`);
      assert.match(output, /999_future|version 999/, `names version 999\n${output}`);
      assert.doesNotMatch(output, /^\s+at .+:\d+:\d+\)?$/m, `a message, not a stack trace\n${output}`);
      assert.doesNotMatch(output, /"worker started"/, 'never started');
    });
  }

  test('the database is left as it was: nothing migrated down, version 999 still recorded', async () => {
    const su = superuserSql(t.url);
    try {
      const rows = await su<{ version: number }[]>`select version from schema_migrations order by version`;
      assert.equal(rows.at(-1)!.version, 999);
      assert.equal((await su`select count(*)::int as n from agent_runs`)[0]!.n, 0, 'dispatch recorded no run');
    } finally {
      await su.end({ timeout: 2 });
    }
  });
});
