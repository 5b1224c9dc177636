#!/usr/bin/env node
// An acai dynamic tool as acai users write them: a Node script answering TOOL_ACTION.
if (process.env.TOOL_ACTION === 'describe') {
  console.log(JSON.stringify({
    name: 'shout',
    description: 'Upper-case a text',
    parameters: [{ name: 'text', type: 'string', description: 'the text', required: true }],
    needsApproval: false,
  }, null, 2));
  process.exit(0);
}
if (process.env.TOOL_ACTION === 'execute') {
  let input = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (c) => { input += c; });
  process.stdin.on('end', () => {
    const params = JSON.parse(input);
    console.log(params.find((p) => p.name === 'text').value.toUpperCase());
  });
}
