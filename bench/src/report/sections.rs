//! The report's sections 1 to 9, the claim query's plan and the seeding note, each rendered
//! from its part of the run's JSON document.

use serde_json::Value;

use super::{f, mib, verdict};
use crate::scenarios::round_trips::COUNTED_OPERATIONS;

/// Section 1: claim latency at each queue depth.
pub(crate) fn claim(r: &Value) -> String {
    let mut md = String::new();
    let claims = r["claim"].as_array().cloned().unwrap_or_default();
    md.push_str("## 1. Claim latency by queue depth\n\nEach claim is preceded by one floor request (interleaved, so both see the same background load); the claimed job is then completed outside the timing. The queue is seeded to the depth plus the number of claims, so it never falls below the depth during the measurement.\n\n");
    md.push_str("| depth | queued at start | claims | claim p50 ms | claim p99 ms | floor p50 ms | floor p99 ms | p50 ratio | p99 ratio | client CPU |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for c in &claims {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0}% |\n",
            c["depth"],
            c["queued"],
            c["claim"]["n"],
            c["claim"]["p50Ms"],
            c["claim"]["p99Ms"],
            c["floor"]["p50Ms"],
            c["floor"]["p99Ms"],
            c["p50Ratio"],
            c["p99Ratio"],
            f(&c["clientCpu"]) * 100.0
        ));
    }
    md
}

/// Section 2: lifecycle throughput at each concurrency.
pub(crate) fn lifecycle(r: &Value) -> String {
    let mut md = String::new();
    md.push_str("\n## 2. Full lifecycle throughput\n\nA lifecycle is session exchange (fresh client), claim, heartbeat, 10 log chunks, complete: 14 requests. The lifecycles run in rounds; the floor runs at the same concurrency and the same number of requests before the first round and after each one, so two floors bracket every round. A round's ratio compares its requests per second with the mean of its two floors; the ratio is the median of the rounds' (each round's in brackets). Requests/s and floor req/s are over all rounds. D1 round trips per lifecycle are the bench build's count (section 8) over the rounds, divided by the lifecycles: 16 for a runner alone (session 2, claim 2, then one per request), more where racing claims lose a job to another runner and try the next (each lost race is one aborted grant batch).\n\n");
    md.push_str("| runners | lifecycles | lifecycles/s | requests/s | floor req/s | ratio (each round) | D1 round trips per lifecycle | lifecycle p50 ms | lifecycle p99 ms | client CPU |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for l in r["lifecycle"].as_array().cloned().unwrap_or_default() {
        let rounds: Vec<String> = l["rounds"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|round| round["throughputRatio"].to_string())
            .collect();
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {:.0}% |\n",
            l["runners"],
            l["lifecycles"],
            l["lifecyclesPerSecond"],
            l["requestsPerSecond"],
            l["floorRequestsPerSecond"],
            l["throughputRatio"],
            rounds.join(", "),
            l["d1RoundTripsPerLifecycle"],
            l["lifecycle"]["p50Ms"],
            l["lifecycle"]["p99Ms"],
            f(&l["clientCpu"]) * 100.0
        ));
    }
    md
}

/// Section 3: stream appends at each payload size.
pub(crate) fn stream(r: &Value) -> String {
    let mut md = String::new();
    md.push_str("\n## 3. Stream appends into one job\n\nOne claim, chunks sent one after another through the SDK's `ChunkStream` (the chain is sequential by design). Each append is preceded by one floor request (interleaved, so both see the same background load). Appends/s and bytes/s divide by the appends' own time (their latencies summed), not by the floor requests between them.\n\n");
    md.push_str("| payload | appends | appends/s | bytes/s | append p50 ms | append p99 ms | floor p50 ms | p50 ratio | client CPU |\n|---|---|---|---|---|---|---|---|---|\n");
    for s in r["stream"].as_array().cloned().unwrap_or_default() {
        md.push_str(&format!(
            "| {} ({} B) | {} | {} | {:.0} | {} | {} | {} | {} | {:.0}% |\n",
            s["payload"].as_str().unwrap_or(""),
            s["payloadBytes"],
            s["appends"],
            s["appendsPerSecond"],
            f(&s["bytesPerSecond"]),
            s["append"]["p50Ms"],
            s["append"]["p99Ms"],
            s["floor"]["p50Ms"],
            s["p50Ratio"],
            f(&s["clientCpu"]) * 100.0
        ));
    }
    md
}

