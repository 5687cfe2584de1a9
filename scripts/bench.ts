// npm run bench: the benchmarks of docs/benchmarks.md (the description below is its --help).
// Not a test: nothing here asserts a speed; the targets are reported, met or not.
import { spawnSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  createFloorWorktree,
  ensureFloorTable,
  measureCheckpointCost,
  profileGitParts,
  writeCheckpointInParts,
  type RowPayload,
} from '../bench/checkpoint-cost.ts';
import { openBenchEnv } from '../bench/env.ts';
import { createRunFixture } from '../bench/fixture.ts';
import { measureIntegrity, profileIntegrity } from '../bench/integrity.ts';
import { measureLongRun, type LongRunResult } from '../bench/long-run.ts';
import { measureRounds, type RoundsResult } from '../bench/rounds.ts';
import { machineInfo, versions } from '../bench/machine.ts';
import { measureMissionControl } from '../bench/mission-control.ts';
import { measureOutageRecovery, type OutageFigure } from '../bench/outage.ts';
import { measurePeers } from '../bench/peers.ts';
import { createGitPeers } from '../bench/peers-git.ts';
import { BENCH_TMP, ensurePristineRepo, HISTORY_COMMITS, spreadPaths, workingRepo } from '../bench/repos.ts';
import { measureRemote } from '../bench/remote.ts';
import { measureResume } from '../bench/resume.ts';
import {
  evaluateTargets,
  renderTables,
  type BenchResults,
  type CheckpointFigure,
  type IntegrityFigure,
  type MissionControlFigure,
  type McRead,
  type ResumeFigure,
  MC_READS,
  worstMissionControlRatio,
} from '../bench/results.ts';
import { ratio, round, Samples } from '../bench/stats.ts';
import { measureThroughput, type ThroughputResult } from '../bench/throughput.ts';
import { measureWholeCost, type WholeCostResult } from '../bench/whole-cost.ts';
import { measureUsageMetrics, type UsageMetricsFigure } from '../bench/usage-metrics.ts';
import { PROJECT_ROOT } from '../core/config.ts';
import { runGit } from '../worker/git/run-git.ts';
import { command } from './cli.ts';

const PROFILE_PARTS = ['load', 'verifyChain', 'statusV2', 'notesBatch', 'hashFiles'] as const;
const GIT_PARTS = ['updateIndex', 'writeTree', 'commitTree', 'updateRef', 'noteCommonDir', 'noteRefLookup'] as const;
const MC_READ_KEYS = Object.keys(MC_READS) as McRead[];
const BENCHES = [
  'checkpoint',
  'integrity',
  'resume',
  'peers',
  'throughput',
  'mission-control',
  'long-run',
  'rounds',
  'remote',
  'outage',
  'whole-cost',
  'usage-metrics',
] as const;
type BenchName = (typeof BENCHES)[number];

