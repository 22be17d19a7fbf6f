// Stream custody, recomputed in the page: every chunk's link to its predecessor and its own
// checksum, checksum = H({claimId, dispatchAttempt, emittedAt, jobId, kind, payloadHash,
// previousChecksum, sequence}) where H is lowercase hex SHA-256 of the stable JSON.

/**
 * Stable JSON: object keys sorted by code point, no whitespace. The chunk fields are ASCII
 * ids, timestamps and hex, integers and null, for which JSON.stringify's escaping is exact.
 */
export function stableJson(value) {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  const keys = Object.keys(value).sort(byCodePoint);
  return `{${keys.map((k) => `${JSON.stringify(k)}:${stableJson(value[k])}`).join(',')}}`;
}

function byCodePoint(a, b) {
  const x = Array.from(a);
  const y = Array.from(b);
  for (let i = 0; i < Math.min(x.length, y.length); i += 1) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

export async function sha256Hex(text) {
  const bytes = new TextEncoder().encode(text);
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}

export function chunkChecksum(chunk) {
  return sha256Hex(stableJson({
    claimId: chunk.claimId,
    dispatchAttempt: chunk.dispatchAttempt,
    emittedAt: chunk.emittedAt,
    jobId: chunk.jobId,
    kind: chunk.kind,
    payloadHash: chunk.payloadHash,
    previousChecksum: chunk.previousChecksum ?? null,
    sequence: chunk.sequence,
  }));
}

/**
 * Checks every chunk. `chunks` are the job page's stream entries; `jobId` the job; `claims`
 * the job's claims (to find a chunk's claim when the entry does not name it).
 * Returns a Map attempt -> [{chunk, holds, problems: [text], computed}] in sequence order.
 */
export async function verifyChain(chunks, jobId, claims = []) {
  const claimByAttempt = new Map();
  for (const claim of claims) claimByAttempt.set(claim.dispatchAttempt, claim.id);
  const byAttempt = new Map();
  for (const chunk of chunks) {
    const attempt = chunk.dispatchAttempt;
    if (!byAttempt.has(attempt)) byAttempt.set(attempt, []);
    byAttempt.get(attempt).push(chunk);
  }
  const result = new Map();
  for (const attempt of [...byAttempt.keys()].sort((a, b) => a - b)) {
    const list = byAttempt.get(attempt).slice().sort((a, b) => a.sequence - b.sequence);
    const bySequence = new Map(list.map((c) => [c.sequence, c]));
    const rows = [];
    for (const chunk of list) {
      const problems = [];
      if (chunk.sequence === 0) {
        if (chunk.previousChecksum !== null && chunk.previousChecksum !== undefined) {
          problems.push('sequence 0 must have no previous checksum');
        }
      } else {
        const before = bySequence.get(chunk.sequence - 1);
        if (!before) problems.push(`sequence ${chunk.sequence - 1} is missing`);
        else if (chunk.previousChecksum !== before.checksum) {
          problems.push(`previous checksum is not the checksum of sequence ${chunk.sequence - 1}`);
        }
      }
      const claimId = chunk.claimId ?? claimByAttempt.get(attempt);
      let computed = null;
      if (!claimId) {
        problems.push('no claim is known for this attempt');
      } else {
        computed = await chunkChecksum({ ...chunk, claimId, jobId: chunk.jobId ?? jobId });
        if (computed !== chunk.checksum) problems.push(`checksum recomputes to ${computed}`);
      }
      rows.push({ chunk, holds: problems.length === 0, problems, computed });
    }
    result.set(attempt, rows);
  }
  return result;
}
