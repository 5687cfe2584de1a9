// Where a checkpoint is written. Order, and why:
//  1. content: commit the touched paths on the run's branch (git objects; contents stay in git);
//     with WORKER_CHECKPOINT_REMOTE, the commit is pushed (with the run's notes ref) and the
//     push acknowledged before the row: every row's commit is on the remote (remote.ts). The
//     push and the row then run while the model works on the next round, and the next tool call
//     waits for them (readyForTools): no round runs on a checkpoint that has not counted, and a
//     crash before the row redoes this one round, exactly as a crash during the push would;
//     when git stores the files as their bytes (git/conversion.ts), the worktree's index is brought
//     in step behind the round, awaited before the next tool call and checkpoint (a crash
//     before then leaves an index behind its commit, which resume resets: nothing is lost);
//  2. truth: insert the worker_checkpoints row, fenced on lease_epoch, renewing the heartbeat,
//     with this checkpoint's files upserted into the run's manifest in the same statement
//     (the commit point: a crash before it resumes from the previous checkpoint);
//  3. mirror: the git note on the commit, written in the background while the next round runs
//     and awaited before the next checkpoint (a failure is logged and retried, never fatal);
//     every few checkpoints the run's new objects are packed, also in the background.
// A row holds only what changed since the checkpoint before (files, tool calls) plus a
// fixed-size summary (tree oid, manifest digest), so a checkpoint costs the same at seq 2,000
// as at seq 10. What a writer starts from (a new run's or a resumed one's state): state.ts.
import type { Sql } from 'postgres';
import type { Config } from '../../core/config.ts';
import { appendCheckpoint, checkpointAt, runManifest, type NewCheckpoint } from '../../store/checkpoints.ts';
import { retryTransient } from '../../store/transient-retry.ts';
import { withWorkspace } from '../../store/workspace.ts';
import { errorMessage, LeaseLostError } from '../../core/errors.ts';
import { faultPoint } from '../faults.ts';
import type { Lease } from '../run/lease.ts';
import type { Logger } from '../log.ts';
import { commitTouchedPaths, describeFiles, type ContentCommit } from './content.ts';
import {
  checkpointHash,
  DELTA_FORMAT,
  ManifestDigest,
  type CheckpointPayload,
  type FileTouched,
} from '../../core/checkpoint-hash.ts';
import { boundHistory, type ToolCallRecord } from './history.ts';
import type { CheckpointState } from './state.ts';
import { checkpointNote, writeCheckpointNotes, type NoteWrite } from './notes.ts';
import { ObjectPacker } from './git/packing.ts';
import type { RemotePusher } from '../remote/push.ts';
import { redactString } from '../../core/redact.ts';
import type { TouchTracker } from './tracker.ts';
import { addUsage, type RoundUsage } from '../models/usage.ts';
import { modelLabel, workerMetrics } from '../metrics.ts';
import type { Attributes } from '@opentelemetry/api';
import { recordSpan } from '../tracing.ts';

/** Fail closed: a path the redactor cannot process is not stored. */
function redactPath(p: string): string {
  try {
    return redactString(p);
  } catch {
    return '[path dropped: redaction failed]';
  }
}

export interface RunIdentity {
  workspaceId: string;
  agentRunId: string;
  convoyId: string;
  briefId: string;
  attempt: number;
}

export interface WorkingTree {
  root: string;
  /** Set for the code harness: the worktree is committed. Null for doc-writer: hashes only. */
  git: { branch: string; worktreePath: string } | null;
}

type WriterDeps = ConstructorParameters<typeof CheckpointWriter>[0];

/**
 * The one way a run's writer is built (a run attempt, the benches and the tests alike): the notes
 * ref, the history bound and the lease come from the configuration.
 */
export function checkpointWriterFor(
  config: Pick<Config, 'WORKER_NOTES_REF' | 'WORKER_CHECKPOINT_HISTORY_LIMIT' | 'WORKER_LEASE_MS'>,
  deps: Omit<WriterDeps, 'notesRef' | 'historyLimit' | 'leaseMs'> & { leaseMs?: number },
  state: CheckpointState,
): CheckpointWriter {
  const { leaseMs, ...rest } = deps;
  const notes = { notesRef: config.WORKER_NOTES_REF, historyLimit: config.WORKER_CHECKPOINT_HISTORY_LIMIT };
  return new CheckpointWriter({ ...rest, ...notes, leaseMs: leaseMs ?? config.WORKER_LEASE_MS }, state);
}

