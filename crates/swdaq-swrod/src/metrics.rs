//! A ROB's counters in the monitoring registry. The readout thread keeps plain counts
//! ([`DecoderCounts`], [`AggregatorCounts`]) and publishes the increments now and then (per
//! batch of blocks), so monitoring costs a few stores per batch, not per chunk.

use crate::aggregator::AggregatorCounts;
use crate::consumers::ConsumerCounts;
use crate::decoder::DecoderCounts;
use swdaq_monitor::{Counter, Gauge, MonitorError, Registry};

/// (metric name, help, value) of every published count.
fn values(d: &DecoderCounts, a: &AggregatorCounts) -> [(&'static str, &'static str, u64); 21] {
    [
        ("swdaq_swrod_blocks_total", "FELIX blocks decoded", d.blocks),
        ("swdaq_swrod_chunks_total", "Whole chunks decoded", d.chunks),
        (
            "swdaq_swrod_corrupt_blocks_total",
            "Blocks with a bad marker or trailer lengths",
            d.corrupt_blocks,
        ),
        (
            "swdaq_swrod_foreign_blocks_total",
            "Blocks of e-links not in the ROB",
            d.foreign_blocks,
        ),
        (
            "swdaq_swrod_sequence_gaps_total",
            "Block sequence number gaps",
            d.sequence_gaps,
        ),
        (
            "swdaq_swrod_broken_chunks_total",
            "Chunks begun or ended without their other part",
            d.broken_chunks,
        ),
        (
            "swdaq_swrod_fragments_total",
            "ROB fragments built",
            a.fragments,
        ),
        (
            "swdaq_swrod_incomplete_fragments_total",
            "ROB fragments with missing e-links",
            a.incomplete_fragments,
        ),
        (
            "swdaq_swrod_timed_out_fragments_total",
            "ROB fragments completed by the time-out",
            a.timed_out_fragments,
        ),
        (
            "swdaq_swrod_missing_chunks_total",
            "Chunks lost (their e-link delivered later L1 IDs)",
            a.missing_chunks,
        ),
        (
            "swdaq_swrod_elinks_silent_total",
            "E-links that went silent",
            a.elinks_silent,
        ),
        (
            "swdaq_swrod_late_chunks_total",
            "Chunks for fragments already completed",
            a.late_chunks,
        ),
        (
            "swdaq_swrod_duplicate_chunks_total",
            "Second chunks of an e-link for one L1 ID",
            a.duplicate_chunks,
        ),
        (
            "swdaq_swrod_out_of_order_chunks_total",
            "Chunks with an L1 ID before their e-link's previous one",
            a.out_of_order_chunks,
        ),
        (
            "swdaq_swrod_truncated_chunks_total",
            "Chunks flagged truncated by FELIX",
            a.truncated_chunks,
        ),
        (
            "swdaq_swrod_crc_error_chunks_total",
            "Chunks flagged with a CRC or e-link error",
            a.crc_error_chunks,
        ),
        (
            "swdaq_swrod_malformed_chunks_total",
            "Chunks too short or too long",
            a.malformed_chunks + a.oversized_chunks,
        ),
        (
            "swdaq_swrod_bcid_mismatches_total",
            "Chunks whose BCID differs from their fragment's",
            a.bcid_mismatches,
        ),
        (
            "swdaq_swrod_ecrs_total",
            "ECRs seen (L1 ID counter resets)",
            a.ecrs,
        ),
        (
            "swdaq_swrod_buffer_allocations_total",
            "Fragment buffers allocated instead of taken from the pool",
            a.buffer_allocations,
        ),
        (
            "swdaq_swrod_plugin_errors_total",
            "L1 IDs the aggregation plugin failed for (stored in swdaq's layout, flagged)",
            a.plugin_errors,
        ),
    ]
}

pub struct RobMetrics {
    registry: Registry,
    thread: String,
    rob: String,
    /// Per e-link (ROB order): its error counter once it has had an error, and the count
    /// published. Registered on the first error, so quiet e-links add no series.
    elink_errors: Vec<Option<(Counter, u64)>>,
    counters: Vec<Counter>,
    published: Vec<u64>,
    open_fragments: Gauge,
    consumers: Vec<(Counter, Counter, ConsumerCounts)>,
}

impl RobMetrics {
    /// Registers the ROB's metrics in a block of thread `thread`, one pair of counters per
    /// consumer named in `consumers`.
    pub fn register(
        registry: &Registry,
        thread: &str,
        rob_source_id: u32,
        consumers: &[&str],
    ) -> Result<Self, MonitorError> {
        let rob = format!("0x{rob_source_id:08x}");
        let mut block = registry.block(thread, &[("rob", &rob)]);
        let zero = values(&DecoderCounts::default(), &AggregatorCounts::default());
        let counters = zero
            .iter()
            .map(|(name, help, _)| block.counter(name, help))
            .collect::<Result<Vec<_>, _>>()?;
        let open_fragments =
            block.gauge("swdaq_swrod_open_fragments", "Fragments being aggregated")?;
        let consumers = consumers
            .iter()
            .map(|c| {
                let mut block = registry.block(thread, &[("rob", &rob), ("consumer", c)]);
                Ok((
                    block.counter(
                        "swdaq_swrod_delivered_fragments_total",
                        "Fragments given to a consumer",
                    )?,
                    block.counter(
                        "swdaq_swrod_slow_consumer_drops_total",
                        "Fragments a consumer did not get: its queue was full",
                    )?,
                    ConsumerCounts::default(),
                ))
            })
            .collect::<Result<Vec<_>, MonitorError>>()?;
        Ok(Self {
            registry: registry.clone(),
            thread: thread.to_owned(),
            rob,
            elink_errors: Vec::new(),
            published: vec![0; counters.len()],
            counters,
            open_fragments,
            consumers,
        })
    }

