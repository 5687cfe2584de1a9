// What usage recording and the Prometheus metrics add to a checkpoint: one run writes its
// checkpoints alternately with both on (the round's usage noted, so the row carries its tokens and
// model, and every counter and histogram of worker/metrics.ts moved) and both off (no usage, the
// metric calls made no-ops), the order swapped every pair so neither side always goes first.
import type { BenchEnv } from './env.ts';
import { createRunFixture } from './fixture.ts';
import { spreadPaths } from './repos.ts';
import { ratio, Samples, type Summary } from './stats.ts';
import { workerMetrics } from '../worker/metrics.ts';
import type { RoundUsage } from '../worker/models/usage.ts';

export interface UsageMetricsFigure {
  files: number;
  touched: number;
  pairs: number;
  /** The checkpoint write (ms), with usage and metrics off and on. */
  off: Summary;
  on: Summary;
  /** on / off, of the medians. */
  ratio: number;
  /** The same with the work behind the round (note, index) included. */
  offWithBehind: Summary;
  onWithBehind: Summary;
  ratioWithBehind: number;
}

const USAGE: RoundUsage = {
  inputTokens: 48_211,
  outputTokens: 612,
  cacheReadTokens: 46_900,
  cacheWriteTokens: 1_200,
  reasoningTokens: 128,
  modelId: 'claude-sonnet-4-5-20250929',
};

type Metric = Record<string, unknown>;

/** Every metric call of the worker a no-op, until the returned function puts them back. */
function metricsOff(): () => void {
  const saved: [Metric, string, unknown][] = [];
  for (const metric of Object.values(workerMetrics) as unknown as Metric[]) {
    for (const method of ['inc', 'observe']) {
      if (typeof metric[method] !== 'function') continue;
      saved.push([metric, method, metric[method]]);
      metric[method] = () => {};
    }
  }
  return () => {
    for (const [metric, method, fn] of saved) metric[method] = fn;
  };
}

export async function measureUsageMetrics(
  env: BenchEnv,
  repo: string,
  plan: { files: number; touched: number; pairs: number },
): Promise<UsageMetricsFigure> {
  const f = await createRunFixture(env, repo);
  const paths = spreadPaths(plan.files, plan.touched);
  const s = new Samples();
  const behind = () =>
    Promise.all([(f.writer as unknown as { mirroring: Promise<void> }).mirroring, f.writer.readyForTools()]);
  const one = async (on: boolean, record: boolean) => {
    await f.playRound(paths);
    const restore = on ? () => {} : metricsOff();
    try {
      const started = performance.now();
      if (on) f.writer.noteUsage(USAGE);
      await f.writer.write();
      const written = performance.now();
      await behind();
      if (!record) return;
      const side = on ? 'on' : 'off';
      s.add(side, written - started);
      s.add(`${side}.behind`, performance.now() - started);
    } finally {
      restore();
    }
  };
  try {
    for (let i = 0; i < 5; i++) await one(i % 2 === 0, false); // warm-up
    for (let i = 0; i < plan.pairs; i++) {
      const first = i % 2 === 0;
      await one(first, true);
      await one(!first, true);
    }
  } finally {
    await f.writer.quiesce();
    f.tree.release();
    await f.tracker.stop();
  }
  const [off, on, offWithBehind, onWithBehind] = ['off', 'on', 'off.behind', 'on.behind'].map((k) => s.summary(k));
  return {
    files: plan.files,
    touched: plan.touched,
    pairs: plan.pairs,
    off: off!,
    on: on!,
    ratio: ratio(on!.median, off!.median),
    offWithBehind: offWithBehind!,
    onWithBehind: onWithBehind!,
    ratioWithBehind: ratio(onWithBehind!.median, offWithBehind!.median),
  };
}

const ms = (x: number) => x.toFixed(2);

export function renderUsageMetrics(u: UsageMetricsFigure): string {
  return [
    '### Usage recording and metrics: on against off (ms, median / p99)',
    '| files | touched | pairs | off | on | on / off | off, with the work behind | on, with it | on / off |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    `| ${u.files} | ${u.touched} | ${u.pairs} | ${ms(u.off.median)} / ${ms(u.off.p99)} | ` +
      `${ms(u.on.median)} / ${ms(u.on.p99)} | ${u.ratio.toFixed(2)}× | ` +
      `${ms(u.offWithBehind.median)} / ${ms(u.offWithBehind.p99)} | ` +
      `${ms(u.onWithBehind.median)} / ${ms(u.onWithBehind.p99)} | ${u.ratioWithBehind.toFixed(2)}× |`,
  ].join('\n');
}

export function usageMetricsTarget(u: UsageMetricsFigure | undefined) {
  return {
    name: 'usage and metrics',
    goal: 'checkpoint with usage recording and metrics on ≤ 1.05 × off',
    measured: u
      ? `${u.ratio.toFixed(3)}× (with the work behind the round ${u.ratioWithBehind.toFixed(3)}×)`
      : 'not measured',
    met: u ? u.ratio <= 1.05 : null,
  };
}
