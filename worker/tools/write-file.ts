// write_file: atomic replace. The content goes to a temp file in the same folder, is fsync'd, then
// renamed over the target, so a crash leaves either the old file or the new one, never half of one.
// A crash can leave a temp file behind; removeStaleTempFiles (temp-files.ts) sweeps them.
import { createHash, randomBytes } from 'node:crypto';
import { lstat, mkdir, open, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { ToolRefusedError } from '../../core/errors.ts';
import { faultPoint, injectedErrno } from '../faults.ts';
import type { ToolContext, ToolDefinition } from './context.ts';
import { displayPath, resolveInside } from './paths.ts';
import { tempNameFor } from './temp-files.ts';

export const WRITE_MAX_BYTES = 10 * 1024 * 1024;

export const writeFileInput = z.object({
  path: z.string().describe('Path of the file, relative to the worktree root; missing folders are created.'),
  content: z.string().describe('The complete new content of the file (UTF-8).'),
});
export type WriteFileInput = z.infer<typeof writeFileInput>;

export interface WriteFileResult {
  path: string;
  bytes: number;
  sha256: string;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export async function writeFile(ctx: ToolContext, input: WriteFileInput): Promise<WriteFileResult> {
  // Sizes are checked on the string before any Buffer exists: a UTF-16 length over the limit is
  // already too many bytes, and Buffer.byteLength counts without allocating.
  const content = input.content;
  if (typeof content !== 'string') throw new ToolRefusedError('content must be a string');
  if (content.length > WRITE_MAX_BYTES || Buffer.byteLength(content, 'utf8') > WRITE_MAX_BYTES) {
    throw new ToolRefusedError(
      `content for ${displayPath(input.path)} is larger than the ${WRITE_MAX_BYTES}-byte (10 MiB) write limit; write smaller files`,
    );
  }
  const lone = LONE_SURROGATE.exec(content);
  if (lone) {
    // UTF-8 cannot encode it: writing would silently turn it into U+FFFD.
    throw new ToolRefusedError(`content for ${displayPath(input.path)} is not valid Unicode (a lone surrogate at index ${lone.index}); nothing was written`);
  }
  const { abs, rel } = await resolveInside(ctx, input.path, { forWrite: true });
  await ctx.beforeTouch();

  const data = Buffer.from(content, 'utf8');
  const dir = path.dirname(abs);
  await mkdirOrRefuse(dir, input.path);
  const mode = await existingMode(abs);
  const temp = path.join(dir, tempNameFor(path.basename(abs), randomBytes(6).toString('hex')));
  try {
    // 'wx' (O_EXCL) never follows a symlink planted at the temp name.
    const handle = await open(temp, 'wx', mode);
    try {
      await handle.writeFile(data);
      const injected = injectedErrno('write-file');
      if (injected) throw injected;
      await handle.sync();
    } finally {
      await handle.close();
    }
    faultPoint('mid-write-file');
    // rename replaces the target entry itself (a symlink at the target is replaced, not followed).
    await rename(temp, abs);
  } catch (err) {
    await rm(temp, { force: true });
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EISDIR' || code === 'ENOTEMPTY') throw new ToolRefusedError(`path ${displayPath(input.path)} is a folder`);
    throw err;
  }
  await syncDirectory(dir);
  ctx.onTouched([rel]);
  return { path: rel, bytes: data.length, sha256: createHash('sha256').update(data).digest('hex') };
}

async function mkdirOrRefuse(dir: string, shownPath: string): Promise<void> {
  try {
    await mkdir(dir, { recursive: true });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code === 'ENOTDIR') {
      throw new ToolRefusedError(`path ${displayPath(shownPath)} needs a folder where a file already exists`);
    }
    throw err;
  }
}

/** Keeps an existing file's permission bits (an executable script stays executable). */
async function existingMode(abs: string): Promise<number> {
  try {
    const stat = await lstat(abs);
    if (stat.isFile()) return stat.mode & 0o777;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  return 0o644;
}

/** Makes the rename itself durable; best effort, as some file systems refuse fsync on folders. */
async function syncDirectory(dir: string): Promise<void> {
  try {
    const handle = await open(dir, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch {
    // durability of the folder entry is a bonus, not a requirement
  }
}

export const writeFileTool: ToolDefinition<typeof writeFileInput, WriteFileResult> = {
  name: 'write_file',
  description:
    'Create or replace a file of the worktree with the given complete content (atomic: all or nothing). ' +
    `Missing folders are created. At most ${WRITE_MAX_BYTES} bytes. Returns the bytes written and their sha256.`,
  inputSchema: writeFileInput,
  execute: (ctx, input) => writeFile(ctx, input),
};
