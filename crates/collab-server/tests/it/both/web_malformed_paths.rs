//! Malformed web paths (percent-encoded `.`, `..` and NUL segments) are
//! ordinary missing paths: a 404, no `ERROR` line in the server log and no
//! 5xx in `/metrics`, so an anonymous client cannot flood the error log or
//! the error counter. Regression for issue 12 (they were 500s).

use collab_testkit as common;
use collab_testkit::web as web_support;

use common::ServerHarness;
use web_support::get;

#[test]
fn encoded_dot_segments_and_nul_are_plain_404s() {
    let h = ServerHarness::start();
    web_support::public_repo_with_content(&h, "r");
    // Sanity: the same pages exist with a good path.
    assert_eq!(get(&h, "/r/-/blob/main/src/main.rs").status, 200);

    let tails = [
        "%2e%2e/x",
        "%2E%2E",
        "%2e",
        "src/%2e%2e/README.md",
        "src/%2e",
        "a%00b",
        "%00",
        "src%00",
        "src/main.rs%00",
        "src/%00/main.rs",
    ];
    let mut asked = 0;
    for page in ["tree", "blob", "raw"] {
        for tail in tails {
            let path = format!("/r/-/{page}/main/{tail}");
            let answer = get(&h, &path);
            assert_eq!(answer.status, 404, "{path}: {}", answer.text());
            asked += 1;
        }
    }
    for path in [
        "/r/-/commit/%00",
        "/r/-/log/main%00",
        "/r/-/issues/%00",
        "/r/-/patches/%2e%2e",
        "/r/-/releases/%2e%2e/x",
        "/r/-/releases/v1/%00",
        "/%2e%2e/-/issues",
        "/r%00",
    ] {
        let answer = get(&h, path);
        assert_eq!(answer.status, 404, "{path}: {}", answer.text());
        asked += 1;
    }

    let log = h.log();
    assert!(!log.contains("ERROR"), "an error was logged:\n{log}");
    let metrics = get(&h, "/metrics").text();
    assert!(
        !metrics.contains("status=\"5"),
        "a 5xx was counted:\n{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "git_collab_http_requests_total{{status=\"404\"}} {asked}\n"
        )),
        "{metrics}"
    );
}
