//! The operator commands `backup` and `restore` as the command line sees
//! them: run the work in `backup`, print one JSON object (`--json`) or a
//! short text report on stdout, and choose the exit status. Progress goes
//! to stderr, only on a terminal.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use crate::backup::manifest::{ExpectedKey, Signer, Trust};
use crate::backup::progress::Progress;
use crate::backup::{self, human_bytes, restore, take, verify};
use crate::config::ServerConfig;

/// `backup --to DIR [--keep N]`.
pub fn backup(
    config: &ServerConfig,
    to: &Path,
    keep: Option<u32>,
    json: bool,
) -> anyhow::Result<()> {
    let config = &crate::config::absolute_paths(config.clone())?;
    let mut progress = Progress::for_terminal();
    let taken = take::take(config, to, &mut progress)?;
    progress.finish();
    let pruned = match keep {
        Some(n) => take::prune_siblings(&taken.dir, n as usize)?,
        None => Vec::new(),
    };
    let c = &taken.manifest.counts;
    if json {
        let mut reply = backup::summary(&taken.manifest);
        reply["status"] = json!("ok");
        reply["dir"] = json!(taken.dir);
        reply["seconds"] = json!(taken.seconds);
        reply["pruned"] = json!(pruned);
        reply["key"] = json!(taken.key_line);
        reply["fingerprint"] = json!(taken.fingerprint);
        println!("{reply}");
    } else {
        for old in &pruned {
            println!("removed old backup {}", old.display());
        }
        println!(
            "backup written to {}: {} repositories, {} refs, {} leases, {} files, {} in {:.1} s",
            taken.dir.display(),
            c.repos,
            c.refs,
            c.leases.unwrap_or(0),
            c.files,
            human_bytes(c.bytes),
            taken.seconds
        );
        println!(
            "signed by the server key {} ({}): keep it apart from the backups and give it to \
             `backup --verify DIR --key` and `restore --key`",
            taken.fingerprint, taken.key_line
        );
        if let Some(url) = &taken.manifest.database_elsewhere {
            println!(
                "the collab database is NOT in this backup: it is on PostgreSQL ({url}); back it \
                 up with pg_dump (docs/postgres.md)"
            );
        }
    }
    Ok(())
}

/// `--key KEY` or `--trust-unsigned` for the backup in `backup` (clap makes
/// sure of one of them for `restore`; `backup --verify` without either is
/// refused here).
pub fn trust(key: Option<&str>, trust_unsigned: bool, backup: &Path) -> anyhow::Result<Trust> {
    match (key, trust_unsigned) {
        (Some(key), _) => Ok(Trust::Key(ExpectedKey::for_backup(key, backup)?)),
        (None, true) => Ok(Trust::Unsigned),
        (None, false) => anyhow::bail!(
            "--key is required: the server key `backup` printed (ssh-ed25519 line, SHA256: \
             fingerprint or a .pub file); --trust-unsigned checks an unsigned backup's checksum only"
        ),
    }
}

/// `backup --verify DIR`: exit 0 if sound, 1 with every problem otherwise.
pub fn verify(dir: &Path, trust: &Trust, json: bool) -> anyhow::Result<ExitCode> {
    let mut progress = Progress::for_terminal();
    let checked = verify::check(dir, trust, verify::Depth::Full, &mut progress);
    progress.finish();
    let ok = checked.problems.is_empty();
    if json {
        let mut reply = checked
            .manifest
            .as_ref()
            .map(backup::summary)
            .unwrap_or_else(|| json!({}));
        reply["status"] = json!(if ok { "ok" } else { "failed" });
        reply["dir"] = json!(dir);
        reply["problems"] = json!(checked.problems);
        reply["lfs_objects"] = json!(checked.lfs.objects);
        reply["lfs_bytes"] = json!(checked.lfs.bytes);
        reply["signed_by"] = json!(signed_by(checked.signer.as_ref()));
        println!("{reply}");
    } else if ok {
        let files = checked.manifest.as_ref().map_or(0, |m| m.files.len());
        if let Some(url) = checked
            .manifest
            .as_ref()
            .and_then(|m| m.database_elsewhere.as_ref())
        {
            println!("the collab database is not in this backup: it was on PostgreSQL ({url})");
        }
        println!(
            "backup {} is sound: {files} files checked ({} git-lfs objects, {} bytes), {}",
            dir.display(),
            checked.lfs.objects,
            checked.lfs.bytes,
            match signed_by(checked.signer.as_ref()) {
                Some(fp) => format!("signed by {fp}"),
                None => "NOT authenticated (--trust-unsigned)".into(),
            }
        );
    } else {
        for problem in &checked.problems {
            eprintln!("problem: {problem}");
        }
        eprintln!(
            "error: backup {} failed verification: {} problem(s)",
            dir.display(),
            checked.problems.len()
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn signed_by(signer: Option<&Signer>) -> Option<&str> {
    match signer {
        Some(Signer::Verified(fp)) => Some(fp),
        _ => None,
    }
}

/// `restore --from DIR`.
pub fn restore(
    config: &ServerConfig,
    from: &Path,
    trust: &Trust,
    signing_key: Option<&Path>,
    json: bool,
) -> anyhow::Result<()> {
    let config = &crate::config::absolute_paths(config.clone())?;
    let mut progress = Progress::for_terminal();
    let restored = restore::restore(config, from, trust, signing_key, &mut progress)?;
    let signed = signed_by(Some(&restored.signer)).map(str::to_string);
    let c = &restored.manifest.counts;
    if json {
        let mut reply = backup::summary(&restored.manifest);
        reply["status"] = json!("restored");
        reply["state_dir"] = json!(config.state_dir);
        reply["checks"] = json!({
            "git_fsck": "clean",
            "database_integrity": match (&restored.manifest.database, &restored.manifest.database_elsewhere) {
                (Some(_), _) => "ok",
                (None, Some(_)) => "not in the backup",
                (None, None) => "no database",
            },
            "token_high_water": c.max_token,
        });
        reply["seconds"] = json!(restored.seconds);
        reply["signed_by"] = json!(signed);
        reply["signing_key_restored"] = json!(restored.signing_key_restored);
        println!("{reply}");
    } else {
        let database = match (
            &restored.manifest.database,
            &restored.manifest.database_elsewhere,
        ) {
            (Some(_), _) => format!(
                "database ok, highest fencing token {}",
                c.max_token.unwrap_or(0)
            ),
            (None, Some(url)) => format!(
                "database NOT restored (it was on PostgreSQL, {url}, and is not in the backup: \
                 restore it with pg_restore)"
            ),
            (None, None) => "no database (the server had none yet)".to_string(),
        };
        println!(
            "restored {} into {}: {} repositories fsck-clean, {database}, in {:.1} s",
            from.display(),
            config.state_dir.display(),
            c.repos,
            restored.seconds
        );
        match &signed {
            Some(fp) => println!("the backup was signed by {fp}"),
            None => println!("the backup's signature was NOT checked (--trust-unsigned)"),
        }
        if !restored.signing_key_restored {
            println!(
                "no server signing key restored (backups never hold it): the server makes a new \
                 one at start; webhook receivers need its new server_key (collab-whoami), or \
                 restore again with --signing-key"
            );
        }
    }
    Ok(())
}
