// `integrity-check --remote` (docs/checkpoints.md "Many hosts"): the run's rows, notes and commits
// compared with what the checkpoint remote holds. No clone: one `git ls-remote`, then one `git fetch`
// of the run's branch and notes ref into a private scratch namespace of the local repository
// (refs/echodo-verify/<nonce>/…, removed afterwards), and every read is local from there.
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { EchodoError } from '../../core/errors.ts';
import { redactString } from '../../core/redact.ts';
import type { CheckpointRow } from '../../store/checkpoints.ts';
import { gitErrorDetail, runGit } from '../git/run-git.ts';
import { noteClaims, notesIn, parseNote, reachableSince, readBlobs, rowClaims } from '../checkpoints/note-claims.ts';
import { lsRemote, runNotesRef, runRemoteGit } from './push.ts';

export type RemoteFindingKind =
  | 'remote_branch_missing' // the run's branch is not on the remote at all
  | 'remote_commit_missing' // a row's commit_oid is not reachable from the run's branch on the remote
  | 'remote_branch_behind' // the remote branch tip is an ancestor of the last checkpoint's commit
  | 'remote_branch_diverged' // the remote branch tip neither is nor descends from the last checkpoint
  | 'remote_note_missing' // the run's notes ref on the remote has no note for a row's commit
  | 'remote_note_mismatch'; // the note on the remote does not say what the row says

export interface RemoteFinding {
  kind: RemoteFindingKind;
  detail: string;
}

export interface RemoteInspection {
  /** The remote as configured, redacted (a URL may carry credentials). */
  remote: string;
  branch: string | null;
  notesRef: string;
  /** The run's branch tip on the remote; null when the branch is not there. */
  branchTip: string | null;
  /** Commits the remote branch holds past the last checkpoint (a push whose row never came: allowed). */
  aheadOfCheckpoint: number;
  rowsChecked: number;
  findings: RemoteFinding[];
}

/** The remote could not be asked (down, unknown, no local repository to fetch into): not a verdict. */
export class RemoteVerifyError extends EchodoError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('transient', redactString(message), options);
    this.name = 'RemoteVerifyError';
  }
}

const seqList = (rows: CheckpointRow[]) => rows.map((r) => r.checkpoint_seq).join(', ');

export async function inspectRemote(args: {
  repoPath: string;
  remote: string;
  run: { id: string; workspace_id: string; branch: string | null };
  chain: CheckpointRow[];
}): Promise<RemoteInspection> {
  const { repoPath, remote, run } = args;
  const notesRef = runNotesRef(run.workspace_id, run.id);
  const rows = args.chain.filter((row) => row.commit_oid);
  const inspection: RemoteInspection = {
    remote: redactString(remote),
    branch: run.branch,
    notesRef,
    branchTip: null,
    aheadOfCheckpoint: 0,
    rowsChecked: rows.length,
    findings: [],
  };
  // A doc-writer run has no branch and pushes nothing; a run with no checkpoint has nothing to compare.
  if (!run.branch || !rows.length) return inspection;
  // The objects are fetched into a local repository; without one that would be a clone.
  if (!existsSync(repoPath))
    throw new RemoteVerifyError(`no local repository at ${repoPath} to fetch the run's refs into`);
  const branchRef = `refs/heads/${run.branch}`;
  const there = await lsRemote(repoPath, remote, [branchRef, notesRef]).catch((err: unknown) => {
    throw new RemoteVerifyError(`could not reach the checkpoint remote: ${gitErrorDetail(err)}`, { cause: err });
  });
  const scratch = `refs/echodo-verify/${randomUUID()}`;
  const specs = [
    ...(there.has(branchRef) ? [`+${branchRef}:${scratch}/branch`] : []),
    ...(there.has(notesRef) ? [`+${notesRef}:${scratch}/notes`] : []),
  ];
  try {
    if (specs.length) {
      await runRemoteGit(repoPath, ['fetch', '--quiet', '--no-tags', '--no-write-fetch-head'], remote, specs).catch(
        (err: unknown) => {
          const what = `could not fetch ${branchRef} and ${notesRef} from the checkpoint remote`;
          throw new RemoteVerifyError(`${what}: ${gitErrorDetail(err)}`, { cause: err });
        },
      );
    }
    // What was fetched, not what ls-remote said a moment before: the refs may have moved since.
    const fetched = async (name: string) => {
      const r = await runGit(repoPath, ['rev-parse', '--verify', '--quiet', `${scratch}/${name}`], {
        allowExitCodes: [1],
      });
      return r.stdout.trim() || null;
    };
    const [tip, notesTip] = await Promise.all([fetched('branch'), fetched('notes')]);
    inspection.branchTip = tip;
    if (tip) await compareCommits(repoPath, tip, rows, inspection);
    else {
      inspection.findings.push(
        { kind: 'remote_branch_missing', detail: `${branchRef} is not on the checkpoint remote` },
        {
          kind: 'remote_commit_missing',
          detail: `checkpoint(s) ${seqList(rows)}: no branch on the remote holds their commits`,
        },
      );
    }
    if (notesTip) await compareNotes(repoPath, notesTip, rows, inspection);
    else {
      const detail = `${notesRef} is not on the checkpoint remote: no note for checkpoint(s) ${seqList(rows)}`;
      inspection.findings.push({ kind: 'remote_note_missing', detail });
    }
  } finally {
    await removeScratch(repoPath, scratch);
  }
  return inspection;
}

