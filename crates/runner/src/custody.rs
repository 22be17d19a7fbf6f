//! Offline verification of a job's custody bundle (`GET /api/remote-runners/jobs/{id}/bundle`,
//! `edgerunner verify FILE`).
//!
//! Every hash and link is recomputed from the bundle alone:
//!
//! - each claim's signed envelope: `payloadHash = H(envelope)`; the HMAC signature too when the
//!   runner's job-signing secret is given; the envelope names this job, this claim, its
//!   attempt, runner, organization, input hash and release;
//! - each stream chunk: `payloadHash = H(payload)`, `checksum` over its fields, the claim of
//!   its attempt; per attempt, sequences contiguous from 0 and each `previousChecksum` the
//!   checksum of the chunk before;
//! - each completion: `completionChecksum` over its fields as received; the accepted one binds
//!   its attempt's claim and runner, the envelope's input hash, and the last checksum of its
//!   attempt's stream; a `duplicate` repeats the accepted checksum; the job's state is the
//!   accepted status.
//!
//! Every problem is named by where it is ("stream attempt 1 sequence 2: previousChecksum does
//! not match sequence 1's checksum"); the check goes on after a problem, so one run lists
//! them all (a changed chunk usually shows up as its own mismatch and as its successor's
//! broken link).

use core::fmt;
use std::collections::BTreeMap;

use edgerunner_protocol::chunk::{payload_hash, StreamChunk};
use edgerunner_protocol::completion::{
    verify_completion_checksum, Completion, CompletionError, CHECKSUM_FIELD,
};
use edgerunner_protocol::envelope::{JobEnvelope, JobSigningSecret, ALGORITHM_HMAC_SHA256};
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// The bundle format this verifier reads.
pub const BUNDLE_VERSION: u64 = 1;

/// One thing wrong with a bundle, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub location: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// What verification found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BundleReport {
    pub job_id: Option<String>,
    pub job_state: Option<String>,
    pub claims: usize,
    pub chunks: usize,
    pub completions: usize,
    /// The accepted completion's status, if one was accepted.
    pub accepted_status: Option<String>,
    /// Envelopes whose HMAC was checked (0 without a signing secret).
    pub signatures_checked: usize,
    pub problems: Vec<Problem>,
}

impl BundleReport {
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }

    pub fn to_json(&self) -> Value {
        json!({
            "valid": self.is_valid(),
            "jobId": self.job_id,
            "jobState": self.job_state,
            "claims": self.claims,
            "chunks": self.chunks,
            "completions": self.completions,
            "acceptedStatus": self.accepted_status,
            "signaturesChecked": self.signatures_checked,
            "problems": self.problems.iter().map(|p| json!({
                "location": p.location,
                "message": p.message,
            })).collect::<Vec<_>>(),
        })
    }

    fn problem(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            location: location.into(),
            message: message.into(),
        });
    }
}

struct ClaimInfo {
    id: String,
    runner_id: Option<String>,
    envelope: Option<JobEnvelope>,
}

#[derive(Default)]
struct Chain {
    last: Option<(u64, Sha256Hex)>,
    count: usize,
}

/// Verifies `bundle`; `secrets` are job-signing secrets (`jobSigning.secret` of the runners'
/// sessions) for checking envelope signatures.
pub fn verify_bundle(bundle: &Value, secrets: &[JobSigningSecret]) -> BundleReport {
    let mut report = BundleReport::default();
    if !bundle.is_object() {
        report.problem("bundle", "is not a JSON object");
        return report;
    }
    match bundle["bundleVersion"].as_u64() {
        Some(BUNDLE_VERSION) => {}
        _ => report.problem(
            "bundle",
            format!(
                "bundleVersion is {}; this verifier reads version {BUNDLE_VERSION}",
                bundle["bundleVersion"]
            ),
        ),
    }
    let job = &bundle["job"];
    let job_id = job["id"].as_str().map(str::to_owned);
    if job_id.is_none() {
        report.problem("job", "has no id");
    }
    report.job_id.clone_from(&job_id);
    report.job_state = job["state"].as_str().map(str::to_owned);

    let claims = verify_claims(&mut report, bundle, secrets);
    let chains = verify_stream(&mut report, bundle, &claims);
    verify_completions(&mut report, bundle, &claims, &chains);
    report
}

