//! `GET /metrics`: the queues view in the Prometheus text exposition format 0.0.4, for a
//! scraper or KEDA's `metrics-api` scaler (`format: prometheus`). Every series names its queue
//! by id only (`queue="q_…"`), so that a selector such as
//! `edgerunner_jobs{queue="q_0e2b025ad53970f2",state="queued"}` matches by exact label
//! equality; the queue's name is in `edgerunner_queue_info`.

use std::fmt::Write as _;

use super::queues::{QueueView, QueuesView, RunnerLoad};
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

/// Writes one metric family: its `# HELP` and `# TYPE` lines, then each sample (its labels as
/// the format writes them, inside the braces, and its value).
fn family(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: impl IntoIterator<Item = (String, i64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// One sample per queue, labelled by its id.
fn per_queue(view: &QueuesView<'_>, value: impl Fn(&QueueView) -> i64) -> Vec<(String, i64)> {
    view.queues
        .iter()
        .map(|q| (format!("queue=\"{}\"", label(&q.id)), value(q)))
        .collect()
}

/// The text of the view (and of the runners and counters it was read with).
pub(crate) fn render(view: &QueuesView<'_>, read: &QueuesRead, now: i64) -> String {
    let mut out = String::new();
    let queue_info = view.queues.iter().map(|q| {
        (
            format!("queue=\"{}\",name=\"{}\"", label(&q.id), label(&q.name)),
            1,
        )
    });
    family(
        &mut out,
        "edgerunner_queue_info",
        "gauge",
        "A queue of the organization (1), with its name.",
        queue_info,
    );
    let jobs = view.queues.iter().flat_map(|q| {
        [
            ("queued", q.jobs.queued),
            ("claimed", q.jobs.claimed),
            ("running", q.jobs.running),
            ("cancel_requested", q.jobs.cancel_requested),
        ]
        .map(|(state, n)| (format!("queue=\"{}\",state=\"{state}\"", label(&q.id)), n))
    });
    family(
        &mut out,
        "edgerunner_jobs",
        "gauge",
        "Live jobs by queue and state.",
        jobs,
    );
    family(
        &mut out,
        "edgerunner_queue_oldest_queued_age_seconds",
        "gauge",
        "How long the queue's oldest queued job has waited (0 when none waits).",
        per_queue(view, |q| q.oldest_queued_age_seconds.unwrap_or(0)),
    );
    let queue_runners = view.queues.iter().flat_map(|q| {
        q.runners.iter().flat_map(move |runners| {
            RunnerLoad::ALL.map(|load| {
                let labels = format!("queue=\"{}\",state=\"{}\"", label(&q.id), load.as_str());
                (labels, runners.of(load))
            })
        })
    });
    family(
        &mut out,
        "edgerunner_queue_runners",
        "gauge",
        "Runners that can serve the queue, by state (idle, busy, draining, offline).",
        queue_runners,
    );
    family(&mut out, "edgerunner_queue_suggested_runners", "gauge",
        "Runners the queue wants: ceil((queued + claimed + running + cancel_requested) / slots per runner).",
        per_queue(view, |q| q.suggested_runners));
    let runners = RunnerLoad::ALL.map(|load| {
        let n = read
            .runners
            .iter()
            .filter(|r| RunnerLoad::of(r, now) == Some(load))
            .count();
        (
            format!("state=\"{}\"", load.as_str()),
            i64::try_from(n).unwrap_or(i64::MAX),
        )
    });
    family(&mut out, "edgerunner_runners", "gauge",
        "The organization's runners that take or took work, by state (idle, busy, draining, offline).",
        runners);
    counters(&mut out, read);
    family(
        &mut out,
        "edgerunner_read_capped",
        "gauge",
        "1 when a bound of the read was reached: the counts are then at least these.",
        [(String::new(), i64::from(view.capped))],
    );
    out
}

/// The organization's counters (and the deployment's): one family each, but the completions,
/// one family by outcome. A counter never written is 0.
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
        family(out, metric, "counter", help, [(String::new(), value(name))]);
    }
    let completions = COMPLETION_OUTCOMES.map(|outcome| {
        (
            format!("outcome=\"{outcome}\""),
            value(&format!("completions_{outcome}")),
        )
    });
    family(
        out,
        "edgerunner_completions_total",
        "counter",
        "Completions: accepted ones by the state they left the job in, refused ones by decision.",
        completions,
    );
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
