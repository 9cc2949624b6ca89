//! Sampling for online monitoring: a data thread offers each item it hands on, and every
//! `every`-th goes to the monitoring thread's bounded channel if there is room. A full
//! channel is a counted drop: the data path never waits for monitoring, and an item is only
//! copied when it will be sent.

use crossbeam_channel::Sender;
use swdaq_monitor::{Counter, MonitorError, Registry};

/// Each sampler's counter of items sent, in its data thread's block.
const SAMPLED_METRIC: &str = "swdaq_dqm_samples_total";
/// Each sampler's counter of items picked but dropped.
const DROPPED_METRIC: &str = "swdaq_dqm_samples_dropped_total";

/// What a data thread's sampler did: items sent to the monitoring thread, and items picked
/// but dropped because its channel was full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SampleCounts {
    pub sampled: u64,
    pub dropped: u64,
}

impl SampleCounts {
    pub fn add(&mut self, other: SampleCounts) {
        self.sampled += other.sampled;
        self.dropped += other.dropped;
    }

    /// What every sampler registered in `registry` has counted so far, read from their
    /// counters (the monitoring thread's view of the data threads, without touching them).
    pub fn in_registry(registry: &Registry) -> SampleCounts {
        SampleCounts {
            sampled: registry.counter_total(SAMPLED_METRIC),
            dropped: registry.counter_total(DROPPED_METRIC),
        }
    }
}

/// Where a run's samples go and how often: each data thread makes its own [`Sampler`] from it.
#[derive(Debug, Clone)]
pub struct SampleTap<T> {
    sender: Sender<T>,
    every: u32,
}

impl<T> SampleTap<T> {
    /// Every `every`-th item of each data thread (at least 1: every item) into `sender`.
    pub fn new(sender: Sender<T>, every: u32) -> Self {
        Self {
            sender,
            every: every.max(1),
        }
    }

    /// A sampler for one data thread, its counters in a block labelled `thread`.
    pub fn sampler(&self, registry: &Registry, thread: &str) -> Result<Sampler<T>, MonitorError> {
        let mut block = registry.block(thread, &[]);
        Ok(Sampler {
            sender: self.sender.clone(),
            every: u64::from(self.every),
            offered: 0,
            counts: SampleCounts::default(),
            sampled: block.counter(
                SAMPLED_METRIC,
                "Items sent to the data-quality monitoring thread",
            )?,
            dropped: block.counter(
                DROPPED_METRIC,
                "Items picked for data-quality monitoring but dropped: its channel was full",
            )?,
        })
    }
}

/// One data thread's end of the sample channel.
pub struct Sampler<T> {
    sender: Sender<T>,
    every: u64,
    offered: u64,
    counts: SampleCounts,
    sampled: Counter,
    dropped: Counter,
}

impl<T> Sampler<T> {
    /// Offers one item; `copy` makes the sample only if it is picked and there is room.
    /// Never waits.
    pub fn offer(&mut self, copy: impl FnOnce() -> T) {
        self.offered += 1;
        if !self.offered.is_multiple_of(self.every) {
            return;
        }
        // Checking for room first spares the copy when the queue is full; room another data
        // thread takes meanwhile, or a gone monitoring thread, fails `try_send`: a drop too.
        if self.sender.is_full() || self.sender.try_send(copy()).is_err() {
            self.counts.dropped += 1;
            self.dropped.inc();
        } else {
            self.counts.sampled += 1;
            self.sampled.inc();
        }
    }

    pub fn counts(&self) -> SampleCounts {
        self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nth_item_is_sent_and_a_full_channel_drops_without_waiting() {
        let (tx, rx) = crossbeam_channel::bounded(2);
        let registry = Registry::new();
        let mut sampler = SampleTap::new(tx, 3).sampler(&registry, "t").unwrap();
        let mut copies = 0;
        for i in 0..12 {
            sampler.offer(|| {
                copies += 1;
                i
            });
        }
        // Items 2, 5, 8, 11 picked; room for two.
        assert_eq!(
            sampler.counts(),
            SampleCounts {
                sampled: 2,
                dropped: 2
            }
        );
        assert_eq!(copies, 2, "a dropped sample is never copied");
        assert_eq!(SampleCounts::in_registry(&registry), sampler.counts());
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [2, 5]);
        drop(rx);
        sampler.offer(|| 12);
        sampler.offer(|| 13);
        sampler.offer(|| 14);
        assert_eq!(
            sampler.counts().dropped,
            3,
            "a gone monitoring thread is a drop"
        );
    }

    #[test]
    fn every_zero_samples_every_item() {
        let (tx, rx) = crossbeam_channel::bounded(8);
        let mut sampler = SampleTap::new(tx, 0)
            .sampler(&Registry::new(), "t")
            .unwrap();
        for i in 0..5 {
            sampler.offer(|| i);
        }
        assert_eq!(rx.try_iter().count(), 5);
    }
}
