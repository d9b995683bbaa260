//! `collab-patch` replies (docs/ssh-verbs.md, "Patches"; the merge queue's
//! in docs/checks.md). Times are RFC 3339 in UTC as the CLI prints them,
//! `null` for a time the server cannot write. A refused merge answers
//! with [`super::fenced::Fenced`].

use serde::{Deserialize, Serialize};

use super::check::CheckRow;
use super::issue::Person;

/// Every write but a merge: `{"status", "repo", "patch", "revision",
/// "event", "seq"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchWritten {
    /// `approved`, `changes_requested`, `reviewed`, `commented`, `closed`,
    /// `reopened` or `linked`.
    pub status: String,
    pub repo: String,
    /// The patch's full id.
    pub patch: String,
    /// The revision the write is on, `null` where none applies.
    #[serde(default)]
    pub revision: Option<i64>,
    /// The id of the review or comment it made, else `null`.
    #[serde(default)]
    pub event: Option<String>,
    /// The write's row in the event log.
    pub seq: i64,
}

/// One row of `list` (the CLI's `patch list --json` row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchSummary {
    pub id: String,
    pub title: String,
    /// `open`, `merged` or `closed`.
    pub status: String,
    pub author: Person,
    /// The branch it is for.
    pub base: String,
    /// How many revisions it has.
    pub revisions: i64,
    /// The latest revision's head commit.
    #[serde(default)]
    pub head: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    /// Approvals on the latest revision.
    pub approvals: i64,
    /// Change requests on the latest revision.
    pub changes_requested: i64,
    /// The change id its commits carry (`null`: none).
    #[serde(default)]
    pub change_id: Option<String>,
    /// The full id of the patch it is stacked on (`null` at the bottom of
    /// a stack, or outside one).
    #[serde(default)]
    pub depends_on: Option<String>,
}

/// `list`: one page, newest first; `next` is the cursor of the following
/// page (`<created ms>.<id>`), `null` on the last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchList {
    pub repo: String,
    pub patches: Vec<PatchSummary>,
    #[serde(default)]
    pub next: Option<String>,
}

/// Who merged a patch: `{"principal", "name"}` (both the principal), and
/// the `display_name` the server adds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Merger {
    pub principal: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
}

/// How a merged patch landed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeRecord {
    /// The commit that merged it.
    pub commit: String,
    pub author: Merger,
    #[serde(default)]
    pub at: Option<String>,
}

/// One revision of `show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionRow {
    pub n: i64,
    pub head: String,
    /// Where it forks from the base, as the server had it at push time.
    pub base_commit: String,
    /// The base branch's tip at push time.
    #[serde(default)]
    pub base_tip: Option<String>,
    pub author: Person,
    #[serde(default)]
    pub at: Option<String>,
    /// The principals that held a lease on a linked issue when it was
    /// pushed.
    #[serde(default)]
    pub lease_holders: Vec<String>,
}

/// One current review of `show` (one per principal and revision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewRow {
    pub id: String,
    pub revision: i64,
    pub author: Person,
    #[serde(default)]
    pub at: Option<String>,
    /// `approve`, `request_changes` or `comment`.
    pub verdict: String,
    pub body: String,
}

/// One comment of `show` (`revision`, `path` and `line` for inline ones).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchComment {
    pub id: String,
    pub author: Person,
    #[serde(default)]
    pub at: Option<String>,
    pub body: String,
    #[serde(default)]
    pub revision: Option<i64>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub line: Option<i64>,
}

/// The merge rule of the patch's base branch, and its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeRuleShown {
    pub approvals: u32,
    pub no_changes_requested: bool,
    pub author_may_approve: bool,
    pub others_may_revise: bool,
    pub required_checks: Vec<String>,
    pub skipped_is_success: bool,
    pub lease_holder_is_author: bool,
    pub queue: bool,
    pub max_batch: u32,
    pub max_parallel: u32,
    /// `merge` or `rebase`.
    pub queue_method: String,
    pub speculate: bool,
    /// A merge train (docs/checks.md, "The merge train").
    #[serde(default)]
    pub train: bool,
    #[serde(default)]
    pub min_batch: u32,
    /// Seconds.
    #[serde(default)]
    pub batch_wait: u32,
    /// Whether the rule allows the merge now.
    pub ready: bool,
    /// Why not (`null` when ready).
    #[serde(default)]
    pub reason: Option<String>,
}

