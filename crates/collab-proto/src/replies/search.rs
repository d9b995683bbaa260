//! `collab-search` replies (docs/search.md): one page of issues and
//! patches, best first.

use serde::{Deserialize, Serialize};

/// One issue or patch found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchResult {
    /// `issue` or `patch`.
    pub kind: String,
    /// The repository's canonical name (`team/app.git`).
    pub repo: String,
    pub id: String,
    pub title: String,
    /// `open`, `closed`, or `merged` (a patch).
    pub state: String,
    /// Text around the first word found in its best matching title, body
    /// or comment, on one line.
    pub snippet: String,
}

/// A page; `next` is the cursor of the following one (`--after`), `null`
/// on the last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchResults {
    pub results: Vec<SearchResult>,
    pub next: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_shape() {
        let page: SearchResults = super::super::round_trip(
            r#"{"results": [{"kind": "issue", "repo": "team/app.git",
                 "id": "8bab8db77d3d7f5dfaffa06e4f0fe88ae2dce610",
                 "title": "Parser crashes on empty input", "state": "open",
                 "snippet": "…the parser crashes when the file is empty…"}],
                "next": null}"#,
        );
        assert_eq!(page.results[0].kind, "issue");
    }
}
