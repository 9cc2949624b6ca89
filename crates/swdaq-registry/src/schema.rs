//! The registry's tables, one migration per schema version. A database is brought up to
//! [`VERSION`] when opened; one made by a newer swdaq (a higher version) is refused, never
//! written. Columns are `BIGINT` or `TEXT` only (times in RFC 3339 UTC, which sort as text;
//! JSON as text), so both databases take the same statements.

use crate::db::{Db, DbError, Value};

/// Each version's statements, in order: version N is `MIGRATIONS[N - 1]`. Version 2: a
/// file may have no checksums (an HDF5 file that could not be read back after its close);
/// SQLite cannot drop a `NOT NULL`, so the table is made anew for both databases. Version
/// 3: what the run's hooks printed (`[run.hooks]`), how each ended (JSON) and its argv (JSON).
/// Version 4: each file's transfer to permanent storage (`swdaq-transfer`), one row per file
/// and destination: its state (`pending`, `retrying`, `verified`), attempts, the last error,
/// the Adler-32 the destination reported, when it was tried, verified and deleted locally.
pub(crate) const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE runs (
    number BIGINT PRIMARY KEY,
    run_type TEXT NOT NULL,
    model TEXT NOT NULL,
    operator TEXT NOT NULL,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    applications TEXT NOT NULL,
    configuration TEXT NOT NULL,
    software TEXT NOT NULL,
    started_at TEXT NOT NULL,
    stopped_at TEXT,
    stop_reason TEXT,
    summary TEXT
);
CREATE INDEX runs_started_at ON runs (started_at);
CREATE TABLE run_files (
    run BIGINT NOT NULL REFERENCES runs (number),
    path TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    adler32 BIGINT NOT NULL,
    crc32c BIGINT NOT NULL,
    closed_at TEXT NOT NULL,
    PRIMARY KEY (run, path)
);
CREATE TABLE logbook (
    run BIGINT NOT NULL REFERENCES runs (number),
    written_at TEXT NOT NULL,
    author TEXT NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX logbook_run ON logbook (run);
",
    "
CREATE TABLE run_files_v2 (
    run BIGINT NOT NULL REFERENCES runs (number),
    path TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    adler32 BIGINT,
    crc32c BIGINT,
    closed_at TEXT NOT NULL,
    PRIMARY KEY (run, path)
);
INSERT INTO run_files_v2 SELECT run, path, bytes, adler32, crc32c, closed_at FROM run_files;
DROP TABLE run_files;
ALTER TABLE run_files_v2 RENAME TO run_files;
",
    "
CREATE TABLE run_hooks (
    run BIGINT NOT NULL REFERENCES runs (number),
    hook TEXT NOT NULL,
    argv TEXT NOT NULL,
    started_at TEXT NOT NULL,
    millis BIGINT NOT NULL,
    ended TEXT NOT NULL,
    output TEXT NOT NULL,
    truncated_bytes BIGINT NOT NULL
);
CREATE INDEX run_hooks_run ON run_hooks (run);
",
    "
CREATE TABLE transfers (
    run BIGINT NOT NULL,
    path TEXT NOT NULL,
    destination TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    last_error TEXT,
    verified_adler32 BIGINT,
    first_tried_at TEXT,
    last_tried_at TEXT,
    next_try_at TEXT,
    verified_at TEXT,
    deleted_at TEXT,
    PRIMARY KEY (run, path, destination),
    FOREIGN KEY (run, path) REFERENCES run_files (run, path)
);
CREATE INDEX transfers_state ON transfers (destination, state);
",
];

/// The schema version this swdaq writes.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error(
        "its schema is version {found}, newer than this swdaq's ({VERSION}): use the swdaq that made it, or a newer one"
    )]
    TooNew { found: i64 },
    #[error("{0}")]
    Db(#[from] DbError),
}

/// Brings `db` up to [`VERSION`], each missing version in one transaction with its number.
pub fn migrate(db: &mut Db) -> Result<(), MigrationError> {
    db.begin_migration()?;
    let applied = apply_missing(db);
    match applied {
        Ok(()) => Ok(db.commit()?),
        Err(e) => {
            db.rollback();
            Err(e)
        }
    }
}

fn apply_missing(db: &mut Db) -> Result<(), MigrationError> {
    db.batch("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")?;
    let found = db.query("SELECT MAX(version) FROM schema_version", &[])?;
    let found = found
        .first()
        .and_then(|row| row.first())
        .and_then(Value::int)
        .unwrap_or(0);
    if found > VERSION {
        return Err(MigrationError::TooNew { found });
    }
    for (version, statements) in (found + 1..).zip(&MIGRATIONS[found as usize..]) {
        db.batch(statements)?;
        db.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[version.into()],
        )?;
    }
    Ok(())
}
