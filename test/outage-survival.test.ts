// A database outage never takes the fleet down. Real processes, each under its own supervising
// parent as `npm run …` starts them: two workers with runs in flight, the stall detector and
// mission control; the embedded Postgres stopped for three leases (`npm run db -- down`) and started
// again on its port (`up`), Redis restarted meanwhile. Every run completes whole; no daemon exits.
// Then self-supervision alone: a worker killed comes back, SIGTERM stops parent and child cleanly.
import assert from 'node:assert/strict';
import { mkdtemp, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import type { Sql } from 'postgres';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { parseConfig } from '../core/config.ts';
import { openDatabase, type Database } from '../store/connection.ts';
import { ensureEmbeddedPostgres, stopEmbeddedPostgres } from '../store/embedded.ts';
import { createWorkspace } from '../store/runs.ts';
import { createWorkspaceTokenWithId } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { dispatchJob } from '../operator/dispatch.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { createQueue } from '../worker/queue/index.ts';
import type { JobQueue } from '../worker/queue/types.ts';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { cleanUpWhenGone, superuserSql } from '../testbed/db.ts';
import { makeRepo } from './support/git.ts';
import { freePort, startRedis, type RedisServer } from '../testbed/redis.ts';
import { createScenario, sampleSteps } from './support/scenario.ts';

const ROUNDS = 12;
const RUNS = 4;
const LEASE_MS = 3000;
// Short leases so the outage is short; STALL_QUEUED_MS stays at its default, so recovery cannot lean on it.
const TIMING = {
  WORKER_LEASE_MS: String(LEASE_MS),
  WORKER_HEARTBEAT_MS: '300',
  STALL_CHECK_MS: '500',
  WORKER_BLPOP_TIMEOUT_S: '1',
};
const SUPERVISED = { ECHODO_SUPERVISE: '1' };

const children: Child[] = [];
const track = (c: Child) => (children.push(c), c);
after(async () => {
  await Promise.all(children.map((c) => c.stop('SIGKILL', 100)));
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** The pids of the children a supervisor started, from its log lines, in order. */
const childPids = (c: Child) =>
  c.lines.filter((l) => l.includes('supervisor started its child')).map((l) => JSON.parse(l).childPid as number);

/** SSE events from an open response until `until` is satisfied (or the stream ends). */
async function readEvents(res: Response, until: (seen: { event: string }[]) => boolean, onEvent?: (e: string) => void) {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const events: { event: string; data: string }[] = [];
  let buffer = '';
  while (!until(events)) {
    const chunk = await reader.read().catch(() => ({ value: undefined, done: true as const })); // aborted
    if (chunk.done) break;
    const { value } = chunk;
    buffer += decoder.decode(value, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (block.startsWith(':')) continue;
      const event = /^event: (.*)$/m.exec(block)?.[1] ?? 'message';
      events.push({ event, data: [...block.matchAll(/^data: (.*)$/gm)].map((m) => m[1]).join('\n') });
      onEvent?.(event);
    }
  }
  await reader.cancel().catch(() => {});
  return events;
}

describe('Postgres stopped for three leases and Redis restarted, with runs in flight on two workers', () => {
  let pgHome: string;
  let db: Database;
  let su: Sql;
  let queue: JobQueue;
  let redis: RedisServer;
  let env: Record<string, string>;
  let repo: string;
  let model: string;
  let mcUrl: string;
  let token: string;
  const dbCli = (verb: string) =>
    spawnNode('scripts/db.ts', [verb], { env: { ECHODO_HOME: pgHome, DATABASE_URL: undefined, ECHODO_PG_FAST: '1' } });

  before(async () => {
    pgHome = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-survival-pg-')));
    cleanUpWhenGone(pgHome);
    process.env.ECHODO_PG_FAST = '1';
    const server = await ensureEmbeddedPostgres(pgHome).finally(() => delete process.env.ECHODO_PG_FAST);
    redis = await startRedis();
    repo = await makeRepo({ 'README.md': '# sample\n', 'src/index.ts': 'export const answer = 42;\n' });
    const transcript = path.join(pgHome, 'transcript.json');
    await writeFile(transcript, JSON.stringify({ steps: sampleSteps(300, ROUNDS) }));
    model = `replay:${transcript}`;
    env = {
      DATABASE_URL: server.url,
      ECHODO_HOME: path.join(pgHome, 'echodo'),
      WORKER_WORKTREE_BASE: path.join(pgHome, 'worktrees'),
      WORKER_REPO_ROOT: repo,
      WORKER_REPLAY_DIR: pgHome,
      REDIS_URL: redis.url,
      LOG_LEVEL: 'info',
      WORKER_MAX_TOOL_STEPS: '40',
      MISSION_CONTROL_PORT: String(await freePort()),
      ...TIMING,
      ...SUPERVISED,
    };
    mcUrl = `http://127.0.0.1:${env.MISSION_CONTROL_PORT}`;
    const config = parseConfig(env);
    db = await openDatabase(config);
    su = superuserSql(server.url);
    queue = createQueue({ config, db, workerId: 'survival-test' });
    await withWorkspace(db.app, 'acme', (tx) => createWorkspace(tx));
    token = (await createWorkspaceTokenWithId(db.app, 'acme')).token;
  });
  after(async () => {
    await queue?.close();
    await db?.close();
    await su?.end({ timeout: 2 });
    await redis?.stop();
    if (pgHome) {
      await stopEmbeddedPostgres(pgHome).catch(() => {});
      await rm(pgHome, { recursive: true, force: true });
    }
  });

  const name = 'every run completes whole; the workers, the stall detector and mission control stay up';
  test(name, { timeout: 240_000 }, async () => {
    const workers = [1, 2].map((n) =>
      track(spawnNode('scripts/worker.ts', [], { env: { ...env, WORKER_ID: `survivor-${n}` } })),
    );
    const detector = track(spawnNode('scripts/stall-detector.ts', [], { env }));
    const panel = track(spawnNode('scripts/mission-control.ts', [], { env }));
    await Promise.all(workers.map((w) => w.waitForLine(/"worker started"/)));
    await panel.waitForLine(/mission control on/);
    const daemons = [...workers, detector, panel];
    const parents = daemons.map((d) => d.pid);

    const job = (i: number) => ({
      workspaceId: 'acme',
      convoyId: 'convoy-1',
      briefId: `brief-${i}`,
      roleId: 'coder',
      harnessAlias: 'code',
      repoPath: repo,
      baseRef: 'main',
      brief: 'Greet.',
      model,
    });
    const ids: string[] = [];
    for (let i = 0; i < RUNS; i++) ids.push((await dispatchJob(db, queue, job(i))).agentRunId);
    const checkpointsOf = async (id: string) =>
      (await su`select count(*)::int as n from worker_checkpoints where agent_run_id = ${id}`)[0]!.n as number;
    await waitFor(
      async () => {
        const running = await su`select id from agent_runs where status = 'running'`;
        if (running.length < 2) return false;
        return (await Promise.all(running.map((r) => checkpointsOf(r.id)))).every((n) => n >= 2);
      },
      { timeoutMs: 60_000, what: 'two runs in flight, one on each worker' },
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${workers.map((w) => w.lines.slice(-10).join('\n')).join('\n---\n')}`);
    });

    // A feed opened before the outage.
    const beforeFeed = new AbortController();
    const auth = { authorization: `Bearer ${token}` };
    const before = await fetch(`${mcUrl}/api/events`, { headers: auth, signal: beforeFeed.signal });
    assert.equal(before.status, 200);

    const down = dbCli('down');
    assert.equal((await down.exited).code, 0, down.output());
    assert.match(down.output(), /stopped the embedded PostgreSQL/);
    const outageStart = Date.now();

    // Mission control while Postgres is away: 503 and a message, for the API and for a page.
    const api = await fetch(`${mcUrl}/api/convoys/convoy-1`, { headers: auth });
    const apiBody = await api.text();
    assert.equal(api.status, 503, apiBody);
    assert.equal(JSON.parse(apiBody).error, 'database_unavailable');
    assert.match(JSON.parse(apiBody).message, /database is unavailable/);
    const page = await fetch(`${mcUrl}/runs/${ids[0]}`, { headers: auth });
    const pageBody = await page.text();
    assert.equal(page.status, 503);
    assert.match(pageBody, /Database unavailable/);
    for (const body of [apiBody, pageBody]) {
      assert.doesNotMatch(body, /\n\s+at |ECONNREFUSED|node_modules/, 'no stack trace, no driver error');
    }

    await redis.restart();
    await sleep(Math.max(0, 3 * LEASE_MS - (Date.now() - outageStart)));
    const up = dbCli('up');
    assert.equal((await up.exited).code, 0, up.output());
    assert.equal(new URL(up.stdout.at(-1)!.trim()).port, new URL(env.DATABASE_URL).port, 'started again on its port');

    const warnings = (d: Child) =>
      d.lines
        .filter((l) => /"level":(40|50|60)/.test(l))
        .slice(-15)
        .join('\n');
    const context = () => daemons.map(warnings).join('\n---\n');
    for (const id of ids) {
      const run = await waitFor(
        async () => {
          const [r] = await su`select * from agent_runs where id = ${id}`;
          return r && ['completed', 'failed', 'cancelled'].includes(r.status) ? r : undefined;
        },
        { timeoutMs: 120_000, what: `run ${id} to finish after the outage` },
      ).catch((err: Error) => {
        throw new Error(`${err.message}\n${context()}`);
      });
      assert.equal(run.status, 'completed', `${run.failure_reason}\n${context()}`);
      const rows = await su`select * from worker_checkpoints where agent_run_id = ${id} order by checkpoint_seq`;
      const seqs = Array.from({ length: ROUNDS }, (_, i) => i + 1);
      assert.deepEqual(
        rows.map((r) => r.checkpoint_seq),
        seqs,
        `run ${id}: seqs 1..n`,
      );
      assert.ok(verifyChain(rows as never).ok, `run ${id}: hash chain verifies`);
      const report = await checkRunIntegrity(db, parseConfig(env), 'acme', id);
      assert.deepEqual(report?.findings, [], `run ${id}: integrity`);
    }

    // Nobody went down: the parents are the processes started, and each still has its first child.
    for (const [i, d] of daemons.entries()) {
      assert.equal(d.process.exitCode, null, `daemon ${i} is running:\n${d.lines.slice(-20).join('\n')}`);
      assert.equal(d.pid, parents[i]);
      const pids = childPids(d);
      const supervision = d.lines.filter((l) => l.includes('child')).join('\n');
      assert.equal(pids.length, 1, `daemon ${i} never needed a restart:\n${supervision}`);
      assert.ok(alive(pids[0]!), `daemon ${i}'s child is alive`);
    }
    for (const w of workers) {
      const said = (text: string) => w.lines.filter((l) => l.includes(text)).length;
      assert.ok(said('database unreachable: the worker waits for it') >= 1, 'the worker saw the outage');
      assert.ok(said('database answers again: the worker goes on') >= 1, 'and its end');
      assert.ok(said('database unreachable') <= 3, 'logged once per outage, not per retry');
    }
    const gaveUp = workers.some((w) => w.lines.some((l) => l.includes('the run is given up')));
    assert.ok(gaveUp, 'a run in flight was given up, not the worker');
    const detectorBack = detector.lines.some((l) => l.includes('database answers again: the stall detector goes on'));
    assert.ok(detectorBack, detector.output());

    // Mission control answers again, and its feeds work: a new one gets a change.
    const convoy = await fetch(`${mcUrl}/api/convoys/convoy-1`, { headers: auth });
    assert.equal(convoy.status, 200);
    assert.ok(((await convoy.json()) as { runs: unknown[] }).runs.length >= RUNS);
    const feed = await fetch(`${mcUrl}/api/events`, { headers: auth });
    assert.equal(feed.status, 200);
    let dispatched = false;
    const events = await readEvents(
      feed,
      (seen) => seen.some((e) => e.event === 'change'),
      (event) => {
        if (event === 'ready' && !dispatched) {
          dispatched = true;
          void dispatchJob(db, queue, job(RUNS));
        }
      },
    );
    assert.ok(
      events.some((e) => e.event === 'change'),
      'a change arrives on a feed opened after the outage',
    );
    // The feed opened before the outage stayed open and was told to catch up.
    const giveUp = setTimeout(() => beforeFeed.abort(), 20_000);
    const old = await readEvents(before, (seen) => seen.some((e) => e.event === 'resync'));
    clearTimeout(giveUp);
    const seen = JSON.stringify(old.map((e) => e.event));
    assert.ok(
      old.some((e) => e.event === 'resync'),
      `the older feed lived through the outage: ${seen}`,
    );

    for (const d of daemons) assert.equal((await d.stop('SIGTERM', 15_000)).code, 0, d.lines.slice(-10).join('\n'));
  });
});

describe('self-supervision', () => {
  test('a worker SIGKILLed comes back; SIGTERM to the parent stops both cleanly', { timeout: 90_000 }, async () => {
    const s = await createScenario({ steps: sampleSteps(20, 3) });
    try {
      const w = track(s.spawnWorker(SUPERVISED));
      await w.waitForLine(/"worker started"/);
      const [first] = childPids(w);
      assert.ok(first && first !== w.pid && alive(first), 'the worker runs as the child of a supervising parent');

      process.kill(first, 'SIGKILL');
      await waitFor(() => childPids(w).length === 2, { timeoutMs: 20_000, what: 'the child to be started again' });
      const restart = w.lines.some((l) => l.includes('child exited; restarting it') && l.includes('SIGKILL'));
      assert.ok(restart, 'the restart is logged');
      const second = childPids(w)[1]!;
      assert.notEqual(second, first);
      const { agentRunId } = await s.dispatch();
      const run = await s.waitForStatus(agentRunId, 'completed', 40_000);
      assert.ok(run, 'the restarted child serves the queue');
      assert.equal(w.process.exitCode, null, 'the parent never exited');

      const exit = await w.stop('SIGTERM', 15_000);
      assert.equal(exit.code, 0, w.lines.slice(-10).join('\n'));
      assert.ok(
        w.lines.some((l) => l.includes('"worker stopped"')),
        'the child stopped cleanly',
      );
      await waitFor(() => !alive(second), { timeoutMs: 5000, what: 'the child to be gone' });
    } finally {
      await s.close();
    }
  });

  test('WORKER_DRY_RUN=1 under supervision prints its banner once and exits 0', async () => {
    const dry = { ...SUPERVISED, WORKER_DRY_RUN: '1', WORKER_ID: 'dry' };
    const w = track(spawnNode('scripts/worker.ts', [], { env: dry }));
    const exit = await w.exited;
    assert.equal(exit.code, 0, w.output());
    assert.equal(w.lines.filter((l) => l.includes('(dry run)')).length, 1);
    assert.deepEqual(childPids(w), [], 'no child was started');
  });
});
