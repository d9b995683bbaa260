//! The fleet scenario of issue 13, end to end: 16 clones, each with its own
//! SSH key, run `git collab issue comment <id> -m …` at the same time, three
//! rounds. Every command must succeed, and `git collab issue show <id>
//! --json` in any clone, with no sync, must list all 48 comments. Real
//! server, real `ssh`, real `git`, real CLI processes.

use collab_testkit as common;
use collab_testkit::cli_bin;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};

use common::ServerHarness;
use serde_json::Value;

const AGENTS: usize = 16;
const ROUNDS: usize = 3;

struct Agent {
    name: String,
    key: PathBuf,
    clone: PathBuf,
}

fn command(h: &ServerHarness, agent: &Agent, args: &[&str]) -> Command {
    let mut cmd = h.client_command(cli_bin(), &agent.key, &agent.clone);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn sixteen_agents_comment_at_once_and_every_clone_sees_all_48() {
    let h = ServerHarness::start();
    h.create_repo("fleet");
    let agents: Vec<Agent> = (0..AGENTS)
        .map(|i| {
            let name = format!("agent{i:02}");
            let key = h.authorized_key(&name);
            let clone = h.clone_as(&key, "fleet", &name);
            Agent { name, key, clone }
        })
        .collect();
    let out = command(&h, &agents[0], &["issue", "open", "-t", "Shared", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let opened: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = opened["issue"].as_str().unwrap().to_string();

    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        // Every agent starts its command as soon as all are ready.
        let barrier = Arc::new(Barrier::new(AGENTS));
        let outputs: Vec<(String, std::process::Output)> = std::thread::scope(|scope| {
            let handles: Vec<_> = agents
                .iter()
                .map(|agent| {
                    let barrier = barrier.clone();
                    let (h, id) = (&h, &id);
                    scope.spawn(move || {
                        let body = format!("{} round {round}", agent.name);
                        let mut cmd =
                            command(h, agent, &["issue", "comment", &id[..8], "-m", &body]);
                        barrier.wait();
                        (body, cmd.output().unwrap())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (body, out) in outputs {
            if !out.status.success() {
                failures.push(format!(
                    "{body}: exit {:?}: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} comments failed: {failures:#?}",
        failures.len(),
        AGENTS * ROUNDS
    );

    // Any clone, no sync: all 48 comments, each exactly once.
    for agent in [&agents[0], &agents[7], &agents[AGENTS - 1]] {
        let out = command(&h, agent, &["issue", "show", &id[..8], "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut bodies: Vec<String> = shown["comments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["body"].as_str().unwrap().to_string())
            .collect();
        bodies.sort();
        let mut want: Vec<String> = agents
            .iter()
            .flat_map(|a| (0..ROUNDS).map(move |r| format!("{} round {r}", a.name)))
            .collect();
        want.sort();
        assert_eq!(bodies, want, "as seen from {}", agent.name);
    }
}
