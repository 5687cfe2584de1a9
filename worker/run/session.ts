// The agent tool loop of one run attempt. Its state is explicit: the step (tool rounds done,
// across attempts), what the model has seen (the rounds in CheckpointState.history), and which
// files changed (the tracker, drained into each checkpoint). After every Nth round a checkpoint.
import { generateText, stepCountIs, tool, type LanguageModel, type StepResult, type ToolSet } from 'ai';
import { EchodoError, errorMessage, LeaseLostError, ToolRefusedError } from '../../core/errors.ts';

const FATAL_IO_CODES = new Set(['ENOSPC', 'EDQUOT', 'EROFS', 'EIO']);
import { faultPoint } from '../faults.ts';
import type { Harness } from './harnesses.ts';
import type { Lease } from './lease.ts';
import type { Logger } from '../log.ts';
import { recordToolCall } from '../checkpoints/history.ts';
import type { CheckpointWriter } from '../checkpoints/writer.ts';
import type { TouchTracker } from '../checkpoints/tracker.ts';
import { TOOLS } from '../tools/index.ts';
import type { ToolContext } from '../tools/context.ts';
import type { RunCommandResult } from '../tools/run-command.ts';
import { withTree } from '../tree/registry.ts';
import type { CommandSandbox } from '../sandbox/index.ts';
import { isTransientDbError } from '../../store/transient-retry.ts';
import { roundUsage, type RoundUsage } from '../models/usage.ts';
import { workerMetrics } from '../metrics.ts';
import { inSpan } from '../tracing.ts';
import type { BudgetExhausted, BudgetGuard } from './budget.ts';
import { ContextWindow } from './context-window.ts';

export type SessionOutcome =
  // finalUsage: the last model call answered with text and called no tool, so no checkpoint holds its usage.
  | { kind: 'finished'; text: string; reason: 'model_done' | 'step_budget'; finalUsage?: RoundUsage }
  | { kind: 'stopped' } // SIGTERM: the round in flight finished and was checkpointed
  | { kind: 'cancelled'; by: string } // an operator's cancel: the same stop, then the run ends
  | { kind: 'lease_lost'; error: LeaseLostError }
  | { kind: 'budget_exhausted'; exhausted: BudgetExhausted }; // stopped at its last checkpoint

export interface SessionDeps {
  model: LanguageModel;
  harness: Harness;
  root: string;
  roleId: string;
  brief: string;
  rolePrompt?: string;
  writer: CheckpointWriter;
  tracker: TouchTracker;
  lease: Lease;
  maxSteps: number;
  checkpointEvery: number;
  /** Rounds the conversation keeps verbatim (WORKER_CONTEXT_ROUNDS); earlier ones are summarised. */
  contextRounds: number;
  commandTimeoutMs: number;
  /** How run_command is confined (probed once per process: worker/sandbox). */
  sandbox?: CommandSandbox;
  /** The run's base commit (code harness): git arguments of run_command are vetted against it and HEAD. */
  baseOid?: string | null;
  /** Aborts on SIGTERM: the tool call in flight finishes, then the loop stops. */
  shutdown: AbortSignal;
  log: Logger;
  /** Checked before the first round and after each checkpoint (worker/run/budget.ts); absent: no limits. */
  budget?: BudgetGuard;
}

/**
 * What a command left behind, settled before anything reads it: setuid/setgid bits cleared (they
 * would be root's on the host), its changes noted, and a nested repository named to the model
 * (its files are not checkpointed: git would record it as a link to another repository).
 */
async function afterCommand(d: SessionDeps, output: RunCommandResult): Promise<RunCommandResult> {
  await withTree(d.root, (tree) => tree.strip());
  const nested = await d.tracker.crossCheckWithGit();
  if (!nested.length) return output;
  const finding = `${nested.map((p) => JSON.stringify(p)).join(', ')} ${nested.length > 1 ? 'are git repositories' : 'is a git repository'} of its own: not checkpointed; remove its .git folder to have its files recorded`;
  return { ...output, note: output.note ? `${output.note}; ${finding}` : finding };
}

