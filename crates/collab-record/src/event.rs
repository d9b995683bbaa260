//! The event envelope and its payloads, and the canonical JSON bytes that
//! are stored (and signed) as an event commit's `event.json`.
//!
//! An event is one JSON object: `type` (the payload kind, e.g.
//! `issue.comment`), `at` (RFC 3339 UTC, authoritative for ordering),
//! `author {name, key}` and the payload's fields beside them. Canonical JSON
//! means: object keys sorted by their UTF-8 bytes at every level, no
//! whitespace outside strings, serde_json's string escaping. This module
//! knows nothing about git or signatures.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote an event: a display name and the OpenSSH public key line
/// (`ssh-ed25519 AAAA...`, no comment) whose private half signed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Author {
    pub name: String,
    pub key: String,
}

/// One signed event as stored in `event.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When the author made the event; concurrent events are replayed in
    /// `(at, commit id)` order.
    #[serde(with = "rfc3339_millis")]
    pub at: DateTime<Utc>,
    pub author: Author,
    /// The payload; its `type` tag sits beside `at` and `author`.
    #[serde(flatten)]
    pub action: Action,
}

/// Every kind of event. Variants are tagged by `type` with explicit wire
/// names, so Rust names never leak into the record. New families (such as
/// `patch.*`) are added as new variants; readers treat a type they do not
/// know as [`Action::Unknown`] instead of failing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Action {
    #[serde(rename = "issue.open")]
    IssueOpen(IssueOpen),
    #[serde(rename = "issue.comment")]
    IssueComment(IssueComment),
    #[serde(rename = "issue.edit")]
    IssueEdit(IssueEdit),
    #[serde(rename = "issue.label")]
    IssueLabel(IssueLabel),
    #[serde(rename = "issue.close")]
    IssueClose(IssueClose),
    #[serde(rename = "issue.reopen")]
    IssueReopen,
    #[serde(rename = "patch.open")]
    PatchOpen(PatchOpen),
    #[serde(rename = "patch.revise")]
    PatchRevise(PatchRevise),
    #[serde(rename = "patch.review")]
    PatchReview(PatchReview),
    #[serde(rename = "patch.comment")]
    PatchComment(PatchComment),
    #[serde(rename = "patch.close")]
    PatchClose,
    #[serde(rename = "patch.merge")]
    PatchMerge(PatchMerge),
    /// A `type` this version does not know (written by a newer client).
    #[serde(other)]
    Unknown,
}

/// The root event of an issue DAG.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueOpen {
    pub title: String,
    pub body: String,
    pub labels: Vec<String>,
    /// Random hex, so two identical opens in the same instant still get
    /// different root commits (and so different issue ids).
    pub nonce: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueComment {
    pub body: String,
}

/// Replaces the title and/or the body; an absent field is left unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueEdit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueLabel {
    #[serde(default)]
    pub add: Vec<String>,
    #[serde(default)]
    pub remove: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueClose {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The root event of a patch DAG; it is also revision 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchOpen {
    pub title: String,
    pub body: String,
    /// The branch name the patch proposes to change (`main`).
    pub base: String,
    /// Revision 1's head commit (40 hex).
    pub head: String,
    /// The base-branch commit the revision starts from (the merge base of
    /// `head` and the base branch when it was made). Recorded so that diffs
    /// stay the same after the base moves or the patch is merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_commit: Option<String>,
    /// Random hex, as in [`IssueOpen::nonce`].
    pub nonce: String,
}

/// A new revision: the patch now proposes `head`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchRevise {
    pub head: String,
    /// As in [`PatchOpen::base_commit`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_commit: Option<String>,
}

/// A reviewer's vote on one revision. A later vote by the same key (and
/// `voter`) on the same revision replaces the earlier one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchReview {
    /// The revision voted on, by the id of the event that made it (the
    /// patch id for revision 1): revision numbers can shift when
    /// concurrent revisions meet, event ids cannot.
    pub revision: String,
    pub verdict: Verdict,
    pub body: String,
    /// Whose vote this is when the signing key records votes for others:
    /// the server's signed export (one key) names each voting principal
    /// here, so their votes stay apart. Absent in votes people sign
    /// themselves; the CLI never writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voter: Option<String>,
}

/// A review verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Approve,
    RequestChanges,
    Comment,
}

