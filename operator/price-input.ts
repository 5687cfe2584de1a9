// A price or a daily cap as an operator types it (the CLI's flags, the Settings page's fields):
// checked before anything is written; a refusal names the field (SettingRefusedError).
import type { ModelPrice } from '../core/prices.ts';
import { SettingRefusedError } from './settings.ts';

const MODEL = /^[^\u0000-\u001f]{1,200}$/;
const AMOUNT = /^[0-9]{1,9}(\.[0-9]{1,9})?$/;

/** A USD amount: a non-negative decimal; absent or empty → undefined. */
export function usdAmount(raw: unknown, field: string): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string' || !AMOUNT.test(raw.trim())) {
    throw new SettingRefusedError(
      `${field}: ${JSON.stringify(String(raw).slice(0, 40))} is not an amount (e.g. 3 or 0.3)`,
    );
  }
  return Number(raw.trim());
}

export function requiredAmount(raw: unknown, field: string): number {
  const n = usdAmount(raw, field);
  if (n === undefined) throw new SettingRefusedError(`${field} is required`);
  return n;
}

export function modelId(raw: unknown, field: string): string {
  if (typeof raw !== 'string' || !MODEL.test(raw))
    throw new SettingRefusedError(`${field}: the model id (1-200 characters)`);
  return raw;
}

/** A workspace price; cache prices left out cost what input does. */
export function priceInput(
  v: { model: unknown; input: unknown; output: unknown; cacheRead?: unknown; cacheWrite?: unknown },
  fields: { model: string; input: string; output: string; cacheRead: string; cacheWrite: string },
): ModelPrice {
  return {
    model: modelId(v.model, fields.model),
    inputPerMtok: requiredAmount(v.input, fields.input),
    outputPerMtok: requiredAmount(v.output, fields.output),
    cacheReadPerMtok: usdAmount(v.cacheRead, fields.cacheRead) ?? null,
    cacheWritePerMtok: usdAmount(v.cacheWrite, fields.cacheWrite) ?? null,
  };
}
