// The shipped price table (prices.json, with the date it was taken): USD per million tokens for
// the common Anthropic and OpenAI models. A workspace's own rows (model_prices) override it. A
// model id matches a price of the same name or of a name it extends with a dated or versioned
// suffix ("claude-sonnet-4-5-20250929" is priced as "claude-sonnet-4-5"); the longest name wins.
import { readFileSync } from 'node:fs';

export interface ModelPrice {
  model: string;
  inputPerMtok: number;
  outputPerMtok: number;
  /** Null: cache reads cost what input does. */
  cacheReadPerMtok: number | null;
  /** Null: cache writes cost what input does. */
  cacheWritePerMtok: number | null;
}

interface PriceFile {
  asOf: string;
  models: Record<string, { input: number; output: number; cacheRead?: number; cacheWrite?: number }>;
}

const file = JSON.parse(readFileSync(new URL('./prices.json', import.meta.url), 'utf8')) as PriceFile;

/** The day the shipped prices were taken. */
export const SHIPPED_PRICES_AS_OF = file.asOf;

export const SHIPPED_PRICES: readonly ModelPrice[] = Object.entries(file.models).map(([model, p]) => ({
  model,
  inputPerMtok: p.input,
  outputPerMtok: p.output,
  cacheReadPerMtok: p.cacheRead ?? null,
  cacheWritePerMtok: p.cacheWrite ?? null,
}));
