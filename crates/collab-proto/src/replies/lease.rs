//! `collab-lease` replies. Times are RFC 3339 in UTC, to the second; an
//! open-ended lease has no `expires_at` (`null`). The server always writes
//! every field; the client reads an absent optional one as empty.

use serde::{Deserialize, Serialize};

/// A tenure as `acquire`, `renew` and `next` report it (`status` is
/// `acquired` or `renewed`; `next` adds the issue's `title`, `labels` and
/// `priority`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenure {
    pub status: String,
    pub repo: String,
    pub issue: String,
    pub holder: String,
    /// The fencing token: grows with every new tenure of the issue.
    pub token: i64,
    pub acquired_at: String,
    #[serde(default)]
    pub renewed_at: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
}

/// One live lease of `collab-lease list`. Fields an older server may leave
/// out read as empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRow {
    pub issue: String,
    pub holder: String,
    pub token: i64,
    pub acquired_at: String,
    #[serde(default)]
    pub renewed_at: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
    /// How many times the issue's lease changed hands or state.
    #[serde(default)]
    pub transitions: i64,
    /// The holder's display name (the server adds it to every reply that
    /// names a holder); `holder` stays the full principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_name: Option<String>,
}

/// `collab-lease list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseList {
    pub leases: Vec<LeaseRow>,
}

/// `next`'s reply when it got an issue: the `acquired` tenure plus the
/// issue's `title`, `labels`, `priority`, `body` and `links` (links into
/// repositories the caller cannot read left out): what an agent needs to
/// start, without an `issue show`. Older servers send no `body` or
/// `links`; they read as empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextTenure {
    #[serde(flatten)]
    pub tenure: Tenure,
    pub title: String,
    #[serde(default)]
    pub labels: Vec<String>,
    /// `null`: no priority (after every prioritized issue).
    #[serde(default)]
    pub priority: Option<i64>,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub links: super::issue::Links,
}

/// `release` (`released`) and a `break` of nothing held (`free`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseEnded {
    pub status: String,
    pub repo: String,
    pub issue: String,
}

/// `break`: the tenure broken, why and by whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Broken {
    /// Always `broken`.
    pub status: String,
    pub repo: String,
    pub issue: String,
    pub holder: String,
    pub token: i64,
    pub reason: String,
    /// The principal that broke it.
    pub by: String,
    /// The holder's display name (added by the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_name: Option<String>,
    /// `by`'s display name (added by the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_name: Option<String>,
}

/// Exit 4: the issue is held by someone else (`holder`, `null` when a
/// renew or release finds no live lease).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Always `held`.
    pub status: String,
    pub repo: String,
    pub issue: String,
    #[serde(default)]
    pub holder: Option<String>,
    /// `null`: open-ended (or no holder).
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_name: Option<String>,
}

/// Exit 4: the issue is in its lock delay after `holder`'s lease expired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Locked {
    /// Always `locked`.
    pub status: String,
    pub repo: String,
    pub issue: String,
    pub holder: String,
    #[serde(default)]
    pub locked_until: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_name: Option<String>,
}

/// Exit 3: `next` found nothing ready (with the labels asked for).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {
    /// Always `empty`.
    pub status: String,
    pub repo: String,
    pub labels: Vec<String>,
}

/// Exit 3, `status` `settled`: a `next --wait` that claimed nothing but
/// returned early because merges the caller had queued (`collab-patch
/// merge --when-green`, or into a merge queue) settled since the call
/// began: so an agent waits for "new work or my patches done" in one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settled {
    /// Always `settled`.
    pub status: String,
    pub repo: String,
    pub labels: Vec<String>,
    /// In the order they settled.
    pub settled: Vec<SettledPatch>,
}

/// One queued merge that settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettledPatch {
    /// The patch's full id.
    pub patch: String,
    /// `merged`, or `evicted` (dropped from the queue: a failed check or
    /// group, a new revision, a close, a cancel).
    pub state: String,
    #[serde(default)]
    pub revision: Option<i64>,
    /// The commit that merged it (`merged`).
    #[serde(default)]
    pub commit: Option<String>,
    /// Why it was dropped (`evicted`).
    #[serde(default)]
    pub reason: Option<String>,
    /// The event that settled it (`collab-events watch`).
    pub seq: i64,
}

/// `show`: the issue's lease state, held (`held`), in its lock delay
/// (`locked`) or not (`free`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseShown {
    pub repo: String,
    pub issue: String,
    pub status: String,
    /// The live holder, or the holder a lock delay protects.
    #[serde(default)]
    pub holder: Option<String>,
    #[serde(default)]
    pub token: Option<i64>,
    #[serde(default)]
    pub acquired_at: Option<String>,
    #[serde(default)]
    pub renewed_at: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
    pub transitions: i64,
    /// The last token handed out (0: never leased).
    pub last_token: i64,
    #[serde(default)]
    pub locked_until: Option<String>,
    /// The queued patch carrying the live tenure (a merge queue holds it:
    /// it does not expire until the patch lands or leaves the queue).
    #[serde(default)]
    pub queued: Option<QueuedTenure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_name: Option<String>,
}