fn list<'a>(report: &mut BundleReport, bundle: &'a Value, key: &str) -> &'a [Value] {
    match &bundle[key] {
        Value::Array(items) => items,
        Value::Null => {
            report.problem("bundle", format!("has no {key:?} list"));
            &[]
        }
        _ => {
            report.problem("bundle", format!("{key:?} is not a list"));
            &[]
        }
    }
}

fn verify_claims(
    report: &mut BundleReport,
    bundle: &Value,
    secrets: &[JobSigningSecret],
) -> BTreeMap<u64, ClaimInfo> {
    let job = &bundle["job"];
    let mut claims: BTreeMap<u64, ClaimInfo> = BTreeMap::new();
    let items = list(report, bundle, "claims");
    report.claims = items.len();
    for (index, claim) in items.iter().enumerate() {
        let (Some(id), Some(attempt)) = (claim["id"].as_str(), claim["dispatchAttempt"].as_u64())
        else {
            report.problem(
                format!("claims[{index}]"),
                "has no id or no dispatchAttempt",
            );
            continue;
        };
        let at = format!("claim {id} (attempt {attempt})");
        if claims.contains_key(&attempt) {
            report.problem(&at, format!("is a second claim for attempt {attempt}"));
            continue;
        }
        let runner_id = claim["runnerId"].as_str().map(str::to_owned);
        let mut info = ClaimInfo {
            id: id.to_owned(),
            runner_id: runner_id.clone(),
            envelope: None,
        };
        let signed = &claim["signedJob"];
        if !signed.is_object() {
            report.problem(&at, "has no signed envelope");
            claims.insert(attempt, info);
            continue;
        }
        if signed["algorithm"].as_str() != Some(ALGORITHM_HMAC_SHA256) {
            report.problem(
                &at,
                format!(
                    "signing algorithm is {}, not hmac-sha256",
                    signed["algorithm"]
                ),
            );
        }
        let raw_envelope = &signed["envelope"];
        let computed = stable_json::hash(raw_envelope);
        let stated = signed["payloadHash"].as_str();
        match stated {
            Some(stated) if stated == computed.as_str() => {}
            Some(stated) => report.problem(
                &at,
                format!(
                    "payloadHash {stated} does not match H(envelope) = {computed}: the envelope \
                     is not the one that was signed"
                ),
            ),
            None => report.problem(&at, "signedJob has no payloadHash"),
        }
        if !secrets.is_empty() {
            let key_id = signed["keyId"].as_str().unwrap_or("");
            match secrets.iter().find(|s| s.key_id().as_str() == key_id) {
                None => report.problem(
                    &at,
                    format!("signed with key {key_id:?}, for which no signing secret was given"),
                ),
                Some(secret) => {
                    let signature = signed["signature"].as_str().unwrap_or("");
                    if hmac_verifies(secret, stated.unwrap_or(computed.as_str()), signature) {
                        report.signatures_checked += 1;
                    } else {
                        report.problem(&at, format!("signature does not verify with key {key_id}"));
                    }
                }
            }
        }
        match JobEnvelope::from_json(raw_envelope) {
            Err(error) => report.problem(&at, error.to_string()),
            Ok(envelope) => {
                let mut differs = |field: &str, signed: &str, other: Option<&str>, what: &str| {
                    if let Some(other) = other {
                        if signed != other {
                            report.problem(
                                &at,
                                format!(
                                    "the envelope's {field} is {signed}, but {what} is {other}"
                                ),
                            );
                        }
                    }
                };
                differs(
                    "jobId",
                    envelope.job_id.as_str(),
                    job["id"].as_str(),
                    "the job's id",
                );
                differs(
                    "claimId",
                    envelope.claim_id.as_str(),
                    Some(id),
                    "the claim's id",
                );
                differs(
                    "dispatchAttempt",
                    &envelope.dispatch_attempt.to_string(),
                    Some(&attempt.to_string()),
                    "the claim's",
                );
                differs(
                    "runnerId",
                    envelope.runner_id.as_str(),
                    runner_id.as_deref(),
                    "the claim's runner",
                );
                differs(
                    "organizationId",
                    envelope.organization_id.as_str(),
                    job["organizationId"].as_str(),
                    "the job's",
                );
                differs(
                    "inputHash",
                    envelope.input_hash.as_str(),
                    job["inputHash"].as_str(),
                    "the job's",
                );
                differs(
                    "subject.contentHash",
                    envelope.subject.content_hash.as_str(),
                    job["subject"]["contentHash"].as_str(),
                    "the job's",
                );
                info.envelope = Some(envelope);
            }
        }
        claims.insert(attempt, info);
    }
    claims
}

