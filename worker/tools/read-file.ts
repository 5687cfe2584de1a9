// read_file: shows the model at most READ_CAP_BYTES of a file; the tree process hashes the whole of
// it as a stream, so a 50 MB file costs one 64 KiB chunk buffer and the cap, never the file's size.
import { z } from 'zod';
import { ToolRefusedError } from '../../core/errors.ts';
import type { ToolContext, ToolDefinition } from './context.ts';
import { displayPath, resolveInside } from './paths.ts';
import { withTree } from '../tree/registry.ts';

export const READ_CAP_BYTES = 256 * 1024;
const BINARY_SNIFF_BYTES = 8 * 1024;

export const readFileInput = z.object({
  path: z.string().describe('Path of the file, relative to the worktree root, e.g. "src/index.ts".'),
});
export type ReadFileInput = z.infer<typeof readFileInput>;

export interface ReadFileResult {
  path: string;
  /** Size of the whole file. */
  bytes: number;
  /** sha256 (hex) of the whole file, not just the part shown. */
  sha256: string;
  content?: string;
  truncated?: boolean;
  binary?: boolean;
  note?: string;
}

export async function readFile(
  ctx: ToolContext,
  input: ReadFileInput,
  capBytes = READ_CAP_BYTES,
): Promise<ReadFileResult> {
  const { rel, real } = await resolveInside(ctx, input.path, { forWrite: false });
  // Opened by the tree process, never here: a folder swapped for a symlink since is not followed.
  const facts = await withTree(ctx.root, (tree) => tree.read(real, capBytes));
  const shown = displayPath(input.path);
  if (facts.kind === 'missing') throw new ToolRefusedError(`file ${shown} does not exist`);
  if (facts.kind === 'outside')
    throw new ToolRefusedError(`path ${shown} goes through a folder that is a symlink; it is not read`);
  if (facts.kind === 'dir' || facts.kind === 'repo')
    throw new ToolRefusedError(`path ${shown} is a folder, not a file; use grep to look inside it`);
  if (facts.kind !== 'file') throw new ToolRefusedError(`path ${shown} is not a regular file`);
  const head = (facts.head ?? Buffer.alloc(0)).subarray(0, capBytes);
  const bytes = facts.bytes ?? head.length;
  const sha256 = facts.sha256 ?? '';
  if (head.subarray(0, BINARY_SNIFF_BYTES).includes(0)) {
    return { path: rel, bytes, sha256, binary: true, note: `binary file, ${bytes} bytes, sha256 ${sha256}` };
  }

  const truncated = bytes > head.length;
  const notes: string[] = [];
  if (truncated) notes.push(`file is ${bytes} bytes; showing the first ${head.length}`);
  // stream: true when truncated, so a character cut in half by the cap is dropped, not reported as invalid.
  let content: string;
  try {
    content = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(head, { stream: truncated });
  } catch {
    content = new TextDecoder('utf-8', { ignoreBOM: true }).decode(head, { stream: truncated });
    notes.push(
      'file is not valid UTF-8; invalid bytes are shown as U+FFFD (writing this content back would change them)',
    );
  }
  const result: ReadFileResult = { path: rel, bytes, sha256, content };
  if (truncated) result.truncated = true;
  if (notes.length > 0) result.note = notes.join('; ');
  return result;
}

export const readFileTool: ToolDefinition<typeof readFileInput, ReadFileResult> = {
  name: 'read_file',
  description:
    `Read a text file of the worktree. Shows at most ${READ_CAP_BYTES} bytes (a note says when the file is longer); ` +
    "binary files are described, not shown. Returns the whole file's size and sha256.",
  inputSchema: readFileInput,
  execute: (ctx, input) => readFile(ctx, input),
};
