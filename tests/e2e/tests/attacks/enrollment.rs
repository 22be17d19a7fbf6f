//! Enrollment squatting: an organization id is in every runner's configuration, so anyone can
//! send `POST /api/remote-runners/enroll` for it. A stranger must not be able to fill the
//! organization's pending enrollments from one network, and an organization that asks for
//! enrollment tokens (or closes enrollment) must get exactly that.

use std::sync::atomic::{AtomicU64, Ordering};

use edgerunner_e2e::*;
use reqwest::Method;
use serde_json::{json, Value};

const POLICY: &str = "/api/developer/enrollment-policy";
const TOKENS: &str = "/api/developer/enrollment-tokens";

/// An IPv6 /64 no other test uses: `(prefix, address i inside it)`.
fn fresh_network() -> (String, impl Fn(u32) -> String) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let prefix = format!(
        "2001:db8:{:x}:{:x}",
        std::process::id() % 0xffff,
        n % 0xffff
    );
    let inside = prefix.clone();
    (prefix, move |i: u32| {
        format!("{inside}:{:x}:{:x}::1", i >> 16, i & 0xffff)
    })
}

async fn set_policy(org: &Org, policy: &str) -> Value {
    call(
        Method::PUT,
        POLICY,
        Some(&org.admin_key),
        Some(&json!({ "policy": policy })),
    )
    .await
    .expect(200)
}

/// A new token of `org` (the whole answer, with its secret).
async fn new_token(org: &Org, body: &Value) -> Value {
    post(TOKENS, Some(&org.admin_key), body).await.expect(201)
}

fn secret_of(created: &Value) -> String {
    created["enrollmentToken"]
        .as_str()
        .unwrap_or_else(|| panic!("no enrollmentToken in {created}"))
        .to_owned()
}

