//! Events handed out to units by credit, each unit's account kept by event number: the event
//! builder's event manager gives events to builder units, the SW ROD's HLT supervisor gives
//! L1 accepts to HLT applications, the same way. A unit asks for a number of events (it has
//! room for them) and reports the ones it has settled (in a closed file, or finished with
//! nothing to store); events go round robin to units with credit, never more than a unit
//! asked for. A unit that dies leaves the events it was given and had not settled: they are
//! lost, by number, an upper bound that [`settle_with_disk`] makes exact once the run is
//! over by reading back what the unit left in its closed files.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// One unit's account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitAccount {
    pub requested: u64,
    pub assigned: u64,
    pub alive: bool,
    /// Events given and not yet settled.
    pub unsettled: BTreeSet<u64>,
}

/// What a unit left in its directory for one run, read back after it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOnDisk {
    /// Events in its closed files, by number.
    pub events: BTreeSet<u64>,
    /// Closed files and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Event numbers found in more than one closed file.
    pub duplicates: Vec<u64>,
    /// Files it left open, by name: partial, their events not written.
    pub partial: Vec<String>,
    /// Closed files with anything wrong, with why (their intact events count).
    pub unreadable: Vec<String>,
}

impl LeftOnDisk {
    /// Adds closed file `name` of `bytes` bytes, with the problems its reader named and the
    /// events (numbers) it read intact.
    pub fn add_closed(
        &mut self,
        name: &str,
        bytes: u64,
        problems: &[&str],
        events: impl IntoIterator<Item = u64>,
    ) {
        if !problems.is_empty() {
            self.unreadable
                .push(format!("{name}: {}", problems.join("; ")));
        }
        self.files += 1;
        self.bytes += bytes;
        for n in events {
            if !self.events.insert(n) {
                self.duplicates.push(n);
            }
        }
    }
}

/// Credits per unit and round-robin assignment among those with credit.
#[derive(Debug, Clone)]
pub struct Credits {
    accounts: Vec<UnitAccount>,
    next: usize,
}

impl Credits {
    pub fn new(units: usize) -> Self {
        let alive = UnitAccount {
            alive: true,
            ..Default::default()
        };
        Self {
            accounts: vec![alive; units],
            next: 0,
        }
    }

    /// Records `unit`'s request for `count` more events and the events it has `settled`;
    /// requests from unknown or gone units are ignored (false).
    pub fn grant(&mut self, unit: usize, count: u64, settled: &[u64]) -> bool {
        match self.accounts.get_mut(unit) {
            Some(a) if a.alive => {
                a.requested += count;
                for event in settled {
                    a.unsettled.remove(event);
                }
                true
            }
            _ => false,
        }
    }

    /// The next unit with credit, round robin, for `event`; takes one credit.
    pub fn take(&mut self, event: u64) -> Option<usize> {
        let n = self.accounts.len();
        for i in 0..n {
            let unit = (self.next + i) % n;
            let a = &mut self.accounts[unit];
            if a.alive && a.assigned < a.requested {
                a.assigned += 1;
                a.unsettled.insert(event);
                self.next = (unit + 1) % n;
                return Some(unit);
            }
        }
        None
    }

    /// Whether some unit has credit left.
    pub fn any_credit(&self) -> bool {
        self.accounts
            .iter()
            .any(|a| a.alive && a.assigned < a.requested)
    }

    /// Marks a unit gone; returns the events it was given and never settled, in order (none
    /// if it was already gone or is unknown).
    pub fn died(&mut self, unit: usize) -> Vec<u64> {
        match self.accounts.get_mut(unit) {
            Some(a) if a.alive => {
                a.alive = false;
                std::mem::take(&mut a.unsettled).into_iter().collect()
            }
            _ => Vec::new(),
        }
    }

    pub fn accounts(&self) -> &[UnitAccount] {
        &self.accounts
    }

    pub fn all_gone(&self) -> bool {
        self.accounts.iter().all(|a| !a.alive)
    }
}

/// A unit whose account its own report could not close, read back from disk.
#[derive(Debug, Clone)]
pub struct ReadBackOf<L> {
    pub unit: usize,
    /// Its report reached the summary.
    pub reported: bool,
    /// What it left, or why it could not be read.
    pub left: Result<L, String>,
}

