//! A control group per job, where the runner may create one (Linux).
//!
//! A subreaper keeps every process a job starts under the job's launcher, but a cgroup holds
//! them by membership: a process cannot leave it by `setsid`, a double fork or a dead parent,
//! and the kernel counts what they use together. So where the host lets the runner create
//! cgroups below its own, each job gets one in each hierarchy that serves ([`Places`]):
//!
//! - the unified (v2) hierarchy: membership, and `cgroup.kill` ends every process in it at
//!   once; its memory controller, where the runner's cgroup hands it down, limits the job's
//!   memory (`memory.max`, no swap);
//! - the v1 `memory` hierarchy, on hybrid hosts: `memory.limit_in_bytes` (and the same for
//!   memory and swap together, where the kernel accounts swap).
//!
//! The launcher creates the job's cgroups and joins them before it starts the job's shell
//! ([`enter`]), so that the shell and everything it starts are born inside; the runner, which
//! stays outside, ends them once the launcher is done ([`end`]): every process left in them is
//! killed, the kernel's count of processes it killed for memory (`oom_kill`) is read, and the
//! directories are removed. Where none of this is allowed the subreaper alone holds, and the
//! memory limit is the per-process `RLIMIT_AS`; the runner's record says which (see
//! [`crate::isolation::HostIsolation`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Where this process's cgroups are, in each hierarchy the runner uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Places {
    /// This process's cgroup directory in the unified (v2) hierarchy.
    pub unified: Option<PathBuf>,
    /// This process's cgroup directory in a v1 hierarchy with the `memory` controller.
    pub memory_v1: Option<PathBuf>,
}

impl Places {
    /// The directories a job's cgroups are created in, unified first.
    pub fn bases(&self) -> Vec<PathBuf> {
        self.unified
            .iter()
            .chain(self.memory_v1.iter())
            .cloned()
            .collect()
    }
}

/// Reads where this process's cgroups are from `/proc/self/mountinfo` and `/proc/self/cgroup`
/// (none on a host without them).
pub fn places() -> Places {
    match (
        std::fs::read_to_string("/proc/self/mountinfo"),
        std::fs::read_to_string("/proc/self/cgroup"),
    ) {
        (Ok(mountinfo), Ok(cgroup)) => places_in(&mountinfo, &cgroup),
        _ => Places::default(),
    }
}

/// One cgroup mount: its root within the hierarchy and where it is mounted.
struct Mount<'a> {
    root: &'a str,
    point: &'a str,
}

/// The places, from the text of `/proc/self/mountinfo` and `/proc/self/cgroup`.
pub fn places_in(mountinfo: &str, cgroup: &str) -> Places {
    let mut unified_mount = None;
    let mut memory_mount = None;
    for line in mountinfo.lines() {
        // `id parent dev root point options [optional…] - fstype source super-options`
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = before.split(' ').collect();
        let (Some(root), Some(point)) = (fields.get(3), fields.get(4)) else {
            continue;
        };
        let mount = Mount { root, point };
        let mut after = after.split(' ');
        match (after.next(), after.nth(1)) {
            (Some("cgroup2"), _) if unified_mount.is_none() => unified_mount = Some(mount),
            (Some("cgroup"), Some(options))
                if memory_mount.is_none() && options.split(',').any(|o| o == "memory") =>
            {
                memory_mount = Some(mount);
            }
            _ => {}
        }
    }
    let mut places = Places::default();
    for line in cgroup.lines() {
        // `hierarchy-id:controllers:path`; the unified hierarchy is `0::path`.
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            places.unified = unified_mount.as_ref().and_then(|mount| inside(mount, path));
        } else if controllers.split(',').any(|c| c == "memory") {
            places.memory_v1 = memory_mount.as_ref().and_then(|mount| inside(mount, path));
        }
    }
    places
}

/// The directory of cgroup `path` under `mount`; none when the path is not below the mount's
/// root (a cgroup namespace's view from outside it).
fn inside(mount: &Mount<'_>, path: &str) -> Option<PathBuf> {
    let relative = if mount.root == "/" {
        path
    } else {
        path.strip_prefix(mount.root)?
    };
    if relative.split('/').any(|part| part == "..") {
        return None;
    }
    let relative = relative.trim_start_matches('/');
    let point = Path::new(mount.point);
    Some(if relative.is_empty() {
        point.to_path_buf()
    } else {
        point.join(relative)
    })
}

