//! README's "Issues" block, run as written (issue 50), as README's quick
//! start is (`once::readme_quickstart`): the first fenced block under
//! "## Issues" (its `issue open`, then the rest as one script), in a clone
//! whose `origin` is a real server, with `git-collab` on PATH. Only its placeholder ids are substituted:
//! `4f2a` becomes the issue the block's `issue open` opened, `9c1e` one
//! opened before the block. Its last two commands read your own writes:
//! `issue fetch` right after `issue close` must bring an export that shows
//! the close, so `issue list --offline` lists the other issue and not the
//! closed one.

use std::path::Path;

use collab_testkit::ServerHarness;

fn issues_block() -> String {
    let readme = std::fs::read_to_string(collab_testkit::workspace_root().join("README.md"))
        .expect("README.md");
    let section = readme
        .split("\n## Issues\n")
        .nth(1)
        .expect("an Issues section");
    let start = section.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let end = start + section[start..].find("```").expect("end of block");
    section[start..end].to_string()
}

/// Runs `script` with bash in `clone`; its stdout.
fn run(h: &ServerHarness, clone: &Path, script: &str) -> String {
    let cli_dir = Path::new(collab_testkit::bin("git-collab"))
        .parent()
        .unwrap()
        .display()
        .to_string();
    let path = format!("{cli_dir}:{}", std::env::var("PATH").unwrap_or_default());
    let out = h
        .client_command("bash", &h.ssh_client_key(), clone)
        .args(["-euo", "pipefail", "-c", script])
        .env("PATH", path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "`{script}` failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_readme_issues_block_works_as_written() {
    let h = ServerHarness::start();
    h.create_repo("demo");
    let clone = h.clone_repo("demo", "demo");
    let other = h.open_server_issue("demo", "Empty input is not handled");
    let other_short = &other[..8];

    let block = issues_block();
    let commands: Vec<&str> = block
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    let offline = commands
        .iter()
        .position(|c| c.starts_with("git collab issue list --offline"))
        .unwrap_or_else(|| panic!("the block reads the export offline:\n{block}"));
    assert!(
        commands[0].starts_with("git collab issue open ")
            && commands[..offline]
                .iter()
                .any(|c| c.starts_with("git collab issue fetch")),
        "the block opens an issue first and fetches the export before reading it:\n{block}"
    );
    // The open alone, for the id it prints (`opened <short id>`); then the
    // rest as one script, as pasted, with markers around the offline read.
    let first = run(&h, &clone, commands[0]);
    let opened = first
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no id in: {first}"))
        .to_string();
    let script = format!(
        "{}\necho '== offline'\n{}\necho '== after'\n{}\n",
        commands[1..offline].join("\n"),
        commands[offline],
        commands[offline + 1..].join("\n")
    )
    .replace("4f2a", &opened)
    .replace("9c1e", other_short);
    let out = run(&h, &clone, &script);
    let tail = out
        .split("== offline\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"));
    let (last, after) = tail
        .split_once("== after\n")
        .unwrap_or_else(|| panic!("{out}"));
    // What follows the offline read (the search before filing) finds the
    // issue the block opened, closed or not.
    if commands[offline + 1..]
        .iter()
        .any(|c| c.starts_with("git collab search"))
    {
        assert!(after.contains("Crash on empty input"), "{after}");
    }
    // The export read offline shows the close made just before the fetch.
    assert!(last.contains("Empty input is not handled"), "{last}");
    assert!(
        !last.contains("Crash on empty input"),
        "the offline list still shows the issue closed just before `issue fetch`:\n{last}"
    );
}
