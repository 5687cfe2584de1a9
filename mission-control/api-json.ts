// JSON shapes of the mission control API (the contract's fields first, extras after).
// Timestamps are ISO 8601 strings; absent ones are null.
import type { ChainVerdict } from '../store/chain-verdict.ts';
import type { ConvoyDetail, ConvoyPage, RunHistory, RunSummary } from '../store/mission-control.ts';
import type { RunListItem, RunPage } from '../store/run-search.ts';
import type { RunOverview } from '../store/run-timeline.ts';

const iso = (date: Date | null): string | null => (date ? date.toISOString() : null);

function runJson(run: RunSummary, now: number) {
  return {
    agentRunId: run.agentRunId,
    status: run.status,
    attempt: run.attempt,
    checkpointCount: run.checkpointCount,
    lastCheckpointAt: iso(run.lastCheckpointAt),
    briefId: run.briefId,
    step: run.step,
    workerId: run.workerId,
    heartbeatAt: iso(run.heartbeatAt),
    leaseExpiresAt: iso(run.leaseExpiresAt),
    stalled: run.status === 'running' && run.leaseExpiresAt !== null && run.leaseExpiresAt.getTime() < now,
    createdAt: iso(run.createdAt),
    finishedAt: iso(run.finishedAt),
  };
}

export function convoyJson(convoy: ConvoyDetail, now = Date.now()) {
  return {
    convoyId: convoy.convoyId,
    checkpointCount: convoy.checkpointCount,
    lastCheckpointAt: iso(convoy.lastCheckpointAt),
    runs: convoy.runs.map((run) => runJson(run, now)),
    createdAt: iso(convoy.createdAt),
  };
}

export function convoysJson({ convoys, cursor }: ConvoyPage) {
  return {
    cursor,
    convoys: convoys.map((c) => ({
      convoyId: c.convoyId,
      checkpointCount: c.checkpointCount,
      lastCheckpointAt: iso(c.lastCheckpointAt),
      runs: c.runs,
      createdAt: iso(c.createdAt),
    })),
  };
}

export function runCheckpointsJson(history: RunHistory) {
  return {
    agentRunId: history.run.agentRunId,
    checkpoints: history.checkpoints.map((c) => ({
      seq: c.seq,
      step: c.step,
      occurredAt: iso(c.occurredAt),
      commitOid: c.commitOid,
      hash: c.hash,
      files: c.files,
      prevHash: c.prevHash,
      attempt: c.attempt,
      tools: c.tools,
      filesTouchedCount: c.filesTouchedCount,
      verified: c.verified,
    })),
    convoyId: history.run.convoyId,
    status: history.run.status,
    attempt: history.run.attempt,
    chain: history.chain,
    events: history.events.map((e) => ({ type: e.type, occurredAt: iso(e.occurredAt), metadata: e.metadata })),
  };
}

function runListItemJson(run: RunListItem) {
  return {
    agentRunId: run.agentRunId,
    status: run.status,
    stalled: run.stalled,
    convoyId: run.convoyId,
    briefId: run.briefId,
    attempt: run.attempt,
    workerId: run.workerId,
    hostId: run.hostId,
    branch: run.branch,
    model: run.model,
    checkpointCount: run.checkpointCount,
    lastCheckpointAt: iso(run.lastCheckpointAt),
    leaseExpiresAt: iso(run.leaseExpiresAt),
    createdAt: iso(run.createdAt),
    finishedAt: iso(run.finishedAt),
  };
}

export function runPageJson(page: RunPage) {
  return { runs: page.runs.map(runListItemJson), cursor: page.cursor };
}

function verdictJson(verdict: ChainVerdict) {
  if (verdict.state === 'broken') return { verdict: 'broken', brokenAt: verdict.brokenSeq, problem: verdict.problem };
  return { verdict: verdict.state === 'verifies' ? 'verifies' : 'no checkpoints yet' };
}

export function runOverviewJson(run: RunOverview, verdict: ChainVerdict, now = Date.now()) {
  const start = run.startedAt ?? run.createdAt;
  return {
    agentRunId: run.agentRunId,
    status: run.status,
    stalled: run.stalled,
    brief: run.brief,
    harness: run.harnessAlias,
    adapter: run.adapter,
    threadId: run.threadId,
    model: run.model,
    host: run.hostId,
    worktree: run.worktreePath,
    attempts: run.attempt,
    durationMs: (run.finishedAt?.getTime() ?? now) - start.getTime(),
    convoyId: run.convoyId,
    briefId: run.briefId,
    step: run.step,
    workerId: run.workerId,
    branch: run.branch,
    commitOid: run.lastCommitOid,
    checkpointCount: run.checkpointCount,
    lastCheckpointAt: iso(run.lastCheckpointAt),
    heartbeatAt: iso(run.heartbeatAt),
    leaseExpiresAt: iso(run.leaseExpiresAt),
    failureReason: run.failureReason,
    createdAt: iso(run.createdAt),
    startedAt: iso(run.startedAt),
    finishedAt: iso(run.finishedAt),
    chain: verdictJson(verdict),
  };
}
