//! Fencing on pushes: a push can carry the lease it works under,
//! `git push -o collab-lease=<issue>:<token>`, and is then accepted only
//! while that token is the issue's live tenure and the pusher holds it. A
//! zombie agent (its lease expired or was broken, someone else holds the
//! issue now) is refused before any ref moves, so it cannot overwrite its
//! successor's work.
//!
//! A repository may make this mandatory for some refs: `fenced_refs`
//! globs (in `collab-policy.toml`, and for every governed repository in
//! `governance.toml`; the server passes their union in the hook context).
//! A push touching a fenced ref must carry a valid token.
//!
//! A fenced ref whose name carries an issue id needs the live lease of
//! *that* issue, not of any issue the pusher holds: otherwise a zombie
//! agent with some other live claim could overwrite its successor's branch.
//! Which refs carry an id is said by `fenced_ref_issue` patterns (default
//! [`DEFAULT_REF_ISSUE`], `refs/heads/issue/{issue}`): `{issue}` stands
//! for 4 to 40 lowercase hex digits, a full issue id or a unique prefix of
//! one, within one path segment (literal text may surround it, `issue-{issue}`);
//! a `*` segment matches any one segment. A fenced ref no pattern matches
//! keeps the plain rule: any live lease of the pusher's.
//!
//! The whole push is refused on the first bad token: one line names the
//! issue's current holder and token. The lease is read from `collab.db`
//! with the hook's own read-only connection (WAL lets it read beside the
//! server's writer); this check writes nothing.

use collab_store::sql::Connection;
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::check::Refusal;
use super::context::HookContext;
use super::updates::RefUpdate;
use collab_store::leases;

/// The push option's name.
pub const OPTION: &str = "collab-lease";

/// The `fenced_ref_issue` patterns of a repository that sets none.
pub const DEFAULT_REF_ISSUE: &str = "refs/heads/issue/{issue}";

/// The placeholder of a `fenced_ref_issue` pattern.
const ISSUE_HOLE: &str = "{issue}";

/// One compiled `fenced_ref_issue` pattern: its segments, one of which
/// holds `{issue}` (split into the literal text before and after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefIssuePattern {
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Any,
    Issue { before: String, after: String },
}

/// Compile `fenced_ref_issue` patterns. Used to validate the policy files.
pub fn compile_ref_issue(patterns: &[String]) -> Result<Vec<RefIssuePattern>, String> {
    patterns
        .iter()
        .map(|pattern| {
            let bad = |why: &str| format!("fenced_ref_issue: {pattern:?}: {why}");
            if !pattern.starts_with("refs/") {
                return Err(bad(
                    "must start with refs/ (for example refs/heads/issue/{issue})",
                ));
            }
            if pattern.matches(ISSUE_HOLE).count() != 1 {
                return Err(bad("must hold {issue} exactly once"));
            }
            let segments = pattern
                .split('/')
                .map(|seg| {
                    if let Some((before, after)) = seg.split_once(ISSUE_HOLE) {
                        if before.contains(['*', '?', '[', '{'])
                            || after.contains(['*', '?', '[', '{'])
                        {
                            return Err(bad("only literal text may surround {issue}"));
                        }
                        Ok(Segment::Issue {
                            before: before.to_string(),
                            after: after.to_string(),
                        })
                    } else if seg == "*" {
                        Ok(Segment::Any)
                    } else if seg.is_empty() || seg.contains(['*', '?', '[', '{', '}']) {
                        Err(bad("a segment is literal text, * or holds {issue}"))
                    } else {
                        Ok(Segment::Literal(seg.to_string()))
                    }
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(RefIssuePattern { segments })
        })
        .collect()
}

/// The issue id (or prefix) `refname` carries by the first pattern that
/// matches it, if any.
pub fn issue_of<'r>(patterns: &[RefIssuePattern], refname: &'r str) -> Option<&'r str> {
    let parts: Vec<&str> = refname.split('/').collect();
    patterns.iter().find_map(|p| {
        if p.segments.len() != parts.len() {
            return None;
        }
        let mut issue = None;
        for (seg, part) in p.segments.iter().zip(&parts) {
            match seg {
                Segment::Literal(l) if l == part => {}
                Segment::Any => {}
                Segment::Issue { before, after } => {
                    let id = part
                        .strip_prefix(before.as_str())?
                        .strip_suffix(after.as_str())?;
                    let hex = id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                    if !(4..=40).contains(&id.len()) || !hex {
                        return None;
                    }
                    issue = Some(id);
                }
                Segment::Literal(_) => return None,
            }
        }
        issue
    })
}

/// Most `collab-lease` options one push may carry.
const MAX_LEASE_OPTIONS: usize = 16;