async fn listed(org: &Org) -> Vec<Value> {
    get(TOKENS, &org.admin_key).await.expect(200)["enrollmentTokens"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn listed_token(org: &Org, id: &str) -> Value {
    listed(org)
        .await
        .into_iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("token {id} not listed"))
}

const DAY: i64 = 86_400_000;

/// A token of `org` written as an operator would (its times never move once it is made, so a
/// test that needs one in the past makes it there): `(id, secret)`.
fn insert_token(org: &Org, created_at: i64, expires_at: i64, uses: i64) -> (String, String) {
    let secret = format!("ere_{}", sha256_hex(&random_bytes()));
    let id = format!("ent_{}", &sha256_hex(&random_bytes())[..24]);
    let last_used = if uses > 0 {
        created_at.to_string()
    } else {
        "NULL".to_owned()
    };
    d1(&format!(
        "INSERT INTO enrollment_tokens (id, organization_id, name, token_prefix, token_hash, max_uses, \
           uses, created_at, created_by, expires_at, last_used_at) \
         VALUES ({}, {}, 'old', {}, {}, 5, {uses}, {created_at}, 'api_key:e2e', {expires_at}, {last_used})",
        sql_text(&id),
        sql_text(&org.id),
        sql_text(&secret[..12]),
        sql_text(&sha256_hex(secret.as_bytes())),
    ));
    (id, secret)
}

/// An enrollment of a fresh key into `org_id`, from a fresh address, presenting `token`.
async fn enroll_with(org_id: &str, token: Option<&str>) -> Reply {
    let runner = KeyPairRunner::generate();
    let mut body = runner.enrollment(org_id);
    if let Some(token) = token {
        body["enrollmentToken"] = json!(token);
    }
    runner.enroll_from(&fresh_address(), &body).await
}

#[tokio::test]
async fn strangers_from_one_network_fill_only_that_networks_share_of_pending_enrollments() {
    let org = bootstrap_org("attack-squat-network");
    let (_, squatter) = fresh_network();
    // The default MAX_PENDING_ENROLLMENTS_PER_NETWORK: five, each from its own address in the
    // /64 (one IPv6 host can rotate through all of them).
    let mut first = None;
    for i in 0..5 {
        let runner = KeyPairRunner::generate();
        let reply = runner
            .enroll_from(&squatter(i), &runner.enrollment(&org.id))
            .await;
        let id = id_of(&reply.expect(201)["runner"]);
        first.get_or_insert((id, runner));
    }
    let late = KeyPairRunner::generate();
    late.enroll_from(&squatter(5), &late.enrollment(&org.id))
        .await
        .expect_error(429, "PENDING_ENROLLMENTS_FROM_NETWORK_AT_CAP");
    // An IPv4 squatter is one network per address.
    let v4 = fresh_address();
    for _ in 0..5 {
        let runner = KeyPairRunner::generate();
        runner
            .enroll_from(&v4, &runner.enrollment(&org.id))
            .await
            .expect(201);
    }
    late.enroll_from(&v4, &late.enrollment(&org.id))
        .await
        .expect_error(429, "PENDING_ENROLLMENTS_FROM_NETWORK_AT_CAP");

    // Controls: the real runner on another network still enrolls into the same organization,
    // and the squatted network still enrolls into another one.
    let (_, office) = fresh_network();
    let real = KeyPairRunner::generate();
    real.enroll_from(&office(0), &real.enrollment(&org.id))
        .await
        .expect(201);
    let other = bootstrap_org("attack-squat-network-other");
    late.enroll_from(&squatter(6), &late.enrollment(&other.id))
        .await
        .expect(201);
    // An admin's token admits past the network's share (its uses bound it instead).
    let token = secret_of(&new_token(&org, &json!({ "maxUses": 1 })).await);
    let admitted = KeyPairRunner::generate();
    let mut body = admitted.enrollment(&org.id);
    body["enrollmentToken"] = json!(token);
    admitted.enroll_from(&squatter(7), &body).await.expect(201);
    // Approving one of the network's pending runners frees its slot.
    let (id, runner) = first.expect("five enrolled");
    approve(&org.admin_key, &id, &runner.fingerprint(), "squatting test").await;
    let next = KeyPairRunner::generate();
    next.enroll_from(&squatter(8), &next.enrollment(&org.id))
        .await
        .expect(201);
    // Where it came from is on the enrollment's event.
    let events = runner_events(&org.admin_key, &id).await.expect(200);
    assert!(events.to_string().contains("::/64"), "{events}");
}

#[tokio::test]
async fn the_token_policy_refuses_every_enrollment_without_a_live_token_of_the_organization() {
    let org = bootstrap_org("attack-token-policy");
    // The default is open: no token needed (what existing deployments and the SDK rely on).
    assert_eq!(
        get(POLICY, &org.admin_key).await.expect(200),
        json!({ "organizationId": org.id, "policy": "open" })
    );
    enroll_with(&org.id, None).await.expect(201);
    let set = set_policy(&org, "token").await;
    assert_eq!(set["policy"], "token");
    assert_eq!(
        get(POLICY, &org.admin_key).await.expect(200)["policy"],
        "token"
    );

    enroll_with(&org.id, None)
        .await
        .expect_error(403, "ENROLLMENT_TOKEN_REQUIRED");
    // A wrong token, of the right shape or not: one answer.
    let guessed = format!("ere_{}", sha256_hex(&random_bytes()));
    for wrong in [guessed.as_str(), "ere_", "hello"] {
        enroll_with(&org.id, Some(wrong))
            .await
            .expect_error(403, "ENROLLMENT_TOKEN_INVALID");
    }
    let reply = {
        let runner = KeyPairRunner::generate();
        let mut body = runner.enrollment(&org.id);
        body["enrollmentToken"] = json!(42);
        runner.enroll_from(&fresh_address(), &body).await
    };
    reply.expect_error(403, "ENROLLMENT_TOKEN_INVALID");

    // A good token admits as many enrollments as its uses, each counted, then no more.
    let created = new_token(&org, &json!({ "name": "rack 4", "maxUses": 2 })).await;
    let token = secret_of(&created);
    let id = created["id"].as_str().expect("id").to_owned();
    assert_eq!(
        (created["uses"].clone(), created["maxUses"].clone()),
        (json!(0), json!(2))
    );
    let enrolled = enroll_with(&org.id, Some(&token)).await.expect(201);
    assert_eq!(
        enrolled["runner"]["state"], "pending_approval",
        "{enrolled}"
    );
    let seen = listed_token(&org, &id).await;
    assert_eq!(
        (seen["uses"].clone(), seen["state"].clone()),
        (json!(1), json!("live")),
        "{seen}"
    );
    assert!(seen["lastUsedAt"].is_string(), "{seen}");
    enroll_with(&org.id, Some(&token)).await.expect(201);
    enroll_with(&org.id, Some(&token))
        .await
        .expect_error(403, "ENROLLMENT_TOKEN_INVALID");
    let seen = listed_token(&org, &id).await;
    assert_eq!(
        (seen["uses"].clone(), seen["state"].clone()),
        (json!(2), json!("used_up")),
        "{seen}"
    );

    // Revoked: refused at once, with the same answer; revoking twice is 404.
    let revoked = new_token(&org, &json!({ "maxUses": 5 })).await;
    let revoked_id = revoked["id"].as_str().expect("id");
    let answer = delete(&format!("{TOKENS}/{revoked_id}"), &org.admin_key)
        .await
        .expect(200);
    assert_eq!(answer["id"], revoked_id);
    enroll_with(&org.id, Some(&secret_of(&revoked)))
        .await
        .expect_error(403, "ENROLLMENT_TOKEN_INVALID");
    delete(&format!("{TOKENS}/{revoked_id}"), &org.admin_key)
        .await
        .expect_error(404, "NOT_FOUND");
    assert_eq!(listed_token(&org, revoked_id).await["state"], "revoked");

    // Expired: a token whose lifetime ended yesterday (written as an operator would, since a
    // token's expiry never moves once it is made).
    let now = now_ms();
    let (expired_id, expired) = insert_token(&org, now - 2 * DAY, now - DAY, 0);
    assert_eq!(listed_token(&org, &expired_id).await["state"], "expired");
    enroll_with(&org.id, Some(&expired))
        .await
        .expect_error(403, "ENROLLMENT_TOKEN_INVALID");

    // Back to open: token-less enrollments are accepted again.
    set_policy(&org, "open").await;
    enroll_with(&org.id, None).await.expect(201);
    // The changes are on the organization's audit trail.
    let changes = d1(&format!(
        "SELECT type FROM job_events WHERE organization_id = {} AND type LIKE 'enrollment.%'",
        sql_text(&org.id)
    ));
    let kinds: Vec<Value> = d1_rows(&changes)
        .iter()
        .map(|r| r["type"].clone())
        .collect();
    for kind in [
        "enrollment.policy_set",
        "enrollment.token_created",
        "enrollment.token_revoked",
    ] {
        assert!(
            kinds.contains(&json!(kind)),
            "{kind} missing from {kinds:?}"
        );
    }
}

#[tokio::test]
async fn two_enrollments_racing_for_a_tokens_last_use_get_one_runner() {
    let org = bootstrap_org("attack-token-race");
    set_policy(&org, "token").await;
    let token = secret_of(&new_token(&org, &json!({ "maxUses": 1 })).await);
    let (a, b) = tokio::join!(
        enroll_with(&org.id, Some(&token)),
        enroll_with(&org.id, Some(&token))
    );
    let mut statuses = [a.status, b.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 403], "{a:?}\n{b:?}");
    for reply in [a, b] {
        if reply.status == 403 {
            reply.expect_error(403, "ENROLLMENT_TOKEN_INVALID");
        }
    }
    let listed = listed(&org).await;
    assert_eq!(listed[0]["uses"], 1, "{listed:?}");
}

