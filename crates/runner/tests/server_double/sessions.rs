//! Sessions: one bound to another runner or organization is never used; `runner enroll` proves
//! possession of its key; a replayed nonce is refused; sessions are exchanged before expiry and
//! once after a `401`.

use std::process::{Command, Stdio};

use edgerunner::client::RunnerClient;
use edgerunner::http::{ClientError, Http};
use edgerunner::retry::RetryPolicy;
use edgerunner::session::{BootstrapToken, Credentials};
use edgerunner_protocol::envelope::{OrganizationId, RunnerId};
use edgerunner_protocol::keypair::{verify_enrollment_signature, PublicKey};
use serde_json::{json, Value};

use crate::double::*;

#[tokio::test]
async fn a_session_for_another_runner_or_organization_is_refused_and_never_used() {
    use edgerunner::session::ExpectedBinding;

    let org = |id: &str| Some(OrganizationId::parse(id).expect("id"));
    let runner = |id: &str| Some(RunnerId::parse(id).expect("id"));
    // (the session the server issues, what the configuration says, what the refusal names)
    let cases = [
        (
            (RUNNER, "org_elsewhere"),
            ExpectedBinding {
                runner_id: None,
                organization_id: org(ORG),
            },
            "organization org_elsewhere",
        ),
        (
            ("run_elsewhere", ORG),
            ExpectedBinding {
                runner_id: None,
                organization_id: org(ORG),
            },
            "runner run_elsewhere",
        ),
        (
            ("run_elsewhere", ORG),
            ExpectedBinding {
                runner_id: runner(RUNNER),
                organization_id: None,
            },
            "runner run_elsewhere",
        ),
    ];
    for ((issued_runner, issued_org), expected, named) in cases {
        let issued = session_for(issued_runner, issued_org, "erc_foreign", 600);
        let double = Double::start(Box::new(move |request, _| match request.path.as_str() {
            "/api/remote-runners/session" => (200, Some(issued.clone())),
            _ => (200, Some(self_answer())),
        }));
        let client = client(&double).with_expected_binding(expected);
        let error = client.whoami().await.expect_err("refused");
        assert!(
            matches!(error, ClientError::IdentityMismatch(_)),
            "{named}: {error:?}"
        );
        assert!(error.to_string().contains(named), "{error}");
        assert!(error.to_string().contains("not used"), "{error}");
        assert!(
            double
                .received()
                .iter()
                .all(|r| r.bearer.as_deref() != Some("erc_foreign")),
            "{named}: the foreign session was used: {:?}",
            double.paths()
        );
        assert_eq!(double.count("/api/remote-runners/self"), 0);
    }

    // The same sessions are fine for a runner configured as what they name.
    let double = Double::start(Box::new(|request, _| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        _ => (200, Some(self_answer())),
    }));
    let client = client(&double).with_expected_binding(ExpectedBinding {
        runner_id: runner(RUNNER),
        organization_id: org(ORG),
    });
    client.whoami().await.expect("a matching session is used");
}

