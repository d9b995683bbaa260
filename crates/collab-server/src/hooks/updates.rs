//! The ref updates git hands a `pre-receive` hook on stdin, one per line:
//! `<old-oid> <new-oid> <refname>`, the all-zero id meaning "no ref".

/// One ref update of a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    /// `None` when the push creates the ref.
    pub old: Option<git2::Oid>,
    /// `None` when the push deletes the ref.
    pub new: Option<git2::Oid>,
    pub refname: String,
}

fn parse_oid(text: &str) -> Option<Option<git2::Oid>> {
    // Full hex only (SHA-1 or SHA-256); `Oid::from_str` would zero-pad a
    // short one.
    if !(text.len() == 40 || text.len() == 64) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    if text.bytes().all(|b| b == b'0') {
        return Some(None);
    }
    git2::Oid::from_str(text).ok().map(Some)
}

/// Parse the whole hook input; any malformed line refuses the push.
pub fn parse(input: &str) -> Result<Vec<RefUpdate>, String> {
    let mut updates = Vec::new();
    for line in input.lines().filter(|l| !l.is_empty()) {
        let malformed = || format!("malformed hook input {line:?}");
        let mut parts = line.split(' ');
        let (Some(old), Some(new), Some(refname), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed());
        };
        let (Some(old), Some(new)) = (parse_oid(old), parse_oid(new)) else {
            return Err(malformed());
        };
        if refname.is_empty() || (old.is_none() && new.is_none()) {
            return Err(malformed());
        }
        updates.push(RefUpdate {
            old,
            new,
            refname: refname.to_string(),
        });
    }
    Ok(updates)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const Z: &str = "0000000000000000000000000000000000000000";

    #[test]
    fn parses_creates_updates_and_deletes() {
        let input = format!("{Z} {A} refs/heads/new\n{A} {A} refs/tags/v1\n{A} {Z} refs/x\n");
        let u = parse(&input).unwrap();
        assert_eq!(u.len(), 3);
        assert!(u[0].old.is_none() && u[0].new.is_some());
        assert!(u[1].old.is_some() && u[1].new.is_some());
        assert!(u[2].old.is_some() && u[2].new.is_none());
        assert_eq!(u[1].refname, "refs/tags/v1");
    }

    #[test]
    fn refuses_malformed_lines() {
        for bad in [
            "x y z".to_string(),
            format!("{A} {A}"),
            format!("{A} {A} refs/a extra"),
            format!("{Z} {Z} refs/a"),
            format!("1234 {A} refs/a"),
        ] {
            assert!(parse(&bad).is_err(), "{bad:?} accepted");
        }
    }
}
