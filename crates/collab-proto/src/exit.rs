//! Exit statuses of the SSH verbs. 0 is success and 1 a refusal or an error
//! (one `error: …` line on stderr); these are the statuses with a meaning of
//! their own, documented in docs/ssh-verbs.md.

/// A conflict: a lease held by someone else or not yours, or a write whose
/// `--lease-token` is not the live tenure (fenced).
pub const CONFLICT: u32 = 4;

/// A write refused because its `--lease-token` is stale (the same status as
/// [`CONFLICT`]: to the caller both mean "you no longer hold it").
pub const FENCED: u32 = CONFLICT;

/// `collab-lease next` found nothing ready: not success (0), not an error
/// (1), not a conflict (4).
pub const EMPTY: u32 = 3;
