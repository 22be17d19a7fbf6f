//! What the archive suites share: the admin's archive request, whole reads of a job (its
//! bundle, every stream page), `edgerunner verify` on a bundle, and the job's rows in the local
//! D1 file, table by table.

use serde_json::{json, Value};

use crate::{d1, d1_rows, get, post, required_env, sql_text, Reply, Scratch};

/// `POST /api/remote-runners/jobs/{id}/archive`.
pub async fn archive(bearer: &str, job_id: &str) -> Reply {
    post(
        &format!("/api/remote-runners/jobs/{job_id}/archive"),
        Some(bearer),
        &json!({}),
    )
    .await
}

pub async fn bundle(bearer: &str, job_id: &str) -> String {
    let reply = get(&format!("/api/remote-runners/jobs/{job_id}/bundle"), bearer).await;
    assert_eq!(
        reply.status,
        200,
        "bundle: {}",
        &reply.text[..reply.text.len().min(300)]
    );
    assert_eq!(reply.content_type(), "application/json");
    reply.text
}

/// Every page of the job's stream with `query` (`limit`, `attempt`), from the start.
pub async fn pages(bearer: &str, job_id: &str, query: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut after = "0.-1".to_owned();
    // Bounded: no stream here has more pages than this.
    for _ in 0..200 {
        let page = get(
            &format!("/api/remote-runners/jobs/{job_id}/stream?after={after}&{query}"),
            bearer,
        )
        .await
        .expect(200);
        after = page["cursor"].as_str().expect("cursor").to_owned();
        let more = page["more"] == true;
        all.push(page);
        if !more {
            return all;
        }
    }
    panic!("the stream of {job_id} did not end within 200 pages");
}

/// `edgerunner verify` on `bundle` with the runner's signing secret.
pub fn verify(bundle: &str, job_id: &str, secret: &str) {
    let bin = required_env("EDGERUNNER_BIN");
    let scratch = Scratch::new("archive-verify");
    let file = scratch.path(&format!("{job_id}.bundle.json"));
    std::fs::write(&file, bundle).expect("write the bundle");
    let output = std::process::Command::new(bin)
        .args(["verify", file.to_str().expect("UTF-8")])
        .env("EDGERUNNER_SIGNING_SECRET", secret)
        .output()
        .expect("run edgerunner verify");
    assert!(
        output.status.success(),
        "verify: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Rows and their bytes, table by table, of every table that names the job, counted in the
/// local D1 file (text and blobs by their bytes, numbers as 8).
pub fn d1_footprint(job_id: &str) -> Vec<(String, u64, u64)> {
    let id = sql_text(job_id);
    let tables = [
        ("jobs", format!("id = {id}")),
        ("archived_jobs", format!("id = {id}")),
        ("job_claims", format!("job_id = {id}")),
        ("stream_chunks", format!("job_id = {id}")),
        ("job_events", format!("job_id = {id}")),
        ("job_completions", format!("job_id = {id}")),
        ("completion_evidence", format!("job_id = {id}")),
    ];
    tables
        .iter()
        .map(|(table, filter)| {
            let rows = d1_rows(&d1(&format!("SELECT * FROM {table} WHERE {filter}")));
            let bytes = rows
                .iter()
                .flat_map(|row| row.as_object().expect("a row").values())
                .map(|value| match value {
                    Value::Null => 0,
                    Value::String(text) => text.len() as u64,
                    _ => 8,
                })
                .sum();
            ((*table).to_owned(), rows.len() as u64, bytes)
        })
        .collect()
}

pub fn without_archive(mut detail: Value) -> Value {
    detail
        .as_object_mut()
        .expect("the detail is an object")
        .remove("archive");
    detail
}

/// The keys of every object in the local R2 buckets of the server's state: wrangler's local R2
/// keeps them in one SQLite file per bucket (`v3/r2/miniflare-R2BucketObject/*.sqlite`, table
/// `_mf_objects`), read here read-only through python3's sqlite3.
pub fn r2_keys() -> Vec<String> {
    const READ: &str = r#"
import glob, sqlite3, sys
for path in sorted(glob.glob(sys.argv[1] + "/v3/r2/miniflare-R2BucketObject/*.sqlite")):
    db = sqlite3.connect("file:" + path + "?mode=ro", uri=True)
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    if "_mf_objects" in tables:
        for (key,) in db.execute("SELECT key FROM _mf_objects"):
            print(key)
"#;
    let output = std::process::Command::new("python3")
        .args(["-c", READ, &crate::state_dir()])
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "reading the local R2 objects: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}