export async function runSession(d: SessionDeps): Promise<SessionOutcome> {
  const state = d.writer.state;
  const remaining = d.maxSteps - state.step;
  if (remaining <= 0) return { kind: 'finished', text: '', reason: 'step_budget' };
  const overBefore = await d.budget?.check();
  if (overBefore) return { kind: 'budget_exhausted', exhausted: overBefore };

  const abort = new AbortController();
  let halted: 'shutdown' | 'cancel' | 'lease' | 'fatal' | 'budget' | undefined;
  let overBudget: BudgetExhausted | undefined;
  let fatal: unknown;
  let toolsInFlight = 0;
  let roundsSinceCheckpoint = 0;

  const halt = (why: 'lease' | 'fatal', reason: unknown) => {
    halted ??= why;
    fatal ??= reason;
    abort.abort(reason ?? new Error(why));
  };
  /** A failed checkpoint or fencing check: a lost lease ends the attempt as such, anything else as fatal. */
  const haltOn = (err: unknown) => halt(err instanceof LeaseLostError ? 'lease' : 'fatal', err);
  const onLeaseLost = () => halt('lease', d.lease.lostSignal.reason);
  const onShutdown = () => {
    halted ??= 'shutdown';
    // A model call is interrupted at once; a tool call in flight finishes and is checkpointed first.
    if (toolsInFlight === 0) abort.abort(new Error('shutdown'));
  };
  // A cancel stops like SIGTERM (at the next tool boundary, after a checkpoint), but ends the run.
  const onCancel = () => {
    halted ??= 'cancel';
    if (toolsInFlight === 0) abort.abort(new Error('cancelled'));
  };
  const stopping = () => halted === 'shutdown' || halted === 'cancel';
  const stoppedOutcome = (): SessionOutcome =>
    halted === 'cancel' ? { kind: 'cancelled', by: d.lease.cancelRequestedBy ?? 'unknown' } : { kind: 'stopped' };
  d.lease.lostSignal.addEventListener('abort', onLeaseLost);
  d.shutdown.addEventListener('abort', onShutdown);
  d.lease.cancelSignal.addEventListener('abort', onCancel);
  if (d.shutdown.aborted) onShutdown();
  if (d.lease.cancelSignal.aborted) onCancel();

  const ctx: ToolContext = {
    root: d.root,
    writePrefixes: d.harness.writePrefixes,
    readScope: d.harness.needsWorktree ? 'all' : 'tracked',
    allowedCommands: d.harness.allowedCommands,
    harnessAlias: d.harness.alias,
    commandTimeoutMs: d.commandTimeoutMs,
    sandbox: d.sandbox,
    baseOid: d.baseOid ?? null,
    // Called by the writing tools right before they touch the tree: the epoch was checked in
    // Postgres when the call began, so here only the local freshness (a pause since) is checked.
    beforeTouch: async () => {
      if (fatal) throw fatal;
      d.lease.assertFresh();
    },
    onTouched: (paths) => paths.forEach((p) => d.tracker.note(p)),
    signal: abort.signal,
  };

  const tools: ToolSet = {};
  for (const def of TOOLS) {
    if (def.name === 'run_command' && !d.harness.allowedCommands) continue;
    tools[def.name] = tool({
      description: def.description,
      inputSchema: def.inputSchema,
      execute: async (input: unknown) => {
        if (fatal) throw fatal;
        toolsInFlight++;
        try {
          if (fatal) throw fatal;
          await d.lease.assertHeld(); // every tool call first checks the epoch
          // The last checkpoint counted and its index is in step (both done while the model thought).
          await d.writer.readyForTools().catch((err: unknown) => {
            haltOn(err);
            throw err;
          });
          faultPoint('before-tool-call'); // every checkpoint before this round has counted
          const output = await def.execute(ctx, input as never);
          if (def.name === 'run_command') return await afterCommand(d, output as RunCommandResult);
          return output;
        } catch (err) {
          // A full or broken disk is not the model's mistake: stop the run rather than let it
          // carry on over a half-written tree.
          const code = (err as NodeJS.ErrnoException).code;
          if (code && FATAL_IO_CODES.has(code)) {
            halt(
              'fatal',
              new EchodoError(
                'io_failure',
                `${def.name} failed with ${code} (${errorMessage(err)}); the run stops at its last checkpoint`,
                { cause: err },
              ),
            );
          } else if (isTransientDbError(err)) {
            // The fencing check could not reach Postgres: stop here rather than tell the model.
            halt('fatal', err);
          }
          throw err;
        } finally {
          toolsInFlight--;
        }
      },
    });
  }

  const onStepFinish = async (step: StepResult<ToolSet>) => {
    const calls = step.content.filter((p) => p.type === 'tool-result' || p.type === 'tool-error');
    if (!calls.length || fatal) return;
    const round = state.step + 1;
    for (const part of calls) {
      // A name the model made up is not a label (it could be anything, any number of times).
      const tool = Object.hasOwn(tools, part.toolName) ? part.toolName : 'unknown';
      const refused = part.type === 'tool-error' && part.error instanceof ToolRefusedError ? part.error : undefined;
      const outcome = part.type === 'tool-result' ? 'ok' : refused ? 'refused' : 'failed';
      workerMetrics.toolCalls.inc({ tool, outcome });
      if (refused?.rule) workerMetrics.sandboxRefusals.inc({ rule: refused.rule });
      state.history.push(
        part.type === 'tool-result'
          ? recordToolCall({ round, tool: part.toolName, input: part.input, output: part.output })
          : recordToolCall({ round, tool: part.toolName, input: part.input, error: errorMessage(part.error) }),
      );
    }
    state.step = round;
    d.writer.noteUsage(roundUsage(step.usage, step.response?.modelId ?? step.model?.modelId));
    roundsSinceCheckpoint++;
    // seq: the last checkpoint written (this round's comes next).
    d.log.info({ step: round, seq: state.seq, tools: calls.map((c) => c.toolName) }, 'tool round done');
    // The SDK swallows errors thrown here, so failures are caught and turned into a halt.
    try {
      if (roundsSinceCheckpoint >= d.checkpointEvery || stopping()) {
        await d.writer.write();
        roundsSinceCheckpoint = 0;
        // With the remote the checkpoint counts behind the next model call: a refused push or a
        // lost fence stops the run as soon as it is known, not at the next tool call.
        d.writer.readyForTools().catch(haltOn);
        if (d.budget && halted === undefined) {
          await d.writer.readyForTools(); // the row counted: its usage is in what is spent
          overBudget = (await d.budget.check()) ?? undefined;
          if (overBudget && halted === undefined) halted = 'budget';
        }
      }
    } catch (err) {
      haltOn(err);
    }
  };

  // One model call per round, each sent a bounded conversation (context-window.ts): a single
  // multi-step call would resend, and the SDK copy, every round so far at every step.
  const window = new ContextWindow(d, d.brief, d.contextRounds, state.step);
  try {
    let last: StepResult<ToolSet> | undefined;
    let text = '';
    for (let rounds = 0; rounds < remaining && halted === undefined; rounds++) {
      // A span per round: the model call, its tools and the checkpoint after them (worker/tracing.ts).
      const result = await inSpan('echodo.round', { 'echodo.round': state.step + 1 }, async (span) => {
        const r = await generateText({
          model: d.model,
          ...window.prompt(state.history, state.step),
          tools,
          stopWhen: stepCountIs(1),
          abortSignal: abort.signal,
          maxRetries: 2,
          onStepFinish,
        });
        span.setAttribute('echodo.tool_calls', r.steps.at(-1)?.toolCalls.length ?? 0);
        return r;
      });
      if (fatal) throw fatal;
      last = result.steps.at(-1);
      text = result.text;
      // No tool ran (the model answered, or asked for nothing it could run): the loop ends.
      if (!last?.toolResults.length && !last?.content.some((p) => p.type === 'tool-error')) break;
      window.push(result.response.messages);
    }
    if (fatal) throw fatal;
    // Rounds after the last Nth-round checkpoint are checkpointed before the run completes.
    if (roundsSinceCheckpoint > 0) await d.writer.write();
    await d.writer.settleNotes();
    if (halted === 'budget' && overBudget) return { kind: 'budget_exhausted', exhausted: overBudget };
    if (stopping()) return stoppedOutcome();
    if (last && last.toolCalls.length === 0) {
      const finalUsage = roundUsage(last.usage, last.response?.modelId ?? last.model?.modelId);
      d.writer.countUsage(finalUsage);
      return { kind: 'finished', text, reason: 'model_done', finalUsage };
    }
    return { kind: 'finished', text, reason: last ? 'step_budget' : 'model_done' };
  } catch (err) {
    const cause = fatal ?? err;
    if (cause instanceof LeaseLostError) return { kind: 'lease_lost', error: cause };
    if (stopping()) {
      if (roundsSinceCheckpoint > 0) await d.writer.write();
      await d.writer.settleNotes();
      return stoppedOutcome();
    }
    throw cause;
  } finally {
    await d.writer.quiesce();
    d.lease.lostSignal.removeEventListener('abort', onLeaseLost);
    d.shutdown.removeEventListener('abort', onShutdown);
    d.lease.cancelSignal.removeEventListener('abort', onCancel);
  }
}
