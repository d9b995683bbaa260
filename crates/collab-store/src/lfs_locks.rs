//! git-lfs file locks (`lfs_locks`): one row per locked path of a
//! repository, by its lasting id (`repo_ids`), so a rename keeps them; a
//! delete drops them (`repos::delete`). A path is locked once: a second
//! `lock` gets the lock that holds it. Only its owner gives a lock back,
//! unless the caller may force (the server decides who: administrators).

use crate::sql::{params, Connection, OptionalExtension as _};

/// One lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    /// 16 lowercase hex digits.
    pub id: String,
    pub path: String,
    /// The principal that took it.
    pub owner: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// What `lock` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locked {
    Created(Lock),
    /// The path was locked already (by anyone, the caller too): that lock.
    Held(Lock),
}

/// What `unlock` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unlocked {
    Removed(Lock),
    NotFound,
    /// Another principal holds it and the caller may not force.
    HeldBy(Lock),
}

const COLUMNS: &str = "id, path, owner, created_at";

fn from_row(r: &crate::sql::Row<'_>) -> crate::sql::Result<Lock> {
    Ok(Lock {
        id: r.get(0)?,
        path: r.get(1)?,
        owner: r.get(2)?,
        created_at: r.get(3)?,
    })
}

fn by_path(conn: &Connection, repo_id: &str, path: &str) -> crate::sql::Result<Option<Lock>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM lfs_locks WHERE repo_id = ?1 AND path = ?2"
    ))?
    .query_row([repo_id, path], from_row)
    .optional()
}

/// The lock `id` of the repository, if any.
pub fn find(conn: &Connection, repo_id: &str, id: &str) -> crate::sql::Result<Option<Lock>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM lfs_locks WHERE repo_id = ?1 AND id = ?2"
    ))?
    .query_row([repo_id, id], from_row)
    .optional()
}

/// Lock `path` for `owner`, unless it is locked already.
pub fn lock(
    conn: &Connection,
    repo_id: &str,
    path: &str,
    owner: &str,
    now: i64,
) -> crate::sql::Result<Locked> {
    let id = hex::encode(rand::random::<[u8; 8]>());
    // On PostgreSQL a concurrent lock of the same path waits for the
    // other's commit here, then does nothing and finds that one's row.
    let inserted = conn
        .prepare_cached(
            "INSERT INTO lfs_locks (id, repo_id, path, owner, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (repo_id, path) DO NOTHING",
        )?
        .execute(params![id, repo_id, path, owner, now])?;
    let found = by_path(conn, repo_id, path)?.ok_or(crate::sql::Error::QueryReturnedNoRows)?;
    Ok(if inserted == 1 {
        Locked::Created(found)
    } else {
        Locked::Held(found)
    })
}

/// Which locks `list` returns.
#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    pub path: Option<&'a str>,
    pub id: Option<&'a str>,
}

/// Up to `limit` locks of the repository from the `offset`th, oldest
/// first (ties by id, so pages do not overlap).
pub fn list(
    conn: &Connection,
    repo_id: &str,
    filter: &Filter<'_>,
    offset: i64,
    limit: i64,
) -> crate::sql::Result<Vec<Lock>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM lfs_locks
         WHERE repo_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR path = ?2)
           AND (CAST(?3 AS TEXT) IS NULL OR id = ?3)
         ORDER BY created_at, id LIMIT ?4 OFFSET ?5"
    ))?;
    let rows = stmt.query_map(
        params![repo_id, filter.path, filter.id, limit, offset],
        from_row,
    )?;
    rows.collect()
}

/// Up to `limit` locks of the live repository called `name` that
/// `principal` does not hold, by path (the push check, `hooks::lfs_locks`).
pub fn held_by_others(
    conn: &Connection,
    name: &str,
    principal: &str,
    limit: i64,
) -> crate::sql::Result<Vec<Lock>> {
    let mut stmt = conn.prepare_cached(
        "SELECT l.id, l.path, l.owner, l.created_at FROM lfs_locks l
         JOIN repositories r ON r.id = l.repo_id
         WHERE r.name = ?1 AND l.owner <> ?2 ORDER BY l.path LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![name, principal, limit], from_row)?;
    rows.collect()
}