#[tokio::test]
async fn a_closed_organization_refuses_every_enrollment_and_reopening_lets_them_in() {
    let org = bootstrap_org("attack-closed");
    let token = secret_of(&new_token(&org, &json!({ "maxUses": 3 })).await);
    assert_eq!(set_policy(&org, "closed").await["policy"], "closed");
    // Answered as an organization that asks for a token, or does not exist, is (issue 41).
    enroll_with(&org.id, None)
        .await
        .expect_error(403, "ENROLLMENT_TOKEN_REQUIRED");
    // Not even with a live token, which is not spent.
    enroll_with(&org.id, Some(&token))
        .await
        .expect_error(403, "ENROLLMENT_TOKEN_INVALID");
    assert_eq!(listed(&org).await[0]["uses"], 0);
    // Another organization is not closed by it.
    let other = bootstrap_org("attack-closed-other");
    enroll_with(&other.id, None).await.expect(201);

    set_policy(&org, "open").await;
    enroll_with(&org.id, None).await.expect(201);
    set_policy(&org, "token").await;
    enroll_with(&org.id, Some(&token)).await.expect(201);
}

#[tokio::test]
async fn an_enrollment_token_is_shown_once_and_never_again() {
    let org = bootstrap_org("attack-token-once");
    let created = new_token(
        &org,
        &json!({ "name": "ci fleet", "expiresInSeconds": 3600 }),
    )
    .await;
    let token = secret_of(&created);
    assert!(
        token.starts_with("ere_") && is_hex64(&token[4..]),
        "{token}"
    );
    assert_eq!(created["prefix"], &token[..12]);
    assert_eq!(created["state"], "live");
    assert_eq!(
        parse_time(created["expiresAt"].as_str().expect("expiresAt"))
            - parse_time(created["createdAt"].as_str().expect("createdAt")),
        3_600_000
    );
    let list = get(TOKENS, &org.admin_key).await;
    assert!(!list.text.contains(&token[12..]), "{list:?}");
    let one = listed_token(&org, created["id"].as_str().expect("id")).await;
    assert!(one.get("enrollmentToken").is_none(), "{one}");
    assert_eq!(one["name"], "ci fleet");
    // Nor in the audit trail, nor stored: only its hash is.
    let stored = d1(&format!(
        "SELECT count(*) AS n FROM enrollment_tokens WHERE token_hash = {}",
        sql_text(&sha256_hex(token.as_bytes()))
    ));
    assert_eq!(d1_rows(&stored)[0]["n"], 1, "{stored}");
    let anywhere = d1(&format!(
        "SELECT (SELECT count(*) FROM job_events WHERE instr(detail, {tail}) > 0) + \
                (SELECT count(*) FROM enrollment_tokens \
                  WHERE instr(name, {tail}) > 0 OR instr(token_hash, {tail}) > 0) AS n",
        tail = sql_text(&token[12..])
    ));
    assert_eq!(d1_rows(&anywhere)[0]["n"], 0, "{anywhere}");
}

