// npm run demo: the crash-and-resume story on embedded defaults.
// A worker runs a replay brief in its own worktree, checkpointing every round; the demo kills it
// with SIGKILL mid-brief; the stall detector re-dispatches; a new worker verifies the worktree
// against Postgres and the git notes, repairs what it must, and finishes the run.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfigOrExit, PROJECT_ROOT } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { dispatchJob } from '../operator/dispatch.ts';
import { git } from '../worker/git/run-git.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { createQueue } from '../worker/queue/index.ts';
import { describeSandbox, sandboxFor, sandboxOptionsFromConfig } from '../worker/sandbox/index.ts';
import { demoTranscript, DEMO_FILES } from './demo-brief.ts';
import { command, exitOnStartupError } from './cli.ts';

command({
  name: 'demo',
  summary:
    'the crash-and-resume story on embedded defaults: a worker runs a replay brief in its own worktree, ' +
    'checkpointing every round; the demo kills it with SIGKILL mid-brief; the stall detector re-dispatches; a new ' +
    'worker verifies the worktree against Postgres and the git notes, repairs what it must, and finishes the run. ' +
    'Prints a summary; the embedded PostgreSQL keeps running (npm run db -- down stops it).',
  usage: [''],
  flags: {},
  exitCodes: { 0: 'the story completed as told', 1: 'it did not (the summary says what differed)', 2: 'bad arguments' },
  env: [
    ['DATABASE_URL', 'Postgres (unset: the embedded PostgreSQL under ECHODO_HOME)'],
    ['ECHODO_HOME', "the embedded database, and the demo's repository, transcript and worktrees under demo/"],
    'REDIS_URL',
    'MISSION_CONTROL_PORT',
  ],
});
exitOnStartupError('demo');

const KILL_AFTER_ROUND = 4;
const say = (text: string) => process.stdout.write(`${text}\n`);
const config = loadConfigOrExit();
const home = path.resolve(config.ECHODO_HOME, 'demo');
const repo = path.join(home, 'repo');
const worktreeBase = path.join(home, 'worktrees');

say('echodo-worker demo: a brief, a SIGKILL, a verified resume\n');
await rm(home, { recursive: true, force: true });
await mkdir(repo, { recursive: true });
for (const [file, content] of Object.entries(DEMO_FILES)) {
  await mkdir(path.dirname(path.join(repo, file)), { recursive: true });
  await writeFile(path.join(repo, file), content);
}
await git(repo, 'init', '-q', '-b', 'main');
await git(repo, 'add', '-A');
await git(repo, '-c', 'user.name=demo', '-c', 'user.email=demo@localhost', 'commit', '-q', '-m', 'sample project');
const transcriptPath = path.join(home, 'transcript.json');
await writeFile(transcriptPath, JSON.stringify(demoTranscript(), null, 2));
say(`sample repo      ${repo}`);

const db = await openDatabase(config);
say(`postgres         ${config.DATABASE_URL ? 'DATABASE_URL' : `embedded, under ${config.ECHODO_HOME}`}`);
const queue = createQueue({ config, db, workerId: 'demo' });
say(`queue            ${queue.backend}`);
// The workers probe the same way; without bubblewrap the story still runs, its run_command rounds refused.
say(`sandbox          ${describeSandbox(await sandboxFor(sandboxOptionsFromConfig(config)))}\n`);
const workspaceId = 'demo';
await withWorkspace(db.app, workspaceId, (tx) => createWorkspace(tx, 'Demo workspace'));
const { agentRunId } = await dispatchJob(db, queue, {
  workspaceId,
  convoyId: 'demo-convoy',
  briefId: 'greeting',
  roleId: 'coder',
  harnessAlias: 'code',
  repoPath: repo,
  baseRef: 'main',
  brief: 'Add a greeting module, its test and a doc page.',
  model: `replay:${transcriptPath}`,
});
say(`dispatched run   ${agentRunId}`);