/** A checkpoint phase that just ended: its latency in the histogram and its span. */
function phaseDone(phase: 'commit' | 'row' | 'note', started: number, attributes: Attributes): void {
  const ended = performance.now();
  workerMetrics.checkpointSeconds.observe({ phase }, (ended - started) / 1000);
  recordSpan(`echodo.checkpoint.${phase}`, attributes, started, ended);
}

export class CheckpointWriter {
  private pendingNotes: NoteWrite[] = [];
  /** The mirror runs behind the loop: a note is written while the model works on the next round. */
  private mirroring: Promise<void> = Promise.resolve();
  /** The worktree's index brought in step with the last commit, also behind the loop (content.ts). */
  private indexing: Promise<void> = Promise.resolve();
  /**
   * The last checkpoint counting (with the remote: its push, then its row) behind the loop. A
   * rejection stays: every later write, tool call and settle throws why that checkpoint did not count.
   */
  private counting: Promise<void> = Promise.resolve();
  private digest: ManifestDigest | undefined;
  /** Rounds up to this step are in a row already: the next row holds the rounds after it. */
  private checkpointedStep: number;
  private readonly packer: ObjectPacker | undefined;
  /** Usage of the rounds since the last checkpoint; it goes into the next row. */
  private pendingUsage: RoundUsage | undefined;

  constructor(
    private readonly deps: {
      sql: Sql;
      run: RunIdentity;
      lease: Lease;
      tree: WorkingTree;
      tracker: TouchTracker;
      notesRef: string;
      historyLimit: number;
      leaseMs: number;
      log: Logger;
      /** Pack the run's objects every this many checkpoints (0: never). */
      packEvery?: number;
      /**
       * WORKER_CHECKPOINT_REMOTE set (code harness): the commit is pushed before the row counts,
       * and notes also go to the run's own notes ref (pushed with the next commit, and at the end).
       */
      remote?: { pusher: RemotePusher; notesRef: string };
      /** A remote agent's thread and state, read at each checkpoint and kept on its row. */
      agentState?: () => object | undefined;
    },
    readonly state: CheckpointState,
  ) {
    this.checkpointedStep = state.step;
    const every = deps.packEvery ?? 16;
    this.packer = deps.tree.git && every > 0 ? new ObjectPacker(deps.tree.root, every, deps.log) : undefined;
  }

  private async manifest(): Promise<Map<string, string | null>> {
    if (!this.state.manifest) {
      const { run } = this.deps;
      const rows = await withWorkspace(this.deps.sql, run.workspaceId, (tx) => runManifest(tx, run.agentRunId));
      this.state.manifest = new Map(rows.map((m) => [m.path, m.sha256]));
    }
    this.digest ??= ManifestDigest.of([...this.state.manifest].map(([path, sha256]) => ({ path, sha256 })));
    return this.state.manifest;
  }

  /** A round's usage, recorded with the checkpoint that records the round. */
  noteUsage(usage: RoundUsage): void {
    this.pendingUsage = this.pendingUsage ? addUsage(this.pendingUsage, usage) : usage;
    this.countUsage(usage);
  }

  /** A model call's tokens in the worker's metrics (a final text-only answer too, kept on its run). */
  countUsage(usage: RoundUsage): void {
    const labels = { workspace: this.deps.run.workspaceId, model: modelLabel(usage.modelId) };
    const kinds = {
      input: usage.inputTokens,
      output: usage.outputTokens,
      cache_read: usage.cacheReadTokens,
      cache_write: usage.cacheWriteTokens,
      reasoning: usage.reasoningTokens,
    };
    for (const [kind, n] of Object.entries(kinds)) if (n !== null) workerMetrics.tokens.inc({ ...labels, kind }, n);
  }