#[tokio::test]
async fn an_organizations_token_enrolls_into_it_alone_and_only_its_admin_revokes_it() {
    let a = bootstrap_org("attack-token-org-a");
    let b = bootstrap_org("attack-token-org-b");
    set_policy(&a, "token").await;
    set_policy(&b, "token").await;
    let created = new_token(&a, &json!({ "maxUses": 5 })).await;
    let token = secret_of(&created);
    let id = created["id"].as_str().expect("id");
    // A's token does not open B, and the refusal spends nothing.
    enroll_with(&b.id, Some(&token))
        .await
        .expect_error(403, "ENROLLMENT_TOKEN_INVALID");
    assert_eq!(listed_token(&a, id).await["uses"], 0);
    // B's admin neither sees nor revokes it.
    assert!(listed(&b).await.iter().all(|t| t["id"] != id));
    delete(&format!("{TOKENS}/{id}"), &b.admin_key)
        .await
        .expect_error(404, "NOT_FOUND");
    assert_eq!(listed_token(&a, id).await["state"], "live");
    // B's policy is B's: A opening up does not open B.
    set_policy(&a, "open").await;
    assert_eq!(
        get(POLICY, &b.admin_key).await.expect(200)["policy"],
        "token"
    );
    enroll_with(&b.id, None)
        .await
        .expect_error(403, "ENROLLMENT_TOKEN_REQUIRED");
    // The control: into A, it admits.
    enroll_with(&a.id, Some(&token)).await.expect(201);
    assert_eq!(listed_token(&a, id).await["uses"], 1);
}

