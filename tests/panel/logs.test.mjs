// The panel's reading of log payloads, both shapes, without a browser or a server.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { payloadLines } from '../../panel/static/logs.js';

test('segments read back line by line, in order across streams, the cut line marked', () => {
  const lines = payloadLines({ segments: [
    { stream: 'stdout', text: 'a\n\nb\n' },
    { stream: 'stderr', text: 'whole\ncut\n', truncated: true },
    { stream: 'stdout', text: 'c' },
    { stream: 'stdout', text: '' },
  ] });
  assert.deepEqual(lines, [
    { stream: 'stdout', line: 'a', truncated: false },
    { stream: 'stdout', line: '', truncated: false },
    { stream: 'stdout', line: 'b', truncated: false },
    { stream: 'stderr', line: 'whole', truncated: false },
    { stream: 'stderr', line: 'cut', truncated: true },
    { stream: 'stdout', line: 'c', truncated: false },
  ]);
});

test('the earlier one-object-per-line shape still reads', () => {
  assert.deepEqual(payloadLines({ lines: [
    { stream: 'stderr', line: 'x', truncated: true },
    { stream: 'stdout', line: 'y' },
  ] }), [
    { stream: 'stderr', line: 'x', truncated: true },
    { stream: 'stdout', line: 'y', truncated: false },
  ]);
});

test('other payloads hold no lines', () => {
  assert.equal(payloadLines({ event: 'started' }), null);
  assert.equal(payloadLines({ message: 'hi' }), null);
});