const { values: args, fail } = command({
  name: 'bench',
  summary:
    'runs the benchmarks of docs/benchmarks.md on a fresh embedded PostgreSQL (or a fresh database next to ' +
    'DATABASE_URL), prints the tables and writes bench/results.json. Ctrl-C or SIGTERM stops it, leaving no ' +
    'server or temp folder behind.',
  usage: [
    '[-- [--quick] [--only=NAME,…] [--out=FILE] [--sizes=N,…] [--samples=N] [--long-run-checkpoints=N] ' +
      '[--remote-transport=git|http]]',
    '-- --render [--file=FILE]',
  ],
  flags: {
    quick: { type: 'boolean', help: 'a small plan (minutes); writes bench/tmp/results.quick.json' },
    only: { type: 'string', value: 'NAME,…', help: `only these benches, of: ${BENCHES.join(', ')}` },
    out: {
      type: 'string',
      value: 'FILE',
      help: 'the results file (default bench/results.json; with --only bench/results.NAMES.json)',
    },
    sizes: { type: 'string', value: 'N,…', help: 'repository sizes in files (default 1000,10000,50000,250000)' },
    samples: { type: 'string', value: 'N', help: 'fewer samples everywhere, for a loaded machine' },
    'long-run-checkpoints': { type: 'string', value: 'N', help: 'a shorter long run (same repository and changes)' },
    'rounds-files': { type: 'string', value: 'N', help: 'the rounds bench on a repository of N files (default 10000)' },
    'remote-transport': { type: 'string', value: 'git|http', help: 'how the many-hosts bench serves its remotes' },
    render: { type: 'boolean', help: 're-judge the targets of a results file and print its tables; measures nothing' },
    file: { type: 'string', value: 'FILE', help: '--render: the results file (default bench/results.json)' },
  },
  exitCodes: {
    0: 'done: tables printed, results written',
    1: 'a bench failed',
    2: 'bad arguments',
    130: 'stopped by SIGINT (143: SIGTERM), the database stopped and the temp folders removed',
  },
  env: [
    ['DATABASE_URL', 'a server to bench on (a fresh database is made next to it); unset: a fresh embedded PostgreSQL'],
    'LOG_LEVEL',
  ],
});
const positiveInt = (flag: string, text: string | undefined): number | undefined => {
  if (text === undefined) return undefined;
  if (!/^[1-9]\d{0,8}$/.test(text)) fail(`--${flag} takes a positive whole number, not "${text}"`);
  return Number(text);
};
const unknownBenches = (args.only ?? '').split(',').filter((name) => name && !BENCHES.includes(name as BenchName));
if (unknownBenches.length) {
  fail(`unknown benchmark "${unknownBenches.join('", "')}" in --only; choose from ${BENCHES.join(', ')}`);
}
if (args.only !== undefined && !args.only.split(',').some(Boolean)) fail('--only names no benchmark');
const transportArg = args['remote-transport'] ?? 'git';
if (transportArg !== 'git' && transportArg !== 'http') {
  fail(`--remote-transport must be git or http, not "${transportArg}"`);
}
const sizesList = args.sizes?.split(',').map((n) => positiveInt('sizes', n)!);
const samplesArg = positiveInt('samples', args.samples);
const longRunArg = positiveInt('long-run-checkpoints', args['long-run-checkpoints']);
const roundsFilesArg = positiveInt('rounds-files', args['rounds-files']);
if (args.file !== undefined && !args.render) fail('--file goes with --render');

if (args.render) {
  // Re-judges the targets of a results file and prints its tables again; measures nothing.
  const file = args.file ?? path.join(PROJECT_ROOT, 'bench', 'results.json');
  const stored = JSON.parse(await readFile(file, 'utf8')) as BenchResults;
  const { targets: _old, ...rest } = stored;
  const judged: BenchResults = { ...rest, targets: evaluateTargets(rest) };
  await writeFile(file, JSON.stringify(judged, null, 2) + '\n');
  process.stdout.write(`${renderTables(judged)}\n`);
  process.exit(0);
}
const quick = args.quick ?? false;
const only = new Set<BenchName>(args.only ? (args.only.split(',').filter(Boolean) as BenchName[]) : BENCHES);

const plan = quick
  ? {
      sizes: [1_000, 10_000],
      touches: [1, 10],
      samples: 5,
      remoteResumeSamples: 5,
      mcRows: [10_000, 100_000],
      workers: [1, 2],
      rounds: 10,
      runsPerWorker: 1,
      longRun: { files: 1_000, checkpoints: 200, changed: 10 },
      longRounds: { files: 1_000, rounds: 200, changed: 10 },
    }
  : {
      sizes: [1_000, 10_000, 50_000],
      touches: [1, 10, 100],
      samples: 30,
      remoteResumeSamples: 10,
      mcRows: [10_000, 100_000, 1_000_000],
      workers: [1, 2, 4],
      rounds: 50,
      runsPerWorker: 2,
      longRun: { files: 10_000, checkpoints: 2_000, changed: 10 },
      longRounds: { files: 10_000, rounds: 2_000, changed: 10 },
    };

// The repository sizes, for the checkpoint, integrity and resume benches: the plan's and
// 250k files (where Cline users report 20 s per checkpoint), with fewer samples there (one
// `git status` is ~0.5 s, one clone a minute). --sizes=1000,10000 picks some.
// --remote-transport=http: the many-hosts bench serves its remotes over git's smart HTTP instead of git://.
const remoteTransport = transportArg as 'git' | 'http';
const repoSizes = sizesList ?? (quick ? plan.sizes : [...plan.sizes, 250_000]);
const SAMPLES_AT: Record<number, { checkpoint: number; resume: number }> = { 250_000: { checkpoint: 10, resume: 5 } };
// --samples=N: fewer samples everywhere, for a machine too loaded to run the full plan in time.
if (samplesArg) plan.samples = samplesArg;
// --long-run-checkpoints=N: a shorter long run (same repository and changes), for iterating on it.
if (longRunArg) plan.longRun.checkpoints = longRunArg;
// --rounds-files=N: the rounds bench on a smaller repository, for a machine too loaded for 10k files.
if (roundsFilesArg) plan.longRounds.files = roundsFilesArg;
const samplesAt = (files: number, kind: 'checkpoint' | 'resume') =>
  Math.min(plan.samples, SAMPLES_AT[files]?.[kind] ?? plan.samples);