#[tokio::test]
async fn only_an_admin_key_sets_the_policy_or_handles_tokens_and_every_bound_is_refused() {
    let org = bootstrap_org("attack-token-bounds");
    let member = new_api_key(
        &org.admin_key,
        &json!({ "name": "member", "scopes": ["runs:read", "runs:write", "admin:org"], "role": "member" }),
    )
    .await;
    let member_key = member["apiKey"].as_str().expect("apiKey");
    for (method, path, body) in [
        (Method::GET, POLICY, None),
        (Method::PUT, POLICY, Some(json!({ "policy": "open" }))),
        (Method::POST, TOKENS, Some(json!({}))),
        (Method::GET, TOKENS, None),
        (
            Method::DELETE,
            "/api/developer/enrollment-tokens/ent_x",
            None,
        ),
    ] {
        call(method.clone(), path, Some(member_key), body.as_ref())
            .await
            .expect_error(403, "FORBIDDEN");
        call(method, path, None, body.as_ref())
            .await
            .expect_error(401, "AUTHENTICATION_FAILED");
    }
    assert_eq!(
        get(POLICY, &org.admin_key).await.expect(200)["policy"],
        "open"
    );

    let put = |body: Value| {
        let key = org.admin_key.clone();
        async move { call(Method::PUT, POLICY, Some(&key), Some(&body)).await }
    };
    put(json!({ "policy": "Token" }))
        .await
        .expect_error(422, "INVALID_ENROLLMENT_POLICY");
    put(json!({})).await.expect_error(422, "MISSING_FIELD");
    put(json!({ "policy": "open", "extra": 1 }))
        .await
        .expect_error(422, "UNKNOWN_FIELD");
    for (body, code) in [
        (json!({ "maxUses": 0 }), "INVALID_MAX_USES"),
        (json!({ "maxUses": 1001 }), "INVALID_MAX_USES"),
        (json!({ "maxUses": 1.5 }), "INVALID_MAX_USES"),
        (json!({ "expiresInSeconds": 59 }), "INVALID_EXPIRES_IN"),
        (
            json!({ "expiresInSeconds": 2_592_001 }),
            "INVALID_EXPIRES_IN",
        ),
        (json!({ "name": "" }), "INVALID_FIELD"),
        (json!({ "name": "n".repeat(201) }), "INVALID_FIELD"),
        (json!({ "name": "a\nb" }), "INVALID_CHARACTERS"),
        (json!({ "uses": 3 }), "UNKNOWN_FIELD"),
    ] {
        post(TOKENS, Some(&org.admin_key), &body)
            .await
            .expect_error(422, code);
    }
    // The edges of each bound are accepted.
    let edge = new_token(
        &org,
        &json!({ "maxUses": 1000, "expiresInSeconds": 2_592_000 }),
    )
    .await;
    assert_eq!(edge["maxUses"], 1000);
    new_token(&org, &json!({ "maxUses": 1, "expiresInSeconds": 60 })).await;

    // At most 100 live tokens; a revoked one makes room for one more.
    for _ in 2..100 {
        new_token(&org, &json!({})).await;
    }
    post(TOKENS, Some(&org.admin_key), &json!({}))
        .await
        .expect_error(409, "ENROLLMENT_TOKENS_AT_CAP");
    let edge_id = edge["id"].as_str().expect("id");
    delete(&format!("{TOKENS}/{edge_id}"), &org.admin_key)
        .await
        .expect(200);
    new_token(&org, &json!({})).await;
    assert_eq!(listed(&org).await.len(), 101);
}

