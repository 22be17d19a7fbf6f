//! A hostile server, or anyone between the runner and the server, cannot grow the runner's
//! memory without bound or crash it. The test puts a server of its own between the real CLI
//! runner and the real server: it passes every request through, except that it answers the
//! job's input with a body that never ends. The runner must stop reading at its bound
//! (16 MiB), hand the job back without running it, and go on to exit as asked.
//!
//! (A signed envelope's numbers, `wallSeconds` near `u64::MAX` among them, need the runner's
//! signing key, which only the server holds: the runner's own tests sign such an envelope in
//! their server double, `hostile.rs`.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::job_env::{run_runner, shown, succeeded};

/// The runner's bound on one answer.
const ANSWER_BOUND: u64 = 16 * 1024 * 1024;
/// What the hostile answer sends at most, were the runner to read on: far past the bound.
const ENDLESS: u64 = 1024 * 1024 * 1024;
const HEAD_LINES: usize = 100;
const BODY_BOUND: usize = 64 * 1024 * 1024;

/// A server between the runner and the real one. `hostile`: the job input's answer never
/// ends. Counts the hostile answers it began and the bytes it managed to send in them.
struct Between {
    url: String,
    answers: Arc<AtomicU64>,
    sent: Arc<AtomicU64>,
}

impl Between {
    async fn start(hostile: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let answers = Arc::new(AtomicU64::new(0));
        let sent = Arc::new(AtomicU64::new(0));
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a client");
        let (counted, bytes) = (Arc::clone(&answers), Arc::clone(&sent));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (client, counted, bytes) =
                    (client.clone(), Arc::clone(&counted), Arc::clone(&bytes));
                tokio::spawn(async move {
                    let _ = serve(stream, &client, hostile, &counted, &bytes).await;
                });
            }
        });
        Self { url, answers, sent }
    }
}

/// One request on `stream` (the answer closes the connection): passed through to the real
/// server, or for the job's input when `hostile`, answered without end.
async fn serve(
    stream: TcpStream,
    client: &reqwest::Client,
    hostile: bool,
    answers: &AtomicU64,
    sent: &AtomicU64,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default().to_owned(),
        parts.next().unwrap_or_default().to_owned(),
    );
    let mut headers = Vec::new();
    let mut length = 0usize;
    for _ in 0..HEAD_LINES {
        line.clear();
        reader.read_line(&mut line).await?;
        let Some((name, value)) = line.trim_end().split_once(':') else {
            break;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_owned());
        if name == "content-length" {
            length = value.parse().unwrap_or(0).min(BODY_BOUND);
        }
        if ![
            "host",
            "connection",
            "content-length",
            "transfer-encoding",
            "keep-alive",
        ]
        .contains(&name.as_str())
        {
            headers.push((name, value));
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await?;
    let mut stream = reader.into_inner();

    if hostile && method == "GET" && path.ends_with("/input") {
        answers.fetch_add(1, Ordering::Relaxed);
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"padding\":\"")
            .await?;
        let block = vec![b'x'; 64 * 1024];
        while sent.load(Ordering::Relaxed) < ENDLESS {
            stream.write_all(&block).await?;
            sent.fetch_add(block.len() as u64, Ordering::Relaxed);
        }
        return Ok(());
    }

    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::GET);
    let mut request = client.request(method, format!("{}{path}", base_url()));
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    let answer = request
        .body(body)
        .send()
        .await
        .map_err(std::io::Error::other)?;
    let status = answer.status();
    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for (name, value) in answer.headers() {
        if ![
            "connection",
            "content-length",
            "transfer-encoding",
            "keep-alive",
        ]
        .contains(&name.as_str())
        {
            head.push_str(&format!(
                "{name}: {}\r\n",
                value.to_str().unwrap_or_default()
            ));
        }
    }
    let body = answer.bytes().await.map_err(std::io::Error::other)?;
    head.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.shutdown().await
}

/// One organization, its runner's environment pointed at `between`, and one queued job.
async fn job_behind(name: &str, between: &Between) -> (Org, Vec<(&'static str, String)>, String) {
    let org = bootstrap_org(name);
    let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
    let (runner, token) = register_runner(&org.admin_key, &registration(name)).await;
    let run_id = evaluation_run(&org.admin_key).await;
    let input = json!({"evaluationRunId": run_id.to_json()});
    let job_id =
        id_of(&enqueue_job(&org.admin_key, &release, &input, &requirements("prompt")).await);
    let env = vec![
        ("EVALGATE_BASE_URL", between.url.clone()),
        ("EVALGATE_RUNNER_ID", id_of(&runner)),
        ("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", token),
    ];
    (org, env, job_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_answer_is_read_to_the_bound_only_and_the_job_is_handed_back_unrun() {
    // The control: through a server between that passes everything, the job runs.
    let honest = Between::start(false).await;
    let (org, env, job_id) = job_behind("attack-between-honest", &honest).await;
    let scratch = Scratch::new("between");
    let project = scratch.dir("project");
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ran = run_runner(&scratch, &project, &["--exec", "echo ran"], &env_ref).await;
    succeeded(&org, &job_id, &ran).await;

    let hostile = Between::start(true).await;
    let (org, env, job_id) = job_behind("attack-between-hostile", &hostile).await;
    let marker = scratch.path("ran");
    let command = format!("touch '{}'", marker.display());
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let output = run_runner(&scratch, &project, &["--exec", &command], &env_ref).await;
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}", shown(&output));
    assert!(!said.contains("panicked"), "{said}");
    assert!(said.contains("larger than 16777216 bytes"), "{said}");
    assert!(
        !marker.exists(),
        "the command ran on an input it could not read"
    );

    // The runner stopped reading each endless answer at its bound (what the sockets buffer
    // besides, at most as much again), never the gigabyte it was offered.
    let answers = hostile.answers.load(Ordering::Relaxed);
    let sent = hostile.sent.load(Ordering::Relaxed);
    assert!(answers >= 1, "the input was never asked for: {said}");
    assert!(
        sent <= answers * 2 * ANSWER_BOUND,
        "{sent} bytes sent in {answers} answers: the runner read past its bound"
    );
    let job = job(&org.admin_key, &job_id).await;
    assert_ne!(job["state"], "succeeded", "{job}");
    assert_ne!(job["state"], "running", "handed back, not held: {job}");
}
