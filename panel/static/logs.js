// A log payload's lines, [{stream, line, truncated}], in either shape a stream may hold: the
// runner's segments ({"segments": [{stream, text, truncated?}]}, `text` being each line followed
// by "\n", `truncated` marking the segment's last line as cut) or the one-object-per-line shape
// of earlier runners ({"lines": [{stream, line, truncated?}]}). null when it holds neither.
export function payloadLines(payload) {
  if (Array.isArray(payload.segments)) {
    const lines = [];
    for (const segment of payload.segments) {
      const raw = segment?.text;
      const text = typeof raw === 'string' ? raw : raw == null ? '' : JSON.stringify(raw);
      if (text === '') continue;
      const parts = (text.endsWith('\n') ? text.slice(0, -1) : text).split('\n');
      parts.forEach((line, i) => lines.push({
        stream: segment?.stream, line,
        truncated: i === parts.length - 1 && segment?.truncated === true,
      }));
    }
    return lines;
  }
  if (Array.isArray(payload.lines)) {
    return payload.lines.map((line) => ({ stream: line?.stream, line: String(line?.line ?? ''), truncated: Boolean(line?.truncated) }));
  }
  return null;
}