    /// Adds what was counted since the last call.
    pub fn publish(
        &mut self,
        decoder: &DecoderCounts,
        aggregator: &AggregatorCounts,
        open_fragments: usize,
        consumers: impl IntoIterator<Item = ConsumerCounts>,
    ) {
        let now = values(decoder, aggregator);
        for ((counter, last), (_, _, value)) in
            self.counters.iter().zip(&mut self.published).zip(now)
        {
            counter.add(value - *last);
            *last = value;
        }
        self.open_fragments.set(open_fragments as f64);
        for ((delivered, dropped, last), now) in self.consumers.iter_mut().zip(consumers) {
            delivered.add(now.delivered - last.delivered);
            dropped.add(now.dropped_slow - last.dropped_slow);
            *last = now;
        }
    }

    /// Publishes each e-link's error count (`errors[i]` of e-link `elinks[i]`) as
    /// `swdaq_swrod_elink_errors_total{rob, elink}`, registering an e-link's series on its
    /// first error (outside the per-chunk path: at most once per e-link).
    pub fn publish_elink_errors(
        &mut self,
        elinks: &[u16],
        errors: &[u64],
    ) -> Result<(), MonitorError> {
        self.elink_errors.resize_with(errors.len(), || None);
        for ((slot, &n), &elink) in self.elink_errors.iter_mut().zip(errors).zip(elinks) {
            if n == 0 {
                continue;
            }
            if slot.is_none() {
                let elink = elink.to_string();
                let counter = self
                    .registry
                    .block(&self.thread, &[("rob", &self.rob), ("elink", &elink)])
                    .counter(
                        "swdaq_swrod_elink_errors_total",
                        "Chunk problems of one e-link: lost, duplicate, out of order, truncated or flagged, BCID mismatch, gone silent",
                    )?;
                *slot = Some((counter, 0));
            }
            if let Some((counter, published)) = slot {
                counter.add(n - *published);
                *published = n;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_monitor::{Collector, Value};

    fn total(snapshot: &swdaq_monitor::Snapshot, name: &str, consumer: Option<&str>) -> u64 {
        let family = snapshot.families.iter().find(|f| f.name == name).unwrap();
        family
            .series
            .iter()
            .filter(|s| {
                consumer.is_none_or(|c| s.labels.get("consumer").map(String::as_str) == Some(c))
            })
            .map(|s| match s.value {
                Value::Counter { total, .. } => total,
                _ => panic!("{name} is not a counter"),
            })
            .sum()
    }

    #[test]
    fn published_increments_add_up() {
        let registry = Registry::new();
        let mut m = RobMetrics::register(&registry, "swrod-0", 0x71_0000, &["requests", "sampler"])
            .unwrap();
        let mut d = DecoderCounts {
            blocks: 10,
            sequence_gaps: 1,
            ..Default::default()
        };
        let mut a = AggregatorCounts {
            missing_chunks: 2,
            ..Default::default()
        };
        let slow = ConsumerCounts {
            delivered: 3,
            dropped_slow: 4,
        };
        m.publish(&d, &a, 5, [ConsumerCounts::default(), slow]);
        d.blocks = 25;
        a.missing_chunks = 3;
        m.publish(&d, &a, 5, [ConsumerCounts::default(), slow]);
        let snapshot = Collector::new(registry).collect();
        assert_eq!(total(&snapshot, "swdaq_swrod_blocks_total", None), 25);
        assert_eq!(total(&snapshot, "swdaq_swrod_sequence_gaps_total", None), 1);
        assert_eq!(
            total(&snapshot, "swdaq_swrod_missing_chunks_total", None),
            3
        );
        assert_eq!(
            total(
                &snapshot,
                "swdaq_swrod_slow_consumer_drops_total",
                Some("sampler")
            ),
            4
        );
        assert_eq!(
            total(
                &snapshot,
                "swdaq_swrod_slow_consumer_drops_total",
                Some("requests")
            ),
            0
        );
    }

    #[test]
    fn elink_errors_get_a_series_once_they_happen() {
        let registry = Registry::new();
        let mut m = RobMetrics::register(&registry, "swrod-0", 0x71_0000, &[]).unwrap();
        m.publish_elink_errors(&[7, 8, 9], &[0, 2, 0]).unwrap();
        m.publish_elink_errors(&[7, 8, 9], &[0, 5, 1]).unwrap();
        let snapshot = Collector::new(registry).collect();
        let family = snapshot
            .families
            .iter()
            .find(|f| f.name == "swdaq_swrod_elink_errors_total")
            .unwrap();
        let mut got: Vec<(String, u64)> = family
            .series
            .iter()
            .map(|s| match s.value {
                Value::Counter { total, .. } => (s.labels["elink"].clone(), total),
                _ => panic!("not a counter"),
            })
            .collect();
        got.sort();
        assert_eq!(got, vec![("8".into(), 5), ("9".into(), 1)]);
    }
}
