//! `collab-issue` replies (docs/ssh-verbs.md, "Issues"). Times are
//! RFC 3339 in UTC as the CLI prints them (`2026-12-03T07:55:58.114Z`;
//! whole seconds without a fraction), `null` for a time the server cannot
//! write. The server always writes every field but the optional extras of
//! a write; the client reads an absent optional field as empty.

use serde::{Deserialize, Deserializer, Serialize};

/// Who wrote something: `{"name", "key", "principal"}`, and the
/// `display_name` the server adds to every person object it sends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    /// The display name recorded with the write (the governed name, else
    /// the principal; for imported history the name in the signed event).
    pub name: String,
    /// The OpenSSH public key line, `null` where it is not known.
    #[serde(default)]
    pub key: Option<String>,
    /// The governed name or `SHA256:` fingerprint of the writer (an older
    /// server may leave it out: empty).
    #[serde(default)]
    pub principal: String,
    /// What to show for the person now (added by the server to every
    /// person object; absent from older servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
}

/// One end of a link: `{"repo", "id", "text"}`, `text` being
/// `team/app#8bab8db7`. An older server sent `{"repo", "id"}` or the
/// text alone (`id` or `repo#id`); those read with the rest empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RefOnWire")]
pub struct IssueRef {
    pub repo: String,
    /// The full id.
    pub id: String,
    /// The link as written in text (`repo#id8`).
    pub text: String,
}

/// What an [`IssueRef`] reads from.
#[derive(Deserialize)]
#[serde(untagged)]
enum RefOnWire {
    Object {
        #[serde(default)]
        repo: String,
        #[serde(default)]
        id: String,
        #[serde(default)]
        text: String,
    },
    Text(String),
}

impl From<RefOnWire> for IssueRef {
    fn from(wire: RefOnWire) -> IssueRef {
        match wire {
            RefOnWire::Object { repo, id, text } => IssueRef { repo, id, text },
            RefOnWire::Text(text) => IssueRef {
                repo: String::new(),
                id: String::new(),
                text,
            },
        }
    }
}

/// The live lease a close ended: `{"holder", "token"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedLease {
    pub holder: String,
    pub token: i64,
    /// The holder's display name (added by the server; `holder` stays
    /// the full principal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_name: Option<String>,
}

/// The link a `link` or `unlink` made or removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkChange {
    /// `blocks` or `relates`.
    pub kind: String,
    /// The other end, as the server resolved it.
    pub target: IssueRef,
}

/// Every write: `{"status", "repo", "issue", "event", "seq"}`, plus
/// `lease_ended` for a close and `link` for a link or unlink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueWritten {
    /// `opened`, `commented`, `edited`, `labeled`, `closed`, `reopened`,
    /// `linked` or `unlinked`.
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub repo: String,
    /// The issue's full id (an older server called it `id`).
    #[serde(alias = "id")]
    pub issue: String,
    /// The id of what the write created (the issue for `open`, the comment
    /// for `comment`), else `null`.
    #[serde(default)]
    pub event: Option<String>,
    /// The write's row in the event log.
    #[serde(default)]
    pub seq: i64,
    /// `close` only: the live lease it ended, `null` when none was live
    /// (absent: not a close).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub lease_ended: Option<Option<EndedLease>>,
    /// `link` and `unlink` only: the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkChange>,
}

/// A field that is present (`Some`), whether `null` (`Some(None)`) or not;
/// an absent one is `None` through `#[serde(default)]`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// One row of `list` (the CLI's `issue list --json` row, plus `priority`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueSummary {
    pub id: String,
    pub title: String,
    /// `open` or `closed`.
    pub status: String,
    /// (An older server may leave it out: empty.)
    #[serde(default)]
    pub author: Person,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    /// Sorted, without duplicates.
    #[serde(default)]
    pub labels: Vec<String>,
    /// How many comments it has.
    #[serde(default)]
    pub comments: i64,
    /// The work queue's priority (`0` most urgent), `null` until set.
    #[serde(default)]
    pub priority: Option<i64>,
}