/// A merge queued with `--when-green` (or on a queued branch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedMerge {
    pub revision: i64,
    pub requested_by: String,
    #[serde(default)]
    pub lease_token: Option<i64>,
    #[serde(default)]
    pub queued_at: Option<String>,
}

/// `show`: the patch with its revisions, current reviews, comments,
/// linked issues, the checks of its head, the merge rule's verdict and
/// its queued merge (`null` when none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchShown {
    pub id: String,
    pub repo: String,
    pub title: String,
    pub body: String,
    pub author: Person,
    pub base: String,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    pub status: String,
    pub imported: bool,
    /// The change id its commits carry: a `Change-Id: I<40 hex>` trailer
    /// or a Jujutsu `change-id` header (`null`: none).
    #[serde(default)]
    pub change_id: Option<String>,
    /// The full id of the patch it is stacked on (`null` at the bottom of
    /// a stack, or outside one); it cannot merge before that one.
    #[serde(default)]
    pub depends_on: Option<String>,
    /// How it was merged (`null` unless merged).
    #[serde(default)]
    pub merge: Option<MergeRecord>,
    pub revisions: Vec<RevisionRow>,
    pub reviews: Vec<ReviewRow>,
    pub comments: Vec<PatchComment>,
    /// The full ids of the linked issues.
    pub issues: Vec<String>,
    pub checks: Vec<CheckRow>,
    pub merge_rule: MergeRuleShown,
    #[serde(default)]
    pub queued_merge: Option<QueuedMerge>,
}

/// One changed file of a diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// The path after the change (before it, for a deletion).
    pub path: String,
    /// The path before a rename or copy (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// `added`, `deleted`, `modified`, `renamed`, `copied`, `type_change`.
    pub status: String,
    pub additions: u64,
    pub deletions: u64,
}

/// `diff`: the CLI's `patch diff --json` object plus `patch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionDiff {
    pub patch: String,
    pub revision: u32,
    /// The base commit the diff starts from.
    pub base_commit: String,
    pub head: String,
    pub files: Vec<FileChange>,
    /// `git diff`-style unified diff text.
    pub text: String,
}

/// `interdiff`: the CLI's `patch interdiff --json` object plus `patch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interdiff {
    pub patch: String,
    pub from: u32,
    pub to: u32,
    /// The two revisions start from different bases and `from` was
    /// replayed onto `to`'s first.
    pub rebased: bool,
    /// Paths where that replay conflicted.
    pub conflicts: Vec<String>,
    pub files: Vec<FileChange>,
    pub text: String,
}

/// Another patch a merge merged too (its commits were in the base).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlsoMerged {
    pub patch: String,
    pub commit: String,
    /// How it was found merged.
    pub how: String,
}

/// An issue a merge closed (a `Closes:` trailer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosedIssue {
    pub issue: String,
    pub commit: String,
}

/// `merge`: the patch merged now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Merged {
    /// Always `merged`.
    pub status: String,
    pub repo: String,
    pub patch: String,
    #[serde(default)]
    pub revision: Option<i64>,
    pub seq: i64,
    /// The base branch (without `refs/heads/`).
    pub branch: String,
    /// `fast_forward`, `merge_commit` or `already_merged`.
    pub kind: String,
    pub commit: String,
    /// The branch's tip before and after.
    pub old: String,
    pub new: String,
    pub also_merged: Vec<AlsoMerged>,
    pub closed_issues: Vec<ClosedIssue>,
    pub warnings: Vec<String>,
}

/// `merge --when-green` (and a merge on a queued branch): the intent,
/// recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeQueued {
    /// Always `queued`.
    pub status: String,
    pub repo: String,
    pub patch: String,
    /// The revision queued (the latest).
    pub revision: i64,
    pub seq: i64,
    /// It replaced an earlier intent for the patch.
    pub replaced: bool,
    pub requested_by: String,
    #[serde(default)]
    pub lease_token: Option<i64>,
    /// What the merge waits for (`null`: nothing, it merges shortly).
    #[serde(default)]
    pub waiting_for: Option<String>,
    /// The branch whose merge queue it joined (`null`: not a queued
    /// branch).
    #[serde(default)]
    pub queue: Option<String>,
}

/// `merge --cancel`: the queued merge, dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeDequeued {
    /// Always `dequeued`.
    pub status: String,
    pub repo: String,
    pub patch: String,
    pub seq: i64,
}

