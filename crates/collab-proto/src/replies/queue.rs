//! `collab-queue` replies (docs/checks.md, "Reading the queue"). Times are
//! RFC 3339 in UTC, to the second.

use serde::{Deserialize, Serialize};

/// A patch in a merge group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMember {
    pub patch: String,
    pub revision: i64,
    /// The commit of the group that brings the patch in (its head when it
    /// fast-forwarded, else the merge commit).
    pub commit: String,
}

/// A merge group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupShown {
    /// Its number on the branch.
    pub group: i64,
    /// The ref its commit is kept under.
    #[serde(rename = "ref")]
    pub reference: String,
    pub commit: String,
    /// The base tip it was built on.
    pub base: String,
    /// `testing`, `merged`, `failed` or `stale`.
    pub state: String,
    #[serde(default)]
    pub reason: Option<String>,
    pub patches: Vec<GroupMember>,
    /// The suspects an exclusion group leaves out, `null` for any other.
    #[serde(default)]
    pub excluded: Option<Vec<String>>,
    /// The group of a merge train it was built on (its `base` is that
    /// group's commit), `null` when built on the branch's tip.
    #[serde(default)]
    pub built_on: Option<i64>,
    pub created_at: String,
    #[serde(default)]
    pub finished_at: Option<String>,
}

/// One queued patch, in queue order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueEntry {
    /// 1 for the first.
    pub position: u64,
    pub patch: String,
    pub revision: i64,
    pub requested_by: String,
    pub queued_at: String,
    /// The first group under test holding it, `null` when none.
    #[serde(default)]
    pub in_group: Option<i64>,
    /// Every group under test holding it.
    pub in_groups: Vec<i64>,
}

/// `show`: a branch's merge queue, its rule, its entries and its groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueShown {
    pub repo: String,
    pub branch: String,
    /// Whether the branch's rule queues merges.
    pub queue: bool,
    pub max_batch: u32,
    pub max_parallel: u32,
    /// `merge` or `rebase`.
    pub queue_method: String,
    pub speculate: bool,
    /// Whether the queue runs a merge train (`max_parallel` groups, each
    /// on the one before, while nothing failed).
    #[serde(default)]
    pub train: bool,
    #[serde(default)]
    pub min_batch: u32,
    /// Seconds.
    #[serde(default)]
    pub batch_wait: u32,
    pub required_checks: Vec<String>,
    pub entries: Vec<QueueEntry>,
    /// The first group under test, `null` when none.
    #[serde(default)]
    pub current_group: Option<GroupShown>,
    /// Every group under test, oldest first.
    pub live_groups: Vec<GroupShown>,
    /// The latest groups.
    pub groups: Vec<GroupShown>,
    /// The number of suspects of a failed batch's search, 0 when none.
    pub bisecting: i64,
    /// `exclude`, `bisect`, or `null` when no search runs.
    #[serde(default)]
    pub search: Option<String>,
    /// The node holding the branch's claim, `null` when none.
    #[serde(default)]
    pub driven_by: Option<String>,
    /// Every group the branch's queue built, by how it ended: the CI runs
    /// it cost (`stale` ones were thrown away).
    #[serde(default)]
    pub counts: GroupCounts,
}

/// How many groups a branch's queue built, and how each ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GroupCounts {
    pub built: i64,
    pub testing: i64,
    pub merged: i64,
    pub failed: i64,
    pub stale: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape docs/checks.md describes, every field present.
    #[test]
    fn show_round_trips() {
        let group = r#"{"group":7,"ref":"refs/collab/queue/main/7","commit":"c7","base":"b","state":"testing","reason":null,"patches":[{"patch":"p1","revision":2,"commit":"m1"}],"excluded":null,"built_on":null,"created_at":"2026-12-05T12:00:00Z","finished_at":null}"#;
        let line = format!(
            r#"{{"repo":"team/app.git","branch":"main","queue":true,"max_batch":8,"max_parallel":2,"queue_method":"merge","speculate":false,"train":true,"min_batch":1,"batch_wait":0,"required_checks":["ci/test"],
            "entries":[{{"position":1,"patch":"p1","revision":2,"requested_by":"alice","queued_at":"2026-12-05T11:59:00Z","in_group":7,"in_groups":[7]}}],
            "current_group":{group},"live_groups":[{group}],"groups":[{group}],"bisecting":0,"search":null,"driven_by":"node-a",
            "counts":{{"built":3,"testing":1,"merged":1,"failed":0,"stale":1}}}}"#
        );
        let shown: QueueShown = serde_json::from_str(&line).unwrap();
        assert_eq!(shown.groups[0].reference, "refs/collab/queue/main/7");
        assert_eq!(
            serde_json::to_value(&shown).unwrap(),
            serde_json::from_str::<serde_json::Value>(&line).unwrap()
        );
    }
}