  /** Writes checkpoint seq+1 for the rounds done so far. Throws LeaseLostError when fenced off. */
  async write(): Promise<void> {
    const { run, tree, lease } = this.deps;
    const started = performance.now();
    // The previous checkpoint counted, and its note was written while the model worked on this
    // round; it lands before this checkpoint, so only the latest checkpoint can ever lack its note.
    await this.counting;
    await Promise.all([this.mirroring, this.indexing]);
    // The fence, the manifest and the drain are reads: side by side. Nothing is written before
    // the fence has answered.
    const fenced = lease.assertHeld();
    fenced.catch(() => {}); // awaited just below; no unhandled rejection meanwhile
    const [manifest, paths] = await Promise.all([this.manifest(), this.deps.tracker.drain()]);
    await fenced;
    const seq = this.state.seq + 1;
    const prevHash = this.state.prevHash;

    let commit: ContentCommit | null = null;
    if (tree.git) {
      const commitStarted = performance.now();
      commit = await commitTouchedPaths({
        worktree: tree.root,
        branch: tree.git.branch,
        parentOid: this.state.headOid!,
        paths,
        // The workspace too: run ids are unique per workspace only, and two runs that made the same
        // change in the same second would otherwise make one commit, whose note each overwrites.
        message: `echodo checkpoint ${seq} (run ${run.agentRunId} of workspace ${run.workspaceId})`,
      });
      phaseDone('commit', commitStarted, { 'echodo.checkpoint_seq': seq, 'echodo.files': paths.length });
      faultPoint('after-content-commit');
    }
    const commitOid = commit?.commitOid ?? null;

    // This checkpoint's files: what differs from the manifest (paths redacted here, once each).
    const digest = this.digest!.clone();
    const changed: FileTouched[] = [];
    // The committed files' hashes come from the bytes fast-import stored (read once).
    for (const f of commit?.files ?? (await describeFiles(tree.root, paths))) {
      const p = redactPath(f.path);
      const sha256 = f.deleted ? null : f.sha256;
      const before = manifest.get(p);
      if (before === sha256) continue;
      if (before !== undefined) digest.remove(p, before);
      digest.add(p, sha256);
      changed.push(sha256 === null ? { path: p, sha256: null, deleted: true } : { path: p, sha256 });
    }
    changed.sort((a, b) => (a.path < b.path ? -1 : 1));
    const ownCalls = this.state.history.filter((h) => h.round > this.checkpointedStep);
    const payload: CheckpointPayload = {
      format: DELTA_FORMAT,
      workspaceId: run.workspaceId,
      agentRunId: run.agentRunId,
      checkpointSeq: seq,
      step: this.state.step,
      toolHistory: ownCalls,
      filesTouched: changed,
      branch: tree.git?.branch ?? null,
      worktreePath: tree.git?.worktreePath ?? null,
      commitOid,
      treeOid: commit?.treeOid ?? null,
      manifestDigest: digest.hex(),
      manifestCount: digest.count,
    };
    const hash = checkpointHash(prevHash, payload);

    const row = {
      ...run,
      checkpointSeq: seq,
      step: payload.step,
      toolHistory: ownCalls,
      filesTouched: changed,
      branch: payload.branch,
      worktreePath: payload.worktreePath,
      commitOid,
      treeOid: payload.treeOid!,
      manifestDigest: payload.manifestDigest!,
      manifestCount: digest.count,
      prevHash,
      hash,
      usage: this.pendingUsage,
      agentState: this.deps.agentState?.(),
    };
    this.pendingUsage = undefined;
    const counted = this.count({ row, payload, commit, changed, digest, manifest, started });
    if (!this.deps.remote || !commitOid) return counted;
    this.counting = counted;
    counted.catch(() => {}); // thrown by readyForTools, the next write and settleNotes
  }

