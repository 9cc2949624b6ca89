//! The run registry (#38): every run's facts — number, type, operator, configuration,
//! software, hosts and applications, start and stop, the summary — its files with their
//! size and checksums, and its logbook. SQLite by default (a file in the output directory,
//! no set-up), PostgreSQL when the configuration names a server; one schema ([`schema`],
//! versioned) and one set of statements for both ([`db`]).
//!
//! A run's row is written before data taking ([`Registry::claim`]) and completed at its stop
//! ([`Registry::end_run`]), so a killed run stays on record with no stop; the next start on
//! the same host names it ([`Registry::notice_not_ended`]). A run number is the `runs`
//! table's primary key: two servers sharing a PostgreSQL registry that reach for one number
//! at once see one insert fail, and the loser takes the next.

mod db;
mod schema;
pub mod software;
mod transfers;

pub use db::DbError;
pub use software::Software;
pub use transfers::{Backlog, TransferCandidate, TransferRow, TransferState, TransferUpdate};

use anyhow::Context;
use db::{Db, Value};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use swdaq_format::file_checksum::ClosedFile;

/// The default registry's file, in the run's output directory.
pub const SQLITE_FILE: &str = "swdaq-runs.sqlite";

/// Numbers a claim tries before giving up (each failed one was taken by a racing server).
const CLAIM_TRIES: usize = 64;

/// Where the registry is, from `[run] registry`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Location {
    /// `""`: SQLite in `output_dir`; `postgresql://...` (or `postgres://`): that server;
    /// any other text: the path of an SQLite file. Another URL scheme is refused.
    pub fn parse(key: &str, output_dir: &Path) -> Result<Self, String> {
        let key = key.trim();
        if key.is_empty() {
            return Ok(Location::Sqlite(output_dir.join(SQLITE_FILE)));
        }
        if key.starts_with("postgresql://") || key.starts_with("postgres://") {
            return Ok(Location::Postgres(key.to_string()));
        }
        if let Some((scheme, _)) = key.split_once("://") {
            return Err(format!(
                "run.registry: {scheme}:// is not a registry: give postgresql://USER@HOST/DB, the path of an SQLite file, or nothing (an SQLite file in the output directory)"
            ));
        }
        Ok(Location::Sqlite(PathBuf::from(key)))
    }

    /// For messages and for the files a run writes: a URL without its password, neither
    /// the one after the user name nor a `password=` parameter (nor any other parameter).
    pub fn describe(&self) -> String {
        match self {
            Location::Sqlite(path) => path.display().to_string(),
            Location::Postgres(url) => without_password(url),
        }
    }
}

/// `url` as PostgreSQL's client reads it, rebuilt from what it read but its password:
/// user, hosts, ports, database. Rebuilt rather than cut out, because where a password ends
/// in the text depends on characters it may hold itself (`@`, `/`, `?`, `&`). A URL that does
/// not parse is not shown at all, nor one read with an `@` in a user, host or database name:
/// that is a password's unencoded `@`, the rest of the password read as a name.
fn without_password(url: &str) -> String {
    const NOT_SHOWN: &str = "postgresql://(a URL that does not parse, not shown)";
    let Ok(config) = url.parse::<postgres::Config>() else {
        return NOT_SHOWN.into();
    };
    let user = config.get_user().map_or(String::new(), |u| format!("{u}@"));
    let ports = config.get_ports();
    let hosts: Vec<String> = (config.get_hosts().iter().enumerate())
        .map(|(i, host)| {
            let name = match host {
                postgres::config::Host::Tcp(name) => name.clone(),
                postgres::config::Host::Unix(dir) => dir.display().to_string(),
            };
            // One port for every host, or one each.
            match ports.get(i).or(ports.first().filter(|_| ports.len() == 1)) {
                Some(port) => format!("{name}:{port}"),
                None => name,
            }
        })
        .collect();
    let database = config.get_dbname().unwrap_or_default();
    let names = [user.trim_end_matches('@'), database].into_iter();
    if names
        .chain(hosts.iter().map(String::as_str))
        .any(|n| n.contains('@'))
    {
        return NOT_SHOWN.into();
    }
    format!("postgresql://{user}{}/{database}", hosts.join(","))
}

/// Why no run number was claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The number asked for is taken: it has files, or is on record.
    #[error("{0}")]
    Taken(String),
    #[error("{0:#}")]
    Other(anyhow::Error),
}

/// One application of the run (in one process: the model itself, on this host).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Application {
    pub name: String,
    pub kind: String,
    pub host: String,
}

