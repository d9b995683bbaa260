//! The pace of the server's drivers that act on what the event log records
//! (`auto_merge`'s queued merges, `merge_queue`'s groups): a look whenever
//! the log moves (this node's writes and other nodes' as the event poller
//! publishes them), at most every [`MIN_GAP`] however busy the log is, and
//! at least every [`TICK`] (a lease that expired or a claim that lapsed
//! moves nothing in the log).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::app::App;

/// The longest a driver sleeps when nothing wakes it.
pub const TICK: Duration = Duration::from_secs(1);

/// The shortest gap between two looks, however busy the event log is.
pub const MIN_GAP: Duration = Duration::from_millis(200);

/// Run `look` at that pace until `stopping` fires. `look` gets this node's
/// name for its claims (process id and a random tag: unique among the
/// nodes sharing a database); a failed look is logged under `what` and the
/// next one comes as usual.
pub async fn run<F, Fut>(app: Arc<App>, stopping: crate::shutdown::Stop, what: &str, mut look: F)
where
    F: FnMut(Arc<App>, Arc<str>) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let node: Arc<str> = format!("{}-{:08x}", std::process::id(), rand::random::<u32>()).into();
    let mut head = app.writer.subscribe_event_head();
    loop {
        if let Err(e) = look(app.clone(), node.clone()).await {
            tracing::warn!("{what}: {e:#}");
        }
        tokio::select! {
            _ = tokio::time::sleep(MIN_GAP) => {}
            _ = stopping.clone().wait() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK.saturating_sub(MIN_GAP)) => {}
            _ = head.changed() => {}
            _ = stopping.clone().wait() => return,
        }
    }
}
