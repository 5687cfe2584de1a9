// Benchmark 2: our Postgres write against the peers', same database, same payload size, in
// turn (the order rotates each round so none always follows another):
//   ours:   withWorkspace + appendCheckpoint (the checkpoint's "row" part: fenced insert);
//   floor:  a bare one-row INSERT transaction;
//   LangGraph: @langchain/langgraph-checkpoint-postgres PostgresSaver.put (one channel blob + the checkpoint);
//   DBOS:   one step of a durable workflow (@dbos-inc/dbos-sdk records the step's output).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { emptyCheckpoint, uuid6, type Checkpoint } from '@langchain/langgraph-checkpoint';
import { PostgresSaver } from '@langchain/langgraph-checkpoint-postgres';
import { appendCheckpoint } from '../store/checkpoints.ts';
import { withWorkspace } from '../store/workspace.ts';
import { PROJECT_ROOT } from '../core/config.ts';
import type { FileTouched } from '../core/checkpoint-hash.ts';
import type { RowPayload } from './checkpoint-cost.ts';
import type { BenchEnv } from './env.ts';
import type { RunFixture } from './fixture.ts';
import { Samples } from './stats.ts';

export interface PeersResult {
  payloadBytes: number;
  dbos: { ok: true; version: string } | { ok: false; error: string };
  langgraphVersion: string;
}

type Contender = { name: string; write: (i: number) => Promise<unknown> };

/** The installed version of a package, from node_modules (exports maps may hide package.json). */
export function packageVersion(name: string): string {
  try {
    return (
      JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'node_modules', name, 'package.json'), 'utf8')) as {
        version: string;
      }
    ).version;
  } catch {
    return 'not installed';
  }
}

