//! Upkeep of the pack cache (`crate::pack_cache`): at start and every
//! [`EVICT_EVERY`] it drops entries past `git.pack_cache_max_age`, keeps
//! the total under `git.pack_cache_max_size` (least recently used first)
//! and removes leftovers of dead producers; every [`TICK`] it folds the
//! hook processes' counters into the metrics and logs one `info` line per
//! storm (many requests in one tick).

use std::time::Duration;

use crate::pack_cache::Settings;
use crate::shutdown::Stop;

/// How often the counters are read (and a storm noticed).
pub const TICK: Duration = Duration::from_secs(5);
/// How often the cache is trimmed (a store trims only past the cap).
pub const EVICT_EVERY: Duration = Duration::from_secs(60);
/// Requests in one tick that make a storm worth a log line.
const STORM: u64 = 8;

/// Run until `stopping` fires. `settings.repo` is unused here.
pub async fn run(settings: Settings, stopping: Stop) {
    crate::metrics::set_pack_cache_dir(settings.dir.clone());
    let mut last = crate::metrics::pack_cache_stats();
    // The first trim comes at the first tick: it mends the ledger's total
    // (`pack_cache::Ledger`) after a crash or a restart with another cap.
    let mut since_evict = EVICT_EVERY;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = stopping.clone().wait() => return,
        }
        since_evict += TICK;
        let now = crate::metrics::pack_cache_stats();
        let requests = (now.hits + now.misses).saturating_sub(last.hits + last.misses);
        if requests >= STORM {
            tracing::info!(
                requests,
                hits = now.hits - last.hits,
                pack_objects = now.pack_objects.saturating_sub(last.pack_objects),
                bytes_from_cache = now.bytes_from_cache.saturating_sub(last.bytes_from_cache),
                queued = now.queued,
                "pack cache: storm of {requests} upload-pack requests in {}s",
                TICK.as_secs()
            );
        }
        last = now;
        if since_evict >= EVICT_EVERY {
            since_evict = Duration::ZERO;
            let s = settings.clone();
            match tokio::task::spawn_blocking(move || crate::pack_cache::evict(&s, None)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("trimming the pack cache: {e}"),
                Err(e) => tracing::warn!("trimming the pack cache: {e}"),
            }
        }
    }
}
