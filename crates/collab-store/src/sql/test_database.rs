//! Throwaway PostgreSQL databases for tests, on the server
//! `GIT_COLLAB_TEST_POSTGRES` names (an admin URL; scripts/ci-postgres.sh
//! starts one). Shared by the database unit tests (`crate::testing`) and, through
//! the `testing` feature, the test harness (`collab-testkit`). With `GIT_COLLAB_TEST_BACKEND=postgres` both
//! run on PostgreSQL; scripts/test.sh runs them once per backend.

use std::sync::atomic::{AtomicU32, Ordering};

/// Whether the tests run on PostgreSQL (`GIT_COLLAB_TEST_BACKEND`).
pub fn wanted() -> bool {
    match std::env::var("GIT_COLLAB_TEST_BACKEND").as_deref() {
        Ok("postgres") => true,
        Ok("sqlite") | Err(_) => false,
        Ok(other) => panic!("GIT_COLLAB_TEST_BACKEND={other}: expected sqlite or postgres"),
    }
}

/// A throwaway database, dropped (connections and all) with this value.
pub struct TestDatabase {
    admin: String,
    name: String,
    pub url: String,
}

impl TestDatabase {
    /// A new empty database on the test server. Panics without one: the
    /// caller asked for PostgreSQL.
    pub fn create() -> TestDatabase {
        let admin =
            admin_url().expect("GIT_COLLAB_TEST_BACKEND=postgres needs GIT_COLLAB_TEST_POSTGRES");
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            rand::random::<u32>()
        );
        run(
            &admin,
            &format!(
            "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"
        ),
        )
        .expect("creating a test database on GIT_COLLAB_TEST_POSTGRES");
        let url = with_database(&admin, &name);
        TestDatabase { admin, name, url }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = run(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// Run `sql` on the database at `url`, on a thread of its own: the
/// synchronous client blocks on a runtime of its own, which panics inside
/// an async test's runtime.
pub fn run(url: &str, sql: &str) -> Result<(), postgres::Error> {
    off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        client.batch_execute(sql)
    })
}

/// The first column of the first row of `sql` as an integer (see `run`).
pub fn query_i64(url: &str, sql: &str) -> Result<i64, postgres::Error> {
    off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        Ok(client.query_one(sql, &[])?.get(0))
    })
}

/// Run `f` on a thread of its own and wait for it: the synchronous
/// `postgres` client starts a runtime of its own, which panics on a tokio
/// worker.
pub fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().expect("database thread"))
}

/// The admin URL, or `None` (after saying why) when PostgreSQL tests
/// cannot run here; with `GIT_COLLAB_REQUIRE_POSTGRES_TESTS=1` that is a
/// failure instead.
pub fn admin_url() -> Option<String> {
    match std::env::var("GIT_COLLAB_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("GIT_COLLAB_REQUIRE_POSTGRES_TESTS").as_deref() != Ok("1"),
                "GIT_COLLAB_TEST_POSTGRES is unset but GIT_COLLAB_REQUIRE_POSTGRES_TESTS=1"
            );
            eprintln!(
                "skipping: GIT_COLLAB_TEST_POSTGRES is unset (scripts/ci-postgres.sh starts one)"
            );
            None
        }
    }
}

/// `url` with its database (the path) replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}
