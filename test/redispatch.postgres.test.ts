// The re-dispatch matrix through dispatchJob on the Postgres queue; see test/support/redispatch-matrix.ts.
import { redispatchMatrix } from './support/redispatch-matrix.ts';

redispatchMatrix('postgres');