fn hmac_verifies(secret: &JobSigningSecret, payload_hash: &str, signature: &str) -> bool {
    let Ok(signature) = hex::decode(signature) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes()) else {
        return false;
    };
    mac.update(payload_hash.as_bytes());
    mac.verify_slice(&signature).is_ok()
}

fn verify_stream(
    report: &mut BundleReport,
    bundle: &Value,
    claims: &BTreeMap<u64, ClaimInfo>,
) -> BTreeMap<u64, Chain> {
    let job_id = bundle["job"]["id"].as_str();
    let mut chains: BTreeMap<u64, Chain> = BTreeMap::new();
    let items = list(report, bundle, "stream");
    report.chunks = items.len();
    for (index, raw) in items.iter().enumerate() {
        let at = match (raw["dispatchAttempt"].as_u64(), raw["sequence"].as_u64()) {
            (Some(attempt), Some(sequence)) => {
                format!("stream attempt {attempt} sequence {sequence}")
            }
            _ => format!("stream[{index}]"),
        };
        let chunk = match StreamChunk::from_json(raw) {
            Ok(chunk) => chunk,
            Err(error) => {
                report.problem(&at, error.to_string());
                continue;
            }
        };
        let attempt = u64::from(chunk.identity.dispatch_attempt.get());
        let sequence = chunk.sequence;
        if job_id.is_some_and(|job| job != chunk.identity.job_id.as_str()) {
            report.problem(&at, format!("belongs to job {}", chunk.identity.job_id));
        }
        match claims.get(&attempt) {
            None => report.problem(&at, format!("no claim of this job has attempt {attempt}")),
            Some(claim) if claim.id != chunk.identity.claim_id.as_str() => report.problem(
                &at,
                format!(
                    "claimId is {}, but attempt {attempt}'s claim is {}",
                    chunk.identity.claim_id, claim.id
                ),
            ),
            Some(_) => {}
        }
        let computed = payload_hash(&chunk.payload);
        if computed != chunk.payload_hash {
            report.problem(
                &at,
                format!(
                    "payloadHash does not match H(payload) = {computed}: the payload was changed"
                ),
            );
        }
        let expected = chunk.expected_checksum();
        if expected != chunk.checksum {
            report.problem(
                &at,
                format!("checksum does not match the chunk's fields (they hash to {expected})"),
            );
        }
        let chain = chains.entry(attempt).or_default();
        chain.count += 1;
        match &chain.last {
            None => {
                if sequence != 0 {
                    report.problem(
                        &at,
                        format!("attempt {attempt}'s stream starts at sequence {sequence}, not 0"),
                    );
                } else if chunk.previous_checksum.is_some() {
                    report.problem(&at, "previousChecksum must be null at sequence 0");
                }
            }
            Some((last, last_checksum)) => {
                if sequence <= *last {
                    report.problem(
                        &at,
                        format!("comes after sequence {last}: repeated or out of order"),
                    );
                } else if sequence > last + 1 {
                    let missing = if sequence == last + 2 {
                        format!("sequence {} is missing", last + 1)
                    } else {
                        format!("sequences {} to {} are missing", last + 1, sequence - 1)
                    };
                    report.problem(&at, format!("{missing} (the stream jumps from {last})"));
                } else {
                    match &chunk.previous_checksum {
                        None => report.problem(
                            &at,
                            format!("previousChecksum is null, but sequence {last}'s checksum is {last_checksum}"),
                        ),
                        Some(previous) if previous != last_checksum => report.problem(
                            &at,
                            format!("previousChecksum does not match sequence {last}'s checksum"),
                        ),
                        Some(_) => {}
                    }
                }
            }
        }
        chain.last = Some((sequence, chunk.checksum.clone()));
    }
    chains
}

