//! The SW ROD's monitoring sampler: checks one fragment in `sample_every` of each ROB.

use crossbeam_channel::{Receiver, Select};
use std::sync::Arc;
use swdaq_format::eformat::{ChunkRecords, RobFragment, status};
use swdaq_monitor::{Counter, Registry};
use swdaq_swrod::BuiltFragment;

pub(super) struct SamplerMetrics {
    samples: Counter,
    errors: Counter,
}

impl SamplerMetrics {
    pub(super) fn register(registry: &Registry) -> Result<Self, swdaq_monitor::MonitorError> {
        let mut b = registry.block("swrod-sampler", &[]);
        Ok(Self {
            samples: b.counter(
                "swdaq_swrod_sampled_fragments_total",
                "ROB fragments the monitoring sampler checked",
            )?,
            errors: b.counter(
                "swdaq_swrod_sample_errors_total",
                "Sampled fragments that did not parse or held a chunk of another L1 ID",
            )?,
        })
    }
}

/// The monitoring sampler: checks every sampled fragment's layout and that each chunk
/// carries the fragment's L1 ID. A payload an aggregation plugin built (`DetectorPayload` in
/// its first status word) is the detector's, which swdaq cannot read: only the ROB's own
/// layout is checked.
pub(super) fn sample(
    inputs: Vec<Receiver<Arc<BuiltFragment>>>,
    l1id_offset: usize,
    metrics: SamplerMetrics,
) -> (u64, u64) {
    let (mut samples, mut errors) = (0, 0);
    let mut open: Vec<bool> = vec![true; inputs.len()];
    while open.iter().any(|&o| o) {
        let mut sel = Select::new();
        let ids: Vec<usize> = (0..inputs.len()).filter(|&i| open[i]).collect();
        for &i in &ids {
            sel.recv(&inputs[i]);
        }
        let op = sel.select();
        let i = ids[op.index()];
        match op.recv(&inputs[i]) {
            Ok(f) => {
                samples += 1;
                metrics.samples.inc();
                if !fragment_is_sound(&f, l1id_offset) {
                    errors += 1;
                    metrics.errors.inc();
                }
            }
            Err(_) => open[i] = false,
        }
    }
    (samples, errors)
}

fn fragment_is_sound(f: &BuiltFragment, l1id_offset: usize) -> bool {
    let Ok(rob) = RobFragment::parse(f.bytes()) else {
        return false;
    };
    let detector_payload = rob
        .status()
        .next()
        .is_some_and(|w| w & status::DETECTOR_PAYLOAD != 0);
    if detector_payload {
        return true;
    }
    let l1_id = rob.rod.l1_id.to_le_bytes();
    ChunkRecords::new(rob.data)
        .all(|r| r.is_ok_and(|r| r.data.get(l1id_offset..l1id_offset + 4) == Some(&l1_id[..])))
}
