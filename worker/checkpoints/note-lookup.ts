// The verification's git reads: which checkpoint commits carry a note, the latest note's text,
// and the tree of the checkpoint commit. Read in this process first (worker/git/objects.ts: no git
// spawned, every object checked against its id); when a note is not found there, by one
// `git cat-file --batch-command` (each commit's three candidate paths); and when a note is found
// at none of them, or this git has no --batch-command (< 2.36), by `git notes`. So a note
// reported missing is always git's own answer. The integrity check reads every note's text once
// (readRunNotes), for the verification and the notes audit alike: in this process, or by a
// listing of the notes tree and one `git cat-file --batch`.
// A note lives at <notes-ref>:<commit oid> split by a fanout of 0, 1 or 2 levels (git picks it
// from the number of notes).
import { spawn } from 'node:child_process';
import { commonDirOnDisk, runGit, safeGitEnv } from '../git/run-git.ts';
import { commitTree, ObjectReader, parseTree, type TreeEntry } from '../git/objects.ts';
import { notedCommits, readCheckpointNote, type CheckpointNote } from './notes.ts';
import { notesIn, parseNote, readBlobs } from './note-claims.ts';

export interface NoteLookup {
  /** Commits (of those asked) that carry a note. */
  noted: Set<string>;
  /** The note on `latest`, parsed; undefined when there is none or it is not our JSON. */
  note: CheckpointNote | undefined;
  /** The tree of `treeOf` (undefined: not asked, or no such commit). */
  tree: string | undefined;
}

/** Where a note on `oid` can be in the notes tree: fanout 0, 1 and 2. */
function candidates(notesRef: string, oid: string): string[] {
  return [
    `${notesRef}:${oid}`,
    `${notesRef}:${oid.slice(0, 2)}/${oid.slice(2)}`,
    `${notesRef}:${oid.slice(0, 2)}/${oid.slice(2, 4)}/${oid.slice(4)}`,
  ];
}

interface Reply {
  found: boolean;
  oid?: string;
  body?: Buffer;
}

/** Runs one cat-file --batch-command; undefined when this git does not have it. */
async function batch(
  cwd: string,
  commands: { kind: 'info' | 'contents'; object: string }[],
): Promise<Reply[] | undefined> {
  const env = await safeGitEnv(cwd);
  const out = await new Promise<{ code: number; stdout: Buffer }>((resolve, reject) => {
    const child = spawn('git', ['cat-file', '--batch-command'], { cwd, env, stdio: ['pipe', 'pipe', 'ignore'] });
    const chunks: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => chunks.push(d));
    child.on('error', reject);
    child.stdin.on('error', () => {}); // an old git exits before reading: its exit code tells
    child.on('close', (code) => resolve({ code: code ?? -1, stdout: Buffer.concat(chunks) }));
    child.stdin.end(commands.map((c) => `${c.kind} ${c.object}\n`).join(''));
  });
  if (out.code !== 0) return undefined;
  const replies: Reply[] = [];
  let at = 0;
  for (const c of commands) {
    const nl = out.stdout.indexOf(0x0a, at);
    if (nl < 0) return undefined;
    const header = out.stdout.subarray(at, nl).toString('utf8');
    at = nl + 1;
    // "<object> missing" / "<object> ambiguous", or "<oid> <type> <size>"
    const parts = header.split(' ');
    if (parts.length !== 3 || !/^[0-9a-f]{40,64}$/.test(parts[0]!)) {
      replies.push({ found: false });
      continue;
    }
    const reply: Reply = { found: true, oid: parts[0]! };
    if (c.kind === 'contents') {
      const size = Number(parts[2]);
      reply.body = out.stdout.subarray(at, at + size);
      at += size + 1; // the content, then a newline
    }
    replies.push(reply);
  }
  return replies;
}

function noteOfBody(body: Buffer | undefined): CheckpointNote | undefined {
  return body ? parseNote(body.toString('utf8')) : undefined;
}

/**
 * Notes of `commits` (presence), the text of `latest`'s note, and `treeOf`'s tree, read with
 * one git process when every note is where a fanout puts it.
 */
export async function lookupNotes(
  cwd: string,
  notesRef: string,
  commits: string[],
  latest: string,
  treeOf?: string,
): Promise<NoteLookup> {
  const read = readNotesInProcess(cwd, notesRef, commits, latest, treeOf);
  if (read) return read;
  const others = commits.filter((c) => c !== latest);
  const commands = [
    ...others.flatMap((oid) => candidates(notesRef, oid).map((object) => ({ kind: 'info' as const, object }))),
    ...candidates(notesRef, latest).map((object) => ({ kind: 'contents' as const, object })),
    ...(treeOf ? [{ kind: 'info' as const, object: `${treeOf}^{tree}` }] : []),
  ];
  const replies = await batch(cwd, commands);
  if (replies) {
    const noted = new Set<string>();
    others.forEach((oid, i) => {
      if (replies.slice(i * 3, i * 3 + 3).some((r) => r.found)) noted.add(oid);
    });
    const latestReplies = replies.slice(others.length * 3, others.length * 3 + 3);
    const latestNote = latestReplies.find((r) => r.found);
    if (latestNote) noted.add(latest);
    const tree = treeOf ? replies.at(-1)?.oid : undefined;
    // Every note found: the answer is complete. Otherwise git's own notes code decides below.
    if (noted.size === new Set(commits).size) return { noted, note: noteOfBody(latestNote!.body), tree };
    const [listed, note] = await Promise.all([
      notedCommits(cwd, notesRef),
      latestNote ? noteOfBody(latestNote.body) : readCheckpointNote(cwd, notesRef, latest),
    ]);
    return { noted: listed, note, tree };
  }
  const [noted, note] = await Promise.all([notedCommits(cwd, notesRef), readCheckpointNote(cwd, notesRef, latest)]);
  return { noted, note, tree: treeOf ? await treeWithGit(cwd, treeOf) : undefined };
}

