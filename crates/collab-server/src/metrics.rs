//! Process-wide counters, exposed at `/metrics` in the Prometheus text
//! format (version 0.0.4). A tiny registry of atomics and label maps: SSH
//! sessions opened, exec verbs finished by outcome, lease operations by
//! outcome, HTTP responses by status. Anyone may count (`ssh_session_opened`,
//! `verb_finished`, `lease_op`, `http_request`); only `render` reads.
//!
//! Label values come from the server's own vocabulary (verb names, outcome
//! words, status codes), never from client input, so the label sets stay
//! small; they are escaped anyway.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

static SSH_SESSIONS: AtomicU64 = AtomicU64::new(0);
static VERBS: Mutex<BTreeMap<(String, String), u64>> = Mutex::new(BTreeMap::new());
static LEASE_OPS: Mutex<BTreeMap<(String, String), u64>> = Mutex::new(BTreeMap::new());
static HTTP_REQUESTS: Mutex<BTreeMap<u16, u64>> = Mutex::new(BTreeMap::new());
static REFUSED: Mutex<BTreeMap<(&'static str, &'static str), u64>> = Mutex::new(BTreeMap::new());
static WATCHERS: AtomicU64 = AtomicU64::new(0);
static COMMANDS_RUNNING: AtomicU64 = AtomicU64::new(0);
static SSH_IDLE_CLOSED: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());
static WEBHOOK_DELIVERIES: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
static WEBHOOK_QUEUE_DEPTH: AtomicU64 = AtomicU64::new(0);
static WEBHOOK_OLDEST_AGE: AtomicU64 = AtomicU64::new(0);
static PACK_CACHE_DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
static PACK_CACHE_STATS: Mutex<Option<crate::pack_cache::StatsReader>> = Mutex::new(None);
/// The pack cache's counters of the server process itself (smart HTTP
/// answers it sends from the cache without upload-pack).
static PACK_CACHE_SERVER: Mutex<crate::pack_cache::Stats> =
    Mutex::new(crate::pack_cache::Stats::EMPTY);
static MERGE_GROUPS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());
static MIRROR_SYNCS: Mutex<BTreeMap<(&'static str, &'static str), u64>> =
    Mutex::new(BTreeMap::new());

static LFS_UPLOADED: Mutex<(u64, u64)> = Mutex::new((0, 0));
/// git-lfs objects and bytes held, by repository name: public ones only
/// (the endpoint is unauthenticated and must not name private ones).
static LFS_STORED: Mutex<BTreeMap<String, (u64, u64)>> = Mutex::new(BTreeMap::new());

/// A git-lfs session stored `objects` objects of `bytes` bytes in all.
pub fn lfs_uploaded(objects: u64, bytes: u64) {
    let mut total = LFS_UPLOADED.lock().unwrap_or_else(|e| e.into_inner());
    total.0 += objects;
    total.1 += bytes;
}

/// What the public repository `repo` holds in git-lfs objects now.
pub fn lfs_stored(repo: &str, objects: u64, bytes: u64) {
    LFS_STORED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(repo.to_string(), (objects, bytes));
}

/// A per-repository git-lfs series: name, help, and which of (objects,
/// bytes) it shows.
type LfsSeries = (&'static str, &'static str, fn(&(u64, u64)) -> u64);

fn render_lfs(out: &mut String) {
    let (objects, bytes) = *LFS_UPLOADED.lock().unwrap_or_else(|e| e.into_inner());
    let _ = writeln!(
        out,
        "# HELP git_collab_lfs_uploaded_objects_total git-lfs objects stored since the server started.\n\
         # TYPE git_collab_lfs_uploaded_objects_total counter\n\
         git_collab_lfs_uploaded_objects_total {objects}\n\
         # HELP git_collab_lfs_uploaded_bytes_total Bytes of git-lfs objects stored since the server started.\n\
         # TYPE git_collab_lfs_uploaded_bytes_total counter\n\
         git_collab_lfs_uploaded_bytes_total {bytes}"
    );
    let stored = LFS_STORED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let series: [LfsSeries; 2] = [
        (
            "git_collab_repo_lfs_objects",
            "git-lfs objects the repository holds, as of its last upload (public repositories).",
            |s| s.0,
        ),
        (
            "git_collab_repo_lfs_bytes",
            "Bytes of git-lfs objects the repository holds, as of its last upload (public repositories).",
            |s| s.1,
        ),
    ];
    for (name, help, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (repo, s) in &stored {
            let _ = writeln!(out, "{name}{{repo=\"{}\"}} {}", label(repo), value(s));
        }
    }
}

