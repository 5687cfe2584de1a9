// Many hosts under load: 3 hosts × 2 real worker processes (each host its own clone as
// WORKER_REPO_ROOT, its own WORKER_WORKTREE_BASE and WORKER_HOST_ID), one bare remote behind a real
// `git daemon`, one Postgres (and its queue), the stall detector running as its own process, and a
// worker on a random host SIGKILLed every few seconds and replaced. Every run completes; its seqs are
// 1..n with no duplicate or gap, written by one lease holder after another; every row's commit is
// reachable from the run's branch on the remote and its note is in the run's notes ref there; the
// final tree is the one the transcript's writes make; integrity is intact on the host that finished it;
// no host's remote standby holds anything once every run is over.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { waitFor, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { assertFinishedOnRemote, setUpHosts, stopProcesses, type Host, type Hosts } from './support/hosts.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';

const HOSTS = ['a', 'b', 'c'];
const WORKERS_PER_HOST = 2;
const RUNS = 20;
const ROUNDS = 20;
const KILL_EVERY_MS = [4000, 7000] as const;
// And at least this many checkpoints written (by any worker) since the last kill: on a quiet machine
// the clock decides; on a loaded one the kills slow down with the runs instead of outpacing them.
const CHECKPOINTS_PER_KILL = 20;
// Leases: a killed worker's run is handed on within seconds, while a worker slowed by the load (six
// workers, their git and the detector on two cores) still heartbeats well inside its lease.
const LEASE = { WORKER_LEASE_MS: '6000', WORKER_HEARTBEAT_MS: '500', STALL_CHECK_MS: '500' };
// No job is lost from the queue here: a run queued for a while is waiting for a free worker, and
// re-enqueuing it every minute would only add deliveries to skip.
const STALL_QUEUED_MS = '120000';
// The remote standby on (test/support/hosts.ts turns it off): a take-over resumes from what it holds
// when it is current, and fetches when it is not; both happen here.
const STANDBY = { WORKER_REMOTE_STANDBY_MS: '2000' };

/** Every round writes: new files, and one file rewritten every round (so every checkpoint has content). */
function writingSteps(rounds: number): TranscriptStep[] {
  const steps: TranscriptStep[] = [];
  for (let i = 1; i <= rounds; i++) {
    const toolCalls = [
      { toolName: 'write_file', input: { path: 'src/progress.ts', content: `export const round = ${i};\n` } },
    ];
    if (i % 2)
      toolCalls.push({
        toolName: 'write_file',
        input: { path: `src/part-${i}.ts`, content: `export const part${i} = '${'x'.repeat(i * 40)}';\n` },
      });
    steps.push({ toolCalls, delayMs: 10 });
  }
  return [...steps, { text: 'Done.' }];
}

/** The tree the transcript's writes make on `base`, computed with git alone (no worker involved). */
async function expectedTree(repo: string, base: string, steps: TranscriptStep[]): Promise<string> {
  const index = `${repo}/.git/expected-index-${process.pid}`;
  const env = { ...process.env, GIT_INDEX_FILE: index };
  execFileSync('git', ['read-tree', base], { cwd: repo, env });
  const files = new Map<string, string>();
  for (const step of steps)
    for (const call of step.toolCalls ?? []) files.set(String(call.input.path), String(call.input.content));
  for (const [file, content] of files) {
    const oid = execFileSync('git', ['hash-object', '-w', '--stdin'], { cwd: repo, input: content }).toString().trim();
    execFileSync('git', ['update-index', '--add', '--cacheinfo', `100644,${oid},${file}`], { cwd: repo, env });
  }
  return execFileSync('git', ['write-tree'], { cwd: repo, env }).toString().trim();
}

/**
 * A worker in the middle of a run that has written a checkpoint since it started: every kill then
 * comes after some progress (a resume redoes at most one round), so however loaded the machine,
 * the kills can never outpace the runs, and every kill lands inside a run.
 */
function pickVictim(live: Child[]): Child | undefined {
  const candidates = live.filter((w) => {
    if (!w.lines.some((l) => l.includes('"checkpoint written"'))) return false;
    const last = w.lines.findLast(
      (l) =>
        /"msg":"(run started|run resumed|run completed|lease lost[^"]*|stopped on request[^"]*)"/.test(l) ||
        l.includes('releasing the run'),
    );
    return !!last && /"run (started|resumed)"/.test(last);
  });
  return candidates[Math.floor(Math.random() * candidates.length)];
}

let s: Scenario;
let hosts: Hosts;
const children: Child[] = [];
const steps = writingSteps(ROUNDS);

before(async () => {
  s = await createScenario({
    steps,
    env: { ...LEASE, STALL_QUEUED_MS, STALL_MAX_ATTEMPTS: '100', WORKER_MAX_TOOL_STEPS: String(ROUNDS + 2) },
  });
  hosts = await setUpHosts(s, HOSTS);
});

after(async () => {
  await stopProcesses(children);
  await hosts?.close();
  await s?.close();
});

