// Where a checkpoint is written. Order, and why:
//  1. content: commit the touched paths on the run's branch (git objects; contents stay in git);
//  2. truth: insert the worker_checkpoints row, fenced on lease_epoch, renewing the heartbeat
//     (the commit point: a crash before it resumes from the previous checkpoint);
//  3. mirror: the git note on the commit, written in the background while the next round runs
//     and awaited before the next checkpoint (a failure is logged and retried, never fatal).
import type { Sql } from 'postgres';
import { appendCheckpoint, checkpointAt, type CheckpointRow } from '../../store/checkpoints.ts';
import { retryTransient } from '../../store/retry.ts';
import { withWorkspace } from '../../store/workspace.ts';
import { errorMessage } from '../errors.ts';
import { faultPoint } from '../faults.ts';
import type { Lease } from '../lease.ts';
import type { Logger } from '../log.ts';
import { commitTouchedPaths, describeFiles } from './content.ts';
import { checkpointHash, type CheckpointPayload, type FileTouched } from './hash.ts';
import { boundHistory, type ToolCallRecord } from './history.ts';
import { writeCheckpointNotes, type NoteWrite } from './notes.ts';
import { redactString } from './redact.ts';

/** Fail closed: a path the redactor cannot process is not stored. */
function redactPath(p: string): string {
  try {
    return redactString(p);
  } catch {
    return '[path dropped: redaction failed]';
  }
}
import type { TouchTracker } from './tracker.ts';
import { LeaseLostError } from '../errors.ts';

export interface RunIdentity {
  workspaceId: string;
  agentRunId: string;
  convoyId: string;
  briefId: string;
  attempt: number;
}

/** Everything a run's next checkpoint builds on. Loaded from the latest row on resume. */
export interface CheckpointState {
  seq: number;
  prevHash: string | null;
  /** The last checkpoint's commit (or the branch's base before the first one). */
  headOid: string | null;
  step: number;
  history: ToolCallRecord[];
  files: Map<string, FileTouched>;
}

export function stateFromRow(row: CheckpointRow | undefined, baseOid: string | null): CheckpointState {
  if (!row) return { seq: 0, prevHash: null, headOid: baseOid, step: 0, history: [], files: new Map() };
  return {
    seq: row.checkpoint_seq,
    prevHash: row.hash,
    headOid: row.commit_oid ?? baseOid,
    step: row.step,
    history: row.tool_history as ToolCallRecord[],
    files: new Map(row.files_touched.map((f) => [f.path, f])),
  };
}

export interface WorkingTree {
  root: string;
  /** Set for the code harness: the worktree is committed. Null for doc-writer: hashes only. */
  git: { branch: string; worktreePath: string } | null;
}

export class CheckpointWriter {
  private pendingNotes: NoteWrite[] = [];
  /** The mirror runs behind the loop: a note is written while the model works on the next round. */
  private mirroring: Promise<void> = Promise.resolve();

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
    },
    readonly state: CheckpointState,
  ) {}

  /** Writes checkpoint seq+1 for the rounds done so far. Throws LeaseLostError when fenced off. */
  async write(): Promise<void> {
    const { run, tree, lease, log } = this.deps;
    // The previous note was written while the model worked on this round; it lands before this
    // checkpoint, so only the latest checkpoint can ever lack its note.
    await this.mirroring;
    await lease.assertHeld();
    const seq = this.state.seq + 1;
    const prevHash = this.state.prevHash;
    const paths = await this.deps.tracker.drain();

    let commitOid: string | null = null;
    if (tree.git) {
      commitOid = await commitTouchedPaths({
        worktree: tree.root,
        branch: tree.git.branch,
        parentOid: this.state.headOid!,
        paths,
        message: `echodo checkpoint ${seq} (run ${run.agentRunId})`,
      });
      faultPoint('after-content-commit');
    }

    // History entries were redacted when recorded (history.ts); paths are redacted here, once each.
    for (const f of await describeFiles(tree.root, paths)) this.state.files.set(f.path, { ...f, path: redactPath(f.path) });
    const history = boundHistory(this.state.history, this.deps.historyLimit);
    const payload: CheckpointPayload = {
      workspaceId: run.workspaceId,
      agentRunId: run.agentRunId,
      checkpointSeq: seq,
      step: this.state.step,
      toolHistory: history,
      filesTouched: [...this.state.files.values()].sort((a, b) => (a.path < b.path ? -1 : 1)),
      branch: tree.git?.branch ?? null,
      worktreePath: tree.git?.worktreePath ?? null,
      commitOid,
    };
    const hash = checkpointHash(prevHash, payload);

    const row = { ...run, checkpointSeq: seq, step: payload.step, toolHistory: payload.toolHistory, filesTouched: payload.filesTouched, branch: payload.branch, worktreePath: payload.worktreePath, commitOid, prevHash, hash };
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
      { onRetry: (err, attempt) => log.warn({ seq, attempt, error: errorMessage(err) }, 'checkpoint row insert failed transiently; retrying') },
    );
    if (!inserted) throw new LeaseLostError(`run ${run.agentRunId}: fenced off at checkpoint ${seq} (lease epoch ${lease.epoch} is no longer current)`);
    lease.renewed();
    Object.assign(this.state, { seq, prevHash: hash, headOid: commitOid ?? this.state.headOid, history });
    faultPoint('after-checkpoint-row');
    log.info({ seq, step: payload.step, commitOid, files: paths.length }, 'checkpoint written');

    if (tree.git && commitOid) {
      this.pendingNotes.push({
        commitOid,
        note: {
          workspaceId: run.workspaceId,
          agentRunId: run.agentRunId,
          checkpointSeq: seq,
          step: payload.step,
          hash,
          prevHash,
          branch: tree.git.branch,
          files: payload.filesTouched.map((f) => ({ path: f.path, sha256: f.sha256 })),
        },
      });
      this.mirroring = this.mirroring.then(() => this.flushNotes()).catch((err) => {
        this.deps.log.warn({ error: errorMessage(err) }, 'git note mirror stopped');
      });
    }
  }

  /** Waits for the mirror to catch up (before a run completes or is released). */
  async settleNotes(): Promise<void> {
    await this.mirroring;
    if (this.pendingNotes.length) await this.flushNotes().catch(() => {});
  }

  /** Mirrors pending notes; what fails stays pending for the next checkpoint (and resume repairs it). */
  async flushNotes(): Promise<void> {
    const batch = this.pendingNotes;
    this.pendingNotes = [];
    if (!batch.length) return;
    try {
      this.deps.lease.assertFresh();
      await writeCheckpointNotes(this.deps.tree.root, this.deps.notesRef, batch);
      faultPoint('after-note');
    } catch (err) {
      // Kept for the next checkpoint; resume rewrites whatever is still missing from Postgres.
      this.pendingNotes.unshift(...batch);
      if (err instanceof LeaseLostError) throw err;
      this.deps.log.warn({ seqs: batch.map((b) => b.note.checkpointSeq), error: errorMessage(err) }, 'git note mirror write failed; will retry');
    }
  }
}
