// A rolling upgrade: a newer release's worker starts and migrates the database while this release's
// workers have runs in flight. Adding columns to the tables changes what their cached `select *`
// statements return, which Postgres refuses once per connection ("cached plan must not change
// result type"); the worker retries the transaction, which prepares the statement again, and the
// run goes on: no run fails, no round is lost, and the next run is served.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { waitFor, type Child } from './support/child.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

const ROUNDS = 8;
let s: Scenario;
let worker: Child;

before(async () => {
  s = await createScenario({ steps: sampleSteps(300, ROUNDS) });
  worker = s.spawnWorker();
  await worker.waitForLine(/"worker started"/);
});

after(async () => {
  await s?.close();
});

test('a migration adding columns to every table mid-run: the run completes with every round, the next run too', async () => {
  const { agentRunId } = await s.dispatch();
  await waitFor(async () => ((await s.checkpoints(agentRunId)).length >= 2 ? true : undefined), {
    timeoutMs: 30_000,
    what: 'two checkpoints',
  });
  await s.su.unsafe(`
    do $$
    declare t record;
    begin
      for t in select tablename from pg_tables where schemaname = 'public' loop
        execute format('alter table %I add column added_by_a_newer_release text', t.tablename);
      end loop;
    end $$`);
  const run = await s.waitForStatus(agentRunId, 'completed', 60_000).catch(async (err) => {
    throw new Error(`${err.message}: ${JSON.stringify(await s.run(agentRunId))}\n${worker.output()}`);
  });
  assert.equal(run.attempt, 1, 'the run was never handed back or re-dispatched');
  assert.deepEqual(
    (await s.checkpoints(agentRunId)).map((c) => c.checkpoint_seq),
    Array.from({ length: ROUNDS }, (_, i) => i + 1),
  );
  const { agentRunId: next } = await s.dispatch();
  await s.waitForStatus(next, 'completed', 60_000).catch(async (err) => {
    throw new Error(`${err.message}: ${JSON.stringify(await s.run(next))}\n${worker.output()}`);
  });
  const errors = worker.lines.filter((l) => /"level":(50|60)/.test(l));
  assert.deepEqual(errors, [], 'the worker logged no error');
});