/// What is known of a run before its data taking.
#[derive(Debug, Clone)]
pub struct RunStart {
    pub run_type: String,
    pub model: String,
    pub operator: String,
    pub host: String,
    pub pid: u32,
    pub applications: Vec<Application>,
    pub configuration: String,
    pub software: Software,
    pub started_at: SystemTime,
}

/// What a list shows of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    pub number: u32,
    pub run_type: String,
    pub model: String,
    pub operator: String,
    pub host: String,
    pub started_at: String,
    /// `None`: not ended (still running, or killed).
    pub stopped_at: Option<String>,
    pub stop_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileRow {
    pub path: String,
    pub bytes: u64,
    /// `None`: the file could not be read back for them (it is on disk all the same).
    pub adler32: Option<u32>,
    pub crc32c: Option<u32>,
    pub closed_at: String,
}

/// A hook the run ran, as it is given to the registry.
#[derive(Debug, Clone, PartialEq)]
pub struct NewHook {
    pub hook: String,
    pub argv: Vec<String>,
    pub started_at: SystemTime,
    pub millis: u64,
    /// How it ended (the hook runner's own JSON).
    pub ended: serde_json::Value,
    pub output: String,
    pub truncated_bytes: u64,
}

/// A hook the run ran, as the registry shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookRow {
    pub hook: String,
    pub argv: Vec<String>,
    pub started_at: String,
    pub millis: u64,
    pub ended: serde_json::Value,
    pub output: String,
    pub truncated_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogEntry {
    pub written_at: String,
    pub author: String,
    pub text: String,
}

/// Everything on record of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    #[serde(flatten)]
    pub row: RunRow,
    pub pid: u32,
    pub applications: serde_json::Value,
    pub software: serde_json::Value,
    pub configuration: String,
    pub summary: Option<serde_json::Value>,
    pub files: Vec<FileRow>,
    pub hooks: Vec<HookRow>,
    pub logbook: Vec<LogEntry>,
    /// Its files' transfers to permanent storage (`[run.transfer]`, `swdaq transfer`).
    pub transfers: Vec<TransferRow>,
}

/// Which runs a list shows; every bound is inclusive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub from: Option<u32>,
    pub to: Option<u32>,
    pub run_type: Option<String>,
    /// Started at or after (RFC 3339, UTC).
    pub since: Option<String>,
    /// Started before (RFC 3339, UTC).
    pub before: Option<String>,
}

/// A date (`YYYY-MM-DD`, its midnight UTC) or a time (RFC 3339) as the registry writes
/// times; with `end_of_day`, a bare date is the midnight after it (an inclusive "until").
pub fn parse_time(text: &str, end_of_day: bool) -> Result<String, String> {
    let text = text.trim();
    let is_date = text.len() == 10 && text.as_bytes().get(4) == Some(&b'-');
    let full = if is_date {
        format!("{text}T00:00:00Z")
    } else {
        text.to_string()
    };
    let mut time = humantime::parse_rfc3339_weak(&full).map_err(|e| {
        format!("{text:?} is not a date (YYYY-MM-DD) or a time (YYYY-MM-DDTHH:MM:SSZ): {e}")
    })?;
    if is_date && end_of_day {
        time += Duration::from_secs(86_400);
    }
    Ok(timestamp(time))
}

/// A time as every row holds it.
fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

pub struct Registry {
    db: Db,
    location: Location,
}

