//! `GET /metrics`: the queues view in the Prometheus text exposition format 0.0.4, for a
//! scraper or KEDA's `metrics-api` scaler (`format: prometheus`). Every series names its queue
//! by id only (`queue="q_…"`), so that a selector such as
//! `edgerunner_jobs{queue="q_0e2b025ad53970f2",state="queued"}` matches by exact label
//! equality; the queue's name is in `edgerunner_queue_info`.

use std::fmt::Write as _;

use super::queues::{runner_state, QueuesView};
use crate::store::counters::COMPLETION_OUTCOMES;
use crate::store::queues::QueuesRead;

/// The exposition format's content type.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label value as the format writes it: `\`, `"` and newlines escaped.
pub(crate) fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The organization's counters (and the deployment's), each a family of its own but the
/// completions, one family by outcome. A counter never written is 0.
fn counters(out: &mut String, read: &QueuesRead) {
    let value = |name: &str| {
        read.counters
            .iter()
            .filter(|c| c.name == name)
            .map(|c| c.value)
            .sum::<i64>()
    };
    for (metric, name, help) in [
        (
            "edgerunner_claims_granted_total",
            "claims_granted",
            "Claims granted to runners.",
        ),
        (
            "edgerunner_leases_lost_total",
            "leases_lost",
            "Leases that expired: their claims were lost.",
        ),
        (
            "edgerunner_requeues_total",
            "requeues",
            "Jobs queued again after a lost lease.",
        ),
        (
            "edgerunner_attempts_exhausted_total",
            "attempts_exhausted",
            "Jobs that failed after a lost lease on their last attempt.",
        ),
        (
            "edgerunner_stream_bytes_total",
            "stream_bytes",
            "Stream chunk payload bytes accepted.",
        ),
        (
            "edgerunner_reaper_passes_total",
            "reaper_passes",
            "Recovery passes of the deployment's reaper.",
        ),
    ] {
        family(out, metric, "counter", help);
        let _ = writeln!(out, "{metric} {}", value(name));
    }
    family(
        out,
        "edgerunner_completions_total",
        "counter",
        "Completions: accepted ones by the state they left the job in, refused ones by decision.",
    );
    for outcome in COMPLETION_OUTCOMES {
        let _ = writeln!(
            out,
            "edgerunner_completions_total{{outcome=\"{outcome}\"}} {}",
            value(&format!("completions_{outcome}"))
        );
    }
}

