// Bad input, one table-driven suite. A real worker on the Redis queue is fed the
// corpus of test/fixtures/bad-input/: raw messages that are not jobs, jobs failing the schema in
// each field, jobs naming things that do not exist, and a model whose tool calls are all bad.
// The same job table runs on the Postgres queue too, as hand-inserted rows (what cannot be
// jsonb, such as malformed JSON, exists only on Redis) and dispatched jobs.
// Each gets a clear reason (a dead letter, the run's failure reason, or a tool error the model
// sees and tool_history records), the same worker serves the next job, and a run going on in
// another worker meanwhile is not disturbed.
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, realpath, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { withWorkspace } from '../store/workspace.ts';
import { waitFor, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { registerRepo } from './support/grants.ts';
import { startRedis, type RedisServer } from '../testbed/redis.ts';
import { createScenario, sampleSteps, type Scenario, type TranscriptStep } from './support/scenario.ts';
import { deadLetterText } from '../worker/queue/postgres.ts';

interface JobCase {
  name: string;
  raw?: string;
  set?: Record<string, unknown>;
  unset?: string[];
  expect: { deadLetter?: string; runFailed?: string };
}
interface CallCase {
  name: string;
  toolName: string;
  input: Record<string, unknown>;
  expect: { error?: string; result?: Record<string, unknown> };
}

const fixture = (name: string) =>
  JSON.parse(readFileSync(new URL(`./fixtures/bad-input/${name}`, import.meta.url), 'utf8'));
const JOB_CASES: JobCase[] = fixture('jobs.json').cases;
const CALL_CASES: CallCase[] = fixture('tool-calls.json').calls;

const KEY_A = 'echodo:bad-input:a'; // the corpus worker's queue
const KEY_B = 'echodo:bad-input:b'; // the bystander worker's queue: it never sees the corpus
const WORKER_A = 'bad-input-worker-a';
const WORKER_B = 'bad-input-worker-b';
const BYSTANDER_ROUNDS = 16;
const MB = 1024 * 1024;

// Dead letters keep the message redacted and capped: look one up by what it stores.
const md5 = (text: string) => createHash('md5').update(deadLetterText(text), 'utf8').digest('hex');

/** Replaces every placeholder ($NAME) inside string values, recursively. */
function fill(value: unknown, placeholders: Record<string, string>): unknown {
  if (typeof value === 'string') {
    let out = value;
    for (const [token, replacement] of Object.entries(placeholders)) out = out.split(token).join(replacement);
    return out;
  }
  if (Array.isArray(value)) return value.map((v) => fill(v, placeholders));
  if (value && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fill(v, placeholders)]));
  return value;
}

