//! The one seam between the registry and its two databases: statements are written once, in
//! the SQL both take (positional `$1, $2, ...` parameters, `BIGINT` and `TEXT` columns only),
//! and run here through `rusqlite` or `postgres`. Only the lock a migration takes differs.

use std::time::Duration;

/// A parameter or a column's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Text(String),
    Null,
}

impl Value {
    pub fn int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn text(&self) -> Option<&str> {
        match self {
            Value::Text(t) => Some(t),
            _ => None,
        }
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

impl From<&str> for Value {
    fn from(t: &str) -> Self {
        Value::Text(t.to_string())
    }
}

impl From<String> for Value {
    fn from(t: String) -> Self {
        Value::Text(t)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// Why a statement failed: a key already held (a run number claimed elsewhere) is told
/// apart, for the claim to try the next number.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("already held: {0}")]
    Duplicate(String),
    #[error("{0}")]
    Other(String),
}

/// How long a statement waits for another process's lock (SQLite) or a PostgreSQL server
/// to answer a connection; every wait of the registry is bounded by it.
pub const WAIT: Duration = Duration::from_secs(10);

/// The advisory lock key of the registry's migrations ("swdaqreg" in ASCII): any number
/// other users of the database do not take.
const POSTGRES_MIGRATION_LOCK: i64 = 0x7377_6461_7172_6567;

pub enum Db {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::Client>),
}

impl Db {
    pub fn open_sqlite(path: &std::path::Path) -> Result<Self, DbError> {
        let connection = rusqlite::Connection::open(path).map_err(sqlite_error)?;
        connection.busy_timeout(WAIT).map_err(sqlite_error)?;
        connection
            .execute_batch("PRAGMA foreign_keys = ON")
            .map_err(sqlite_error)?;
        Ok(Db::Sqlite(connection))
    }

    pub fn open_postgres(url: &str) -> Result<Self, DbError> {
        let mut config: postgres::Config = url
            .parse()
            .map_err(|e| DbError::Other(format!("not a PostgreSQL URL: {e}")))?;
        config.connect_timeout(WAIT);
        // A statement waiting longer on a lock than a claim should take is refused.
        config.options(&format!("-c lock_timeout={}", WAIT.as_millis()));
        let client = config
            .connect(postgres::NoTls)
            .map_err(|e| DbError::Other(format!("cannot connect: {e}")))?;
        Ok(Db::Postgres(Box::new(client)))
    }

    /// Statements without parameters, run as one.
    pub fn batch(&mut self, sql: &str) -> Result<(), DbError> {
        match self {
            Db::Sqlite(c) => c.execute_batch(sql).map_err(sqlite_error),
            Db::Postgres(c) => c.batch_execute(sql).map_err(postgres_error),
        }
    }

    /// A transaction no other migration runs beside until `commit`: SQLite's write lock, or
    /// on PostgreSQL a transaction's advisory lock, which needs no table yet. Two servers
    /// opening an empty PostgreSQL database at once would otherwise both make
    /// `schema_version`, and one fail on a duplicate in PostgreSQL's own catalogue.
    pub fn begin_migration(&mut self) -> Result<(), DbError> {
        match self {
            Db::Sqlite(_) => self.batch("BEGIN IMMEDIATE"),
            Db::Postgres(_) => self.batch(&format!(
                "BEGIN; SELECT pg_advisory_xact_lock({POSTGRES_MIGRATION_LOCK})"
            )),
        }
    }

    pub fn commit(&mut self) -> Result<(), DbError> {
        self.batch("COMMIT")
    }

    pub fn rollback(&mut self) {
        // After a failed statement the transaction is abandoned either way.
        let _ = self.batch("ROLLBACK");
    }

    /// Rows changed.
    pub fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        match self {
            Db::Sqlite(c) => c
                .execute(
                    sql,
                    rusqlite::params_from_iter(params.iter().map(to_sqlite)),
                )
                .map(|n| n as u64)
                .map_err(sqlite_error),
            Db::Postgres(c) => {
                let statement = c.prepare(sql).map_err(postgres_error)?;
                let owned = postgres_params(params, statement.params());
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    owned.iter().map(|p| p.as_ref() as _).collect();
                c.execute(&statement, &refs).map_err(postgres_error)
            }
        }
    }

    pub fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, DbError> {
        match self {
            Db::Sqlite(c) => {
                let mut statement = c.prepare(sql).map_err(sqlite_error)?;
                let columns = statement.column_count();
                let rows = statement
                    .query_map(
                        rusqlite::params_from_iter(params.iter().map(to_sqlite)),
                        |row| {
                            (0..columns)
                                .map(|i| {
                                    Ok(match row.get_ref(i)? {
                                        rusqlite::types::ValueRef::Integer(i) => Value::Int(i),
                                        rusqlite::types::ValueRef::Text(t) => {
                                            Value::Text(String::from_utf8_lossy(t).into_owned())
                                        }
                                        _ => Value::Null,
                                    })
                                })
                                .collect()
                        },
                    )
                    .map_err(sqlite_error)?;
                rows.collect::<Result<_, _>>().map_err(sqlite_error)
            }
            Db::Postgres(c) => {
                let statement = c.prepare(sql).map_err(postgres_error)?;
                let owned = postgres_params(params, statement.params());
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    owned.iter().map(|p| p.as_ref() as _).collect();
                let rows = c.query(&statement, &refs).map_err(postgres_error)?;
                rows.iter().map(postgres_row).collect()
            }
        }
    }
}

/// A row's values: `BIGINT` columns as integers, every other as text. A column of another
/// type (a table changed by hand) is an error naming it, not a panic.
fn postgres_row(row: &postgres::Row) -> Result<Vec<Value>, DbError> {
    (row.columns().iter().enumerate())
        .map(|(i, column)| {
            let value = if *column.type_() == postgres::types::Type::INT8 {
                row.try_get::<_, Option<i64>>(i).map(Value::from)
            } else {
                row.try_get::<_, Option<String>>(i).map(Value::from)
            };
            value.map_err(|e| DbError::Other(format!("column {}: {e}", column.name())))
        })
        .collect()
}

fn to_sqlite(v: &Value) -> rusqlite::types::Value {
    match v {
        Value::Int(i) => rusqlite::types::Value::Integer(*i),
        Value::Text(t) => rusqlite::types::Value::Text(t.clone()),
        Value::Null => rusqlite::types::Value::Null,
    }
}

/// PostgreSQL types each parameter from its statement (`types`, as the server inferred them:
/// every integer column is `BIGINT`, every other `TEXT`) and refuses a value of another type,
/// a null's too: a null is sent as the type its parameter has.
fn postgres_params(
    params: &[Value],
    types: &[postgres::types::Type],
) -> Vec<Box<dyn postgres::types::ToSql + Sync>> {
    (params.iter().enumerate())
        .map(|(position, v)| -> Box<dyn postgres::types::ToSql + Sync> {
            match v {
                Value::Int(i) => Box::new(*i),
                Value::Text(t) => Box::new(t.clone()),
                Value::Null if types.get(position) == Some(&postgres::types::Type::INT8) => {
                    Box::new(None::<i64>)
                }
                Value::Null => Box::new(None::<String>),
            }
        })
        .collect()
}

/// SQLite's extended result codes of a primary key or unique constraint held.
const SQLITE_CONSTRAINT_PRIMARYKEY: i32 = 1555;
const SQLITE_CONSTRAINT_UNIQUE: i32 = 2067;

fn sqlite_error(e: rusqlite::Error) -> DbError {
    match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if [SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CONSTRAINT_UNIQUE]
                .contains(&f.extended_code) =>
        {
            DbError::Duplicate(e.to_string())
        }
        _ => DbError::Other(e.to_string()),
    }
}

/// The server's own message where there is one (the client's says only "db error").
fn postgres_error(e: postgres::Error) -> DbError {
    let text = match e.as_db_error() {
        Some(db) => db.to_string(),
        None => e.to_string(),
    };
    match e.code() {
        Some(&postgres::error::SqlState::UNIQUE_VIOLATION) => DbError::Duplicate(text),
        _ => DbError::Other(text),
    }
}
