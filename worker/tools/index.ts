// The agent's tools. Each is { name, description, inputSchema, execute(ctx, input) }; refusals throw
// ToolRefusedError with a message meant for the model. The lead wraps them into ai-SDK tools.
import type { ToolDefinition } from './context.ts';
import { grepTool } from './grep.ts';
import { readFileTool } from './read-file.ts';
import { runCommandTool } from './run-command.ts';
import { writeFileTool } from './write-file.ts';

export type { ToolContext, ToolDefinition } from './context.ts';
export { resolveInside, normalizeRelative } from './paths.ts';
export { splitCommand, checkAllowed, parseAllowedCommands, DEFAULT_ALLOWED_COMMANDS } from './command-line.ts';
export { commandEnvironment } from './run-command.ts';
export { removeStaleTempFiles, isTempFileName } from './temp-files.ts';
export type { ReadFileResult } from './read-file.ts';
export type { WriteFileResult } from './write-file.ts';
export type { GrepResult, GrepMatch } from './grep.ts';
export type { RunCommandResult } from './run-command.ts';

export const tools = {
  read_file: readFileTool,
  write_file: writeFileTool,
  grep: grepTool,
  run_command: runCommandTool,
} as const;

export type ToolName = keyof typeof tools;

/** All four tools as a list, for wrappers that iterate (skip run_command when the harness has no allowlist). */
export const TOOLS: readonly ToolDefinition[] = Object.values(tools) as ToolDefinition[];

export type HarnessTools = Omit<typeof tools, 'run_command'> & { run_command?: typeof runCommandTool };

/** The tools a harness offers: doc-writer has no run_command (its key is absent, not undefined). */
export function toolsForHarness(allowRunCommand: boolean): HarnessTools {
  const { run_command, ...rest } = tools;
  return allowRunCommand ? { ...rest, run_command } : { ...rest };
}

/** Every tool, as the loosely typed list a generic wrapper iterates over. */
export function toolList(selected: HarnessTools): ToolDefinition[] {
  return Object.values(selected) as ToolDefinition[];
}
