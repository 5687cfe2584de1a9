// Benchmark 6: throughput of real worker processes (`node --import tsx scripts/worker.ts`,
// the Postgres queue, default logging) on runs of ROUNDS zero-delay write_file rounds, one
// checkpoint per round. The clock runs from the first dispatch (every worker already up and
// waiting) to the last run completed. CPU per worker is read from /proc/<pid>/stat over the
// same window: its own (utime + stime) and its reaped children's, the git processes it spawned.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { PROJECT_ROOT } from '../core/config.ts';
import { dispatchJob } from '../operator/dispatch.ts';
import { createQueue } from '../worker/queue/index.ts';
import type { BenchEnv } from './env.ts';
import { round, summarize, type Summary } from './stats.ts';

const TSX_LOADER = import.meta.resolve('tsx');
const CLOCK_TICKS = 100; // USER_HZ on Linux

export interface WorkerCpu {
  workerId: string;
  runs: number;
  cpuSeconds: number;
  childCpuSeconds: number;
}

export interface ThroughputResult {
  workers: number;
  runs: number;
  roundsPerRun: number;
  completed: number;
  failed: number;
  /** failure_reason of each failed run (a throughput run should have none). */
  failures: string[];
  wallSeconds: number;
  checkpoints: number;
  rounds: number;
  checkpointsPerSecond: number;
  roundsPerSecond: number;
  /** Share of the machine's CPU time busy over the window (all processes, /proc/stat). */
  machineBusy: number;
  perWorker: WorkerCpu[];
  /** Time between a run's consecutive checkpoints (ms): one round plus its checkpoint. */
  checkpointInterval: Summary;
  runSeconds: Summary;
}

interface ProcTimes {
  self: number;
  children: number;
}

function procTimes(pid: number): ProcTimes {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // After the comm field: state is fields[0], so utime (14th overall) is fields[11].
  const [utime, stime, cutime, cstime] = [11, 12, 13, 14].map((i) => Number(fields[i]));
  return { self: (utime! + stime!) / CLOCK_TICKS, children: (cutime! + cstime!) / CLOCK_TICKS };
}

function machineCpu(): { busy: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const idle = v[3]! + (v[4] ?? 0);
  const total = v.reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}

interface WorkerProcess {
  id: string;
  child: ChildProcess;
  ready: Promise<void>;
  exited: Promise<void>;
  tail: string[];
}

