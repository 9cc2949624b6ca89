//! One transfer's state machine, kept apart from the copying so it can be tested alone:
//! what an attempt's outcome makes of the file's record (`Pending` -> `Verified`, or
//! `Retrying` with its back-off), and whether the local file may then be deleted — only a
//! verified copy, and only when the configuration asks for it.

use crate::backoff::Backoff;
use std::time::SystemTime;
use swdaq_registry::{TransferState, TransferUpdate};

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The copy is at its final name and the destination's Adler-32 is the file's.
    Verified { adler32: u32 },
    /// Why not: the copy, the rename or the verification failed (a mismatch included).
    Failed(String),
}

/// The record after an attempt that followed `attempts_before` others.
pub fn after_attempt(
    attempts_before: u32,
    outcome: &Outcome,
    backoff: &Backoff,
    now: SystemTime,
) -> TransferUpdate {
    let attempts = attempts_before.saturating_add(1);
    match outcome {
        Outcome::Verified { adler32 } => TransferUpdate {
            state: TransferState::Verified,
            attempts,
            last_error: None,
            verified_adler32: Some(*adler32),
            tried_at: now,
            next_try_at: None,
        },
        Outcome::Failed(why) => TransferUpdate {
            state: TransferState::Retrying,
            attempts,
            last_error: Some(why.clone()),
            verified_adler32: None,
            tried_at: now,
            // The back-off counts the failures in a row: every attempt before this one
            // either failed, or found a verified copy corrupted since (and is copied again).
            next_try_at: Some(now + backoff.after(attempts)),
        },
    }
}

/// Whether the local file may be deleted: a verified copy, and `delete_after_verify`.
pub fn may_delete(update: &TransferUpdate, delete_after_verify: bool) -> bool {
    delete_after_verify
        && update.state == TransferState::Verified
        && update.verified_adler32.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const BACKOFF: Backoff = Backoff {
        first: Duration::from_secs(2),
        max: Duration::from_secs(10),
    };

    #[test]
    fn failures_wait_longer_each_time_up_to_the_maximum_then_a_success_verifies() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let failed = Outcome::Failed("connection refused".into());
        let mut attempts = 0;
        let mut waits = Vec::new();
        for _ in 0..5 {
            let u = after_attempt(attempts, &failed, &BACKOFF, now);
            assert_eq!(u.state, TransferState::Retrying);
            assert_eq!(u.last_error.as_deref(), Some("connection refused"));
            assert!(!may_delete(&u, true), "never a failed one");
            waits.push(
                u.next_try_at
                    .unwrap()
                    .duration_since(now)
                    .unwrap()
                    .as_secs(),
            );
            attempts = u.attempts;
        }
        assert_eq!(waits, [2, 4, 8, 10, 10]);
        let u = after_attempt(attempts, &Outcome::Verified { adler32: 7 }, &BACKOFF, now);
        assert_eq!((u.state, u.attempts), (TransferState::Verified, 6));
        assert_eq!(
            (u.verified_adler32, u.next_try_at, u.last_error.as_deref()),
            (Some(7), None, None)
        );
        assert!(may_delete(&u, true));
        assert!(!may_delete(&u, false), "kept unless configured");
    }
}
