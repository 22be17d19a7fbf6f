//! What the launcher tests share: `sleep` arguments no other process on the host has, and the
//! processes running one.

/// A `sleep` argument no other process on this host has (from `base`, which each test binary
/// picks apart from the others').
pub(crate) fn unique_seconds(base: u64) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}",
        base + u64::from(nanos) % 1_000_000 + u64::from(std::process::id())
    )
}

/// The pids of every `sleep SECONDS` running on the host.
pub(crate) fn running(seconds: &str) -> Vec<i32> {
    let wanted = format!("sleep\0{seconds}\0").into_bytes();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .collect()
}
