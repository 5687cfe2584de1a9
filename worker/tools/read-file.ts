// read_file: shows the model at most READ_CAP_BYTES of a file, hashing the whole of it as a stream,
// so a 50 MB file costs one 64 KiB chunk buffer and the cap, never the file's size.
import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { z } from 'zod';
import { ToolRefusedError } from '../../core/errors.ts';
import type { ToolContext, ToolDefinition } from './context.ts';
import { displayPath, resolveInside } from './paths.ts';

export const READ_CAP_BYTES = 256 * 1024;
const BINARY_SNIFF_BYTES = 8 * 1024;
const CHUNK_BYTES = 64 * 1024;

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

export async function readFile(ctx: ToolContext, input: ReadFileInput, capBytes = READ_CAP_BYTES): Promise<ReadFileResult> {
  const { abs, rel } = await resolveInside(ctx, input.path, { forWrite: false });
  const handle = await openForRead(abs, input.path);
  try {
    const stat = await handle.stat();
    if (stat.isDirectory()) throw new ToolRefusedError(`path ${displayPath(input.path)} is a folder, not a file; use grep to look inside it`);
    if (!stat.isFile()) throw new ToolRefusedError(`path ${displayPath(input.path)} is not a regular file`);

    const { head, bytes, sha256 } = await hashAndKeepHead(handle, capBytes);
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
      notes.push('file is not valid UTF-8; invalid bytes are shown as U+FFFD (writing this content back would change them)');
    }
    const result: ReadFileResult = { path: rel, bytes, sha256, content };
    if (truncated) result.truncated = true;
    if (notes.length > 0) result.note = notes.join('; ');
    return result;
  } finally {
    await handle.close();
  }
}

async function openForRead(abs: string, shownPath: string): Promise<FileHandle> {
  try {
    // O_NONBLOCK: opening a FIFO planted in the tree must not hang the tool; it is refused after fstat.
    return await open(abs, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new ToolRefusedError(`file ${displayPath(shownPath)} does not exist`);
    if (code === 'EACCES' || code === 'EPERM') throw new ToolRefusedError(`file ${displayPath(shownPath)} is not readable (permission denied)`);
    throw err;
  }
}

async function hashAndKeepHead(handle: FileHandle, capBytes: number): Promise<{ head: Buffer; bytes: number; sha256: string }> {
  const hash = createHash('sha256');
  const head = Buffer.allocUnsafe(capBytes);
  const chunk = Buffer.allocUnsafe(CHUNK_BYTES);
  let headLength = 0;
  let bytes = 0;
  for (;;) {
    const { bytesRead } = await handle.read(chunk, 0, CHUNK_BYTES, null);
    if (bytesRead === 0) break;
    const data = chunk.subarray(0, bytesRead);
    hash.update(data);
    if (headLength < capBytes) headLength += data.copy(head, headLength, 0, Math.min(bytesRead, capBytes - headLength));
    bytes += bytesRead;
  }
  return { head: head.subarray(0, headLength), bytes, sha256: hash.digest('hex') };
}

export const readFileTool: ToolDefinition<typeof readFileInput, ReadFileResult> = {
  name: 'read_file',
  description:
    `Read a text file of the worktree. Shows at most ${READ_CAP_BYTES} bytes (a note says when the file is longer); ` +
    'binary files are described, not shown. Returns the whole file\'s size and sha256.',
  inputSchema: readFileInput,
  execute: (ctx, input) => readFile(ctx, input),
};
