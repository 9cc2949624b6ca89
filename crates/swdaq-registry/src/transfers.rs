//! Each file's transfer to permanent storage (`swdaq-transfer`), one row per file and
//! destination in the `transfers` table (schema version 4): what is still to copy, what the
//! last attempt did, and what was verified and deleted. The registry only keeps the record;
//! the copying, the verification and the back-off are `swdaq-transfer`'s.

use crate::db::Value;
use crate::{Registry, timestamp};
use anyhow::Context;
use serde::Serialize;
use std::time::SystemTime;

/// A transfer's state as the registry keeps it (no row: not tried yet, as `Pending`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransferState {
    /// Not copied yet (or to be copied again: a copy found corrupted).
    Pending,
    /// The last attempt failed; tried again at `next_try_at`.
    Retrying,
    /// Copied, and the destination's Adler-32 matched the file's.
    Verified,
}

impl TransferState {
    pub fn as_str(self) -> &'static str {
        match self {
            TransferState::Pending => "pending",
            TransferState::Retrying => "retrying",
            TransferState::Verified => "verified",
        }
    }

    /// A state written by hand that is none of these reads as `Pending`: copied again.
    pub fn parse(text: &str) -> Self {
        match text {
            "retrying" => TransferState::Retrying,
            "verified" => TransferState::Verified,
            _ => TransferState::Pending,
        }
    }
}

/// A file to transfer (or, verified and not yet deleted, to delete), with what is on record.
#[derive(Debug, Clone, PartialEq)]
pub struct TransferCandidate {
    pub run: u32,
    pub path: String,
    pub bytes: u64,
    pub adler32: u32,
    pub state: TransferState,
    pub attempts: u32,
    /// The Adler-32 of a copy verified before the file was rewritten (its row replaced by
    /// [`Registry::add_files`]): a copy at the destination with it is an older version,
    /// to replace, not a corrupted one.
    pub superseded: Option<u32>,
}

/// What one attempt did, for [`Registry::record_transfer`].
#[derive(Debug, Clone, PartialEq)]
pub struct TransferUpdate {
    pub state: TransferState,
    pub attempts: u32,
    pub last_error: Option<String>,
    /// The Adler-32 the destination reported, when it was asked (`None` keeps the one of
    /// the copy verified before, if any).
    pub verified_adler32: Option<u32>,
    pub tried_at: SystemTime,
    pub next_try_at: Option<SystemTime>,
}

/// A file's transfer as `swdaq runs show` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransferRow {
    pub path: String,
    pub destination: String,
    pub state: TransferState,
    pub attempts: u32,
    pub last_error: Option<String>,
    pub verified_adler32: Option<u32>,
    pub first_tried_at: Option<String>,
    pub last_tried_at: Option<String>,
    pub next_try_at: Option<String>,
    pub verified_at: Option<String>,
    /// When the local file was deleted after its verified copy (`None`: kept).
    pub deleted_at: Option<String>,
}

/// What is still to transfer to one destination.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Backlog {
    /// Files with checksums not yet verified at the destination.
    pub files: u64,
    pub bytes: u64,
    /// Of them, those whose last attempt failed.
    pub failed: u64,
    /// Files on record without checksums: never transferred, as they cannot be verified.
    pub unverifiable: u64,
}

/// The join every transfer query starts from: each file with its row for destination `$1`.
const FILES_WITH_TRANSFER: &str = "FROM run_files f LEFT JOIN transfers t \
     ON t.run = f.run AND t.path = f.path AND t.destination = $1";

/// A file's copy is at the destination: verified, with the file's checksum as on record now
/// (a copy verified while the file was rewritten and its row replaced is due again).
const COPIED: &str = "(t.state = 'verified' AND COALESCE(t.verified_adler32, -1) = f.adler32)";

/// What each candidate row holds, for [`candidate`].
const CANDIDATE_COLUMNS: &str =
    "f.run, f.path, f.bytes, f.adler32, t.state, t.attempts, t.verified_adler32";

impl Registry {
    /// The files to transfer to `destination` now, oldest run first, at most `limit`: not
    /// tried, or tried and due again at `now`; with `and_undeleted`, also the verified ones
    /// not deleted locally yet (for a transfer that deletes after verifying).
    pub fn transfers_due(
        &mut self,
        destination: &str,
        now: SystemTime,
        and_undeleted: bool,
        limit: u32,
    ) -> anyhow::Result<Vec<TransferCandidate>> {
        let undeleted = if and_undeleted {
            format!(" OR ({COPIED} AND t.deleted_at IS NULL)")
        } else {
            String::new()
        };
        let sql = format!(
            "SELECT {CANDIDATE_COLUMNS} {FILES_WITH_TRANSFER} \
             WHERE f.adler32 IS NOT NULL AND (t.state IS NULL \
             OR (NOT {COPIED} AND (t.next_try_at IS NULL OR t.next_try_at <= $2)){undeleted}) \
             ORDER BY f.run, f.path LIMIT $3"
        );
        let rows = self
            .db
            .query(
                &sql,
                &[
                    destination.into(),
                    timestamp(now).into(),
                    i64::from(limit).into(),
                ],
            )
            .with_context(|| self.context())?;
        Ok(rows.iter().map(|r| candidate(r)).collect())
    }