async function treeWithGit(cwd: string, commit: string): Promise<string | undefined> {
  const r = await runGit(cwd, ['rev-parse', '--verify', '--quiet', `${commit}^{tree}`], { allowExitCodes: [1, 128] });
  return r.exitCode === 0 ? r.stdout.trim() : undefined;
}

/** The tree of `commit`: read in this process, or by git when it is not found here. */
export async function treeOfCommit(cwd: string, commit: string): Promise<string | undefined> {
  const commonDir = commonDirOnDisk(cwd);
  const reader = commonDir ? ObjectReader.open(commonDir) : undefined;
  try {
    const object = reader?.read(commit);
    const tree = object?.type === 'commit' ? commitTree(object.body) : undefined;
    if (tree) return tree;
  } finally {
    reader?.close();
  }
  return treeWithGit(cwd, commit);
}

/**
 * The text of the note on each of `commits` (a commit without one is left out), read once for
 * every reader of a run's notes: in this process when every note is found here; otherwise git
 * lists the notes tree and reads the notes in one `cat-file --batch`, so a note reported missing
 * is git's own answer.
 */
export async function readRunNotes(cwd: string, notesRef: string, commits: string[]): Promise<Map<string, string>> {
  const inProcess = findInProcess(cwd, notesRef, new Set(commits), ({ reader, notes }) => {
    const texts = new Map<string, string>();
    for (const [commit, note] of notes) {
      const blob = reader.read(note);
      if (blob?.type !== 'blob') return undefined;
      texts.set(commit, blob.body.toString('utf8'));
    }
    return texts;
  });
  if (inProcess) return inProcess;
  const listed = await notesIn(cwd, notesRef, { missingOk: true });
  const blobs = await readBlobs(cwd, [...new Set(commits.map((c) => listed.get(c)).filter((b): b is string => !!b))]);
  const texts = new Map<string, string>();
  for (const commit of commits) {
    const text = blobs.get(listed.get(commit) ?? '');
    if (text !== undefined) texts.set(commit, text);
  }
  return texts;
}

/** Where a note on `oid` sits in a notes tree: its full name, or under a two-hex-digit folder (any depth). */
function findNote(
  reader: ObjectReader,
  trees: Map<string, Map<string, TreeEntry> | undefined>,
  root: string,
  oid: string,
): string | undefined {
  let tree = root;
  for (let at = 0; at < oid.length; at += 2) {
    if (!trees.has(tree)) {
      const object = reader.read(tree);
      trees.set(tree, object?.type === 'tree' ? parseTree(object.body) : undefined);
    }
    const entries = trees.get(tree);
    const note = entries?.get(oid.slice(at));
    if (note && note.mode !== '40000') return note.oid;
    const folder = entries?.get(oid.slice(at, at + 2));
    if (!folder || folder.mode !== '40000') return undefined;
    tree = folder.oid;
  }
  return undefined;
}

/**
 * The whole answer read in this process, or undefined when any part of it was not found here
 * (then git is asked): a found note, note text and tree are git's own bytes.
 */
export function readNotesInProcess(
  cwd: string,
  notesRef: string,
  commits: string[],
  latest: string,
  treeOf?: string,
): NoteLookup | undefined {
  return findInProcess(cwd, notesRef, new Set([...commits, latest]), ({ reader, notes }) => {
    const noteBlob = reader.read(notes.get(latest)!);
    if (noteBlob?.type !== 'blob') return undefined;
    let tree: string | undefined;
    if (treeOf) {
      const commit = reader.read(treeOf);
      tree = commit?.type === 'commit' ? commitTree(commit.body) : undefined;
      if (!tree) return undefined;
    }
    return { noted: new Set(notes.keys()), note: noteOfBody(noteBlob.body), tree };
  });
}

/**
 * Where the note on each of `commits` is (commit -> note blob), found in this process and handed
 * to `use` with the open reader; undefined when the notes ref or any note is not found here.
 */
function findInProcess<T>(
  cwd: string,
  notesRef: string,
  commits: Set<string>,
  use: (found: { reader: ObjectReader; notes: Map<string, string> }) => T | undefined,
): T | undefined {
  const commonDir = commonDirOnDisk(cwd);
  const reader = commonDir ? ObjectReader.open(commonDir) : undefined;
  if (!reader) return undefined;
  try {
    const tip = reader.resolveRef(notesRef);
    const notesCommit = tip ? reader.read(tip) : undefined;
    const root = notesCommit?.type === 'commit' ? commitTree(notesCommit.body) : undefined;
    if (!root) return undefined;
    const trees = new Map<string, Map<string, TreeEntry> | undefined>();
    const notes = new Map<string, string>();
    for (const oid of commits) {
      const note = findNote(reader, trees, root, oid);
      if (!note) return undefined;
      notes.set(oid, note);
    }
    return use({ reader, notes });
  } finally {
    reader.close();
  }
}
