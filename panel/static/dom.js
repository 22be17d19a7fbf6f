// DOM building helpers. Every value is placed with textContent or a DOM property, never as
// HTML: nothing here parses markup, so a runner named `<img src=x onerror=...>` stays text.

/**
 * h('tag.class1.class2', {attrs}, ...children)
 * attrs: `class` (string or array), `testid` (-> data-testid), `dataset` {k: v},
 * `on` {event: handler}, any other key becomes a DOM property when it is one (value,
 * disabled, checked, type, href, title, htmlFor, ...) or an attribute otherwise.
 * children: Node, string/number (as text), null/undefined/false (skipped), arrays (flattened).
 */
export function h(spec, attrs, ...children) {
  const [head, ...classes] = spec.split('.');
  const [tag, id] = head.split('#');
  const el = document.createElement(tag || 'div');
  if (id) el.id = id;
  if (classes.length) el.classList.add(...classes.filter(Boolean));
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') {
        const list = Array.isArray(value) ? value : String(value).split(/\s+/);
        el.classList.add(...list.filter(Boolean));
      } else if (key === 'testid') {
        el.dataset.testid = value;
      } else if (key === 'dataset') {
        for (const [k, v] of Object.entries(value)) el.dataset[k] = v;
      } else if (key === 'on') {
        for (const [event, handler] of Object.entries(value)) el.addEventListener(event, handler);
      } else if (key === 'style' || key.startsWith('on') || key === 'innerHTML') {
        throw new Error(`refusing to set ${key}`);
      } else if (key === 'href') {
        el.setAttribute('href', safeHref(value));
      } else if (key in el && typeof value !== 'string') {
        el[key] = value;
      } else if (key in el && !key.includes('-')) {
        el[key] = value;
      } else {
        el.setAttribute(key, value === true ? '' : String(value));
      }
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