/// Makes `lost` exact for the units declared `gone` and those that ended without a report
/// (`reported[unit]` false): `lost` comes in holding what the gone units had not settled;
/// a unit that ended unreported after the supervisor had finished adds what it had not
/// settled by then; then every event found in a read-back unit's closed files
/// (`read(unit)`, `written(&left)`) is written, not lost. A unit given no events is not
/// read. Where a unit cannot be read, the upper bound stands and its entry says why.
pub fn settle_with_disk<L>(
    lost: &mut BTreeSet<u64>,
    accounts: &[UnitAccount],
    gone: &[usize],
    reported: &[bool],
    mut read: impl FnMut(usize) -> Result<L, String>,
    written: impl Fn(&L) -> &BTreeSet<u64>,
) -> Vec<ReadBackOf<L>> {
    let mut read_back = Vec::new();
    for (unit, &reported) in reported.iter().enumerate() {
        let Some(account) = accounts.get(unit) else {
            continue;
        };
        let gone = gone.contains(&unit);
        if (reported && !gone) || account.assigned == 0 {
            continue;
        }
        if !gone {
            lost.extend(&account.unsettled);
        }
        let left = read(unit);
        if let Ok(l) = &left {
            let on_disk = written(l);
            lost.retain(|e| !on_disk.contains(e));
        }
        read_back.push(ReadBackOf {
            unit,
            reported,
            left,
        });
    }
    read_back
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the order of requests and assignments, no unit is ever given more
        /// events than it asked for, and every credit is eventually used.
        #[test]
        fn never_more_than_asked(steps in proptest::collection::vec((0usize..3, 0u64..5, any::<bool>()), 0..200)) {
            let mut credits = Credits::new(3);
            let mut asked = [0u64; 3];
            let mut event = 0;
            for (unit, count, assign) in steps {
                if assign {
                    event += 1;
                    credits.take(event);
                } else {
                    credits.grant(unit, count, &[]);
                    asked[unit] += count;
                }
                for (a, &asked) in credits.accounts().iter().zip(&asked) {
                    prop_assert!(a.assigned <= asked);
                }
            }
            while credits.take(event).is_some() {
                event += 1;
            }
            prop_assert!(!credits.any_credit());
            for (a, &asked) in credits.accounts().iter().zip(&asked) {
                prop_assert_eq!(a.assigned, asked);
            }
        }
    }

    #[test]
    fn round_robin_and_death_losing_the_unsettled_by_number() {
        let mut c = Credits::new(2);
        assert_eq!(c.take(1), None);
        for unit in 0..2 {
            c.grant(unit, 2, &[]);
        }
        assert_eq!(
            [c.take(1), c.take(2), c.take(3)],
            [Some(0), Some(1), Some(0)]
        );
        c.grant(0, 0, &[1]);
        assert_eq!(c.died(0), [3]);
        assert_eq!(c.died(0), [] as [u64; 0], "counted once");
        assert!(!c.grant(0, 5, &[]));
        assert!(!c.grant(9, 5, &[]));
        assert_eq!([c.take(4), c.take(5)], [Some(1), None]);
        assert!(!c.all_gone());
        assert_eq!(c.died(1), [2, 4]);
        assert!(c.all_gone());
    }

    fn account(unsettled: &[u64]) -> UnitAccount {
        UnitAccount {
            requested: 100,
            assigned: 50,
            alive: true,
            unsettled: unsettled.iter().copied().collect(),
        }
    }

    #[test]
    fn what_a_unit_closed_is_written_and_the_rest_lost_exactly() {
        let on_disk: BTreeSet<u64> = (1..=30).collect();
        // Unit 1 gone: 11..=40 unsettled (the bound); it closed 1..=30.
        let mut lost: BTreeSet<u64> = (11..=40).collect();
        let accounts = [account(&[]), account(&[])];
        let read = settle_with_disk(
            &mut lost,
            &accounts,
            &[1],
            &[true, false],
            |_| Ok(on_disk.clone()),
            |l| l,
        );
        assert_eq!(lost, (31..=40).collect());
        assert_eq!(read.len(), 1);
        assert_eq!((read[0].unit, read[0].reported), (1, false));
        // A unit that reported and was not declared gone keeps its own account; one that
        // ended unreported after the supervisor finished loses what it had not settled.
        let mut lost = BTreeSet::new();
        let accounts = [account(&[3]), account(&[29, 31])];
        settle_with_disk(
            &mut lost,
            &accounts,
            &[],
            &[true, false],
            |_| Ok(on_disk.clone()),
            |l| l,
        );
        assert_eq!(lost, [31].into());
        // Unreadable: the bound stands, and says why.
        let mut lost: BTreeSet<u64> = [4].into();
        let read = settle_with_disk(
            &mut lost,
            &accounts,
            &[1],
            &[true, true],
            |_| Err::<BTreeSet<u64>, _>("gone with its host".into()),
            |l| l,
        );
        assert_eq!(lost, [4].into());
        assert!(read[0].left.is_err());
    }
}
