// A worker scenario for end-to-end tests: a test database, a workspace, a real repo, a replay
// transcript, and helpers to dispatch jobs, spawn real worker / stall-detector processes and
// read back what they recorded (as superuser, outside RLS, to see everything).
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Sql } from 'postgres';
import { createWorkspace } from '../../store/runs.ts';
import { withWorkspace } from '../../store/workspace.ts';
import { parseConfig, type Config } from '../../core/config.ts';
import { dispatchJob } from '../../operator/dispatch.ts';
import { createLogger } from '../../worker/log.ts';
import { createQueue } from '../../worker/queue/index.ts';
import type { JobQueue } from '../../worker/queue/types.ts';
import { sweepStalledRuns } from '../../operator/stall-detector.ts';
import { spawnNode, waitFor, type Child } from './child.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../../testbed/db.ts';
import { git, makeRepo } from './git.ts';

export type TranscriptStep = {
  toolCalls?: { toolName: string; input: Record<string, unknown> }[];
  text?: string;
  delayMs?: number;
};

/** Fast leases so stalls are detected in well under a second. */
export const FAST_LEASE = {
  WORKER_LEASE_MS: '2000',
  WORKER_HEARTBEAT_MS: '200',
  STALL_CHECK_MS: '100',
  WORKER_BLPOP_TIMEOUT_S: '1',
};

export interface Scenario {
  t: TestDatabase;
  su: Sql;
  repo: string;
  workspaceId: string;
  transcriptPath: string;
  env: Record<string, string>;
  config: Config;
  queue: JobQueue;
  dispatch(overrides?: Record<string, unknown>): Promise<{ jobId: string; agentRunId: string }>;
  spawnWorker(env?: Record<string, string>): Child;
  spawnStallDetector(env?: Record<string, string>): Child;
  sweep(): ReturnType<typeof sweepStalledRuns>;
  run(agentRunId: string): Promise<Record<string, any>>;
  checkpoints(agentRunId: string): Promise<Record<string, any>[]>;
  events(agentRunId: string, type?: string): Promise<Record<string, any>[]>;
  waitForStatus(agentRunId: string, status: string, timeoutMs?: number): Promise<Record<string, any>>;
  /** The tree oid at the tip of a run's branch: equal oids mean byte-identical trees. */
  branchTree(agentRunId: string): Promise<string>;
  close(): Promise<void>;
}

