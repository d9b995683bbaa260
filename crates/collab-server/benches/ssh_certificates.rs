//! What a certificate login costs next to a key login, in one run against
//! one server: `ssh host collab-whoami` with a key from authorized_keys
//! (the baseline), with a user certificate and a small KRL, and with a
//! certificate while `ssh.revoked_keys` is a KRL of 100,000 revoked serials
//! and 10,000 revoked key ids (the certificate is in neither). Also the
//! first login after that KRL is replaced, which pays for reading it.
//!
//! Rows are medians of BENCH_RTT_RUNS (default 30) fresh connections on
//! loopback, each a handshake, an authentication and one exec, made with
//! one library client (russh, `collab_testkit::client`) for keys and
//! certificates alike, so the rows differ only in what the server does.
//! Writes the table to docs/benchmarks.md under "## SSH certificate
//! logins" (only that section).
//!
//! Run: `cargo bench --bench ssh_certificates`.

use collab_testkit::bench as support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use collab_testkit::{client, HarnessOptions, ServerHarness};
use russh::keys::PrivateKey;
use support::{env_usize, fmt, median, run_ok, write_section};

const SECTION: &str = "## SSH certificate logins";

fn keygen(dir: &Path, args: &[&str]) {
    run_ok(Command::new("ssh-keygen").args(args).current_dir(dir));
}

/// A KRL of `ca.pub` revoking `spec` (ssh-keygen's spec lines), written
/// beside and renamed over `revoked.krl`.
fn write_krl(dir: &Path, spec: &str) {
    std::fs::write(dir.join("krl.spec"), spec).unwrap();
    keygen(
        dir,
        &["-q", "-k", "-f", "krl.new", "-s", "ca.pub", "krl.spec"],
    );
    std::fs::rename(dir.join("krl.new"), dir.join("revoked.krl")).unwrap();
}

/// One fresh connection: connect, authenticate with `key` (and `cert`),
/// run `collab-whoami`; how long it all took.
async fn login(h: &ServerHarness, key: &PrivateKey, cert: Option<&Path>) -> Duration {
    let start = Instant::now();
    // TCP_NODELAY, as the server sets it: without it a login stalls on a
    // delayed ACK (~40 ms) at random, keys and certificates alike.
    let config = Arc::new(russh::client::Config {
        nodelay: true,
        ..Default::default()
    });
    let mut conn = russh::client::connect(config, h.ssh_addr, client::AcceptAnyHost)
        .await
        .expect("ssh connect");
    let auth = match cert {
        Some(cert) => client::authenticate_with_certificate(&mut conn, key, cert).await,
        None => client::authenticate(&mut conn, key).await,
    };
    assert!(auth.success(), "login refused: {}", h.log());
    let who = client::exec(&conn, b"collab-whoami").await;
    assert_eq!(who.exit_status, Some(0), "{who:?}");
    start.elapsed()
}

fn main() {
    let runs = env_usize("BENCH_RTT_RUNS", 30).max(1);
    let pki = tempfile::tempdir().unwrap();
    let d = pki.path();
    keygen(d, &["-q", "-t", "ed25519", "-N", "", "-f", "ca"]);
    keygen(d, &["-q", "-t", "ed25519", "-N", "", "-f", "agent"]);
    keygen(
        d,
        &[
            "-q",
            "-s",
            "ca",
            "-I",
            "bench",
            "-n",
            "agent-1",
            "-z",
            "7",
            "agent.pub",
        ],
    );
    std::fs::copy(d.join("ca.pub"), d.join("trusted")).unwrap();
    write_krl(d, "serial: 3\n");
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![
            (
                "GIT_COLLAB_SSH__TRUSTED_USER_CA_KEYS".into(),
                d.join("trusted").display().to_string(),
            ),
            (
                "GIT_COLLAB_SSH__REVOKED_KEYS".into(),
                d.join("revoked.krl").display().to_string(),
            ),
        ],
        ..Default::default()
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let admin = client::load_key(&h.ssh_client_key());
    let agent = client::load_key(&d.join("agent"));
    let cert = d.join("agent-cert.pub");
    let sample = |key: &PrivateKey, cert: Option<&Path>| -> Duration {
        // One unmeasured login first (and a KRL just replaced is read).
        rt.block_on(login(&h, key, cert));
        median(
            (0..runs)
                .map(|_| rt.block_on(login(&h, key, cert)))
                .collect(),
        )
    };

    let baseline = sample(&admin, None);
    let small = sample(&agent, Some(&cert));

    // 100,000 revoked serials (every other one from 1000: ssh-keygen picks
    // bitmaps) and 10,000 revoked key ids.
    let mut spec = String::new();
    for i in 0..100_000u64 {
        spec.push_str(&format!("serial: {}\n", 1000 + 2 * i));
    }
    for i in 0..10_000 {
        spec.push_str(&format!("id: agent-{i}-old\n"));
    }
    write_krl(d, &spec);
    let krl_bytes = std::fs::metadata(d.join("revoked.krl")).unwrap().len();
    let first_after_change = rt.block_on(login(&h, &agent, Some(&cert)));
    let big = sample(&agent, Some(&cert));

    let ratio = |d: Duration| d.as_secs_f64() / baseline.as_secs_f64();
    let mut table = String::from("| login | median | vs key login |\n|---|---:|---:|\n");
    for (what, d) in [
        ("key in authorized_keys", baseline),
        ("certificate, KRL of 1 serial", small),
        (
            "certificate, KRL of 100,000 serials and 10,000 key ids",
            big,
        ),
        (
            "certificate, first login after that KRL replaced (one sample, reads it)",
            first_after_change,
        ),
    ] {
        table.push_str(&format!("| {what} | {} | {:.2}x |\n", fmt(d), ratio(d)));
    }
    println!("{table}");
    let command = if cfg!(debug_assertions) {
        "`cargo bench --profile dev --bench ssh_certificates` (debug build)"
    } else {
        "`cargo bench --bench ssh_certificates` (release build)"
    };
    let section = format!(
        "{SECTION}\n\n\
         {command}, {} CPUs, loopback, one run on {}. Medians of {runs} fresh \
         connections per row from one library client (russh), each a handshake, an \
         authentication and `collab-whoami`; \"vs key login\" divides by the first row of \
         the same run. The large KRL is {} \
         bytes as `ssh-keygen -k` wrote it; the certificate is in none of its entries, so \
         every lookup runs to the end. The client sets TCP_NODELAY, as the server does (without it logins \
         stall on a delayed ACK, ~40 ms, at random). On a shared machine runs vary by \
         tens of percent: compare the ratios of one run.\n\n{table}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        chrono::Utc::now().format("%Y-%m-%d"),
        krl_bytes,
    );
    write_section(
        &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md"),
        &section,
    );
}