impl Verdict {
    /// The wire name (`approve`, `request_changes`, `comment`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::RequestChanges => "request_changes",
            Verdict::Comment => "comment",
        }
    }
}

/// A comment on a patch; with `path` (and `line`) it is an inline comment
/// on a revision's file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchComment {
    pub body: String,
    /// The revision commented on, by event id (see [`PatchReview::revision`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// 1-based line in the revision's version of `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// The patch landed on its base branch in `commit` (the commit of the base
/// branch that brought it in).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchMerge {
    pub commit: String,
}

impl Action {
    /// The wire name of this event type (`issue.open`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Action::IssueOpen(_) => "issue.open",
            Action::IssueComment(_) => "issue.comment",
            Action::IssueEdit(_) => "issue.edit",
            Action::IssueLabel(_) => "issue.label",
            Action::IssueClose(_) => "issue.close",
            Action::IssueReopen => "issue.reopen",
            Action::PatchOpen(_) => "patch.open",
            Action::PatchRevise(_) => "patch.revise",
            Action::PatchReview(_) => "patch.review",
            Action::PatchComment(_) => "patch.comment",
            Action::PatchClose => "patch.close",
            Action::PatchMerge(_) => "patch.merge",
            Action::Unknown => "unknown",
        }
    }
}

/// Why stored `event.json` bytes are not a usable event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("event.json is not JSON: {0}")]
    NotJson(String),
    #[error("event.json is not in canonical form")]
    NotCanonical,
    #[error("event.json does not match the event schema: {0}")]
    Schema(String),
}

impl Event {
    /// A new event by `author` at `at` (truncated to milliseconds, the
    /// precision stored on disk, so that an event round-trips exactly).
    pub fn new(author: Author, at: DateTime<Utc>, action: Action) -> Event {
        let at = DateTime::parse_from_rfc3339(&at.to_rfc3339_opts(SecondsFormat::Millis, true))
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or(at);
        Event { at, author, action }
    }

    /// The canonical JSON bytes of this event (what is stored and signed).
    pub fn to_canonical_json(&self) -> Vec<u8> {
        // Serializing plain structs with string fields cannot fail.
        let value = serde_json::to_value(self).expect("event serializes to JSON");
        canonical_json(&value)
    }

    /// Decodes stored `event.json` bytes. Bytes that parse but are not in
    /// canonical form are refused: the signed bytes must be the one
    /// representation of the event.
    pub fn from_canonical_json(bytes: &[u8]) -> Result<Event, DecodeError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| DecodeError::NotJson(e.to_string()))?;
        if canonical_json(&value) != bytes {
            return Err(DecodeError::NotCanonical);
        }
        serde_json::from_value(value).map_err(|e| DecodeError::Schema(e.to_string()))
    }
}

/// Canonical JSON: keys sorted (by UTF-8 bytes) at every level, compact.
/// Sorting is done here rather than relying on serde_json's map type, so the
/// output does not change if some crate enables `preserve_order`.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    serde_json::to_vec(&sorted(value)).expect("a JSON value serializes")
}

fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// `at` is written as RFC 3339 UTC with milliseconds (`2026-01-02T03:04:05.678Z`)
/// and read from any RFC 3339 timestamp.
mod rfc3339_millis {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(at: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&at.to_rfc3339_opts(SecondsFormat::Millis, true))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn author() -> Author {
        Author {
            name: "Ada".into(),
            key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample".into(),
        }
    }

