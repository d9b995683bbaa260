//! Event type patterns (`--type PATTERN`, a webhook's `--event PATTERN`):
//! dotted type names where `*` matches any run of characters, so `lease.*`
//! is every lease event and `*` is everything. No patterns means every type.

/// The most patterns one watcher or subscription may give.
pub const MAX_PATTERNS: usize = 32;

/// Whether `pattern` is acceptable: 1 to 100 characters of `[A-Za-z0-9._*-]`.
pub fn valid_pattern(pattern: &str) -> bool {
    (1..=100).contains(&pattern.len())
        && pattern
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'*'))
}

/// Whether `glob` is an acceptable repository glob of a webhook
/// subscription: 1 to 200 characters of `[A-Za-z0-9._/*-]`.
pub fn valid_repo_glob(glob: &str) -> bool {
    (1..=200).contains(&glob.len())
        && glob
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/' | b'*'))
}

/// A set of type patterns; empty matches every type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypeFilter {
    patterns: Vec<String>,
}

impl TypeFilter {
    /// Patterns must pass `valid_pattern` (checked by the parsers).
    pub fn new(patterns: Vec<String>) -> TypeFilter {
        TypeFilter { patterns }
    }

    pub fn matches(&self, kind: &str) -> bool {
        self.patterns.is_empty() || self.patterns.iter().any(|p| glob_match(p, kind))
    }
}

/// `*` matches any (possibly empty) run; everything else literally.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let f = TypeFilter::new(vec!["lease.*".into(), "ref.updated".into()]);
        assert!(f.matches("lease.acquired") && f.matches("ref.updated"));
        assert!(!f.matches("release.uploaded") && !f.matches("ref.updatedx"));
        assert!(TypeFilter::default().matches("anything"));
        assert!(glob_match("*", "") && glob_match("*.*", "a.b") && !glob_match("a*c", "abd"));
        assert!(glob_match("*ed", "lease.acquired") && glob_match("a**b", "ab"));
        assert!(valid_pattern("issue.*") && !valid_pattern("") && !valid_pattern("a b"));
    }
}