const childEnv = {
  ...process.env,
  WORKER_WORKTREE_BASE: worktreeBase,
  WORKER_REPO_ROOT: repo,
  WORKER_LEASE_MS: '3000',
  WORKER_HEARTBEAT_MS: '500',
  WORKER_REPLAY_DIR: home, // the demo's transcript is the only replay model its workers may read
  STALL_CHECK_MS: '500',
  WORKER_BLPOP_TIMEOUT_S: '1',
  LOG_LEVEL: 'info',
  ECHODO_SUPERVISE: '0', // the story kills a worker for good: no supervisor may bring it back
};
const children: ChildProcess[] = [];
let roundsRun = 0;
function start(script: string, name: string, onLog: (log: Record<string, any>) => void): ChildProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(PROJECT_ROOT, 'scripts', script)], {
    cwd: PROJECT_ROOT,
    env: { ...childEnv, WORKER_ID: name },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  for (const stream of [child.stdout!, child.stderr!]) {
    createInterface({ input: stream }).on('line', (line) => {
      try {
        onLog(JSON.parse(line));
      } catch {
        /* not a log line */
      }
    });
  }
  return child;
}
const onWorkerLog = (name: string, onRound?: (step: number) => void) => (log: Record<string, any>) => {
  if (log.msg === 'worktree created') say(`  ${name}  worktree created with git worktree add: ${log.worktreePath}`);
  if (log.msg === 'tool round done') {
    roundsRun++;
    say(`  ${name}  round ${log.step} done (${log.tools.join(', ')})`);
  }
  if (log.msg === 'checkpoint written') {
    say(`  ${name}  checkpoint ${log.seq} written: commit ${String(log.commitOid).slice(0, 10)}, row, git note`);
    onRound?.(log.step);
  }
  if (log.msg === 'worktree verified against Postgres and the git notes') {
    say(
      `  ${name}  resuming from checkpoint ${log.fromSeq}; verified: worktree exists, belongs to the repo, on the run's branch;`,
    );
    say(
      `           branch tip = checkpoint commit, git note matches the row, hash chain valid, touched files match their sha256`,
    );
    for (const f of log.findings) say(`           found:    ${f.kind}: ${f.detail}`);
    for (const r of log.repairs) say(`           repaired: ${r}`);
    if (!log.findings.length) say('           nothing to repair: the worktree is reused as it is');
  }
  if (log.msg === 'run completed') say(`  ${name}  run completed after ${log.steps} rounds`);
};

const first = start(
  'worker.ts',
  'worker-1',
  onWorkerLog('worker-1', (step) => {
    if (step === KILL_AFTER_ROUND) {
      // Mid-brief: the worker is inside its next model call ("thinking") when it is killed.
      setTimeout(() => {
        say(`\n  SIGKILL worker-1 (pid ${first.pid}) mid-brief, during round ${KILL_AFTER_ROUND + 1}\n`);
        first.kill('SIGKILL');
      }, 150);
    }
  }),
);
await new Promise((resolve) => first.once('exit', resolve));
say(`  stall detector  waiting for the lease (${childEnv.WORKER_LEASE_MS} ms) to expire…`);
start('stall-detector.ts', 'stall-detector', (log) => {
  if (log.msg?.startsWith('re-dispatched'))
    say(`  stall detector  ${log.msg} (attempt ${log.attempt}, resumeFromCheckpoint: true)`);
});
start('worker.ts', 'worker-2', onWorkerLog('worker-2'));

const deadline = Date.now() + 60_000;
let status = '';
while (Date.now() < deadline) {
  const [row] = await withWorkspace(
    db.app,
    workspaceId,
    (tx) => tx<{ status: string }[]>`select status from agent_runs where id = ${agentRunId}`,
  );
  status = row!.status;
  if (status === 'completed' || status === 'failed') break;
  await sleep(200);
}
for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');

const report = await checkRunIntegrity(db, config, workspaceId, agentRunId);
const [counts] = await withWorkspace(
  db.app,
  workspaceId,
  (tx) => tx<{ checkpoints: number; worktrees: number; attempt: number; step: number }[]>`
  select (select count(*)::int from worker_checkpoints where agent_run_id = ${agentRunId}) as checkpoints,
         (select count(*)::int from convoy_events where agent_run_id = ${agentRunId} and type = 'worktree_created') as worktrees,
         attempt, step from agent_runs where id = ${agentRunId}`,
);
say(`\n$ git -C ${report?.worktreePath} notes --ref=echodo-checkpoints show HEAD`);
say(await git(report!.worktreePath!, 'notes', '--ref=echodo-checkpoints', 'show', 'HEAD').catch((e) => String(e)));
say(`\n$ npm run integrity-check -- --workspace ${workspaceId} --run ${agentRunId}`);
say(
  report!.intact
    ? 'intact: worktree, Postgres and git notes agree'
    : report!.findings.map((f) => `DRIFT ${f.kind}: ${f.detail}`).join('\n'),
);

const token = await createWorkspaceToken(db.app, workspaceId);
say('\nsummary');
say(`  run status         ${status} (attempt ${counts!.attempt})`);
say(`  checkpoints        ${counts!.checkpoints} written (seq 1..${counts!.checkpoints})`);
say(`  rounds redone      ${roundsRun - counts!.step}`);
say(`  worktrees created  ${counts!.worktrees} (resume re-used it: no clone, no second worktree)`);
say(`  branch             echodo/greeting-${agentRunId.slice(0, 8)} in ${repo}`);
say(`\nthe embedded Postgres keeps running for later commands (npm run db -- down stops it)`);
say(
  `mission control: npm run mission-control, then open http://127.0.0.1:${config.MISSION_CONTROL_PORT}/convoys/demo-convoy`,
);
say(`  sign in with the demo workspace token: ${token}`);

await queue.close();
await db.close();
const ok = status === 'completed' && report!.intact && counts!.worktrees === 1 && counts!.attempt === 2;
process.exit(ok ? 0 : 1);
