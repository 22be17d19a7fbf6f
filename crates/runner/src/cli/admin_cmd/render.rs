//! What a person reads instead of the server's JSON (without `--json`): tables, ages, and one
//! record at a time.

use edgerunner_protocol::time::UnixMillis;
use serde_json::Value;

pub(super) fn render_enrollment_token(answer: &Value, server: &str) -> String {
    format!(
        "enrollment token {} ({}) — {} use(s), expires {}\n\
         the token (shown once; give it to the runner's operator):\n  {}\n\n\
         Enroll a runner with:\n  \
         EDGERUNNER_ENROLLMENT_TOKEN={} edgerunner runner enroll --server {server} \\\n      \
         --organization <organization id> --execution-kind <kind> --runtime <runtime>",
        text(answer, "id"),
        text(answer, "name"),
        text(answer, "maxUses"),
        text(answer, "expiresAt"),
        text(answer, "enrollmentToken"),
        text(answer, "enrollmentToken"),
    )
}

pub(super) fn render_enrollment_tokens(answer: &Value) -> String {
    let tokens = answer["enrollmentTokens"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if tokens.is_empty() {
        return "no enrollment tokens".to_owned();
    }
    table(
        &[
            "ID",
            "NAME",
            "PREFIX",
            "STATE",
            "USES",
            "EXPIRES",
            "LAST USED",
        ],
        tokens
            .iter()
            .map(|t| {
                vec![
                    text(t, "id"),
                    text(t, "name"),
                    text(t, "prefix"),
                    text(t, "state"),
                    format!("{}/{}", text(t, "uses"), text(t, "maxUses")),
                    text(t, "expiresAt"),
                    text(t, "lastUsedAt"),
                ]
            })
            .collect(),
    )
}

/// How long ago `at` (RFC 3339) was: `12 s ago`, `3 min ago`, `5 h ago`, `2 d ago`; `never`
/// when absent. A time ahead of `now` (clocks disagree) reads as `just now`.
pub fn age(now_ms: i64, at: Option<&str>) -> String {
    let Some(at) = at else {
        return "never".to_owned();
    };
    let Ok(then) = UnixMillis::parse_rfc3339(at) else {
        return at.to_owned();
    };
    let seconds = now_ms.saturating_sub(then.get()) / 1000;
    match seconds {
        s if s <= 0 => "just now".to_owned(),
        s if s < 60 => format!("{s} s ago"),
        s if s < 3_600 => format!("{} min ago", s / 60),
        s if s < 48 * 3_600 => format!("{} h ago", s / 3_600),
        s => format!("{} d ago", s / 86_400),
    }
}

pub(super) fn text(value: &Value, key: &str) -> String {
    text_of(&value[key])
}

/// A JSON value as a word: a string without its quotes, `-` for null.
fn text_of(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Left-aligned columns, two spaces apart.
fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(header.iter().map(|h| (*h).to_owned()).collect())];
    out.extend(rows.into_iter().map(line));
    out.join("\n")
}

/// A runner's connection for a person: `online`, `never connected`, `offline 3h` (since when),
/// or `-` from a server that does not say.
fn connection(now_ms: i64, connection: &Value) -> String {
    match connection["status"].as_str() {
        Some("offline") => format!(
            "offline since {}",
            age(now_ms, connection["since"].as_str())
        ),
        Some(status) => status.replace('_', " "),
        None => "-".to_owned(),
    }
}

pub(super) fn render_runners(answer: &Value, now_ms: i64) -> String {
    let runners = answer["runners"].as_array().cloned().unwrap_or_default();
    if runners.is_empty() {
        return "no runners".to_owned();
    }
    table(
        &[
            "ID",
            "NAME",
            "STATE",
            "CONNECTION",
            "MODEL",
            "ACTIVE",
            "LAST HEARTBEAT",
            "LAST SEEN",
            "FINGERPRINT",
        ],
        runners
            .iter()
            .map(|r| {
                vec![
                    text(r, "id"),
                    text(r, "name"),
                    text(r, "state"),
                    connection(now_ms, &r["connection"]),
                    text(r, "identityModel"),
                    format!(
                        "{}/{}",
                        text(r, "activeClaims"),
                        text(r, "maxConcurrentJobs")
                    ),
                    age(now_ms, r["lastHeartbeatAt"].as_str()),
                    age(now_ms, r["lastSeenAt"].as_str()),
                    text(r, "fingerprint"),
                ]
            })
            .collect(),
    )
}

