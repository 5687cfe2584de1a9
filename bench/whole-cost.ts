// The whole cost of checkpointing a run, start to finish: a run of `rounds` rounds, `changed`
// files rewritten a round (a new spread of the repository every round), three ways on the same
// repository, in the same process:
//  - none: the rounds' writes only (what any run costs);
//  - ours: the same rounds through the real CheckpointWriter, a checkpoint every round, the tree
//    process confined and held as a run attempt holds it, including the work behind the round
//    (index, notes, packing), all of it awaited within the round, and the end-of-run settle;
//  - floor: the same rounds in a clone of the same repository, each followed by a bare
//    `git add <paths>` + `git commit` + one INSERT of the change's payload. A clone, not a second
//    worktree: the writer's packer packs any loose object it finds, the floor's commits included,
//    which would charge ours for housekeeping the floor leaves undone.
// The three take turns round by round (their order rotated), so a load swing on a shared machine
// falls on all three alike; each one's run is the sum of its rounds. The cost of checkpointing is
// each run minus `none`; the ratio is ours over the floor's. ours is split into phases (summed
// over the run) to show where its time goes.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createFloorWorktree, ensureFloorTable } from './checkpoint-cost.ts';
import type { BenchEnv } from './env.ts';
import { createRunFixture, type RunFixture } from './fixture.ts';
import { fileContent, filePath } from './repos.ts';
import { ratio, round, summarize, type Summary } from './stats.ts';

const PHASES = ['writes', 'inRound', 'behindIndex', 'behindMirror', 'behindPack', 'settle'] as const;
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

/** The writer's note mirror and its packer's roll-up (private there): the work behind a round. */
type Behind = { mirroring: Promise<void>; packer?: { running: Promise<void> } };

/** A new spread of `changed` files every round, walking the repository (as the long run does). */
const roundPaths = (files: number, changed: number, r: number) =>
  Array.from({ length: changed }, (_, k) => filePath((r * changed + k * 97) % files));

/** What the round's row would hold: a many-file round's tool call and each file's sha256. */
function roundPayload(r: number, paths: string[], contents: string[]) {
  return {
    tool_history: [
      {
        round: r,
        tool: 'run_command',
        input: { command: 'npm run lint -- --fix' },
        output: { exitCode: 0, stdout: `fixed ${paths.length} files\n`.repeat(20) },
      },
    ],
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
    child.on('close', (code) => {
      if (code === 0) resolve();
      else reject(new Error(`git ${args[0]}: exit ${code}: ${err.slice(0, 300)}`));
    });
  });
}

const contentOf = (r: number, p: string) => `${fileContent(r, r)}// ${p}\n`;

async function writeRound(dir: string, paths: string[], r: number): Promise<string[]> {
  const contents = paths.map((p) => contentOf(r, p));
  await Promise.all(paths.map((p, i) => writeFile(path.join(dir, p), contents[i]!)));
  return contents;
}

/** One variant's run, a round at a time; `finish` is its end-of-run work (timed as part of it). */
interface Runner {
  round(r: number): Promise<void>;
  finish(): Promise<void>;
}

function noneRunner(dir: string, o: Plan): Runner {
  return {
    round: async (r) => void (await writeRound(dir, roundPaths(o.files, o.changed, r), r)),
    finish: async () => {},
  };
}

function floorRunner(env: BenchEnv, dir: string, o: Plan): Runner {
  return {
    async round(r) {
      const paths = roundPaths(o.files, o.changed, r);
      const contents = await writeRound(dir, paths, r);
      await git(dir, ['add', '--', ...paths]);
      await git(dir, ['commit', '-q', '-m', `round ${r}`]);
      const value = roundPayload(r, paths, contents);
      await env.su.begin((tx) => tx`insert into bench_floor_insert (payload) values (${tx.json(value as never)})`);
    },
    finish: async () => {},
  };
}

/** The writer's rounds; what it leaves behind a round is awaited in that round: it overlaps no other turn. */
function oursRunner(f: RunFixture, o: Plan, phases: Record<Phase, number>): Runner {
  const behind = f.writer as unknown as Behind;
  const lap = async (phase: Phase, fn: () => Promise<unknown>) => {
    const t = performance.now();
    await fn();
    phases[phase] += performance.now() - t;
  };
  return {
    async round(r) {
      await lap('writes', () => f.playRound(roundPaths(o.files, o.changed, r)));
      await lap('inRound', () => f.writer.write());
      // What the next round's first tool call and the next checkpoint would wait for.
      await lap('behindIndex', () => f.writer.readyForTools());
      await lap('behindMirror', () => behind.mirroring);
      // A roll-up runs on its own, awaited by nobody but the settle: here, so it overlaps no other turn.
      await lap('behindPack', async () => behind.packer?.running);
    },
    finish: () => lap('settle', () => f.writer.settleNotes()),
  };
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
  /** A clone of `repo` for the floor's commits. */
  floorRepo: string,
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
    const floor = await createFloorWorktree(env, floorRepo, `whole-${rep}`);
    const laps = Object.fromEntries(PHASES.map((p) => [p, 0])) as Record<Phase, number>;
    const runners: Record<Variant, Runner> = {
      none: noneRunner(floor.path, o),
      ours: oursRunner(f, o, laps),
      floor: floorRunner(env, floor.path, o),
    };
    const took: Record<Variant, number> = { none: 0, ours: 0, floor: 0 };
    const timed = async (v: Variant, fn: () => Promise<void>) => {
      const t = performance.now();
      await fn();
      took[v] += performance.now() - t;
    };
    await settle();
    for (let r = 1; r <= o.rounds; r++) {
      const turns = order.map((_, i) => order[(i + r + rep) % order.length]!);
      for (const v of turns) await timed(v, () => runners[v].round(r));
    }
    for (const v of order) await timed(v, () => runners[v].finish());
    f.tree.release();
    if (rep === 0) continue;
    for (const v of order) times[v].push(took[v]);
    cost.ours.push(took.ours - took.none);
    cost.floor.push(took.floor - took.none);
    for (const p of PHASES) phases[p].push(laps[p]);
    const parts = PHASES.map((p) => `${p} ${laps[p].toFixed(0)}`).join(', ');
    const [ours, floorMs, none] = [took.ours, took.floor, took.none].map((t) => t.toFixed(0));
    log(`  whole cost ${rep}/${o.repetitions}: ours ${ours} ms (${parts}), floor ${floorMs} ms, none ${none} ms`);
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