/// Section 4: recovery of expired leases, and any failed reap pass.
pub(crate) fn recovery(r: &Value) -> String {
    let mut md = String::new();
    let rec = &r["recovery"];
    md.push_str(&format!(
        "\n## 4. Recovery of expired leases\n\n{} jobs claimed (in {} s by {} runners in parallel; {} claim answers lost and retried; while they were claimed, the leases granted so far were moved an hour ahead every 15 s, so that none lapsed before the measurement, and each first-lease alarm, finding its lease alive, armed the job's own alarm there), their leases moved 2 minutes into the past with one D1 `UPDATE`, then admin reap passes (`POST /api/remote-runners/jobs/reap`, limit 500) until `more` is false.\n\n| leases | time to requeue all | passes | pass ms | requeued | ended | still leased after |\n|---|---|---|---|---|---|---|\n| {} | {} s | {} | {} | {} | {} | {} |\n",
        rec["leases"], rec["claimSeconds"], rec["runners"], rec["claimErrors"],
        rec["leases"], rec["seconds"], rec["passes"],
        rec["passMs"].as_array().map(|a| a.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")).unwrap_or_default(),
        rec["requeued"], rec["ended"], rec["stillLeased"]
    ));
    if let Some(failures) = rec["failedPasses"].as_array().filter(|a| !a.is_empty()) {
        md.push_str("\nFailed passes (the harness then halved the limit, down to 50):\n\n");
        for failure in failures {
            md.push_str(&format!("- {}\n", failure.as_str().unwrap_or("")));
        }
    }
    md
}

/// Section 5: the production bundle's size.
pub(crate) fn bundle(r: &Value) -> String {
    format!(
        "\n## 5. Bundle\n\nThe production build (no `bench-floor`), from `wrangler deploy --dry-run --outdir`: {} bytes wasm, {} bytes gzip -9.\n",
        r["bundle"]["wasmBytes"], r["bundle"]["wasmGzipBytes"]
    )
}

/// Section 6: the Worker's wasm linear memory (and workerd's resident memory) at each point.
pub(crate) fn memory(r: &Value) -> String {
    let mut md = String::new();
    let big = &r["bigBundle"];
    md.push_str(&format!(
        "\n## 6. Memory\n\nThe Worker's own wasm linear memory (`memory.buffer.byteLength`, read by `GET /__bench/memory`, a route only the bench build has) and the workerd process's resident memory (`VmRSS` in `/proc/<pid>/status`), read by `scripts/bench --memory-reading`. Wasm memory only grows, so each reading is the high-water mark of everything served before it. Goal: under 32 MiB of wasm memory throughout. The big job streamed {} chunks of 256 KiB ({} MiB of payload) in {} s; its bundle, {} bytes, was served in {} s ({}).\n\n| reading | wasm memory MiB | workerd VmRSS MiB |\n|---|---|---|\n",
        big["chunks"],
        mib(&big["payloadBytes"]),
        big["streamSeconds"],
        big["bundleBytes"],
        big["bundleSeconds"],
        if big["streamed"].as_bool() == Some(true) { "streamed: no Content-Length" } else { "NOT streamed: it had a Content-Length" },
    ));
    let mut peak = 0.0f64;
    for reading in r["memory"].as_array().into_iter().flatten() {
        peak = peak.max(reading["wasmMemoryBytes"].as_f64().unwrap_or(0.0));
        md.push_str(&format!(
            "| {} | {} | {} |\n",
            reading["at"].as_str().unwrap_or(""),
            mib(&reading["wasmMemoryBytes"]),
            mib(&reading["workerdRssBytes"]),
        ));
    }
    md.push_str(&format!(
        "\nPeak wasm memory: {} MiB ({}).\n",
        mib(&Value::from(peak)),
        verdict(peak < 32.0 * 1_048_576.0)
    ));
    md
}

/// Section 7: the chatty jobs, one row each.
pub(crate) fn chatty(r: &Value) -> String {
    let via = r["chatty"][0]["via"]
        .as_str()
        .unwrap_or("wrangler's dev proxy");
    let mut md = format!(
        "\n## 7. Chatty jobs\n\nOne job at a time through the runner itself (`Worker`, as `edgerunner runner start` runs it, with its default batching unless the table says otherwise: 256 KiB of payload or 100,000 lines per chunk, 250 ms): claim, input, heartbeat, the command, its log batched into chunks while it runs, completion. The runner talks to the server through {via}. Upload: from the command's start until its last log chunk was stored; the rates divide by it. Payload is the chunks' stable JSON as the server counts it: a chunk is `{{\"segments\": [{{\"stream\", \"text\"}}]}}`, each run of lines from one output one string, so a line costs its text and its newline escaped (2 bytes), plus about 30 bytes where the output switches between stdout and stderr.\n\n| job | batch bytes | lines | output bytes | chunks | payload bytes | command s | upload s | lines/s | output MB/s | payload MB/s | whole job s | client CPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for c in r["chatty"].as_array().into_iter().flatten() {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {:.0}% |\n",
            c["what"].as_str().unwrap_or(""),
            c["batchBytes"],
            c["lines"],
            c["outputBytes"],
            c["chunks"],
            c["payloadBytes"],
            c["commandSeconds"],
            c["uploadSeconds"],
            c["linesPerSecond"],
            f(&c["outputBytesPerSecond"]) / 1e6,
            f(&c["payloadBytesPerSecond"]) / 1e6,
            c["jobSeconds"],
            f(&c["clientCpu"]) * 100.0
        ));
    }
    md
}

