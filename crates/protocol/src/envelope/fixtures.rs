//! Fixtures the envelope tests share: ids, a master secret, an envelope, a session and a
//! signed claim answer made from them.

use std::collections::HashSet;

use serde_json::{json, Value};

use super::signed_job::signature_hex;
use super::*;
use crate::stable_json;
use crate::time::{Timestamp, UnixMillis};

pub(super) fn id<T>(parse: fn(&str) -> Result<T, InvalidId>, text: &str) -> T {
    parse(text).expect("test id is valid")
}

pub(super) fn master() -> MasterSigningSecret {
    MasterSigningSecret::new("m".repeat(32)).expect("long enough")
}

pub(super) fn at(text: &str) -> Timestamp {
    Timestamp::parse(text).expect("test timestamp")
}

pub(super) fn envelope() -> JobEnvelope {
    JobEnvelope {
        organization_id: id(OrganizationId::parse, "org_1"),
        job_id: id(JobId::parse, "job_1"),
        claim_id: id(ClaimId::parse, "claim_1"),
        runner_id: id(RunnerId::parse, "runner_1"),
        dispatch_attempt: DispatchAttempt::FIRST,
        idempotency_key: id(IdempotencyKey::parse, "idem-1"),
        subject: Subject {
            kind: id(SubjectKind::parse, "scorer"),
            artifact_id: id(ArtifactId::parse, "art_1"),
            version_id: 7,
            content_hash: stable_json::sha256_hex(b"content"),
            environment: Environment::Prod,
        },
        input_hash: stable_json::hash(&json!({"question": "2+2"})),
        requirements: EnvelopeRequirements::from_value(json!({
            "executionKind": "scorer",
            "runtime": "python3.12",
            "limits": {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1048576},
            "network": {"mode": "deny_all"},
            "streaming": true,
            "cancellation": true,
        }))
        .expect("integer-only requirements"),
        issued_at: at("2026-11-30T01:11:32.123Z"),
        expires_at: at("2026-11-30T01:16:32.123Z"),
        nonce: Nonce::from_random([7; 32]),
    }
}

pub(super) fn session() -> SessionBinding {
    SessionBinding {
        organization_id: id(OrganizationId::parse, "org_1"),
        signing: JobSigning::derive(
            &master(),
            &id(RunnerId::parse, "runner_1"),
            CredentialGeneration(1),
        ),
        served_targets: Vec::new(),
    }
}

pub(super) fn assignment(signed: &SignedJob) -> Value {
    json!({
        "claim": {
            "id": signed.envelope.claim_id.as_str(),
            "jobId": signed.envelope.job_id.as_str(),
            "dispatchAttempt": signed.envelope.dispatch_attempt.get(),
            "leaseExpiresAt": "2026-11-30T01:12:32.123Z",
        },
        "signedJob": signed.to_json(),
    })
}

pub(super) fn now() -> UnixMillis {
    UnixMillis::parse_rfc3339("2026-11-30T01:11:33Z").expect("test instant")
}

pub(super) fn signed_assignment() -> (SessionBinding, Value) {
    let session = session();
    let signed = sign(
        &envelope(),
        &session.signing.secret,
        &session.signing.key_id,
    );
    (session, assignment(&signed))
}

pub(super) fn verify(
    session: &SessionBinding,
    value: &Value,
) -> Result<VerifiedAssignment, AssignmentError> {
    verify_assignment(value, session, now(), &mut HashSet::new())
}

/// Re-signs the (edited) envelope of `value` so that only the edit is wrong.
pub(super) fn resign(session: &SessionBinding, value: &mut Value) {
    let envelope = value["signedJob"]["envelope"].clone();
    let payload_hash = stable_json::hash(&envelope);
    value["signedJob"]["signature"] = signature_hex(&session.signing.secret, &payload_hash).into();
    value["signedJob"]["payloadHash"] = payload_hash.into();
}
