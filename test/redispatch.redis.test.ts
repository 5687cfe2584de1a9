// The re-dispatch matrix through a raw job RPUSHed on Redis by an outside orchestrator; see test/support/redispatch-matrix.ts.
import { redispatchMatrix } from './support/redispatch-matrix.ts';

redispatchMatrix('redis');
