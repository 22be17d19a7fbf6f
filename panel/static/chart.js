// Bar charts of a day in five-minute buckets, drawn as inline SVG (no script but ours, no
// inline style: colours come from style.css classes), one bar per bucket that has a value.
// Each bar carries its bucket and value (data-at, data-value) and a <title> for a tooltip; the
// chart carries its total and peak (data-total, data-max), so what is drawn can be checked
// against the API it was drawn from.

import { h } from './dom.js';

const SVG = 'http://www.w3.org/2000/svg';
const HEIGHT = 60;

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === 'testid') el.setAttribute('data-testid', value);
    else el.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    el.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return el;
}

const clock = (iso) => new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });

/**
 * A chart of `buckets` (the history API's, oldest first) by `value(bucket)` (a number, or null
 * for no value). `max` fixes the scale (utilization: 1); otherwise the peak sets it. `format`
 * renders a value for the tooltip and the head.
 */
export function barChart({ title, testid, buckets, value, tone, max, format = String, summary }) {
  const values = buckets.map((b) => value(b));
  const present = values.filter((v) => v !== null && v !== undefined);
  const peak = present.length ? Math.max(...present) : 0;
  const total = present.reduce((a, b) => a + b, 0);
  const scale = max ?? Math.max(peak, 1);
  const bars = [];
  values.forEach((v, i) => {
    if (v === null || v === undefined) return;
    const height = Math.max(v > 0 ? 1 : 0.5, (v / scale) * (HEIGHT - 2));
    bars.push(svg('rect', {
      class: `bar ${v > 0 ? '' : 'bar-zero'}`.trim(),
      x: i + 0.1, y: HEIGHT - height, width: 0.8, height,
      'data-at': buckets[i].at, 'data-value': v,
    }, svg('title', {}, `${clock(buckets[i].at)} · ${format(v)}`)));
  });
  const label = `${title}, last 24 hours: peak ${format(peak)}`;
  const chart = svg('svg', {
    class: `chart chart-${tone}`, viewBox: `0 0 ${buckets.length} ${HEIGHT}`,
    preserveAspectRatio: 'none', role: 'img', 'aria-label': label,
  },
  svg('line', { class: 'chart-base', x1: 0, y1: HEIGHT - 0.25, x2: buckets.length, y2: HEIGHT - 0.25 }),
  ...bars);
  const first = buckets[0]?.at;
  return h('section.card.chart-card', {
    testid,
    dataset: { total: String(total), max: String(peak), bars: String(bars.length) },
  },
  h('header.card-head',
    h('h2', title),
    h('span.chart-figure', { testid: `${testid}-summary` }, summary ? summary({ total, peak }) : `peak ${format(peak)}`)),
  h('div.chart-body', chart),
  h('div.chart-axis', { 'aria-hidden': 'true' },
    h('span', first ? `${clock(first)} · 24 h ago` : '24 h ago'),
    h('span', '12 h ago'),
    h('span', 'now')));
}