/// Writes a metric family's `# HELP` and `# TYPE` lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The text of the view (and of the runners it was read with, for the runners by state).
pub(crate) fn render(view: &QueuesView<'_>, read: &QueuesRead, now: i64) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "edgerunner_queue_info",
        "gauge",
        "A queue of the organization (1), with its name.",
    );
    for q in &view.queues {
        let _ = writeln!(
            out,
            "edgerunner_queue_info{{queue=\"{}\",name=\"{}\"}} 1",
            label(&q.id),
            label(&q.name)
        );
    }
    family(
        &mut out,
        "edgerunner_jobs",
        "gauge",
        "Live jobs by queue and state.",
    );
    for q in &view.queues {
        for (state, jobs) in [
            ("queued", q.jobs.queued),
            ("claimed", q.jobs.claimed),
            ("running", q.jobs.running),
            ("cancel_requested", q.jobs.cancel_requested),
        ] {
            let _ = writeln!(
                out,
                "edgerunner_jobs{{queue=\"{}\",state=\"{state}\"}} {jobs}",
                label(&q.id)
            );
        }
    }
    family(
        &mut out,
        "edgerunner_queue_oldest_queued_age_seconds",
        "gauge",
        "How long the queue's oldest queued job has waited (0 when none waits).",
    );
    for q in &view.queues {
        let _ = writeln!(
            out,
            "edgerunner_queue_oldest_queued_age_seconds{{queue=\"{}\"}} {}",
            label(&q.id),
            q.oldest_queued_age_seconds.unwrap_or(0)
        );
    }
    family(
        &mut out,
        "edgerunner_queue_runners",
        "gauge",
        "Runners that can serve the queue, by state (idle, busy, draining, offline).",
    );
    for q in &view.queues {
        let Some(runners) = &q.runners else { continue };
        for (state, n) in [
            ("idle", runners.idle),
            ("busy", runners.busy),
            ("draining", runners.draining),
            ("offline", runners.offline),
        ] {
            let _ = writeln!(
                out,
                "edgerunner_queue_runners{{queue=\"{}\",state=\"{state}\"}} {n}",
                label(&q.id)
            );
        }
    }
    family(
        &mut out,
        "edgerunner_queue_suggested_runners",
        "gauge",
        "Runners the queue wants: ceil((queued + claimed + running + cancel_requested) / slots per runner).",
    );
    for q in &view.queues {
        let _ = writeln!(
            out,
            "edgerunner_queue_suggested_runners{{queue=\"{}\"}} {}",
            label(&q.id),
            q.suggested_runners
        );
    }
    family(
        &mut out,
        "edgerunner_runners",
        "gauge",
        "The organization's runners that take or took work, by state (idle, busy, draining, offline).",
    );
    for state in ["idle", "busy", "draining", "offline"] {
        let n = read
            .runners
            .iter()
            .filter(|r| runner_state(r, now) == Some(state))
            .count();
        let _ = writeln!(out, "edgerunner_runners{{state=\"{state}\"}} {n}");
    }
    counters(&mut out, read);
    family(
        &mut out,
        "edgerunner_read_capped",
        "gauge",
        "1 when a bound of the read was reached: the counts are then at least these.",
    );
    let _ = writeln!(out, "edgerunner_read_capped {}", u8::from(view.capped));
    out
}

#[cfg(test)]
mod tests {
    use edgerunner_protocol::state::JobState;

    use super::super::queues::build;
    use super::*;
    use crate::store::queues::{LiveCount, QueueRow};

    #[test]
    fn every_family_is_declared_once_and_every_series_names_its_queue_by_id() {
        let now = 1_800_000_000_000;
        let read = QueuesRead {
            live: vec![LiveCount {
                queue_id: Some("q_0123456789abcdef".into()),
                state: JobState::Queued,
                jobs: 5,
                oldest_at: now - 7_000,
            }],
            queues: vec![QueueRow {
                id: "q_0123456789abcdef".into(),
                name: "prompt \"quoted\"".into(),
                canonical: r#"["prompt","python3.12",false,null,["default"]]"#.into(),
            }],
            runners: vec![],
            counters: vec![],
        };
        let text = render(&build("org_1", &read, now), &read, now);
        for line in [
            r#"edgerunner_queue_info{queue="q_0123456789abcdef",name="prompt \"quoted\""} 1"#,
            r#"edgerunner_jobs{queue="q_0123456789abcdef",state="queued"} 5"#,
            r#"edgerunner_jobs{queue="q_0123456789abcdef",state="cancel_requested"} 0"#,
            r#"edgerunner_queue_oldest_queued_age_seconds{queue="q_0123456789abcdef"} 7"#,
            r#"edgerunner_queue_runners{queue="q_0123456789abcdef",state="idle"} 0"#,
            r#"edgerunner_queue_suggested_runners{queue="q_0123456789abcdef"} 5"#,
            r#"edgerunner_runners{state="offline"} 0"#,
            "edgerunner_read_capped 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
        let types = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        let helps = text.lines().filter(|l| l.starts_with("# HELP ")).count();
        assert_eq!((types, helps), (14, 14));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn label_values_are_escaped_as_the_format_says() {
        assert_eq!(label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(label("one\ntwo"), "one\\ntwo");
        assert_eq!(label("prompt · python3.12"), "prompt · python3.12");
    }
}