/// Section 8: the round trips of each counted operation.
pub(crate) fn round_trips(r: &Value) -> String {
    let counts = &r["roundTrips"];
    if !counts.is_object() {
        return String::new();
    }
    let mut md = String::from(
        "\n## 8. D1 round trips per operation\n\nCounted by the Worker itself: every D1 statement or batch sent (a retry counts again), at the edge and in the objects the request reached, added to a running total by the bench build (`GET /__bench/round-trips`); one runner makes each operation through the SDK, alone on the server, and the total's difference is its count.\n\n| operation | D1 round trips |\n|---|---|\n",
    );
    for (key, label) in COUNTED_OPERATIONS {
        md.push_str(&format!("| {label} | {} |\n", counts[*key]));
    }
    md
}

/// Section 9: pickup latency.
pub(crate) fn pickup(r: &Value) -> String {
    let p = &r["pickup"];
    if !p.is_object() {
        return String::new();
    }
    let goal = f(&p["pickupMs"]["p50Ms"]) <= 50.0;
    format!(
        "\n## 9. Job pickup latency\n\n{} runners long-poll (`waitSeconds` {}, the runner CLI's default) on an empty queue; {} jobs are enqueued one at a time, each after the previous one was picked up (the first 4 warm the objects and are not counted). **Enqueued → claim held** runs from the job's `createdAt` (the server's clock when it began to handle the enqueue request, before its reads and its write) to the moment a runner holds the claim's answer (the load generator's clock; both clocks are this machine's). The second row runs from just before the enqueue request instead, so it includes the enqueue's own work (its authentication, release and idempotency reads, the write and the answer). The runners talk through wrangler's dev proxy; the enqueues, as every admin request of the bench, go to workerd's own socket.\n\n| | p50 | p99 |\n|---|---|---|\n| enqueued → claim held (ms) | {} | {} |\n| enqueue request sent → claim held (ms) | {} | {} |\n| the enqueue request alone (ms) | {} | {} |\n\nGoal p50 ≤ 50 ms (enqueued → claim held): {}.\n",
        p["runners"],
        p["waitSeconds"],
        p["jobs"],
        p["pickupMs"]["p50Ms"],
        p["pickupMs"]["p99Ms"],
        p["fromRequestMs"]["p50Ms"],
        p["fromRequestMs"]["p99Ms"],
        p["enqueueMs"]["p50Ms"],
        p["enqueueMs"]["p99Ms"],
        verdict(goal),
    )
}

/// The claim query's plan on local D1.
pub(crate) fn plan(r: &Value) -> String {
    format!(
        "\n## Claim query plan on local D1\n\n`EXPLAIN QUERY PLAN` of src/store/queries/claim_candidates.sql (literal values) through `wrangler d1 execute --local`; the run fails unless it searches `jobs_queue` and never scans `jobs`:\n\n```\n{}\n```\n",
        r["explain"]["plan"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n")).unwrap_or_default()
    )
}

/// How the queue was seeded.
pub(crate) fn seeding(r: &Value) -> String {
    format!(
        "\n## Seeding\n\n{}\n",
        r["seedingNote"].as_str().unwrap_or("")
    )
}
