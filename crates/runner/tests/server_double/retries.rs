//! Retries only where safe, re-sending the same bytes: lost chunk and completion answers, claims
//! that may have reached the server, stream limits, heartbeats beside a busy job, reap passes.

use std::sync::Arc;

use edgerunner::client::Decision;
use edgerunner::heartbeat::{ClaimStatus, Heartbeat, HeartbeatConfig};
use edgerunner::http::Http;
use edgerunner::log_payload::log_lines;
use edgerunner::stream::{pump_lines, BatchLimits, ChunkStream, LogLine, OutputStream};
use edgerunner_protocol::chunk::ChunkKind;
use edgerunner_protocol::completion::{Evidence, EvidenceId};
use edgerunner_protocol::envelope::ClaimId;
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::stable_json;
use edgerunner_protocol::state::CompletionStatus;
use serde_json::{json, Value};

use crate::double::*;

#[tokio::test]
async fn a_chunk_whose_answer_was_lost_is_resent_identically_and_counts_as_stored() {
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        // The first chunk is stored but its answer is lost (502); the retry finds it stored.
        "/api/remote-runners/stream" if nth == 0 => (502, None),
        "/api/remote-runners/stream" if nth == 1 => (
            409,
            Some(json!({"error": {"code": "STREAM_DUPLICATE_CHECKSUM", "message": "stored"}})),
        ),
        _ => (200, Some(json!({"accepted": true}))),
    }));
    let client = Arc::new(client(&double));
    let identity = stream_identity();
    let mut stream = ChunkStream::new(Arc::clone(&client), identity);
    let first = stream
        .send(
            ChunkKind::Log,
            json!({"lines": [{"stream": "stdout", "line": "a"}]}),
        )
        .await
        .expect("stored");
    stream
        .send(
            ChunkKind::Log,
            json!({"lines": [{"stream": "stdout", "line": "b"}]}),
        )
        .await
        .expect("stored");
    let sent: Vec<Value> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/stream")
        .map(|r| serde_json::from_str(&r.body).expect("JSON"))
        .collect();
    assert_eq!(sent.len(), 3);
    assert_eq!(
        sent[0], sent[1],
        "the retry is the same chunk, byte for byte"
    );
    assert_eq!(sent[2]["sequence"], 1);
    assert_eq!(sent[2]["previousChecksum"], first.as_str());
    assert_eq!(stream.len(), 2);
}

#[tokio::test]
async fn a_completion_is_resent_unchanged_and_a_duplicate_decision_settles_it() {
    let genuine = assignment(&envelope(11), &signing("k"));
    let double = Double::start(Box::new(move |request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        "/api/remote-runners/claim" => (200, Some(genuine.clone())),
        "/api/remote-runners/complete" if nth == 0 => (503, None),
        "/api/remote-runners/complete" => (
            200,
            Some(
                json!({"decision": "duplicate", "rationale": "exact replay", "jobState": "succeeded"}),
            ),
        ),
        _ => (200, Some(json!({}))),
    }));
    let client = client(&double);
    let assignment = client.claim().await.expect("verified").expect("a job");
    let completion = assignment.completion(
        CompletionStatus::Succeeded,
        Some(stable_json::hash(&json!({"exitCode": 0}))),
        None,
        Evidence {
            evaluation_run_id: EvidenceId::Text("evr_1".into()),
            test_result_ids: vec![],
            cost_record_ids: vec![],
            model_call_ids: vec![],
            trace_id: None,
            extra: serde_json::Map::new(),
        },
    );
    let answer = client.complete(&completion).await.expect("decided");
    assert_eq!(answer.decision, Decision::Duplicate);
    assert!(answer.is_settled());
    let bodies: Vec<String> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/complete")
        .map(|r| r.body)
        .collect();
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0], bodies[1], "never a different completion");
    let sent: Value = serde_json::from_str(&bodies[0]).expect("JSON");
    assert_eq!(sent["completionChecksum"], completion.checksum().as_str());
}