fn verify_completions(
    report: &mut BundleReport,
    bundle: &Value,
    claims: &BTreeMap<u64, ClaimInfo>,
    chains: &BTreeMap<u64, Chain>,
) {
    let job = &bundle["job"];
    let items = list(report, bundle, "completions");
    report.completions = items.len();
    // The accepted completion (its fields, and the checksum it was received with) and the
    // received checksums of the duplicates, to compare once every entry is read.
    let mut accepted: Option<(Completion, Option<Sha256Hex>)> = None;
    let mut duplicates: Vec<(String, Option<Sha256Hex>)> = Vec::new();
    for (index, entry) in items.iter().enumerate() {
        let decision = entry["decision"].as_str().unwrap_or("?");
        let at = match entry["id"].as_str() {
            Some(id) => format!("completion {} ({id}, {decision})", index + 1),
            None => format!("completion {} ({decision})", index + 1),
        };
        let Value::Object(fields) = &entry["completion"] else {
            report.problem(&at, "the completion as received is missing");
            continue;
        };
        match verify_completion_checksum(fields) {
            Ok(_) => {}
            Err(CompletionError::ChecksumMismatch { computed }) => report.problem(
                &at,
                format!("completionChecksum does not match its fields (they hash to {computed})"),
            ),
            Err(error) => report.problem(&at, error.to_string()),
        }
        let stated = fields
            .get(CHECKSUM_FIELD)
            .and_then(Value::as_str)
            .and_then(|text| Sha256Hex::parse(text).ok());
        // Read the fields even when the checksum is wrong, to check what they bind.
        let mut resealed = fields.clone();
        resealed.insert(
            CHECKSUM_FIELD.into(),
            edgerunner_protocol::completion::completion_checksum(fields).into(),
        );
        let completion = match Completion::from_json(&Value::Object(resealed)) {
            Ok(completion) => completion,
            Err(error) => {
                report.problem(&at, error.to_string());
                continue;
            }
        };
        if job["id"]
            .as_str()
            .is_some_and(|id| id != completion.fields().job_id.as_str())
        {
            report.problem(&at, format!("is for job {}", completion.fields().job_id));
        }
        match decision {
            "accepted" => {
                if accepted.is_some() {
                    report.problem(&at, "is a second accepted completion for the job");
                    continue;
                }
                check_accepted(report, &at, job, &completion, claims, chains);
                accepted = Some((completion, stated));
            }
            "duplicate" => duplicates.push((at, stated)),
            "conflict" | "stale" => {}
            other => report.problem(&at, format!("has an unknown decision {other:?}")),
        }
    }
    for (at, duplicate) in duplicates {
        match &accepted {
            Some((_, stated)) if stated != &duplicate => report.problem(
                at,
                "is recorded as a duplicate, but its checksum is not the accepted completion's",
            ),
            None => report.problem(
                at,
                "is recorded as a duplicate, but no completion was accepted",
            ),
            Some(_) => {}
        }
    }
    let state = job["state"].as_str();
    match &accepted {
        Some((completion, _)) => {
            let status = completion.fields().status.as_str();
            report.accepted_status = Some(status.to_owned());
            if state.is_some_and(|state| state != status) {
                report.problem(
                    "job",
                    format!(
                        "state is {}, but the accepted completion says {status}",
                        state.unwrap_or("?")
                    ),
                );
            }
        }
        None => {
            if let Some(state @ ("succeeded" | "failed")) = state {
                report.problem("job", format!("is {state}, but no completion was accepted"));
            }
        }
    }
}

