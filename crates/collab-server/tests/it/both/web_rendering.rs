//! Claims in the web UI (the lease plan's Task 7): a lease taken over SSH
//! with `collab-lease acquire` shows as "claimed by <holder>" on the issues
//! list and on the issue page; an expired lease does not, and neither does
//! a live lease on a closed issue.

use collab_testkit as common;
use collab_testkit::web as web_support;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{fingerprint, ServerHarness};
use web_support::get;

/// The `<li>` of one issue on the list page.
fn list_row(page: &str, id: &str) -> String {
    let start = page
        .find(&format!("id=\"issue-{}\"", &id[..8]))
        .unwrap_or_else(|| panic!("issue {id} is not listed:\n{page}"));
    let end = page[start..].find("</li>").expect("end of row") + start;
    page[start..end].to_string()
}

fn acquire(h: &ServerHarness, key: &Path, repo: &str, issue: &str, ttl: Option<u64>) {
    let ttl = ttl.map(|t| format!(" --ttl {t}")).unwrap_or_default();
    let out = h.ssh_exec_as(
        key,
        &format!("collab-lease acquire '{repo}' '{issue}'{ttl}"),
        b"",
    );
    assert!(out.success(), "{out:?}");
    assert_eq!(out.json()["status"], "acquired", "{out:?}");
}

fn live_leases(h: &ServerHarness, repo: &str) -> Vec<serde_json::Value> {
    let out = h.ssh_exec(&format!("collab-lease list '{repo}'"));
    assert!(out.success(), "{out:?}");
    out.json()["leases"].as_array().expect("leases").clone()
}

#[test]
fn live_claims_show_on_the_list_and_the_issue_page() {
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "claims");
    let mine = web_support::open_issue(&h, &clone, "Claimed by the admin", "", &[]);
    let agents = web_support::open_issue(&h, &clone, "Claimed by an agent", "", &[]);
    let free = web_support::open_issue(&h, &clone, "Nobody works on this", "", &[]);
    web_support::push_collab(&h, &clone);
    let agent = h.authorized_key("agent");
    let admin_fp = fingerprint(&h.ssh_client_key());
    let agent_fp = fingerprint(&agent);
    // Holders by display name (the key's comment), the principal in `title`.
    let admin_who = format!("<span class=\"who\" title=\"{admin_fp}\">client</span>");
    let agent_who = format!("<span class=\"who\" title=\"{agent_fp}\">agent</span>");

    // Before any lease, nothing is claimed.
    assert!(!get(&h, "/claims/-/issues").text().contains("claimed by"));

    acquire(&h, &h.ssh_client_key(), "claims", &mine, None);
    acquire(&h, &agent, "claims", &agents[..8], Some(3600));

    let list = get(&h, "/claims/-/issues");
    assert_eq!(list.status, 200);
    let page = list.text();
    assert!(
        list_row(&page, &mine).contains(&format!(
            "<span class=\"claim\">claimed by {admin_who}</span>"
        )),
        "{page}"
    );
    assert!(
        list_row(&page, &agents).contains(&format!("claimed by {agent_who}")),
        "{page}"
    );
    assert!(!list_row(&page, &free).contains("claimed by"), "{page}");
    assert_eq!(page.matches("claimed by").count(), 2, "{page}");

    let detail = get(&h, &format!("/claims/-/issues/{}", &mine[..8])).text();
    assert!(
        detail.contains(&format!("claimed by {admin_who}")),
        "{detail}"
    );
    assert!(detail.contains("no expiry"), "{detail}");
    let detail = get(&h, &format!("/claims/-/issues/{agents}")).text();
    assert!(
        detail.contains(&format!("claimed by {agent_who}")),
        "{detail}"
    );
    assert!(detail.contains("until 20"), "{detail}");
    let detail = get(&h, &format!("/claims/-/issues/{}", &free[..8])).text();
    assert!(!detail.contains("claimed by"), "{detail}");

    // Released: gone from both pages.
    let out = h.ssh_exec_as(
        &agent,
        &format!("collab-lease release claims {agents}"),
        b"",
    );
    assert!(out.success(), "{out:?}");
    assert!(!list_row(&get(&h, "/claims/-/issues").text(), &agents).contains("claimed by"));
    assert!(!get(&h, &format!("/claims/-/issues/{agents}"))
        .text()
        .contains("claimed by"));
}

#[test]
fn an_expired_claim_does_not_show() {
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "expiry");
    let issue = web_support::open_issue(&h, &clone, "Briefly claimed", "", &[]);
    web_support::push_collab(&h, &clone);

    acquire(&h, &h.ssh_client_key(), "expiry", &issue, Some(1));
    // Wait until the server itself no longer lists the lease (a hang guard,
    // not a timing assertion).
    let start = Instant::now();
    while !live_leases(&h, "expiry").is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the lease never expired"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let page = get(&h, "/expiry/-/issues").text();
    assert!(page.contains("Briefly claimed"), "{page}");
    assert!(!page.contains("claimed by"), "{page}");
    let detail = get(&h, &format!("/expiry/-/issues/{issue}")).text();
    assert!(detail.contains("Briefly claimed"), "{detail}");
    assert!(!detail.contains("claimed by"), "{detail}");
}

#[test]
fn closing_an_issue_ends_its_claim_and_the_pages_show_none() {
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "closing");
    let issue = web_support::open_issue(&h, &clone, "Claimed then closed", "", &[]);
    web_support::push_collab(&h, &clone);
    acquire(&h, &h.ssh_client_key(), "closing", &issue, None);
    assert!(get(&h, &format!("/closing/-/issues/{issue}"))
        .text()
        .contains("claimed by"));

    web_support::collab(&h, &clone, &["issue", "close", &issue[..8]]);
    web_support::push_collab(&h, &clone);
    // Closing the issue ended the lease.
    let leases = live_leases(&h, "closing");
    assert!(leases.is_empty(), "{leases:?}");

    let all = get(&h, "/closing/-/issues?state=all").text();
    assert!(list_row(&all, &issue).contains("state closed"), "{all}");
    assert!(!all.contains("claimed by"), "{all}");
    let detail = get(&h, &format!("/closing/-/issues/{issue}")).text();
    assert!(
        detail.contains("<span class=\"state closed\">closed</span>"),
        "{detail}"
    );
    assert!(!detail.contains("claimed by"), "{detail}");
}

#[test]
fn a_claim_shows_its_holders_note_escaped() {
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "notes");
    let issue = web_support::open_issue(&h, &clone, "Noted", "", &[]);
    web_support::push_collab(&h, &clone);
    let out = h.ssh_exec(&format!(
        "collab-lease acquire notes {issue} --note 'rewriting <b>the parser</b>'"
    ));
    assert!(out.success(), "{out:?}");
    let escaped = "rewriting &#60;b&#62;the parser&#60;/b&#62;";
    let list = get(&h, "/notes/-/issues").text();
    assert!(list_row(&list, &issue).contains(escaped), "{list}");
    assert!(!list.contains("<b>the parser"), "{list}");
    let detail = get(&h, &format!("/notes/-/issues/{}", &issue[..8])).text();
    assert!(detail.contains(escaped), "{detail}");
}