#[tokio::test]
async fn the_cron_pass_deletes_tokens_a_week_past_expiry_that_admitted_no_one() {
    let org = bootstrap_org("attack-token-purge");
    let now = now_ms();
    let (stale, _) = insert_token(&org, now - 10 * DAY, now - 8 * DAY, 0);
    // Kept: one that admitted a runner (as the runners it admitted are), and one that expired
    // only yesterday.
    let (used, _) = insert_token(&org, now - 10 * DAY, now - 8 * DAY, 1);
    let (recent, _) = insert_token(&org, now - 2 * DAY, now - DAY, 0);
    assert_eq!(listed(&org).await.len(), 3);

    edgerunner_e2e::recovery::fire_cron().await;

    let ids: Vec<Value> = listed(&org).await.iter().map(|t| t["id"].clone()).collect();
    assert!(!ids.contains(&json!(stale)), "{ids:?}");
    assert!(
        ids.contains(&json!(used)) && ids.contains(&json!(recent)),
        "{ids:?}"
    );
}

/// An IPv6 /48 (what one free tunnel broker account is given) of the documentation range
/// 3fff::/20 that no other test uses: `address(j, i)` is address `i` of its /64 number `j`.
fn fresh_site() -> impl Fn(u32, u32) -> String {
    let b = random_bytes();
    let (x, y) = (
        u16::from_be_bytes([b[0], b[1]]) & 0x0fff,
        u16::from_be_bytes([b[2], b[3]]),
    );
    move |j: u32, i: u32| format!("3fff:{x:x}:{y:x}:{j:x}::{:x}", i + 1)
}

/// Token-less enrollments of fresh keys into `org`, five from each of the /64s `0..nets` of
/// `site` (each /64 at its share, MAX_PENDING_ENROLLMENTS_PER_NETWORK).
async fn fill_from(site: &impl Fn(u32, u32) -> String, nets: u32, org: &Org) {
    for j in 0..nets {
        for i in 0..5 {
            let runner = KeyPairRunner::generate();
            runner
                .enroll_from(&site(j, i), &runner.enrollment(&org.id))
                .await
                .expect(201);
        }
    }
}

#[tokio::test]
async fn strangers_filling_every_token_less_slot_do_not_block_an_admins_tokens() {
    let org = bootstrap_org("attack-squat-tokens");
    let token = secret_of(&new_token(&org, &json!({ "maxUses": 2 })).await);
    // MAX_PENDING_ENROLLMENTS (100) token-less enrollments from five /48s, each at its share
    // (MAX_PENDING_ENROLLMENTS_PER_SITE, 20: four /64s at five each).
    for _ in 0..5 {
        fill_from(&fresh_site(), 4, &org).await;
    }
    let late = KeyPairRunner::generate();
    late.enroll_from(&fresh_site()(0, 0), &late.enrollment(&org.id))
        .await
        .expect_error(429, "PENDING_ENROLLMENTS_AT_CAP");
    // The admin's own runners, with the admin's token, still enroll: token enrollments are
    // bounded by the token's uses and do not compete for the strangers' slots.
    for _ in 0..2 {
        let own = KeyPairRunner::generate();
        let mut body = own.enrollment(&org.id);
        body["enrollmentToken"] = json!(token);
        own.enroll_from(&fresh_site()(0, 0), &body)
            .await
            .expect(201);
    }
}