const log = (line: string) => process.stdout.write(`${line}\n`);
/** Between phases: flush Postgres' and the kernel's dirty pages so one phase's writeback is not charged to the next. */
const settle = async () => {
  await env.su`checkpoint`;
  spawnSync('sync');
};
const started = performance.now();
const machineAtStart = machineInfo();
const since = () => `${((performance.now() - started) / 1000).toFixed(0)} s`;

const env = await openBenchEnv(log);
const s = new Samples();
const checkpoint: CheckpointFigure[] = [];
const integrity: IntegrityFigure[] = [];
const resume: ResumeFigure[] = [];
const repos = new Map<number, string>();
let payload: RowPayload | undefined;
let peerFixture: Awaited<ReturnType<typeof createRunFixture>> | undefined;
let results: BenchResults | undefined;

/** A working clone of the cached repo with `files` files (and `history` commits), for one phase of the bench. */
async function freshRepo(files: number, phase: string, history = HISTORY_COMMITS): Promise<string> {
  const repo = await workingRepo(
    await ensurePristineRepo(files, log, { history }),
    path.join(env.workDir, `repo-${files}-${phase}`),
  );
  // Loose objects pile up over hundreds of commits; an auto gc in the middle of a sample would
  // measure git's housekeeping, not a commit.
  await runGit(repo, ['config', 'gc.auto', '0']);
  return repo;
}