/// Creates each of `dirs` (a job's cgroups; one left empty by an earlier run is taken over),
/// limits its memory to `memory_bytes` where its controller is there, and moves this process
/// into it. Returns whether a memory limit was set in some cgroup.
pub fn enter(dirs: &[PathBuf], memory_bytes: Option<u64>) -> Result<bool, String> {
    let mut limited = false;
    for dir in dirs {
        match std::fs::create_dir(dir) {
            Ok(()) => {}
            Err(error)
                if error.kind() == std::io::ErrorKind::AlreadyExists
                    && members(dir).is_some_and(|pids| pids.is_empty()) => {}
            Err(error) => return Err(format!("cgroup {}: {error}", dir.display())),
        }
        if let Some(bytes) = memory_bytes {
            limited |= limit_memory(dir, bytes)?;
        }
        write(&dir.join("cgroup.procs"), &std::process::id().to_string())?;
    }
    Ok(limited)
}

fn write(file: &Path, text: &str) -> Result<(), String> {
    std::fs::write(file, text).map_err(|error| format!("{}: {error}", file.display()))
}

/// Sets the memory limit of cgroup `dir` where it has the controller (v2 `memory.max`, v1
/// `memory.limit_in_bytes`), swap included where the kernel accounts it.
fn limit_memory(dir: &Path, bytes: u64) -> Result<bool, String> {
    let bytes = bytes.to_string();
    let v2 = dir.join("memory.max");
    if v2.exists() {
        write(&v2, &bytes)?;
        let swap = dir.join("memory.swap.max");
        if swap.exists() {
            write(&swap, "0")?;
        }
        return Ok(true);
    }
    let v1 = dir.join("memory.limit_in_bytes");
    if v1.exists() {
        write(&v1, &bytes)?;
        // Memory and swap together, no more than memory alone (set after it: it may not be
        // below it).
        let with_swap = dir.join("memory.memsw.limit_in_bytes");
        if with_swap.exists() {
            write(&with_swap, &bytes)?;
        }
        return Ok(true);
    }
    Ok(false)
}

/// The processes in cgroup `dir` (none when it cannot be read).
fn members(dir: &Path) -> Option<Vec<i32>> {
    let text = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    Some(
        text.lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect(),
    )
}

/// The count after `oom_kill` in a `memory.events` (v2) or `memory.oom_control` (v1) text.
pub fn oom_kills_in(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, count) = line.split_once(' ')?;
        (name == "oom_kill").then(|| count.trim().parse().ok())?
    })
}

/// What [`end`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ended {
    /// Processes of the job the kernel killed at its memory limit.
    pub oom_kills: u64,
    /// Cgroups that could not be removed (a process in them outlived every kill).
    pub left: Vec<PathBuf>,
}

/// The most rounds [`end`] kills and waits for a cgroup to empty: 10 ms apart, 5 s in all.
const END_ROUNDS: u32 = 500;
const END_PAUSE: Duration = Duration::from_millis(10);