/// Where the pack cache's hooks leave their counters (set once at start).
pub fn set_pack_cache_dir(dir: std::path::PathBuf) {
    let _ = PACK_CACHE_DIR.set(dir);
}

/// The pack cache's counters now (zero when it is off).
pub fn pack_cache_stats() -> crate::pack_cache::Stats {
    let Some(dir) = PACK_CACHE_DIR.get() else {
        return crate::pack_cache::Stats::default();
    };
    let mut reader = PACK_CACHE_STATS.lock().unwrap_or_else(|e| e.into_inner());
    let mut stats = reader.get_or_insert_with(Default::default).read(dir);
    let own = PACK_CACHE_SERVER.lock().unwrap_or_else(|e| e.into_inner());
    stats.merge(&own);
    stats
}

/// Count `name` (`hit`, `direct`, `bytes_from_cache`, `corrupt`, …) for
/// the pack cache, from the server process.
pub fn pack_cache(name: &str, by: u64) {
    let mut own = PACK_CACHE_SERVER.lock().unwrap_or_else(|e| e.into_inner());
    own.add(name, by as i64);
}

fn render_pack_cache(out: &mut String) {
    let s = pack_cache_stats();
    for (name, kind, help, value) in [
        (
            "git_collab_pack_cache_hits_total",
            "counter",
            "upload-pack requests served from the pack cache or a concurrent producer.",
            s.hits as i64,
        ),
        (
            "git_collab_pack_cache_misses_total",
            "counter",
            "upload-pack requests that ran pack-objects.",
            s.misses as i64,
        ),
        (
            "git_collab_pack_cache_bytes_served_total",
            "counter",
            "Pack bytes served from the pack cache or a concurrent producer.",
            s.bytes_from_cache as i64,
        ),
        (
            "git_collab_pack_objects_runs_total",
            "counter",
            "git pack-objects runs started by the pack cache hook.",
            s.pack_objects as i64,
        ),
        (
            "git_collab_pack_cache_corrupt_total",
            "counter",
            "Cached packs that failed their checksum and were regenerated.",
            s.corrupt as i64,
        ),
        (
            "git_collab_pack_cache_evicted_total",
            "counter",
            "Cached packs removed to stay under git.pack_cache_max_size.",
            s.evicted as i64,
        ),
        (
            "git_collab_pack_cache_direct_total",
            "counter",
            "Protocol v2 fetches (smart HTTP and SSH) the server answered from a cached response, without upload-pack.",
            s.direct as i64,
        ),
        (
            "git_collab_pack_cache_ref_lists_total",
            "counter",
            "Protocol v2 ls-refs requests (smart HTTP and SSH) the server answered from a cached response, without upload-pack.",
            s.ref_lists as i64,
        ),
        (
            "git_collab_pack_cache_advertisements_total",
            "counter",
            "Ref advertisements (GET info/refs, and the capabilities of a v2 conversation over SSH) the server sent from a cached one, without upload-pack.",
            s.advertisements as i64,
        ),
        (
            "git_collab_pack_cache_producers",
            "gauge",
            "pack-objects runs producing a shared pack now.",
            s.producers,
        ),
        (
            "git_collab_pack_objects_queued",
            "gauge",
            "upload-pack requests waiting for a pack-objects slot now.",
            s.queued,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    for (name, help, micros) in [
        (
            "git_collab_pack_cache_hook_cpu_seconds_total",
            "CPU seconds of the pack cache hook processes themselves.",
            s.hook_cpu_us,
        ),
        (
            "git_collab_pack_objects_cpu_seconds_total",
            "CPU seconds of the git pack-objects runs the hook started.",
            s.pack_objects_cpu_us,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {:.6}",
            micros as f64 / 1e6
        );
    }
}

/// A merge group this node drives was built or ended: `event` `built`,
/// `merged`, `failed` or `stale` (thrown away: its CI run was wasted).
pub fn merge_group(event: &'static str) {
    bump(&MERGE_GROUPS, event);
}

/// A mirror sync on this node ended: `direction` `pull`/`push`, `outcome`
/// `ok`/`error`.
pub fn mirror_sync(direction: &'static str, outcome: &'static str) {
    bump(&MIRROR_SYNCS, (direction, outcome));
}

/// A webhook attempt ended with `outcome` (`delivered`, `failed`, `refused`).
pub fn webhook_delivery(outcome: &str) {
    bump(&WEBHOOK_DELIVERIES, outcome.to_string());
}

/// Events after the cursors of active subscriptions, and the age in seconds
/// of the oldest of them (0 when none waits).
pub fn set_webhook_backlog(depth: u64, oldest_age_secs: u64) {
    WEBHOOK_QUEUE_DEPTH.store(depth, Ordering::Relaxed);
    WEBHOOK_OLDEST_AGE.store(oldest_age_secs, Ordering::Relaxed);
}

/// The number of `collab-events watch` streams connected now.
pub fn set_watchers(n: u64) {
    WATCHERS.store(n, Ordering::Relaxed);
}

/// The number of exec commands running now (`shutdown::WorkTracker`):
/// SSH verbs and the verbs of MCP tool calls.
pub fn set_commands_running(n: u64) {
    COMMANDS_RUNNING.store(n, Ordering::Relaxed);
}

/// An SSH connection completed its handshake.
pub fn ssh_session_opened() {
    SSH_SESSIONS.fetch_add(1, Ordering::Relaxed);
}

/// An exec verb (`git-upload-pack`, `collab-lease acquire`, ...) finished
/// with `outcome` (`ok`, `error`, `refused`, ...).
pub fn verb_finished(verb: &str, outcome: &str) {
    bump(&VERBS, (verb.to_string(), outcome.to_string()));
}

/// A lease operation (`acquire`, `renew`, `release`, `list`) finished with
/// `outcome` (`acquired`, `held`, `error`, ...).
pub fn lease_op(op: &str, outcome: &str) {
    bump(&LEASE_OPS, (op.to_string(), outcome.to_string()));
}

/// The outcome label of an exec verb's exit status
/// (`collab_proto::exit`): 0 ok, 3 empty (`collab-lease next` found
/// nothing ready: an answer, not a failure), 4 conflict (a lease held by
/// someone else, a stale token), 5 busy (a lock held elsewhere past the
/// server's wait; the clients run it again), anything else error.
pub fn outcome_of_exit(code: u32) -> &'static str {
    use collab_proto::exit::{BUSY, CONFLICT, EMPTY};
    match code {
        0 => "ok",
        EMPTY => "empty",
        CONFLICT => "conflict",
        BUSY => "busy",
        _ => "error",
    }
}

pub fn http_request(status: u16) {
    bump(&HTTP_REQUESTS, status);
}

/// A resource limit refused something: `what` is the listener or pool
/// (`http`, `ssh`, `ssh_channel`, `git_process`, `page`), `limit` the
/// limit that was reached (`max_connections`, `per_ip`, ...).
pub fn refused(what: &'static str, limit: &'static str) {
    bump(&REFUSED, (what, limit));
}

/// An idle authenticated SSH connection was closed: `why` is
/// `idle_timeout` or `pressure` (near the connection cap).
pub fn ssh_idle_closed(why: &'static str) {
    bump(&SSH_IDLE_CLOSED, why);
}

fn bump<K: Ord>(map: &Mutex<BTreeMap<K, u64>>, key: K) {
    // A poisoned map only means a panic elsewhere mid-increment: keep counting.
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    *map.entry(key).or_insert(0) += 1;
}

fn snapshot<K: Ord + Clone>(map: &Mutex<BTreeMap<K, u64>>) -> BTreeMap<K, u64> {
    map.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// A label value with `\`, `"` and newlines escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Every counter in the Prometheus text exposition format.
pub fn render() -> String {
    let mut out = String::new();
    let header = |out: &mut String, name: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    };
    header(
        &mut out,
        "git_collab_ssh_sessions_total",
        "SSH connections that completed the handshake.",
    );
    let _ = writeln!(
        out,
        "git_collab_ssh_sessions_total {}",
        SSH_SESSIONS.load(Ordering::Relaxed)
    );
    header(
        &mut out,
        "git_collab_ssh_verbs_total",
        "SSH exec verbs finished, by verb and outcome.",
    );
    for ((verb, outcome), n) in snapshot(&VERBS) {
        let _ = writeln!(
            out,
            "git_collab_ssh_verbs_total{{verb=\"{}\",outcome=\"{}\"}} {n}",
            label(&verb),
            label(&outcome)
        );
    }
    header(
        &mut out,
        "git_collab_lease_operations_total",
        "Lease operations, by operation and outcome.",
    );
    for ((op, outcome), n) in snapshot(&LEASE_OPS) {
        let _ = writeln!(
            out,
            "git_collab_lease_operations_total{{op=\"{}\",outcome=\"{}\"}} {n}",
            label(&op),
            label(&outcome)
        );
    }
    header(
        &mut out,
        "git_collab_http_requests_total",
        "HTTP responses, by status code.",
    );
    for (status, n) in snapshot(&HTTP_REQUESTS) {
        let _ = writeln!(
            out,
            "git_collab_http_requests_total{{status=\"{status}\"}} {n}"
        );
    }
    header(
        &mut out,
        "git_collab_limit_refusals_total",
        "Connections, channels and requests refused by a resource limit.",
    );
    for ((what, limit), n) in snapshot(&REFUSED) {
        let _ = writeln!(
            out,
            "git_collab_limit_refusals_total{{what=\"{what}\",limit=\"{limit}\"}} {n}"
        );
    }
    header(
        &mut out,
        "git_collab_ssh_idle_closed_total",
        "Idle authenticated SSH connections closed, by why (idle_timeout, pressure).",
    );
    for (why, n) in snapshot(&SSH_IDLE_CLOSED) {
        let _ = writeln!(out, "git_collab_ssh_idle_closed_total{{why=\"{why}\"}} {n}");
    }
    let gauge = |out: &mut String, name: &str, help: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    header(
        &mut out,
        "git_collab_webhook_deliveries_total",
        "Webhook delivery attempts, by outcome (delivered, failed, refused).",
    );
    for (outcome, n) in snapshot(&WEBHOOK_DELIVERIES) {
        let _ = writeln!(
            out,
            "git_collab_webhook_deliveries_total{{outcome=\"{}\"}} {n}",
            label(&outcome)
        );
    }
    gauge(
        &mut out,
        "git_collab_webhook_queue_depth",
        "Events after the cursors of active webhook subscriptions (summed).",
        WEBHOOK_QUEUE_DEPTH.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "git_collab_webhook_oldest_undelivered_seconds",
        "Age of the oldest event not yet handled by an active subscription.",
        WEBHOOK_OLDEST_AGE.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "git_collab_event_watchers",
        "collab-events watch streams connected now.",
        WATCHERS.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "git_collab_commands_running",
        "Exec commands running now (SSH verbs and MCP tool calls' verbs).",
        COMMANDS_RUNNING.load(Ordering::Relaxed),
    );
    header(
        &mut out,
        "git_collab_mirror_syncs_total",
        "Mirror syncs run on this node, by direction and outcome.",
    );
    for ((direction, outcome), n) in snapshot(&MIRROR_SYNCS) {
        let _ = writeln!(
            out,
            "git_collab_mirror_syncs_total{{direction=\"{direction}\",outcome=\"{outcome}\"}} {n}"
        );
    }
    header(
        &mut out,
        "git_collab_merge_groups_total",
        "Merge groups this node built, merged, failed or threw away (stale), by event.",
    );
    for (event, n) in snapshot(&MERGE_GROUPS) {
        let _ = writeln!(
            out,
            "git_collab_merge_groups_total{{event=\"{event}\"}} {n}"
        );
    }
    render_maintenance(&mut out);
    render_lfs(&mut out);
    render_pack_cache(&mut out);
    out
}

/// The last maintenance run of one repository.
#[derive(Debug, Clone, Copy)]
struct MaintainedRepo {
    last_run: i64,
    seconds: f64,
    packs: u64,
    loose: u64,
}

/// A per-repository series: name, help, and how to read its value.
type Series = (&'static str, &'static str, fn(&MaintainedRepo) -> String);

/// Runs by (trigger, outcome), and their total seconds.
static MAINTENANCE_RUNS: Mutex<BTreeMap<(String, String), u64>> = Mutex::new(BTreeMap::new());
static MAINTENANCE_SECONDS: Mutex<f64> = Mutex::new(0.0);
/// Last run per repository, by name; `public` ones are rendered by name.
static MAINTAINED: Mutex<BTreeMap<String, (bool, MaintainedRepo)>> = Mutex::new(BTreeMap::new());

/// A maintenance run finished. `public_name` is the repository's name when
/// anonymous users may see it (only those get a series of their own: the
/// metrics endpoint is unauthenticated and must not reveal private names).
pub fn maintenance_finished(
    public_name: Option<&str>,
    private_key: &str,
    trigger: &str,
    outcome: &str,
    report: Option<&crate::maintenance::run::RunReport>,
) {
    bump(
        &MAINTENANCE_RUNS,
        (trigger.to_string(), outcome.to_string()),
    );
    let Some(report) = report else { return };
    *MAINTENANCE_SECONDS
        .lock()
        .unwrap_or_else(|e| e.into_inner()) += report.seconds;
    let repo = MaintainedRepo {
        last_run: report.started_at,
        seconds: report.seconds,
        packs: report.packs_after,
        loose: report.loose_after,
    };
    let mut map = MAINTAINED.lock().unwrap_or_else(|e| e.into_inner());
    let key = public_name.unwrap_or(private_key);
    map.insert(key.to_string(), (public_name.is_some(), repo));
}

fn render_maintenance(out: &mut String) {
    let _ = writeln!(
        out,
        "# HELP git_collab_maintenance_runs_total Repository maintenance runs, by trigger and outcome.\n\
         # TYPE git_collab_maintenance_runs_total counter"
    );
    for ((trigger, outcome), n) in snapshot(&MAINTENANCE_RUNS) {
        let _ = writeln!(
            out,
            "git_collab_maintenance_runs_total{{trigger=\"{}\",outcome=\"{}\"}} {n}",
            label(&trigger),
            label(&outcome)
        );
    }
    let seconds = *MAINTENANCE_SECONDS
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let _ = writeln!(
        out,
        "# HELP git_collab_maintenance_seconds_total Time spent in maintenance runs that finished.\n\
         # TYPE git_collab_maintenance_seconds_total counter\n\
         git_collab_maintenance_seconds_total {seconds:.3}"
    );
    let repos = MAINTAINED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let max_packs = repos.values().map(|(_, r)| r.packs).max().unwrap_or(0);
    let last_run = repos.values().map(|(_, r)| r.last_run).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "# HELP git_collab_maintenance_repos Repositories maintained since the server started.\n\
         # TYPE git_collab_maintenance_repos gauge\n\
         git_collab_maintenance_repos {}\n\
         # HELP git_collab_maintenance_max_packs Most packs any maintained repository has after its last run.\n\
         # TYPE git_collab_maintenance_max_packs gauge\n\
         git_collab_maintenance_max_packs {max_packs}\n\
         # HELP git_collab_maintenance_last_run_any_timestamp_seconds Start of the latest run on any repository.\n\
         # TYPE git_collab_maintenance_last_run_any_timestamp_seconds gauge\n\
         git_collab_maintenance_last_run_any_timestamp_seconds {last_run}",
        repos.len()
    );
    let public: Vec<_> = repos.iter().filter(|(_, (public, _))| *public).collect();
    let series: [Series; 4] = [
        (
            "git_collab_maintenance_last_run_timestamp_seconds",
            "Start of the repository's last maintenance run (public repositories).",
            |r| r.last_run.to_string(),
        ),
        (
            "git_collab_maintenance_last_duration_seconds",
            "Duration of the repository's last maintenance run (public repositories).",
            |r| format!("{:.3}", r.seconds),
        ),
        (
            "git_collab_repo_packs",
            "Packs in the repository after its last maintenance run (public repositories).",
            |r| r.packs.to_string(),
        ),
        (
            "git_collab_repo_loose_objects",
            "Loose objects in the repository after its last maintenance run (public repositories).",
            |r| r.loose.to_string(),
        ),
    ];
    for (name, help, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (repo, (_, r)) in &public {
            let _ = writeln!(out, "{name}{{repo=\"{}\"}} {}", label(repo), value(r));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_renders_prometheus_text() {
        // Labels no other test uses: tests share the process-wide registry.
        ssh_session_opened();
        verb_finished("test-verb", "ok");
        verb_finished("test-verb", "ok");
        lease_op("test-op", "held");
        http_request(418);
        refused("test", "per_ip");
        verb_finished("odd\"verb", "a\\b");
        let text = render();
        assert!(text.contains("# TYPE git_collab_ssh_sessions_total counter\n"));
        assert!(text.contains("git_collab_ssh_verbs_total{verb=\"test-verb\",outcome=\"ok\"} 2\n"));
        assert!(
            text.contains("git_collab_lease_operations_total{op=\"test-op\",outcome=\"held\"} 1\n")
        );
        assert!(text.contains("git_collab_http_requests_total{status=\"418\"} 1\n"));
        assert!(
            text.contains("git_collab_limit_refusals_total{what=\"test\",limit=\"per_ip\"} 1\n")
        );
        assert!(text.contains("{verb=\"odd\\\"verb\",outcome=\"a\\\\b\"}"));
        // Every sample line is `name{labels} value` or `name value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
