//! What the protocol crate refuses to do itself: read the clock, draw randomness, and read the
//! Worker's configuration.

use edgerunner_protocol::stable_json::sha256_hex;

use crate::error::{ApiError, ApiResult};

pub(crate) fn now_ms() -> i64 {
    // Date.now() is a whole number of milliseconds well inside f64's exact range.
    worker::Date::now().as_millis() as i64
}

/// The offset from now of instant `at` (epoch ms), never negative: worker 0.8's `set_alarm`
/// reads a duration as "ms from now", so an alarm's instant is passed as this.
pub(crate) fn alarm_delay(at: i64) -> std::time::Duration {
    std::time::Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0))
}

pub(crate) fn random_bytes<const N: usize>() -> ApiResult<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| ApiError::internal(format!("no randomness: {e}")))?;
    Ok(bytes)
}

/// A fresh identifier such as `run_3f9a…` (96 random bits: collisions are not a concern).
pub(crate) fn random_id(prefix: &str) -> ApiResult<String> {
    Ok(format!("{prefix}_{}", hex(&random_bytes::<12>()?)))
}

/// A fresh secret such as `erk_…` (256 random bits), to be shown once and stored hashed.
pub(crate) fn random_secret(prefix: &str) -> ApiResult<String> {
    Ok(format!("{prefix}_{}", hex(&random_bytes::<32>()?)))
}

pub(crate) fn secret_hash(secret: &str) -> String {
    sha256_hex(secret.as_bytes()).as_str().to_owned()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn rfc3339(ms: i64) -> Option<String> {
    edgerunner_protocol::time::UnixMillis::new(ms)
        .ok()
        .map(|t| t.to_rfc3339())
}

/// The Worker's own wasm linear memory in bytes (`memory.buffer.byteLength`). It only grows:
/// a reading is the high-water mark of everything this isolate has served. For the bench build.
#[cfg(feature = "bench-floor")]
pub(crate) fn wasm_memory_bytes() -> u64 {
    #[cfg(target_arch = "wasm32")]
    let pages = core::arch::wasm32::memory_size(0) as u64;
    #[cfg(not(target_arch = "wasm32"))]
    let pages = 0;
    pages * 65_536
}

/// A whole-number setting from the Worker's `[vars]`: `default` when unset, and when set to
/// something that is not a number of at least `min` (said in the log, so a typo is visible).
pub(crate) fn setting(env: &worker::Env, name: &str, default: i64, min: i64) -> i64 {
    let Ok(value) = env.var(name) else {
        return default;
    };
    let text = value.to_string();
    match text.trim().parse::<i64>() {
        Ok(n) if n >= min => n,
        _ => {
            worker::console_warn!(
                "{name}={text:?} is not a whole number >= {min}; using {default}"
            );
            default
        }
    }
}

/// Whether this Worker runs as a local test server: `EDGERUNNER_LOCAL_HOOKS=1`, which only the
/// repository's scripts write (into the `.dev.vars` of `wrangler dev`), never `wrangler.toml`.
/// It lets a test shorten what production waits out (the archive's grace period); a deployment
/// must never set it (SECURITY.md).
pub(crate) fn local_hooks(env: &worker::Env) -> bool {
    env.var(LOCAL_HOOKS)
        .map(|value| value.to_string().trim() == "1")
        .unwrap_or(false)
}

/// The variable [`local_hooks`] reads.
pub(crate) const LOCAL_HOOKS: &str = "EDGERUNNER_LOCAL_HOOKS";

/// A whole-number setting honoured only on a local test server ([`local_hooks`]): `default`
/// anywhere else, whatever the variable says (said in the log when it is set there).
pub(crate) fn local_setting(env: &worker::Env, name: &str, default: i64, min: i64) -> i64 {
    if local_hooks(env) {
        return setting(env, name, default, min);
    }
    if env.var(name).is_ok() {
        worker::console_warn!("{name} is honoured only with {LOCAL_HOOKS}=1; using {default}");
    }
    default
}
