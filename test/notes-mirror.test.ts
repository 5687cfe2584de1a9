// The local notes mirror of a cross-host resume (worker/remote/resume.ts scheduleNotesMirror):
// for `git notes show` on the new host, so it waits until the resumed run is under way instead of
// competing with its first model call and tool round; a run that ends sooner starts it then.
// The clock is node:test's mock (setTimeout only): the delay is asserted, not slept.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NOTES_MIRROR_DELAY_MS, scheduleNotesMirror } from '../worker/remote/resume.ts';

test('the notes mirror of a resume starts a delay later, or when the run finishes first, and only once', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  let starts = 0;
  const mirror = scheduleNotesMirror(async () => void starts++);
  assert.equal(starts, 0, 'not at the resume');
  t.mock.timers.tick(NOTES_MIRROR_DELAY_MS - 1);
  assert.equal(starts, 0, 'not before the delay');
  t.mock.timers.tick(1);
  assert.equal(starts, 1, 'once the delay has passed');
  await mirror.finish();
  assert.equal(starts, 1, 'finish waits for the one already started');

  const shortRun = scheduleNotesMirror(async () => void starts++);
  await shortRun.finish();
  assert.equal(starts, 2, 'a run that ends before the delay starts it then');
  t.mock.timers.tick(NOTES_MIRROR_DELAY_MS);
  assert.equal(starts, 2, 'and the timer does not start it a second time');
});
