// JSON shapes of the mission control API (the contract's fields first, extras after).
// Timestamps are ISO 8601 strings; absent ones are null.
import type { ChainPage, ChainVerdict } from '../store/chain-verdict.ts';
import { toolsOfRound, type ConvoyDetail, type ConvoyPage, type RunSummary } from '../store/mission-control.ts';
import type { RunListItem, RunPage } from '../store/run-search.ts';
import type { RunOverview, TimelineEvent } from '../store/run-timeline.ts';

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

/** A page of GET /api/runs/:id/checkpoints: newest first; `cursor` reads the next (older) page. */
export function checkpointPageJson(run: RunOverview, verdict: ChainVerdict, page: ChainPage, events: TimelineEvent[]) {
  const problems = verdict.state === 'broken' ? [verdict.problem] : page.problems;
  return {
    agentRunId: run.agentRunId,
    checkpoints: page.rows.map((c, i) => ({
      seq: c.checkpoint_seq,
      step: c.step,
      occurredAt: iso(c.occurred_at),
      commitOid: c.commit_oid,
      hash: c.hash,
      files: c.files_touched.map((f) => ({ path: f.path, sha256: f.sha256, deleted: Boolean(f.deleted) })),
      prevHash: c.prev_hash,
      attempt: c.attempt,
      tools: toolsOfRound(c.tool_history, c.step),
      filesTouchedCount: c.files_touched.length,
      verified: page.verified[i] ?? false,
    })),
    cursor: page.older === null ? null : String(page.older),
    convoyId: run.convoyId,
    status: run.status,
    attempt: run.attempt,
    chain: { ok: problems.length === 0 && verdict.state !== 'broken', problems, ...verdictJson(verdict) },
    events: events.map((e) => ({ type: e.type, occurredAt: iso(e.occurredAt), metadata: e.metadata })),
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
