//! Typed replies: the JSON a verb prints, as one struct both ends share.
//! The server serializes it, the client deserializes it, and a round-trip
//! test per family pins the shape docs/ssh-verbs.md (or the family's own
//! page) shows. Fields the server adds after serializing (the display
//! names of `people::annotate`) are optional and skipped when absent.

pub mod admin;
pub mod check;
pub mod fenced;
pub mod issue;
pub mod lease;
pub mod mirror;
pub mod patch;
pub mod queue;
pub mod release;
pub mod search;
pub mod webhook;

/// Parse `line` as a `T`, write it back, and compare the two as JSON
/// values (key order aside): the round-trip every family's tests pin the
/// documented shapes with.
#[cfg(test)]
fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(line: &str) -> T {
    let parsed: T = serde_json::from_str(line).unwrap();
    assert_eq!(
        serde_json::to_value(&parsed).unwrap(),
        serde_json::from_str::<serde_json::Value>(line).unwrap(),
        "{line}"
    );
    parsed
}