    /// What is still to transfer to `destination`. (PostgreSQL sums `BIGINT`s as `NUMERIC`:
    /// cast back.)
    pub fn transfer_backlog(&mut self, destination: &str) -> anyhow::Result<Backlog> {
        let sql = format!(
            "SELECT \
             CAST(SUM(CASE WHEN f.adler32 IS NOT NULL AND (t.state IS NULL OR NOT {COPIED}) THEN 1 ELSE 0 END) AS BIGINT), \
             CAST(SUM(CASE WHEN f.adler32 IS NOT NULL AND (t.state IS NULL OR NOT {COPIED}) THEN f.bytes ELSE 0 END) AS BIGINT), \
             CAST(SUM(CASE WHEN t.state = 'retrying' THEN 1 ELSE 0 END) AS BIGINT), \
             CAST(SUM(CASE WHEN f.adler32 IS NULL THEN 1 ELSE 0 END) AS BIGINT) \
             {FILES_WITH_TRANSFER}"
        );
        let rows = self
            .db
            .query(&sql, &[destination.into()])
            .with_context(|| self.context())?;
        let n = |i: usize| {
            rows.first()
                .and_then(|r| r.get(i))
                .and_then(Value::int)
                .unwrap_or(0) as u64
        };
        Ok(Backlog {
            files: n(0),
            bytes: n(1),
            failed: n(2),
            unverifiable: n(3),
        })
    }

    /// Records an attempt at `path`'s transfer (of run `run`) to `destination`; a verified
    /// one is stamped with its time.
    pub fn record_transfer(
        &mut self,
        run: u32,
        path: &str,
        destination: &str,
        update: &TransferUpdate,
    ) -> anyhow::Result<()> {
        let tried = timestamp(update.tried_at);
        let verified_at = (update.state == TransferState::Verified).then(|| tried.clone());
        self.db
            .execute(
                "INSERT INTO transfers (run, path, destination, state, attempts, last_error, \
                 verified_adler32, first_tried_at, last_tried_at, next_try_at, verified_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10) \
                 ON CONFLICT (run, path, destination) DO UPDATE SET state = $4, attempts = $5, \
                 last_error = $6, verified_adler32 = COALESCE($7, transfers.verified_adler32), \
                 last_tried_at = $8, next_try_at = $9, \
                 verified_at = $10",
                &[
                    i64::from(run).into(),
                    path.into(),
                    destination.into(),
                    update.state.as_str().into(),
                    i64::from(update.attempts).into(),
                    update.last_error.as_deref().into(),
                    update.verified_adler32.map(i64::from).into(),
                    tried.as_str().into(),
                    update.next_try_at.map(timestamp).into(),
                    verified_at.into(),
                ],
            )
            .with_context(|| format!("{}: transfer of {path}", self.context()))?;
        Ok(())
    }

    /// Records that `path`'s local file was deleted after its verified copy to `destination`.
    pub fn record_deleted(
        &mut self,
        run: u32,
        path: &str,
        destination: &str,
    ) -> anyhow::Result<()> {
        self.db
            .execute(
                "UPDATE transfers SET deleted_at = $1 WHERE run = $2 AND path = $3 AND destination = $4",
                &[
                    timestamp(SystemTime::now()).into(),
                    i64::from(run).into(),
                    path.into(),
                    destination.into(),
                ],
            )
            .with_context(|| format!("{}: deletion of {path}", self.context()))?;
        Ok(())
    }

    /// The verified transfers to `destination` whose local file is kept (to check again).
    pub fn verified_kept(&mut self, destination: &str) -> anyhow::Result<Vec<TransferCandidate>> {
        let sql = format!(
            "SELECT {CANDIDATE_COLUMNS} {FILES_WITH_TRANSFER} \
             WHERE f.adler32 IS NOT NULL AND {COPIED} AND t.deleted_at IS NULL \
             ORDER BY f.run, f.path"
        );
        let rows = self
            .db
            .query(&sql, &[destination.into()])
            .with_context(|| self.context())?;
        Ok(rows.iter().map(|r| candidate(r)).collect())
    }

    /// Run `number`'s transfers, by path and destination.
    pub fn transfers(&mut self, number: u32) -> anyhow::Result<Vec<TransferRow>> {
        let rows = self
            .db
            .query(
                "SELECT path, destination, state, attempts, last_error, verified_adler32, \
                 first_tried_at, last_tried_at, next_try_at, verified_at, deleted_at \
                 FROM transfers WHERE run = $1 ORDER BY path, destination",
                &[i64::from(number).into()],
            )
            .with_context(|| self.context())?;
        let text = |v: &Value| v.text().map(str::to_string);
        Ok(rows
            .iter()
            .map(|r| TransferRow {
                path: r[0].text().unwrap_or_default().into(),
                destination: r[1].text().unwrap_or_default().into(),
                state: TransferState::parse(r[2].text().unwrap_or_default()),
                attempts: r[3].int().unwrap_or_default() as u32,
                last_error: text(&r[4]),
                verified_adler32: r[5].int().map(|c| c as u32),
                first_tried_at: text(&r[6]),
                last_tried_at: text(&r[7]),
                next_try_at: text(&r[8]),
                verified_at: text(&r[9]),
                deleted_at: text(&r[10]),
            })
            .collect())
    }
}

/// A file to transfer from a row of [`CANDIDATE_COLUMNS`] (no transfer row yet: pending).
fn candidate(r: &[Value]) -> TransferCandidate {
    let adler32 = r[3].int().unwrap_or_default() as u32;
    TransferCandidate {
        run: r[0].int().unwrap_or_default() as u32,
        path: r[1].text().unwrap_or_default().into(),
        bytes: r[2].int().unwrap_or_default() as u64,
        adler32,
        state: r[4]
            .text()
            .map_or(TransferState::Pending, TransferState::parse),
        attempts: r[5].int().unwrap_or_default() as u32,
        superseded: r[6]
            .int()
            .map(|c| c as u32)
            .filter(|&verified| verified != adler32),
    }
}