test(
  `many hosts under load: ${HOSTS.length} hosts × ${WORKERS_PER_HOST} workers, ${RUNS} runs of ${ROUNDS} rounds, a worker killed every few seconds`,
  { timeout: 880_000 },
  async () => {
    const started = Date.now();
    const baseline = await expectedTree(s.repo, 'main', steps);
    const ids: string[] = [];
    // Jobs leave repoPath out: each host serves them from its own WORKER_REPO_ROOT.
    for (let i = 0; i < RUNS; i++) ids.push((await s.dispatch({ repoPath: undefined })).agentRunId);
    const detector = s.spawnStallDetector();
    children.push(detector);

    const pools = new Map<Host, Child[]>(Object.values(hosts.byName).map((h) => [h, []]));
    const alive = (w: Child) => w.process.exitCode === null && w.process.signalCode === null;
    const refill = () => {
      for (const [host, pool] of pools) {
        pool.splice(0, pool.length, ...pool.filter(alive));
        while (pool.length < WORKERS_PER_HOST) {
          const w = s.spawnWorker({ ...host.env, ...STANDBY });
          children.push(w);
          pool.push(w);
        }
      }
    };
    refill();

    let kills = 0;
    let nextKill = Date.now() + KILL_EVERY_MS[0];
    let checkpointsAtKill = 0;
    for (;;) {
      const rows = await s.su<{ status: string }[]>`select status from agent_runs where id in ${s.su(ids)}`;
      if (rows.every((r) => r.status === 'completed' || r.status === 'failed')) break;
      const [{ n: checkpoints }] = await s.su<
        { n: number }[]
      >`select count(*)::int as n from worker_checkpoints where agent_run_id in ${s.su(ids)}`;
      if (Date.now() - started > 840_000)
        assert.fail(`not finished after ${checkpoints} checkpoints: ${JSON.stringify(rows.map((r) => r.status))}`);
      if (!alive(detector)) assert.fail(`the stall detector exited:\n${detector.lines.slice(-20).join('\n')}`);
      if (Date.now() >= nextKill && checkpoints - checkpointsAtKill >= CHECKPOINTS_PER_KILL) {
        // A random host with a worker to kill (see pickVictim), then a random such worker on it.
        const choices = HOSTS.map((h) => pools.get(hosts.byName[h]!)!.filter(alive)).filter((live) => pickVictim(live));
        const victim = choices.length ? pickVictim(choices[Math.floor(Math.random() * choices.length)]!) : undefined;
        if (victim) {
          victim.kill('SIGKILL');
          kills++;
          checkpointsAtKill = checkpoints;
          nextKill = Date.now() + KILL_EVERY_MS[0] + Math.random() * (KILL_EVERY_MS[1] - KILL_EVERY_MS[0]);
        }
      }
      refill(); // killed workers (and any that exited) are replaced on their host
      await new Promise((r) => setTimeout(r, 200));
    }
    const wallMs = Date.now() - started;

    const runs = await s.su<
      { id: string; attempt: number }[]
    >`select id, attempt from agent_runs where id in ${s.su(ids)}`;
    const rows = await s.su<{ agent_run_id: string; checkpoint_seq: number; lease_epoch: number }[]>`
    select agent_run_id, checkpoint_seq, lease_epoch from worker_checkpoints where agent_run_id in ${s.su(ids)} order by agent_run_id, checkpoint_seq`;
    const finishedOn = new Map<string, number>();
    for (const run of runs) {
      // Completed, seqs 1..n, the expected tree here and on the remote, every commit and note on the remote, integrity.
      const host = await assertFinishedOnRemote(s, hosts, run.id, ROUNDS, baseline);
      finishedOn.set(host.id, (finishedOn.get(host.id) ?? 0) + 1);
      // Fencing: once a newer lease holder wrote, no older one ever wrote again.
      const mine = rows.filter((r) => r.agent_run_id === run.id);
      for (let i = 1; i < mine.length; i++)
        assert.ok(mine[i]!.lease_epoch >= mine[i - 1]!.lease_epoch, `run ${run.id} written by two lease holders`);
    }
    const moves = await s.su<{ n: number }[]>`
    select count(*)::int as n from convoy_events
     where agent_run_id in ${s.su(ids)} and type = 'run_resumed' and metadata->>'fromHost' <> metadata->>'toHost'`;
    const [{ n: fromStandby }] = await s.su<{ n: number }[]>`
    select count(*)::int as n from convoy_events
     where agent_run_id in ${s.su(ids)} and type = 'run_resumed' and metadata->>'standby' = 'true'`;
    const resumes = runs.reduce((n, r) => n + r.attempt - 1, 0);
    const hostsUsed = JSON.stringify(Object.fromEntries(finishedOn));
    console.log(
      `many-hosts load: ${RUNS} runs, ${RUNS * ROUNDS} rounds, ${kills} kills, ${resumes} resumes, ${moves[0]!.n} across hosts (${fromStandby} from the standby), finished on ${hostsUsed}, wall ${(wallMs / 1000).toFixed(1)} s`,
    );
    // Every run is over: no host's standby holds anything after its next sweeps.
    for (const host of Object.values(hosts.byName)) {
      const held = () => git(host.repo, 'for-each-ref', 'refs/echodo-standby/');
      await waitFor(async () => (await held()) === '', { timeoutMs: 30_000, intervalMs: 200 }).catch(async () =>
        assert.fail(`standby refs left on ${host.id}: ${await held()}`),
      );
    }
    assert.ok(kills > 0, 'workers were killed');
    assert.ok(moves[0]!.n > 0, 'runs resumed on another host');
  },
);