/** Every row's commit reachable from the remote tip, and the tip at or past the last checkpoint. */
async function compareCommits(
  repoPath: string,
  tip: string,
  rows: CheckpointRow[],
  inspection: RemoteInspection,
): Promise<void> {
  const reachable = await reachableSince(repoPath, tip, rows);
  const missing = rows.filter((row) => !reachable.has(row.commit_oid!));
  const on = `${inspection.branch} on the remote`;
  if (missing.length) {
    const detail = `checkpoint(s) ${seqList(missing)}: commit not reachable from ${on} (tip ${tip})`;
    inspection.findings.push({ kind: 'remote_commit_missing', detail });
  }
  const last = rows.at(-1)!.commit_oid!;
  if (tip === last) return;
  if (reachable.has(last)) {
    // A push acknowledged before its row (a worker killed at after-push): the next holder's push
    // replaces it. Every row is still on the remote, which is the invariant; so not a finding.
    const count = await runGit(repoPath, ['rev-list', '--count', `${last}..${tip}`]);
    inspection.aheadOfCheckpoint = Number(count.stdout.trim());
    return;
  }
  const behind = await runGit(repoPath, ['merge-base', '--is-ancestor', tip, last], { allowExitCodes: [1, 128] });
  inspection.findings.push(
    behind.exitCode === 0
      ? { kind: 'remote_branch_behind', detail: `${on} is at ${tip}, behind the last checkpoint ${last}` }
      : {
          kind: 'remote_branch_diverged',
          detail: `${on} is at ${tip}, which does not descend from the last checkpoint ${last}`,
        },
  );
}

/** Every row has its note in the run's notes ref on the remote, saying what the row says. */
async function compareNotes(
  repoPath: string,
  notesCommit: string,
  rows: CheckpointRow[],
  inspection: RemoteInspection,
): Promise<void> {
  const notes = await notesIn(repoPath, notesCommit);
  const wanted = new Set(rows.map((r) => notes.get(r.commit_oid!)).filter((b): b is string => !!b));
  const blobs = await readBlobs(repoPath, [...wanted]);
  const missing: CheckpointRow[] = [];
  const wrong: string[] = [];
  for (const row of rows) {
    const blob = notes.get(row.commit_oid!);
    const text = blob ? blobs.get(blob) : undefined;
    if (text === undefined) {
      missing.push(row);
      continue;
    }
    const note = parseNote(text);
    if (!note || noteClaims(note) !== rowClaims(row)) {
      const says = note
        ? `seq ${note.checkpointSeq} hash ${String(note.hash).slice(0, 12)}, ${note.files?.length ?? 0} file(s)`
        : 'not a checkpoint note';
      const truth = `hash ${row.hash.slice(0, 12)}, ${row.files_touched.length} file(s)`;
      wrong.push(`seq ${row.checkpoint_seq} (remote note: ${says}; Postgres: ${truth})`);
    }
  }
  if (missing.length) {
    const detail = `no note under ${inspection.notesRef} on the remote for checkpoint(s) ${seqList(missing)}`;
    inspection.findings.push({ kind: 'remote_note_missing', detail });
  }
  if (wrong.length) {
    const detail = `the remote note differs from the row (paths, sha256, seq or hash) for ${wrong.join('; ')}`;
    inspection.findings.push({ kind: 'remote_note_mismatch', detail });
  }
}

/** The scratch refs go; the fetched objects stay unreferenced until the local repo's gc. */
async function removeScratch(repoPath: string, scratch: string): Promise<void> {
  const listed = await runGit(repoPath, ['for-each-ref', '--format=%(refname)', `${scratch}/`], {
    allowExitCodes: [128],
  });
  const refs = listed.stdout.split('\n').filter(Boolean);
  if (refs.length)
    await runGit(repoPath, ['update-ref', '--stdin'], { input: refs.map((r) => `delete ${r}\n`).join('') });
}
