// Outages with a worker under way: Postgres restarted and its connections killed,
// Redis restarted, the notes ref locked by another git process, a full disk. The worker retries
// transient errors with backoff, carries on, and loses or duplicates no checkpoint; what it
// cannot carry on through fails the run with a clear reason and leaves the worktree intact.
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import type { Sql } from 'postgres';
import { Redis } from 'ioredis';
import { openDatabase, type Database } from '../store/connection.ts';
import { ensureEmbeddedPostgres, stopEmbeddedPostgres } from '../store/embedded.ts';
import { migrate } from '../store/migrate.ts';
import { isTransientDbError, retryTransient } from '../store/transient-retry.ts';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { readCheckpointNote } from '../worker/checkpoints/notes.ts';
import { parseConfig } from '../core/config.ts';
import { dispatchJob } from '../operator/dispatch.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { createQueue } from '../worker/queue/index.ts';
import type { JobQueue } from '../worker/queue/types.ts';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { cleanUpWhenGone, superuserSql } from '../testbed/db.ts';
import { git, makeRepo } from './support/git.ts';
import { freePort, startRedis, type RedisServer } from '../testbed/redis.ts';
import { createScenario, sampleSteps, type Scenario, type TranscriptStep } from './support/scenario.ts';

const ROUNDS = 20;
// Long enough that a restart or a killed connection never looks like a lost lease.
const PATIENT_LEASE = { WORKER_LEASE_MS: '20000', WORKER_HEARTBEAT_MS: '500', WORKER_MAX_TOOL_STEPS: '40' };
const children: Child[] = [];
const track = (c: Child) => (children.push(c), c);
after(async () => {
  await Promise.all(children.map((c) => c.stop('SIGKILL', 100)));
});

/** The rows of a finished run as the issue demands them: seqs 1..n, chain intact, every tool call ok. */
function assertCleanCheckpoints(rows: Record<string, any>[], rounds: number, what: string) {
  assert.deepEqual(
    rows.map((r) => r.checkpoint_seq),
    Array.from({ length: rounds }, (_, i) => i + 1),
    `${what}: seqs 1..${rounds}, no gap, no duplicate`,
  );
  assert.ok(verifyChain(rows as never).ok, `${what}: hash chain verifies`);
  const failed = (rows.flatMap((r) => r.tool_history) as { ok: boolean; error?: string }[]).filter((h) => !h.ok);
  assert.deepEqual(failed, [], `${what}: no tool call failed because of the outage`);
}

const warnings = (w: Child) => w.lines.filter((l) => /"level":40/.test(l));

/** Resolves with what `until` finds, or fails at once (with its output) if the worker exits first. */
async function whileAlive<T>(w: Child, until: Promise<T>): Promise<T> {
  const died = w.exited.then(({ code, signal }) => {
    throw new Error(
      `the worker exited (code ${code}, signal ${signal}) before the run finished:\n${w.lines.slice(-30).join('\n')}`,
    );
  });
  died.catch(() => {}); // only the race below reports it
  return Promise.race([until, died]);
}

// ------------------------------------------------------------------------------ Postgres