#[cfg(test)]
mod tests {
    use super::super::round_trip;
    use super::*;

    /// The shapes docs/ssh-verbs.md ("Patches") and docs/checks.md show.
    #[test]
    fn doc_shapes_round_trip() {
        let w: PatchWritten = round_trip(
            r#"{"status": "approved", "repo": "team/app.git", "patch": "<full id>", "revision": 2,
 "event": "<review or comment id, else null>", "seq": 812}"#,
        );
        assert_eq!(w.revision, Some(2));
        let m: Merged = round_trip(
            r#"{"status": "merged", "repo": "team/app.git", "patch": "<full id>", "revision": 2, "seq": 815,
 "branch": "main", "kind": "fast_forward", "commit": "<commit>", "old": "<old tip>", "new": "<new tip>",
 "also_merged": [], "closed_issues": [{"issue": "<id>", "commit": "<commit>"}], "warnings": []}"#,
        );
        assert_eq!(m.closed_issues[0].issue, "<id>");
        let q: MergeQueued = round_trip(
            r#"{"status":"queued","repo":"r.git","patch":"<40 hex>","revision":2,"seq":51,"replaced":false,"requested_by":"SHA256:…","lease_token":null,"waiting_for":"required checks are not green on revision 2: ci/test is missing","queue":null}"#,
        );
        assert!(!q.replaced);
        round_trip::<MergeDequeued>(
            r#"{"status":"dequeued","repo":"r.git","patch":"<40 hex>","seq":52}"#,
        );
    }

    /// `list`, `show`, `diff` and `interdiff` as the server writes them.
    #[test]
    fn reads_round_trip() {
        let person = r#"{"name":"ada","key":"ssh-ed25519 AAAA","principal":"ada"}"#;
        let list: PatchList = round_trip(&format!(
            r#"{{"repo":"r","patches":[{{"id":"p","title":"T","status":"open","author":{person},"base":"main","revisions":2,"head":"h","created_at":"2026-12-03T07:55:58.114Z","updated_at":"2026-12-03T07:55:58Z","approvals":1,"changes_requested":0,"change_id":"I0123456789abcdef0123456789abcdef01234567","depends_on":null}}],"next":"1796284558114.p"}}"#
        ));
        assert_eq!(list.patches[0].revisions, 2);
        let shown: PatchShown = round_trip(&format!(
            r#"{{"id":"p","repo":"r","title":"T","body":"","author":{person},"base":"main","created_at":"2026-12-03T07:55:58Z","updated_at":"2026-12-03T07:55:58Z","status":"merged","imported":false,"change_id":null,"depends_on":"q",
            "merge":{{"commit":"c","author":{{"principal":"ada","name":"ada","display_name":"Ada"}},"at":"2026-12-03T07:55:58Z"}},
            "revisions":[{{"n":1,"head":"h","base_commit":"b","base_tip":null,"author":{person},"at":"2026-12-03T07:55:58Z","lease_holders":[]}}],
            "reviews":[{{"id":"v","revision":1,"author":{person},"at":"2026-12-03T07:55:58Z","verdict":"approve","body":""}}],
            "comments":[{{"id":"c1","author":{person},"at":null,"body":"hi","revision":1,"path":"src/a.rs","line":3}}],
            "issues":["i"],"checks":[],
            "merge_rule":{{"approvals":1,"no_changes_requested":true,"author_may_approve":false,"others_may_revise":false,"required_checks":[],"skipped_is_success":true,"lease_holder_is_author":false,"queue":false,"max_batch":8,"max_parallel":1,"queue_method":"merge","speculate":false,"train":false,"min_batch":1,"batch_wait":0,"ready":false,"reason":"the patch is merged"}},
            "queued_merge":null}}"#
        ));
        assert_eq!(
            shown.merge.unwrap().author.display_name.as_deref(),
            Some("Ada")
        );
        round_trip::<RevisionDiff>(
            r#"{"patch":"p","revision":1,"base_commit":"b","head":"h","files":[{"path":"a","status":"renamed","old_path":"b","additions":1,"deletions":0},{"path":"c","status":"added","additions":2,"deletions":0}],"text":"diff --git"}"#,
        );
        round_trip::<Interdiff>(
            r#"{"patch":"p","from":1,"to":2,"rebased":true,"conflicts":["a"],"files":[],"text":""}"#,
        );
    }
}
