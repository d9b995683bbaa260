//! The expiry timer: one task that sleeps until the writer's `due` instant
//! (the earliest `expires_at` or lock-delay end), then asks the writer to
//! end everything due (`Writer::expire_due`). The writer moves `due`
//! after every group, so a new, earlier expiry wakes the timer early.
//!
//! Times in the database are whole unix seconds and a lease is live while
//! `now < expires_at`, so the pass runs just after the wall clock reaches
//! `expires_at` seconds: a tenure is ended, its waiters woken and its
//! `lease.expired` event appended within one second of its expiry.

use std::time::Duration;

use crate::shutdown::Stop;
use collab_store::writer::Writer;

/// How far past the due second the pass runs, so the writer's clock (whole
/// seconds, read inside the transaction) has certainly reached it.
const MARGIN: Duration = Duration::from_millis(20);

/// How long to wait after a failed pass before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Run until `stop` fires or the lease store goes away.
pub async fn run(service: Writer, stop: Stop) {
    let mut due = service.due();
    let stopped = stop.wait();
    tokio::pin!(stopped);
    // The last instant a pass was run for: a pass that ended nothing and
    // reports the same instant again must not spin.
    let mut last_pass: Option<i64> = None;
    loop {
        let next = *due.borrow_and_update();
        let sleep = match next {
            None => None,
            Some(at) if last_pass.is_some_and(|done| at <= done) => {
                Some(until(at).max(RETRY_AFTER / 5))
            }
            Some(at) => Some(until(at)),
        };
        tokio::select! {
            _ = &mut stopped => return,
            changed = due.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = sleep_for(sleep) => {
                last_pass = next;
                match service.expire_due().await {
                    Ok(pass) if !pass.ended.is_empty() => {
                        tracing::debug!(ended = pass.ended.len(), "leases expired");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!("lease expiry pass failed: {e:#}");
                        tokio::time::sleep(RETRY_AFTER).await;
                    }
                }
            }
        }
    }
}

/// Sleep for `duration`, or forever when there is nothing to wait for.
async fn sleep_for(duration: Option<Duration>) {
    match duration {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// From now until just after the wall clock reaches `at` (unix seconds).
fn until(at: i64) -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let at = Duration::from_secs(at.max(0) as u64);
    at.saturating_sub(now) + MARGIN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_past_instant_is_due_at_once() {
        assert_eq!(until(0), MARGIN);
        assert_eq!(until(i64::MIN), MARGIN);
        let soon = chrono::Utc::now().timestamp() + 2;
        let wait = until(soon);
        assert!(wait > MARGIN && wait <= Duration::from_secs(2) + MARGIN);
    }
}
