//! The runs: the setup every run shares (a promoted release and the template job the seeded
//! queue copies), then the full run or one of its `--*-only` parts, each scenario in its order,
//! and the JSON document (and, for the full run, BENCHMARKS.md) written from their figures.

use serde::de::IgnoredAny;
use serde_json::{json, Value};

use crate::args::Args;
use crate::error::{BenchError, Res};
use crate::measure::{now_ms, round, Phase};
use crate::report::machine::{date, loadavg, machine, versions};
use crate::report::{hot_summary, kept_analysis, markdown, sections};
use crate::scenarios::chatty::chatty;
use crate::scenarios::claim::claim_latency;
use crate::scenarios::lifecycle::{lifecycle, lifecycle_jobs};
use crate::scenarios::memory::{big_bundle, memory_reading, oversized_session_body};
use crate::scenarios::pickup::pickup;
use crate::scenarios::plan::explain_claim;
use crate::scenarios::recovery::recovery;
use crate::scenarios::round_trips::round_trips;
use crate::scenarios::stream::stream_rate;
use crate::scenarios::{Bench, Release, Sizes, FULL, SMOKE};
use crate::seed::LocalD1;
use crate::server::{Artifact, Server, Version};

const SIZES_NOTE_FULL: &str = "claim: 60 claims per depth; lifecycle: 5 rounds of 20 at 1 runner, 40 at 8, 64 at 32; stream: 200 / 100 / 40 appends; recovery: 10,000 leases; pickup: 100 jobs, 32 runners; chatty: `seq 1 200000` and 20 MB of 100-byte lines";

const SEEDING_NOTE: &str = "The queue is seeded with one SQL statement per depth through `wrangler d1 execute DB --local --file`: a recursive CTE (`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < N) INSERT INTO jobs (...) SELECT ... FROM n, jobs AS t WHERE t.id = <template>`) copies a template job that was enqueued through the API (so the artifact, version and promotion the foreign keys require exist, and its intent and input hashes are real) under new ids (`job_benchBB_NNNNNNN`) and idempotency keys, state `queued`, attempt 0. The template itself is cancelled. Seeded jobs are valid queued jobs that the claim grants like any other.";

pub(crate) async fn run(args: Args) -> Res<()> {
    let sizes = if args.smoke { &SMOKE } else { &FULL };
    let started = Phase::start();
    let load_start = loadavg();
    let mut bench = prepare(&args).await?;

    if let Some(leases) = args.recovery_only {
        bench.db.seed(leases as u64)?;
        let recovery = recovery(&bench, leases).await?;
        let report = json!({ "command": args.command, "date": date(), "loadAverage": { "start": load_start, "end": loadavg() }, "recovery": recovery });
        let text = write_json(&args, &report)?;
        print!("{text}");
        return Ok(());
    }
    if args.chatty_only {
        let chatty = chatty(&bench, sizes, args.batch_bytes, chatty_server(&args)).await?;
        let report = json!({ "command": args.command, "date": date(), "loadAverage": { "start": load_start, "end": loadavg() }, "chatty": chatty });
        write_json(&args, &report)?;
        print!("{}", sections::chatty(&report));
        return Ok(());
    }
    if let Some((runners, per_runner, rounds)) = args.lifecycle_only {
        let wanted = lifecycle_jobs(&[(runners, per_runner)], rounds) + args.lifecycle_depth;
        bench.db.top_up(wanted)?;
        let figures = lifecycle(&bench, &[(runners, per_runner)], rounds).await?;
        println!(
            "{}",
            serde_json::to_string_pretty(&figures).map_err(BenchError::json("json"))?
        );
        return Ok(());
    }
    if args.hot_only {
        return hot_only(&args, &mut bench, sizes, &load_start).await;
    }
    full(&args, &mut bench, sizes, started, &load_start).await
}

/// Workerd's own socket, or the proxy when there is none.
///
/// Setup and admin requests (untimed, or timed only as the enqueue's own figure) go there:
/// through wrangler's dev proxy, whose pool to workerd the bench does not control, a request
/// now and then meets a connection workerd is closing and gets a bare `503`
/// (cloudflare/workers-sdk#14641; see `Server::reap_pass`). The runners' requests and the
/// floor they are compared with go through the proxy, as they always have.
fn chatty_server(args: &Args) -> &str {
    args.direct_server.as_deref().unwrap_or(&args.server)
}

/// A promoted release and one real job, whose intent the seeded jobs copy; the job is then
/// cancelled, so that the queue is its copies alone.
async fn prepare(args: &Args) -> Res<Bench> {
    let server = Server::new(&args.server, chatty_server(args), &args.api_key)?;
    let artifact: Artifact = server
        .post(
            "/api/releases/artifacts",
            &json!({ "kind": "prompt", "name": format!("bench-{}", now_ms()) }),
        )
        .await?;
    let artifact_id = artifact.id;
    let version: Version = server
        .post(
            &format!("/api/releases/artifacts/{artifact_id}/versions"),
            &json!({ "content": { "template": "{{question}}", "model": "bench" } }),
        )
        .await?;
    let version_id = version.id;
    server
        .post::<IgnoredAny>(
            &format!("/api/releases/versions/{version_id}/promote"),
            &json!({ "environment": "staging" }),
        )
        .await?;
    let release = Release {
        artifact_id,
        version_id,
    };
    let template = server
        .enqueue(&release.job("bench-template", "bench"))
        .await?;
    server
        .admin
        .cancel_job(&template.id, "bench template: its copies are the queue")
        .await
        .map_err(BenchError::client("cancel template"))?;
    Ok(Bench {
        server,
        db: LocalD1::new(args.state.clone(), template.organization_id, template.id),
        release,
    })
}