    fn at() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap()
    }

    #[test]
    fn canonical_json_sorts_keys_and_has_no_whitespace() {
        let v: Value =
            serde_json::from_str(r#"{ "b": 1, "a": {"z": [ 3, {"y":1,"x":2} ], "c": "é \" \n"} }"#)
                .unwrap();
        let bytes = canonical_json(&v);
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            r#"{"a":{"c":"é \" \n","z":[3,{"x":2,"y":1}]},"b":1}"#
        );
    }

    #[test]
    fn event_bytes_are_canonical_and_round_trip() {
        let ev = Event::new(
            author(),
            at(),
            Action::IssueOpen(IssueOpen {
                title: "Crash on start".into(),
                body: "It \"crashes\".\n".into(),
                labels: vec!["bug".into()],
                nonce: "00ff".into(),
            }),
        );
        let bytes = ev.to_canonical_json();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert_eq!(
            text,
            r#"{"at":"2026-01-02T03:04:05.000Z","author":{"key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample","name":"Ada"},"body":"It \"crashes\".\n","labels":["bug"],"nonce":"00ff","title":"Crash on start","type":"issue.open"}"#
        );
        assert_eq!(Event::from_canonical_json(&bytes).unwrap(), ev);
    }

    #[test]
    fn unit_and_optional_payloads_serialize_minimally() {
        let reopen = Event::new(author(), at(), Action::IssueReopen);
        let text = String::from_utf8(reopen.to_canonical_json()).unwrap();
        assert!(text.ends_with(r#""type":"issue.reopen"}"#), "{text}");
        let close = Event::new(
            author(),
            at(),
            Action::IssueClose(IssueClose { reason: None }),
        );
        let text = String::from_utf8(close.to_canonical_json()).unwrap();
        assert!(!text.contains("reason"), "{text}");
        assert_eq!(Event::from_canonical_json(text.as_bytes()).unwrap(), close);
    }

    #[test]
    fn non_canonical_bytes_are_refused() {
        let ev = Event::new(author(), at(), Action::IssueReopen);
        let pretty = serde_json::to_vec_pretty(&ev).unwrap();
        assert_eq!(
            Event::from_canonical_json(&pretty),
            Err(DecodeError::NotCanonical)
        );
        assert!(matches!(
            Event::from_canonical_json(b"{not json"),
            Err(DecodeError::NotJson(_))
        ));
    }

    #[test]
    fn unknown_types_decode_as_unknown() {
        let bytes = br#"{"at":"2026-01-02T03:04:05.000Z","author":{"key":"k","name":"n"},"head":"abc","type":"future.thing"}"#;
        let ev = Event::from_canonical_json(bytes).unwrap();
        assert_eq!(ev.action, Action::Unknown);
    }

    #[test]
    fn patch_events_have_their_documented_wire_form() {
        let review = Event::new(
            author(),
            at(),
            Action::PatchReview(PatchReview {
                revision: "ab".into(),
                verdict: Verdict::RequestChanges,
                body: "b".into(),
                voter: None,
            }),
        );
        let text = String::from_utf8(review.to_canonical_json()).unwrap();
        assert!(
            text.ends_with(
                r#""body":"b","revision":"ab","type":"patch.review","verdict":"request_changes"}"#
            ),
            "{text}"
        );
        let comment = Event::new(
            author(),
            at(),
            Action::PatchComment(PatchComment {
                body: "c".into(),
                revision: None,
                path: Some("src/a.rs".into()),
                line: Some(7),
            }),
        );
        let text = String::from_utf8(comment.to_canonical_json()).unwrap();
        assert!(
            text.contains(r#""line":7,"path":"src/a.rs","type":"patch.comment""#),
            "{text}"
        );
        assert!(!text.contains("revision"), "{text}");
        for ev in [
            review,
            comment,
            Event::new(author(), at(), Action::PatchClose),
        ] {
            assert_eq!(Event::from_canonical_json(&ev.to_canonical_json()), Ok(ev));
        }
    }

    #[test]
    fn sub_millisecond_precision_is_dropped_on_creation() {
        let precise = Utc.timestamp_opt(1_700_000_000, 123_456_789).unwrap();
        let ev = Event::new(author(), precise, Action::IssueReopen);
        assert_eq!(ev.at.timestamp_subsec_nanos(), 123_000_000);
        let back = Event::from_canonical_json(&ev.to_canonical_json()).unwrap();
        assert_eq!(back.at, ev.at);
    }

    proptest::proptest! {
        /// Any comment or label event, whatever its strings hold, encodes
        /// to canonical bytes that decode back to the same event.
        #[test]
        fn any_event_round_trips_canonically(
            name in ".*",
            body in ".*",
            labels in proptest::collection::vec("[^ ,]+", 0..4),
            millis in 0i64..4_000_000_000_000,
        ) {
            let at = Utc.timestamp_millis_opt(millis).unwrap();
            let who = Author { name, key: "ssh-ed25519 AAAA".into() };
            for action in [
                Action::IssueComment(IssueComment { body: body.clone() }),
                Action::IssueLabel(IssueLabel { add: labels.clone(), remove: vec![body.clone()] }),
            ] {
                let ev = Event::new(who.clone(), at, action);
                let bytes = ev.to_canonical_json();
                proptest::prop_assert_eq!(Event::from_canonical_json(&bytes), Ok(ev));
            }
        }
    }
}
