// Rounds of one long run through the live loop (worker/run/session.ts), timed from outside: a
// replay model plays `rounds` rounds of `changed` write_file calls each (a new spread of the
// repository every round), with a checkpoint every round through the real writer, the tools'
// fencing checks and the run's tree process, exactly as a run attempt runs them. A round's time is
// the time between two model calls (the model answers at once: what is left is the worker's own
// work per round). Reported for windows of 50 rounds early and late in the run, with the size of
// the prompt the model was sent and the heap, so a conversation or any per-round work that grows
// with the round count shows as a late window slower or larger than an early one.
import os from 'node:os';
import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamResult,
} from '@ai-sdk/provider';
import { builtinHarnesses } from '../worker/run/harnesses.ts';
import { runSession } from '../worker/run/session.ts';
import { ReplayModel } from '../worker/models/replay.ts';
import type { Transcript } from '../worker/models/transcript.ts';
import type { BenchEnv } from './env.ts';
import { createRunFixture, silentLog } from './fixture.ts';
import { fileContent, filePath } from './repos.ts';
import { round, summarize, type Summary } from './stats.ts';

export interface RoundsWindow {
  /** First and last round of the window (1-based). */
  from: number;
  to: number;
  time: Summary;
  /** CPU time of the worker's own process a round (user + system), ms: what load on other processes barely moves. */
  cpu: Summary;
  /** Characters of the prompt (system and messages, as JSON) each model call of the window was sent. */
  promptChars: Summary;
  /** V8 heap in use at the window's end, MB. */
  heapMb: number;
  /** The 1-minute load average at the window's end: a loaded machine slows every round alike. */
  load: number;
}

export interface RoundsResult {
  rounds: number;
  files: number;
  changedPerRound: number;
  contextRounds: number;
  windows: RoundsWindow[];
  /** The last window's median time over the first window's. */
  ratioLastToFirst: number;
  /** The same for the worker's CPU time a round. */
  cpuRatioLastToFirst: number;
  outcome: string;
}

/** The model as the loop sees it, and when each call arrived and how large its prompt was. */
class TimedModel implements LanguageModelV3 {
  readonly specificationVersion = 'v3' as const;
  readonly provider = 'bench';
  readonly modelId = 'bench-replay';
  readonly supportedUrls = {};
  readonly calls: number[] = [];
  readonly promptChars: number[] = [];
  readonly heap: number[] = [];
  readonly load: number[] = [];
  readonly cpu: number[] = [];

  constructor(private readonly inner: ReplayModel) {}

  private note(options: LanguageModelV3CallOptions): void {
    this.calls.push(performance.now());
    this.promptChars.push(JSON.stringify(options.prompt).length);
    this.heap.push(process.memoryUsage().heapUsed);
    this.load.push(os.loadavg()[0]!);
    const { user, system } = process.cpuUsage();
    this.cpu.push((user + system) / 1000);
  }

