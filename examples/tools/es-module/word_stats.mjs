// A Forgekeeper-style tool: an ES module exporting `def` (OpenAI function format) and
// `async run(args)`. runner runs it in the sandbox through a small Node harness; a thrown
// error is a tool error.
import { readFile } from 'node:fs/promises';

export const def = {
  type: 'function',
  function: {
    name: 'word_stats',
    description: 'Count the words of a file and name the most frequent one',
    parameters: {
      type: 'object',
      properties: {
        path: { type: 'string', description: 'file, relative to the workspace' },
        min_length: { type: 'integer', description: 'ignore shorter words', default: 1 },
      },
      required: ['path'],
      additionalProperties: false,
    },
  },
};

export async function run(args = {}) {
  const text = await readFile(args.path, 'utf8');
  const words = text.split(/\W+/).filter((w) => w.length >= (args.min_length ?? 1));
  if (words.length === 0) throw new Error(`no words in ${args.path}`);
  const counts = new Map();
  for (const w of words) counts.set(w, (counts.get(w) ?? 0) + 1);
  const [top] = [...counts.entries()].sort((a, b) => b[1] - a[1]);
  return { words: words.length, top: top[0], top_count: top[1] };
}