impl Registry {
    /// Opens (an SQLite file is made, with its directory) and brings the schema up to date;
    /// an error names the registry and says why.
    pub fn open(location: &Location) -> anyhow::Result<Self> {
        let opened = match location {
            Location::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("cannot make {}", dir.display()))?;
                }
                // Made here, so that a directory that cannot be written is named with the
                // system's reason (SQLite only says it cannot open the file).
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("cannot make the run registry {}", path.display()))?;
                Db::open_sqlite(path)
            }
            Location::Postgres(url) => Db::open_postgres(url),
        };
        let context = || format!("run registry {}", location.describe());
        let mut db = opened.map_err(anyhow::Error::from).with_context(context)?;
        schema::migrate(&mut db)
            .map_err(anyhow::Error::from)
            .with_context(context)?;
        Ok(Self {
            db,
            location: location.clone(),
        })
    }

    pub fn location(&self) -> &Location {
        &self.location
    }

    fn context(&self) -> String {
        format!("run registry {}", self.location.describe())
    }

    /// The highest run number on record.
    pub fn highest(&mut self) -> anyhow::Result<Option<u32>> {
        let rows = self
            .db
            .query("SELECT MAX(number) FROM runs", &[])
            .with_context(|| self.context())?;
        Ok(rows
            .first()
            .and_then(|r| r.first())
            .and_then(Value::int)
            .map(|n| n as u32))
    }

    /// Claims a run number and writes the run's row before its data taking. `local` claims
    /// it where the files go (`run_files::claim_run`), given the number the registry's runs
    /// are at: with `requested` 0 a number another server took in the meantime is passed
    /// over; a number asked for that the registry holds is refused.
    pub fn claim(
        &mut self,
        requested: u32,
        start: &RunStart,
        mut local: impl FnMut(Option<u32>) -> Result<u32, ClaimError>,
    ) -> Result<u32, ClaimError> {
        let mut after = self.highest().map_err(ClaimError::Other)?;
        for _ in 0..CLAIM_TRIES {
            let number = local(after)?;
            match self.insert_run(number, start) {
                Ok(()) => return Ok(number),
                Err(db::DbError::Duplicate(_)) if requested == 0 => {
                    after = after.max(Some(number));
                }
                Err(db::DbError::Duplicate(_)) => {
                    return Err(ClaimError::Taken(format!(
                        "run {number} is already in the {}: give another run number, or none for the next free one",
                        self.context()
                    )));
                }
                Err(e) => {
                    return Err(ClaimError::Other(
                        anyhow::Error::from(e).context(self.context()),
                    ));
                }
            }
        }
        Err(ClaimError::Other(anyhow::anyhow!(
            "{}: {CLAIM_TRIES} run numbers in a row were taken by others while claiming one",
            self.context()
        )))
    }

    fn insert_run(&mut self, number: u32, s: &RunStart) -> Result<(), db::DbError> {
        self.db.execute(
            "INSERT INTO runs (number, run_type, model, operator, host, pid, applications, \
             configuration, software, started_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            &[
                i64::from(number).into(),
                s.run_type.as_str().into(),
                s.model.as_str().into(),
                s.operator.as_str().into(),
                s.host.as_str().into(),
                i64::from(s.pid).into(),
                to_json(&s.applications).into(),
                s.configuration.as_str().into(),
                to_json(&s.software).into(),
                timestamp(s.started_at).into(),
            ],
        )?;
        Ok(())
    }

    /// Completes a run's row at its stop.
    pub fn end_run(
        &mut self,
        number: u32,
        stop_reason: &str,
        summary: &serde_json::Value,
    ) -> anyhow::Result<()> {
        self.db
            .execute(
                "UPDATE runs SET stopped_at = $1, stop_reason = $2, summary = $3 WHERE number = $4",
                &[
                    timestamp(SystemTime::now()).into(),
                    stop_reason.into(),
                    summary.to_string().into(),
                    i64::from(number).into(),
                ],
            )
            .with_context(|| self.context())?;
        Ok(())
    }

    /// Records closed files. A file already on record with the same size and checksums is
    /// left as it is (recording again is a no-op); one a writer rewrote since (a `.jsn` the
    /// event builder writes again) replaces its row, and its transfers go back to `pending`
    /// to be copied again, each keeping the Adler-32 of its copy verified before, so the
    /// transfer replaces that copy as superseded, not as corrupt.
    pub fn add_files(&mut self, files: &[ClosedFile]) -> anyhow::Result<()> {
        for f in files {
            let context = format!("{}: file {}", self.context(), f.path.display());
            let run = i64::from(f.run);
            let path = f.path.display().to_string();
            let written = self
                .db
                .execute(
                    "INSERT INTO run_files (run, path, bytes, adler32, crc32c, closed_at) \
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (run, path) DO UPDATE SET \
                     bytes = excluded.bytes, adler32 = excluded.adler32, \
                     crc32c = excluded.crc32c, closed_at = excluded.closed_at \
                     WHERE run_files.bytes <> excluded.bytes \
                     OR COALESCE(run_files.adler32, -1) <> COALESCE(excluded.adler32, -1) \
                     OR COALESCE(run_files.crc32c, -1) <> COALESCE(excluded.crc32c, -1)",
                    &[
                        run.into(),
                        path.as_str().into(),
                        (file_bytes(f) as i64).into(),
                        f.checksums.map(|c| i64::from(c.adler32)).into(),
                        f.checksums.map(|c| i64::from(c.crc32c)).into(),
                        timestamp(f.closed_at).into(),
                    ],
                )
                .with_context(|| context.clone())?;
            if written > 0 {
                // A new row has no transfers yet; a replaced one's are due again.
                self.db
                    .execute(
                        "UPDATE transfers SET state = 'pending', attempts = 0, last_error = NULL, \
                         next_try_at = NULL, verified_at = NULL, deleted_at = NULL \
                         WHERE run = $1 AND path = $2",
                        &[run.into(), path.as_str().into()],
                    )
                    .context(context)?;
            }
        }
        Ok(())
    }

    /// Records the hooks run `run` ran, each with what it printed.
    pub fn add_hooks(&mut self, run: u32, hooks: &[NewHook]) -> anyhow::Result<()> {
        for h in hooks {
            self.db
                .execute(
                    "INSERT INTO run_hooks (run, hook, argv, started_at, millis, ended, output, \
                     truncated_bytes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    &[
                        i64::from(run).into(),
                        h.hook.as_str().into(),
                        to_json(&h.argv).into(),
                        timestamp(h.started_at).into(),
                        (h.millis as i64).into(),
                        h.ended.to_string().into(),
                        h.output.as_str().into(),
                        (h.truncated_bytes as i64).into(),
                    ],
                )
                .with_context(|| format!("{}: {} hook", self.context(), h.hook))?;
        }
        Ok(())
    }

    /// The runs started on `host` that have no stop and whose process is gone (`alive`
    /// says whether a pid still runs; a run on another host cannot be told from a running
    /// one), each named once: its stop reason then says when it was found.
    pub fn notice_not_ended(
        &mut self,
        host: &str,
        alive: impl Fn(u32) -> bool,
    ) -> anyhow::Result<Vec<String>> {
        let rows = self
            .db
            .query(
                "SELECT number, pid, started_at, operator FROM runs \
                 WHERE stopped_at IS NULL AND stop_reason IS NULL AND host = $1 ORDER BY number",
                &[host.into()],
            )
            .with_context(|| self.context())?;
        let mut lines = Vec::new();
        for row in rows {
            let (Some(number), Some(pid)) = (row[0].int(), row[1].int()) else {
                continue;
            };
            if alive(pid as u32) {
                continue;
            }
            let started = row[2].text().unwrap_or("?");
            let operator = row[3].text().unwrap_or("?");
            let why = format!(
                "not ended: its process ({pid} on {host}) was gone when found at {}",
                timestamp(SystemTime::now())
            );
            self.db
                .execute(
                    "UPDATE runs SET stop_reason = $1 WHERE number = $2",
                    &[why.as_str().into(), number.into()],
                )
                .with_context(|| self.context())?;
            lines.push(format!(
                "run {number} was not ended: started at {started} by {operator}, its process ({pid}) is gone (killed?); its files may be incomplete"
            ));
        }
        Ok(lines)
    }

    /// Adds a logbook entry to `run`, or to the newest run; returns the run it went to.
    pub fn add_log(&mut self, run: Option<u32>, author: &str, text: &str) -> anyhow::Result<u32> {
        let run = match run {
            Some(run) => run,
            None => self
                .highest()?
                .ok_or_else(|| anyhow::anyhow!("{}: no run yet to write to", self.context()))?,
        };
        anyhow::ensure!(
            self.show(run)?.is_some(),
            "{}: no run {run} on record",
            self.context()
        );
        self.db
            .execute(
                "INSERT INTO logbook (run, written_at, author, text) VALUES ($1, $2, $3, $4)",
                &[
                    i64::from(run).into(),
                    timestamp(SystemTime::now()).into(),
                    author.into(),
                    text.into(),
                ],
            )
            .with_context(|| self.context())?;
        Ok(run)
    }

    const ROW_COLUMNS: &str =
        "number, run_type, model, operator, host, started_at, stopped_at, stop_reason";

    fn row(values: &[Value]) -> RunRow {
        let text = |i: usize| values[i].text().unwrap_or_default().to_string();
        RunRow {
            number: values[0].int().unwrap_or_default() as u32,
            run_type: text(1),
            model: text(2),
            operator: text(3),
            host: text(4),
            started_at: text(5),
            stopped_at: values[6].text().map(str::to_string),
            stop_reason: values[7].text().map(str::to_string),
        }
    }

    /// The runs `filter` lets through, by number.
    pub fn list(&mut self, filter: &RunFilter) -> anyhow::Result<Vec<RunRow>> {
        let mut conditions = Vec::new();
        let mut params: Vec<Value> = Vec::new();
        let mut add = |condition: &str, value: Value| {
            params.push(value);
            conditions.push(format!("{condition} ${}", params.len()));
        };
        if let Some(from) = filter.from {
            add("number >=", i64::from(from).into());
        }
        if let Some(to) = filter.to {
            add("number <=", i64::from(to).into());
        }
        if let Some(t) = &filter.run_type {
            add("run_type =", t.as_str().into());
        }
        if let Some(since) = &filter.since {
            add("started_at >=", since.as_str().into());
        }
        if let Some(before) = &filter.before {
            add("started_at <", before.as_str().into());
        }
        let mut sql = format!("SELECT {} FROM runs", Self::ROW_COLUMNS);
        if !conditions.is_empty() {
            sql += &format!(" WHERE {}", conditions.join(" AND "));
        }
        sql += " ORDER BY number";
        let rows = self
            .db
            .query(&sql, &params)
            .with_context(|| self.context())?;
        Ok(rows.iter().map(|r| Self::row(r)).collect())
    }

    /// Everything on record of run `number`.
    pub fn show(&mut self, number: u32) -> anyhow::Result<Option<RunRecord>> {
        let n: Value = i64::from(number).into();
        let sql = format!(
            "SELECT {}, pid, applications, software, configuration, summary FROM runs WHERE number = $1",
            Self::ROW_COLUMNS
        );
        let context = self.context();
        let rows = self
            .db
            .query(&sql, std::slice::from_ref(&n))
            .context(context.clone())?;
        let Some(values) = rows.first() else {
            return Ok(None);
        };
        let json = |v: &Value| v.text().and_then(|t| serde_json::from_str(t).ok());
        let files = self.files(number)?;
        let hooks = self
            .db
            .query(
                "SELECT hook, argv, started_at, millis, ended, output, truncated_bytes \
                 FROM run_hooks WHERE run = $1 ORDER BY started_at, hook",
                &[n],
            )
            .context(context)?
            .iter()
            .map(|h| HookRow {
                hook: h[0].text().unwrap_or_default().into(),
                argv: (h[1].text())
                    .and_then(|t| serde_json::from_str(t).ok())
                    .unwrap_or_default(),
                started_at: h[2].text().unwrap_or_default().into(),
                millis: h[3].int().unwrap_or_default() as u64,
                ended: json(&h[4]).unwrap_or_default(),
                output: h[5].text().unwrap_or_default().into(),
                truncated_bytes: h[6].int().unwrap_or_default() as u64,
            })
            .collect();
        let logbook = self.logbook(number)?;
        let transfers = self.transfers(number)?;
        Ok(Some(RunRecord {
            row: Self::row(values),
            pid: values[8].int().unwrap_or_default() as u32,
            applications: json(&values[9]).unwrap_or_default(),
            software: json(&values[10]).unwrap_or_default(),
            configuration: values[11].text().unwrap_or_default().into(),
            summary: json(&values[12]),
            files,
            hooks,
            logbook,
            transfers,
        }))
    }

    /// Run `number`'s files on record, by path.
    pub fn files(&mut self, number: u32) -> anyhow::Result<Vec<FileRow>> {
        let rows = self
            .db
            .query(
                "SELECT path, bytes, adler32, crc32c, closed_at FROM run_files WHERE run = $1 ORDER BY path",
                &[i64::from(number).into()],
            )
            .with_context(|| self.context())?;
        Ok(rows
            .iter()
            .map(|f| FileRow {
                path: f[0].text().unwrap_or_default().into(),
                bytes: f[1].int().unwrap_or_default() as u64,
                adler32: f[2].int().map(|c| c as u32),
                crc32c: f[3].int().map(|c| c as u32),
                closed_at: f[4].text().unwrap_or_default().into(),
            })
            .collect())
    }

    /// Run `number`'s logbook entries, oldest first.
    pub fn logbook(&mut self, number: u32) -> anyhow::Result<Vec<LogEntry>> {
        let rows = self
            .db
            .query(
                "SELECT written_at, author, text FROM logbook WHERE run = $1 ORDER BY written_at",
                &[i64::from(number).into()],
            )
            .with_context(|| self.context())?;
        Ok(rows
            .iter()
            .map(|e| LogEntry {
                written_at: e[0].text().unwrap_or_default().into(),
                author: e[1].text().unwrap_or_default().into(),
                text: e[2].text().unwrap_or_default().into(),
            })
            .collect())
    }
}

/// A file's size: checksummed, the bytes they cover; else its size on disk now (0 when it
/// cannot be asked).
fn file_bytes(f: &ClosedFile) -> u64 {
    f.checksums.map_or_else(
        || std::fs::metadata(&f.path).map_or(0, |m| m.len()),
        |c| c.bytes,
    )
}

/// JSON text of what a row keeps as JSON.
fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("registry values are representable in JSON")
}

#[cfg(test)]
mod tests;
