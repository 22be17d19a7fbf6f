// The Queues tab: each queue's depth now (the queues API) and the organization's last day in
// five-minute buckets (the history API, sampled by the cron pass): jobs queued, held by
// runners and finished, and how busy the online runners' job slots were.

import { get } from './api.js';
import { h, replace, timeAgo, card, emptyState, errorBox, table, row, poller, keepFocus } from './dom.js';
import { barChart } from './chart.js';

const POLL_MS = 15000;

const QUEUE_COLUMNS = ['Queue', 'Queued', 'Held by runners', 'Oldest queued', 'Runners idle · busy · draining · offline', 'Suggested runners'];

function heldOf(jobs) {
  return (jobs.claimed ?? 0) + (jobs.running ?? 0) + (jobs.cancelRequested ?? 0);
}

function queueRow(queue) {
  const jobs = queue.jobs || {};
  const runners = queue.runners;
  return row([
    h('span.queue-name', { title: queue.id, testid: 'queue-name' }, queue.name),
    h('span.num', { testid: 'queue-queued' }, String(jobs.queued ?? 0)),
    h('span.num', { testid: 'queue-held' }, String(heldOf(jobs))),
    timeAgo(queue.oldestQueuedAt, 'queue-oldest'),
    runners
      ? h('span.num', { testid: 'queue-runners' }, `${runners.idle} · ${runners.busy} · ${runners.draining} · ${runners.offline}`)
      : h('span.muted', { testid: 'queue-runners' }, 'no one routing'),
    h('span.num', { testid: 'queue-suggested' }, String(queue.suggestedRunners ?? 0)),
  ], { testid: 'queue-row', dataset: { queueId: queue.id } }, QUEUE_COLUMNS);
}

const percent = (v) => `${Math.round(v * 1000) / 10}%`;
const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

function charts(history) {
  const buckets = history.buckets || [];
  const utilization = buckets.map((b) => b.utilization).filter((v) => v !== null && v !== undefined);
  const mean = utilization.length ? utilization.reduce((a, b) => a + b, 0) / utilization.length : null;
  return h('div.charts', { testid: 'queue-charts' },
    barChart({
      title: 'Queued', testid: 'chart-queued', tone: 'purple', buckets,
      value: (b) => (b.samples ? b.queued : null),
      summary: ({ peak }) => `peak ${peak} per 5 min`,
    }),
    barChart({
      title: 'Held by runners', testid: 'chart-running', tone: 'blue', buckets,
      value: (b) => (b.samples ? b.running : null),
      summary: ({ peak }) => `peak ${peak} per 5 min`,
    }),
    barChart({
      title: 'Finished', testid: 'chart-finished', tone: 'green', buckets,
      value: (b) => (b.samples ? b.finished : null),
      summary: ({ total }) => `${plural(total, 'job', 'jobs')} in 24 h`,
    }),
    barChart({
      title: 'Runner utilization', testid: 'chart-utilization', tone: 'amber', buckets, max: 1,
      value: (b) => b.utilization ?? null,
      format: percent,
      summary: () => (mean === null ? 'no runner online' : `mean ${percent(mean)} of job slots`),
    }));
}

export function queuesView() {
  let destroyed = false;
  const status = h('div.status-area', { 'aria-live': 'polite' });
  const now = h('div', { testid: 'queues-now' }, h('div.loading', 'Loading…'));
  const day = h('div', { testid: 'queues-day' });
  const generated = h('span.muted.head-note', { testid: 'queues-generated' }, '');
  const el = h('div.view.view-queues', { testid: 'queues-view' },
    h('div.page-head', h('div', h('h1', 'Queues'), generated)),
    status,
    now,
    h('h2.section-title', 'The last 24 hours'),
    h('p.muted.help', 'Sampled once a minute by the cron pass into five-minute buckets: the most jobs queued and held by runners, the jobs finished, and the share of online runners\u2019 job slots in use.'),
    day);

  let lastSig = null;
  async function load() {
    let queues;
    let history;
    try {
      [queues, history] = await Promise.all([
        get('/api/remote-runners/queues'),
        get('/api/remote-runners/queues/history'),
      ]);
    } catch (error) {
      if (!destroyed) replace(status, errorBox(error));
      return;
    }
    if (destroyed) return;
    replace(status);
    const sig = JSON.stringify([queues.queues, queues.capped, history.buckets]);
    replace(generated, 'as of ', timeAgo(queues.generatedAt));
    if (sig === lastSig) return;
    lastSig = sig;
    const list = queues.queues || [];
    const totals = list.reduce((t, q) => ({
      queued: t.queued + (q.jobs?.queued ?? 0),
      held: t.held + heldOf(q.jobs || {}),
    }), { queued: 0, held: 0 });
    keepFocus(el, () => {
      replace(now,
        h('div.counts', { testid: 'queues-totals' },
          h('div.count-big', { testid: 'queues-total-queued' }, h('span.count-n', String(totals.queued)), h('span.count-label', 'Queued now')),
          h('div.count-big', { testid: 'queues-total-held' }, h('span.count-n', String(totals.held)), h('span.count-label', 'Held by runners now'))),
        queues.capped ? h('p.muted', { testid: 'queues-capped' }, 'A bound of the read was reached: the counts are at least these.') : null,
        list.length
          ? card('Each queue now', table(QUEUE_COLUMNS, h('tbody', { testid: 'queues-body' }, list.map(queueRow)), 'queues-table'), { testid: 'queues-card' })
          : emptyState('No queue yet: a queue is named when the first job of its routing is enqueued.', 'queues-empty'));
      replace(day, charts(history));
    });
  }

  load();
  const stop = poller(load, POLL_MS);
  return {
    el,
    destroy() {
      destroyed = true;
      stop();
    },
  };
}