#[tokio::test]
async fn strangers_from_one_ipv6_48_fill_only_its_share_of_pending_enrollments() {
    let org = bootstrap_org("attack-squat-site");
    let site = fresh_site();
    // MAX_PENDING_ENROLLMENTS_PER_SITE (20): four /64s of the /48 at their share of five.
    fill_from(&site, 4, &org).await;
    // A fifth /64 of the same /48 is turned away, though its own share is untouched.
    let late = KeyPairRunner::generate();
    late.enroll_from(&site(4, 0), &late.enrollment(&org.id))
        .await
        .expect_error(429, "PENDING_ENROLLMENTS_FROM_SITE_AT_CAP");
    // Controls: another /48 enrolls into the same organization, the squatted /48 into
    // another one, and an admin's token from the squatted /48 into this one.
    late.enroll_from(&fresh_site()(0, 0), &late.enrollment(&org.id))
        .await
        .expect(201);
    let other = bootstrap_org("attack-squat-site-other");
    let elsewhere = KeyPairRunner::generate();
    elsewhere
        .enroll_from(&site(5, 0), &elsewhere.enrollment(&other.id))
        .await
        .expect(201);
    let token = secret_of(&new_token(&org, &json!({})).await);
    let admitted = KeyPairRunner::generate();
    let mut body = admitted.enrollment(&org.id);
    body["enrollmentToken"] = json!(token);
    admitted.enroll_from(&site(6, 0), &body).await.expect(201);
}

#[tokio::test]
async fn an_enrollment_nobody_approved_in_a_day_is_deleted_and_its_key_may_enroll_again() {
    let org = bootstrap_org("attack-squat-expiry");
    let stale = KeyPairRunner::generate();
    let mut body = stale.enrollment(&org.id);
    body["files"] = json!({ "lscpu.txt": "x86_64" });
    let stale_id = id_of(&stale.enroll_from(&fresh_address(), &body).await.expect(201)["runner"]);
    let fresh = KeyPairRunner::generate();
    let fresh_id = fresh.enroll(&org).await;
    // A day and a minute old (the default PENDING_ENROLLMENT_MAX_AGE_HOURS is 24).
    d1(&format!(
        "UPDATE runners SET registered_at = registered_at - {} WHERE id = {}",
        DAY + 60_000,
        sql_text(&stale_id)
    ));

    edgerunner_e2e::recovery::fire_cron().await;

    get_runner(&org.admin_key, &stale_id)
        .await
        .expect_error(404, "NOT_FOUND");
    let left = d1(&format!(
        "SELECT (SELECT count(*) FROM runners WHERE id = {id}) \
              + (SELECT count(*) FROM runner_files WHERE runner_id = {id}) \
              + (SELECT count(*) FROM job_events WHERE runner_id = {id}) AS n",
        id = sql_text(&stale_id)
    ));
    assert_eq!(d1_rows(&left)[0]["n"], 0, "{left}");
    assert_eq!(
        runner_record(&org.admin_key, &fresh_id).await["state"],
        "pending_approval"
    );
    // The operator who missed the day enrolls the same key again.
    stale
        .enroll_from(&fresh_address(), &stale.enrollment(&org.id))
        .await
        .expect(201);
}

/// Status and error body, for comparing answers.
fn answer(reply: &Reply) -> (u16, String) {
    (reply.status, reply.text.clone())
}

#[tokio::test]
async fn enroll_answers_a_stranger_alike_for_unknown_closed_and_token_organizations() {
    let closed = bootstrap_org("attack-alike-closed");
    set_policy(&closed, "closed").await;
    let token_only = bootstrap_org("attack-alike-token");
    set_policy(&token_only, "token").await;
    let open = bootstrap_org("attack-alike-open");
    let unknown = format!("org_{}", &sha256_hex(&random_bytes())[..24]);

    // Without a token: one answer whether the organization is unknown, closed or asks for one.
    let mut without = Vec::new();
    for org_id in [&unknown, &closed.id, &token_only.id] {
        without.push(answer(&enroll_with(org_id, None).await));
    }
    assert_eq!(without[0].0, 403, "{without:?}");
    assert!(without.iter().all(|a| *a == without[0]), "{without:?}");

    // With a token that admits nothing: one answer whatever the organization and its policy.
    let bogus = format!("ere_{}", sha256_hex(&random_bytes()));
    let mut with = Vec::new();
    for org_id in [&unknown, &closed.id, &token_only.id, &open.id] {
        with.push(answer(&enroll_with(org_id, Some(&bogus)).await));
    }
    assert_eq!(with[0].0, 403, "{with:?}");
    assert!(with.iter().all(|a| *a == with[0]), "{with:?}");
}
