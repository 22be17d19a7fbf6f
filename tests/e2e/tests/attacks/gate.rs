//! The address gate and `/challenge`: a host cannot escape the per-network limits by rotating
//! its IPv6 addresses, `/challenge` tells a stranger nothing about a fingerprint, and a runner's
//! live challenges are bounded.

use edgerunner_e2e::*;
use serde_json::{json, Value};

/// The deployment's `CHALLENGES_PER_MINUTE` (wrangler.toml; the e2e server keeps the default).
const CHALLENGES_PER_MINUTE: usize = 60;
/// `MAX_LIVE_CHALLENGES` in src/store/runners.rs (docs/API.md "Limits").
const MAX_LIVE_CHALLENGES: usize = 5;

/// A /64 of the documentation range 2001:db8::/32 no other test uses: its first four groups.
fn fresh_ipv6_64() -> String {
    let b = random_bytes();
    format!(
        "2001:db8:{:x}:{:x}",
        u16::from_be_bytes([b[0], b[1]]),
        u16::from_be_bytes([b[2], b[3]])
    )
}

/// An address in `prefix` (a /64's four groups) whose interface id is `n`.
fn address_in(prefix: &str, n: u64) -> String {
    let g = |shift: u32| (n >> shift) & 0xffff;
    format!("{prefix}:{:x}:{:x}:{:x}:{:x}", g(48), g(32), g(16), g(0))
}

async fn challenge_from(address: &str, fingerprint: &str) -> Reply {
    send(
        "POST /api/remote-runners/challenge".to_owned(),
        client()
            .post(url("/api/remote-runners/challenge"))
            .header("CF-Connecting-IP", address)
            .json(&json!({ "fingerprint": fingerprint })),
    )
    .await
}

#[tokio::test]
async fn an_ipv6_host_rotating_addresses_inside_its_64_is_limited_as_one_network() {
    let stranger = KeyPairRunner::generate();
    let network = fresh_ipv6_64();
    let mut answered = 0;
    let mut refused = None;
    // Every request from another address of the same /64: 300 would all pass if the gate
    // counted addresses.
    for n in 0..300_u64 {
        let address = address_in(&network, 0x1000_0000_0000 + n * 7919);
        let reply = challenge_from(&address, &stranger.fingerprint()).await;
        if reply.status == 429 {
            refused = Some(reply);
            break;
        }
        reply.expect(200);
        answered += 1;
    }
    assert_eq!(
        answered, CHALLENGES_PER_MINUTE,
        "the /64 gets one network's allowance"
    );
    let refused = refused.expect("the /64 is refused once over the limit");
    refused.expect_error(429, "RATE_LIMITED");
    let retry_after: u64 = refused
        .header("retry-after")
        .parse()
        .unwrap_or_else(|e| panic!("Retry-After is seconds ({e}): {refused:?}"));
    assert!((1..=60).contains(&retry_after), "{refused:?}");

    // Control: a neighbouring /64 (another host) is not limited, nor is an IPv4 client.
    challenge_from(&address_in(&fresh_ipv6_64(), 1), &stranger.fingerprint())
        .await
        .expect(200);
    challenge_from(&fresh_address(), &stranger.fingerprint())
        .await
        .expect(200);
}

#[tokio::test]
async fn challenge_answers_alike_for_unknown_pending_revoked_and_live_fingerprints() {
    let org = bootstrap_org("attacks-challenge-uniform");
    let unknown = KeyPairRunner::generate();
    let pending = KeyPairRunner::generate();
    pending.enroll(&org).await;
    let revoked = KeyPairRunner::generate();
    let revoked_id = revoked.enroll_approved(&org).await;
    set_status(&org.admin_key, &revoked_id, "revoked", "attack test").await;
    let live = KeyPairRunner::generate();
    live.enroll_approved(&org).await;

    let shape = |reply: &Reply| -> Vec<String> {
        let body = reply.expect(200);
        let mut keys: Vec<String> = body
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    };
    for (what, runner) in [
        ("unknown", &unknown),
        ("pending", &pending),
        ("revoked", &revoked),
    ] {
        let reply = runner.challenge().await;
        assert_eq!(
            shape(&reply),
            ["challenge", "expiresAt"],
            "{what}: {reply:?}"
        );
        let challenge = reply.json()["challenge"].as_str().unwrap_or("").to_owned();
        // Nothing is stored for it, so it gives no session.
        let rows = d1(&format!(
            "SELECT id FROM runner_challenges WHERE fingerprint = {}",
            sql_text(&runner.fingerprint())
        ));
        assert!(d1_rows(&rows).is_empty(), "{what}: {rows}");
        runner
            .session_with(&challenge, &runner.sign(&challenge))
            .await
            .expect_error(401, "AUTHENTICATION_FAILED");
    }
    // Control: the live runner gets the same shape, and its challenge works.
    let reply = live.challenge().await;
    assert_eq!(shape(&reply), ["challenge", "expiresAt"], "{reply:?}");
    let challenge = reply.json()["challenge"].as_str().unwrap_or("").to_owned();
    live.session_with(&challenge, &live.sign(&challenge))
        .await
        .expect(200);
}

