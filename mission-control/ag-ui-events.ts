// A run's progress as AG-UI events: each checkpoint is a STEP per tool round with its tool calls
// (start, args, end, result), then a STATE_SNAPSHOT of the checkpoint; a resume or re-dispatch is
// a CUSTOM event, not an error. Everything comes from checkpoint rows, already redacted and bounded.
import { EventType, type BaseEvent } from '@ag-ui/core';
import { redactString } from '../core/redact.ts';
import type { ProgressCheckpoint, ProgressEvent } from '../store/run-progress.ts';

type AgUiEvent = BaseEvent & Record<string, unknown>;

const MAX_PART_CHARS = 4_000;
const bounded = (value: unknown) => redactString(JSON.stringify(value ?? null)).slice(0, MAX_PART_CHARS);

export function checkpointEvents(runId: string, row: ProgressCheckpoint): AgUiEvent[] {
  const events: AgUiEvent[] = [];
  const history = Array.isArray(row.tool_history) ? row.tool_history : [];
  const rounds = [...new Set(history.map((h) => h.round))];
  for (const round of rounds) {
    const stepName = `round ${round}`;
    events.push({ type: EventType.STEP_STARTED, stepName });
    history
      .filter((h) => h.round === round)
      .forEach((call, i) => {
        const toolCallId = `${runId}-round-${round}-${i}`;
        events.push(
          { type: EventType.TOOL_CALL_START, toolCallId, toolCallName: String(call.tool) },
          { type: EventType.TOOL_CALL_ARGS, toolCallId, delta: bounded(call.input) },
          { type: EventType.TOOL_CALL_END, toolCallId },
          {
            type: EventType.TOOL_CALL_RESULT,
            messageId: `${toolCallId}-result`,
            toolCallId,
            role: 'tool',
            content: bounded(call.ok ? call.result : { error: call.error }),
          },
        );
      });
    events.push({ type: EventType.STEP_FINISHED, stepName });
  }
  events.push({
    type: EventType.STATE_SNAPSHOT,
    snapshot: {
      checkpointSeq: row.checkpoint_seq,
      commitOid: row.commit_oid,
      hash: row.hash,
      filesTouched: (row.files_touched ?? []).map((f) => ({ path: redactString(f.path), sha256: f.sha256 })),
    },
  });
  return events;
}

export function lifecycleEvent(event: ProgressEvent): AgUiEvent {
  const text = redactString(JSON.stringify(event.metadata ?? {}));
  let value: unknown = { truncated: true };
  try {
    if (text.length <= MAX_PART_CHARS) value = JSON.parse(text);
  } catch {
    /* not JSON after redaction: the truncated marker stands */
  }
  return { type: EventType.CUSTOM, name: event.type, value };
}
