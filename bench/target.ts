// One benchmark target as the results table shows it: what was aimed at, what was measured, met or not.
export interface Target {
  name: string;
  goal: string;
  measured: string;
  met: boolean | null;
}