  doGenerate(options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> {
    this.note(options);
    return this.inner.doGenerate(options);
  }

  doStream(options: LanguageModelV3CallOptions): Promise<LanguageModelV3StreamResult> {
    this.note(options);
    return this.inner.doStream(options);
  }
}

export async function measureRounds(
  env: BenchEnv,
  repo: string,
  o: { files: number; rounds: number; changed: number; windows: Array<[number, number]> },
  log: (line: string) => void,
): Promise<RoundsResult> {
  const f = await createRunFixture(env, repo, { historyRounds: 0 });
  const steps: Transcript['steps'] = [];
  for (let r = 1; r <= o.rounds; r++) {
    const toolCalls = Array.from({ length: o.changed }, (_, k) => {
      const path = filePath((r * o.changed + k * 97) % o.files);
      return { toolName: 'write_file', input: { path, content: `${fileContent(r, r)}// ${path}\n` } };
    });
    steps.push({ toolCalls });
  }
  steps.push({ text: 'done' });
  const model = new TimedModel(new ReplayModel({ transcript: { steps }, startAt: 0 }));
  const harness = { ...builtinHarnesses(env.config).code!, allowedCommands: null };
  let lastLogged = performance.now();
  const progress = setInterval(() => {
    if (performance.now() - lastLogged < 60_000) return;
    lastLogged = performance.now();
    log(`  rounds: ${model.calls.length} of ${o.rounds}`);
  }, 5_000);
  let outcome: string;
  try {
    const result = await runSession({
      model,
      harness,
      root: f.worktree,
      roleId: 'coder',
      brief: 'benchmark run: rewrite the files each round asks for',
      writer: f.writer,
      tracker: f.tracker,
      lease: f.lease,
      maxSteps: o.rounds + 1,
      checkpointEvery: 1,
      contextRounds: env.config.WORKER_CONTEXT_ROUNDS,
      commandTimeoutMs: 10_000,
      baseOid: f.run.base_oid,
      shutdown: new AbortController().signal,
      log: silentLog,
    });
    outcome = result.kind === 'finished' ? `${result.kind} (${result.reason})` : result.kind;
  } finally {
    clearInterval(progress);
    f.tree.release();
  }
  // Round r (1-based) runs from model call r to model call r + 1.
  const times = model.calls.slice(1).map((t, i) => t - model.calls[i]!);
  const cpu = model.cpu.slice(1).map((t, i) => t - model.cpu[i]!);
  const windows = o.windows
    .filter(([, to]) => to <= times.length)
    .map(([from, to]) => ({
      from,
      to,
      time: summarize(times.slice(from - 1, to)),
      cpu: summarize(cpu.slice(from - 1, to)),
      promptChars: summarize(model.promptChars.slice(from - 1, to)),
      heapMb: round(model.heap[to - 1]! / 2 ** 20, 1),
      load: round(model.load[to - 1]!, 2),
    }));
  const [first, last] = [windows[0], windows.at(-1)];
  return {
    rounds: o.rounds,
    files: o.files,
    changedPerRound: o.changed,
    contextRounds: env.config.WORKER_CONTEXT_ROUNDS,
    windows,
    ratioLastToFirst: first && last ? round(last.time.median / first.time.median, 3) : NaN,
    cpuRatioLastToFirst: first && last ? round(last.cpu.median / first.cpu.median, 3) : NaN,
    outcome,
  };
}

/** The windows side by side (docs/benchmarks.md). */
export function renderRounds(r: RoundsResult): string {
  const head = `### Rounds of one long run (${r.rounds.toLocaleString('en-US')} rounds, ${r.files.toLocaleString('en-US')} files, ${r.changedPerRound} written a round, WORKER_CONTEXT_ROUNDS=${r.contextRounds})`;
  const rows = r.windows.map(
    (w) =>
      `| ${w.from}–${w.to} | ${w.time.median.toFixed(1)} | ${w.time.min.toFixed(1)} | ${w.time.p99.toFixed(1)} | ${w.cpu?.median.toFixed(1) ?? '?'} | ${Math.round(w.promptChars.median).toLocaleString('en-US')} | ${w.heapMb} | ${w.load ?? '?'} |`,
  );
  return [
    head,
    '',
    '| rounds | ms a round (median) | fastest | p99 | worker CPU ms (median) | prompt chars (median) | heap MB at end | load at end |',
    '|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
    `Last window over first: ${r.ratioLastToFirst}× in time, ${r.cpuRatioLastToFirst ?? '?'}× in the worker's CPU (run ${r.outcome}).`,
  ].join('\n');
}

export function roundsTarget(r: RoundsResult) {
  const [first, last] = [r.windows[0], r.windows.at(-1)];
  return {
    name: 'long run: flat rounds',
    goal: `a round of rounds ${last ? `${last.from}–${last.to}` : '?'} within 1.1× of rounds ${first ? `${first.from}–${first.to}` : '?'} (median, timed from outside)`,
    measured:
      first && last
        ? `${last.time.median.toFixed(1)} ms vs ${first.time.median.toFixed(1)} ms = ${r.ratioLastToFirst}× (the worker's CPU a round: ${r.cpuRatioLastToFirst ?? '?'}×; load ${first.load ?? '?'} → ${last.load ?? '?'})`
        : 'not measured',
    met: first && last ? r.ratioLastToFirst <= 1.1 : null,
  };
}
