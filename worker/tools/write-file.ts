// write_file: atomic replace. The content goes to a temp file in the same folder, is fsync'd, then
// renamed over the target, so a crash leaves either the old file or the new one, never half of one.
// A crash can leave a temp file behind; removeStaleTempFiles (temp-files.ts) sweeps them.
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { ToolRefusedError } from '../../core/errors.ts';
import { faultArmed, faultPoint, injectedErrno } from '../faults.ts';
import { TreeRefusal } from '../tree/process.ts';
import { withTree } from '../tree/registry.ts';
import type { ToolContext, ToolDefinition } from './context.ts';
import { displayPath, resolveInside } from './paths.ts';

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
    throw new ToolRefusedError(
      `content for ${displayPath(input.path)} is not valid Unicode (a lone surrogate at index ${lone.index}); nothing was written`,
    );
  }
  const { rel, real } = await resolveInside(ctx, input.path, { forWrite: true });
  await ctx.beforeTouch();
  const injected = injectedErrno('write-file');
  if (injected) throw injected;

  const data = Buffer.from(content, 'utf8');
  // The tree process writes, one folder at a time, never through a symlink (tree/server.mjs).
  const crash = faultArmed('mid-write-file');
  try {
    await withTree(ctx.root, (tree) => tree.write(real, data, crash));
  } catch (err) {
    if (!(err instanceof TreeRefusal)) throw err;
    const shown = displayPath(input.path);
    if (err.refusal === 'is_dir') throw new ToolRefusedError(`path ${shown} is a folder`);
    if (err.refusal === 'not_dir')
      throw new ToolRefusedError(`path ${shown} needs a folder where a file already exists`);
    if (err.refusal === 'symlink')
      throw new ToolRefusedError(`path ${shown} goes through a folder that is a symlink; nothing was written`);
    throw new ToolRefusedError(`path ${shown} could not be written: ${err.message}`);
  }
  faultPoint('mid-write-file');
  ctx.onTouched([real]);
  return { path: rel, bytes: data.length, sha256: createHash('sha256').update(data).digest('hex') };
}

export const writeFileTool: ToolDefinition<typeof writeFileInput, WriteFileResult> = {
  name: 'write_file',
  description:
    'Create or replace a file of the worktree with the given complete content (atomic: all or nothing). ' +
    `Missing folders are created. At most ${WRITE_MAX_BYTES} bytes. Returns the bytes written and their sha256.`,
  inputSchema: writeFileInput,
  execute: (ctx, input) => writeFile(ctx, input),
};