describe('Postgres outages', () => {
  let s: Scenario;
  let baselineTree: string;

  before(async () => {
    s = await createScenario({ steps: sampleSteps(100, ROUNDS), env: PATIENT_LEASE });
    const { agentRunId } = await s.dispatch();
    const w = track(s.spawnWorker());
    await s.waitForStatus(agentRunId, 'completed', 60_000);
    await w.stop('SIGTERM');
    baselineTree = await s.branchTree(agentRunId);
  });
  after(async () => {
    await s?.close();
  });

  test('transient errors are told apart from real ones (errors from a real server)', async () => {
    const victim = superuserSql(s.t.url);
    const terminated = victim`select pg_sleep(10)`.then(
      () => undefined,
      (err: unknown) => err,
    );
    await waitFor(
      async () =>
        (await s.su`select pid from pg_stat_activity where query like 'select pg_sleep%' and pid <> pg_backend_pid()`)
          .length > 0,
    );
    await s.su`select pg_terminate_backend(pid) from pg_stat_activity where query like 'select pg_sleep%' and pid <> pg_backend_pid()`;
    const killed = await terminated;
    await victim.end({ timeout: 1 });
    const refused = superuserSql(`postgres://postgres@127.0.0.1:${await freePort()}/none`);
    const down = await refused`select 1`.then(
      () => undefined,
      (err: unknown) => err,
    );
    await refused.end({ timeout: 1 });
    assert.ok(isTransientDbError(killed), `pg_terminate_backend: ${String((killed as any)?.code)} is transient`);
    assert.ok(isTransientDbError(down), `connection refused: ${String((down as any)?.code)} is transient`);

    const real = [
      await s.su`select * from no_such_table`.catch((e: unknown) => e),
      await s.su`selec 1`.catch((e: unknown) => e),
      await s.su`insert into workspaces (workspace_id, name) values (${s.workspaceId}, 'dup')`.catch((e: unknown) => e),
    ];
    for (const err of real)
      assert.equal(isTransientDbError(err), false, `${(err as any).code} (${(err as Error).message}) is a real error`);

    let calls = 0;
    await assert.rejects(
      retryTransient(async () => {
        calls++;
        throw real[0];
      }),
      /no_such_table/,
    );
    assert.equal(calls, 1, 'a real error is not retried');
    calls = 0;
    assert.equal(
      await retryTransient(
        async () => {
          if (++calls < 3) throw killed;
          return 'ok';
        },
        { baseMs: 1 },
      ),
      'ok',
    );
    assert.equal(calls, 3, 'a transient error is retried until it works');
  });

  test(
    'connections killed again and again (pg_terminate_backend) during a 20-round run',
    { timeout: 200_000 },
    async () => {
      const { agentRunId } = await s.dispatch();
      // PGAPPNAME names the worker's connections, so the killer hits the worker's and only those.
      const w = track(s.spawnWorker({ PGAPPNAME: 'echodo-outage-worker' }));
      await s.waitForStatus(agentRunId, 'running');
      let sweeps = 0;
      let killed = 0;
      let stop = false;
      const killer = (async () => {
        while (!stop) {
          const [row] = await s.su`select count(pg_terminate_backend(pid))::int as n from pg_stat_activity
                                 where datname = current_database() and application_name = 'echodo-outage-worker'`.catch(
            () => [{ n: 0 }],
          );
          killed += row!.n;
          sweeps++;
          await sleep(120 + Math.random() * 200);
        }
      })();
      // 13 s alone, 55 s in one CI run, over 90 s in another (the whole suite on 2 cores): room for that load.
      const finished = waitFor(
        async () => {
          const r = await s.run(agentRunId);
          return r.status === 'completed' || r.status === 'failed' ? r : undefined;
        },
        { timeoutMs: 170_000, what: 'the run to finish' },
      );
      const run = await whileAlive(w, finished).finally(() => (stop = true));
      await killer;
      assert.equal(run.status, 'completed', `${run.failure_reason}\n${warnings(w).join('\n')}`);
      assert.ok(killed >= 5, `the worker's connections were killed during the run (${killed} in ${sweeps} sweeps)`);
      assert.equal(run.attempt, 1, 'the same worker carried on: no re-dispatch');
      assert.equal(w.process.exitCode, null, 'the worker is still running');
      assertCleanCheckpoints(await s.checkpoints(agentRunId), ROUNDS, 'killed connections');
      assert.equal(await s.branchTree(agentRunId), baselineTree, 'same tree as the undisturbed run');
      assert.deepEqual((await checkRunIntegrity(s.t.db, s.config, s.workspaceId, agentRunId))?.findings, []);
      await w.stop('SIGTERM');
    },
  );

  describe('the embedded server restarted (a server of this test alone)', () => {
    let home: string;
    let db: Database;
    let su: Sql;
    let queue: JobQueue;
    let repo: string;
    let env: Record<string, string>;
    let model: string;
    let firstPort: number;
    const start = async () => {
      process.env.ECHODO_PG_FAST = '1';
      try {
        return await ensureEmbeddedPostgres(home);
      } finally {
        delete process.env.ECHODO_PG_FAST;
      }
    };

    before(async () => {
      home = await mkdtemp(path.join(os.tmpdir(), 'echodo-outage-pg-'));
      cleanUpWhenGone(home);
      const server = await start();
      firstPort = server.port;
      su = superuserSql(server.url);
      await migrate(su);
      repo = await makeRepo({ 'README.md': '# sample\n', 'src/index.ts': 'export const answer = 42;\n' });
      const transcript = path.join(home, 'transcript.json');
      await writeFile(transcript, JSON.stringify({ steps: sampleSteps(150, ROUNDS) }));
      env = {
        DATABASE_URL: server.url,
        ECHODO_HOME: path.join(home, 'echodo'),
        WORKER_WORKTREE_BASE: path.join(home, 'worktrees'),
        WORKER_REPO_ROOT: repo,
        WORKER_REPLAY_DIR: home,
        WORKER_BLPOP_TIMEOUT_S: '1',
        LOG_LEVEL: 'info',
        ...PATIENT_LEASE,
      };
      model = `replay:${transcript}`;
      const config = parseConfig(env);
      db = await openDatabase(config);
      queue = createQueue({ config, db, workerId: 'outage-test' });
      await withWorkspace(db.app, 'acme', (tx) => createWorkspace(tx));
    });
    after(async () => {
      await queue?.close();
      await db?.close();
      await su?.end({ timeout: 2 });
      if (home) {
        await stopEmbeddedPostgres(home).catch(() => {});
        await rm(home, { recursive: true, force: true });
      }
    });

    test('stop and start keep the port, so DATABASE_URL handed to workers stays valid', async () => {
      assert.ok(await stopEmbeddedPostgres(home), 'the server was running and is stopped');
      const again = await start();
      assert.equal(again.port, firstPort, 'the restarted server listens on the port it had');
    });

    test(
      'a restart mid-run: the worker retries with backoff, carries on, and loses no checkpoint',
      { timeout: 120_000 },
      async () => {
        assert.equal(
          (await start()).port,
          firstPort,
          'the server is on its first port (else the restart above moved it)',
        );
        const job = {
          workspaceId: 'acme',
          convoyId: 'convoy-1',
          briefId: 'brief-restart',
          roleId: 'coder',
          harnessAlias: 'code',
          repoPath: repo,
          baseRef: 'main',
          brief: 'Greet.',
          model,
        };
        const { agentRunId } = await dispatchJob(db, queue, job);
        const w = track(spawnNode('scripts/worker.ts', [], { env }));
        await waitFor(
          async () =>
            (await su`select count(*)::int as n from worker_checkpoints where agent_run_id = ${agentRunId}`)[0]!.n >= 5,
          { timeoutMs: 30_000, what: 'five checkpoints' },
        );
        assert.ok(await stopEmbeddedPostgres(home), 'the server was running and is stopped');
        await sleep(1500); // down for a while: refused connections, not only dropped ones
        const restarted = await start();
        assert.equal(restarted.port, firstPort, 'restarted on the same port (else the worker cannot reconnect)');

        const run = await whileAlive(
          w,
          waitFor(
            async () => {
              const [r] = await su`select * from agent_runs where id = ${agentRunId}`;
              return r && (r.status === 'completed' || r.status === 'failed') ? r : undefined;
            },
            { timeoutMs: 90_000, what: 'the run to finish after the restart' },
          ),
        );
        assert.equal(run.status, 'completed', `${run.failure_reason}\n${warnings(w).join('\n')}`);
        assert.equal(run.attempt, 1, 'no re-dispatch: the worker rode out the restart');
        assert.equal(w.process.exitCode, null, 'the worker is still running');
        const rows =
          await su`select * from worker_checkpoints where agent_run_id = ${agentRunId} order by checkpoint_seq`;
        assertCleanCheckpoints(rows, ROUNDS, 'restart');
        assert.equal(
          await git(repo, 'rev-parse', `refs/heads/${run.branch}^{tree}`),
          await git(repo, 'rev-parse', `${rows.at(-1)!.commit_oid}^{tree}`),
        );
        assert.deepEqual((await checkRunIntegrity(db, parseConfig(env), 'acme', agentRunId))?.findings, []);
        assert.ok(
          warnings(w).some((l) => /retry|failed/.test(l)),
          'the worker saw the outage and retried',
        );
        await w.stop('SIGTERM');
      },
    );
  });
});

