// What changed in checkpoint N: the files changed since N−1 (from the two commits, with +/- line
// counts), their diff text (size-capped, marked "truncated"; binary files named, not shown), and
// the tool calls of that round as stored (already redacted when recorded, and redacted again on
// the way out, as is the diff text). Git runs with no hooks, no textconv, no external diff.
import { spawn } from 'node:child_process';
import type { CheckpointRow } from '../store/checkpoints.ts';
import { checkpointAt } from '../store/checkpoints.ts';
import { getRun, type RunRow } from '../store/runs.ts';
import type { WorkspaceTx } from '../store/workspace.ts';
import type { ToolCallRecord } from '../worker/checkpoints/history.ts';
import { redactString, redactValue } from '../core/redact.ts';
import { safeGitEnv } from '../worker/git/run-git.ts';

/** The whole diff text is capped here; each file's own part at PER_FILE_LIMIT. */
export const DIFF_LIMIT_BYTES = 256 * 1024;
export const PER_FILE_LIMIT_BYTES = 64 * 1024;
const MAX_FILES = 500;
const SAFE_GIT = ['-c', 'core.hooksPath=/dev/null', '-c', 'diff.external=', '-c', 'core.quotePath=false'];

export interface DiffFile {
  path: string;
  added: number | null;
  deleted: number | null;
  binary: boolean;
  /** Unified diff of this file (absent for binary files); cut at the cap when `truncated`. */
  diff?: string;
  truncated?: boolean;
}

export interface CheckpointDiff {
  agentRunId: string;
  seq: number;
  step: number;
  commitOid: string;
  parentOid: string | null;
  files: DiffFile[];
  /** True when any file's diff, or the list of files, was cut. */
  truncated: boolean;
  limitBytes: number;
  toolCalls: ToolCallRecord[];
}

export interface DiffSource {
  run: RunRow;
  row: CheckpointRow;
  parentOid: string | null;
  toolCalls: ToolCallRecord[];
}

/** The rows a diff needs, read in the caller's workspace; undefined when the run or seq is not there. */
export async function loadDiffSource(
  tx: WorkspaceTx,
  agentRunId: string,
  seq: number,
): Promise<DiffSource | undefined> {
  const run = await getRun(tx, agentRunId);
  if (!run) return undefined;
  const row = await checkpointAt(tx, agentRunId, seq);
  if (!row) return undefined;
  const prev = seq > 1 ? await checkpointAt(tx, agentRunId, seq - 1) : undefined;
  // Checkpoint 1 starts from the branch base (a fork's base is its source checkpoint's commit).
  const parentOid = prev?.commit_oid ?? (seq === 1 ? run.base_oid : null);
  const prevStep = prev?.step ?? (seq === 1 ? (run.fork_seed?.step ?? 0) : row.step - 1);
  const toolCalls = (row.tool_history as ToolCallRecord[]).filter((c) => c.round > prevStep && c.round <= row.step);
  return { run, row, parentOid, toolCalls };
}

/** Runs git, keeping at most `limit` bytes of its output (then it is stopped). */
async function gitCapped(
  cwd: string,
  args: string[],
  limit: number,
): Promise<{ out: Buffer; cut: boolean; code: number | null; err: string }> {
  // The worker's git environment: its safe config, and a checkpoint remote's credentials (a host
  // whose repository is a partial clone fetches a blob it lacks).
  const env = { ...(await safeGitEnv(cwd)), GIT_EXTERNAL_DIFF: '' };
  return new Promise((resolve, reject) => {
    const child = spawn('git', [...SAFE_GIT, ...args], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const chunks: Buffer[] = [];
    let size = 0;
    let cut = false;
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      if (cut) return;
      if (size + d.length > limit) {
        chunks.push(d.subarray(0, limit - size));
        size = limit;
        cut = true;
        child.kill('SIGKILL');
        return;
      }
      chunks.push(d);
      size += d.length;
    });
    child.stderr.on('data', (d: Buffer) => (err += d.toString('utf8').slice(0, 2000)));
    child.on('error', reject);
    child.on('close', (code) => resolve({ out: Buffer.concat(chunks), cut, code, err }));
  });
}

/** numstat -z: "added\tdeleted\tpath\0" per file; "-\t-\t" for binary files. */
function parseNumstat(text: string): DiffFile[] {
  return text
    .split('\0')
    .filter(Boolean)
    .map((entry) => {
      const [added, deleted, ...rest] = entry.split('\t');
      const binary = added === '-' && deleted === '-';
      return {
        path: rest.join('\t'),
        added: binary ? null : Number(added),
        deleted: binary ? null : Number(deleted),
        binary,
      };
    });
}

export async function checkpointDiff(repoPath: string, source: DiffSource): Promise<CheckpointDiff> {
  const { run, row, parentOid, toolCalls } = source;
  const commit = row.commit_oid!;
  const base = parentOid ?? `${commit}^`;
  const numstat = await gitCapped(
    repoPath,
    ['diff', '--no-ext-diff', '--no-textconv', '--no-renames', '--numstat', '-z', base, commit, '--'],
    1024 * 1024,
  );
  if (numstat.code !== 0 && !numstat.cut) throw new Error(`git diff --numstat failed: ${numstat.err.trim()}`);
  let files = parseNumstat(numstat.out.toString('utf8'));
  let truncated = numstat.cut || files.length > MAX_FILES;
  files = files.slice(0, MAX_FILES);

  let budget = DIFF_LIMIT_BYTES;
  for (const file of files) {
    if (file.binary) continue; // named, never shown
    if (budget <= 0) {
      file.truncated = true;
      truncated = true;
      continue;
    }
    const limit = Math.min(PER_FILE_LIMIT_BYTES, budget);
    const r = await gitCapped(
      repoPath,
      [
        'diff',
        '--no-ext-diff',
        '--no-textconv',
        '--no-renames',
        '--no-color',
        base,
        commit,
        '--',
        `:(literal)${file.path}`,
      ],
      limit,
    );
    file.diff = redactString(r.out.toString('utf8'));
    budget -= r.out.length;
    if (r.cut) {
      file.truncated = true;
      truncated = true;
    }
  }
  for (const file of files) file.path = redactString(file.path);
  return {
    agentRunId: run.id,
    seq: row.checkpoint_seq,
    step: row.step,
    commitOid: commit,
    parentOid: parentOid,
    files,
    truncated,
    limitBytes: DIFF_LIMIT_BYTES,
    toolCalls: redactValue(toolCalls),
  };
}