  /**
   * The checkpoint counts: the push acknowledged (with the remote), then the fenced row; the index
   * and the note follow behind. With the remote all of it runs during the next model call, where
   * the worker only waits: the push's processes never compete with the round's own work.
   */
  private async count(c: {
    row: NewCheckpoint;
    payload: CheckpointPayload;
    commit: ContentCommit | null;
    changed: FileTouched[];
    digest: ManifestDigest;
    manifest: Map<string, string | null>;
    started: number;
  }): Promise<void> {
    const { run, tree, lease, log, remote } = this.deps;
    const { row, payload, commit, changed, digest, manifest } = c;
    const { checkpointSeq: seq, hash, prevHash, commitOid } = row;
    if (remote && commitOid) {
      faultPoint('before-push');
      await remote.pusher.pushCheckpoint(commitOid);
      faultPoint('after-push');
    }
    const rowStarted = performance.now();
    const inserted = await retryTransient(
      (attempt) =>
        withWorkspace(this.deps.sql, run.workspaceId, async (tx) => {
          // A retry after a lost connection: the first attempt may have committed.
          if (attempt > 1) {
            const existing = await checkpointAt(tx, run.agentRunId, seq);
            if (existing) return existing.hash === hash ? existing : undefined;
          }
          return appendCheckpoint(tx, row, { leaseEpoch: lease.epoch, leaseMs: this.deps.leaseMs });
        }),
      {
        onRetry: (err, attempt) =>
          log.warn({ seq, attempt, error: errorMessage(err) }, 'checkpoint row insert failed transiently; retrying'),
      },
    );
    if (!inserted)
      throw new LeaseLostError(
        `run ${run.agentRunId}: fenced off at checkpoint ${seq} (lease epoch ${lease.epoch} is no longer current)`,
      );
    lease.renewed();
    phaseDone('row', rowStarted, { 'echodo.checkpoint_seq': seq, 'echodo.files': changed.length });
    workerMetrics.checkpointSeconds.observe({ phase: 'total' }, (performance.now() - c.started) / 1000);
    workerMetrics.checkpoints.inc({ workspace: run.workspaceId });
    if (commit) {
      // Only now, with the row in (and never after a lost fence: the next holder owns the worktree).
      this.indexing = commit.indexNow().then(
        ({ inStep, paths: touched }) => {
          if (!inStep)
            log.warn(
              { seq, paths: touched.slice(0, 20) },
              'the index, updated the ordinary way, differs from the checkpoint commit; resume resets it',
            );
        },
        (err) =>
          log.warn(
            { seq, error: errorMessage(err) },
            'bringing the index in step with the checkpoint commit failed; resume resets it',
          ),
      );
    }
    for (const f of changed) manifest.set(f.path, f.sha256);
    this.digest = digest;
    this.checkpointedStep = payload.step;
    const history = boundHistory(this.state.history, this.deps.historyLimit);
    Object.assign(this.state, { seq, prevHash: hash, headOid: commitOid ?? this.state.headOid, history });
    faultPoint('after-checkpoint-row');
    log.info({ seq, step: payload.step, commitOid, files: changed.length }, 'checkpoint written');

    if (tree.git && commitOid) {
      // The note: this checkpoint's files and the run's summary (tree, manifest digest).
      const note = checkpointNote({
        workspaceId: run.workspaceId,
        agentRunId: run.agentRunId,
        checkpointSeq: seq,
        step: payload.step,
        hash,
        prevHash,
        branch: tree.git.branch,
        files: changed,
        treeOid: payload.treeOid,
        manifestDigest: payload.manifestDigest,
        manifestCount: digest.count,
      });
      this.pendingNotes.push({ commitOid, note });
      this.mirroring = this.mirroring
        .then(() => this.flushNotes())
        .then(() => this.packer?.afterCheckpoint())
        .catch((err) => {
          this.deps.log.warn({ error: errorMessage(err) }, 'git note mirror stopped');
        });
    }
  }

  /**
   * Before a tool touches the worktree: the last checkpoint counted (with the remote, its push and
   * row ran while the model thought; why it did not count is thrown here, and the run stops at the
   * checkpoint before) and its index is in step (the tool's git commands see the index).
   */
  async readyForTools(): Promise<void> {
    await this.counting;
    await this.indexing;
  }

  /** Waits for the mirror to catch up (before a run completes or is released). */
  async settleNotes(): Promise<void> {
    await this.counting;
    await Promise.all([this.mirroring, this.indexing]);
    if (this.pendingNotes.length) await this.flushNotes().catch(() => {});
    await this.packer?.settle();
    // The latest note follows its commit to the remote (a failure stops the run like a failed push).
    await this.deps.remote?.pusher.pushNotes();
  }

  /**
   * Nothing of the last checkpoint still running, however it ended: before a failed or fenced
   * attempt returns, so no push, row or note of it lands after the run is released.
   */
  async quiesce(): Promise<void> {
    await this.counting.catch(() => {});
    await Promise.all([this.mirroring, this.indexing]);
  }

  /** Mirrors pending notes; what fails stays pending for the next checkpoint (and resume repairs it). */
  async flushNotes(): Promise<void> {
    const batch = this.pendingNotes;
    this.pendingNotes = [];
    if (!batch.length) return;
    try {
      this.deps.lease.assertFresh();
      const started = performance.now();
      await writeCheckpointNotes(this.deps.tree.root, this.deps.notesRef, batch);
      if (this.deps.remote) {
        // The run's own notes ref: what the remote receives (one ref per run never conflicts across hosts).
        await writeCheckpointNotes(this.deps.tree.root, this.deps.remote.notesRef, batch);
        this.deps.remote.pusher.notesWritten();
      }
      const seqs = batch.map((b) => b.note.checkpointSeq);
      phaseDone('note', started, { 'echodo.checkpoint_seq': Math.max(...seqs), 'echodo.notes': seqs.length });
      faultPoint('after-note');
    } catch (err) {
      // Kept for the next checkpoint; resume rewrites whatever is still missing from Postgres.
      this.pendingNotes.unshift(...batch);
      if (err instanceof LeaseLostError) throw err;
      this.deps.log.warn(
        { seqs: batch.map((b) => b.note.checkpointSeq), error: errorMessage(err) },
        'git note mirror write failed; will retry',
      );
    }
  }
}
