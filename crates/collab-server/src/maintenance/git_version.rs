//! The git on `PATH` at start: the server runs it for every push, clone
//! and maintenance step, so a git older than the releases that fixed the
//! advisories of 2025 (CVE-2025-48384 and its siblings: 2.43.7, 2.44.4,
//! 2.45.4, 2.46.4, 2.47.3, 2.48.2, 2.49.1, 2.50.1) is worth a loud line.
//! It is a warning, not a refusal: distributions backport such fixes
//! without changing the version (Debian 12's 2.39.5 carries them), so the
//! version alone cannot prove a git vulnerable.

/// The first fixed release of each maintained line, `(minor, patch)` of 2.x.
const FIXED: &[(u32, u32)] = &[
    (43, 7),
    (44, 4),
    (45, 4),
    (46, 4),
    (47, 3),
    (48, 2),
    (49, 1),
    (50, 1),
];

/// `(major, minor, patch)` from `git --version`'s line (`git version
/// 2.47.3`, `git version 2.39.5.windows.1`).
pub fn parse(line: &str) -> Option<(u32, u32, u32)> {
    let version = line.trim().strip_prefix("git version ")?;
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((major, minor, patch))
}

/// Whether `version` is at least the fixed release of its line (any 2.x
/// after the last line listed, and any 3.x, counts as fixed).
pub fn is_fixed((major, minor, patch): (u32, u32, u32)) -> bool {
    if major != 2 {
        return major > 2;
    }
    let last = FIXED.last().map_or(0, |&(m, _)| m);
    if minor > last {
        return true;
    }
    FIXED
        .iter()
        .find(|&&(m, _)| m == minor)
        .is_some_and(|&(_, fixed)| patch >= fixed)
}

/// `git --version` of the git on `PATH`, trimmed, read once per process
/// (empty when git cannot run). The pack cache keys its answers by it too.
pub fn line() -> &'static str {
    static LINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LINE.get_or_init(|| {
        // git-args: fixed (`--version`), no value from a client.
        match super::git::clean().arg("--version").output() {
            Ok(out) if out.status.success() => {
                String::from_utf8_lossy(&out.stdout).trim().to_string()
            }
            _ => String::new(),
        }
    })
}

/// The warning for the git on `PATH`, if there is one to give.
pub fn warning() -> Option<String> {
    let line = line();
    if line.is_empty() {
        return Some("cannot run `git --version`: pushes and clones will fail".into());
    }
    match parse(line) {
        Some(version) if is_fixed(version) => None,
        Some((major, minor, patch)) => Some(format!(
            "git {major}.{minor}.{patch} on PATH is older than the releases that fixed \
             CVE-2025-48384 and the other git advisories of 2025 (2.43.7, …, 2.50.1); \
             upgrade it unless your distribution backported the fixes"
        )),
        None => Some(format!(
            "cannot read the version of the git on PATH ({:?})",
            line.trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_before_each_lines_fix_are_flagged() {
        assert_eq!(parse("git version 2.47.3\n"), Some((2, 47, 3)));
        assert_eq!(parse("git version 2.39.5.windows.1"), Some((2, 39, 5)));
        assert_eq!(parse("git version 2.51"), Some((2, 51, 0)));
        assert_eq!(parse("hg 6"), None);
        for fixed in [(2, 47, 3), (2, 50, 1), (2, 51, 0), (2, 43, 7), (3, 0, 0)] {
            assert!(is_fixed(fixed), "{fixed:?}");
        }
        for old in [(2, 47, 2), (2, 50, 0), (2, 39, 5), (2, 43, 6), (1, 9, 9)] {
            assert!(!is_fixed(old), "{old:?}");
        }
    }
}