fn check_accepted(
    report: &mut BundleReport,
    at: &str,
    job: &Value,
    completion: &Completion,
    claims: &BTreeMap<u64, ClaimInfo>,
    chains: &BTreeMap<u64, Chain>,
) {
    let fields = completion.fields();
    let attempt = u64::from(fields.dispatch_attempt.get());
    match claims.get(&attempt) {
        None => report.problem(at, format!("no claim of this job has attempt {attempt}")),
        Some(claim) => {
            if claim.id != fields.claim_id.as_str() {
                report.problem(
                    at,
                    format!(
                        "claimId is {}, but attempt {attempt}'s claim is {}",
                        fields.claim_id, claim.id
                    ),
                );
            }
            if claim
                .runner_id
                .as_deref()
                .is_some_and(|runner| runner != fields.runner_id.as_str())
            {
                report.problem(
                    at,
                    format!(
                        "runnerId is {}, but the claim's runner is {}",
                        fields.runner_id,
                        claim.runner_id.as_deref().unwrap_or("?")
                    ),
                );
            }
            if let Some(envelope) = &claim.envelope {
                if envelope.input_hash != fields.input_hash {
                    report.problem(
                        at,
                        format!(
                            "inputHash {} is not the signed envelope's inputHash {}",
                            fields.input_hash, envelope.input_hash
                        ),
                    );
                }
                if envelope.organization_id != fields.organization_id {
                    report.problem(at, "organizationId is not the signed envelope's");
                }
            }
        }
    }
    if job["inputHash"]
        .as_str()
        .is_some_and(|hash| hash != fields.input_hash.as_str())
    {
        report.problem(
            at,
            format!("inputHash {} is not the job's", fields.input_hash),
        );
    }
    let last = chains.get(&attempt).and_then(|chain| chain.last.as_ref());
    match (&fields.final_stream_checksum, last) {
        (None, None) => {}
        (Some(final_checksum), Some((sequence, checksum))) if final_checksum != checksum => {
            report.problem(
                at,
                format!(
                    "finalStreamChecksum {final_checksum} is not attempt {attempt}'s last chunk \
                     (sequence {sequence}, checksum {checksum})"
                ),
            );
        }
        (Some(_), Some(_)) => {}
        (Some(final_checksum), None) => report.problem(
            at,
            format!("finalStreamChecksum is {final_checksum}, but attempt {attempt} has no chunks"),
        ),
        (None, Some((sequence, _))) => report.problem(
            at,
            format!("finalStreamChecksum is null, but attempt {attempt}'s stream runs to sequence {sequence}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use edgerunner_protocol::chunk::{ChunkIdentity, ChunkKind, ChunkWriter};
    use edgerunner_protocol::completion::{CompletionFields, Evidence, EvidenceId};
    use edgerunner_protocol::envelope::{
        sign, ArtifactId, ClaimId, CredentialGeneration, DispatchAttempt, EnvelopeRequirements,
        Environment, IdempotencyKey, JobId, JobSigning, MasterSigningSecret, Nonce, OrganizationId,
        RunnerId, Subject, SubjectKind,
    };
    use edgerunner_protocol::state::CompletionStatus;
    use edgerunner_protocol::time::Timestamp;
    use serde_json::Map;

    use super::*;

    fn signing() -> JobSigning {
        JobSigning::derive(
            &MasterSigningSecret::new("k".repeat(40)).expect("long enough"),
            &RunnerId::parse("run_1").expect("id"),
            CredentialGeneration(1),
        )
    }

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text).expect("timestamp")
    }

    /// A real bundle: one claim, `chunks` log chunks, an accepted `succeeded` completion.
    fn bundle(chunks: usize) -> Value {
        let input = json!({"question": "2+2", "weight": 1.5});
        let content = json!({"template": "x"});
        let envelope = JobEnvelope {
            organization_id: OrganizationId::parse("org_1").expect("id"),
            job_id: JobId::parse("job_1").expect("id"),
            claim_id: ClaimId::parse("clm_1").expect("id"),
            runner_id: RunnerId::parse("run_1").expect("id"),
            dispatch_attempt: DispatchAttempt::FIRST,
            idempotency_key: IdempotencyKey::parse("idem").expect("id"),
            subject: Subject {
                kind: SubjectKind::parse("prompt").expect("kind"),
                artifact_id: ArtifactId::parse("art_1").expect("id"),
                version_id: 3,
                content_hash: stable_json::hash(&content),
                environment: Environment::Staging,
            },
            input_hash: stable_json::hash(&input),
            requirements: EnvelopeRequirements::from_value(json!({"executionKind": "prompt"}))
                .expect("requirements"),
            issued_at: at("2026-11-30T01:00:00.000Z"),
            expires_at: at("2026-11-30T01:05:00.000Z"),
            nonce: Nonce::from_random([3; 32]),
        };
        let signing = signing();
        let signed = sign(&envelope, &signing.secret, &signing.key_id);
        let identity = ChunkIdentity {
            job_id: envelope.job_id.clone(),
            claim_id: envelope.claim_id.clone(),
            dispatch_attempt: envelope.dispatch_attempt,
        };
        let mut writer = ChunkWriter::new(identity);
        let stream: Vec<Value> = (0..chunks)
            .map(|n| {
                writer
                    .next(
                        ChunkKind::Log,
                        json!({"lines": [{"stream": "stdout", "line": format!("line {n}")}]}),
                        at(&format!("2026-11-30T01:00:0{}.123456Z", n % 10)),
                    )
                    .to_json()
            })
            .collect();
        let completion = Completion::seal(CompletionFields::for_claim(
            &envelope,
            CompletionStatus::Succeeded,
            Some(stable_json::hash(&json!({"exitCode": 0}))),
            writer.final_checksum().cloned(),
            Evidence {
                evaluation_run_id: EvidenceId::Text("evr_1".into()),
                test_result_ids: vec![],
                cost_record_ids: vec![],
                model_call_ids: vec![],
                trace_id: None,
                extra: Map::new(),
            },
            at("2026-11-30T01:00:09.000001Z"),
        ));
        json!({
            "bundleVersion": 1,
            "job": {
                "id": "job_1",
                "organizationId": "org_1",
                "state": "succeeded",
                "inputHash": envelope.input_hash.as_str(),
                "subject": {"contentHash": envelope.subject.content_hash.as_str(), "versionId": 3},
            },
            "claims": [{
                "id": "clm_1", "runnerId": "run_1", "dispatchAttempt": 1, "state": "released",
                "signedJob": signed.to_json(),
            }],
            "stream": stream,
            "completions": [
                {"id": "cmp_1", "decision": "accepted", "rationale": "ok", "completion": completion.to_json()},
                {"id": "cmp_2", "decision": "duplicate", "rationale": "replay", "completion": completion.to_json()},
            ],
        })
    }

    fn problems(bundle: &Value, secrets: &[JobSigningSecret]) -> Vec<String> {
        verify_bundle(bundle, secrets)
            .problems
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Recomputes a chunk's hashes after an edit, as a careful forger would.
    fn rehash(chunk: &mut Value) {
        let mut parsed = StreamChunk::from_json(chunk).expect("chunk");
        parsed.payload_hash = payload_hash(&parsed.payload);
        parsed.checksum = parsed.expected_checksum();
        *chunk = parsed.to_json();
    }

    #[test]
    fn a_real_bundle_verifies_with_and_without_the_signing_secret() {
        let bundle = bundle(4);
        let report = verify_bundle(&bundle, &[]);
        assert_eq!(report.problems, vec![], "{:?}", report.problems);
        assert_eq!(
            (report.claims, report.chunks, report.completions),
            (1, 4, 2)
        );
        assert_eq!(report.accepted_status.as_deref(), Some("succeeded"));
        assert_eq!(report.signatures_checked, 0);
        let report = verify_bundle(&bundle, &[signing().secret]);
        assert!(report.is_valid(), "{:?}", report.problems);
        assert_eq!(report.signatures_checked, 1);
    }

    #[test]
    fn an_altered_envelope_is_named_by_its_claim() {
        let mut bundle = bundle(2);
        bundle["claims"][0]["signedJob"]["envelope"]["requirements"]["executionKind"] =
            "agent".into();
        let found = problems(&bundle, &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("claim clm_1 (attempt 1): payloadHash ")
                && found[0].contains("does not match H(envelope)"),
            "{found:?}"
        );
    }

    #[test]
    fn a_re_hashed_envelope_fails_only_the_signature() {
        let mut bundle = bundle(2);
        let signed = &mut bundle["claims"][0]["signedJob"];
        signed["envelope"]["requirements"]["executionKind"] = "agent".into();
        signed["payloadHash"] = stable_json::hash(&signed["envelope"]).as_str().into();
        assert_eq!(problems(&bundle, &[]), Vec::<String>::new());
        assert_eq!(
            problems(&bundle, &[signing().secret]),
            vec![format!(
                "claim clm_1 (attempt 1): signature does not verify with key {}",
                signing().key_id
            )]
        );
        let other = JobSigningSecret::new("another".into()).expect("secret");
        assert!(problems(&bundle, &[other])[0].contains("no signing secret was given"));
    }

    #[test]
    fn a_changed_payload_is_named_by_attempt_and_sequence() {
        let mut bundle = bundle(4);
        bundle["stream"][1]["payload"]["lines"][0]["line"] = "forged".into();
        assert_eq!(
            problems(&bundle, &[])
                .iter()
                .map(|p| p.split(" = ").next().unwrap_or_default().to_owned())
                .collect::<Vec<_>>(),
            vec!["stream attempt 1 sequence 1: payloadHash does not match H(payload)"]
        );
    }

    #[test]
    fn a_forged_chunk_breaks_the_next_link() {
        let mut bundle = bundle(4);
        bundle["stream"][1]["payload"]["lines"][0]["line"] = "forged".into();
        rehash(&mut bundle["stream"][1]);
        assert_eq!(
            problems(&bundle, &[]),
            vec!["stream attempt 1 sequence 2: previousChecksum does not match sequence 1's checksum"]
        );
    }

    #[test]
    fn a_forged_last_chunk_no_longer_closes_the_completion() {
        let mut bundle = bundle(3);
        bundle["stream"][2]["payload"]["lines"][0]["line"] = "forged".into();
        rehash(&mut bundle["stream"][2]);
        let found = problems(&bundle, &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("completion 1 (cmp_1, accepted): finalStreamChecksum ")
                && found[0].contains("is not attempt 1's last chunk (sequence 2"),
            "{found:?}"
        );
    }

    #[test]
    fn missing_and_reordered_chunks_are_named() {
        let mut removed = bundle(4);
        removed["stream"].as_array_mut().expect("list").remove(1);
        assert_eq!(
            problems(&removed, &[]),
            vec!["stream attempt 1 sequence 2: sequence 1 is missing (the stream jumps from 0)"]
        );
        let mut swapped = bundle(4);
        swapped["stream"].as_array_mut().expect("list").swap(1, 2);
        let found = problems(&swapped, &[]);
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("stream attempt 1 sequence 2: sequence 1 is missing")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("stream attempt 1 sequence 1: comes after sequence 2")),
            "{found:?}"
        );
    }

    #[test]
    fn an_altered_completion_is_named_and_its_bindings_still_checked() {
        let mut bundle = bundle(2);
        bundle["completions"][0]["completion"]["status"] = "failed".into();
        let found = problems(&bundle, &[]);
        assert!(
            found[0].starts_with(
                "completion 1 (cmp_1, accepted): completionChecksum does not match its fields"
            ),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|p| p == "job: state is succeeded, but the accepted completion says failed"),
            "{found:?}"
        );
        // The duplicate repeats the checksum the accepted one was received with: no problem.
        assert_eq!(found.len(), 2, "{found:?}");
    }

    #[test]
    fn a_resealed_completion_with_another_input_hash_is_caught() {
        let mut bundle = bundle(1);
        let mut fields = bundle["completions"][0]["completion"]
            .as_object()
            .expect("object")
            .clone();
        fields.insert(
            "inputHash".into(),
            stable_json::hash(&json!("other")).as_str().into(),
        );
        fields.remove(CHECKSUM_FIELD);
        let checksum = edgerunner_protocol::completion::completion_checksum(&fields);
        fields.insert(CHECKSUM_FIELD.into(), checksum.as_str().into());
        bundle["completions"][0]["completion"] = Value::Object(fields);
        bundle["completions"]
            .as_array_mut()
            .expect("list")
            .truncate(1);
        let found = problems(&bundle, &[]);
        assert!(
            found
                .iter()
                .any(|p| p.contains("is not the signed envelope's inputHash")),
            "{found:?}"
        );
    }

    #[test]
    fn not_a_bundle_says_so() {
        assert_eq!(
            problems(&json!([]), &[]),
            vec!["bundle: is not a JSON object"]
        );
        let found = problems(&json!({"bundleVersion": 2}), &[]);
        assert!(
            found[0].starts_with("bundle: bundleVersion is 2"),
            "{found:?}"
        );
    }
}
