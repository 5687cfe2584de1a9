// A storage policy as an operator types it (`npm run workspace -- retention set` / `quota set`, the
// Settings page's Storage form): the retention's whole numbers and the quota's bytes, checked before
// anything is written. A refusal names the field (SettingRefusedError), so the command line and the
// panel refuse the same input with the same reason.
import { SettingRefusedError } from './settings.ts';

const UNITS: Record<string, number> = { '': 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 };

/** A whole number from `min`; absent or empty → null. */
export function wholeNumber(raw: unknown, field: string, min: number): number | null {
  const value = typeof raw === 'string' ? raw.trim() : '';
  if (!value) return null;
  if (!/^\d{1,9}$/.test(value) || Number(value) < min) {
    throw new SettingRefusedError(`${field}: a whole number from ${min}`);
  }
  return Number(value);
}

/** Bytes as typed: 500000, 500M, 20G or 1.5 TiB (binary units); absent or empty → null. */
export function byteSize(raw: unknown, field: string): number | null {
  const value = typeof raw === 'string' ? raw.trim() : '';
  if (!value) return null;
  const m = /^(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?$/i.exec(value);
  const bytes = m ? Math.round(Number(m[1]) * UNITS[m[2]!.toLowerCase()]!) : NaN;
  if (!Number.isSafeInteger(bytes)) throw new SettingRefusedError(`${field}: bytes, e.g. 500M or 20G`);
  return bytes;
}
