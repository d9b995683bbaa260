//! Exit statuses of the SSH verbs. 0 is success and 1 a refusal or an error
//! (one `error: …` line on stderr); these are the statuses with a meaning of
//! their own, documented in docs/ssh-verbs.md.

/// A search query or cursor `collab-search` cannot take (empty, too
/// long, too many words, or a cursor it did not write): a usage error.
pub const USAGE: u32 = 2;

/// A conflict: a lease held by someone else or not yours, or a write whose
/// `--lease-token` is not the live tenure (fenced).
pub const CONFLICT: u32 = 4;

/// A write refused because its `--lease-token` is stale (the same status as
/// [`CONFLICT`]: to the caller both mean "you no longer hold it").
pub const FENCED: u32 = CONFLICT;

/// `collab-lease next` found nothing ready: not success (0), not an error
/// (1), not a conflict (4).
pub const EMPTY: u32 = 3;

/// The write met a lock another transaction held (on PostgreSQL: another
/// node deciding the same issue or repository) for longer than the server
/// waits, and nothing was written: run it again. The CLI and the MCP tools
/// do so by themselves, a few times ([`BUSY_ATTEMPTS`]).
pub const BUSY: u32 = 5;

/// How many times, at most, a client runs a command that answered
/// [`BUSY`] (the first run included).
pub const BUSY_ATTEMPTS: u32 = 5;

/// The first pause before a client runs a busy command again; it doubles
/// each time, with jitter ([`busy_backoff_ms`]).
pub const BUSY_FIRST_BACKOFF_MS: u64 = 100;

/// The pause before run `attempt` (2, 3, …) of a busy command: the first
/// backoff doubled per earlier retry, plus `jitter` (0.0 to 1.0) of half of
/// it: 1.5 to 2.25 s of pauses over all the runs. Pure, so both clients space their retries alike.
pub fn busy_backoff_ms(attempt: u32, jitter: f64) -> u64 {
    let base = BUSY_FIRST_BACKOFF_MS << attempt.saturating_sub(2).min(8);
    base + (base as f64 / 2.0 * jitter.clamp(0.0, 1.0)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_retries_pause_about_two_seconds_in_all() {
        let least: u64 = (2..=BUSY_ATTEMPTS).map(|a| busy_backoff_ms(a, 0.0)).sum();
        let most: u64 = (2..=BUSY_ATTEMPTS).map(|a| busy_backoff_ms(a, 1.0)).sum();
        assert_eq!(least, 100 + 200 + 400 + 800);
        assert_eq!(most, 2250);
        assert_ne!(BUSY, EMPTY);
        assert_ne!(BUSY, CONFLICT);
    }
}