// --------------------------------------------------------------------------------- Redis

describe('Redis restarted', () => {
  let redis: RedisServer | null = null;
  let s: Scenario;
  let client: Redis;
  let worker: Child;
  let slowModel: string;

  before(async () => {
    redis = await startRedis();
    s = await createScenario({ steps: sampleSteps(20, 4), env: { REDIS_URL: redis!.url, STALL_QUEUED_MS: '500' } });
    client = new Redis(redis!.url);
    slowModel = path.join(path.dirname(s.transcriptPath), 'slow.json');
    await writeFile(slowModel, JSON.stringify({ steps: sampleSteps(250, 6) }));
    worker = track(s.spawnWorker({ WORKER_ID: 'redis-outage-worker' }));
    await worker.waitForLine(/"worker started"/);
  });
  after(async () => {
    client?.disconnect();
    await s?.close();
    await redis?.stop();
  });

  test('a waiting consumer reconnects after the restart and takes the next job', { timeout: 60_000 }, async () => {
    await redis!.restart();
    const { agentRunId } = await s.dispatch();
    const run = await s.waitForStatus(agentRunId, 'completed', 40_000);
    assert.equal(run.worker_id, 'redis-outage-worker');
    assert.equal(worker.process.exitCode, null);
  });

  test(
    'a job lost with the restart is re-enqueued by the stall detector and completed',
    { timeout: 90_000 },
    async () => {
      const busy = await s.dispatch({ model: `replay:${slowModel}` });
      await s.waitForStatus(busy.agentRunId, 'running');
      const lost = await s.dispatch();
      assert.equal(
        await client.llen(s.config.WORKER_QUEUE_KEY),
        1,
        'the job waits on the list while the worker is busy',
      );
      await redis!.restart();
      assert.equal(await client.llen(s.config.WORKER_QUEUE_KEY), 0, 'the restart lost it');
      assert.equal((await s.run(lost.agentRunId)).status, 'queued', 'Postgres still has the run');

      const detector = track(s.spawnStallDetector());
      const run = await s.waitForStatus(lost.agentRunId, 'completed', 60_000);
      assert.equal(run.worker_id, 'redis-outage-worker');
      assert.ok((await s.events(lost.agentRunId, 'run_reenqueued')).length >= 1, 're-enqueued by the detector');
      const undisturbed = await s.waitForStatus(busy.agentRunId, 'completed');
      assert.equal(undisturbed.attempt, 1);
      assertCleanCheckpoints(await s.checkpoints(busy.agentRunId), 6, 'the run in flight during the restart');
      await detector.stop('SIGTERM');
    },
  );
});