#[tokio::test]
async fn a_claim_without_an_answer_is_asked_again_with_the_same_request_id() {
    // Two tries get no answer (the grant may have happened); the third is answered. The server
    // answers a repeated requestId with the claim it granted, so repeating is safe.
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        "/api/remote-runners/claim" if nth < 2 => (502, None),
        _ => (204, None),
    }));
    let client = client(&double);
    assert!(client
        .claim()
        .await
        .expect("answered on the third try")
        .is_none());
    let request_ids = |double: &Double| -> Vec<Value> {
        double
            .received()
            .into_iter()
            .filter(|r| r.path == "/api/remote-runners/claim")
            .map(|r| serde_json::from_str::<Value>(&r.body).expect("JSON")["requestId"].clone())
            .collect()
    };
    let ids = request_ids(&double);
    assert_eq!(ids.len(), 3);
    let first = ids[0].as_str().expect("a requestId");
    assert!(
        first.len() == 32 && first.chars().all(|c| c.is_ascii_hexdigit()),
        "{first}"
    );
    assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
    // The next claim is a new request with a key of its own.
    assert!(client.claim().await.expect("answered").is_none());
    let ids = request_ids(&double);
    assert_eq!(ids.len(), 4);
    assert_ne!(ids[3], ids[0]);
}

#[tokio::test]
async fn a_long_poll_sends_its_wait_and_a_plain_claim_sends_none() {
    let double = Double::start(Box::new(|request, _| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        _ => (204, None),
    }));
    let client = client(&double);
    assert!(client.claim_waiting(10).await.expect("answered").is_none());
    assert!(client.claim_waiting(99).await.expect("answered").is_none());
    assert!(client.claim().await.expect("answered").is_none());
    let waits: Vec<Value> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/claim")
        .map(|r| serde_json::from_str::<Value>(&r.body).expect("JSON")["waitSeconds"].clone())
        .collect();
    // Capped at the server's 25 s; absent (not 0) without a wait, as the published SDK sends.
    assert_eq!(waits, [json!(10), json!(25), Value::Null]);
}

#[tokio::test]
async fn a_claim_refused_for_good_is_not_repeated() {
    let double = Double::start(Box::new(|request, _| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        _ => (
            422,
            Some(json!({"error": {"code": "INVALID_SERVED_TARGETS", "message": "no"}})),
        ),
    }));
    let client = client(&double);
    let error = client.claim().await.expect_err("refused");
    assert_eq!(error.status(), Some(422));
    assert_eq!(double.count("/api/remote-runners/claim"), 1);
}