pub(super) fn render_runner(answer: &Value) -> String {
    let runner = if answer["runner"].is_object() {
        &answer["runner"]
    } else {
        answer
    };
    let mut lines = vec![format!(
        "runner {} ({}) — {}",
        text(runner, "id"),
        text(runner, "name"),
        text(runner, "state")
    )];
    for (label, key) in [
        ("identity", "identityModel"),
        ("runner key", "runnerKey"),
        ("fingerprint", "fingerprint"),
        ("key id", "keyId"),
        ("state reason", "stateReason"),
        ("capacity", "maxConcurrentJobs"),
        ("active claims", "activeClaims"),
        ("completed jobs", "completedJobs"),
        ("last seen", "lastSeenAt"),
        ("address", "address"),
    ] {
        if !runner[key].is_null() {
            lines.push(format!("{label:<15} {}", text(runner, key)));
        }
    }
    // What routes jobs to it, and whether it stays.
    for (label, key) in [("tags", "tags"), ("problem types", "problemTypes")] {
        if let Some(items) = runner[key].as_array() {
            let names: Vec<String> = items.iter().map(text_of).collect();
            let shown = if names.is_empty() {
                "-".to_owned()
            } else {
                names.join(", ")
            };
            lines.push(format!("{label:<15} {shown}"));
        }
    }
    for (label, key, yes) in [
        ("external", "external", "yes: takes jobs marked external"),
        (
            "ephemeral",
            "ephemeral",
            "yes: one job, then drained and revoked",
        ),
    ] {
        if let Some(flag) = runner[key].as_bool() {
            lines.push(format!("{label:<15} {}", if flag { yes } else { "no" }));
        }
    }
    lines.join("\n")
}

pub(super) fn render_token(answer: &Value, server: &str) -> String {
    let runner = &answer["runner"];
    format!(
        "runner {} ({}) — {}\nbootstrap token (shown once; store it in your secret manager):\n  {}\n\n\
         Configure the runner with:\n  EVALGATE_BASE_URL={server}\n  EVALGATE_RUNNER_ID={}\n  \
         EVALGATE_RUNNER_BOOTSTRAP_TOKEN={}\n  edgerunner runner start --exec '<command>'",
        text(runner, "id"),
        text(runner, "name"),
        text(runner, "state"),
        text(answer, "bootstrapToken"),
        text(runner, "id"),
        text(answer, "bootstrapToken"),
    )
}

pub(super) fn render_events(answer: &Value) -> String {
    let events = answer["events"].as_array().cloned().unwrap_or_default();
    if events.is_empty() {
        return "no events".to_owned();
    }
    table(
        &["AT", "TYPE", "ACTOR", "REASON"],
        events
            .iter()
            .map(|e| {
                vec![
                    text(e, "at"),
                    text(e, "type"),
                    text(e, "actor"),
                    text(e, "reason"),
                ]
            })
            .collect(),
    )
}

pub(super) fn render_jobs(answer: &Value) -> String {
    let jobs = answer["jobs"].as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        return "no jobs".to_owned();
    }
    table(
        &["ID", "STATE", "ATTEMPT", "RAN", "CREATED"],
        jobs.iter()
            .map(|j| {
                let held = if j["hold"].is_object() { " (held)" } else { "" };
                vec![
                    text(j, "id"),
                    format!("{}{held}", text(j, "state")),
                    text(j, "dispatchAttempt"),
                    ran(&j["subject"]),
                    text(j, "createdAt"),
                ]
            })
            .collect(),
    )
}

/// What a job runs, as an operator names it: kind, the artifact's name and the version
/// (`prompt capitals v3`); the artifact's id where the server named none.
fn ran(subject: &Value) -> String {
    let artifact = match subject["artifactName"].as_str() {
        Some(name) => name.to_owned(),
        None => text(subject, "artifactId"),
    };
    format!(
        "{} {artifact} v{}",
        text(subject, "kind"),
        text(subject, "versionId")
    )
}

