// Prices and budgets, as `npm run workspace -- price …` and `budget set` write them: input checked
// before any database is opened (SettingRefusedError, exit 2), then one workspace transaction of
// the app role (store/cost.ts).
import { SettingRefusedError } from '../operator/settings.ts';
import { modelId, priceInput, requiredAmount } from '../operator/price-input.ts';
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

/** The planned work of a cost command: checked input now, a transaction later. */
export function planCostCommand(
  key: (typeof COST_COMMANDS)[number],
  values: Values,
  out: (line: string) => void,
): (tx: WorkspaceTx) => Promise<number> {
  switch (key) {
    case 'price set': {
      const price = priceInput(
        {
          model: values.model,
          input: values['input-per-mtok'],
          output: values['output-per-mtok'],
          cacheRead: values['cache-read-per-mtok'],
          cacheWrite: values['cache-write-per-mtok'],
        },
        {
          model: '--model',
          input: '--input-per-mtok',
          output: '--output-per-mtok',
          cacheRead: '--cache-read-per-mtok',
          cacheWrite: '--cache-write-per-mtok',
        },
      );
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
      const m = modelId(values.model, '--model');
      return async (tx) => {
        if (await removePrice(tx, m)) return (out(`price of ${m} removed from ${tx.workspaceId}`), 0);
        throw new SettingRefusedError(`no price of ${m} in workspace ${tx.workspaceId} (shipped prices stay)`);
      };
    }
    case 'budget set': {
      const daily = requiredAmount(values['daily-usd'], '--daily-usd');
      return async (tx) => (await setDailyBudget(tx, daily), out(`daily budget of ${tx.workspaceId}: ${daily} USD`), 0);
    }
  }
}
