//! Unit tests on either backend: an in-memory SQLite database, or (with
//! `GIT_COLLAB_TEST_BACKEND=postgres`) a fresh PostgreSQL database from
//! `test_database`. scripts/test.sh runs the database tests once per
//! backend, so one suite covers both.

use crate::sql::test_database::{wanted, TestDatabase};
use crate::sql::Connection;

/// A migrated test database; derefs to its connection, and drops the
/// PostgreSQL database (if any) after the connection.
pub struct TestDb {
    conn: Connection,
    _pg: Option<TestDatabase>,
}

impl std::ops::Deref for TestDb {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

pub fn db() -> TestDb {
    let pg = wanted().then(TestDatabase::create);
    let conn = match &pg {
        Some(db) => Connection::open_postgres(&db.url).expect("connecting to the test database"),
        None => Connection::open_in_memory().unwrap(),
    };
    crate::migrations::migrate(&conn).unwrap();
    TestDb { conn, _pg: pg }
}