#[tokio::test]
async fn chunks_of_unknown_fate_are_kept_in_order_and_refused_ones_leave_the_chain() {
    // Three tries of the first chunk get no useful answer; later everything is stored, except
    // the chunk whose payload says "refuse me".
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        "/api/remote-runners/stream" if nth < 3 => (502, None),
        "/api/remote-runners/stream" if request.body.contains("refuse me") => (
            422,
            Some(json!({"error": {"code": "STREAM_PAYLOAD_TOO_LARGE", "message": "too big"}})),
        ),
        _ => (200, Some(json!({"accepted": true}))),
    }));
    let client = Arc::new(client(&double));
    let identity = stream_identity();
    let mut stream = ChunkStream::new(Arc::clone(&client), identity);
    let error = stream
        .send(ChunkKind::Log, json!({"n": 0}))
        .await
        .expect_err("no answer after the retries");
    assert!(error.is_transient());
    assert_eq!(stream.unsettled(), 1, "kept to be sent again");
    let second = stream
        .send(ChunkKind::Log, json!({"n": 1}))
        .await
        .expect("both stored");
    assert_eq!(stream.unsettled(), 0);
    assert!(stream
        .send(ChunkKind::Log, json!({"n": "refuse me"}))
        .await
        .is_err());
    assert_eq!(stream.len(), 2, "the refused chunk left the chain");
    assert_eq!(stream.final_checksum(), Some(second.clone()));
    stream
        .send(ChunkKind::Log, json!({"n": 3}))
        .await
        .expect("stored");

    let sent: Vec<Value> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/stream")
        .map(|r| serde_json::from_str(&r.body).expect("JSON"))
        .collect();
    let sequences: Vec<u64> = sent
        .iter()
        .map(|c| c["sequence"].as_u64().expect("n"))
        .collect();
    assert_eq!(sequences, vec![0, 0, 0, 0, 1, 2, 2]);
    assert!(
        sent[..4].iter().all(|chunk| chunk == &sent[0]),
        "the same chunk each time"
    );
    assert_eq!(sent[6]["payload"], json!({"n": 3}));
    assert_eq!(sent[6]["previousChecksum"], second.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_go_on_while_the_job_hogs_its_thread_and_cancellation_surfaces() {
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        "/api/remote-runners/heartbeat" => (
            200,
            Some(json!({
                "cancelRequested": nth >= 4,
                "cancelReason": "operator asked",
                "state": if nth >= 4 { "cancel_requested" } else { "running" },
                "leaseExpiresAt": later(60).as_str(),
            })),
        ),
        _ => (200, Some(json!({}))),
    }));
    let client = Arc::new(client(&double));
    let heartbeat = Heartbeat::spawn(
        Arc::clone(&client),
        ClaimId::parse("clm_double").expect("id"),
        HeartbeatConfig {
            interval: std::time::Duration::from_millis(50),
            extend_seconds: 60,
        },
        ClaimStatus::default(),
    );
    let mut status = heartbeat.status();
    // A job that never yields: it blocks this task's thread outright.
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert!(
        double.count("/api/remote-runners/heartbeat") >= 5,
        "heartbeats kept going: {}",
        double.count("/api/remote-runners/heartbeat")
    );
    let seen = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        status.wait_for(|s| s.cancel_requested.is_some()),
    )
    .await
    .expect("cancellation surfaced")
    .expect("heartbeat alive")
    .clone();
    assert_eq!(
        seen.cancel_requested,
        Some(Some("operator asked".to_owned()))
    );
    assert!(seen.beats >= 5);
}

#[tokio::test]
async fn a_chatty_job_is_not_held_back_by_its_log_and_its_chunks_are_full() {
    use std::sync::atomic::{AtomicBool, Ordering};

    // The server holds every chunk's answer until the gate opens: the job's output must all be
    // read meanwhile (it fits the queue), then go out in chunks filled to the byte bound.
    let gate = Arc::new(AtomicBool::new(false));
    let held = Arc::clone(&gate);
    let double = Double::start(Box::new(move |request, _| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        _ => {
            while !held.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            (200, Some(json!({"accepted": true})))
        }
    }));
    let client = Arc::new(client(&double));
    let mut stream = ChunkStream::new(Arc::clone(&client), stream_identity());
    let (lines, received) = tokio::sync::mpsc::channel(1024);
    const LINES: u64 = 200_000;
    let producer = tokio::spawn(async move {
        for n in 1..=LINES {
            let line = LogLine {
                stream: OutputStream::Stdout,
                line: n.to_string(),
            };
            lines.send(line).await.expect("the pump reads");
        }
    });
    // No deadline cuts a batch here (on a loaded machine the producer can pause for longer
    // than the default 250 ms): only the byte bound and the end of the output do.
    let limits = BatchLimits {
        max_delay: std::time::Duration::from_secs(3600),
        ..BatchLimits::DEFAULT
    };
    let pump = pump_lines(&mut stream, received, limits, None);
    let opener = async {
        tokio::time::timeout(std::time::Duration::from_secs(30), producer)
            .await
            .expect("every line was read while no chunk had been answered")
            .expect("producer");
        gate.store(true, Ordering::SeqCst);
    };
    let (report, ()) = tokio::join!(pump, opener);
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(report.lines_sent, LINES);
    let chunks = streamed(&double);
    assert_eq!(report.chunks, chunks.len() as u64);
    let numbers: Vec<u64> = chunks
        .iter()
        .flat_map(|payload| log_lines(payload).expect("a log payload"))
        .map(|line| line.line.parse().expect("a number"))
        .collect();
    assert_eq!(
        numbers,
        (1..=LINES).collect::<Vec<_>>(),
        "every line, in order"
    );
    let sizes: Vec<usize> = chunks
        .iter()
        .map(|payload| stable_json::stable_json(payload).len())
        .collect();
    assert_eq!(report.payload_bytes, sizes.iter().sum::<usize>() as u64);
    assert!(
        sizes.iter().all(|&size| size <= limits.max_bytes),
        "{sizes:?}"
    );
    // Every chunk but the last is full.
    let full = limits.max_bytes - 64;
    let all_but_last = &sizes[..sizes.len() - 1];
    assert!(all_but_last.iter().all(|&size| size > full), "{sizes:?}");
    assert!(
        chunks.len() <= (report.payload_bytes as usize).div_ceil(full) + 2,
        "{} chunks for {} bytes",
        chunks.len(),
        report.payload_bytes
    );
}