/// `show`'s `queued`: the patch and the branch whose merge queue holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedTenure {
    pub patch: String,
    pub branch: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape docs/ssh-verbs.md shows, parsed and written back.
    #[test]
    fn list_round_trips() {
        let line = r#"{"leases":[{"acquired_at":"2026-12-04T10:00:00Z","expires_at":null,"holder":"alice","issue":"4f2a","note":null,"renewed_at":null,"token":3,"transitions":1}]}"#;
        let list: LeaseList = serde_json::from_str(line).unwrap();
        assert_eq!(list.leases[0].token, 3);
        assert_eq!(list.leases[0].expires_at, None);
        let back = serde_json::to_value(&list).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(line).unwrap()
        );
    }

    #[test]
    fn tenure_round_trips() {
        let line = r#"{"acquired_at":"2026-12-04T10:00:00Z","expires_at":"2026-12-04T10:05:00Z","holder":"SHA256:abc","issue":"4f2a","note":"on it","renewed_at":null,"repo":"team/app","status":"acquired","token":7}"#;
        let tenure: Tenure = serde_json::from_str(line).unwrap();
        assert_eq!((tenure.status.as_str(), tenure.token), ("acquired", 7));
        let back = serde_json::to_value(&tenure).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(line).unwrap()
        );
    }

    /// The rest of the shapes docs/ssh-verbs.md ("Leases") shows.
    #[test]
    fn doc_shapes_round_trip() {
        use super::super::round_trip;
        round_trip::<LeaseEnded>(r#"{"status":"released","repo":"r.git","issue":"<40 hex>"}"#);
        let held: Held = round_trip(
            r#"{"status":"held","repo":"r.git","issue":"<40 hex>","holder":"bob","expires_at":null}"#,
        );
        assert_eq!(held.holder.as_deref(), Some("bob"));
        round_trip::<Locked>(
            r#"{"status":"locked","repo":"r.git","issue":"<40 hex>","holder":"bob","locked_until":"2026-09-05T12:31:00Z"}"#,
        );
        round_trip::<Broken>(
            r#"{"status":"broken","repo":"r.git","issue":"<40 hex>","holder":"bob","token":2,"reason":"agent died","by":"admin"}"#,
        );
        round_trip::<LeaseEnded>(r#"{"status":"free","repo":"r.git","issue":"<40 hex>"}"#);
        let shown: LeaseShown = round_trip(
            r#"{"repo":"r.git","issue":"<40 hex>","status":"held","holder":"alice","token":3,"acquired_at":"…","renewed_at":null,"expires_at":"…","note":"…","transitions":2,"last_token":3,"locked_until":null,"queued":null}"#,
        );
        assert_eq!(shown.last_token, 3);
        let queued: LeaseShown = round_trip(
            r#"{"repo":"r.git","issue":"<40 hex>","status":"held","holder":"alice","token":3,"acquired_at":"…","renewed_at":null,"expires_at":null,"note":null,"transitions":0,"last_token":3,"locked_until":null,"queued":{"patch":"<40 hex>","branch":"main"}}"#,
        );
        assert_eq!(queued.queued.unwrap().branch, "main");
        let next: NextTenure = round_trip(
            r##"{"status":"acquired","repo":"r.git","issue":"<40 hex>","holder":"alice","token":3,"acquired_at":"2026-09-05T12:00:00Z","renewed_at":null,"expires_at":"2026-09-05T12:30:00Z","note":"fixing the parser","title":"Fix it","labels":["bug"],"priority":null,"body":"It breaks.","links":{"blocks":[],"blocked_by":[{"repo":"r.git","id":"<40 hex>","text":"#abcd1234"}],"relates":[]}}"##,
        );
        assert_eq!(next.tenure.token, 3);
        assert_eq!(next.links.blocked_by[0].text, "#abcd1234");
        // An older server's reply, without body and links.
        let old: NextTenure = serde_json::from_str(
            r#"{"status":"acquired","repo":"r.git","issue":"<40 hex>","holder":"alice","token":3,"acquired_at":"2026-09-05T12:00:00Z","renewed_at":null,"expires_at":null,"note":null,"title":"Fix it","labels":[],"priority":null}"#,
        )
        .unwrap();
        assert_eq!((old.body.as_str(), old.links.blocks.len()), ("", 0));
        round_trip::<Empty>(r#"{"status":"empty","repo":"r.git","labels":["bug"]}"#);
        let settled: Settled = round_trip(
            r#"{"status":"settled","repo":"r.git","labels":[],"settled":[{"patch":"<40 hex>","state":"merged","revision":2,"commit":"<40 hex>","reason":null,"seq":41},{"patch":"<40 hex>","state":"evicted","revision":1,"commit":null,"reason":"required check ci/test failed","seq":44}]}"#,
        );
        assert_eq!(settled.settled[1].state, "evicted");
    }
}
