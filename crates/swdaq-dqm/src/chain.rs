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
                let channels: Vec<Channel> =
                    m.values.chunks_exact(m.samples).map(Channel::of).collect();
                fill_link(set, link, &channels);
            }
            Some(Ok(_)) => {}
        }
    }
    problems
}

/// One link's histograms from its channels' samples.
fn fill_link(set: &mut HistSet, link: u32, channels: &[Channel]) {
    let mut rms: Vec<f64> = channels.iter().map(|c| c.rms).collect();
    rms.sort_by(f64::total_cmp);
    let median_rms = rms[rms.len() / 2];
    let count = channels.len();
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
    let by_channel = Axis::new("channel of the link", "", count, 0.0, count as f64);
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
    for (c, channel) in channels.iter().enumerate() {
        let (p, r) = (channel.pedestal, channel.rms);
        set.histograms
            .get_mut(&pedestal)
            .expect("made above")
            .fill(f64::from(p));
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
        match &channel.samples {
            Samples::ByValue { min, counts } => {
                adc.fill_counted(i64::from(*min) - i64::from(p), counts)
            }
            Samples::AsTaken(values) => {
                for &v in *values {
                    adc.fill(f64::from(v) - f64::from(p));
                }
            }
        }
    }
}

/// One channel of a record: its pedestal (the median ADC: the sample at the middle of their
/// order), its noise (the samples' RMS about their mean) and its samples.
struct Channel<'a> {
    pedestal: u16,
    rms: f64,
    samples: Samples<'a>,
}

/// A channel's samples, counted by value when they span fewer values than there are samples
/// (noise spans tens of counts: the median and the histogram are then walks over tens of
/// counts, not sorts and fills of thousands of samples), as taken otherwise.
enum Samples<'a> {
    ByValue { min: u16, counts: Vec<u32> },
    AsTaken(&'a [u16]),
}

impl<'a> Channel<'a> {
    /// `samples` must not be empty.
    fn of(samples: &'a [u16]) -> Channel<'a> {
        let (mut min, mut max, mut sum, mut sum_of_squares) = (u16::MAX, 0, 0u64, 0u64);
        for &v in samples {
            (min, max) = (min.min(v), max.max(v));
            sum += u64::from(v);
            sum_of_squares += u64::from(v) * u64::from(v);
        }
        let n = samples.len() as u128;
        // n² times the variance, exact in whole numbers.
        let spread = n * u128::from(sum_of_squares) - u128::from(sum) * u128::from(sum);
        let rms = (spread as f64).sqrt() / n as f64;
        let middle = samples.len() / 2;
        let span = usize::from(max - min) + 1;
        if span > samples.len() {
            let mut sorted = samples.to_vec();
            let pedestal = *sorted.select_nth_unstable(middle).1;
            return Channel {
                pedestal,
                rms,
                samples: Samples::AsTaken(samples),
            };
        }
        let mut counts = vec![0u32; span];
        for &v in samples {
            counts[usize::from(v - min)] += 1;
        }
        let mut seen = 0;
        let at_middle = counts
            .iter()
            .position(|&count| {
                seen += count as usize;
                seen > middle
            })
            .expect("the counts add up to every sample");
        Channel {
            pedestal: min + at_middle as u16,
            rms,
            samples: Samples::ByValue { min, counts },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    #[test]
    fn pedestal_is_the_median_and_rms_the_spread() {
        let c = Channel::of(&[900, 900, 902, 898, 900, 5000]);
        assert_eq!(c.pedestal, 900);
        assert!(c.rms > 1000.0, "one outlier widens the RMS, not the median");
        let flat = Channel::of(&[700; 64]);
        assert_eq!((flat.pedestal, flat.rms), (700, 0.0));
        let wide = Channel::of(&[0, u16::MAX]);
        assert_eq!((wide.pedestal, wide.rms), (u16::MAX, 32767.5));
    }

    proptest! {
        /// Counted or as taken, the pedestal is the middle sample in order, the RMS the
        /// two-pass one (to rounding), and the samples are all there.
        #[test]
        fn a_channel_is_its_sorted_middle_its_spread_and_its_samples(
            base in any::<u16>(),
            offsets in proptest::collection::vec(0u16..200, 1..400),
            outliers in proptest::collection::vec(any::<u16>(), 0..4),
        ) {
            let mut samples: Vec<u16> = offsets.iter().map(|&o| base.saturating_add(o)).collect();
            samples.extend(&outliers);
            let c = Channel::of(&samples);
            let mut sorted = samples.clone();
            sorted.sort_unstable();
            prop_assert_eq!(c.pedestal, sorted[samples.len() / 2]);
            let n = samples.len() as f64;
            let mean = samples.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
            let two_pass = (samples.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n).sqrt();
            prop_assert!((c.rms - two_pass).abs() <= 1e-9 * two_pass.max(1.0), "{} vs {}", c.rms, two_pass);
            let mut again = match c.samples {
                Samples::AsTaken(values) => values.to_vec(),
                // Counted in u32: a u16 range from `min` overflows past 65535 once zip asks for
                // the value after the last count.
                Samples::ByValue { min, counts } => (u32::from(min)..).zip(counts)
                    .flat_map(|(v, k)| std::iter::repeat_n(v as u16, k as usize)).collect(),
            };
            again.sort_unstable();
            prop_assert_eq!(again, sorted);
        }
    }
}