// ------------------------------------------------------------- stall detector and a backlog

test(
  'a run queued behind a busy worker is not failed by the stall detector re-enqueueing it',
  { timeout: 90_000 },
  async () => {
    // Nothing stalled: the only worker is busy. Re-enqueueing a queued run must not use up its attempts.
    const s = await createScenario({
      steps: sampleSteps(20, 3),
      env: { STALL_QUEUED_MS: '300', STALL_MAX_ATTEMPTS: '3' },
    });
    try {
      const slow = path.join(path.dirname(s.transcriptPath), 'slow.json');
      await writeFile(slow, JSON.stringify({ steps: sampleSteps(300, 10) }));
      const busy = await s.dispatch({ model: `replay:${slow}` });
      track(s.spawnWorker());
      await s.waitForStatus(busy.agentRunId, 'running');
      const waiting = await s.dispatch();
      track(s.spawnStallDetector());
      await s.waitForStatus(busy.agentRunId, 'completed', 60_000);
      const run = await waitFor(
        async () => {
          const r = await s.run(waiting.agentRunId);
          return r.status === 'completed' || r.status === 'failed' ? r : undefined;
        },
        { timeoutMs: 30_000, what: 'the waiting run to finish' },
      );
      assert.equal(run.status, 'completed', `the waiting run was failed: ${run.failure_reason}`);
    } finally {
      await s.close();
    }
  },
);