/// `list`: one page, newest first; `next` is the cursor of the following
/// page, `null` on the last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueList {
    pub repo: String,
    pub issues: Vec<IssueSummary>,
    #[serde(default)]
    pub next: Option<String>,
    /// How many of the repository's issues have writes the signed export
    /// (`refs/collab/export/issues/*`) does not show yet: it follows each
    /// write within about a second. `issue fetch` waits for 0. Absent from
    /// servers before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export_behind: Option<u64>,
}

/// One row of `ready`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyIssue {
    pub id: String,
    pub title: String,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default)]
    pub priority: Option<i64>,
    #[serde(default)]
    pub created_at: Option<String>,
}

/// `ready`: the issues `collab-lease next` would hand the caller, in its
/// order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyList {
    #[serde(default)]
    pub repo: String,
    pub issues: Vec<ReadyIssue>,
}

/// A comment of `show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    pub id: String,
    pub author: Person,
    #[serde(default)]
    pub at: Option<String>,
    pub body: String,
}

/// An issue's links, seen from it (links into repositories the caller
/// cannot read are left out).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Links {
    #[serde(default)]
    pub blocks: Vec<IssueRef>,
    #[serde(default)]
    pub blocked_by: Vec<IssueRef>,
    #[serde(default)]
    pub relates: Vec<IssueRef>,
}

/// The live tenure `show` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShownLease {
    pub holder: String,
    pub token: i64,
    #[serde(default)]
    pub acquired_at: Option<String>,
    /// `null`: open-ended.
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
    /// The holder's display name (added by the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_name: Option<String>,
}

