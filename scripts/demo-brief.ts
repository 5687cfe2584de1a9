// The demo's sample repository and its replay transcript: eight tool rounds of a small brief.
const think = 400; // ms the replayed model "thinks" per response

export const DEMO_FILES: Record<string, string> = {
  'README.md': '# sample\n\nA tiny project the demo agent works on.\n',
  'package.json': '{ "name": "sample", "private": true, "scripts": { "test": "node --test" } }\n',
  'src/index.ts': 'export const answer = 42;\n',
};

export function demoTranscript() {
  const round = (toolName: string, input: Record<string, unknown>) => ({
    toolCalls: [{ toolName, input }],
    delayMs: think,
  });
  return {
    steps: [
      round('grep', { pattern: 'answer' }),
      round('write_file', {
        path: 'src/greet.ts',
        content: 'export function greet(name: string): string {\n  return `hello, ${name}`;\n}\n',
      }),
      round('write_file', {
        path: 'test/greet.test.ts',
        content:
          "import { test } from 'node:test';\nimport assert from 'node:assert/strict';\nimport { greet } from '../src/greet.ts';\n\ntest('greets', () => assert.equal(greet('ada'), 'hello, ada'));\n",
      }),
      round('run_command', { command: 'git status' }),
      round('read_file', { path: 'src/greet.ts' }),
      round('write_file', {
        path: 'src/index.ts',
        content: "export const answer = 42;\nexport { greet } from './greet.ts';\n",
      }),
      round('write_file', { path: 'docs/greet.md', content: '# greet\n\n`greet(name)` says hello.\n' }),
      round('run_command', { command: 'git diff --stat HEAD~3' }),
      { text: 'Added src/greet.ts with a test and a doc page; src/index.ts re-exports it.', delayMs: think },
    ],
  };
}
