//! One verb run for an in-process caller, the terminal UI: the argv is
//! parsed with the verb table as words (`service::parse`, no shell
//! quoting round trip) and answered by the service (`service::call`) with
//! the session's caller, so a TUI action is admitted, authorized, decided,
//! logged, exported and counted exactly as the same verb over
//! `ssh HOST …`. Only the channel is missing: the reply line comes back
//! as a value instead of being written.

use serde_json::Value;

use super::context::ExecContext;
use crate::service;
use crate::service::command::{ExecCommand, RepoCmd};

/// What a verb answered: its JSON reply (exit 0), or the one line it
/// refused with (`error: ` taken off; a JSON refusal such as a lease
/// conflict is summarised from its `status`, `holder_name` or `holder`).
pub type Answer = Result<Value, String>;

/// Run `argv` (family, action, arguments, flags; as `ssh HOST argv…`) as
/// the session's caller. `stdin` stands for a `--body-stdin` body.
pub async fn call(ctx: &ExecContext, argv: &[&str], stdin: Option<String>) -> Answer {
    let words: Vec<String> = argv.iter().map(|w| w.to_string()).collect();
    let command = match service::parse(&words) {
        Ok(command) => command,
        Err(line) => return Err(strip(&line)),
    };
    let verb = command.verb();
    tracing::info!(
        principal = ctx.caller.principal(),
        verb,
        repo = command.repo().unwrap_or(""),
        "tui call"
    );
    let (message, code) = match command {
        ExecCommand::Repo(RepoCmd::List) => {
            let line = super::reply::reply_line(&crate::service::admin::visible_repos(ctx).await);
            crate::metrics::verb_finished(verb, "ok");
            (line, 0)
        }
        ExecCommand::Issue(_)
        | ExecCommand::Patch(_)
        | ExecCommand::Lease(_)
        | ExecCommand::Search(_) => {
            let answer = service::call(ctx, command, stdin).await;
            (answer.line, answer.status)
        }
        _ => {
            crate::metrics::verb_finished(verb, "error");
            ("error: not available in the terminal UI".to_string(), 1)
        }
    };
    answer(&message, code)
}

fn strip(line: &str) -> String {
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

/// The reply line and exit status as an [`Answer`].
fn answer(message: &str, code: u32) -> Answer {
    let parsed = serde_json::from_str::<Value>(message).ok();
    match (code, parsed) {
        (0, Some(value)) => Ok(value),
        (0, None) => Err("internal error: the reply is not JSON".to_string()),
        (_, Some(value)) => {
            let status = value["status"].as_str().unwrap_or("refused");
            let who = value["holder_name"]
                .as_str()
                .or(value["holder"].as_str())
                .map(|h| format!(" by {h}"))
                .unwrap_or_default();
            let detail = value["message"]
                .as_str()
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            Err(format!("{status}{who}{detail}"))
        }
        (_, None) => Err(strip(message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_become_one_line() {
        assert_eq!(
            answer("error: repository not found", 1),
            Err("repository not found".to_string())
        );
        assert_eq!(
            answer(
                r#"{"status":"held","holder":"SHA256:x","holder_name":"bob"}"#,
                4
            ),
            Err("held by bob".to_string())
        );
        assert_eq!(
            answer(r#"{"status":"released"}"#, 0),
            Ok(serde_json::json!({"status":"released"}))
        );
    }
}
