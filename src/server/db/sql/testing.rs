//! Unit tests on both backends: an in-memory SQLite database, and a fresh
//! PostgreSQL database on the server `GIT_COLLAB_TEST_POSTGRES` names (an
//! admin URL; scripts/ci-postgres.sh starts a throwaway cluster). Without
//! it the PostgreSQL half is skipped with a message, unless
//! `GIT_COLLAB_REQUIRE_POSTGRES_TESTS=1` (CI), where that is a failure.

use std::sync::atomic::{AtomicU32, Ordering};

use super::Connection;

/// A throwaway PostgreSQL database, dropped with this value.
pub struct PgTestDb {
    admin: String,
    name: String,
    pub url: String,
}

impl PgTestDb {
    /// A new empty database, or `None` (after saying why) when no test
    /// server is configured.
    pub fn create() -> Option<PgTestDb> {
        let Ok(admin) = std::env::var("GIT_COLLAB_TEST_POSTGRES") else {
            assert!(
                std::env::var("GIT_COLLAB_REQUIRE_POSTGRES_TESTS").as_deref() != Ok("1"),
                "GIT_COLLAB_TEST_POSTGRES is unset but GIT_COLLAB_REQUIRE_POSTGRES_TESTS=1"
            );
            eprintln!("skipping the PostgreSQL half: GIT_COLLAB_TEST_POSTGRES is unset");
            return None;
        };
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "unit_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            rand::random::<u32>()
        );
        let mut client = postgres::Client::connect(&admin, postgres::NoTls)
            .expect("connecting to GIT_COLLAB_TEST_POSTGRES");
        client
            .batch_execute(&format!(
                "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"
            ))
            .expect("creating a test database");
        let url = with_database(&admin, &name);
        Some(PgTestDb { admin, name, url })
    }

    pub fn connect(&self) -> Connection {
        Connection::open_postgres(&self.url).expect("connecting to the test database")
    }
}

impl Drop for PgTestDb {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = client.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
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

/// Run `test` on a migrated in-memory SQLite database, then on a migrated
/// fresh PostgreSQL database when one is available.
#[allow(dead_code)] // for tests that compare the backends side by side
pub fn on_each_backend(test: impl Fn(&Connection)) {
    let sqlite = Connection::open_in_memory().unwrap();
    crate::db::migrations::migrate(&sqlite).unwrap();
    test(&sqlite);
    if let Some(db) = PgTestDb::create() {
        let pg = db.connect();
        crate::db::migrations::migrate(&pg).unwrap();
        test(&pg);
        drop(pg);
    }
}

/// A migrated test database on the backend `GIT_COLLAB_TEST_BACKEND` names:
/// `sqlite` (the default: in memory) or `postgres` (a fresh database on
/// `GIT_COLLAB_TEST_POSTGRES`). scripts/test.sh runs the database tests once
/// per backend, so one suite covers both.
pub struct TestDb {
    conn: Connection,
    _pg: Option<PgTestDb>,
}

impl std::ops::Deref for TestDb {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

/// Which backend the database tests run on.
pub fn backend_is_postgres() -> bool {
    match std::env::var("GIT_COLLAB_TEST_BACKEND").as_deref() {
        Ok("postgres") => true,
        Ok("sqlite") | Err(_) => false,
        Ok(other) => panic!("GIT_COLLAB_TEST_BACKEND={other}: expected sqlite or postgres"),
    }
}

pub fn db() -> TestDb {
    let (conn, pg) = if backend_is_postgres() {
        let pg = PgTestDb::create()
            .expect("GIT_COLLAB_TEST_BACKEND=postgres needs GIT_COLLAB_TEST_POSTGRES");
        (pg.connect(), Some(pg))
    } else {
        (Connection::open_in_memory().unwrap(), None)
    };
    crate::db::migrations::migrate(&conn).unwrap();
    TestDb { conn, _pg: pg }
}