export async function measurePeers(
  env: BenchEnv,
  f: RunFixture,
  payload: RowPayload,
  samples: number,
  s: Samples,
  log: (line: string) => void,
): Promise<PeersResult> {
  const value = { tool_history: payload.toolHistory, files_touched: payload.filesTouched };
  let seq = f.writer.state.seq + 1000; // clear of the writer's own rows on this run
  const ours: Contender = {
    name: 'ours',
    write: () =>
      withWorkspace(env.db.app, env.workspaceId, (tx) =>
        appendCheckpoint(
          tx,
          {
            ...f.identity,
            checkpointSeq: ++seq,
            step: seq,
            toolHistory: payload.toolHistory,
            filesTouched: payload.filesTouched as FileTouched[],
            branch: f.branch,
            worktreePath: f.worktree,
            commitOid: 'c'.repeat(40),
            treeOid: 'd'.repeat(40),
            manifestDigest: 'e'.repeat(64),
            manifestCount: 1,
            prevHash: 'a'.repeat(64),
            hash: 'b'.repeat(64),
          },
          { leaseEpoch: f.lease.epoch, leaseMs: 3_600_000 },
        ),
      ).then((row) => {
        if (!row) throw new Error('peer bench: our insert was fenced off');
      }),
  };
  const floor: Contender = {
    name: 'floorInsert',
    write: () => env.su.begin((tx) => tx`insert into bench_floor_insert (payload) values (${tx.json(value as never)})`),
  };

  const saver = PostgresSaver.fromConnString(env.url);
  await saver.setup();
  let parent: string | undefined;
  const langgraph: Contender = {
    name: 'langgraphPut',
    write: async (i) => {
      const checkpoint: Checkpoint = {
        ...emptyCheckpoint(),
        id: uuid6(-1),
        ts: new Date().toISOString(),
        channel_values: { agent_state: value },
        channel_versions: { agent_state: i + 1 },
      };
      const next = await saver.put(
        {
          configurable: {
            thread_id: `bench-${f.run.id}`,
            checkpoint_ns: '',
            ...(parent ? { checkpoint_id: parent } : {}),
          },
        },
        checkpoint,
        { source: 'loop', step: i, parents: {} },
        { agent_state: i + 1 },
      );
      parent = next.configurable?.checkpoint_id as string;
    },
  };

  // Profile of our write, same rotation: the transaction with nothing in it (BEGIN, set_config,
  // COMMIT), the plain row insert without the fencing lease update, and the lease update alone.
  const scoped = (fn: Parameters<typeof withWorkspace>[2]) => withWorkspace(env.db.app, env.workspaceId, fn);
  const profile: Contender[] = [
    { name: 'profile.emptyTx', write: () => scoped(async () => {}) },
    {
      name: 'profile.insertOnly',
      write: () =>
        scoped(
          (
            tx,
          ) => tx`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt, lease_epoch,
                             tool_history, files_touched, branch, worktree_path, commit_oid, prev_hash, hash)
                          values (${env.workspaceId}, ${f.run.id}, ${f.identity.convoyId}, ${f.identity.briefId}, ${++seq}, ${seq}, 1, ${f.lease.epoch},
                             ${tx.json(payload.toolHistory as never)}, ${tx.json(payload.filesTouched as never)}, ${f.branch}, ${f.worktree}, ${'c'.repeat(40)}, ${'a'.repeat(64)}, ${'b'.repeat(64)})`,
        ),
    },
    {
      // The fix proposed in docs/benchmarks.md: fence by locking the run row FOR SHARE (a
      // concurrent takeover's UPDATE still waits for us) instead of updating it; the lease is
      // left to the heartbeat, so agent_runs gets no new row version per checkpoint.
      name: 'profile.fencedInsertForShare',
      write: () =>
        scoped((tx) =>
          tx`with lease as (
                             select id from agent_runs where id = ${f.run.id} and lease_epoch = ${f.lease.epoch} and status = 'running' for share)
                           insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt, lease_epoch,
                             tool_history, files_touched, branch, worktree_path, commit_oid, prev_hash, hash)
                           select ${env.workspaceId}, lease.id, ${f.identity.convoyId}, ${f.identity.briefId}, ${++seq}, ${seq}, 1, ${f.lease.epoch},
                             ${tx.json(payload.toolHistory as never)}, ${tx.json(payload.filesTouched as never)}, ${f.branch}, ${f.worktree}, ${'c'.repeat(40)}, ${'a'.repeat(64)}, ${'b'.repeat(64)}
                             from lease
                           returning id`.then((rows) => {
            if (!rows.length) throw new Error('peer bench: the FOR SHARE variant was fenced off');
          }),
        ),
    },
    {
      name: 'profile.leaseUpdateOnly',
      write: () =>
        scoped(
          (
            tx,
          ) => tx`update agent_runs set heartbeat_at = now(), lease_expires_at = now() + interval '1 hour', step = ${seq}
                           where id = ${f.run.id} and lease_epoch = ${f.lease.epoch} and status = 'running'`,
        ),
    },
  ];
  const contenders: Contender[] = [ours, floor, langgraph, ...profile];
  let dbosStatus: PeersResult['dbos'] = { ok: false, error: 'not tried' };
  let dbos: { shutdown(): Promise<void> } | undefined;
  let workflow: ((n: number) => Promise<void>) | undefined;
  let sink = new Samples(); // warm-up rounds land here and are dropped
  const quiet = process.noDeprecation;
  try {
    process.noDeprecation = true; // DBOS's pg usage prints a deprecation warning per client
    const { DBOS } = await import('@dbos-inc/dbos-sdk');
    DBOS.setConfig({ name: 'echodo-bench', systemDatabaseUrl: env.url, logLevel: 'error' });
    // The round loop runs inside one durable workflow, so each DBOS.runStep records a step.
    workflow = DBOS.registerWorkflow(
      async (n: number) => {
        await roundRobin(
          n,
          [
            ...contenders,
            { name: 'dbosStep', write: (i) => DBOS.runStep(async () => ({ i, ...value }), { name: 'tool-round' }) },
          ],
          sink,
        );
      },
      { name: 'benchRounds' },
    );
    await DBOS.launch();
    dbos = DBOS;
    dbosStatus = { ok: true, version: packageVersion('@dbos-inc/dbos-sdk') };
  } catch (err) {
    dbosStatus = { ok: false, error: (err as Error).message.slice(0, 300) };
    log(`  DBOS could not be started (${dbosStatus.error}); measuring without it`);
    workflow = undefined;
  }
  try {
    if (workflow) {
      await workflow(3);
      sink = s;
      await workflow(samples);
    } else {
      await roundRobin(3, contenders, sink);
      await roundRobin(samples, contenders, s);
    }
  } finally {
    await saver.end();
    await dbos?.shutdown().catch(() => {});
    process.noDeprecation = quiet;
  }
  return {
    payloadBytes: payload.bytes,
    dbos: dbosStatus,
    langgraphVersion: packageVersion('@langchain/langgraph-checkpoint-postgres'),
  };
}

async function roundRobin(rounds: number, contenders: Contender[], s: Samples): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    for (let k = 0; k < contenders.length; k++) {
      const c = contenders[(i + k) % contenders.length]!;
      await s.time(`peers.${c.name}`, () => c.write(i));
    }
  }
}
