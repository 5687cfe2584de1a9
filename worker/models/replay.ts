// The offline model: plays a replay transcript, one entry per model call.
// Position comes from counting calls, never from the prompt: a resumed session's prompt is
// rebuilt, so the caller says where to start (`startAt`) and the k-th call plays entry startAt + k.

import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3FinishReason,
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
  LanguageModelV3Usage,
} from '@ai-sdk/provider';
import { faultPoint } from '../faults.ts';
import type { Transcript, TranscriptEntry, TranscriptUsage } from './transcript.ts';

export const TRANSCRIPT_ENDED_TEXT = '(transcript ended)';

export interface ReplayModelOptions {
  transcript: Transcript;
  /** Index of the first entry this session plays (the entry after the last checkpointed round). */
  startAt: number;
  /** Aborts any model "thinking" delay, in addition to each call's own abortSignal. */
  signal?: AbortSignal;
  /** Shown as modelId, e.g. the transcript's path. */
  modelId?: string;
}

/** Replay counts no tokens: an entry reports what its `usage` says, the rest is the spec's "unknown". */
function usageFor(entry: TranscriptEntry | undefined): LanguageModelV3Usage {
  const u: TranscriptUsage = entry?.usage ?? {};
  const { inputTokens: input, cacheReadTokens: read, cacheWriteTokens: write } = u;
  const noCache = input !== undefined && read !== undefined && write !== undefined ? input - read - write : undefined;
  return {
    inputTokens: {
      total: input,
      noCache: noCache !== undefined && noCache >= 0 ? noCache : undefined,
      cacheRead: read,
      cacheWrite: write,
    },
    outputTokens: { total: u.outputTokens, text: undefined, reasoning: u.reasoningTokens },
  };
}

export class ReplayModel implements LanguageModelV3 {
  readonly specificationVersion = 'v3' as const;
  readonly provider = 'replay';
  readonly modelId: string;
  readonly supportedUrls: Record<string, RegExp[]> = {};

  private readonly transcript: Transcript;
  private readonly startAt: number;
  private readonly signal: AbortSignal | undefined;
  private callsCompleted = 0;

  constructor(options: ReplayModelOptions) {
    if (!Number.isInteger(options.startAt) || options.startAt < 0) {
      throw new RangeError(`ReplayModel startAt must be a non-negative integer, got ${options.startAt}`);
    }
    this.transcript = options.transcript;
    this.startAt = options.startAt;
    this.signal = options.signal;
    this.modelId = options.modelId ?? 'transcript';
  }

  /** Transcript entries this instance has played (calls past the end do not count). */
  get entriesPlayed(): number {
    const available = Math.max(0, this.transcript.steps.length - this.startAt);
    return Math.min(this.callsCompleted, available);
  }

  /** Index of the entry the next call will play (may be past the end). */
  get nextEntryIndex(): number {
    return this.startAt + this.callsCompleted;
  }

  async doGenerate(options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> {
    const { index, entry } = await this.nextEntry(options.abortSignal);
    const content = contentFor(index, entry);
    return {
      content,
      finishReason: finishReasonFor(content),
      usage: usageFor(entry),
      warnings: [],
      response: { id: `replay-${index}`, modelId: this.modelId },
    };
  }

  async doStream(options: LanguageModelV3CallOptions): Promise<LanguageModelV3StreamResult> {
    const { index, entry } = await this.nextEntry(options.abortSignal);
    const content = contentFor(index, entry);
    const parts: LanguageModelV3StreamPart[] = [
      { type: 'stream-start', warnings: [] },
      { type: 'response-metadata', id: `replay-${index}`, modelId: this.modelId },
    ];
    for (const part of content) {
      if (part.type === 'text') {
        const id = `replay-${index}-text`;
        parts.push({ type: 'text-start', id }, { type: 'text-delta', id, delta: part.text }, { type: 'text-end', id });
      } else if (part.type === 'tool-call') {
        const id = part.toolCallId;
        parts.push(
          { type: 'tool-input-start', id, toolName: part.toolName },
          { type: 'tool-input-delta', id, delta: part.input },
          { type: 'tool-input-end', id },
          part,
        );
      }
    }
    parts.push({ type: 'finish', usage: usageFor(entry), finishReason: finishReasonFor(content) });
    const stream = new ReadableStream<LanguageModelV3StreamPart>({
      start(controller) {
        for (const part of parts) controller.enqueue(part);
        controller.close();
      },
    });
    return { stream };
  }

  /**
   * Waits out the entry's delay, then advances. An aborted call does not advance, so the
   * entry it would have played is still the next one.
   */
  private async nextEntry(
    callSignal: AbortSignal | undefined,
  ): Promise<{ index: number; entry: TranscriptEntry | undefined }> {
    const index = this.startAt + this.callsCompleted;
    const entry = this.transcript.steps[index];
    if (entry?.delayMs !== undefined) {
      faultPoint('during-model-call');
      await abortableSleep(entry.delayMs, [callSignal, this.signal]);
    }
    throwIfAborted([callSignal, this.signal]);
    this.callsCompleted++;
    return { index, entry };
  }
}

function contentFor(index: number, entry: TranscriptEntry | undefined): LanguageModelV3Content[] {
  if (!entry) return [{ type: 'text', text: TRANSCRIPT_ENDED_TEXT }];
  const content: LanguageModelV3Content[] = [];
  if (entry.text !== undefined) content.push({ type: 'text', text: entry.text });
  entry.toolCalls?.forEach((call, i) => {
    content.push({
      type: 'tool-call',
      toolCallId: `replay-${index}-${i}`,
      toolName: call.toolName,
      input: JSON.stringify(call.input),
    });
  });
  return content;
}

function finishReasonFor(content: LanguageModelV3Content[]): LanguageModelV3FinishReason {
  return content.some((part) => part.type === 'tool-call')
    ? { unified: 'tool-calls', raw: 'tool-calls' }
    : { unified: 'stop', raw: 'stop' };
}

function throwIfAborted(signals: Array<AbortSignal | undefined>): void {
  for (const signal of signals) signal?.throwIfAborted();
}

/** Resolves after `ms`, or rejects with the abort reason as soon as any signal aborts. */
export function abortableSleep(ms: number, signals: Array<AbortSignal | undefined>): Promise<void> {
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  return new Promise<void>((resolve, reject) => {
    const aborted = live.find((s) => s.aborted);
    if (aborted) return reject(aborted.reason);
    const onAbort = (event: Event) => {
      cleanup();
      reject((event.target as AbortSignal).reason);
    };
    const timer = setTimeout(() => {
      cleanup();
      resolve();
    }, ms);
    const cleanup = () => {
      clearTimeout(timer);
      for (const s of live) s.removeEventListener('abort', onAbort);
    };
    for (const s of live) s.addEventListener('abort', onAbort, { once: true });
  });
}
