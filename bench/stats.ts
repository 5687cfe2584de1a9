// Samples and their summaries. Every figure in results.json is a median and a p99 of its
// samples; ratios are taken between medians measured in the same run (absolute times drift).

export interface Summary {
  n: number;
  median: number;
  p99: number;
  mean: number;
  min: number;
  max: number;
}

export function quantile(sorted: number[], q: number): number {
  if (!sorted.length) return Number.NaN;
  // Nearest-rank: with 30 samples p99 is the largest, which is what "p99 of 30" can honestly say.
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil(q * sorted.length)));
  return sorted[rank - 1]!;
}

export function summarize(samples: number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const sum = sorted.reduce((a, b) => a + b, 0);
  // The median of an even count is the mean of the middle two.
  const mid = sorted.length / 2;
  const median = sorted.length % 2 ? sorted[Math.floor(mid)]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return {
    n: sorted.length,
    median: round(median),
    p99: round(quantile(sorted, 0.99)),
    mean: round(sum / Math.max(1, sorted.length)),
    min: round(sorted[0] ?? Number.NaN),
    max: round(sorted.at(-1) ?? Number.NaN),
  };
}

export function round(x: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** Milliseconds taken by fn. */
export async function timed(fn: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await fn();
  return performance.now() - start;
}

/** A named set of samples, collected in milliseconds. */
export class Samples {
  private readonly byName = new Map<string, number[]>();

  add(name: string, ms: number): void {
    let list = this.byName.get(name);
    if (!list) this.byName.set(name, (list = []));
    list.push(ms);
  }

  async time<T>(name: string, fn: () => Promise<T>): Promise<T> {
    const start = performance.now();
    try {
      return await fn();
    } finally {
      this.add(name, performance.now() - start);
    }
  }

  get(name: string): number[] {
    return this.byName.get(name) ?? [];
  }

  summary(name: string): Summary {
    return summarize(this.get(name));
  }

  summaries(): Record<string, Summary> {
    return Object.fromEntries([...this.byName.keys()].map((k) => [k, this.summary(k)]));
  }
}

export function ratio(numerator: number, denominator: number): number {
  return round(numerator / denominator, 3);
}