// ------------------------------------------------------------------------- notes ref locked

describe('the notes ref locked by another git process', () => {
  let s: Scenario;
  let lock: string;
  before(async () => {
    s = await createScenario({ steps: sampleSteps(150, 10), env: PATIENT_LEASE });
    lock = path.join(s.repo, '.git', 'refs', 'notes', 'echodo-checkpoints.lock');
  });
  after(async () => {
    await rm(lock, { force: true });
    await s?.close();
  });

  const seqs = async (id: string) => (await s.checkpoints(id)).length;
  const notesOf = async (id: string) =>
    Promise.all(
      (await s.checkpoints(id)).map(async (r) => ({
        seq: r.checkpoint_seq,
        note: await readCheckpointNote(s.repo, s.config.WORKER_NOTES_REF, r.commit_oid),
      })),
    );

  test(
    'locked mid-run: the run completes, and the notes missed are written once the lock is gone',
    { timeout: 90_000 },
    async () => {
      const { agentRunId } = await s.dispatch();
      const w = track(s.spawnWorker());
      await waitFor(async () => (await seqs(agentRunId)) >= 3, { timeoutMs: 30_000, what: 'three checkpoints' });
      await writeFile(lock, ''); // git's own ref lock, as a concurrent `git notes` or `git gc` holds it
      await waitFor(async () => (await seqs(agentRunId)) >= 6, {
        timeoutMs: 30_000,
        what: 'three more checkpoints under the lock',
      });
      const whileLocked = await notesOf(agentRunId);
      assert.ok(
        whileLocked.some((n) => n.seq >= 4 && !n.note),
        'a note could not be written while the ref was locked',
      );
      await rm(lock);

      const run = await s.waitForStatus(agentRunId, 'completed', 60_000);
      assert.equal(run.attempt, 1);
      assertCleanCheckpoints(await s.checkpoints(agentRunId), 10, 'notes locked');
      for (const { seq, note } of await notesOf(agentRunId))
        assert.equal(note?.checkpointSeq, seq, `the note of checkpoint ${seq} was written after all`);
      assert.deepEqual((await checkRunIntegrity(s.t.db, s.config, s.workspaceId, agentRunId))?.findings, []);
      assert.ok(
        w.lines.some((l) => l.includes('git note mirror write failed; will retry')),
        'the failed mirror writes were logged',
      );
      await w.stop('SIGTERM');
    },
  );

  test(
    'locked until the run ends: the run completes, the worktree is intact, the missing note is reported',
    { timeout: 90_000 },
    async () => {
      // Locked before the run starts: locked after its first checkpoints, the outcome hung on whether the
      // run's last notes were written before the lock, a race the machine's speed decided.
      await writeFile(lock, '');
      const { agentRunId } = await s.dispatch();
      const w = track(s.spawnWorker());
      const run = await s.waitForStatus(agentRunId, 'completed', 60_000);
      assertCleanCheckpoints(await s.checkpoints(agentRunId), 10, 'notes locked to the end');
      assert.deepEqual(
        (await notesOf(agentRunId)).filter((n) => n.note).map((n) => n.seq),
        [],
        'no note was written while the ref was locked',
      );
      const report = await checkRunIntegrity(s.t.db, s.config, s.workspaceId, agentRunId);
      const kinds = report?.findings.map((f) => f.kind) ?? [];
      assert.ok(
        kinds.length > 0 && kinds.every((k) => k === 'note_missing'),
        `only the mirror is behind, and it is reported; the worktree matches the checkpoint (${kinds.join(', ')})`,
      );
      assert.equal(await git(run.worktree_path, 'status', '--porcelain'), '', 'worktree clean');
      await rm(lock);
      await w.stop('SIGTERM');
    },
  );
});