/** Only same-origin paths, blob: and http(s) URLs; never javascript:. */
function safeHref(value) {
  const text = String(value);
  if (text.startsWith('/') && !text.startsWith('//')) return text;
  if (/^(https?:|blob:)/i.test(text)) return text;
  return '#';
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

// ------------------------------------------------------------------------------------------
// Time
// ------------------------------------------------------------------------------------------

export function relativeTime(iso, now = Date.now()) {
  if (!iso) return '—';
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return String(iso);
  const seconds = Math.round((now - then) / 1000);
  if (seconds < 0) {
    const ahead = -seconds;
    if (ahead < 5) return 'just now';
    if (ahead < 60) return `in ${ahead} s`;
    if (ahead < 3600) return `in ${Math.floor(ahead / 60)} min`;
    if (ahead < 86400) return `in ${Math.floor(ahead / 3600)} h`;
    return `in ${Math.floor(ahead / 86400)} d`;
  }
  if (seconds < 5) return 'just now';
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

export function fullTime(iso) {
  if (!iso) return '';
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  return `${iso} (${date.toLocaleString()})`;
}

/** A <time> that shows a relative time, refreshed every second, full timestamp in title. */
export function timeAgo(iso, testid) {
  if (!iso) return h('span.muted', { testid }, '—');
  return h('time.reltime', {
    dateTime: iso,
    title: fullTime(iso),
    testid,
    dataset: { ts: iso },
  }, relativeTime(iso));
}

export function refreshTimes(root = document) {
  const now = Date.now();
  for (const el of root.querySelectorAll('time.reltime')) {
    const text = relativeTime(el.dataset.ts, now);
    if (el.textContent !== text) el.textContent = text;
  }
}

setInterval(() => refreshTimes(), 1000);

// ------------------------------------------------------------------------------------------
// Small pieces
// ------------------------------------------------------------------------------------------

const STATE_TONES = {
  active: 'green', succeeded: 'green', accepted: 'green', passed: 'green', released: 'grey',
  draining: 'amber', cancel_requested: 'amber', duplicate: 'amber', skipped: 'grey',
  lost: 'red', failed: 'red', conflict: 'red', stale: 'red', error: 'red',
  pending_approval: 'blue', queued: 'purple', claimed: 'blue', running: 'blue',
  revoked: 'grey', cancelled: 'grey',
  // A runner's connection (beside its admin state).
  online: 'green', offline: 'red', never_connected: 'grey',
  // Enrollment policies and tokens.
  open: 'amber', token: 'green', closed: 'grey', live: 'green', used_up: 'grey', expired: 'grey',
};

export function badge(state, testid) {
  const text = String(state ?? 'unknown');
  const tone = STATE_TONES[text] || 'grey';
  return h(`span.badge.badge-${tone}`, { testid, dataset: { state: text } },
    text.replace(/_/g, ' '));
}

/** A hash or id, shortened, full value in title, selectable. */
export function mono(value, { short = 0, testid } = {}) {
  if (value === null || value === undefined || value === '') return h('span.muted', { testid }, '—');
  const text = String(value);
  // The full value stays in the element (so selecting and copying it gets all of it); CSS
  // shortens what is shown, with an ellipsis, and the title shows it whole.
  const cut = short && text.length > short + 1 ? `trunc-${short <= 12 ? 12 : 16}` : null;
  return h('code.mono', { title: text, testid, class: cut }, text);
}

export function hash(value, testid) {
  return mono(value, { short: 12, testid });
}

/** A dl of [label, value] pairs (values can be nodes or strings). */
export function facts(pairs, testid) {
  return h('dl.facts', { testid }, pairs.filter(Boolean).map(([label, value]) => [
    h('dt', label),
    h('dd', value === null || value === undefined || value === '' ? h('span.muted', '—') : value),
  ]));
}

export function card(title, body, { testid, actions } = {}) {
  return h('section.card', { testid },
    h('header.card-head', h('h2', title), actions ? h('div.card-actions', actions) : null),
    h('div.card-body', body));
}

export function emptyState(text, testid = 'empty-state') {
  return h('div.empty', { testid }, text);
}

/** Renders text with `code` spans for backquoted parts. */
export function richText(text) {
  const parts = String(text).split('`');
  return parts.map((part, index) => (index % 2 ? h('code', part) : part));
}

export function errorBox(error, prefix) {
  const code = error?.code || 'ERROR';
  const message = error?.message || String(error);
  return h('div.error', { role: 'alert', testid: 'error' },
    h('strong.error-code', { testid: 'error-code' }, code),
    ' ',
    h('span', { testid: 'error-message' }, prefix ? `${prefix}${message}` : message),
    error?.status ? h('span.muted', ` (HTTP ${error.status})`) : null);
}

export function jsonText(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

export function formatBytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = Number(n);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const shown = unit === 0 || Number.isInteger(value) ? String(value) : value.toFixed(1);
  return `${shown} ${units[unit]}`;
}

export function formatSeconds(n) {
  if (n === null || n === undefined) return '—';
  const s = Number(n);
  if (s % 86400 === 0 && s >= 86400) return `${s / 86400} d (${s} s)`;
  if (s % 3600 === 0 && s >= 3600) return `${s / 3600} h (${s} s)`;
  if (s % 60 === 0 && s >= 60) return `${s / 60} min (${s} s)`;
  return `${s} s`;
}

export function formatMb(n) {
  if (n === null || n === undefined) return '—';
  const mb = Number(n);
  if (mb % 1024 === 0 && mb >= 1024) return `${mb / 1024} GiB (${mb} MB)`;
  return `${mb} MB`;
}

/** A scrollable table wrapper with sticky header. columns: [label, className?]. */
export function table(columns, tbody, testid) {
  return h('div.table-wrap', { testid },
    h('table.grid',
      h('thead', h('tr', columns.map((c) => {
        const [label, cls] = Array.isArray(c) ? c : [c];
        return h('th', { scope: 'col', class: cls }, label);
      }))),
      tbody));
}

/** Adds a data-label to each td for the stacked mobile layout. */
export function row(cells, attrs = {}, labels = []) {
  return h('tr', attrs, cells.map((cell, i) => {
    if (cell instanceof HTMLElement && cell.tagName === 'TD') {
      if (labels[i]) cell.dataset.label = labels[i];
      return cell;
    }
    return h('td', { dataset: labels[i] ? { label: labels[i] } : {} }, cell);
  }));
}

/**
 * Runs `update` (which re-renders part of `container`) and puts focus back on the equivalent
 * element (same data-testid and data-key) if focus was inside the re-rendered part.
 */
export function keepFocus(container, update) {
  const active = document.activeElement;
  let selector = null;
  if (active && active !== document.body && container.contains(active) && active.dataset.testid) {
    selector = `[data-testid="${CSS.escape(active.dataset.testid)}"]`;
    if (active.dataset.key) selector += `[data-key="${CSS.escape(active.dataset.key)}"]`;
  }
  update();
  if (selector && !container.contains(active)) {
    const again = container.querySelector(selector);
    if (again) again.focus({ preventScroll: true });
  }
}

/**
 * Keyset paging controls for a list: `← Previous`, a "Page N" label and `Next →`, with
 * data-testids `<prefix>-prev`, `<prefix>-page` and `<prefix>-next`. Keeps the stack of cursors
 * (the first page's is null). A click moves one page, awaits `reload()` (which clears the list
 * and loads the page at `cursor()`; its failure is left to it to show), then puts focus back on
 * the button used, or on Previous when Next has become disabled on the last page.
 * The caller's load calls `update(nextCursor)` after each successful load; `reset()` goes back
 * to the first page without loading (e.g. when a filter changes).
 */
export function pager(prefix, reload) {
  const cursors = [null];
  let nextCursor = null;
  const prev = h('button.btn', { type: 'button', testid: `${prefix}-prev`, disabled: true }, '← Previous');
  const next = h('button.btn', { type: 'button', testid: `${prefix}-next`, disabled: true }, 'Next →');
  const label = h('span.muted', { testid: `${prefix}-page` });

  async function go(move) {
    move();
    try {
      await reload();
    } catch {
      // the list shows its own error
    }
  }
  prev.addEventListener('click', async () => {
    if (cursors.length <= 1) return;
    await go(() => cursors.pop());
    prev.focus();
  });
  next.addEventListener('click', async () => {
    if (!nextCursor) return;
    await go(() => cursors.push(nextCursor));
    (next.disabled ? prev : next).focus();
  });

  return {
    el: h('div.pager', prev, label, next),
    /** The cursor of the page to load (null for the first page). */
    cursor: () => cursors[cursors.length - 1],
    onFirstPage: () => cursors.length === 1,
    reset() {
      cursors.length = 1;
    },
    /** Records the loaded page's next cursor (null on the last page) and refreshes the controls. */
    update(cursor) {
      nextCursor = cursor || null;
      prev.disabled = cursors.length <= 1;
      next.disabled = !nextCursor;
      label.textContent = `Page ${cursors.length}`;
    },
  };
}

// The key of each row syncRows built, so it can find the row again without a DOM attribute.
const rowKeys = new WeakMap();

/**
 * Makes `tbody` show one row per item, in order, without rebuilding what did not change: a row
 * built earlier for the same `key(item)` whose `dataset.sig` equals JSON.stringify(item) is kept
 * as it is (so focus, selection and hover stay), others are rebuilt with `build(item)` (a <tr>
 * that sets `dataset.sig` to JSON.stringify(item)), and rows of items no longer there go.
 * Focus inside a rebuilt row moves to its equivalent (see keepFocus).
 */
export function syncRows(tbody, items, key, build) {
  keepFocus(tbody, () => {
    const existing = new Map();
    for (const tr of [...tbody.rows]) {
      if (rowKeys.has(tr)) existing.set(rowKeys.get(tr), tr);
      else tr.remove();
    }
    items.forEach((item, position) => {
      const id = key(item);
      const old = existing.get(id);
      let tr = old;
      if (!old || old.dataset.sig !== JSON.stringify(item)) {
        tr = build(item);
        rowKeys.set(tr, id);
      }
      existing.delete(id);
      // Put the new row where the old one was, so the rows after it need not move (moving a
      // row would take focus away from it).
      if (old && old !== tr) old.replaceWith(tr);
      if (tbody.rows[position] !== tr) tbody.insertBefore(tr, tbody.rows[position] || null);
    });
    for (const leftover of existing.values()) leftover.remove();
  });
}

/** A poller that runs `task` every `ms` while `active()`; skips a tick while one is running. */
export function poller(task, ms) {
  let busy = false;
  let stopped = false;
  const timer = setInterval(async () => {
    if (busy || stopped || document.hidden) return;
    busy = true;
    try {
      await task();
    } catch {
      // a failed poll shows its error in the page; the next tick tries again
    } finally {
      busy = false;
    }
  }, ms);
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}

export function chips(list, empty = 'none') {
  if (!Array.isArray(list) || list.length === 0) return h('span.muted', empty);
  return h('span.chips', list.map((item) => h('span.chip', String(item))));
}

export function yesNo(value) {
  if (value === true) return 'yes';
  if (value === false) return 'no';
  return h('span.muted', '—');
}
