// Prometheus metrics as the tests read them: a /metrics scraped over HTTP and parsed with a real
// Prometheus text parser, and a worker's metrics port (WORKER_METRICS_PORT) to spawn it with.
import assert from 'node:assert/strict';
import parse from 'parse-prometheus-text-format';
import { freePort } from '../../testbed/redis.ts';

export type Labels = Record<string, string>;

export interface Metrics {
  text: string;
  /** The TYPE of the family `name` (COUNTER, GAUGE, HISTOGRAM…). */
  type(name: string): string | undefined;
  /** The value of the first sample of `name` whose labels include `labels`. */
  value(name: string, labels?: Labels): string | undefined;
  /** Every sample of `name`, keyed by its `label`: e.g. resumes by kind. */
  byLabel(name: string, label: string): Record<string, string>;
  /** The sample count of a labelled histogram, read from the text (the parser folds its series into one). */
  histogramCount(name: string, labels: Labels): number;
}

export function readMetrics(text: string): Metrics {
  const families = parse(text);
  const samples = (name: string) => families.find((f) => f.name === name)?.metrics ?? [];
  const matches = (sample: { labels?: Labels }, labels: Labels) =>
    Object.entries(labels).every(([k, v]) => sample.labels?.[k] === v);
  return {
    text,
    type: (name) => families.find((f) => f.name === name)?.type,
    value: (name, labels = {}) => samples(name).find((m) => matches(m, labels))?.value,
    byLabel: (name, label) =>
      Object.fromEntries(samples(name).map((m) => [m.labels?.[label] ?? '', m.value ?? ''] as const)),
    histogramCount(name, labels) {
      const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
      const line = text.split('\n').find((l) => l.startsWith(`${name}_count{`) && wanted.every((w) => l.includes(w)));
      return Number(line?.split(' ').at(-1));
    },
  };
}

/** GET `url` (200 required), parsed. */
export async function scrapeMetrics(url: string, headers: Record<string, string> = {}): Promise<Metrics> {
  const res = await fetch(url, { headers });
  const text = await res.text();
  assert.equal(res.status, 200, `${url}: ${text}`);
  return readMetrics(text);
}

/** A free port for a worker's metrics: `env` to spawn it with, `scrape` to read its /metrics. */
export async function workerMetricsPort(): Promise<{
  env: Record<string, string>;
  url: string;
  scrape(): Promise<Metrics>;
}> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/metrics`;
  return { env: { WORKER_METRICS_PORT: String(port) }, url, scrape: () => scrapeMetrics(url) };
}