// ---------------------------------------------------------------------------- full disk

test(
  'ENOSPC on a write: the run fails naming it, the worktree stays at its last checkpoint, the worker goes on',
  { timeout: 90_000 },
  async () => {
    const steps: TranscriptStep[] = [
      {
        toolCalls: [
          {
            toolName: 'write_file',
            input: { path: 'src/greet.ts', content: 'export const greet = (n: string) => `hello ${n}`;\n' },
          },
        ],
      },
      { toolCalls: [{ toolName: 'grep', input: { pattern: 'greet' } }] },
      { toolCalls: [{ toolName: 'write_file', input: { path: 'docs/greet.md', content: '# greet\n' } }] },
      {
        toolCalls: [{ toolName: 'write_file', input: { path: 'src/index.ts', content: 'export const answer = 0;\n' } }],
      },
      { text: 'Done.' },
    ];
    const s = await createScenario({ steps });
    try {
      const { agentRunId } = await s.dispatch();
      const first = track(s.spawnWorker({ ECHODO_FAULT: 'after-note@3' }));
      assert.equal((await first.exited).signal, 'SIGKILL', 'killed after checkpoint 3');
      await waitFor(async () => (await s.sweep()).redispatched.includes(agentRunId), {
        timeoutMs: 20_000,
        intervalMs: 200,
        what: 're-dispatch',
      });

      const full = track(s.spawnWorker({ ECHODO_FAULT_ERRNO: 'write-file:ENOSPC', WORKER_ID: 'disk-full-worker' }));
      const run = await waitFor(
        async () => {
          const r = await s.run(agentRunId);
          return r.status === 'failed' || r.status === 'completed' ? r : undefined;
        },
        { timeoutMs: 30_000, what: 'the run to end' },
      );
      assert.equal(run.status, 'failed');
      assert.match(run.failure_reason, /^io_failure: write_file failed with ENOSPC/);
      const [event] = await s.events(agentRunId, 'run_failed');
      assert.match(event?.metadata.reason ?? '', /ENOSPC/);

      const rows = await s.checkpoints(agentRunId);
      assert.deepEqual(
        rows.map((r) => r.checkpoint_seq),
        [1, 2, 3],
        'nothing checkpointed for the failed round',
      );
      assert.equal(
        await git(run.worktree_path, 'rev-parse', 'HEAD'),
        rows.at(-1)!.commit_oid,
        'HEAD at the last checkpoint',
      );
      assert.equal(
        await git(run.worktree_path, 'status', '--porcelain', '--untracked-files=all'),
        '',
        'no change and no temp file left',
      );
      assert.deepEqual((await readdir(path.join(run.worktree_path, 'src'))).sort(), ['greet.ts', 'index.ts']);
      assert.deepEqual((await checkRunIntegrity(s.t.db, s.config, s.workspaceId, agentRunId))?.findings, []);

      // The same worker serves the next job (one that writes nothing).
      const readOnly = path.join(path.dirname(s.transcriptPath), 'read-only.json');
      await writeFile(
        readOnly,
        JSON.stringify({
          steps: [{ toolCalls: [{ toolName: 'read_file', input: { path: 'README.md' } }] }, { text: 'Read it.' }],
        }),
      );
      const next = await s.dispatch({ model: `replay:${readOnly}` });
      const done = await s.waitForStatus(next.agentRunId, 'completed');
      assert.equal(done.worker_id, 'disk-full-worker');
      assert.equal(full.process.exitCode, null);
    } finally {
      await s.close();
    }
  },
);
