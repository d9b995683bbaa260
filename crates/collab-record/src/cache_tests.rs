//! The test of the issue cache (`cache.rs`): it opens and comments on
//! issues with `issue`, which sits above `state` and `cache`, so it lives
//! here rather than in `cache.rs`.

use git2::Repository;

use crate::cache::{cache_path, fingerprint, load, save};
use crate::issue::{self, Identity};
use crate::sign::SigningKey;
use crate::state::{list_issues, IssueState};
use crate::trust;

#[test]
fn list_issues_reuses_entries_until_the_tip_or_the_allowlist_changes() {
    let dir = tempfile::tempdir().unwrap();
    let repo = Repository::init_bare(dir.path().join("r.git")).unwrap();
    let who = Identity {
        key: SigningKey::generate(&dir.path().join("k"), "k", false).unwrap(),
        name: "n".into(),
    };
    let a = issue::open(&repo, &who, "first", "", &[]).unwrap().issue;
    let b = issue::open(&repo, &who, "second", "", &[]).unwrap().issue;
    assert_eq!(list_issues(&repo).unwrap().len(), 2);
    assert!(cache_path(&repo).exists());

    // Prove that entries are served from the cache: doctor one.
    let key = fingerprint(&repo);
    let mut entries = load::<IssueState>(&repo, &key);
    entries.get_mut(&a).unwrap().state.as_mut().unwrap().title = "from cache".into();
    save(&repo, &key, entries);
    let titles = |repo: &Repository| -> Vec<String> {
        let mut t: Vec<String> = list_issues(repo)
            .unwrap()
            .into_iter()
            .map(|i| i.title)
            .collect();
        t.sort();
        t
    };
    assert_eq!(titles(&repo), vec!["from cache", "second"]);

    // A new event moves the tip: that issue is replayed again.
    issue::comment(&repo, &who, &a, "c").unwrap();
    assert_eq!(titles(&repo), vec!["first", "second"]);

    // A changed allowlist invalidates everything.
    let mut entries = load::<IssueState>(&repo, &key);
    entries.get_mut(&b).unwrap().state.as_mut().unwrap().title = "stale".into();
    save(&repo, &key, entries);
    assert_eq!(titles(&repo), vec!["first", "stale"]);
    std::fs::create_dir_all(trust::collab_dir(&repo)).unwrap();
    std::fs::write(
        trust::trust_path(&repo),
        format!("{}\n", who.key.public_key_line()),
    )
    .unwrap();
    assert_eq!(titles(&repo), vec!["first", "second"]);

    // A corrupt cache is rebuilt.
    std::fs::write(cache_path(&repo), b"{garbage").unwrap();
    assert_eq!(titles(&repo), vec!["first", "second"]);
}
