//! The API document against the running server: it is served as committed, every operation it
//! lists is served (no route answers the router's `404` or `405` for it), every documented path
//! refuses the methods it does not list with `405` and the listed ones in `Allow`, and a path it
//! does not have is `404`. Each answer here also passes through `contract::check` (in `send`),
//! so each operation's refusal of a request without a credential or body is checked against
//! the statuses and codes the document lists for it.

use edgerunner_e2e::contract::{path_template, spec};
use edgerunner_e2e::{base_url, call_at, client, fresh_address, repo_root, send, Reply};
use reqwest::Method;
use serde_json::{json, Value};

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];
/// Methods no route answers anywhere: refused on a documented path with that path's `Allow`.
const FOREIGN_METHODS: [&str; 2] = ["OPTIONS", "PROPFIND"];

/// Each documented operation as (method, path template).
fn operations() -> Vec<(String, String)> {
    let mut ops = Vec::new();
    for (path, item) in spec()["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            if METHODS.contains(&method.as_str()) || method == "head" {
                ops.push((method.clone(), path.clone()));
            }
        }
    }
    ops
}

/// A concrete path for a template: each `{name}` becomes a plausible id nothing has.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|seg| {
            if seg.starts_with('{') {
                "zz_contract_probe"
            } else {
                seg
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A request without a credential; `{}` as the body where the method takes one.
async fn probe(method: &str, path: &str) -> Reply {
    let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).expect("a method");
    let mut request = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
        .request(method.clone(), format!("{}{path}", base_url()))
        .header("CF-Connecting-IP", fresh_address());
    if matches!(method, Method::POST | Method::PUT | Method::PATCH) {
        request = request
            .header("content-type", "application/json")
            .body("{}");
    }
    send(format!("{method} {path}"), request).await
}

fn is_router_refusal(reply: &Reply) -> bool {
    let code = serde_json::from_str::<Value>(&reply.text)
        .ok()
        .and_then(|b| b["error"]["code"].as_str().map(str::to_owned));
    match (reply.status, code.as_deref()) {
        (405, Some("METHOD_NOT_ALLOWED")) => true,
        (404, Some("NOT_FOUND")) => reply.text.contains("no such route"),
        _ => false,
    }
}

#[tokio::test]
async fn the_document_is_served_as_committed_without_a_credential() {
    let reply = send(
        "GET /openapi.json".to_owned(),
        client().get(format!("{}/openapi.json", base_url())),
    )
    .await;
    let served = reply.expect(200);
    assert_eq!(reply.content_type(), "application/json");
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("docs/openapi.json")).expect("the document"),
    )
    .expect("JSON");
    assert_eq!(
        served, committed,
        "the served document differs from docs/openapi.json"
    );
    assert_eq!(served["openapi"], "3.1.0");
}

#[tokio::test]
async fn every_documented_operation_is_served() {
    let ops = operations();
    assert!(ops.len() > 45, "{} operations", ops.len());
    let mut unrouted = Vec::new();
    for (method, template) in &ops {
        let path = concrete(template);
        let reply = probe(method, &path).await;
        if is_router_refusal(&reply) {
            unrouted.push(format!("{method} {template}: {reply:?}"));
        }
    }
    assert!(
        unrouted.is_empty(),
        "documented but not served:\n{}",
        unrouted.join("\n")
    );
}

#[tokio::test]
async fn a_method_the_document_does_not_list_for_a_path_is_405_with_the_listed_ones() {
    let paths = spec()["paths"].as_object().expect("paths");
    for (template, item) in paths {
        let path = concrete(template);
        // The methods the router will consult: those of the path OpenAPI matches for `path`.
        let applied = path_template(spec(), &path).expect("a documented path matches itself");
        let listed: Vec<String> = paths[&applied]
            .as_object()
            .expect("a path item")
            .keys()
            .filter(|m| METHODS.contains(&m.as_str()) || *m == "head")
            .map(|m| m.to_ascii_uppercase())
            .collect();
        assert_eq!(&applied, template, "{template} is shadowed by {applied}");
        let undocumented = METHODS
            .iter()
            .filter(|m| item.get(**m).is_none())
            .copied()
            .chain(FOREIGN_METHODS);
        for method in undocumented {
            let reply = probe(method, &path).await;
            reply.expect_error(405, "METHOD_NOT_ALLOWED");
            let allow = reply.header("allow");
            // HEAD is answered wherever GET is.
            let mut expected = listed.clone();
            if expected.iter().any(|m| m == "GET") {
                expected.push("HEAD".to_owned());
            }
            expected.sort();
            assert_eq!(allow, expected.join(", "), "{method} {template}: {reply:?}");
        }
    }
}

#[tokio::test]
async fn a_path_the_document_does_not_have_is_404() {
    for path in [
        "/api/remote-runners/jobs/a/b/c/d/e",
        "/api/nothing",
        "/api/remote-runners/zz/zz/zz",
    ] {
        let reply = call_at(&base_url(), Method::GET, path, None, Some(&json!({}))).await;
        reply.expect_error(404, "NOT_FOUND");
    }
}