pub(super) fn render_artifacts(answer: &Value) -> String {
    let artifacts = answer["artifacts"].as_array().cloned().unwrap_or_default();
    if artifacts.is_empty() {
        return "no artifacts".to_owned();
    }
    table(
        &["ID", "KIND", "NAME", "LATEST VERSION", "CREATED"],
        artifacts
            .iter()
            .map(|a| {
                vec![
                    text(a, "id"),
                    text(a, "kind"),
                    text(a, "name"),
                    text(a, "latestVersionId"),
                    text(a, "createdAt"),
                ]
            })
            .collect(),
    )
}

/// An artifact with its versions, or a version with its content.
pub(super) fn render_release(answer: &Value) -> String {
    let promotions = |version: &Value| match version["promotions"].as_array() {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(|p| p.as_str().unwrap_or("?"))
            .collect::<Vec<_>>()
            .join(", "),
        _ => "-".to_owned(),
    };
    if let Some(versions) = answer["versions"].as_array() {
        let mut lines = vec![format!(
            "artifact {} ({}) {:?} — created {}",
            text(answer, "id"),
            text(answer, "kind"),
            text(answer, "name"),
            text(answer, "createdAt")
        )];
        if versions.is_empty() {
            lines.push("no versions".to_owned());
        } else {
            lines.push(table(
                &["VERSION", "CONTENT HASH", "PROMOTED TO", "CREATED"],
                versions
                    .iter()
                    .map(|v| {
                        vec![
                            text(v, "id"),
                            text(v, "contentHash"),
                            promotions(v),
                            text(v, "createdAt"),
                        ]
                    })
                    .collect(),
            ));
        }
        return lines.join("\n");
    }
    let content = serde_json::to_string_pretty(&answer["content"])
        .unwrap_or_else(|_| answer["content"].to_string());
    format!(
        "version {} of {} ({}) — created {}\ncontent hash    {}\npromoted to     {}\n{content}",
        text(answer, "id"),
        text(answer, "artifactId"),
        text(answer, "kind"),
        text(answer, "createdAt"),
        text(answer, "contentHash"),
        promotions(answer),
    )
}

pub(super) fn render_job(job: &Value) -> String {
    let handed_back = match job["releasedAttempts"].as_u64() {
        Some(n) if n > 0 => format!("; {n} hand-back(s) not counted"),
        _ => String::new(),
    };
    let mut lines = vec![format!(
        "job {} — {} (attempt {}{handed_back})",
        text(job, "id"),
        text(job, "state"),
        text(job, "dispatchAttempt")
    )];
    let subject = &job["subject"];
    lines.push(format!(
        "subject         {} (artifact {}, {}) {}",
        ran(subject),
        text(subject, "artifactId"),
        text(subject, "environment"),
        text(subject, "contentHash"),
    ));
    for (label, key) in [
        ("idempotency key", "idempotencyKey"),
        ("input hash", "inputHash"),
        ("active claim", "activeClaimId"),
        ("lease expires", "leaseExpiresAt"),
        ("cancel reason", "cancelReason"),
        ("created", "createdAt"),
        ("finished", "finishedAt"),
    ] {
        if !job[key].is_null() {
            lines.push(format!("{label:<15} {}", text(job, key)));
        }
    }
    if let Some(hold) = job["hold"].as_object() {
        let field = |key: &str| hold.get(key).and_then(Value::as_str).unwrap_or("—");
        lines.push(format!(
            "{:<15} since {} by {}: {}",
            "held",
            field("heldAt"),
            field("heldBy"),
            field("reason")
        ));
    }
    if let Some(events) = job["events"].as_array() {
        lines.push(String::new());
        lines.push(table(
            &["AT", "EVENT", "ATTEMPT", "ACTOR", "REASON"],
            events
                .iter()
                .map(|e| {
                    vec![
                        text(e, "at"),
                        text(e, "type"),
                        text(e, "attempt"),
                        text(e, "actor"),
                        text(e, "reason"),
                    ]
                })
                .collect(),
        ));
    }
    if let Some(stream) = job["stream"].as_array() {
        lines.push(format!("\nstream: {} chunk(s)", stream.len()));
    }
    if let Some(completions) = job["completions"].as_array() {
        for completion in completions {
            lines.push(format!(
                "completion {} ({}): {} — {}",
                text(completion, "id"),
                text(completion, "status"),
                text(completion, "decision"),
                text(completion, "rationale"),
            ));
        }
    }
    lines.join("\n")
}

