//! A runner's files about itself: bounded in number and bytes, so one runner cannot fill the
//! database every organization shares; and listed in pages.

use std::collections::BTreeSet;

use edgerunner_e2e::*;
use serde_json::Value;

/// `MAX_RUNNER_FILES` and `MAX_RUNNER_FILE_BYTES` in src/store/runners.rs (docs/API.md).
const MAX_FILES: usize = 100;
const MAX_BYTES: usize = 4 * 1024 * 1024;
/// The per-file cap (`413 FILE_TOO_LARGE` past it).
const MAX_FILE_BYTES: usize = 256 * 1024;

async fn upload(credential: &str, name: &str, content: Vec<u8>) -> Reply {
    put_raw(
        &format!("/api/remote-runners/self/files/{name}"),
        credential,
        content,
    )
    .await
}

async fn runner_with_session(name: &str) -> (Org, String, String) {
    let org = bootstrap_org(name);
    let (runner_id, token) = register_simple_runner(&org, name).await;
    let credential = exchange(&runner_id, &token).await;
    (org, runner_id, credential)
}

fn stored_files(runner_id: &str) -> (u64, u64) {
    let answer = d1(&format!(
        "SELECT count(*) AS n, coalesce(sum(length(CAST(content AS BLOB))), 0) AS bytes \
         FROM runner_files WHERE runner_id = {}",
        sql_text(runner_id)
    ));
    let row = d1_rows(&answer)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no row in {answer}"));
    (
        row["n"].as_u64().unwrap_or_else(|| panic!("{answer}")),
        row["bytes"].as_u64().unwrap_or_else(|| panic!("{answer}")),
    )
}

#[tokio::test]
async fn a_runner_holds_at_most_100_files_and_may_still_replace_one() {
    let (_org, runner_id, credential) = runner_with_session("attacks-files-count").await;
    for i in 0..MAX_FILES {
        upload(&credential, &format!("f{i:03}.txt"), b"x".to_vec())
            .await
            .expect(200);
    }
    let refused = upload(&credential, "one-too-many.txt", b"x".to_vec()).await;
    refused.expect_error(409, "RUNNER_FILES_FULL");
    assert_eq!(
        stored_files(&runner_id).0,
        MAX_FILES as u64,
        "nothing written"
    );

    // Control: replacing a file by name is not a new file.
    let replaced = upload(&credential, "f050.txt", b"replaced".to_vec())
        .await
        .expect(200);
    assert_eq!(replaced["size"], 8, "{replaced}");
    assert_eq!(stored_files(&runner_id).0, MAX_FILES as u64);
    let record = runner_self(&credential).await.expect(200);
    let files = record["files"].as_array().cloned().unwrap_or_default();
    assert_eq!(files.len(), MAX_FILES, "the record lists every file");
    let f050 = files
        .iter()
        .find(|f| f["name"] == "f050.txt")
        .unwrap_or_else(|| panic!("f050.txt listed: {record}"));
    assert_eq!(f050["size"], 8, "{f050}");
}

#[tokio::test]
async fn a_runners_files_hold_at_most_4_mib_in_all() {
    let (_org, runner_id, credential) = runner_with_session("attacks-files-bytes").await;
    let full = MAX_BYTES / MAX_FILE_BYTES;
    for i in 0..full {
        upload(
            &credential,
            &format!("big{i:02}.log"),
            vec![b'a'; MAX_FILE_BYTES],
        )
        .await
        .expect(200);
    }
    assert_eq!(
        stored_files(&runner_id),
        (full as u64, MAX_BYTES as u64),
        "exactly at the cap is allowed"
    );
    // One byte more, in a new file, or by growing an existing one, is refused.
    upload(&credential, "tiny.txt", b"x".to_vec())
        .await
        .expect_error(409, "RUNNER_FILES_FULL");
    upload(&credential, "big00.log", vec![b'b'; MAX_FILE_BYTES + 1])
        .await
        .expect_error(413, "FILE_TOO_LARGE");
    assert_eq!(stored_files(&runner_id), (full as u64, MAX_BYTES as u64));

    // Control: shrinking one file (counted once, at its new size) makes room for another.
    upload(&credential, "big00.log", vec![b'c'; MAX_FILE_BYTES - 10])
        .await
        .expect(200);
    upload(&credential, "tiny.txt", vec![b'x'; 10])
        .await
        .expect(200);
    upload(&credential, "tinier.txt", b"x".to_vec())
        .await
        .expect_error(409, "RUNNER_FILES_FULL");
    assert_eq!(
        stored_files(&runner_id),
        (full as u64 + 1, MAX_BYTES as u64)
    );
}

/// Every page of `path` (`?limit=` as given), following `nextCursor`; the names in order.
async fn all_pages(path: &str, bearer: &str, limit: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    // Bounded: more pages than the files could fill is a loop.
    for _ in 0..=MAX_FILES {
        let query = match &cursor {
            Some(c) => format!("{path}?limit={limit}&cursor={c}"),
            None => format!("{path}?limit={limit}"),
        };
        let page = get(&query, bearer).await.expect(200);
        let files = page["files"].as_array().cloned().unwrap_or_default();
        assert!(files.len() <= limit, "{page}");
        names.extend(
            files
                .iter()
                .map(|f| f["name"].as_str().unwrap_or_default().to_owned()),
        );
        match &page["nextCursor"] {
            Value::String(next) => cursor = Some(next.clone()),
            Value::Null => return names,
            other => panic!("nextCursor is a string or null: {other}"),
        }
    }
    panic!("{path} did not end after {MAX_FILES} pages");
}

#[tokio::test]
async fn paging_a_runners_files_lists_each_exactly_once() {
    let (org, runner_id, credential) = runner_with_session("attacks-files-pages").await;
    let expected: BTreeSet<String> = (0..23).map(|i| format!("p{i:02}.txt")).collect();
    for name in &expected {
        upload(&credential, name, name.as_bytes().to_vec())
            .await
            .expect(200);
    }
    let expected: Vec<String> = expected.into_iter().collect();
    for limit in [1, 5, 23, 100] {
        let own = all_pages("/api/remote-runners/self/files", &credential, limit).await;
        assert_eq!(own, expected, "self, limit {limit}");
        let admin = all_pages(
            &format!("/api/remote-runners/{runner_id}/files"),
            &org.admin_key,
            limit,
        )
        .await;
        assert_eq!(admin, expected, "admin, limit {limit}");
    }
    // Bounds of the query, each refused with its code.
    let files = format!("/api/remote-runners/{runner_id}/files");
    for bad in ["0", "101", "x"] {
        get(&format!("{files}?limit={bad}"), &org.admin_key)
            .await
            .expect_error(422, "INVALID_LIMIT");
    }
    get(&format!("{files}?cursor=..%2Fx"), &org.admin_key)
        .await
        .expect_error(422, "INVALID_CURSOR");
    // Another organization sees no such runner.
    let other = bootstrap_org("attacks-files-pages-other");
    get(&files, &other.admin_key)
        .await
        .expect_error(404, "NOT_FOUND");
}