describe('bad input: jobs, runs and tool calls', () => {
  let redis: RedisServer | null = null;
  let s: Scenario;
  let client: Redis;
  let workerA: Child;
  let workerB: Child;
  let bystanderRunId: string;
  let outside: string;
  let placeholders: Record<string, string>;
  let jobSeq = 0;

  const goodJob = (overrides: Record<string, unknown> = {}): Record<string, unknown> => {
    jobSeq++;
    return {
      jobId: `bad-input-job-${jobSeq}`,
      workspaceId: s.workspaceId,
      convoyId: 'convoy-bad-input',
      briefId: `brief-bad-input-${jobSeq}`,
      roleId: 'coder',
      harnessAlias: 'code',
      repoPath: s.repo,
      baseRef: 'main',
      brief: 'Add a greeting module and a test for it.',
      model: `replay:${s.transcriptPath}`,
      agentRunId: randomUUID(),
      ...overrides,
    };
  };

  const ended = (agentRunId: string, worker: Child, timeoutMs = 60_000) =>
    waitFor(
      async () => {
        const row = await s.run(agentRunId).catch(() => undefined);
        return row && (row.status === 'completed' || row.status === 'failed') ? row : undefined;
      },
      { timeoutMs, what: `run ${agentRunId} to finish` },
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nworker output (tail):\n${worker.lines.slice(-40).join('\n')}`);
    });

  before(async () => {
    redis = await startRedis();
    s = await createScenario({
      steps: sampleSteps(20, 8),
      env: {
        REDIS_URL: redis!.url,
        WORKER_QUEUE_KEY: KEY_A,
        WORKER_MAX_TOOL_STEPS: '80',
        WORKER_CHECKPOINT_HISTORY_LIMIT: '100',
        // The 100 MB transcript keeps the event loop busy for a while: a lease short enough to
        // lapse during that would turn this into a zombie test.
        WORKER_LEASE_MS: '30000',
        WORKER_HEARTBEAT_MS: '1000',
      },
    });
    client = new Redis(redis!.url);

    const scratch = await mkdtemp(path.join(os.tmpdir(), 'echodo-bad-input-'));
    const notARepo = path.join(scratch, 'not-a-repo');
    await mkdir(notARepo);
    await writeFile(path.join(notARepo, 'README.md'), 'just a folder\n');
    outside = path.join(scratch, 'outside');
    await mkdir(outside);
    await writeFile(path.join(outside, 'secret.txt'), 'outside the worktree\n');
    placeholders = {
      $REPO: s.repo,
      $NOT_A_REPO: notARepo,
      $MISSING_DIR: path.join(scratch, 'no-such-folder'),
      $TRANSCRIPT: s.transcriptPath,
      $BRIEF_10MB: 'Do it. '.repeat(Math.ceil((10 * MB) / 7)),
      $ROLE_201: 'r'.repeat(201),
      $LONG_PATH: `${'a/'.repeat(2100)}b.txt`,
      $LONG_COMPONENT: `${'n'.repeat(300)}.txt`,
      $EMOJI_AT_500: `${'q'.repeat(499)}\u{1F600}z`,
    };
    // Registered to the workspace, so what fails is the folder itself, not its grant (test/grants.test.ts).
    const real = await realpath(scratch);
    for (const folder of ['not-a-repo', 'no-such-folder'])
      await registerRepo(s.su, s.workspaceId, path.join(real, folder));

    // Branch bad-input of the repo: the odd files and symlinks the model-level run trips over.
    await git(s.repo, 'checkout', '-q', '-b', 'bad-input');
    await writeFile(path.join(s.repo, 'big.txt'), `${'a'.repeat(1023)}\n`.repeat((50 * MB) / 1024));
    await writeFile(path.join(s.repo, 'blob.bin'), Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0, 0, 0, 1, 2, 3, 0, 0xff]));
    await writeFile(path.join(s.repo, 'latin1.txt'), Buffer.from('caf\xe9 cr\xe8me \xff\xfe\n', 'latin1'));
    await symlink(outside, path.join(s.repo, 'escape'));
    await symlink(path.join(outside, 'secret.txt'), path.join(s.repo, 'escape-file'));
    await symlink('loop', path.join(s.repo, 'loop'));
    await git(s.repo, 'add', '-A');
    await git(s.repo, 'commit', '-q', '-m', 'odd files');
    await git(s.repo, 'checkout', '-q', 'main');

    // The bystander: a slow, good run in worker B, under way before any bad input arrives.
    const bystanderTranscript = path.join(scratch, 'bystander.json');
    await writeFile(bystanderTranscript, JSON.stringify({ steps: sampleSteps(300, BYSTANDER_ROUNDS) }));
    workerB = s.spawnWorker({ WORKER_ID: WORKER_B, WORKER_QUEUE_KEY: KEY_B });
    const job = goodJob({ model: `replay:${bystanderTranscript}` });
    bystanderRunId = job.agentRunId as string;
    await client.lpush(KEY_B, JSON.stringify(job));
    await s.waitForStatus(bystanderRunId, 'running');

    workerA = s.spawnWorker({ WORKER_ID: WORKER_A });
    await workerA.waitForLine(/"worker started"/);
  });

  after(async () => {
    await Promise.all([workerA?.stop('SIGTERM', 5000), workerB?.stop('SIGTERM', 5000)]);
    client?.disconnect();
    await s?.close();
    await redis?.stop();
  });

  test(
    `each of ${JOB_CASES.length} bad jobs is dead-lettered or failed with a reason naming the problem`,
    { timeout: 120_000 },
    async () => {
      assert.equal(
        (await s.run(bystanderRunId)).status,
        'running',
        'the bystander run is under way while the corpus arrives',
      );
      const pushed = JOB_CASES.map((c) => {
        if (c.raw !== undefined) return { c, raw: c.raw, agentRunId: undefined as string | undefined };
        const job = goodJob();
        for (const field of c.unset ?? []) delete job[field];
        Object.assign(job, fill(c.set ?? {}, placeholders));
        return {
          c,
          raw: JSON.stringify(job),
          agentRunId: typeof job.agentRunId === 'string' ? job.agentRunId : undefined,
        };
      });
      for (const { raw } of pushed) await client.lpush(KEY_A, raw);

      for (const { c, raw, agentRunId } of pushed) {
        if (c.expect.deadLetter) {
          const dead = await waitFor(
            async () => {
              const rows = await s.su`select reason, workspace_id from dead_letters where md5(raw) = ${md5(raw)}`;
              return rows[0];
            },
            { timeoutMs: 60_000, what: `the dead letter of "${c.name}"` },
          );
          assert.match(dead.reason, new RegExp(c.expect.deadLetter), `${c.name}: dead letter reason`);
          if (agentRunId) {
            const [{ n }] = await s.su`select count(*)::int as n from agent_runs where id = ${agentRunId}`;
            assert.equal(n, 0, `${c.name}: no run recorded for a job that is not one`);
          }
        } else {
          const run = await ended(agentRunId!, workerA);
          const expected = new RegExp(c.expect.runFailed!);
          assert.equal(run.status, 'failed', `${c.name}: the run fails`);
          assert.match(run.failure_reason, expected, `${c.name}: failure_reason`);
          const [event] = await s.events(agentRunId!, 'run_failed');
          assert.ok(event, `${c.name}: a run_failed event`);
          assert.match(
            `${event.metadata.code}: ${event.metadata.reason}`,
            expected,
            `${c.name}: run_failed event metadata`,
          );
        }
      }

      // The Redis dead list mirrors each dead letter with its reason, and nothing is left behind.
      const mirrored = (await client.lrange(`${KEY_A}:dead`, 0, -1)).map(
        (e) => JSON.parse(e) as { raw: string; reason: string },
      );
      for (const { c, raw } of pushed.filter((p) => p.c.expect.deadLetter)) {
        const entry = mirrored.find((e) => e.raw === deadLetterText(raw));
        assert.ok(entry, `${c.name}: mirrored on ${KEY_A}:dead`);
        assert.match(entry.reason, new RegExp(c.expect.deadLetter!));
      }
      await waitFor(
        async () => (await client.llen(KEY_A)) === 0 && (await client.llen(`${KEY_A}:processing:${WORKER_A}`)) === 0,
        {
          what: 'the queue and the processing list to be empty',
        },
      );
      assert.equal(workerA.process.exitCode, null, 'worker A is still running');
    },
  );

  test(
    `each of ${CALL_CASES.length} bad tool calls comes back to the model as a clear tool error; the run completes`,
    { timeout: 180_000 },
    async () => {
      const bigPlaceholders = { ...placeholders, $CONTENT_100MB: 'x'.repeat(100 * MB) };
      const steps: TranscriptStep[] = CALL_CASES.map((c) => ({
        toolCalls: [{ toolName: c.toolName, input: fill(c.input, bigPlaceholders) as Record<string, unknown> }],
      }));
      steps.push({ text: 'Done, despite everything.' });
      const transcript = path.join(path.dirname(s.transcriptPath), 'bad-tool-calls.json');
      await writeFile(transcript, JSON.stringify({ steps }));

      const job = goodJob({ baseRef: 'bad-input', model: `replay:${transcript}` });
      const agentRunId = job.agentRunId as string;
      await client.lpush(KEY_A, JSON.stringify(job));
      const run = await ended(agentRunId, workerA, 150_000);
      assert.equal(run.status, 'completed', `run failed: ${run.failure_reason}`);
      assert.equal(run.worker_id, WORKER_A);

      const rows = await s.checkpoints(agentRunId);
      assert.deepEqual(
        rows.map((r) => r.checkpoint_seq),
        CALL_CASES.map((_, i) => i + 1),
        'one checkpoint per round, seqs without gaps',
      );
      assert.ok(verifyChain(rows as never).ok, 'hash chain verifies');
      const history = rows.flatMap((r) => r.tool_history) as {
        round: number;
        tool: string;
        ok: boolean;
        error?: string;
        result?: Record<string, unknown>;
      }[];
      for (const [i, c] of CALL_CASES.entries()) {
        const records = history.filter((h) => h.round === i + 1);
        assert.equal(records.length, 1, `${c.name}: one record in round ${i + 1}`);
        const record = records[0]!;
        assert.equal(record.tool, c.toolName, `${c.name}: the tool as the model named it`);
        if (c.expect.error) {
          assert.equal(record.ok, false, `${c.name}: a tool error, got ${JSON.stringify(record.result)}`);
          assert.match(record.error ?? '', new RegExp(c.expect.error), `${c.name}: the error names the problem`);
        } else {
          assert.equal(record.ok, true, `${c.name}: succeeds, got error ${record.error}`);
          for (const [key, value] of Object.entries(c.expect.result!))
            assert.deepEqual(record.result?.[key], value, `${c.name}: result.${key}`);
        }
      }

      // Bounded records: no file contents (the 256 KiB shown of big.txt, the 100 MB write) reached the rows.
      const largest = Math.max(...rows.map((r) => JSON.stringify(r.tool_history).length));
      assert.ok(largest < 100_000, `tool_history stays small (${largest} characters)`);

      // Nothing escaped: outside the worktree nothing was planted, inside only the good write landed.
      assert.deepEqual(await readdir(outside), ['secret.txt']);
      assert.equal(
        existsSync('/tmp/echodo-evil.txt') || existsSync('/tmp/echodo-evil.patch'),
        false,
        'nothing written to /tmp',
      );
      assert.equal(existsSync(path.join(s.repo, '.git', 'hooks', 'pre-commit')), false, 'no hook planted');
      const branchFiles = (await git(s.repo, 'ls-tree', '-r', '--name-only', run.branch)).split('\n');
      assert.ok(branchFiles.includes('notes/ok.txt'), 'the good write after the bad ones is on the branch');
      for (const stray of ['a.txt', 'huge.txt', 'surrogate.txt', 'out.patch'])
        assert.ok(!branchFiles.includes(stray), `${stray} was not written`);
      const report = await checkRunIntegrity(s.t.db, s.config, s.workspaceId, agentRunId);
      assert.deepEqual(report?.findings, [], 'the worktree matches its last checkpoint');
    },
  );

  test(
    'after the corpus the same worker completes a good job, and the concurrent run was not disturbed',
    { timeout: 120_000 },
    async () => {
      const job = goodJob();
      await client.lpush(KEY_A, JSON.stringify(job));
      const run = await ended(job.agentRunId as string, workerA);
      assert.equal(run.status, 'completed', `good job after the corpus: ${run.failure_reason}`);
      assert.equal(run.worker_id, WORKER_A, 'the same worker process ran it');
      assert.equal(workerA.process.exitCode, null, 'worker A is still running');

      const bystander = await ended(bystanderRunId, workerB);
      assert.equal(bystander.status, 'completed', `bystander: ${bystander.failure_reason}`);
      assert.equal(bystander.worker_id, WORKER_B);
      assert.equal(bystander.attempt, 1, 'never re-dispatched');
      const rows = await s.checkpoints(bystanderRunId);
      assert.deepEqual(
        rows.map((r) => r.checkpoint_seq),
        Array.from({ length: BYSTANDER_ROUNDS }, (_, i) => i + 1),
      );
      assert.ok(verifyChain(rows as never).ok, 'the bystander hash chain verifies');
      assert.ok(
        (rows.flatMap((r) => r.tool_history) as { ok: boolean }[]).every((h) => h.ok),
        'every tool call of the bystander succeeded',
      );
      assert.equal((await s.events(bystanderRunId, 'run_failed')).length, 0, 'no run_failed event');
      assert.deepEqual((await checkRunIntegrity(s.t.db, s.config, s.workspaceId, bystanderRunId))?.findings, []);
      assert.ok(!workerB.lines.some((l) => /"level":(50|60)/.test(l)), 'worker B logged no error');
    },
  );
});

describe('bad input on the Postgres queue: the same job table', () => {
  let s: Scenario;
  let worker: Child;
  let placeholders: Record<string, string>;
  const WORKER = 'bad-input-postgres-worker';

  before(async () => {
    s = await createScenario({ steps: sampleSteps(20, 3) });
    const scratch = await mkdtemp(path.join(os.tmpdir(), 'echodo-bad-input-pg-'));
    await mkdir(path.join(scratch, 'not-a-repo'));
    placeholders = {
      $REPO: s.repo,
      $NOT_A_REPO: path.join(scratch, 'not-a-repo'),
      $MISSING_DIR: path.join(scratch, 'no-such-folder'),
      $TRANSCRIPT: s.transcriptPath,
      $BRIEF_10MB: 'Do it. '.repeat(Math.ceil((10 * MB) / 7)),
      $ROLE_201: 'r'.repeat(201),
    };
    // Registered to the workspace, so what fails is the folder itself, not its grant (test/grants.test.ts).
    const real = await realpath(scratch);
    for (const folder of ['not-a-repo', 'no-such-folder'])
      await registerRepo(s.su, s.workspaceId, path.join(real, folder));
    worker = s.spawnWorker({ WORKER_ID: WORKER });
    await worker.waitForLine(/"worker started"/);
  });
  after(async () => {
    await worker?.stop('SIGTERM', 5000);
    await s?.close();
  });

  test(
    'a stored run whose job turned bad is dead-lettered and failed, never taken again; a bad reference fails the run',
    { timeout: 120_000 },
    async () => {
      const stored = JOB_CASES.filter((c) => c.raw === undefined);
      const expectations: { c: JobCase; agentRunId: string; jobId: string }[] = [];
      for (const [i, c] of stored.entries()) {
        const agentRunId = `bad-pg-${i}-${randomUUID().slice(0, 8)}`;
        const jobId = `bad-pg-job-${i}`;
        const job: Record<string, unknown> = {
          jobId,
          workspaceId: s.workspaceId,
          convoyId: 'convoy-pg',
          briefId: `brief-pg-${i}`,
          roleId: 'coder',
          harnessAlias: 'code',
          repoPath: s.repo,
          baseRef: 'main',
          brief: 'Greet.',
          model: `replay:${s.transcriptPath}`,
          agentRunId,
          resumeFromCheckpoint: false,
        };
        for (const field of c.unset ?? []) delete job[field];
        Object.assign(job, fill(c.set ?? {}, placeholders));
        if (c.expect.runFailed) {
          const { agentRunId: id } = await s.dispatch(job); // valid jobs: the normal way in
          expectations.push({ c, agentRunId: id, jobId });
          continue;
        }
        // A row as an older release, or a hand edit, could have left it: the job no longer valid.
        await withWorkspace(s.t.db.app, s.workspaceId, async (tx) => {
          await tx`insert into convoys (workspace_id, id) values (${s.workspaceId}, 'convoy-pg') on conflict do nothing`;
          await tx`insert into briefs (workspace_id, id, convoy_id, role_id) values (${s.workspaceId}, ${`brief-pg-${i}`}, 'convoy-pg', 'coder')`;
          await tx`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, harness_alias)
                 values (${agentRunId}, ${s.workspaceId}, 'convoy-pg', ${`brief-pg-${i}`}, ${jobId}, ${tx.json(job as never)}, 'code')`;
        });
        expectations.push({ c, agentRunId, jobId });
      }
      // No doorbell for hand-inserted rows: the worker's next take (every WORKER_BLPOP_TIMEOUT_S) finds them.

      for (const { c, agentRunId } of expectations) {
        const run = await waitFor(
          async () => {
            const row = await s.run(agentRunId);
            return row && (row.status === 'failed' || row.status === 'completed') ? row : undefined;
          },
          { timeoutMs: 60_000, what: `"${c.name}" to be failed` },
        );
        assert.equal(run.status, 'failed', `${c.name}: failed, not run`);
        const expected = new RegExp((c.expect.deadLetter ?? c.expect.runFailed!).replace(/^\^/, ''));
        assert.match(run.failure_reason, expected, `${c.name}: failure_reason`);
        if (c.expect.deadLetter) {
          assert.equal(run.attempt, 1, `${c.name}: taken once`);
          assert.equal(run.worker_id, null, `${c.name}: never claimed`);
          const dead = await s.su`select reason from dead_letters where reason ~ ${expected.source}`;
          assert.ok(dead.length > 0, `${c.name}: a dead letter with the reason`);
        } else {
          const [event] = await s.events(agentRunId, 'run_failed');
          assert.match(`${event?.metadata.code}: ${event?.metadata.reason}`, expected, `${c.name}: run_failed event`);
        }
      }

      const good = await s.dispatch();
      const done = await s.waitForStatus(good.agentRunId, 'completed', 60_000);
      assert.equal(done.worker_id, WORKER, 'the same worker served the next job');
      assert.equal(worker.process.exitCode, null);
    },
  );
});