fn live_challenges(runner_id: &str) -> usize {
    let answer = d1(&format!(
        "SELECT count(*) AS n FROM runner_challenges WHERE runner_id = {} AND consumed_at IS NULL",
        sql_text(runner_id)
    ));
    let rows = d1_rows(&answer);
    rows.first()
        .and_then(|row| row["n"].as_u64())
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or_else(|| panic!("no count in {answer}"))
}

#[tokio::test]
async fn a_runner_holds_at_most_five_live_challenges_and_the_newest_always_works() {
    let org = bootstrap_org("attacks-challenge-cap");
    let runner = KeyPairRunner::generate();
    let runner_id = runner.enroll_approved(&org).await;
    let mut issued: Vec<String> = Vec::new();
    for _ in 0..MAX_LIVE_CHALLENGES + 3 {
        issued.push(runner.fresh_challenge().await);
    }
    assert_eq!(
        live_challenges(&runner_id),
        MAX_LIVE_CHALLENGES,
        "after {} challenges",
        issued.len()
    );
    let session = |challenge: &str| {
        let challenge = challenge.to_owned();
        let runner = &runner;
        async move {
            runner
                .session_with(&challenge, &runner.sign(&challenge))
                .await
        }
    };
    // The oldest were replaced...
    session(&issued[0])
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    // ...the newest works, and so does the oldest one still live.
    let newest = issued.last().cloned().unwrap_or_default();
    session(&newest).await.expect(200);
    let oldest_live = issued[issued.len() - MAX_LIVE_CHALLENGES].clone();
    let granted: Value = session(&oldest_live).await.expect(200);
    assert!(granted["token"].is_string(), "{granted}");
}

#[tokio::test]
async fn session_requests_refused_as_malformed_count_against_the_networks_failure_budget() {
    let org = bootstrap_org("attack-session-budget");
    let (runner_id, token) = register_simple_runner(&org, "budget").await;
    let address = fresh_address();
    let from = |request: reqwest::RequestBuilder| {
        send(
            "POST /api/remote-runners/session".to_owned(),
            request.header("CF-Connecting-IP", address.clone()),
        )
    };
    let session = || client().post(url("/api/remote-runners/session"));
    // FAILED_SESSIONS_PER_MINUTE (20) refusals, none of them a wrong guess: JSON that does not
    // parse (400), a field the route does not know (422), a body past its 16 KiB (413).
    for n in 0..20 {
        match n % 3 {
            0 => from(
                session()
                    .header("Content-Type", "application/json")
                    .body("{\"runnerId\":"),
            )
            .await
            .expect_error(400, "INVALID_JSON"),
            1 => from(
                session()
                    .json(&json!({ "runnerId": runner_id, "bootstrapToken": "guess", "extra": 1 })),
            )
            .await
            .expect_error(422, "UNKNOWN_FIELD"),
            _ => {
                from(session().json(
                    &json!({ "runnerId": runner_id, "bootstrapToken": "x".repeat(17 * 1024) }),
                ))
                .await
                .expect_error(413, "BODY_TOO_LARGE")
            }
        };
    }
    // The network has spent its budget: it is turned away, even with the right token.
    let reply =
        from(session().json(&json!({ "runnerId": runner_id, "bootstrapToken": token }))).await;
    reply.expect_error(429, "RATE_LIMITED");
    // The runner itself, from its own address, is not.
    exchange(&runner_id, &token).await;
}
