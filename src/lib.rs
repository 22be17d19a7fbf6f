use worker::*;

#[event(fetch)]
async fn fetch(req: Request, _env: Env, _ctx: Context) -> Result<Response> {
    match req.path().as_str() {
        "/healthz" => Response::from_json(&serde_json::json!({"status": "ok"})),
        _ => Response::error("not found", 404),
    }
}
