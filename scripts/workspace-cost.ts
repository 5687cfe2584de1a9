// Prices and budgets, as `npm run workspace -- price …` and `budget set` write them: input checked
// before any database is opened (SettingRefusedError, exit 2), then one workspace transaction of
// the app role (store/cost.ts).
import { SettingRefusedError } from '../operator/settings.ts';
import { SHIPPED_PRICES, SHIPPED_PRICES_AS_OF } from '../core/prices.ts';
import { listPrices, removePrice, setDailyBudget, setPrice } from '../store/cost.ts';
import type { WorkspaceTx } from '../store/workspace.ts';

export const COST_COMMANDS = ['price set', 'price list', 'price rm', 'budget set'] as const;

export const COST_FLAGS = {
  'input-per-mtok': { type: 'string', value: 'N', help: 'price set: USD per million input tokens' },
  'output-per-mtok': { type: 'string', value: 'N', help: 'price set: USD per million output tokens' },
  'cache-read-per-mtok': {
    type: 'string',
    value: 'N',
    help: 'price set: USD per million cache-read tokens (default: input)',
  },
  'cache-write-per-mtok': {
    type: 'string',
    value: 'N',
    help: 'price set: USD per million cache-write tokens (default: input)',
  },
  'daily-usd': { type: 'string', value: 'N', help: "budget set: the workspace's daily spending cap in USD (UTC days)" },
} as const;

type Values = Record<string, unknown>;
const MODEL = /^[^\u0000-\u001f]{1,200}$/;

/** A USD amount: a non-negative decimal; absent → undefined. */
function usd(values: Values, flag: string): number | undefined {
  const raw = values[flag];
  if (raw === undefined) return undefined;
  if (typeof raw !== 'string' || !/^[0-9]{1,9}(\.[0-9]{1,9})?$/.test(raw)) {
    throw new SettingRefusedError(
      `--${flag}: ${JSON.stringify(String(raw).slice(0, 40))} is not an amount (e.g. 3 or 0.3)`,
    );
  }
  return Number(raw);
}

function needed<T>(value: T | undefined, flag: string): T {
  if (value === undefined) throw new SettingRefusedError(`--${flag} is required`);
  return value;
}

function model(values: Values): string {
  const m = values.model;
  if (typeof m !== 'string' || !MODEL.test(m))
    throw new SettingRefusedError('--model: the model id (1-200 characters)');
  return m;
}

/** The planned work of a cost command: checked input now, a transaction later. */
export function planCostCommand(
  key: (typeof COST_COMMANDS)[number],
  values: Values,
  out: (line: string) => void,
): (tx: WorkspaceTx) => Promise<number> {
  switch (key) {
    case 'price set': {
      const price = {
        model: model(values),
        inputPerMtok: needed(usd(values, 'input-per-mtok'), 'input-per-mtok'),
        outputPerMtok: needed(usd(values, 'output-per-mtok'), 'output-per-mtok'),
        cacheReadPerMtok: usd(values, 'cache-read-per-mtok') ?? null,
        cacheWritePerMtok: usd(values, 'cache-write-per-mtok') ?? null,
      };
      return async (tx) => (await setPrice(tx, price), out(`price of ${price.model} set for ${tx.workspaceId}`), 0);
    }
    case 'price list':
      return async (tx) => {
        const own = await listPrices(tx);
        for (const p of own) out(JSON.stringify({ ...p, source: 'workspace' }));
        const overridden = new Set(own.map((p) => p.model));
        for (const p of SHIPPED_PRICES) {
          if (!overridden.has(p.model)) out(JSON.stringify({ ...p, source: `shipped ${SHIPPED_PRICES_AS_OF}` }));
        }
        return 0;
      };
    case 'price rm': {
      const m = model(values);
      return async (tx) => {
        if (await removePrice(tx, m)) return (out(`price of ${m} removed from ${tx.workspaceId}`), 0);
        throw new SettingRefusedError(`no price of ${m} in workspace ${tx.workspaceId} (shipped prices stay)`);
      };
    }
    case 'budget set': {
      const daily = needed(usd(values, 'daily-usd'), 'daily-usd');
      return async (tx) => (await setDailyBudget(tx, daily), out(`daily budget of ${tx.workspaceId}: ${daily} USD`), 0);
    }
  }
}
