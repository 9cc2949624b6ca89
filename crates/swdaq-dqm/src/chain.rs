//! The chain's histograms, from its trigger records: per link, each channel's pedestal (the
//! median ADC of the record's window) and noise (RMS), every sample's ADC less its channel's
//! pedestal, and the channels that were dead (no noise at all: a dead or stuck front end) or
//! noisy (more than [`NOISY_FACTOR`] times the link's median noise) in a record, by the
//! channel's place in the link's frames. Fixed binning, so any two runs compare.

use crate::hist::{Axis, Hist1};
use crate::set::HistSet;
use swdaq_format::adc_matrix::adc_matrix;
use swdaq_format::fragment::Fragment;
use swdaq_format::trigger_record::TriggerRecord;

/// A channel whose RMS is this many times its link's median is noisy in that record.
pub const NOISY_FACTOR: f64 = 3.0;
/// Below this RMS (ADC counts) a channel is dead or stuck.
pub const DEAD_RMS: f64 = 0.5;
/// Pedestals over the 14-bit range in 16-count bins.
const PEDESTAL_BINS: (usize, f64, f64) = (1024, 0.0, 16384.0);
/// Noise RMS up to 64 counts in quarter-count bins.
const RMS_BINS: (usize, f64, f64) = (256, 0.0, 64.0);
/// ADC less pedestal within +-128 counts, one count per bin.
const SIGNAL_BINS: (usize, f64, f64) = (256, -128.0, 128.0);

/// Fills `set` from one trigger record; returns why a fragment could not be read, for each
/// that could not (the record's other fragments are still read).
pub fn fill_record(set: &mut HistSet, record: &TriggerRecord) -> Vec<String> {
    set.events += 1;
    let mut problems = Vec::new();
    for bytes in &record.fragments {
        let fragment = match Fragment::parse(bytes) {
            Ok(f) => f,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        let link = fragment.header.element_id.id;
        match adc_matrix(fragment.header.fragment_type, fragment.payload) {
            None => {}
            Some(Err(e)) => problems.push(format!("link {link}: {e}")),
            Some(Ok(m)) if m.samples > 0 => {
                let stats: Vec<(f64, f64)> = m
                    .values
                    .chunks_exact(m.samples)
                    .map(pedestal_and_rms)
                    .collect();
                fill_link(set, link, &stats, &m.values, m.samples);
            }
            Some(Ok(_)) => {}
        }
    }
    problems
}

/// One link's histograms from its channels' (pedestal, RMS) and ADCs.
fn fill_link(set: &mut HistSet, link: u32, stats: &[(f64, f64)], values: &[u16], samples: usize) {
    let mut rms: Vec<f64> = stats.iter().map(|s| s.1).collect();
    rms.sort_by(f64::total_cmp);
    let median_rms = rms[rms.len() / 2];
    let channels = stats.len();
    // Made on first use, each named after its quantity and the link.
    let mut make = |what: &str, title: &str, axis: Axis, counts: bool| {
        let name = format!("{what}_link_{link:04}");
        set.entry(&name, || {
            let h =
                Hist1::new(&name, &format!("link {link}: {title}"), axis).expect("a valid axis");
            if counts { h.of_counts() } else { h }
        });
        name
    };
    let adc = |(bins, lo, hi): (usize, f64, f64)| Axis::new("ADC", "ADC", bins, lo, hi);
    let by_channel = Axis::new("channel of the link", "", channels, 0.0, channels as f64);
    let pedestal = make("pedestal", "channel pedestals", adc(PEDESTAL_BINS), false);
    let noise = make("noise_rms", "channel noise (RMS)", adc(RMS_BINS), false);
    let signal = make(
        "adc_minus_pedestal",
        "ADC less pedestal",
        adc(SIGNAL_BINS),
        false,
    );
    let dead = make(
        "dead_channels",
        "channels dead or stuck (no noise)",
        by_channel.clone(),
        true,
    );
    let noisy = make("noisy_channels", "noisy channels", by_channel, true);
    for (c, &(p, r)) in stats.iter().enumerate() {
        set.histograms
            .get_mut(&pedestal)
            .expect("made above")
            .fill(p);
        set.histograms.get_mut(&noise).expect("made above").fill(r);
        if r < DEAD_RMS {
            set.histograms
                .get_mut(&dead)
                .expect("made above")
                .fill(c as f64);
        } else if r > NOISY_FACTOR * median_rms {
            set.histograms
                .get_mut(&noisy)
                .expect("made above")
                .fill(c as f64);
        }
        let adc = set.histograms.get_mut(&signal).expect("made above");
        for &v in &values[c * samples..(c + 1) * samples] {
            adc.fill(f64::from(v) - p);
        }
    }
}

/// A channel's median ADC and its samples' RMS about their mean.
fn pedestal_and_rms(samples: &[u16]) -> (f64, f64) {
    let mut sorted = samples.to_vec();
    let middle = sorted.len() / 2;
    let median = f64::from(*sorted.select_nth_unstable(middle).1);
    let n = samples.len() as f64;
    let mean = samples.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let variance = samples
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / n;
    (median, variance.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pedestal_is_the_median_and_rms_the_spread() {
        let (p, r) = pedestal_and_rms(&[900, 900, 902, 898, 900, 5000]);
        assert_eq!(p, 900.0);
        assert!(r > 1000.0, "one outlier widens the RMS, not the median");
        assert_eq!(pedestal_and_rms(&[700; 64]), (700.0, 0.0));
    }
}
