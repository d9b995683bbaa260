//! Typed replies: the JSON a verb prints, as one struct both ends share.
//! The server serializes it, the client deserializes it, and a round-trip
//! test pins the shape. Families move here one at a time; until then a
//! verb's reply is documented in docs/ssh-verbs.md (its JSON shapes).

pub mod admin;
pub mod check;
pub mod fenced;
pub mod issue;
pub mod lease;
pub mod mirror;
pub mod patch;
pub mod queue;
pub mod release;
pub mod webhook;