/// The document as pretty JSON, written to `--json`: its text.
fn write_json(args: &Args, report: &Value) -> Res<String> {
    let text = serde_json::to_string_pretty(report).map_err(BenchError::json("json"))? + "\n";
    std::fs::write(&args.json, &text).map_err(BenchError::io("write json"))?;
    Ok(text)
}

/// Every scenario, in an order that keeps each one's precondition (8 and 9 on an empty queue,
/// the big job alone, the seeded queue after), with memory readings between them; then
/// benchmarks.json and BENCHMARKS.md.
async fn full(
    args: &Args,
    bench: &mut Bench,
    sizes: &Sizes,
    started: Phase,
    load_start: &str,
) -> Res<()> {
    // First, while the queue is empty (the template is cancelled).
    let trips = round_trips(bench).await?;
    eprintln!("D1 round trips per operation: {trips}");
    let pickup = pickup(bench, sizes.pickup).await?;
    eprintln!("pickup latency: {}", pickup["pickupMs"]);
    let probe = args.memory_probe.as_deref();
    let mut memory = vec![memory_reading(probe, "start")?];
    let big_body = oversized_session_body(bench).await?;
    memory.push(memory_reading(probe, "after a 90 MB body to /session")?);
    // The big job: enqueued alone (the template is cancelled), so its runner claims it.
    bench
        .server
        .enqueue(&bench.release.job("bench-bundle", "a stream at its limit"))
        .await?;
    let big = big_bundle(bench, args.bundle_chunks.unwrap_or(sizes.bundle_chunks)).await?;
    memory.push(memory_reading(
        probe,
        "after serving the bundle of a 64 MiB-stream job",
    )?);

    let explain = explain_claim(bench, &args.claim_query)?;
    eprintln!("claim query plan on local D1: {:?}", explain["plan"]);

    let claim = claim_latency(bench, sizes).await?;
    memory.push(memory_reading(probe, "after 1. claim latency")?);
    // Lifecycles, stream and recovery claim from the remaining queue; top it up.
    let needed =
        lifecycle_jobs(&sizes.lifecycle, sizes.lifecycle_rounds) + 1 + sizes.recovery as u64;
    bench.db.top_up(needed)?;
    let lifecycle = lifecycle(bench, &sizes.lifecycle, sizes.lifecycle_rounds).await?;
    memory.push(memory_reading(probe, "after 2. lifecycle throughput")?);
    let (stream, heartbeats) = stream_rate(bench, sizes).await?;
    memory.push(memory_reading(probe, "after 3. stream appends")?);
    let recovery = recovery(bench, sizes.recovery).await?;
    memory.push(memory_reading(probe, "after 4. recovery")?);
    let chatty = chatty(bench, sizes, args.batch_bytes, chatty_server(args)).await?;
    memory.push(memory_reading(probe, "after 7. chatty jobs")?);
    let (wall, cpu) = started.end();

    let report = json!({
        "command": args.command,
        "date": date(),
        "smoke": args.smoke,
        "machine": machine(),
        "versions": versions(),
        "loadAverage": { "start": load_start, "end": loadavg() },
        "sizesNote": if args.smoke { "smoke sizes (tiny)" } else { SIZES_NOTE_FULL },
        "wallSeconds": round(wall),
        "clientCpu": round(cpu),
        "explain": explain,
        "claim": claim,
        "lifecycle": lifecycle,
        "stream": stream,
        "heartbeats": heartbeats,
        "recovery": recovery,
        "pickup": pickup,
        "chatty": chatty,
        "roundTrips": trips,
        "bigBundle": big,
        "memory": memory,
        "oversizedBody": big_body,
        "bundle": { "wasmBytes": args.wasm_bytes, "wasmGzipBytes": args.wasm_gzip_bytes },
        "seedingNote": SEEDING_NOTE,
    });
    write_json(args, &report)?;
    let analysis = kept_analysis(&args.markdown);
    std::fs::write(&args.markdown, markdown(&report, &analysis))
        .map_err(BenchError::io("write markdown"))?;
    eprintln!(
        "bench done in {wall:.0} s; load generator CPU {:.0}% of one core",
        cpu * 100.0
    );
    Ok(())
}

/// `--hot-only`: the hot path's figures alone, for comparing one change with another on the
/// same machine within minutes. The claim runs three times at 100 queued (three ratios show the
/// noise of one); then the lifecycles, and the warm heartbeats and appends of section 3.
async fn hot_only(args: &Args, bench: &mut Bench, sizes: &Sizes, load_start: &str) -> Res<()> {
    let trips = round_trips(bench).await?;
    let pickup = pickup(bench, sizes.pickup).await?;
    let depth = sizes.queue_levels[0];
    let claim_sizes = Sizes {
        queue_levels: [depth; 3],
        ..*sizes
    };
    let claim = claim_latency(bench, &claim_sizes).await?;
    // The lifecycles and the stream's one claim take from the remaining queue.
    let needed = lifecycle_jobs(&sizes.lifecycle, sizes.lifecycle_rounds) + 1;
    bench.db.top_up(needed)?;
    let lifecycle = lifecycle(bench, &sizes.lifecycle, sizes.lifecycle_rounds).await?;
    let (stream, heartbeats) = stream_rate(bench, sizes).await?;
    let report = json!({
        "command": args.command,
        "date": date(),
        "loadAverage": { "start": load_start, "end": loadavg() },
        "roundTrips": trips,
        "pickup": pickup,
        "claim": claim,
        "lifecycle": lifecycle,
        "stream": stream,
        "heartbeats": heartbeats,
    });
    write_json(args, &report)?;
    print!("{}", hot_summary(&report));
    Ok(())
}
