// The conversation one round is sent, bounded however long the run: the system prompt, the brief,
// and at least the last WORKER_CONTEXT_ROUNDS rounds of this attempt verbatim (the model's calls and
// the tools' answers, as the SDK made them; fewer than twice that). Every round before is summarised in the system
// prompt, by the same summary a resumed attempt starts from (checkpoints/history.ts): one line per
// call of the checkpoint's bounded history window, itself capped in characters. So neither what is
// sent nor what is built for it grows with the round count. The system prompt is built only when the
// window moves, from the history as it is then: the head a provider caches changes once every
// WORKER_CONTEXT_ROUNDS rounds, even after the history window starts losing its oldest rounds.
import type { ModelMessage } from 'ai';
import { summarizeHistoryForPrompt, type ToolCallRecord } from '../checkpoints/history.ts';
import { cachedSystem, cachedUser, withNewestCached } from '../models/prompt-cache.ts';
import type { Harness } from './harnesses.ts';

export interface PromptHead {
  roleId: string;
  harness: Harness;
  rolePrompt?: string;
}

/**
 * The system prompt: who the agent is, what it may do, and the rounds it no longer sees verbatim.
 * `resumedAt`: the rounds done before this attempt began; `through`: the last round summarised.
 */
export function buildSystemPrompt(
  d: PromptHead,
  history: readonly ToolCallRecord[],
  at: { resumedAt: number; through: number },
  summarize: (history: ToolCallRecord[]) => string = summarizeHistoryForPrompt,
): string {
  const parts = [
    d.rolePrompt ?? `You are the ${d.roleId} agent of an unattended software team.`,
    `Work only with the tools you are given; paths are relative to the ${d.harness.needsWorktree ? 'worktree' : 'repository root'}.`,
  ];
  if (d.harness.writePrefixes) parts.push(`You may write only under: ${d.harness.writePrefixes.join(', ')}.`);
  if (d.harness.allowedCommands) parts.push(`run_command accepts only: ${d.harness.allowedCommands.join('; ')}.`);
  if (at.resumedAt > 0) {
    parts.push(
      `This run was interrupted and resumed from its last checkpoint after ${at.resumedAt} tool round(s). The files are as those rounds left them.`,
    );
  }
  if (at.through > 0) {
    const later = at.through > at.resumedAt ? ' The rounds after it follow in the conversation.' : '';
    parts.push(
      `What was done up to round ${at.through}:${later}`,
      summarize(history.filter((h) => h.round <= at.through)),
    );
  }
  return parts.join('\n');
}

/** The rounds of one attempt the model sees verbatim, and the prompt built around them. */
export class ContextWindow {
  /** Each entry: one round's messages (the assistant's tool calls, then the tool results). */
  private readonly rounds: ModelMessage[][] = [];
  private readonly cachedBrief: ModelMessage;
  /** The last system prompt, and the last round it summarises. */
  private system?: { through: number; text: string };

  constructor(
    private readonly head: PromptHead,
    brief: string,
    /** Rounds kept verbatim (WORKER_CONTEXT_ROUNDS). */
    private readonly keep: number,
    /** The rounds done before this attempt (the checkpoint's step). */
    private readonly resumedAt: number,
    private readonly summarize: (history: ToolCallRecord[]) => string = summarizeHistoryForPrompt,
  ) {
    this.cachedBrief = cachedUser(brief);
  }

  /**
   * A round finished: its messages join the window. The oldest rounds leave it `keep` at a time,
   * when it holds twice that: the prompt's head (system prompt and summary) then changes once every
   * `keep` rounds, and in between each round reads the conversation so far from the provider's cache.
   */
  push(messages: ModelMessage[]): void {
    this.rounds.push(messages);
    if (this.rounds.length >= 2 * this.keep) this.rounds.splice(0, this.keep);
  }

  /** What the next model call is sent, given the run's step and its bounded history. */
  prompt(history: readonly ToolCallRecord[], step: number) {
    const through = step - this.rounds.length;
    // Rebuilt when the window moves only: rebuilding when the bounded history drops its oldest round
    // would change the head (and miss the provider's cache) at every round of a long run.
    if (this.system?.through !== through) {
      const at = { resumedAt: this.resumedAt, through };
      this.system = { through, text: buildSystemPrompt(this.head, history, at, this.summarize) };
    }
    return {
      system: cachedSystem(this.system.text),
      messages: withNewestCached([this.cachedBrief, ...this.rounds.flat()]),
    };
  }
}
