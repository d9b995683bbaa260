//! The client side of `collab-search`: `git-collab search`. Builds the
//! remote command from the verb table's row (the remote's repository
//! unless `--all` or `--repo` says otherwise), runs it over ssh and reads
//! the page back. The server decides what the key may read.

use collab_proto::replies::search::SearchResults;
use collab_proto::verbs::Call;

use crate::client::remote::SshRemote;
use crate::client::remote_ssh::{self, RemoteInput};

/// What the user asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Search {
    pub query: String,
    /// Every repository the key can read, not just the remote's.
    pub all: bool,
    /// Only these repositories (globs); overrides the remote's.
    pub repos: Vec<String>,
    pub kind: Option<String>,
    pub state: Option<String>,
    pub limit: Option<u64>,
    pub after: Option<String>,
}

/// The remote command line for `search` from the remote at `repo_path`.
pub fn remote_command(repo_path: &str, s: &Search) -> String {
    let mut repos = s.repos.clone();
    if repos.is_empty() && !s.all {
        repos.push(repo_path.to_string());
    }
    let call = repos
        .iter()
        .fold(Call::new("collab-search", "").arg(&s.query), |c, glob| {
            c.flag("--repo", glob)
        });
    let call = match &s.kind {
        Some(kind) => call.choice("--kind", kind),
        None => call,
    };
    let call = match &s.state {
        Some(state) => call.choice("--state", state),
        None => call,
    };
    let call = match s.limit {
        Some(limit) => call.int("--limit", limit),
        None => call,
    };
    call.flag_opt("--after", s.after.as_deref()).line()
}

/// What a search came back with: the page, or the server's refusal (its
/// `error:` line and exit status).
pub enum Outcome {
    Found(SearchResults),
    Refused { stderr: String, code: i32 },
}

/// Run the search on the remote's server.
pub fn run(remote: &SshRemote, s: &Search) -> anyhow::Result<Outcome> {
    let out = remote_ssh::run_remote(remote, &remote_command(&remote.path, s), RemoteInput::Empty)?;
    if !out.success() {
        return Ok(Outcome::Refused {
            stderr: out.stderr_text(),
            code: out.code,
        });
    }
    Ok(Outcome::Found(serde_json::from_slice(&out.stdout)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_remote_command_comes_from_the_table() {
        let s = Search {
            query: "parser crash".into(),
            ..Default::default()
        };
        assert_eq!(
            remote_command("team/app.git", &s),
            "collab-search 'parser crash' --repo 'team/app.git'"
        );
        let all = Search {
            query: "x".into(),
            all: true,
            kind: Some("issue".into()),
            state: Some("open".into()),
            limit: Some(5),
            after: Some("c".into()),
            ..Default::default()
        };
        assert_eq!(
            remote_command("team/app.git", &all),
            "collab-search 'x' --kind issue --state open --limit 5 --after 'c'"
        );
    }
}
