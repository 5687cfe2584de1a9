// Prompt caching where the provider supports it. Anthropic caches a prompt prefix up to each
// message marked with cache control: the system prompt and the brief are the same in every round
// of an attempt (and a resumed run's long summary is in the system prompt), and marking the newest
// message as well lets each round read the conversation so far from the cache instead of paying
// for it again. Other providers ignore the `anthropic` options (OpenAI caches prefixes by itself).
import type { ModelMessage, SystemModelMessage, UserModelMessage } from 'ai';

const CACHE = { anthropic: { cacheControl: { type: 'ephemeral' } } } as const;

export function cachedSystem(content: string): SystemModelMessage {
  return { role: 'system', content, providerOptions: CACHE };
}

export function cachedUser(content: string): UserModelMessage {
  return { role: 'user', content, providerOptions: CACHE };
}

/**
 * The step's messages with the newest one marked too (Anthropic allows four marks: system, brief,
 * newest). Earlier marks of the newest message are left to expire with it.
 */
export function withNewestCached(messages: ModelMessage[]): ModelMessage[] {
  if (messages.length < 2) return messages;
  const last = messages.at(-1)!;
  return [
    ...messages.slice(0, -1),
    { ...last, providerOptions: { ...last.providerOptions, ...CACHE } } as ModelMessage,
  ];
}
