//! Search (`collab-search`, `collab_store::search`) in process, on SQLite (FTS5)
//! and PostgreSQL (GIN over tsvector): the database time of one page of
//! results over a large corpus (p50/p99), and what the index costs a
//! durable comment (with the index vs the same database without it).
//!
//! Run: `cargo bench --bench search` (release build). `BENCH_SEARCH_ISSUES`
//! (default 100000) and `BENCH_SEARCH_COMMENTS` (default 1000000) size the
//! corpus, spread over 10 repositories and inserted in bulk transactions
//! through the triggers (SQLite) and indexes (PostgreSQL) a server keeps;
//! `BENCH_SEARCH_RUNS` (default 200) runs per query; `BENCH_SEARCH_WRITES`
//! (default 400) durable comments per side of the write scenario. The
//! PostgreSQL half runs when `GIT_COLLAB_TEST_POSTGRES` names an admin URL.
//! Writes docs/benchmarks.md under "## Search".
use collab_testkit::bench as support;
use collab_testkit::pg::{self, TestDatabase};

use std::time::{Duration, Instant};

use collab_store::issues::{self, Person, WriteCtx};
use collab_store::search::{self as search, KindFilter, Query, StateFilter, Terms};
use collab_store::sql::{params, Connection};
use support::{env_usize, fmt, percentile, write_section};

const SECTION: &str = "## Search";
const REPOS: usize = 10;
const VOCABULARY: usize = 20_000;
const BATCH: usize = 10_000;

/// A deterministic stream of numbers (xorshift64*), so every run and both
/// backends index the same text.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A word of the vocabulary, skewed to the first ones as text is
    /// (`word(0)` is in about a third of all bodies).
    fn word(&mut self) -> String {
        word((VOCABULARY as f64 * self.unit().powi(4)) as usize)
    }

    fn text(&mut self, words: usize) -> String {
        (0..words)
            .map(|_| self.word())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The vocabulary's `n`th word: pronounceable letters only, so both
/// engines take it as one word.
fn word(n: usize) -> String {
    const C: &[u8] = b"bdfgklmnprstvz";
    const V: &[u8] = b"aeiou";
    let mut out = String::new();
    let mut n = n + 1;
    while n > 0 {
        out.push(C[n % C.len()] as char);
        n /= C.len();
        out.push(V[n % V.len()] as char);
        n /= V.len();
    }
    out.push('x');
    out
}

fn repo(n: usize) -> String {
    format!("team/repo{}.git", n % REPOS)
}

/// `issues` issues and `comments` comments, in bulk transactions of plain
/// INSERTs (the index is kept by the same triggers or indexes as a write
/// through the server keeps it).
fn fill(conn: &Connection, issues: usize, comments: usize) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let per_issue = comments / issues.max(1);
    let mut n = 0;
    while n < issues {
        let tx = conn.unchecked_transaction()?;
        let end = (n + BATCH / (per_issue + 1)).max(n + 1).min(issues);
        for i in n..end {
            let id = format!("{i:040x}");
            tx.prepare_cached(
                "INSERT INTO issues (repo, id, title, body, author, author_name, created_ms,
                                     updated_ms, status, comment_count)
                 VALUES (?1, ?2, ?3, ?4, 'bench', 'bench', ?5, ?5, ?6, ?7)",
            )?
            .execute(params![
                repo(i),
                id,
                rng.text(6),
                rng.text(40),
                i as i64,
                if i % 3 == 0 { "closed" } else { "open" },
                per_issue as i64
            ])?;
            for c in 0..per_issue {
                tx.prepare_cached(
                    "INSERT INTO issue_comments (repo, issue_id, position, id, author,
                                                 author_name, at_ms, body)
                     VALUES (?1, ?2, ?3, ?4, 'bench', 'bench', ?5, ?6)",
                )?
                .execute(params![
                    repo(i),
                    id,
                    c as i64 + 1,
                    format!("c{:039x}", i * per_issue + c),
                    i as i64,
                    rng.text(25)
                ])?;
            }
        }
        n = end;
        tx.commit()?;
    }
    Ok(start.elapsed())
}

/// Milliseconds with two decimals, for the tables.
fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

struct Searched {
    name: String,
    hits: usize,
    p50: Duration,
    p99: Duration,
}

fn time_queries(conn: &Connection, runs: usize) -> anyhow::Result<Vec<Searched>> {
    let repos: Vec<String> = (0..REPOS).map(repo).collect();
    let cases = [
        ("the most common word", word(0)),
        ("a common word (rank 100)", word(100)),
        ("a rare word (rank 15000)", word(15_000)),
        (
            "two words (ranks 50 and 2000)",
            format!("{} {}", word(50), word(2000)),
        ),
    ];
    let mut out = Vec::new();
    for (name, words) in cases {
        let q = Query {
            terms: Terms::parse(&words).unwrap(),
            repos: repos.clone(),
            kind: KindFilter::Both,
            state: StateFilter::All,
            limit: 20,
            after: None,
        };
        let mut samples = Vec::new();
        let mut hits = 0;
        for _ in 0..runs {
            let start = Instant::now();
            let page = search::search(conn, &q)?;
            samples.push(start.elapsed());
            hits = page.hits.len();
        }
        out.push(Searched {
            name: format!("{name}: `{words}`"),
            hits,
            p50: percentile(samples.clone(), 0.50),
            p99: percentile(samples, 0.99),
        });
    }
    Ok(out)
}

