// Modal dialogs built on <dialog>: focus moves in when one opens and back to the control that
// opened it when it closes; Escape closes; the element is removed from the page on close (so
// anything shown in it, like a bootstrap token, is gone with it).

import { h, replace, errorBox } from './dom.js';

let counter = 0;

export function openDialog({ title, testid, body, footer, wide = false, onClose }) {
  counter += 1;
  const titleId = `dialog-title-${counter}`;
  const opener = document.activeElement;
  const closeButton = h('button.icon-btn', { type: 'button', 'aria-label': 'Close', testid: 'dialog-close' }, '×');
  const dialog = h(`dialog.modal${wide ? '.modal-wide' : ''}`, { testid, 'aria-labelledby': titleId },
    h('div.modal-head', h('h2', { id: titleId }, title), closeButton),
    h('div.modal-body', body),
    footer ? h('div.modal-foot', footer) : null);
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    if (dialog.open) dialog.close();
    dialog.remove();
    if (onClose) onClose();
    if (opener && opener.isConnected && typeof opener.focus === 'function') opener.focus();
  };
  closeButton.addEventListener('click', close);
  dialog.addEventListener('close', close);
  dialog.addEventListener('cancel', (event) => {
    event.preventDefault();
    close();
  });
  document.body.appendChild(dialog);
  dialog.showModal();
  const first = dialog.querySelector('[autofocus], input:not([type=hidden]):not([readonly]), textarea, select');
  (first || closeButton).focus();
  return { dialog, close };
}

/**
 * A dialog that asks for a required reason and runs `submit(reason, form)`; `extra` nodes go
 * above the reason; `ready()` (optional) says whether the confirm button may be enabled.
 */
export function reasonDialog({
  title, testid, intro, extra = [], confirmLabel, danger = false, ready = () => true,
  submit, onDone, reasonLabel = 'Reason (required, recorded in the audit log)',
}) {
  counter += 1;
  const reasonId = `reason-${counter}`;
  const reason = h('textarea', { id: reasonId, rows: 3, required: true, testid: 'reason', maxLength: 2000 });
  const status = h('div.dialog-status', { 'aria-live': 'polite' });
  const confirm = h(`button.btn${danger ? '.btn-danger' : '.btn-primary'}`, {
    type: 'submit', testid: 'confirm', disabled: true,
  }, confirmLabel);
  const cancel = h('button.btn', { type: 'button', testid: 'cancel' }, 'Cancel');
  const update = () => {
    confirm.disabled = !(reason.value.trim() && ready());
  };
  const form = h('form.dialog-form', { noValidate: true },
    intro ? h('p', intro) : null,
    extra,
    h('label', { htmlFor: reasonId }, reasonLabel),
    reason,
    status,
    h('div.form-actions', cancel, confirm));
  form.addEventListener('input', update);
  form.addEventListener('change', update);
  const { dialog, close } = openDialog({ title, testid, body: form });
  cancel.addEventListener('click', close);
  reason.focus();
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    update();
    if (confirm.disabled) return;
    confirm.disabled = true;
    replace(status, h('span.muted', 'Working…'));
    try {
      const result = await submit(reason.value.trim(), form);
      close();
      if (onDone) onDone(result);
    } catch (error) {
      replace(status, errorBox(error));
      confirm.disabled = false;
    }
  });
  return { dialog, close, update };
}

/** A read-only block of text with a Copy button. */
export function copyBlock(label, text, testid) {
  const pre = h('pre.copy-text', { testid, tabIndex: 0 }, text);
  const feedback = h('span.copy-feedback', { 'aria-live': 'polite' });
  const button = h('button.btn.btn-small', { type: 'button', testid: testid ? `${testid}-copy` : undefined }, 'Copy');
  button.addEventListener('click', async () => {
    try {
      if (!navigator.clipboard) throw new Error('no clipboard');
      await navigator.clipboard.writeText(text);
      feedback.textContent = 'Copied';
    } catch {
      const range = document.createRange();
      range.selectNodeContents(pre);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      feedback.textContent = 'Selected: press Ctrl+C / ⌘C to copy';
    }
  });
  return h('div.copy-block',
    h('div.copy-head', h('span.copy-label', label), h('span.copy-tools', feedback, button)),
    pre);
}
