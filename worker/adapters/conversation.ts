// The conversation a remote AG-UI agent is sent, in AG-UI messages: built from the ai SDK prompt of
// the current attempt, after the rounds of earlier attempts rebuilt from the checkpoint's
// tool_history. That history is the bounded, redacted record the checkpoint already keeps, so a
// resumed agent sees every round done (file contents as their size and hash), never a secret.
// A round's messages carry the agent's own ids (its message id, its tool call ids) where the
// checkpoint kept them, and the same ids on every attempt: a server that merges the conversation
// into its own thread by message id (LangGraph) sees the rounds it has, not new copies of them.
import type { Message } from '@ag-ui/core';
import type { LanguageModelV3Prompt, LanguageModelV3ToolResultOutput } from '@ai-sdk/provider';
import { redactString } from '../../core/redact.ts';
import type { ToolCallRecord } from '../checkpoints/history.ts';

/** Characters of one tool result sent back to the agent. */
const MAX_RESULT_CHARS = 64 * 1024;

/** The agent's own ids of one tool round, as a checkpoint keeps them (agent_state.rounds). */
export interface RoundIds {
  round: number;
  messageId?: string;
  callIds: string[];
}

/** The id a resumed conversation gives the i-th call of a checkpointed round whose ids were not kept. */
export const priorCallId = (round: number, i: number): string => `round-${round}-call-${i}`;
const assistantId = (round: number, ids?: RoundIds) => ids?.messageId ?? `round-${round}-assistant`;
/** A tool result's message id: the call's, so the same result has the same id on every attempt. */
const resultId = (toolCallId: string) => `result-${toolCallId}`;

export function priorRoundsAsMessages(history: readonly ToolCallRecord[], kept: readonly RoundIds[] = []): Message[] {
  const messages: Message[] = [];
  const rounds = [...new Set(history.map((h) => h.round))];
  for (const round of rounds) {
    const calls = history.filter((h) => h.round === round);
    const ids = kept.find((r) => r.round === round);
    // The agent's call ids only when they match the round's calls one for one.
    const callId = (i: number) =>
      (ids?.callIds.length === calls.length ? ids.callIds[i] : undefined) || priorCallId(round, i);
    messages.push({
      id: assistantId(round, ids),
      role: 'assistant',
      toolCalls: calls.map((c, i) => ({
        id: callId(i),
        type: 'function' as const,
        function: { name: c.tool, arguments: JSON.stringify(c.input ?? {}) },
      })),
    });
    calls.forEach((c, i) => {
      messages.push({
        id: resultId(callId(i)),
        role: 'tool',
        toolCallId: callId(i),
        content: JSON.stringify(c.ok ? (c.result ?? null) : { error: c.error }),
        ...(c.ok ? {} : { error: c.error ?? 'failed' }),
      });
    });
  }
  return messages;
}

/**
 * The prompt as AG-UI messages; `prior` (rounds of earlier attempts) goes right after the first
 * user message, where those rounds happened.
 */
export function promptAsMessages(
  prompt: LanguageModelV3Prompt,
  prior: Message[],
  kept: readonly RoundIds[] = [],
): Message[] {
  const out: Message[] = [];
  let n = 0;
  const id = (role: string) => `${role}-${n++}`;
  let priorPlaced = false;
  for (const message of prompt) {
    switch (message.role) {
      case 'system':
        out.push({ id: id('system'), role: 'system', content: message.content });
        break;
      case 'user': {
        const text = message.content.map((p) => (p.type === 'text' ? p.text : '')).join('');
        out.push({ id: id('user'), role: 'user', content: text });
        if (!priorPlaced) out.push(...prior);
        priorPlaced = true;
        break;
      }
      case 'assistant': {
        const text = message.content.map((p) => (p.type === 'text' ? p.text : '')).join('');
        const toolCalls = message.content.flatMap((p) =>
          p.type === 'tool-call'
            ? [
                {
                  id: p.toolCallId,
                  type: 'function' as const,
                  function: { name: p.toolName, arguments: JSON.stringify(p.input ?? {}) },
                },
              ]
            : [],
        );
        const ids = toolCalls.length ? kept.find((r) => r.callIds.includes(toolCalls[0]!.id)) : undefined;
        out.push({
          id: ids ? assistantId(ids.round, ids) : id('assistant'),
          role: 'assistant',
          ...(text ? { content: text } : {}),
          ...(toolCalls.length ? { toolCalls } : {}),
        });
        break;
      }
      case 'tool':
        for (const part of message.content) {
          if (part.type !== 'tool-result') continue;
          const { content, error } = resultText(part.output);
          const tool = { role: 'tool' as const, toolCallId: part.toolCallId, content, ...(error ? { error } : {}) };
          out.push({ id: resultId(part.toolCallId), ...tool });
        }
        break;
    }
  }
  if (!priorPlaced) out.push(...prior);
  return out;
}

/** A tool's output as the agent reads it: JSON text, redacted, bounded; errors also in `error`. */
function resultText(output: LanguageModelV3ToolResultOutput): { content: string; error?: string } {
  const bound = (s: string) => redactString(s).slice(0, MAX_RESULT_CHARS);
  switch (output.type) {
    case 'text':
      return { content: bound(output.value) };
    case 'json':
      return { content: bound(JSON.stringify(output.value)) };
    case 'error-text':
      return { content: bound(output.value), error: bound(output.value).slice(0, 2000) };
    case 'error-json':
      return {
        content: bound(JSON.stringify(output.value)),
        error: bound(JSON.stringify(output.value)).slice(0, 2000),
      };
    case 'execution-denied':
      return { content: 'execution denied', error: 'execution denied' };
    default:
      return { content: bound(JSON.stringify(output)) };
  }
}