try {
  await ensureFloorTable(env);
  for (const files of repoSizes) {
    const repo = await freshRepo(files, 'checkpoint');
    repos.set(files, repo);
    if (only.has('checkpoint') || only.has('integrity')) {
      // One run per size; the touched sets nest (1 ⊂ 10 ⊂ 100), so the run's files_touched is
      // exactly the touched count in each phase.
      const f = await createRunFixture(env, repo);
      const floor = await createFloorWorktree(env, repo, `f${files}`);
      // Cline-style and OpenCode-style snapshots of the floor worktree (bench/peers-git.ts).
      const gitPeers = only.has('checkpoint')
        ? await createGitPeers(repo, floor.path, path.join(env.workDir, 'peers-git', String(files)))
        : undefined;
      const samples = samplesAt(files, 'checkpoint');
      for (const touched of plan.touches) {
        const key = `cp.${files}.${touched}`;
        const paths = spreadPaths(files, touched);
        const cost = await measureCheckpointCost(env, f, floor, paths, samples, s, key, gitPeers);
        if (files === 10_000 && touched === 10) payload = cost.lastPayload;
        payload ??= cost.lastPayload;
        peerFixture = f;
        if (only.has('checkpoint')) {
          const insert = s.summary(`${key}.floorInsert`);
          const gitCommit = s.summary(`${key}.floorGit`);
          const total = s.summary(`${key}.total`);
          const cline = s.summary(`${key}.cline`);
          const opencode = s.summary(`${key}.opencode`);
          checkpoint.push({
            files,
            touched,
            payloadBytes: cost.payloadBytes,
            total,
            behind: s.summary(`${key}.behind`),
            parts: {
              fence: s.summary(`${key}.fence`),
              content: s.summary(`${key}.content`),
              hash: s.summary(`${key}.hash`),
              row: s.summary(`${key}.row`),
              note: s.summary(`${key}.note`),
              partsSum: s.summary(`${key}.partsSum`),
              indexBehind: s.summary(`${key}.indexBehind`),
            },
            floors: { insert, gitCommit, sumOfMedians: round(insert.median + gitCommit.median) },
            withoutNote: s.summary(`${key}.withoutNote`),
            gitParts: {},
            gitSpawn: s.summary(`${key}.gitSpawn`),
            ratioToFloors: ratio(total.median, insert.median + gitCommit.median),
            withoutNoteRatioToFloors: ratio(s.summary(`${key}.withoutNote`).median, insert.median + gitCommit.median),
            samples,
            gitPeers: {
              cline,
              opencode,
              oursOverCline: ratio(total.median, cline.median),
              oursOverOpencode: ratio(total.median, opencode.median),
            },
          });
          log(
            `checkpoint ${files} files / ${touched} touched: ${total.median.toFixed(1)} ms vs floors ${(insert.median + gitCommit.median).toFixed(1)} ms, Cline-style ${cline.median.toFixed(1)} ms, OpenCode-style ${opencode.median.toFixed(1)} ms (${since()})`,
          );
        }
        if (only.has('integrity')) {
          const ikey = `int.${files}.${touched}`;
          const report = await measureIntegrity(env, f, samples, s, ikey);
          await profileIntegrity(env, f, Math.min(10, samples), s, ikey);
          const check = s.summary(`${ikey}.check`);
          const gitStatus = s.summary(`${ikey}.gitStatus`);
          const profile = Object.fromEntries(PROFILE_PARTS.map((p) => [p, s.summary(`${ikey}.profile.${p}`)]));
          integrity.push({
            files,
            touched: report.filesTouched,
            checkpoints: report.checkpoints,
            intact: report.intact,
            findings: report.findings,
            check,
            gitStatus,
            ratioToGitStatus: ratio(check.median, gitStatus.median),
            profile,
          });
          log(
            `integrity ${files} files / ${report.filesTouched} touched: ${check.median.toFixed(1)} ms vs git status ${gitStatus.median.toFixed(1)} ms (${since()})`,
          );
        }
        if (only.has('checkpoint')) {
          await profileGitParts(env, f, paths, samples, s, key);
          checkpoint.at(-1)!.gitParts = Object.fromEntries(GIT_PARTS.map((p) => [p, s.summary(`${key}.git.${p}`)]));
        }
      }
    }
  }

  // The payload of a steady-state checkpoint (10k files / 10 touched when measured), for the
  // peers and the mission-control rows; made now if the checkpoint bench did not run.
  if ((only.has('peers') || only.has('mission-control')) && (!payload || !peerFixture)) {
    const files = repoSizes.includes(10_000) ? 10_000 : repoSizes[0]!;
    peerFixture = await createRunFixture(env, repos.get(files)!);
    await peerFixture.playRound(spreadPaths(files, 10));
    payload = await writeCheckpointInParts(env, peerFixture, new Samples(), 'payload');
  }

  await settle();
  let peers: BenchResults['peers'] = null;
  if (only.has('peers')) {
    const r = await measurePeers(env, peerFixture!, payload!, plan.samples, s, log);
    const ours = s.summary('peers.ours');
    const lg = s.summary('peers.langgraphPut');
    const dbos = r.dbos.ok ? s.summary('peers.dbosStep') : null;
    peers = {
      payloadBytes: r.payloadBytes,
      ours,
      floorInsert: s.summary('peers.floorInsert'),
      langgraphPut: lg,
      dbosStep: dbos,
      dbos: r.dbos,
      oursOverLanggraph: ratio(ours.median, lg.median),
      oursOverDbos: dbos ? ratio(ours.median, dbos.median) : null,
      oursOverFloor: ratio(ours.median, s.summary('peers.floorInsert').median),
      profile: {
        emptyTx: s.summary('peers.profile.emptyTx'),
        insertOnly: s.summary('peers.profile.insertOnly'),
        leaseUpdateOnly: s.summary('peers.profile.leaseUpdateOnly'),
        fencedInsertForShare: s.summary('peers.profile.fencedInsertForShare'),
      },
      forShareOverLanggraph: ratio(s.summary('peers.profile.fencedInsertForShare').median, lg.median),
    };
    log(
      `peers: ours ${ours.median.toFixed(2)} ms, LangGraph put ${lg.median.toFixed(2)} ms${dbos ? `, DBOS step ${dbos.median.toFixed(2)} ms` : ''} (${since()})`,
    );
  }

  const throughput: ThroughputResult[] = [];
  if (only.has('throughput')) {
    const repo = await freshRepo(plan.sizes[0]!, 'throughput');
    for (const workers of plan.workers)
      throughput.push(await measureThroughput(env, repo, workers, plan.rounds, plan.runsPerWorker, log));
    log(`throughput done (${since()})`);
  }

  await settle();
  // Resume after the latency figures: its clones write gigabytes, whose writeback would disturb them.
  for (const files of repoSizes) {
    if (only.has('resume')) {
      // A fresh clone of the cached repo: the checkpoint bench left thousands of loose objects in
      // the shared one, which `git clone --no-local` would have to pack, slowing the baseline.
      const repo = await freshRepo(files, 'resume');
      const key = `resume.${files}`;
      // The same repo with one commit of history (the layout of the first benches): its clone,
      // interleaved with the others, shows what history costs a clone. Not at 250k (minutes per clone).
      const flat = files < 250_000 ? await freshRepo(files, 'resume-flat', 0) : undefined;
      const r = await measureResume(env, repo, files, samplesAt(files, 'resume'), s, key, flat);
      const fig: ResumeFigure = {
        files,
        rounds: r.rounds,
        outcomes: r.outcomes,
        resume: s.summary(`${key}.resume`),
        resumeNoWatcher: s.summary(`${key}.resumeNoWatcher`),
        verifyOnly: s.summary(`${key}.verifyOnly`),
        clone: s.summary(`${key}.clone`),
        cloneAndRedo: s.summary(`${key}.cloneAndRedo`),
        history: HISTORY_COMMITS,
        samples: samplesAt(files, 'resume'),
        ...(flat ? { cloneNoHistory: s.summary(`${key}.cloneNoHistory`) } : {}),
        speedupVsClone: 0,
        speedupVsCloneAndRedo: 0,
        speedupNoWatcherVsClone: 0,
        timeline: r.timeline,
      };
      fig.speedupVsClone = ratio(fig.clone.median, fig.resume.median);
      fig.speedupVsCloneAndRedo = ratio(fig.cloneAndRedo.median, fig.resume.median);
      fig.speedupNoWatcherVsClone = ratio(fig.clone.median, fig.resumeNoWatcher.median);
      if (fig.cloneNoHistory) fig.speedupVsCloneNoHistory = ratio(fig.cloneNoHistory.median, fig.resume.median);
      resume.push(fig);
      log(
        `resume ${files} files: ${fig.resume.median.toFixed(1)} ms vs clone ${fig.clone.median.toFixed(1)} ms (${since()})`,
      );
    }
  }

  await settle();
  // Many hosts (bench/remote.ts): after resume, for the same reason (its clones).
  const remoteSizes = (sizesList ? repoSizes : plan.sizes).filter((n) => n <= 50_000);
  const remotePlan = { ...plan, sizes: remoteSizes, transport: remoteTransport };
  const remote = only.has('remote') ? await measureRemote(env, remotePlan, s, log, since) : undefined;

  await settle();
  let longRun: LongRunResult | undefined;
  if (only.has('long-run')) {
    const { files, checkpoints, changed } = plan.longRun;
    const repo = await freshRepo(files, 'long-run');
    longRun = await measureLongRun(
      env,
      repo,
      {
        files,
        checkpoints,
        changed,
        at: [1, 100, 1_000, 2_000].filter((n) => n <= checkpoints).concat(checkpoints < 2_000 ? [checkpoints] : []),
      },
      log,
    );
    const at = Object.entries(longRun.timeAt)
      .map(([seq, t]) => `seq ${seq} ${t.median.toFixed(1)} ms`)
      .join(', ');
    log(
      `long run ${checkpoints} checkpoints / ${files} files / ${changed} changed: ${at}; Postgres ${longRun.postgresBytesPerCheckpoint} B/checkpoint, git ${longRun.gitBytesPerCheckpoint} B/checkpoint, ${longRun.looseObjectsAtEnd} loose objects, ${longRun.packsAtEnd} packs (${since()})`,
    );
  }

  await settle();
  // Rounds of one run through the live loop, timed from outside (bench/rounds.ts).
  let rounds: RoundsResult | undefined;
  if (only.has('rounds')) {
    const { files, rounds: n, changed } = plan.longRounds;
    // Early windows against the last 50 rounds (each window once, in order, within the run).
    const windows = (
      [
        [51, 100],
        [351, 400],
        [951, 1_000],
        [n - 49, n],
      ] as Array<[number, number]>
    )
      .filter(([from, to]) => from >= 1 && to <= n)
      .filter(([from], i, all) => i === 0 || from > all[i - 1]![1]);
    rounds = await measureRounds(env, await freshRepo(files, 'rounds'), { files, rounds: n, changed, windows }, log);
    const at = rounds.windows.map((w) => `rounds ${w.from}–${w.to} ${w.time.median.toFixed(1)} ms`).join(', ');
    log(`rounds ${n} / ${files} files / ${changed} written: ${at}; ${rounds.ratioLastToFirst}× (${since()})`);
  }

  await settle();
  const missionControl: MissionControlFigure[] = [];
  if (only.has('mission-control')) {
    const levels = await measureMissionControl(env, plan.mcRows, plan.samples, payload!, s, log);
    plan.mcRows.forEach((rows, i) =>
      missionControl.push({
        ...levels[i]!,
        ...Object.fromEntries(MC_READ_KEYS.map((read) => [read, s.summary(`mc.${rows}.${read}`)])),
      } as MissionControlFigure),
    );
    log(`mission control done (${since()})`);
  }

  let outage: OutageFigure | undefined;
  if (only.has('outage')) {
    outage = await measureOutageRecovery(log, { samples: quick ? 2 : plan.samples >= 10 ? 5 : 3 });
    log(
      `outage: lapsed runs running again ${outage.recovery.median.toFixed(0)} ms (median) after Postgres answered, ${outage.recoveryOverLease}× the lease (${since()})`,
    );
  }

  await settle();
  let wholeCost: WholeCostResult | undefined;
  if (only.has('whole-cost')) {
    // A fresh run's rounds at 10k files (the steady state's size), through the real writer, settle included.
    const files = 10_000;
    const repetitions = quick ? 3 : Math.min(plan.samples, 9);
    const [repo, floorRepo] = [await freshRepo(files, 'whole-cost'), await freshRepo(files, 'whole-cost-floor')];
    wholeCost = await measureWholeCost(
      env,
      repo,
      floorRepo,
      { files, rounds: 40, changed: 10, repetitions },
      settle,
      log,
    );
    const [ours, floor] = [wholeCost.cost.ours, wholeCost.cost.floor].map((c) => c.median.toFixed(0));
    log(`whole cost: ours ${ours} ms vs floor ${floor} ms = ${wholeCost.ratio}× (${since()})`);
  }

  await settle();
  let usageMetrics: UsageMetricsFigure | undefined;
  if (only.has('usage-metrics')) {
    // Usage recording and metrics on against off, alternately on one run at 10k files.
    const files = 10_000;
    const u = await measureUsageMetrics(env, await freshRepo(files, 'usage-metrics'), {
      files,
      touched: 10,
      pairs: quick ? 20 : 100,
    });
    usageMetrics = u;
    log(
      `usage and metrics: on ${u.on.median.toFixed(2)} ms vs off ${u.off.median.toFixed(2)} ms = ${u.ratio}× (${since()})`,
    );
  }

  const mcRatio = missionControl.length > 1 ? (worstMissionControlRatio(missionControl)?.ratio ?? null) : null;

  const partial: Omit<BenchResults, 'targets'> = {
    generatedAt: new Date().toISOString(),
    mode: quick ? 'quick' : 'full',
    durationSeconds: Math.round((performance.now() - started) / 1000),
    machine: { ...machineAtStart, loadAverageAtEnd: machineInfo().loadAverage },
    versions: versions(env.serverVersion),
    database: { embedded: env.embedded, server: env.serverVersion },
    plan: { ...plan, repoSizes, samplesAt: SAMPLES_AT, historyCommits: HISTORY_COMMITS, only: [...only] },
    checkpoint,
    integrity,
    resume,
    peers,
    missionControl,
    missionControlRatio: mcRatio,
    throughput,
    ...(longRun ? { longRun } : {}),
    ...(rounds ? { rounds } : {}),
    ...(remote ? { remote } : {}),
    ...(outage ? { outage } : {}),
    ...(wholeCost ? { wholeCost } : {}),
    ...(usageMetrics ? { usageMetrics } : {}),
  };
  results = { ...partial, targets: evaluateTargets(partial) };
  const out = args.out
    ? path.resolve(args.out)
    : quick
      ? path.join(BENCH_TMP, 'results.quick.json')
      : args.only
        ? path.join(PROJECT_ROOT, 'bench', `results.${[...only].join('+')}.json`) // a partial run never overwrites the full one
        : path.join(PROJECT_ROOT, 'bench', 'results.json');
  await writeFile(out, JSON.stringify(results, null, 2) + '\n');
  log('');
  log(renderTables(results));
  log('');
  log(`wrote ${path.relative(PROJECT_ROOT, out)} (${since()})`);
} finally {
  await env.close();
}
process.exit(0);