/// One `collab-lease=<issue>:<token>` option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseOption {
    /// 4 to 40 lowercase hex digits: a full issue id or a prefix.
    pub issue: String,
    pub token: i64,
}

/// Compile ref globs (`refs/heads/issue/*`: `*` stays within one path
/// segment, `**` crosses them). Used to validate the policy files too.
pub fn compile(patterns: &[String]) -> Result<GlobSet, String> {
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        if !pattern.starts_with("refs/") {
            return Err(format!(
                "fenced_refs: {pattern:?} must start with refs/ (for example refs/heads/issue/*)"
            ));
        }
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("fenced_refs: bad pattern {pattern:?}: {}", e.kind()))?;
        set.add(glob);
    }
    set.build().map_err(|e| format!("fenced_refs: {e}"))
}

/// The `collab-lease` options among a push's options; anything else is
/// left to other checks. A malformed `collab-lease` option refuses.
pub fn lease_options(options: &[String]) -> Result<Vec<LeaseOption>, String> {
    let mut found = Vec::new();
    for option in options {
        let Some(value) = option
            .strip_prefix(OPTION)
            .and_then(|rest| rest.strip_prefix('='))
        else {
            continue;
        };
        let bad = || {
            format!("push option {OPTION}={value:?}: expected {OPTION}=<issue>:<token>, e.g. {OPTION}=4f2a91c0:3")
        };
        let (issue, token) = value.split_once(':').ok_or_else(bad)?;
        let issue = issue.to_ascii_lowercase();
        if !(4..=40).contains(&issue.len()) || !issue.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        if token.is_empty() || token.len() > 18 || !token.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let token: i64 = token.parse().map_err(|_| bad())?;
        found.push(LeaseOption { issue, token });
    }
    if found.len() > MAX_LEASE_OPTIONS {
        return Err(format!("at most {MAX_LEASE_OPTIONS} {OPTION} push options"));
    }
    Ok(found)
}

/// The pipeline check.
pub fn check(ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), Refusal> {
    let options = lease_options(&super::push_options::from_env()).map_err(Refusal::one)?;
    // A policy that does not compile fences nothing it meant to: refuse.
    let fenced = compile(&ctx.fenced_refs).map_err(Refusal::one)?;
    let touched: Vec<&str> = updates
        .iter()
        .map(|u| u.refname.as_str())
        .filter(|name| fenced.is_match(name))
        .collect();
    if options.is_empty() {
        return match touched.first() {
            None => Ok(()),
            Some(refname) => Err(Refusal::one(format!(
                "{refname}: fenced ref: push with -o {OPTION}=<issue>:<token> of your live lease \
                 (git collab push adds it)"
            ))),
        };
    }
    let tied = compile_ref_issue(&ctx.fenced_ref_issue).map_err(Refusal::one)?;
    let now = chrono::Utc::now().timestamp();
    let conn = collab_store::open_reader(&ctx.collab_db)
        .map_err(|e| Refusal::one(format!("push refused: cannot read the lease store: {e}")))?;
    let mut held = Vec::new();
    let mut stale = Vec::new();
    for option in &options {
        match judge(&conn, ctx, option, now) {
            Ok(issue) => held.push(issue),
            Err(Judged::Stale(line)) => stale.push(line),
            Err(Judged::Bad(line)) => return Err(Refusal::one(line)),
        }
    }
    // A push works under the live leases among its options. With none
    // live, it works under none: refused, naming the first stale one (the
    // zombie's case). A stale option beside a live one is a claim the
    // client still remembers (`git collab push` sends them all): ignored,
    // with a note, since the refs tied to an issue are checked against
    // that issue's own lease below.
    if held.is_empty() {
        return Err(Refusal::one(stale.swap_remove(0)));
    }
    for refname in touched {
        if let Some(issue) = issue_of(&tied, refname) {
            belongs(&conn, ctx, refname, issue, &held).map_err(Refusal::one)?;
        }
    }
    for line in stale {
        let line = line.strip_prefix("push refused: ").unwrap_or(&line);
        eprintln!(
            "note: {line}; ignored, the push carries a live lease (forget the old claim: \
             git collab issue unclaim <issue>)"
        );
    }
    Ok(())
}

/// Why a `collab-lease` option does not count.
#[derive(Debug, PartialEq, Eq)]
pub enum Judged {
    /// A well-formed token that is not the issue's live tenure of this
    /// pusher (expired, broken, taken over, never leased).
    Stale(String),
    /// The option cannot be judged (ambiguous prefix, the store unread):
    /// always refuses.
    Bad(String),
}

impl std::fmt::Display for Judged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Judged::Stale(line) | Judged::Bad(line) => f.write_str(line),
        }
    }
}

