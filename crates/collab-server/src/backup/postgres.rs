//! The collab database in a backup when it lives in PostgreSQL.
//!
//! `backup` opens one `REPEATABLE READ READ ONLY` transaction, exports its
//! snapshot (`pg_export_snapshot()`), counts what it sees (the census the
//! manifest keeps) and runs `pg_dump --snapshot` on that very snapshot while
//! the transaction stays open: the dump and the census are the database as
//! of one instant, taken before the repositories (the order SQLite's backup
//! uses, so the dump is never newer than the refs), and nothing waits for
//! it (a snapshot blocks no writer).
//!
//! `restore` loads the dump with `pg_restore --single-transaction
//! --exit-on-error` into the database `collab_db` names, which must hold no
//! table of its schema yet; a failure leaves it as it was, and a census that
//! differs from the manifest's afterwards drops what was restored.
//!
//! The password never reaches a command line (where `ps` shows it): the
//! programs get the URL without it and the password in `PGPASSWORD`. The
//! programs are PostgreSQL's own: `pg_dump` and `pg_restore` on `PATH`, or
//! the newest under `/usr/lib/postgresql/*/bin` (Debian's layout); they must
//! be of the server's major version or newer (pg_dump refuses otherwise,
//! and says so).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{bail, Context as _};

use collab_store::snapshot::{self, Census};
use collab_store::sql::Connection;

/// `Manifest::database_dump` of a backup holding a `pg_dump` archive.
pub const DUMP_FORMAT: &str = "pg_dump-custom";

/// Dump the database at `url` into the new file `dest`; the census of the
/// same snapshot.
pub fn dump(url: &str, dest: &Path) -> anyhow::Result<Census> {
    let pg_dump = tool("pg_dump")?;
    let conn =
        Connection::open_postgres(url).with_context(|| format!("connecting to {}", redact(url)))?;
    conn.begin_read()?;
    let result = (|| {
        let snapshot: String = conn.query_row("SELECT pg_export_snapshot()", [], |r| r.get(0))?;
        let census = snapshot::census(&conn).context("counting the database")?;
        let (bare, password) = split_password(url);
        let mut cmd = Command::new(&pg_dump);
        cmd.args(["--format=custom", "--no-owner", "--no-privileges"])
            .arg(format!("--snapshot={snapshot}"))
            .arg("--file")
            .arg(dest)
            .arg(format!("--dbname={bare}"));
        run(cmd, password.as_deref(), "pg_dump")?;
        Ok(census)
    })();
    // Only a read: ending it can lose nothing.
    let _ = conn.end_read();
    result
}

/// Refuse unless the database at `url` holds no table of its schema (the
/// collab tables or anything else a restore could mix with).
pub fn check_empty(url: &str) -> anyhow::Result<()> {
    let conn =
        Connection::open_postgres(url).with_context(|| format!("connecting to {}", redact(url)))?;
    let tables: i64 = conn.query_row(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()",
        [],
        |r| r.get(0),
    )?;
    if tables > 0 {
        bail!(
            "refusing to restore: the PostgreSQL database {} already holds {tables} table(s) \
             (restore into an empty database)",
            redact(url)
        );
    }
    Ok(())
}

/// Load the archive `file` into the (empty) database at `url`, in one
/// transaction.
pub fn load(url: &str, file: &Path) -> anyhow::Result<()> {
    let pg_restore = tool("pg_restore")?;
    let (bare, password) = split_password(url);
    let mut cmd = Command::new(pg_restore);
    cmd.args([
        "--no-owner",
        "--no-privileges",
        "--single-transaction",
        "--exit-on-error",
    ])
    .arg(format!("--dbname={bare}"))
    .arg(file);
    run(cmd, password.as_deref(), "pg_restore")
}

/// The census of the database at `url` as it is now.
pub fn census(url: &str) -> anyhow::Result<Census> {
    let conn =
        Connection::open_postgres(url).with_context(|| format!("connecting to {}", redact(url)))?;
    Ok(snapshot::census(&conn)?)
}