#[tokio::test]
async fn once_the_server_says_the_stream_is_full_no_more_log_chunks_are_sent() {
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        "/api/remote-runners/stream" if nth >= 2 => (
            409,
            Some(json!({"error": {"code": "STREAM_BYTES_LIMIT", "message": "full"}})),
        ),
        _ => (200, Some(json!({"accepted": true}))),
    }));
    let client = Arc::new(client(&double));
    let mut stream = ChunkStream::new(Arc::clone(&client), stream_identity());
    let (lines, received) = tokio::sync::mpsc::channel(1024);
    // Ten lines per chunk, sent one batch at a time.
    let limits = BatchLimits {
        max_lines: 10,
        ..BatchLimits::DEFAULT
    };
    let producer = async move {
        for n in 0..100 {
            let line = LogLine {
                stream: OutputStream::Stderr,
                line: format!("line {n}"),
            };
            lines.send(line).await.expect("the pump reads");
        }
    };
    let (report, ()) = tokio::join!(pump_lines(&mut stream, received, limits, None), producer);
    let requests = streamed(&double).len();
    assert_eq!(requests, 3, "two stored, one refused, then none");
    assert_eq!(report.chunks, 2);
    assert_eq!(report.lines_sent, 20);
    assert_eq!(report.lines_over_stream_limit, 80);
    assert_eq!(report.lines_lost, 0);
    assert_eq!(
        report.error.as_ref().and_then(|e| e.code()),
        Some(ErrorCode::StreamBytesLimit)
    );
    assert_eq!(stream.len(), 2, "the refused chunk left the chain");
}

/// A reap pass whose answer was lost (a proxy's bare `503`) is sent again: a pass is safe to
/// repeat. A cancel whose answer was lost is not: it may have reached the server.
#[tokio::test]
async fn a_reap_pass_whose_answer_was_lost_is_repeated_and_a_cancel_is_not() {
    let double = Double::start(Box::new(|request, nth| {
        match (request.path.as_str(), nth) {
            (_, 0) => (503, None),
            ("/api/remote-runners/jobs/reap", _) => (
                200,
                Some(
                    json!({"examined": 1, "requeued": 1, "ended": 0, "unchanged": 0, "failed": 0, "more": false}),
                ),
            ),
            _ => (200, Some(json!({}))),
        }
    }));
    let admin =
        edgerunner::admin::AdminClient::new(Http::new(&double.url).expect("http"), "erk_double")
            .expect("admin");
    let report = admin
        .reap(Some(10))
        .await
        .expect("the repeated pass answers");
    assert_eq!(report["requeued"], 1);
    assert_eq!(double.count("/api/remote-runners/jobs/reap"), 2);
    let received = double.received();
    let bodies: Vec<&str> = received
        .iter()
        .filter(|r| r.path == "/api/remote-runners/jobs/reap")
        .map(|r| r.body.as_str())
        .collect();
    assert_eq!(bodies, [r#"{"limit":10}"#; 2]);

    let error = admin
        .cancel_job("job_1", "not needed")
        .await
        .expect_err("a lost cancel answer is an error");
    assert_eq!(error.status(), Some(503));
    assert_eq!(double.count("/api/remote-runners/jobs/job_1/cancel"), 1);
}
