// The worker's Prometheus metrics (prom-client), served on 127.0.0.1:WORKER_METRICS_PORT when set.
// Labels are bounded sets: a workspace, a model, an outcome or a phase; never a run id, a path or a
// secret (a replay model, whose id is a transcript path, is labelled "replay").
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, Histogram, Registry } from 'prom-client';

export const workerRegistry = new Registry();

export type ResumeKind = 'same_host' | 'spare' | 'remote' | 'repaired';

export const workerMetrics = {
  runsFinished: new Counter({
    name: 'echodo_worker_runs_finished_total',
    help: 'Run attempts this worker ended, by how they ended',
    labelNames: ['outcome'] as const,
    registers: [workerRegistry],
  }),
  checkpoints: new Counter({
    name: 'echodo_checkpoints_written_total',
    help: 'Checkpoint rows written',
    labelNames: ['workspace'] as const,
    registers: [workerRegistry],
  }),
  checkpointSeconds: new Histogram({
    name: 'echodo_checkpoint_write_seconds',
    help:
      'Time to write a checkpoint, by phase: "commit" the git commit of the touched files, "row" the fenced insert, ' +
      '"note" the git note mirror (behind the next round), "total" from the start of the write to its row',
    labelNames: ['phase'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [workerRegistry],
  }),
  tokens: new Counter({
    name: 'echodo_tokens_total',
    help: 'Tokens the model reported, by kind (input, output, cache_read, cache_write, reasoning)',
    labelNames: ['workspace', 'model', 'kind'] as const,
    registers: [workerRegistry],
  }),
  toolCalls: new Counter({
    name: 'echodo_tool_calls_total',
    help: 'Tool calls of the model, by tool and outcome (ok, refused by the harness, or failed)',
    labelNames: ['tool', 'outcome'] as const,
    registers: [workerRegistry],
  }),
  sandboxRefusals: new Counter({
    name: 'echodo_sandbox_refusals_total',
    help: 'Tool calls the confinement refused, by rule (command, path, revision, sandbox)',
    labelNames: ['rule'] as const,
    registers: [workerRegistry],
  }),
  resumes: new Counter({
    name: 'echodo_resumes_total',
    help:
      'Runs this worker resumed from a checkpoint, by kind: same_host, spare (a standby spare worktree), ' +
      'remote (fetched from the checkpoint remote), repaired (same host, repaired first)',
    labelNames: ['kind'] as const,
    registers: [workerRegistry],
  }),
  leaseLosses: new Counter({
    name: 'echodo_lease_losses_total',
    help: 'Run attempts that lost their lease to another holder',
    registers: [workerRegistry],
  }),
};

/** A model id fit for a label: a path (a replay transcript) is not. */
export function modelLabel(modelId: string | null): string {
  if (!modelId) return 'unknown';
  return modelId.includes('/') ? 'replay' : modelId.slice(0, 100);
}

/** Serves GET /metrics on 127.0.0.1:port; anything else is 404. */
export async function startWorkerMetrics(port: number): Promise<{ port: number; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    workerRegistry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': workerRegistry.contentType }).end(text),
      () => res.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
