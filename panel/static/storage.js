// The Storage tab: what the organization stores (jobs live, archived, held and expiring; R2
// objects and bytes; the database's size; the oldest job; what a retention pass now would
// delete), read from the usage view, and how long finished jobs are kept (the retention
// setting, 1-400 days). Both need an admin key.

import { get, put } from './api.js';
import { h, replace, facts, card, emptyState, errorBox, timeAgo, formatBytes, poller } from './dom.js';

const USAGE = '/api/developer/usage';
const RETENTION = '/api/developer/retention';
const POLL_MS = 10000;

const count = (n, one, many) => `${n} ${n === 1 ? one : many}`;

/** The organization's live D1 bytes against its quota: a bar and the numbers. */
function quotaMeter(d1) {
  const used = d1.organizationBytes ?? 0;
  const quota = d1.quotaBytes || 1;
  const share = Math.min(1, used / quota);
  const percent = (share * 100).toFixed(share < 0.01 ? 2 : 1);
  return h('div.quota', { testid: 'usage-quota' },
    h('progress.quota-bar', { max: 1000, value: Math.round(share * 1000), 'aria-label': `${percent}% of the quota` }),
    h('span', { testid: 'usage-quota-text' },
      `${formatBytes(used)} of ${formatBytes(quota)} (${percent}%)`,
      d1.quotaIsDefault ? ' — the deployment\'s default quota' : ' — this organization\'s own quota'));
}

function usageFacts(usage) {
  const jobs = usage.jobs || {};
  const retention = usage.retention || {};
  const due = retention.dueCapped ? `at least ${retention.due}` : String(retention.due);
  const bytes = (n) => (typeof n === 'number' ? `${formatBytes(n)} (${n} bytes)` : null);
  return facts([
    ['Live jobs', h('span', { testid: 'usage-live' }, String(jobs.live))],
    ['Archived jobs', h('span', { testid: 'usage-archived' }, String(jobs.archived))],
    ['Held', h('span', { testid: 'usage-held' }, String(jobs.held))],
    ['Being deleted', h('span', { testid: 'usage-expiring' }, String(jobs.expiring))],
    ['Deleted by retention', h('span', { testid: 'usage-deleted' }, String(jobs.deletedByRetention))],
    ['R2', h('span', { testid: 'usage-r2' }, `${count(usage.r2?.objects ?? 0, 'object', 'objects')}, `, bytes(usage.r2?.bundleBytes), ' of bundles')],
    ['D1, this organization', quotaMeter(usage.d1 || {})],
    ['D1 database', h('span', { testid: 'usage-d1' }, bytes(usage.d1?.databaseBytes) ?? 'not reported', ' (every organization\'s)')],
    ['Oldest job', timeAgo(usage.oldestJobAt, 'usage-oldest')],
    ['A retention pass now', h('span', { testid: 'usage-due' },
      `would delete ${due} archived ${retention.due === 1 ? 'job' : 'jobs'} that finished before `, timeAgo(retention.cut, 'usage-cut'))],
  ], 'usage-facts');
}

export function storageView(ctx) {
  const { session } = ctx;
  if (!session.canAdmin) {
    return {
      el: h('div.view', { testid: 'storage-view' },
        h('div.page-head', h('div', h('h1', 'Storage'))),
        emptyState('Storage and retention need an API key with admin:org and the admin role.')),
      destroy() {},
    };
  }
  let destroyed = false;

  const usageBody = h('div', { testid: 'usage' }, h('div.loading', 'Loading…'));
  const daysInput = h('input#retention-days', {
    type: 'number', min: 1, max: 400, step: 1, required: true, testid: 'retention-days', inputMode: 'numeric',
  });
  const save = h('button.btn.btn-primary', { type: 'submit', testid: 'retention-save', disabled: true }, 'Save');
  const retentionStatus = h('div.dialog-status', { 'aria-live': 'polite' });
  const form = h('form.dialog-form', { noValidate: true, testid: 'retention-form' },
    h('label', { htmlFor: 'retention-days' }, 'Keep finished jobs for (days, 1 to 400)'),
    daysInput,
    h('p.help', 'A retention pass deletes archived jobs that finished longer ago than this, with their R2 objects and the evidence only they hold. Held jobs are kept. Deleting is final.'),
    retentionStatus,
    h('div.form-actions', save));
  let stored = null;
  form.addEventListener('input', () => {
    save.disabled = daysInput.value.trim() === '' || Number(daysInput.value) === stored;
  });
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    save.disabled = true;
    replace(retentionStatus, h('span.muted', 'Saving…'));
    // The server decides what is a valid number of days and says why it is not.
    const text = daysInput.value.trim();
    const days = /^-?\d+$/.test(text) ? Number(text) : text;
    try {
      showSetting(await put(RETENTION, { retentionDays: days }));
      replace(retentionStatus, h('span.muted', { testid: 'retention-saved' }, 'Saved.'));
      await loadUsage();
    } catch (error) {
      replace(retentionStatus, errorBox(error));
      save.disabled = false;
    }
  });

  function showSetting(setting) {
    stored = setting.retentionDays;
    daysInput.value = String(stored);
    save.disabled = true;
  }

  let lastUsage = '';
  async function loadUsage() {
    let usage;
    try {
      usage = await get(USAGE);
    } catch (error) {
      if (!destroyed) replace(usageBody, errorBox(error));
      return;
    }
    if (destroyed) return;
    const sig = JSON.stringify(usage);
    if (sig === lastUsage) return;
    lastUsage = sig;
    replace(usageBody, usageFacts(usage));
  }

  async function loadSetting() {
    try {
      showSetting(await get(RETENTION));
    } catch (error) {
      if (!destroyed) replace(retentionStatus, errorBox(error));
    }
  }

  const el = h('div.view.view-storage', { testid: 'storage-view' },
    h('div.page-head', h('div', h('h1', 'Storage'),
      h('span.muted.head-note', 'What ', session.organization?.name || 'this organization', ' stores, and for how long'))),
    h('div.cards',
      card('Usage', usageBody, { testid: 'usage-card' }),
      card('Retention', form, { testid: 'retention-card' })));

  loadSetting();
  loadUsage();
  const stop = poller(loadUsage, POLL_MS);
  return {
    el,
    destroy() {
      destroyed = true;
      stop();
    },
  };
}