/// `admin usage`: what the organization stores, a line a fact.
pub(super) fn render_usage(usage: &Value) -> String {
    let jobs = &usage["jobs"];
    let retention = &usage["retention"];
    let due = if retention["dueCapped"] == true {
        format!("at least {}", text(retention, "due"))
    } else {
        text(retention, "due")
    };
    let bytes = |value: &Value| match value.as_u64() {
        Some(n) => format!("{n} bytes"),
        None => "unknown".to_owned(),
    };
    [
        format!("usage of {}", text(usage, "organizationId")),
        format!(
            "jobs            {} live, {} archived, {} expiring ({} of them held); {} deleted by retention",
            text(jobs, "live"),
            text(jobs, "archived"),
            text(jobs, "expiring"),
            text(jobs, "held"),
            text(jobs, "deletedByRetention"),
        ),
        format!(
            "R2              {} objects, {} of bundles",
            text(&usage["r2"], "objects"),
            bytes(&usage["r2"]["bundleBytes"]),
        ),
        format!(
            "D1              {} of a {} quota ({}); the database {} (every organization's)",
            bytes(&usage["d1"]["organizationBytes"]),
            bytes(&usage["d1"]["quotaBytes"]),
            if usage["d1"]["quotaIsDefault"] == true {
                "the deployment's default"
            } else {
                "this organization's own"
            },
            bytes(&usage["d1"]["databaseBytes"])
        ),
        format!("oldest job      {}", text(usage, "oldestJobAt")),
        format!(
            "retention       {} days; a pass now cuts at {} and would delete {due} jobs",
            text(retention, "retentionDays"),
            text(retention, "cut"),
        ),
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_new_enrollment_token_prints_once_with_a_line_to_copy() {
        let answer = serde_json::json!({
            "id": "ent_1", "name": "rack 4", "maxUses": 2, "expiresAt": "2026-12-05T00:00:00Z",
            "enrollmentToken": "ere_abc",
        });
        let rendered = render_enrollment_token(&answer, "https://runners.example");
        let lines: Vec<&str> = rendered.lines().collect();
        assert_eq!(
            lines,
            [
                "enrollment token ent_1 (rack 4) — 2 use(s), expires 2026-12-05T00:00:00Z",
                "the token (shown once; give it to the runner's operator):",
                "  ere_abc",
                "",
                "Enroll a runner with:",
                "  EDGERUNNER_ENROLLMENT_TOKEN=ere_abc edgerunner runner enroll --server https://runners.example \\",
                "      --organization <organization id> --execution-kind <kind> --runtime <runtime>",
            ]
        );
    }

    #[test]
    fn a_runner_shows_what_routes_jobs_to_it_and_whether_it_stays() {
        let runner = json!({
            "id": "run_1", "name": "gpu-1", "state": "draining",
            "tags": ["gpu", "eu"], "problemTypes": [], "external": false, "ephemeral": true,
        });
        let shown = render_runner(&json!({ "runner": runner }));
        assert!(shown.contains("tags            gpu, eu"), "{shown}");
        assert!(shown.contains("problem types   -"), "{shown}");
        assert!(shown.contains("external        no"), "{shown}");
        assert!(
            shown.contains("ephemeral       yes: one job, then drained and revoked"),
            "{shown}"
        );
    }

    #[test]
    fn tables_align_columns() {
        let rendered = table(
            &["ID", "STATE"],
            vec![
                vec!["run_1".into(), "active".into()],
                vec!["r".into(), "lost".into()],
            ],
        );
        assert_eq!(rendered, "ID     STATE\nrun_1  active\nr      lost");
    }

    #[test]
    fn a_job_says_how_many_hand_backs_did_not_count() {
        let job = |released: u64| json!({"id": "job_1", "state": "queued", "dispatchAttempt": 4, "releasedAttempts": released, "subject": {}});
        let first = |job: &Value| render_job(job).lines().next().map(str::to_owned);
        assert_eq!(
            first(&job(1)).as_deref(),
            Some("job job_1 — queued (attempt 4; 1 hand-back(s) not counted)")
        );
        assert_eq!(
            first(&job(0)).as_deref(),
            Some("job job_1 — queued (attempt 4)")
        );
    }

    #[test]
    fn jobs_are_named_by_what_they_ran_with_their_id_beside() {
        let subject = json!({"kind": "prompt", "artifactId": "art_9", "artifactName": "capitals",
            "versionId": 3, "environment": "dev", "contentHash": "ab"});
        let answer = json!({"jobs": [{"id": "job_1", "state": "succeeded", "dispatchAttempt": 1,
            "subject": subject, "createdAt": "2026-01-01T00:00:00Z"}]});
        let listed = render_jobs(&answer);
        assert!(
            listed.lines().next().is_some_and(|l| l.contains("RAN")),
            "{listed}"
        );
        assert!(
            listed.contains("job_1") && listed.contains("prompt capitals v3"),
            "{listed}"
        );
        let shown = render_job(&answer["jobs"][0]);
        assert!(
            shown.contains("subject         prompt capitals v3 (artifact art_9, dev) ab"),
            "{shown}"
        );
        // A server that names no artifact: its id stands in.
        let unnamed = json!({"kind": "tool", "artifactId": "art_9", "versionId": 4});
        assert_eq!(ran(&unnamed), "tool art_9 v4");
    }

    #[test]
    fn ages_read_in_the_largest_whole_unit() {
        let at = "2026-01-01T00:00:00Z";
        let then = UnixMillis::parse_rfc3339(at).expect("a time").get();
        assert_eq!(age(then, None), "never");
        assert_eq!(age(then + 12_400, Some(at)), "12 s ago");
        assert_eq!(age(then + 59_999, Some(at)), "59 s ago");
        assert_eq!(age(then + 60_000, Some(at)), "1 min ago");
        assert_eq!(age(then + 3 * 60_000 + 59_000, Some(at)), "3 min ago");
        assert_eq!(age(then + 5 * 3_600_000, Some(at)), "5 h ago");
        assert_eq!(age(then + 47 * 3_600_000, Some(at)), "47 h ago");
        assert_eq!(age(then + 3 * 86_400_000, Some(at)), "3 d ago");
        assert_eq!(age(then + 400, Some(at)), "just now");
        assert_eq!(age(then - 5_000, Some(at)), "just now", "a clock behind");
        assert_eq!(age(then, Some("yesterday")), "yesterday", "shown as sent");
    }

    #[test]
    fn runner_lists_show_heartbeat_and_contact_as_ages() {
        let now = UnixMillis::parse_rfc3339("2026-01-01T00:10:00Z")
            .expect("a time")
            .get();
        let answer = json!({"runners": [{
            "id": "run_1", "name": "gpu-1", "state": "active", "identityModel": "bootstrap",
            "activeClaims": 0, "maxConcurrentJobs": 2, "fingerprint": null,
            "lastHeartbeatAt": "2026-01-01T00:09:48Z", "lastSeenAt": "2026-01-01T00:07:00Z",
            "connection": {"status": "online", "since": null},
        }, {
            "id": "run_2", "name": "idle", "state": "pending_approval", "identityModel": "keypair",
            "activeClaims": 0, "maxConcurrentJobs": 1, "fingerprint": "SHA256:x",
            "lastHeartbeatAt": null, "lastSeenAt": null,
            "connection": {"status": "never_connected", "since": null},
        }, {
            "id": "run_3", "name": "gone", "state": "active", "identityModel": "bootstrap",
            "activeClaims": 0, "maxConcurrentJobs": 1, "fingerprint": null,
            "lastHeartbeatAt": null, "lastSeenAt": "2025-12-31T22:10:00Z",
            "connection": {"status": "offline", "since": "2025-12-31T22:10:00Z"},
        }]});
        let rendered = render_runners(&answer, now);
        let lines: Vec<&str> = rendered.lines().collect();
        assert!(lines[0].contains("LAST HEARTBEAT  LAST SEEN"), "{rendered}");
        assert!(
            lines[1].contains("12 s ago") && lines[1].contains("3 min ago"),
            "{rendered}"
        );
        assert_eq!(lines[2].matches("never").count(), 3, "{rendered}");
        // Beside the admin state: whether it talks to the server now.
        let cells = |line: &str| -> Vec<String> {
            line.split("  ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(cells(lines[0])[2..4], ["STATE", "CONNECTION"], "{rendered}");
        assert_eq!(cells(lines[1])[2..4], ["active", "online"], "{rendered}");
        assert_eq!(
            cells(lines[2])[2..4],
            ["pending_approval", "never connected"],
            "{rendered}"
        );
        assert_eq!(
            cells(lines[3])[2..4],
            ["active", "offline since 2 h ago"],
            "{rendered}"
        );
    }
}
