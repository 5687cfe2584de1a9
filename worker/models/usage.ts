// A round's token usage as the provider reported it. Every count may be unknown (null): a provider
// that does not report cache or reasoning tokens has not reported zero of them, and a cost computed
// from a guessed zero would look cheaper than it was.
import type { LanguageModelUsage } from 'ai';
import { redactString } from '../../core/redact.ts';

export interface RoundUsage {
  inputTokens: number | null;
  outputTokens: number | null;
  cacheReadTokens: number | null;
  cacheWriteTokens: number | null;
  reasoningTokens: number | null;
  /** The model that answered (as the provider named it), redacted; null when unknown. */
  modelId: string | null;
}

export const NO_USAGE: RoundUsage = {
  inputTokens: null,
  outputTokens: null,
  cacheReadTokens: null,
  cacheWriteTokens: null,
  reasoningTokens: null,
  modelId: null,
};

const count = (n: number | undefined): number | null =>
  typeof n === 'number' && Number.isFinite(n) && n >= 0 ? Math.round(n) : null;

/** One model call's usage (the SDK's shape) as a RoundUsage. */
export function roundUsage(usage: LanguageModelUsage | undefined, modelId: string | undefined): RoundUsage {
  return {
    inputTokens: count(usage?.inputTokens),
    outputTokens: count(usage?.outputTokens),
    cacheReadTokens: count(usage?.inputTokenDetails?.cacheReadTokens),
    cacheWriteTokens: count(usage?.inputTokenDetails?.cacheWriteTokens),
    reasoningTokens: count(usage?.outputTokenDetails?.reasoningTokens),
    modelId: modelId ? redactString(modelId).slice(0, 200) : null,
  };
}

const plus = (a: number | null, b: number | null): number | null => (a === null ? b : b === null ? a : a + b);

/** The usage of several rounds (one checkpoint of N rounds): known counts add, unknown stays unknown. */
export function addUsage(a: RoundUsage, b: RoundUsage): RoundUsage {
  return {
    inputTokens: plus(a.inputTokens, b.inputTokens),
    outputTokens: plus(a.outputTokens, b.outputTokens),
    cacheReadTokens: plus(a.cacheReadTokens, b.cacheReadTokens),
    cacheWriteTokens: plus(a.cacheWriteTokens, b.cacheWriteTokens),
    reasoningTokens: plus(a.reasoningTokens, b.reasoningTokens),
    modelId: b.modelId ?? a.modelId,
  };
}
