//! Stream custody: every refusal code of an append.

use super::*;

#[tokio::test]
async fn stream_refusals_each_have_their_code() {
    let f = StagedPrompt::new(org("jobs-stream").await).await;
    let mut runner = f.runner(1).await;
    let stranger = f.runner(1).await;
    f.enqueue(&json!({ "case": "stream" })).await;
    let claimed = claim_running(&mut runner).await;
    let identity = claimed.identity();
    let job_id = claimed.job_id();
    let mut head = ChainHead::empty();

    // Sequence 0 must not name a predecessor.
    let fake_previous = stable_json::hash(&json!("not a chunk"));
    let mut at_zero = ChainHead::restore(1, vec![fake_previous.clone()])
        .expect("a one-chunk head")
        .next_chunk(
            &identity,
            ChunkKind::Log,
            json!({ "n": 0 }),
            timestamp_now(),
        );
    at_zero.sequence = 0;
    at_zero.checksum = at_zero.expected_checksum();
    expect_chunk_error(
        &runner.stream(&at_zero.to_json()).await,
        &ChunkError::PreviousAtZero,
    );

    // Chunk 0 (control) and chunk 1.
    let mut accepted = Vec::new();
    for n in 0..2 {
        let chunk = head.next_chunk(
            &identity,
            ChunkKind::Log,
            json!({ "n": n }),
            timestamp_now(),
        );
        expect_chunk_accepted(&runner.stream(&chunk.to_json()).await, n, &chunk.checksum);
        head = ChainHead::restore(n + 1, accepted_checksums(&accepted, &chunk)).expect("head");
        accepted.push(chunk);
    }

    // A gap: sequence 3 while the stream expects 2.
    let ahead = ChainHead::restore(3, vec![fake_previous.clone()]).expect("head");
    let gap = ahead.next_chunk(
        &identity,
        ChunkKind::Log,
        json!({ "n": 3 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&gap.to_json()).await,
        &ChunkError::Gap {
            expected: 2,
            received: 3,
        },
    );

    // Exact replay of a stored chunk: its checksum is already stored.
    expect_chunk_error(
        &runner.stream(&accepted[0].to_json()).await,
        &ChunkError::DuplicateChecksum,
    );
    expect_chunk_error(
        &runner.stream(&accepted[1].to_json()).await,
        &ChunkError::DuplicateChecksum,
    );

    // Reordered: a different chunk for a sequence already stored (0, then 1).
    let behind = ChainHead::empty().next_chunk(
        &identity,
        ChunkKind::Trajectory,
        json!({ "late": true }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&behind.to_json()).await,
        &ChunkError::DuplicateSequence {
            expected: 2,
            received: 0,
        },
    );
    let one_head = ChainHead::restore(1, vec![accepted[0].checksum.clone()]).expect("head");
    let rival = one_head.next_chunk(
        &identity,
        ChunkKind::Log,
        json!({ "rival": 1 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&rival.to_json()).await,
        &ChunkError::DuplicateSequence {
            expected: 2,
            received: 1,
        },
    );

    // The right sequence naming the wrong predecessor.
    let wrong_previous = ChainHead::restore(2, vec![fake_previous.clone()]).expect("head");
    let mismatch = wrong_previous.next_chunk(
        &identity,
        ChunkKind::Log,
        json!({ "n": 2 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&mismatch.to_json()).await,
        &ChunkError::PreviousMismatch {
            expected: accepted[1].checksum.clone(),
        },
    );
    let also_wrong = ChainHead::restore(2, vec![accepted[0].checksum.clone()]).expect("head");
    let mismatch = also_wrong.next_chunk(
        &identity,
        ChunkKind::Log,
        json!({ "n": 2 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&mismatch.to_json()).await,
        &ChunkError::PreviousMismatch {
            expected: accepted[1].checksum.clone(),
        },
    );

    // A payload that is not what payloadHash says.
    let mut tampered = next_chunk(&head, &identity, json!({ "n": 2 }));
    tampered["payload"] = json!({ "n": 2, "injected": true });
    expect_chunk_error(
        &runner.stream(&tampered).await,
        &ChunkError::PayloadHashMismatch {
            computed: fake_previous.clone(),
        },
    );
    // A checksum that does not cover the fields.
    let mut forged = next_chunk(&head, &identity, json!({ "n": 2 }));
    forged["checksum"] = json!(fake_previous.as_str());
    expect_chunk_error(
        &runner.stream(&forged).await,
        &ChunkError::ChecksumMismatch {
            computed: fake_previous.clone(),
        },
    );
    // A kind that is neither log nor trajectory.
    let mut bad_kind = next_chunk(&head, &identity, json!({ "n": 2 }));
    bad_kind["kind"] = json!("metric");
    expect_chunk_error(
        &runner.stream(&bad_kind).await,
        &ChunkError::BadKind {
            kind: "metric".into(),
        },
    );

    // Changed claim identity: another claim id, another attempt (self-consistent chunks).
    let forged_claim = ChunkIdentity {
        claim_id: claim_id("clm_forged_e2e"),
        ..identity.clone()
    };
    let chunk = head.next_chunk(
        &forged_claim,
        ChunkKind::Log,
        json!({ "n": 2 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&chunk.to_json()).await,
        &ChunkError::IdentityChanged {
            field: IdentityField::ClaimId,
            expected: String::new(),
            received: String::new(),
        },
    );
    let next_attempt = ChunkIdentity {
        dispatch_attempt: DispatchAttempt::new(2).expect("attempt 2"),
        ..identity.clone()
    };
    let chunk = head.next_chunk(
        &next_attempt,
        ChunkKind::Log,
        json!({ "n": 2 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&chunk.to_json()).await,
        &ChunkError::IdentityChanged {
            field: IdentityField::DispatchAttempt,
            expected: String::new(),
            received: String::new(),
        },
    );

    // A payload over 256 KiB of stable JSON.
    const MAX: usize = 256 * 1024;
    let envelope_bytes = stable_json::stable_json(&json!({ "blob": "" })).len();
    let too_large = json!({ "blob": "x".repeat(MAX - envelope_bytes + 1) });
    assert_eq!(stable_json::stable_json(&too_large).len(), MAX + 1);
    expect_chunk_error(
        &runner
            .stream(&next_chunk(&head, &identity, too_large))
            .await,
        &ChunkError::PayloadTooLarge {
            bytes: MAX + 1,
            max_bytes: MAX,
        },
    );

    // A runner that does not hold the job: not found.
    let chunk = head.next_chunk(
        &identity,
        ChunkKind::Log,
        json!({ "n": 2 }),
        timestamp_now(),
    );
    stranger
        .stream(&chunk.to_json())
        .await
        .expect_error(404, "NOT_FOUND");

    // Nothing refused was stored; the chain still extends (exactly 256 KiB is allowed).
    let stored = job(f.key(), &job_id).await;
    let checksums: Vec<&str> = array_of(&stored, "stream")
        .iter()
        .map(|row| str_of(row, "checksum"))
        .collect();
    assert_eq!(
        checksums,
        accepted
            .iter()
            .map(|c| c.checksum.as_str())
            .collect::<Vec<_>>(),
        "refused chunks were stored: {stored}"
    );
    let at_limit = json!({ "blob": "y".repeat(MAX - envelope_bytes) });
    assert_eq!(stable_json::stable_json(&at_limit).len(), MAX);
    let chunk = head.next_chunk(&identity, ChunkKind::Log, at_limit, timestamp_now());
    expect_chunk_accepted(&runner.stream(&chunk.to_json()).await, 2, &chunk.checksum);
    accepted.push(chunk);

    // The stream closes with the last stored checksum.
    let evidence = bare_evidence(f.key()).await;
    let completion = claimed.succeeded(Some(&accepted[2].checksum), evidence);
    let decision = runner.complete(&completion).await.expect(200);
    assert_eq!(decision["decision"], "accepted", "{decision}");
    let done = job(f.key(), &job_id).await;
    assert_eq!(array_of(&done, "stream").len(), 3, "{done}");
}

/// The checksums a head after `chunk` remembers, oldest first.
fn accepted_checksums(
    accepted: &[edgerunner_protocol::chunk::StreamChunk],
    chunk: &edgerunner_protocol::chunk::StreamChunk,
) -> Vec<Sha256Hex> {
    accepted
        .iter()
        .chain(std::iter::once(chunk))
        .map(|c| c.checksum.clone())
        .collect()
}
