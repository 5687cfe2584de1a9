// The re-dispatch matrix through the dispatch CLI (npm run dispatch -- --job FILE); see test/support/redispatch-matrix.ts.
import { redispatchMatrix } from './support/redispatch-matrix.ts';

redispatchMatrix('cli');