/// `show`: the CLI's `issue show --json` object, plus `repo`, `priority`,
/// `imported`, `links`, the live `lease` and why the work queue would not
/// hand it out (`ready`, `not_ready`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueShown {
    pub id: String,
    #[serde(default)]
    pub repo: String,
    pub title: String,
    #[serde(default)]
    pub body: String,
    pub author: Person,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    /// `open` or `closed`.
    pub status: String,
    #[serde(default)]
    pub closed_reason: Option<String>,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default)]
    pub priority: Option<i64>,
    /// Replayed from the repository's git history by the importer.
    #[serde(default)]
    pub imported: bool,
    #[serde(default)]
    pub comments: Vec<Comment>,
    #[serde(default)]
    pub links: Links,
    /// The live tenure, `null` when nobody holds the issue.
    #[serde(default)]
    pub lease: Option<ShownLease>,
    /// Whether `collab-lease next` would hand it to the caller.
    #[serde(default)]
    pub ready: bool,
    /// Why not, one phrase each (`closed`, `held by alice until …`, …).
    #[serde(default)]
    pub not_ready: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::super::round_trip;
    use super::*;

    /// The shapes docs/ssh-verbs.md shows ("Issues", "Replies").
    #[test]
    fn doc_shapes_round_trip() {
        let w: IssueWritten = round_trip(
            r#"{"status":"commented","repo":"team/app.git","issue":"<full id>","event":"<id>","seq":42}"#,
        );
        assert_eq!((w.lease_ended, w.link), (None, None));
        let w: IssueWritten = round_trip(
            r#"{"status":"closed","repo":"team/app.git","issue":"<full id>","event":null,"seq":43,"lease_ended":{"holder":"…","token":2}}"#,
        );
        assert_eq!(w.lease_ended.unwrap().unwrap().token, 2);
        let w: IssueWritten = round_trip(
            r#"{"status":"closed","repo":"team/app.git","issue":"<full id>","event":null,"seq":43,"lease_ended":null}"#,
        );
        assert_eq!(w.lease_ended, Some(None));
        let w: IssueWritten = round_trip(
            r#"{"status":"linked","repo":"team/app.git","issue":"<full id>","event":null,"seq":44,"link":{"kind":"blocks","target":{"repo":"team/app.git","id":"<full id>","text":"team/app#8bab8db7"}}}"#,
        );
        assert_eq!(w.link.unwrap().target.text, "team/app#8bab8db7");
        round_trip::<ReadyList>(
            r#"{"repo":"team/app.git","issues":[{"id":"<full id>","title":"T","labels":["bug"],"priority":3,"created_at":"2026-12-03T07:55:58.114Z"}]}"#,
        );
        let shown: IssueShown = round_trip(
            r#"{
  "id": "8bab8db77d3d7f5dfaffa06e4f0fe88ae2dce610",
  "repo": "team/app.git",
  "title": "Crash on start",
  "body": "boom",
  "author": {"name": "ada", "key": "ssh-ed25519 AAAAC3Nza...", "principal": "ada"},
  "created_at": "2026-12-03T07:55:58.114Z",
  "updated_at": "2026-12-03T07:55:58.735Z",
  "status": "closed",
  "closed_reason": "done",
  "labels": ["bug", "x"],
  "priority": null,
  "imported": false,
  "comments": [
    {"id": "5bd19e4716e6c8c4be39bd46721491afef7dd8cd",
     "author": {"name": "ada", "key": "ssh-ed25519 AAAAC3Nza...", "principal": "ada"},
     "at": "2026-12-03T07:55:58.618Z",
     "body": "hi"}
  ],
  "links": {
    "blocks": [{"repo": "team/app.git", "id": "<full id>", "text": "team/app#1a2b3c4d"}],
    "blocked_by": [],
    "relates": [{"repo": "team/lib.git", "id": "<full id>", "text": "team/lib#9f8e7d6c"}]
  },
  "lease": null,
  "ready": false,
  "not_ready": ["closed"]
}"#,
        );
        assert_eq!(shown.links.relates[0].repo, "team/lib.git");
        let list: IssueList = round_trip(
            r#"{"repo": "team/app.git",
 "issues": [{"id": "<full id>", "title": "Crash on start", "status": "open",
             "author": {"name": "ada", "key": "ssh-ed25519 AAAA...", "principal": "ada"},
             "created_at": "…", "updated_at": "…", "labels": ["bug"], "comments": 1, "priority": null}],
 "next": "1796284558114-8bab8db77d3d7f5dfaffa06e4f0fe88ae2dce610",
 "export_behind": 0}"#,
        );
        assert_eq!(list.issues[0].comments, 1);
        assert_eq!(list.export_behind, Some(0));
    }

    /// What the server adds after serializing (display names) reads back.
    #[test]
    fn display_names_round_trip() {
        let shown: IssueShown = round_trip(
            r#"{"id":"a","repo":"r","title":"t","body":"","author":{"name":"ada","key":null,"principal":"SHA256:x","display_name":"Ada"},"created_at":null,"updated_at":null,"status":"open","closed_reason":null,"labels":[],"priority":null,"imported":true,"comments":[],"links":{"blocks":[],"blocked_by":[],"relates":[]},"lease":{"holder":"SHA256:x","holder_name":"Ada","token":1,"acquired_at":"2026-12-03T07:55:58Z","expires_at":null,"note":null},"ready":false,"not_ready":["held by Ada (no expiry)"]}"#,
        );
        assert_eq!(shown.author.display_name.as_deref(), Some("Ada"));
        round_trip::<IssueWritten>(
            r#"{"status":"closed","repo":"r","issue":"a","event":null,"seq":1,"lease_ended":{"holder":"SHA256:x","holder_name":"Ada","token":2}}"#,
        );
    }

    /// An older server's write reply named the issue `id`, and its links
    /// were text or `{"repo", "id"}`.
    #[test]
    fn older_replies_read() {
        let w: IssueWritten =
            serde_json::from_str(r#"{"status":"opened","repo":"r","id":"abcd"}"#).unwrap();
        assert_eq!((w.issue.as_str(), w.event, w.seq), ("abcd", None, 0));
        let links: Links =
            serde_json::from_str(r#"{"blocks":["lib#abcd1234"],"relates":[{"id":"ab12"}]}"#)
                .unwrap();
        assert_eq!(links.blocks[0].text, "lib#abcd1234");
        assert_eq!(
            (links.relates[0].id.as_str(), links.relates[0].text.as_str()),
            ("ab12", "")
        );
    }
}