/// Drop every table a failed restore left in the database at `url` (it
/// held none before: `check_empty`).
pub fn drop_restored(url: &str) -> anyhow::Result<()> {
    let conn = Connection::open_postgres(url)?;
    let mut names = snapshot::table_names(&conn)?;
    names.push("collab_schema".into());
    for name in names {
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        conn.execute_batch(&format!("DROP TABLE IF EXISTS {quoted} CASCADE"))?;
    }
    Ok(())
}

/// Whether `file` is an archive `pg_restore` can read (its table of
/// contents lists): `None` when pg_restore is not installed here.
pub fn readable(file: &Path) -> Option<anyhow::Result<()>> {
    let pg_restore = tool("pg_restore").ok()?;
    let mut cmd = Command::new(pg_restore);
    cmd.arg("--list").arg(file);
    Some(run(cmd, None, "pg_restore --list"))
}

/// Run a PostgreSQL program, its password in the environment; its last
/// line of stderr is the error.
fn run(mut cmd: Command, password: Option<&str>, what: &str) -> anyhow::Result<()> {
    cmd.env_remove("PGPASSWORD")
        .env("PGAPPNAME", "git-collab-backup")
        .stdin(Stdio::null());
    if let Some(password) = password {
        cmd.env("PGPASSWORD", password);
    }
    let out: Output = cmd.output().with_context(|| format!("cannot run {what}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message");
    bail!("{what} failed ({}): {}", out.status, last.trim())
}

/// Where `name` is: on `PATH`, else the newest Debian-style
/// `/usr/lib/postgresql/<major>/bin/<name>`.
pub fn tool(name: &str) -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
    }
    let mut versioned: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            let candidate = e.path().join("bin").join(name);
            is_executable(&candidate).then_some((major, candidate))
        })
        .collect();
    versioned.sort();
    match versioned.pop() {
        Some((_, path)) => Ok(path),
        None => bail!(
            "{name} not found (on PATH or in /usr/lib/postgresql/*/bin): a backup of a \
             PostgreSQL collab database needs PostgreSQL's client programs"
        ),
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `url` as it may be printed (no password).
fn redact(url: &str) -> String {
    collab_store::Location::Postgres(url.to_string()).display()
}

/// `url` without its password (in the authority or a `password=`
/// parameter), and the password, percent-decoded as libpq reads it.
fn split_password(url: &str) -> (String, Option<String>) {
    let mut password = None;
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (authority_and_path, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match authority_and_path.find('/') {
        Some(i) => authority_and_path.split_at(i),
        None => (authority_and_path, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, pw)) => {
                password = Some(percent_decode(pw));
                format!("{user}@{hosts}")
            }
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let query = query.map(|q| {
        q.split('&')
            .filter(|pair| match pair.split_once('=') {
                Some((k, v)) if k.eq_ignore_ascii_case("password") => {
                    password = Some(percent_decode(v));
                    false
                }
                _ => true,
            })
            .collect::<Vec<_>>()
            .join("&")
    });
    let mut bare = format!("{scheme}://{authority}{path}");
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        bare.push('?');
        bare.push_str(&q);
    }
    (bare, password)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_leaves_the_url_for_the_environment() {
        assert_eq!(
            split_password("postgres://collab:s%40cret@db:5432/collab?sslmode=require"),
            (
                "postgres://collab@db:5432/collab?sslmode=require".into(),
                Some("s@cret".into())
            )
        );
        assert_eq!(
            split_password("postgresql://u@h/d?password=p%25&application_name=x"),
            (
                "postgresql://u@h/d?application_name=x".into(),
                Some("p%".into())
            )
        );
        assert_eq!(
            split_password("postgres://u@h1:1,h2:2/d"),
            ("postgres://u@h1:1,h2:2/d".into(), None)
        );
        assert_eq!(
            split_password("postgres://u:pw@h/d?password=q"),
            ("postgres://u@h/d".into(), Some("q".into()))
        );
    }
}