export async function createScenario(options: {
  files?: Record<string, string>;
  steps: TranscriptStep[];
  workspaceId?: string;
  env?: Record<string, string>;
}): Promise<Scenario> {
  const t = await createTestDatabase();
  const su = superuserSql(t.url);
  const workspaceId = options.workspaceId ?? 'acme';
  const repo = await makeRepo(
    options.files ?? { 'README.md': '# sample\n', 'src/index.ts': 'export const answer = 42;\n' },
  );
  const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-scenario-'));
  const transcriptPath = path.join(dir, 'transcript.json');
  await writeFile(transcriptPath, JSON.stringify({ steps: options.steps }, null, 2));
  const env: Record<string, string> = {
    ...t.env,
    WORKER_REPO_ROOT: repo,
    LOG_LEVEL: 'info',
    ...FAST_LEASE,
    ...options.env,
  };
  const config = parseConfig(env);
  const queue = createQueue({ config, db: t.db, workerId: `test-${process.pid}` });
  await withWorkspace(t.db.app, workspaceId, (tx) => createWorkspace(tx));
  const log = createLogger({ level: 'silent' });

  const job = (overrides: Record<string, unknown> = {}) => ({
    workspaceId,
    convoyId: 'convoy-1',
    briefId: `brief-${Math.random().toString(36).slice(2, 8)}`,
    roleId: 'coder',
    harnessAlias: 'code',
    repoPath: repo,
    baseRef: 'main',
    brief: 'Add a greeting module and a test for it.',
    model: `replay:${transcriptPath}`,
    ...overrides,
  });

  const children: Child[] = [];
  const spawned = (c: Child) => (children.push(c), c);
  const scenario: Scenario = {
    t,
    su,
    repo,
    workspaceId,
    transcriptPath,
    env,
    config,
    queue,
    dispatch: (overrides) => dispatchJob(t.db, queue, job(overrides)),
    spawnWorker: (extra = {}) => spawned(spawnNode('scripts/worker.ts', [], { env: { ...env, ...extra } })),
    spawnStallDetector: (extra = {}) =>
      spawned(spawnNode('scripts/stall-detector.ts', [], { env: { ...env, ...extra } })),
    sweep: () => sweepStalledRuns({ config, db: t.db, queue, log }),
    run: async (id) => (await su`select * from agent_runs where id = ${id}`)[0]!,
    checkpoints: (id) => su`select * from worker_checkpoints where agent_run_id = ${id} order by checkpoint_seq`,
    events: (id, type) =>
      type
        ? su`select * from convoy_events where agent_run_id = ${id} and type = ${type} order by id`
        : su`select * from convoy_events where agent_run_id = ${id} order by id`,
    waitForStatus: (id, status, timeoutMs = 30_000) =>
      waitFor(
        async () => {
          const [row] = await su`select * from agent_runs where id = ${id}`;
          return row?.status === status ? row : undefined;
        },
        { timeoutMs, what: `run ${id} to be ${status}` },
      ),
    branchTree: async (id) => {
      const [row] = await su<{ branch: string }[]>`select branch from agent_runs where id = ${id}`;
      return git(repo, 'rev-parse', `refs/heads/${row!.branch}^{tree}`);
    },
    close: async () => {
      // Its processes first: a worker still running (making a spare worktree, say) writes into the
      // folders being removed, and the removal fails with ENOTEMPTY.
      await Promise.all(children.map((c) => c.stop('SIGKILL', 100)));
      await queue.close();
      await su.end({ timeout: 2 });
      await t.drop();
    },
  };
  return scenario;
}

/** Tool rounds that touch files, grep, read and run allowlisted commands: a small realistic brief. */
export function sampleSteps(delayMs = 20, rounds = 8): TranscriptStep[] {
  const all: TranscriptStep[] = [
    {
      toolCalls: [
        {
          toolName: 'write_file',
          input: {
            path: 'src/greet.ts',
            content: 'export function greet(name: string) {\n  return `hello ${name}`;\n}\n',
          },
        },
      ],
      delayMs,
    },
    { toolCalls: [{ toolName: 'grep', input: { pattern: 'greet' } }], delayMs },
    {
      toolCalls: [
        {
          toolName: 'write_file',
          input: {
            path: 'test/greet.test.ts',
            content: "import { greet } from '../src/greet';\nconsole.assert(greet('a') === 'hello a');\n",
          },
        },
      ],
      delayMs,
    },
    { toolCalls: [{ toolName: 'run_command', input: { command: 'git status' } }], delayMs },
    { toolCalls: [{ toolName: 'read_file', input: { path: 'src/greet.ts' } }], delayMs },
    {
      toolCalls: [
        {
          toolName: 'write_file',
          input: { path: 'src/index.ts', content: "export const answer = 42;\nexport { greet } from './greet';\n" },
        },
      ],
      delayMs,
    },
    { toolCalls: [{ toolName: 'run_command', input: { command: 'git diff --stat' } }], delayMs },
    {
      toolCalls: [{ toolName: 'write_file', input: { path: 'docs/greet.md', content: '# greet\n\nSays hello.\n' } }],
      delayMs,
    },
  ];
  const steps = all.slice(0, rounds);
  for (let i = all.length; i < rounds; i++) {
    steps.push({
      toolCalls: [
        { toolName: 'write_file', input: { path: `src/extra-${i}.ts`, content: `export const n${i} = ${i};\n` } },
      ],
      delayMs,
    });
  }
  return [...steps, { text: 'Done: greet module, its test and docs.' }];
}