/// A fenced ref tied to `issue` (an id or prefix from its name) is pushed
/// under a live lease of that issue: `held` are the issues of the push's
/// (already judged live) lease options. `Err` is the refusal line.
fn belongs(
    conn: &Connection,
    ctx: &HookContext,
    refname: &str,
    issue: &str,
    held: &[String],
) -> Result<(), String> {
    let ids = leases::issues_with_prefix(conn, &ctx.repo, issue)
        .map_err(|e| format!("push refused: reading the lease store: {e}"))?;
    match ids.as_slice() {
        [one] if held.contains(one) => Ok(()),
        [one] => Err(format!(
            "{refname}: fenced ref of issue {short}: push with -o {OPTION}={short}:<token> of your \
             live lease of that issue (a lease of another issue does not count)",
            short = &one[..one.len().min(8)]
        )),
        [] => Err(format!(
            "{refname}: fenced ref of issue {issue}, which has no live lease: claim it first"
        )),
        _ => Err(format!(
            "{refname}: fenced ref of issue {issue}, an ambiguous id prefix: name the branch \
             with more digits"
        )),
    }
}

/// Is `option` the pusher's live tenure? `Ok` is the issue's full id;
/// `Err` says why not, as a refusal line.
pub fn judge(
    conn: &Connection,
    ctx: &HookContext,
    option: &LeaseOption,
    now: i64,
) -> Result<String, Judged> {
    let internal = |e: collab_store::sql::Error| {
        Judged::Bad(format!("push refused: reading the lease store: {e}"))
    };
    let ids = leases::issues_with_prefix(conn, &ctx.repo, &option.issue).map_err(internal)?;
    let issue = match ids.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(Judged::Stale(format!(
                "push refused: lease token {} for issue {} is not live: the issue was never leased",
                option.token, option.issue
            )))
        }
        _ => {
            return Err(Judged::Bad(format!(
                "push refused: issue id {} is ambiguous in {OPTION}; give more digits",
                option.issue
            )))
        }
    };
    let short = &issue[..issue.len().min(8)];
    match leases::current_in(conn, &ctx.repo, &issue, now).map_err(internal)? {
        Some(live) if live.token == option.token && live.holder == ctx.principal => Ok(issue),
        Some(live) => Err(Judged::Stale(format!(
            "push refused: lease token {} for issue {short} is not live: the issue is held by {} \
             with token {}",
            option.token, live.holder, live.token
        ))),
        None => Err(Judged::Stale(format!(
            "push refused: lease token {} for issue {short} is not live: the issue has no live \
             lease",
            option.token
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collab_proto::Access;
    use collab_store::leases::{Claim, Policy};

    const T0: i64 = 1_790_000_000;
    const ISSUE: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";

    fn ctx(principal: &str) -> HookContext {
        HookContext {
            principal: principal.into(),
            fingerprint: "SHA256:x".into(),
            repo: "r.git".into(),
            access: Access::Write,
            state_dir: "/nonexistent".into(),
            collab_db: "/nonexistent/collab.db".into(),
            fenced_refs: Vec::new(),
            fenced_ref_issue: Vec::new(),
            others_may_revise: false,
            max_body: 1000,
            web_url: String::new(),
        }
    }

    fn opt(issue: &str, token: i64) -> LeaseOption {
        LeaseOption {
            issue: issue.into(),
            token,
        }
    }

    #[test]
    fn options_parse_and_malformed_ones_refuse() {
        let given =
            |o: &[&str]| lease_options(&o.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            given(&["title=x", "collab-lease=A1B2c3d4:3"]).unwrap(),
            [opt("a1b2c3d4", 3)]
        );
        assert_eq!(given(&["collab-leases=1"]).unwrap(), []);
        for bad in [
            "collab-lease=",
            "collab-lease=a1b2",
            "collab-lease=a1b:3",
            "collab-lease=xyz1:3",
            "collab-lease=a1b2:",
            "collab-lease=a1b2:-1",
            "collab-lease=a1b2:3:4",
            "collab-lease=a1b2:99999999999999999999",
        ] {
            assert!(given(&[bad]).is_err(), "{bad}");
        }
        let many: Vec<String> = (0..17).map(|i| format!("collab-lease=abcd:{i}")).collect();
        assert!(lease_options(&many).is_err());
    }

    #[test]
    fn globs_stay_in_a_segment_unless_double_starred() {
        let set = compile(&["refs/heads/issue/*".into(), "refs/heads/wip/**".into()]).unwrap();
        assert!(set.is_match("refs/heads/issue/42"));
        assert!(!set.is_match("refs/heads/issue/42/x"));
        assert!(set.is_match("refs/heads/wip/a/b"));
        assert!(!set.is_match("refs/heads/main"));
        assert!(compile(&["heads/*".into()]).is_err());
        assert!(compile(&["refs/heads/[".into()]).is_err());
    }

    #[test]
    fn only_the_pushers_live_token_passes() {
        let conn = collab_store::testing::db();
        let p = Policy::default();
        let claim = |holder: &str| Claim::new("r.git", ISSUE, holder, Some(10));
        leases::acquire_in(&conn, &claim("alice"), &p, T0).unwrap();
        let live = Ok(ISSUE.to_string());
        assert_eq!(judge(&conn, &ctx("alice"), &opt(ISSUE, 1), T0), live);
        assert_eq!(judge(&conn, &ctx("alice"), &opt("a1b2", 1), T0), live);
        let err = judge(&conn, &ctx("bob"), &opt(ISSUE, 1), T0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("held by alice with token 1"), "{err}");
        // Expired: alice is a zombie; after bob takes over, her token is stale.
        let err = judge(&conn, &ctx("alice"), &opt(ISSUE, 1), T0 + 10)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no live lease"), "{err}");
        leases::acquire_in(&conn, &claim("bob"), &p, T0 + 10).unwrap();
        let err = judge(&conn, &ctx("alice"), &opt(ISSUE, 1), T0 + 11)
            .unwrap_err()
            .to_string();
        assert!(err.contains("held by bob with token 2"), "{err}");
        assert_eq!(judge(&conn, &ctx("bob"), &opt(ISSUE, 2), T0 + 11), live);
        let err = judge(&conn, &ctx("bob"), &opt("ffff", 2), T0 + 11)
            .unwrap_err()
            .to_string();
        assert!(err.contains("never leased"), "{err}");
    }

    #[test]
    fn ref_issue_patterns_capture_the_id() {
        let p = compile_ref_issue(&[
            DEFAULT_REF_ISSUE.into(),
            "refs/heads/*/task-{issue}.wip".into(),
        ])
        .unwrap();
        assert_eq!(issue_of(&p, "refs/heads/issue/a1b2c3d4"), Some("a1b2c3d4"));
        assert_eq!(
            issue_of(&p, &format!("refs/heads/issue/{ISSUE}")),
            Some(ISSUE)
        );
        assert_eq!(issue_of(&p, "refs/heads/team/task-beef.wip"), Some("beef"));
        // Not an id: the plain rule applies.
        for no in [
            "refs/heads/issue/parser",
            "refs/heads/issue/abc",
            "refs/heads/issue/A1B2",
            "refs/heads/issue/a1b2/x",
            "refs/heads/main",
            "refs/heads/team/task-beef",
        ] {
            assert_eq!(issue_of(&p, no), None, "{no}");
        }
        for bad in [
            "heads/issue/{issue}",
            "refs/heads/issue/*",
            "refs/heads/{issue}/{issue}",
            "refs/heads/x*{issue}",
            "refs/**/{issue}",
        ] {
            assert!(compile_ref_issue(&[bad.into()]).is_err(), "{bad}");
        }
    }

    /// Agent z holds issue X; its lease of issue Y expired and agent s took
    /// Y. z's live X token does not open Y's branch; s's Y token does.
    #[test]
    fn a_ref_tied_to_an_issue_needs_that_issues_lease() {
        const X: &str = "0123456789abcdef0123456789abcdef01234567";
        let conn = collab_store::testing::db();
        let p = Policy::default();
        let claim = |issue: &str, holder: &str, ttl| Claim::new("r.git", issue, holder, Some(ttl));
        leases::acquire_in(&conn, &claim(X, "z", 1000), &p, T0).unwrap();
        leases::acquire_in(&conn, &claim(ISSUE, "z", 10), &p, T0).unwrap();
        leases::acquire_in(&conn, &claim(ISSUE, "s", 1000), &p, T0 + 20).unwrap();
        let now = T0 + 30;
        let tied = compile_ref_issue(&[DEFAULT_REF_ISSUE.into()]).unwrap();
        let y_branch = "refs/heads/issue/a1b2c3d4";
        let y = issue_of(&tied, y_branch).unwrap();

        let held = vec![judge(&conn, &ctx("z"), &opt("0123", 1), now).unwrap()];
        let err = belongs(&conn, &ctx("z"), y_branch, y, &held).unwrap_err();
        assert!(
            err.contains("fenced ref of issue a1b2c3d4")
                && err.contains("a lease of another issue does not count"),
            "{err}"
        );
        // z's own issue's branch is fine with the same token.
        belongs(&conn, &ctx("z"), "refs/heads/issue/0123", "0123", &held).unwrap();

        let held = vec![judge(&conn, &ctx("s"), &opt(ISSUE, 2), now).unwrap()];
        belongs(&conn, &ctx("s"), y_branch, y, &held).unwrap();
        let err = belongs(&conn, &ctx("s"), "refs/heads/issue/ffff", "ffff", &held).unwrap_err();
        assert!(err.contains("no live lease"), "{err}");
    }
}
