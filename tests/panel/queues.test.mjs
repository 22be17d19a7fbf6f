// The Queues tab in a real Chromium: each queue's depth now and the day's charts, every number
// drawn checked against the API the page read (the queues view and the history the cron pass
// sampled), at 1440 and 375 px. Environment as for panel.test.mjs.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ARTIFACTS, BASE_URL, newOrg, waitFor } from './support.mjs';
import {
  PANEL, enqueue, newKey, ok, registerRunner, release, runRunner, sel, signIn, startBrowser, stopBrowser,
  text, withPanel,
} from './browser.mjs';

before(startBrowser);
after(stopBrowser);

/** Runs the cron trigger once (the local server's scheduled-event route) and waits for it. */
async function fireCron() {
  const response = await fetch(`${BASE_URL}/__scheduled?cron=*+*+*+*+*`, { signal: AbortSignal.timeout(120000) });
  assert.equal(response.status, 200, await response.text());
}

/** What each chart draws from a history bucket: the page's rule, restated from the API docs. */
const SERIES = {
  'chart-queued': (b) => (b.samples ? b.queued : null),
  'chart-running': (b) => (b.samples ? b.running : null),
  'chart-finished': (b) => (b.samples ? b.finished : null),
  'chart-utilization': (b) => b.utilization ?? null,
};

async function drawn(page, testid) {
  return page.$$eval(`${sel(testid)} svg rect`, (rects) => rects.map((r) => [r.dataset.at, Number(r.dataset.value)]));
}

test('the Queues tab shows each queue now and a day of charts whose every bar is the API\'s', { timeout: 300000 }, async () => {
  const org = await newOrg('queues');
  const { runner, token } = await registerRunner(org, 'queue-runner', { maxConcurrentJobs: 2 });
  const rel = await release(org);
  for (let n = 0; n < 3; n += 1) await enqueue(org, rel, { n });
  await fireCron(); // three queued, no runner online
  await runRunner({ runnerId: runner.id, token, exec: 'echo done' });
  await fireCron(); // none queued, three finished, the runner online and idle
  await enqueue(org, rel, { n: 'left queued' });
  await fireCron(); // one queued again

  const queues = await ok(org.adminKey, 'GET', '/api/remote-runners/queues');
  const history = await ok(org.adminKey, 'GET', '/api/remote-runners/queues/history');
  assert.equal(queues.queues.length, 1, JSON.stringify(queues));
  const [queue] = queues.queues;
  const sampled = history.buckets.filter((b) => b.samples > 0);
  assert.equal(sampled.reduce((n, b) => n + b.finished, 0), 3, JSON.stringify(sampled));
  assert.equal(Math.max(...sampled.map((b) => b.queued)), 3);

  await withPanel('queues', { width: 1440, height: 1000 }, async ({ page }) => {
    await signIn(page, org.adminKey);
    await page.click(sel('tab-queues'));
    await page.waitForURL(`${PANEL}/queues`);
    await page.waitForSelector(sel('chart-utilization'));

    // Now: the queue's row and the totals, as the queues view says.
    const queueRow = `${sel('queue-row')}[data-queue-id="${queue.id}"]`;
    assert.equal(await text(page, `${queueRow} ${sel('queue-name')}`), queue.name);
    assert.equal(await text(page, `${queueRow} ${sel('queue-queued')}`), String(queue.jobs.queued));
    assert.equal(await text(page, `${queueRow} ${sel('queue-held')}`),
      String(queue.jobs.claimed + queue.jobs.running + queue.jobs.cancelRequested));
    assert.equal(await text(page, `${queueRow} ${sel('queue-suggested')}`), String(queue.suggestedRunners));
    const r = queue.runners;
    assert.equal(await text(page, `${queueRow} ${sel('queue-runners')}`), `${r.idle} · ${r.busy} · ${r.draining} · ${r.offline}`);
    assert.equal(await text(page, `${sel('queues-total-queued')} .count-n`), '1');

    // The day: every bar is a bucket of the history, with its value; nothing else is drawn.
    for (const [testid, value] of Object.entries(SERIES)) {
      const expected = history.buckets.map((b) => [b.at, value(b)]).filter(([, v]) => v !== null);
      assert.deepEqual(await drawn(page, testid), expected, testid);
      const values = expected.map(([, v]) => v);
      const chart = await page.$(sel(testid));
      assert.equal(Number(await chart.getAttribute('data-total')), values.reduce((a, b) => a + b, 0), testid);
      assert.equal(Number(await chart.getAttribute('data-max')), values.length ? Math.max(...values) : 0, testid);
    }
    assert.equal(await text(page, sel('chart-finished-summary')), '3 jobs in 24 h');
    assert.equal(await text(page, sel('chart-queued-summary')), 'peak 3 per 5 min');
    // Each bar says its time and value on hover.
    const [tip, value] = await page.$eval(`${sel('chart-finished')} rect:not(.bar-zero)`,
      (r) => [r.querySelector('title').textContent, r.dataset.value]);
    assert.match(tip, new RegExp(`^\\d\\d:\\d\\d · ${value}$`));
    await page.screenshot({ path: join(ARTIFACTS, 'queues.png'), fullPage: true });

    await page.setViewportSize({ width: 375, height: 812 });
    await page.reload();
    await page.waitForSelector(sel('chart-utilization'));
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `no horizontal scrolling at 375 px (overflow ${overflow} px)`);
    const width = await page.$eval(`${sel('chart-queued')} svg`, (el) => el.getBoundingClientRect().width);
    assert.ok(width > 250 && width <= 375, `the chart fits the screen (${width} px)`);
    await page.screenshot({ path: join(ARTIFACTS, 'queues-375.png'), fullPage: true });
  });
});

test('a runs:read key reads the Queues tab; an organization with no history draws no bar', { timeout: 120000 }, async () => {
  const org = await newOrg('queues-empty');
  const reader = await newKey(org, 'reader', ['runs:read'], 'member');
  await withPanel('queues-empty', {}, async ({ page }) => {
    await signIn(page, reader);
    await page.goto(`${PANEL}/queues`);
    await page.waitForSelector(sel('queues-empty'));
    await page.waitForSelector(sel('chart-queued'));
    for (const testid of Object.keys(SERIES)) {
      assert.deepEqual(await drawn(page, testid), [], testid);
    }
    assert.equal(await text(page, sel('chart-utilization-summary')), 'no runner online');
    await waitFor('the generated time', async () => (await text(page, sel('queues-generated'))).startsWith('as of'));
  });
});