/// Give back lock `id` as `principal`; `force` lets it end another's.
pub fn unlock(
    conn: &Connection,
    repo_id: &str,
    id: &str,
    principal: &str,
    force: bool,
) -> crate::sql::Result<Unlocked> {
    let Some(found) = find(conn, repo_id, id)? else {
        return Ok(Unlocked::NotFound);
    };
    if found.owner != principal && !force {
        return Ok(Unlocked::HeldBy(found));
    }
    conn.prepare_cached("DELETE FROM lfs_locks WHERE repo_id = ?1 AND id = ?2")?
        .execute([repo_id, id])?;
    Ok(Unlocked::Removed(found))
}

/// Drop the locks of the live repository called `name` (it is being
/// deleted; its id is about to lose the name).
pub fn drop_repo(conn: &Connection, name: &str) -> crate::sql::Result<()> {
    conn.prepare_cached(
        "DELETE FROM lfs_locks WHERE repo_id IN (SELECT id FROM repositories WHERE name = ?1)",
    )?
    .execute([name])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_locked_once_and_only_its_owner_unlocks_it() {
        let conn = crate::testing::db();
        let Locked::Created(mine) = lock(&conn, "r1", "a.bin", "alice", 10).unwrap() else {
            panic!("first lock not created");
        };
        assert_eq!(
            lock(&conn, "r1", "a.bin", "bob", 11).unwrap(),
            Locked::Held(mine.clone())
        );
        // Another repository's same path is another lock.
        assert!(matches!(
            lock(&conn, "r2", "a.bin", "bob", 11).unwrap(),
            Locked::Created(_)
        ));
        assert_eq!(
            unlock(&conn, "r1", &mine.id, "bob", false).unwrap(),
            Unlocked::HeldBy(mine.clone())
        );
        assert_eq!(
            unlock(&conn, "r2", &mine.id, "alice", false).unwrap(),
            Unlocked::NotFound
        );
        assert_eq!(
            unlock(&conn, "r1", &mine.id, "bob", true).unwrap(),
            Unlocked::Removed(mine.clone())
        );
        assert_eq!(find(&conn, "r1", &mine.id).unwrap(), None);
    }

    #[test]
    fn held_by_others_names_the_repository_and_leaves_out_the_callers() {
        let conn = crate::testing::db();
        let id = crate::repo_ids::id_of(&conn, "app.git", 1).unwrap();
        let other = crate::repo_ids::id_of(&conn, "other.git", 1).unwrap();
        lock(&conn, &id, "b.bin", "alice", 1).unwrap();
        lock(&conn, &id, "a.bin", "bob", 2).unwrap();
        lock(&conn, &other, "c.bin", "alice", 3).unwrap();
        let paths = |principal: &str| -> Vec<String> {
            held_by_others(&conn, "app.git", principal, 10)
                .unwrap()
                .into_iter()
                .map(|l| l.path)
                .collect()
        };
        assert_eq!(paths("bob"), ["b.bin"]);
        assert_eq!(paths("carol"), ["a.bin", "b.bin"]);
        assert_eq!(
            held_by_others(&conn, "app.git", "carol", 1).unwrap().len(),
            1
        );
        assert!(held_by_others(&conn, "gone.git", "carol", 10)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn list_pages_and_filters() {
        let conn = crate::testing::db();
        for (i, path) in ["a", "b", "c"].iter().enumerate() {
            lock(&conn, "r", path, "alice", i as i64).unwrap();
        }
        let all = list(&conn, "r", &Filter::default(), 0, 10).unwrap();
        let paths: Vec<_> = all.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(paths, ["a", "b", "c"]);
        let page = list(&conn, "r", &Filter::default(), 1, 1).unwrap();
        assert_eq!(page, vec![all[1].clone()]);
        let by_path = Filter {
            path: Some("c"),
            id: None,
        };
        assert_eq!(
            list(&conn, "r", &by_path, 0, 10).unwrap(),
            vec![all[2].clone()]
        );
    }
}
