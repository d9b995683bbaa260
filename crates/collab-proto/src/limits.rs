//! Bounds that both ends check: the client to refuse early with a clear
//! message, the server because it trusts nothing the client says.

/// The longest lease TTL the server accepts (ten years); longer is what an
/// open-ended claim is for.
pub const MAX_TTL_SECS: u64 = 10 * 365 * 24 * 60 * 60;

/// The longest `--wait` (one hour): a waiting command holds its connection.
pub const MAX_WAIT_SECS: u64 = 3600;

/// The longest `--note` or `--reason` of a lease, in bytes.
pub const MAX_NOTE_BYTES: usize = 500;

/// Most issues or patches one `list` page holds.
pub const MAX_PAGE: usize = 500;

/// The most repositories one `collab-events watch` may name.
pub const MAX_WATCH_REPOS: usize = 64;

/// The most deliveries `collab-hook deliveries --limit` shows.
pub const MAX_HOOK_DELIVERIES: i64 = 1000;

/// What a release file name may be, for messages.
pub const FILE_NAME_RULE: &str =
    "use letters, digits, '.', '_', '-' and '+', not starting with '.' or '-', at most 255 bytes";

/// Whether `name` may be a release file name: one path segment of
/// `[A-Za-z0-9._+-]`, not starting with `.` or `-`, at most 255 bytes.
pub fn valid_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        for ok in ["a", "v1.0.tar.gz", "x_y-z+1", &"a".repeat(255)] {
            assert!(valid_file_name(ok), "{ok}");
        }
        for bad in ["", ".hidden", "-flag", "a/b", "a b", "ü", &"a".repeat(256)] {
            assert!(!valid_file_name(bad), "{bad}");
        }
    }
}
