//! `collab-hook` replies (docs/ssh-verbs.md, "`collab-hook`";
//! docs/webhooks.md). Times are RFC 3339 in UTC, to the second.

use serde::{Deserialize, Serialize};

/// A subscription as the replies show it (never the secret itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookShown {
    pub id: String,
    /// Where it was declared: `ssh`, `config` or `governance`.
    pub origin: String,
    /// The principal that added it.
    pub owner: String,
    /// The repository glob it follows.
    pub repo: String,
    pub url: String,
    /// The event type patterns it delivers (none: every type).
    pub events: Vec<String>,
    /// Whether deliveries are signed with a secret.
    pub secret: bool,
    pub active: bool,
    /// Why it was disabled (`null` while active).
    #[serde(default)]
    pub disabled_reason: Option<String>,
    /// The last event seq delivered.
    pub cursor: i64,
    /// Failed attempts since the last success.
    pub attempts: i64,
    #[serde(default)]
    pub failing_since: Option<String>,
    #[serde(default)]
    pub next_attempt_at: Option<String>,
    /// Waiting for an administrator's `collab-hook approve`.
    pub needs_approval: bool,
    /// The administrator that approved a non-public target.
    #[serde(default)]
    pub approved_by: Option<String>,
}

/// `add`: `{"status": "added" | "pending_approval", "webhook": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookAdded {
    pub status: String,
    pub webhook: WebhookShown,
}

/// `list`: yours (all of them, for administrators).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookShown>,
}

/// `remove`, `enable` and `approve`: `{"status": "removed" | "enabled" |
/// "approved", "id"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookChanged {
    pub status: String,
    pub id: String,
}

/// `test` and `redeliver`: the attempt that was delivered (a failed one
/// is an `error:` line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivered {
    /// The delivery's `webhook-id` header (`<webhook>-<seq>`, or
    /// `<webhook>-test-…`).
    pub webhook_id: String,
    /// `delivered`.
    pub outcome: String,
    /// The HTTP status.
    #[serde(default)]
    pub status: Option<u16>,
    pub latency_ms: i64,
    /// Always empty: the body is never shown.
    pub response: String,
}

/// One attempt of `deliveries`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRow {
    pub webhook_id: String,
    /// The event's seq (`null` for a test).
    #[serde(default)]
    pub seq: Option<i64>,
    pub at: String,
    /// The HTTP status, `null` when no response came.
    #[serde(default)]
    pub status: Option<i64>,
    /// `delivered`, `failed` or `refused`.
    pub outcome: String,
    /// `null` for an attempt that got no response (it would tell a closed
    /// port from a silent one).
    #[serde(default)]
    pub latency_ms: Option<i64>,
    pub response: String,
}

/// `deliveries`: the attempt log, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deliveries {
    pub id: String,
    pub deliveries: Vec<DeliveryRow>,
}

#[cfg(test)]
mod tests {
    use super::super::round_trip;
    use super::*;

    /// The shapes docs/ssh-verbs.md and docs/webhooks.md show, with every
    /// field the server writes.
    #[test]
    fn doc_shapes_round_trip() {
        let hook = r#"{"id":"wh3f9c0e1a2b4d","origin":"ssh","owner":"alice","repo":"team/*","url":"https://ci.example.com/hook","events":["ref.*","release.*"],"secret":true,"active":true,"disabled_reason":null,"cursor":1234,"attempts":0,"failing_since":null,"next_attempt_at":null,"needs_approval":false,"approved_by":null}"#;
        let added: WebhookAdded = round_trip(&format!(r#"{{"status":"added","webhook":{hook}}}"#));
        assert_eq!(added.webhook.cursor, 1234);
        round_trip::<WebhookList>(&format!(r#"{{"webhooks":[{hook}]}}"#));
        round_trip::<WebhookChanged>(r#"{"status":"approved","id":"wh3f9c0e1a2b4d"}"#);
        round_trip::<Delivered>(
            r#"{"webhook_id":"wh3f9c0e1a2b4d-41","outcome":"delivered","status":200,"latency_ms":12,"response":""}"#,
        );
        let log: Deliveries = round_trip(
            r#"{"id":"wh3f9c0e1a2b4d","deliveries":[{"webhook_id":"wh3f9c0e1a2b4d-41","seq":41,"at":"2026-12-04T10:00:00Z","status":null,"outcome":"failed","latency_ms":null,"response":"no response"}]}"#,
        );
        assert_eq!(log.deliveries[0].latency_ms, None);
    }
}