function spawnWorker(env: Record<string, string>, id: string): WorkerProcess {
  const child = spawn(process.execPath, ['--import', TSX_LOADER, path.join(PROJECT_ROOT, 'scripts/worker.ts')], {
    cwd: PROJECT_ROOT,
    env: { ...process.env, ...env, WORKER_ID: id },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const tail: string[] = [];
  let markReady!: () => void;
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  for (const stream of [child.stdout!, child.stderr!]) {
    createInterface({ input: stream }).on('line', (line) => {
      if (line.includes('worker started')) markReady();
      tail.push(line);
      if (tail.length > 20) tail.shift();
    });
  }
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => markReady());
  return { id, child, ready, exited, tail };
}

export async function measureThroughput(
  env: BenchEnv,
  repo: string,
  workers: number,
  roundsPerRun: number,
  runsPerWorker: number,
  log: (line: string) => void,
): Promise<ThroughputResult> {
  const dir = path.join(env.workDir, 'throughput');
  await mkdir(dir, { recursive: true });
  const transcriptPath = path.join(dir, `transcript-${roundsPerRun}.json`);
  const steps = [
    ...Array.from({ length: roundsPerRun }, (_, r) => ({
      toolCalls: [
        {
          toolName: 'write_file',
          input: {
            path: `src/bench/round-${String(r).padStart(3, '0')}.ts`,
            content: `export const round${r} = ${r};\n`.repeat(10),
          },
        },
      ],
    })),
    { text: 'done' },
  ];
  await writeFile(transcriptPath, JSON.stringify({ steps }));

  const workerEnv: Record<string, string> = {
    ...env.childEnv,
    REDIS_URL: '', // the Postgres queue: the bench needs no other service
    WORKER_REPO_ROOT: repo,
    WORKER_MAX_TOOL_STEPS: String(roundsPerRun + 10),
    WORKER_BLPOP_TIMEOUT_S: '1',
    LOG_LEVEL: 'info',
    ECHODO_FAULT: '',
  };
  const procs = Array.from({ length: workers }, (_, i) => spawnWorker(workerEnv, `bench-w${workers}-${i}`));
  try {
    await Promise.all(procs.map((p) => p.ready));
    for (const p of procs)
      if (p.child.exitCode !== null) throw new Error(`worker ${p.id} exited at start: ${p.tail.join('\n')}`);
    const queue = createQueue({
      config: { ...env.config, REDIS_URL: undefined },
      db: env.db,
      workerId: `bench-dispatch-${process.pid}`,
    });
    const convoyId = `bench-throughput-${workers}-${Date.now()}`;
    const cpu0 = new Map(procs.map((p) => [p.id, procTimes(p.child.pid!)]));
    const machine0 = machineCpu();
    const start = performance.now();
    const ids: string[] = [];
    for (let i = 0; i < workers * runsPerWorker; i++) {
      const { agentRunId } = await dispatchJob(env.db, queue, {
        workspaceId: env.workspaceId,
        convoyId,
        briefId: `tp-${workers}-${i}`,
        roleId: 'coder',
        harnessAlias: 'code',
        repoPath: repo,
        baseRef: 'main',
        brief: 'throughput benchmark',
        model: `replay:${transcriptPath}`,
      });
      ids.push(agentRunId);
    }
    const deadline = Date.now() + 10 * 60_000;
    for (;;) {
      const [row] = await env.su<
        { done: number }[]
      >`select count(*)::int as done from agent_runs where id = any(${ids}) and status in ('completed', 'failed')`;
      if (row!.done === ids.length) break;
      if (Date.now() > deadline)
        throw new Error(`throughput: runs not done after 10 minutes (${row!.done}/${ids.length})`);
      for (const p of procs)
        if (p.child.exitCode !== null) throw new Error(`worker ${p.id} died: ${p.tail.join('\n')}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    const wall = (performance.now() - start) / 1000;
    const machine1 = machineCpu();
    const cpu1 = new Map(procs.map((p) => [p.id, procTimes(p.child.pid!)]));
    await queue.close();

    const runs = await env.su<
      {
        id: string;
        status: string;
        step: number;
        worker_id: string | null;
        started_at: Date;
        finished_at: Date;
        failure_reason: string | null;
      }[]
    >`
      select id, status, step, worker_id, started_at, finished_at, failure_reason from agent_runs where id = any(${ids})`;
    const cps = await env.su<{ agent_run_id: string; occurred_at: Date }[]>`
      select agent_run_id, occurred_at from worker_checkpoints where agent_run_id = any(${ids}) order by agent_run_id, checkpoint_seq`;
    const intervals: number[] = [];
    for (let i = 1; i < cps.length; i++) {
      if (cps[i]!.agent_run_id === cps[i - 1]!.agent_run_id)
        intervals.push(cps[i]!.occurred_at.getTime() - cps[i - 1]!.occurred_at.getTime());
    }
    const rounds = runs.reduce((a, r) => a + r.step, 0);
    const result: ThroughputResult = {
      workers,
      runs: ids.length,
      roundsPerRun,
      completed: runs.filter((r) => r.status === 'completed').length,
      failed: runs.filter((r) => r.status === 'failed').length,
      failures: runs
        .filter((r) => r.status === 'failed')
        .map((r) => `${r.worker_id ?? '?'} at step ${r.step}: ${r.failure_reason ?? '(no reason)'}`),
      wallSeconds: round(wall),
      checkpoints: cps.length,
      rounds,
      checkpointsPerSecond: round(cps.length / wall, 1),
      roundsPerSecond: round(rounds / wall, 1),
      machineBusy: round((machine1.busy - machine0.busy) / Math.max(1, machine1.total - machine0.total)),
      perWorker: procs.map((p) => ({
        workerId: p.id,
        runs: runs.filter((r) => r.worker_id === p.id).length,
        cpuSeconds: round(cpu1.get(p.id)!.self - cpu0.get(p.id)!.self, 2),
        childCpuSeconds: round(cpu1.get(p.id)!.children - cpu0.get(p.id)!.children, 2),
      })),
      checkpointInterval: summarize(intervals),
      runSeconds: summarize(runs.map((r) => (r.finished_at.getTime() - r.started_at.getTime()) / 1000)),
    };
    log(
      `  ${workers} worker(s): ${result.completed}/${result.runs} runs, ${result.rounds} rounds in ${result.wallSeconds} s${result.failed ? `; failed: ${result.failures.join(' | ')}` : ''}`,
    );
    return result;
  } finally {
    for (const p of procs) if (p.child.exitCode === null) p.child.kill('SIGTERM');
    await Promise.race([Promise.all(procs.map((p) => p.exited)), new Promise((r) => setTimeout(r, 15_000))]);
    for (const p of procs) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  }
}