/// Ends a job's cgroups (the caller is outside them): kills every process left in each
/// (`cgroup.kill`, or each member by pid), reads how many the kernel killed for memory, and
/// removes them, within a bounded wait. Blocking.
pub fn end(dirs: &[PathBuf]) -> Ended {
    let mut ended = Ended::default();
    for dir in dirs {
        if !dir.exists() {
            continue;
        }
        for file in ["memory.events", "memory.oom_control"] {
            if let Some(count) = std::fs::read_to_string(dir.join(file))
                .ok()
                .and_then(|text| oom_kills_in(&text))
            {
                ended.oom_kills += count;
            }
        }
        let mut removed = false;
        for _ in 0..END_ROUNDS {
            let pids = members(dir).unwrap_or_default();
            if pids.is_empty() && std::fs::remove_dir(dir).is_ok() {
                removed = true;
                break;
            }
            if std::fs::write(dir.join("cgroup.kill"), "1").is_err() {
                for pid in pids {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
            std::thread::sleep(END_PAUSE);
        }
        if !removed {
            ended.left.push(dir.clone());
        }
    }
    ended
}

/// The runner whose cgroup `name` is (`edgerunner-job-<pid>-<n>` or `edgerunner-probe-<pid>`).
pub fn runner_of(name: &str) -> Option<i32> {
    let rest = name
        .strip_prefix("edgerunner-job-")
        .and_then(|rest| rest.split_once('-'))
        .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .map(|(pid, _)| pid)
        .or_else(|| name.strip_prefix("edgerunner-probe-"))?;
    rest.parse().ok().filter(|pid| *pid > 0)
}

/// Removes the empty job cgroups in `bases` that runners no longer running left behind (a
/// runner killed outright cannot remove its own); returns how many. A cgroup that still holds
/// a process is never removed (the kernel refuses), nor one of a runner still running.
pub fn sweep_stale(bases: &[PathBuf]) -> usize {
    let mut removed = 0;
    for base in bases {
        let Ok(entries) = std::fs::read_dir(base) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok).take(MAX_STALE_SCAN) {
            let name = entry.file_name();
            let Some(runner) = name.to_str().and_then(runner_of) else {
                continue;
            };
            if Path::new(&format!("/proc/{runner}")).exists() {
                continue;
            }
            if std::fs::remove_dir(entry.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// The most entries of one base [`sweep_stale`] looks at.
const MAX_STALE_SCAN: usize = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn a_hybrid_host_gives_the_unified_and_the_v1_memory_directory() {
        let cgroup = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/84c7\n1:cpu:/\n0::/\n";
        let places = places_in(HYBRID_MOUNTS, cgroup);
        assert_eq!(
            places.unified,
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            places.memory_v1,
            Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/84c7"))
        );
        assert_eq!(places.bases().len(), 2);
    }

    #[test]
    fn a_pure_v2_host_gives_the_service_directory_and_no_v1() {
        let mounts =
            "25 20 0:23 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        let cgroup = "0::/system.slice/edgerunner.service\n";
        let places = places_in(mounts, cgroup);
        assert_eq!(
            places.unified,
            Some(PathBuf::from(
                "/sys/fs/cgroup/system.slice/edgerunner.service"
            ))
        );
        assert_eq!(places.memory_v1, None);
    }

    #[test]
    fn a_mount_of_a_subtree_maps_paths_below_it_and_nothing_outside() {
        let mounts = "25 20 0:23 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let below = places_in(mounts, "0::/kubepods/pod1/runner\n");
        assert_eq!(below.unified, Some(PathBuf::from("/sys/fs/cgroup/runner")));
        let at = places_in(mounts, "0::/kubepods/pod1\n");
        assert_eq!(at.unified, Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(places_in(mounts, "0::/elsewhere\n").unified, None);
        assert_eq!(places_in(mounts, "0::/kubepods/pod1/../x\n").unified, None);
        // No cgroup mounts, or text that is not what the kernel writes: nothing.
        assert_eq!(places_in("", "0::/\n"), Places::default());
        assert_eq!(places_in("garbage", "garbage"), Places::default());
    }

    #[test]
    fn the_kernels_memory_kills_are_read_from_either_file() {
        let v2 = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(oom_kills_in(v2), Some(1));
        assert_eq!(oom_kills_in(v1), Some(3));
        assert_eq!(oom_kills_in("oom 2\n"), None);
        assert_eq!(oom_kills_in("oom_kill x\n"), None);
    }

    #[test]
    fn a_cgroup_name_says_whose_it_is_and_others_are_left_alone() {
        assert_eq!(runner_of("edgerunner-job-4242-7"), Some(4242));
        assert_eq!(runner_of("edgerunner-probe-99"), Some(99));
        for other in [
            "edgerunner-job-4242",
            "edgerunner-job-4242-",
            "edgerunner-job-x-1",
            "edgerunner-job-0-1",
            "edgerunner-probe-",
            "system.slice",
            "edgerunner-job--1-2",
        ] {
            assert_eq!(runner_of(other), None, "{other}");
        }
    }
}
