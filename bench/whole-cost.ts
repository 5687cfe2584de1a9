// The whole cost of checkpointing a run, start to finish: a run of `rounds` rounds, `changed`
// files rewritten a round (a new spread of the repository every round), three ways on the same
// repository, in the same process, their order rotated every repetition:
//  - none: the rounds' writes only (what any run costs);
//  - ours: the same rounds through the real CheckpointWriter, a checkpoint every round, the tree
//    process confined and held as a run attempt holds it, including the work behind the round
//    (index, notes, packing: each awaited where the next round or checkpoint awaits it) and the
//    end-of-run settle;
//  - floor: the same rounds in a second worktree of the repository, each followed by a bare
//    `git add <paths>` + `git commit` + one INSERT of the change's payload.
// The cost of checkpointing is each run minus `none`; the ratio is ours over the floor's. ours is
// split into phases (summed over the run) to show where its time goes.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createFloorWorktree, ensureFloorTable } from './checkpoint-cost.ts';
import type { BenchEnv } from './env.ts';
import { createRunFixture, type RunFixture } from './fixture.ts';
import { fileContent, filePath } from './repos.ts';
import { ratio, round, summarize, type Summary } from './stats.ts';

const PHASES = ['writes', 'behindIndex', 'behindMirror', 'inRound', 'settle'] as const;
type Phase = (typeof PHASES)[number];
type Variant = 'none' | 'ours' | 'floor';

export interface WholeCostResult {
  files: number;
  rounds: number;
  changed: number;
  repetitions: number;
  /** Wall time of each whole run (ms). */
  runs: Record<Variant, Summary>;
  /** The run minus `none` of the same repetition (ms). */
  cost: { ours: Summary; floor: Summary };
  /** Median of ours' cost over the median of the floor's. */
  ratio: number;
  target: number;
  met: boolean;
  /** ours' time by phase, summed over the run (ms). */
  phases: Record<Phase, Summary>;
}

/** The writer's note mirror (private there): awaited as the next checkpoint awaits it. */
type WithMirror = { mirroring: Promise<void> };

/** A new spread of `changed` files every round, walking the repository (as the long run does). */
const roundPaths = (files: number, changed: number, r: number) =>
  Array.from({ length: changed }, (_, k) => filePath((r * changed + k * 97) % files));

/** What the round's row would hold: a many-file round's tool call and each file's sha256. */
function roundPayload(r: number, paths: string[], contents: string[]) {
  return {
    tool_history: [{ round: r, tool: 'run_command', input: { command: 'npm run lint -- --fix' }, output: { exitCode: 0, stdout: `fixed ${paths.length} files\n`.repeat(20) } }],
    files_touched: paths.map((p, i) => ({ path: p, sha256: createHash('sha256').update(contents[i]!).digest('hex') })),
  };
}

/** Plain git, as a person would run it: no wrapper, no extra configuration. */
function git(cwd: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('git', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`git ${args[0]}: exit ${code}: ${err.slice(0, 300)}`))));
  });
}

const contentOf = (r: number, p: string) => `${fileContent(r, r)}// ${p}\n`;

async function writeRound(dir: string, paths: string[], r: number): Promise<string[]> {
  const contents = paths.map((p) => contentOf(r, p));
  await Promise.all(paths.map((p, i) => writeFile(path.join(dir, p), contents[i]!)));
  return contents;
}

async function runNone(dir: string, o: Plan): Promise<number> {
  const start = performance.now();
  for (let r = 1; r <= o.rounds; r++) await writeRound(dir, roundPaths(o.files, o.changed, r), -r);
  return performance.now() - start;
}

async function runFloor(env: BenchEnv, dir: string, o: Plan): Promise<number> {
  const start = performance.now();
  for (let r = 1; r <= o.rounds; r++) {
    const paths = roundPaths(o.files, o.changed, r);
    const contents = await writeRound(dir, paths, r);
    await git(dir, ['add', '--', ...paths]);
    await git(dir, ['commit', '-q', '-m', `round ${r}`]);
    const value = roundPayload(r, paths, contents);
    await env.su.begin((tx) => tx`insert into bench_floor_insert (payload) values (${tx.json(value as never)})`);
  }
  return performance.now() - start;
}

async function runOurs(f: RunFixture, o: Plan, phases: Record<Phase, number>): Promise<number> {
  const mirror = f.writer as unknown as WithMirror;
  const lap = async (phase: Phase, fn: () => Promise<unknown>) => {
    const t = performance.now();
    await fn();
    phases[phase] += performance.now() - t;
  };
  const start = performance.now();
  for (let r = 1; r <= o.rounds; r++) {
    // What the round's first tool call and the next checkpoint wait for, in the order they wait.
    await lap('behindIndex', () => f.writer.readyForTools());
    await lap('behindMirror', () => mirror.mirroring);
    await lap('writes', () => f.playRound(roundPaths(o.files, o.changed, r)));
    await lap('inRound', () => f.writer.write());
  }
  await lap('settle', () => f.writer.settleNotes());
  return performance.now() - start;
}

interface Plan {
  files: number;
  rounds: number;
  changed: number;
  repetitions: number;
}

export async function measureWholeCost(
  env: BenchEnv,
  repo: string,
  o: Plan,
  settle: () => Promise<void>,
  log: (line: string) => void,
): Promise<WholeCostResult> {
  await ensureFloorTable(env);
  const times: Record<Variant, number[]> = { none: [], ours: [], floor: [] };
  const cost = { ours: [] as number[], floor: [] as number[] };
  const phases = Object.fromEntries(PHASES.map((p) => [p, [] as number[]])) as Record<Phase, number[]>;
  const order: Variant[] = ['none', 'ours', 'floor'];
  // One untimed repetition first: caches, pools, JIT.
  for (let rep = 0; rep <= o.repetitions; rep++) {
    const f = await createRunFixture(env, repo, { historyRounds: 0 });
    const floor = await createFloorWorktree(env, repo, `whole-${rep}`);
    const took = {} as Record<Variant, number>;
    const laps = Object.fromEntries(PHASES.map((p) => [p, 0])) as Record<Phase, number>;
    for (const variant of order.map((_, i) => order[(i + rep) % order.length]!)) {
      await settle();
      if (variant === 'none') took.none = await runNone(floor.path, o);
      else if (variant === 'ours') took.ours = await runOurs(f, o, laps);
      else took.floor = await runFloor(env, floor.path, o);
    }
    f.tree.release();
    if (rep === 0) continue;
    for (const v of order) times[v].push(took[v]);
    cost.ours.push(took.ours - took.none);
    cost.floor.push(took.floor - took.none);
    for (const p of PHASES) phases[p].push(laps[p]);
    const parts = PHASES.map((p) => `${p} ${laps[p].toFixed(0)}`).join(', ');
    log(`  whole cost ${rep}/${o.repetitions}: ours ${took.ours.toFixed(0)} ms (${parts}), floor ${took.floor.toFixed(0)} ms, none ${took.none.toFixed(0)} ms`);
  }
  const oursCost = summarize(cost.ours);
  const floorCost = summarize(cost.floor);
  const r = ratio(oursCost.median, floorCost.median);
  return {
    ...o,
    runs: { none: summarize(times.none), ours: summarize(times.ours), floor: summarize(times.floor) },
    cost: { ours: oursCost, floor: floorCost },
    ratio: round(r, 2),
    target: 1.2,
    met: r <= 1.2,
    phases: Object.fromEntries(PHASES.map((p) => [p, summarize(phases[p])])) as Record<Phase, Summary>,
  };
}
