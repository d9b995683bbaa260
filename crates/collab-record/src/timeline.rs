//! A patch's timeline: every applied event of its DAG (revisions, reviews,
//! comments, close, merge) as one stream in replay order, which is what
//! `git-collab patch show` prints and `show --json` carries as `timeline`.
//! Entries are built by the patch replay (`patch.rs`) as it folds each
//! event, so the timeline is exactly as deterministic as the state; this
//! module owns the entry types and their one-line text form.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::event::{Author, Verdict};

/// One entry of a patch timeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineEntry {
    pub at: DateTime<Utc>,
    /// The id of the event commit this entry comes from.
    pub event: String,
    pub author: Author,
    /// What happened; its `kind` tag sits beside `at`, `event` and `author`.
    #[serde(flatten)]
    pub item: TimelineItem,
}

/// What a timeline entry records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TimelineItem {
    /// `patch.open`: the patch and its revision 1.
    Opened {
        revision: u32,
        head: String,
        base: String,
    },
    /// `patch.revise`: revision `revision` now proposes `head`.
    Revised { revision: u32, head: String },
    /// `patch.review`: a vote on a revision. `replaces` names the event of
    /// the same author's earlier vote on that revision, which no longer counts.
    Reviewed {
        revision: u32,
        verdict: Verdict,
        body: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaces: Option<String>,
    },
    /// `patch.comment`, inline when it has a `path`.
    Commented {
        body: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revision: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<u32>,
    },
    /// `patch.close`.
    Closed,
    /// `patch.merge`: the patch landed in `commit`.
    Merged { commit: String },
}

impl TimelineEntry {
    /// A one-line summary for text output: what happened, by whom; the body
    /// of a review or comment is left to the caller.
    pub fn headline(&self) -> String {
        let who = &self.author.name;
        let what = match &self.item {
            TimelineItem::Opened {
                revision,
                head,
                base,
            } => format!("opened revision {revision} ({}) onto {base}", short(head)),
            TimelineItem::Revised { revision, head } => {
                format!("pushed revision {revision} ({})", short(head))
            }
            TimelineItem::Reviewed {
                revision,
                verdict,
                replaces,
                ..
            } => format!(
                "{} revision {revision}{}",
                match verdict {
                    Verdict::Approve => "approved",
                    Verdict::RequestChanges => "requested changes on",
                    Verdict::Comment => "reviewed",
                },
                if replaces.is_some() {
                    " (replacing an earlier vote)"
                } else {
                    ""
                }
            ),
            TimelineItem::Commented {
                revision,
                path,
                line,
                ..
            } => {
                let mut s = "commented".to_string();
                if let Some(p) = path {
                    s.push_str(&format!(" on {p}"));
                    if let Some(l) = line {
                        s.push_str(&format!(":{l}"));
                    }
                }
                if let Some(r) = revision {
                    s.push_str(&format!(" (revision {r})"));
                }
                s
            }
            TimelineItem::Closed => "closed the patch".to_string(),
            TimelineItem::Merged { commit } => format!("merged it in {}", short(commit)),
        };
        format!(
            "{} {who} {what}",
            self.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
    }

    /// The text body of a review or comment (empty for other entries).
    pub fn body(&self) -> &str {
        match &self.item {
            TimelineItem::Reviewed { body, .. } | TimelineItem::Commented { body, .. } => body,
            _ => "",
        }
    }
}

fn short(oid: &str) -> &str {
    // By characters: a head read from someone's event need not be hex.
    oid.char_indices().nth(8).map_or(oid, |(at, _)| &oid[..at])
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn entries_serialize_flat_with_a_kind_tag() {
        let entry = TimelineEntry {
            at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
            event: "e".into(),
            author: Author {
                name: "Ada".into(),
                key: "k".into(),
            },
            item: TimelineItem::Commented {
                body: "nit".into(),
                revision: Some(2),
                path: Some("src/a.rs".into()),
                line: Some(3),
            },
        };
        let json = serde_json::to_value(&entry).unwrap();
        assert_eq!(json["kind"], "commented");
        assert_eq!(json["path"], "src/a.rs");
        assert_eq!(json["event"], "e");
        let back: TimelineEntry = serde_json::from_value(json).unwrap();
        assert_eq!(back, entry);
        assert_eq!(
            entry.headline(),
            "2026-01-02T03:04:05Z Ada commented on src/a.rs:3 (revision 2)"
        );
    }
}
