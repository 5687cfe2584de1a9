// npm run publish: a doc-writer run's brief in review is published (the description below is its --help).
import { publishRun } from '../operator/publish.ts';
import { runActionCommand } from './run-action.ts';

const spec = {
  name: 'publish',
  summary:
    "publishes a doc-writer run's work: its brief goes from doc_review to published, and a doc_published event " +
    'records the files it wrote with their sha256. Prints {"agentRunId","briefId","status","fileCount","files"}. ' +
    'To send the work back with a note instead: npm run retry -- --workspace W --run R --note TEXT.',
  refused: "refused: the run's brief is not in doc_review (not a doc-writer run, not finished, or published already)",
};
await runActionCommand(spec, ({ db, workspaceId, agentRunId }) =>
  publishRun(db, { workspaceId, agentRunId, by: 'cli' }),
);