/// Durable comments, each in its own transaction, on the two databases
/// in turns; the per-comment medians (with, without).
fn time_writes(
    with: &Connection,
    without: &Connection,
    writes: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let actor = Person {
        principal: "bench".into(),
        name: "bench".into(),
        key: None,
    };
    let mut rng = Rng(7);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for round in 0..writes {
        for (conn, samples) in [(with, &mut a), (without, &mut b)] {
            let issue = format!("{:040x}", round % 1000);
            let w = WriteCtx {
                repo: &repo(round % 1000),
                actor: &actor,
                fence: None,
                max_body: 1 << 20,
                now: 1_800_000_000,
            };
            let body = rng.text(25);
            let start = Instant::now();
            let tx = conn.unchecked_transaction()?;
            issues::comment(&tx, &w, &issue, &body)?;
            tx.commit()?;
            samples.push(start.elapsed());
        }
    }
    Ok((support::median(a), support::median(b)))
}

/// The index taken away, as before version 19.
fn drop_index(conn: &Connection) -> anyhow::Result<()> {
    conn.execute_batch(if conn.is_postgres() {
        search::POSTGRES_UNDO
    } else {
        search::SQLITE_UNDO
    })?;
    Ok(())
}

struct Backend {
    name: &'static str,
    fill: Duration,
    queries: Vec<Searched>,
    with: Duration,
    without: Duration,
}

fn run(
    name: &'static str,
    open: &dyn Fn(&str) -> anyhow::Result<Connection>,
    issues: usize,
    comments: usize,
    runs: usize,
    writes: usize,
) -> anyhow::Result<Backend> {
    eprintln!("{name}: filling {issues} issues and {comments} comments");
    let big = open("big")?;
    let fill_time = fill(&big, issues, comments)?;
    if big.is_postgres() {
        big.execute_batch("ANALYZE")?;
    }
    eprintln!("{name}: filled in {}; searching", fmt(fill_time));
    let queries = time_queries(&big, runs)?;
    drop(big);
    eprintln!("{name}: comment writes with and without the index");
    let with = open("with")?;
    let without = open("without")?;
    for conn in [&with, &without] {
        fill(conn, 1000, 10_000)?;
    }
    drop_index(&without)?;
    let (w, wo) = time_writes(&with, &without, writes)?;
    Ok(Backend {
        name,
        fill: fill_time,
        queries,
        with: w,
        without: wo,
    })
}

fn main() -> anyhow::Result<()> {
    let issues = env_usize("BENCH_SEARCH_ISSUES", 100_000).max(1);
    let comments = env_usize("BENCH_SEARCH_COMMENTS", 1_000_000);
    let runs = env_usize("BENCH_SEARCH_RUNS", 200).max(2);
    let writes = env_usize("BENCH_SEARCH_WRITES", 400).max(2);
    let load_before = support::load_average();
    // On the target directory's disk, not a tmpfs: fsync must be real.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let sqlite = |name: &str| -> anyhow::Result<Connection> {
        Ok(collab_store::connect::open(
            dir.path().join(format!("{name}.db")),
        )?)
    };
    let mut backends = vec![run("SQLite", &sqlite, issues, comments, runs, writes)?];
    let mut databases = Vec::new();
    if pg::admin_url().is_some() {
        let postgres = |_: &str| -> anyhow::Result<Connection> {
            let d = TestDatabase::create();
            let conn = Connection::open_postgres(&d.url)?;
            collab_store::migrations::migrate(&conn)?;
            databases.push(d);
            Ok(conn)
        };
        let postgres = std::cell::RefCell::new(postgres);
        backends.push(run(
            "PostgreSQL",
            &|n| (postgres.borrow_mut())(n),
            issues,
            comments,
            runs,
            writes,
        )?);
    } else {
        eprintln!("PostgreSQL half skipped: set GIT_COLLAB_TEST_POSTGRES to an admin URL");
    }

    let mut md = format!(
        "{SECTION}\n\nIn process (the database time of `collab-search` without the SSH round trip), measured by `cargo bench --bench search` on {} ({} CPUs, load average {} at the start, shared with other builds). Corpus: {issues} issues and {comments} comments over {REPOS} repositories, text drawn from a {VOCABULARY}-word vocabulary skewed toward its first words (the most common word is in about a third of all texts), inserted in bulk transactions through the triggers (SQLite) and the generated `search_vector` columns with their GIN indexes (PostgreSQL) migration 19 creates. One page of 20 results over all {REPOS} repositories, {runs} runs per query.\n\n",
        chrono::Utc::now().format("%Y-%m-%d"),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_before,
    );
    md.push_str("| backend | query | results | p50 ms | p99 ms |\n|---|---|---:|---:|---:|\n");
    for b in &backends {
        for q in &b.queries {
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                b.name,
                q.name,
                q.hits,
                ms(q.p50),
                ms(q.p99)
            ));
        }
    }
    md.push_str(&format!(
        "\nA durable comment (`issues::comment` in its own transaction, {writes} per side, the two databases in turns; each holds 1000 issues and 10000 comments), with the index and on the same data without it (the triggers, or the generated columns with their GIN indexes, dropped); goal: at most 1.2x.\n\n| backend | filling the corpus | comment p50 ms, with the index | without | ratio |\n|---|---:|---:|---:|---:|\n"
    ));
    for b in &backends {
        md.push_str(&format!(
            "| {} | {} s | {} | {} | {:.2}x |\n",
            b.name,
            b.fill.as_secs(),
            ms(b.with),
            ms(b.without),
            b.with.as_secs_f64() / b.without.as_secs_f64()
        ));
    }
    println!("{md}");
    write_section(
        &collab_testkit::workspace_root().join("docs/benchmarks.md"),
        &md,
    );
    Ok(())
}