#[test]
fn runner_start_refuses_a_session_for_another_organization_and_claims_nothing() {
    let double = Double::with_claims(vec![assignment(&envelope(31), &signing("k"))]);
    let dir = scratch();
    let marker = dir.join("ran");
    let output = runner_start(&double, &dir, &format!("touch {}", marker.display()))
        .env("EVALGATE_ORGANIZATION_ID", "org_configured")
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "bound to organization org_double, but this runner is configured for org_configured"
        ),
        "{stderr}"
    );
    assert!(!marker.exists());
    assert_eq!(double.count("/api/remote-runners/claim"), 0);
    assert_eq!(double.count("/api/remote-runners/self"), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The double's `POST /api/remote-runners/enroll`, as the server will check it: the body's
/// `signature` must be the enrolling key's proof for the organization it names.
fn enroll_answer(request: &Received) -> (u16, Option<Value>) {
    let refuse = |message: &str| {
        (
            400,
            Some(json!({"error": {"code": "ENROLLMENT_PROOF_INVALID", "message": message}})),
        )
    };
    let Ok(body) = serde_json::from_str::<Value>(&request.body) else {
        return refuse("not JSON");
    };
    let (Some(key), Some(org), Some(signature)) = (
        body["publicKey"].as_str(),
        body["organizationId"].as_str(),
        body["signature"].as_str(),
    ) else {
        return refuse("publicKey, organizationId and signature are required");
    };
    let Ok(key) = PublicKey::from_base64(key) else {
        return refuse("not a public key");
    };
    match verify_enrollment_signature(&key, org, signature) {
        Ok(possession) => (
            201,
            Some(json!({"runner": {
                "id": "run_enrolled", "state": "pending_approval",
                "fingerprint": possession.fingerprint().as_str(),
            }})),
        ),
        Err(error) => refuse(&error.to_string()),
    }
}

/// A double that answers only `POST /api/remote-runners/enroll` ([`enroll_answer`]).
fn enroll_double() -> Double {
    Double::start(Box::new(|request, _| match request.path.as_str() {
        "/api/remote-runners/enroll" => enroll_answer(request),
        _ => (404, None),
    }))
}

/// `edgerunner runner enroll` against the double, its config at `config`, and `extra` flags.
fn enroll_with(double: &Double, config: &std::path::Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_edgerunner"))
        .args([
            "runner",
            "enroll",
            "--server",
            &double.url,
            "--organization",
            ORG,
        ])
        .args(["--execution-kind", "prompt", "--runtime", "python3.12"])
        .args(extra)
        .arg("--config")
        .arg(config)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .output()
        .expect("edgerunner runs")
}

#[test]
fn runner_enroll_proves_possession_of_the_key_it_enrolls() {
    let double = enroll_double();
    let dir = scratch();
    let config = dir.join("runner.json");
    let output = enroll_with(&double, &config, &["--json"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let printed: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(printed["runner"]["id"], "run_enrolled");

    let sent: Vec<Value> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/enroll")
        .map(|r| serde_json::from_str(&r.body).expect("JSON"))
        .collect();
    assert_eq!(sent.len(), 1);
    let key = edgerunner::keyfile::load(&dir.join("runner.key")).expect("the key it made");
    let public = key.public_key();
    assert_eq!(sent[0]["publicKey"], public.to_base64());
    let signature = sent[0]["signature"].as_str().expect("a signature");
    let possession =
        verify_enrollment_signature(&public, ORG, signature).expect("the proof verifies");
    assert_eq!(possession.fingerprint(), &public.fingerprint());
    assert_eq!(printed["fingerprint"], public.fingerprint().as_str());
    assert!(
        verify_enrollment_signature(&public, "org_elsewhere", signature).is_err(),
        "the proof is for this organization only"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_replayed_nonce_is_refused_by_the_sdk() {
    let genuine = assignment(&envelope(9), &signing("k"));
    let double = Double::with_claims(vec![genuine.clone(), genuine]);
    let client = RunnerClient::new(
        Http::new(&double.url).expect("url"),
        Credentials::Bootstrap {
            runner_id: RunnerId::parse(RUNNER).expect("id"),
            token: BootstrapToken::new("erb_double").expect("token"),
        },
    )
    .with_retry(RetryPolicy::NONE);
    let first = client.claim().await.expect("the first is genuine");
    assert_eq!(
        first.map(|a| a.job_id().as_str().to_owned()),
        Some("job_double".into())
    );
    match client.claim().await {
        Err(ClientError::Refused(error)) => assert_eq!(error.code(), "NONCE_REPLAYED"),
        other => panic!("expected a refused replay, got {other:?}"),
    }
    assert!(matches!(client.claim().await, Ok(None)));
}

#[tokio::test]
async fn a_session_is_exchanged_again_thirty_seconds_before_it_expires() {
    // The first session expires in 20 s (inside the 30 s margin), the second in 10 minutes.
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" if nth == 0 => (200, Some(session_answer("erc_short", 20))),
        "/api/remote-runners/session" => (200, Some(session_answer("erc_long", 600))),
        _ => (200, Some(self_answer())),
    }));
    let client = client(&double);
    for _ in 0..3 {
        client.whoami().await.expect("an answer");
    }
    assert_eq!(double.count("/api/remote-runners/session"), 2);
    let bearers: Vec<Option<String>> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/self")
        .map(|r| r.bearer)
        .collect();
    assert_eq!(
        bearers,
        vec![
            Some("erc_short".to_owned()),
            Some("erc_long".to_owned()),
            Some("erc_long".to_owned())
        ]
    );
}

#[tokio::test]
async fn a_401_exchanges_a_new_session_and_repeats_the_request_once() {
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (
            200,
            Some(session_answer(
                if nth == 0 { "erc_revoked" } else { "erc_fresh" },
                600,
            )),
        ),
        _ if request.bearer.as_deref() == Some("erc_revoked") => (
            401,
            Some(
                json!({"error": {"code": "AUTHENTICATION_FAILED", "message": "generation moved"}}),
            ),
        ),
        _ => (200, Some(self_answer())),
    }));
    let client = client(&double);
    client.whoami().await.expect("answered after a new session");
    assert_eq!(
        double.paths(),
        vec![
            "/api/remote-runners/session",
            "/api/remote-runners/self",
            "/api/remote-runners/session",
            "/api/remote-runners/self"
        ]
    );
}

#[test]
fn runner_enroll_tells_a_person_what_comes_next() {
    let double = enroll_double();
    let dir = scratch();
    let config = dir.join("runner.json");
    let output = enroll_with(&double, &config, &[]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let key = edgerunner::keyfile::load(&dir.join("runner.key")).expect("the key it made");
    let fingerprint = key.public_key().fingerprint();
    let fingerprint = fingerprint.as_str();
    let expected = [
        "enrolled runner run_enrolled (pending_approval)".to_owned(),
        format!("fingerprint: {fingerprint}"),
        format!(
            "key:         {} (made now)",
            dir.join("runner.key").display()
        ),
        format!("config:      {}", config.display()),
        String::new(),
        "An admin approves it after comparing the fingerprint above with the server's:".to_owned(),
        format!(
            "  edgerunner admin runners approve run_enrolled --fingerprint {fingerprint} \
             --reason \"fingerprint checked\""
        ),
        "Then start it:".to_owned(),
        format!(
            "  edgerunner runner start --config {} --exec '<command>'",
            config.display()
        ),
    ];
    assert_eq!(said.lines().collect::<Vec<_>>(), expected, "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}
