//! CMS-style FED emulator: a set of front-end drivers that each send one fragment per
//! level-1 accept ([`swdaq_format::fed`]), at a trigger rate (fixed spacing or Poisson),
//! with per-FED size distributions (normal, truncated to whole words and at least the
//! header and trailer) and injected faults recorded as truth.
//!
//! Every emulator built from the same [`FedSimConfig`] sees the same sequence of level-1
//! accepts (trigger times and bunch crossings come from `(seed, event)` alone), so the FEDs
//! of several readout units, each emulated where it is read, agree on every event.

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use swdaq_format::fed::{
    FED_L1_ID_MASK, FED_MIN_SIZE, FED_SOURCE_ID_MAX, FED_WORD, FedHeader, FedTrailer,
    encode_fed_fragment,
};

/// LHC bunch crossings per orbit: bunch-crossing ids run 0..3564.
const BX_PER_ORBIT: u64 = 3564;

/// One FED: its id and fragment size distribution (bytes, header and trailer included).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FedSpec {
    pub id: u16,
    pub mean_bytes: u32,
    pub spread_bytes: u32,
}

/// Fault rates (probability per fragment, at most one fault per fragment) and stops.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FedFaultRates {
    pub missing: f64,
    pub wrong_l1_id: f64,
    pub bad_crc: f64,
    pub bad_length: f64,
    /// FEDs that stop sending for good: (FED id, first event they no longer send).
    pub stops: Vec<(u16, u64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FedSimConfig {
    pub feds: Vec<FedSpec>,
    /// Level-1 accept rate in Hz.
    pub trigger_rate_hz: f64,
    /// Poisson arrivals (exponential spacing) rather than fixed spacing.
    pub poisson: bool,
    pub seed: u64,
    #[serde(default)]
    pub faults: FedFaultRates,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FedConfigError {
    #[error("no FEDs configured")]
    NoFeds,
    #[error("FED id {0} does not fit in 12 bits")]
    IdTooLarge(u16),
    #[error("FED id {0} appears twice")]
    DuplicateId(u16),
    #[error("trigger rate must be positive and finite, got {0}")]
    BadRate(f64),
    #[error("fault rate {name} = {value} is not a probability (or the rates sum above 1)")]
    BadFaultRate { name: &'static str, value: f64 },
}

impl FedSimConfig {
    /// `count` FEDs numbered from `first_id`, all with the same size distribution.
    pub fn uniform(first_id: u16, count: u16, mean_bytes: u32, spread_bytes: u32) -> Vec<FedSpec> {
        (0..count)
            .map(|i| FedSpec {
                id: first_id + i,
                mean_bytes,
                spread_bytes,
            })
            .collect()
    }

    pub fn validate(&self) -> Result<(), FedConfigError> {
        if self.feds.is_empty() {
            return Err(FedConfigError::NoFeds);
        }
        let mut seen = std::collections::HashSet::new();
        for f in &self.feds {
            if f.id > FED_SOURCE_ID_MAX {
                return Err(FedConfigError::IdTooLarge(f.id));
            }
            if !seen.insert(f.id) {
                return Err(FedConfigError::DuplicateId(f.id));
            }
        }
        if !(self.trigger_rate_hz.is_finite() && self.trigger_rate_hz > 0.0) {
            return Err(FedConfigError::BadRate(self.trigger_rate_hz));
        }
        let r = &self.faults;
        let rates = [
            ("missing", r.missing),
            ("wrong_l1_id", r.wrong_l1_id),
            ("bad_crc", r.bad_crc),
            ("bad_length", r.bad_length),
            ("sum", r.missing + r.wrong_l1_id + r.bad_crc + r.bad_length),
        ];
        for (name, value) in rates {
            if !(0.0..=1.0).contains(&value) {
                return Err(FedConfigError::BadFaultRate { name, value });
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FedFaultKind {
    Missing,
    WrongL1Id,
    BadCrc,
    BadLength,
    /// The FED has stopped: no fragment from this event on.
    Stopped,
}

/// One injected fault, as truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FedFault {
    pub event: u64,
    pub fed: u16,
    pub kind: FedFaultKind,
}

/// The fragments of one level-1 accept from this emulator's FEDs.
#[derive(Debug, Default)]
pub struct FedEvent {
    /// Event number, from 1; the FED header carries its low 24 bits.
    pub event: u64,
    /// Trigger time in nanoseconds since the start of the run.
    pub trigger_ns: u64,
    pub bx_id: u16,
    /// Fragments back to back.
    pub bytes: Vec<u8>,
    /// (FED id, range in `bytes`) of each fragment sent, in configuration order.
    pub fragments: Vec<(u16, Range<usize>)>,
}

impl FedEvent {
    pub fn fragment(&self, index: usize) -> (u16, &[u8]) {
        let (id, range) = &self.fragments[index];
        (*id, &self.bytes[range.clone()])
    }
}

/// Random bytes payloads are cut from: drawing every word anew costs more than the checks
/// the emulator feeds (measured by `swdaq bench evb`), and content does not matter to them.
const PAYLOAD_POOL_BYTES: usize = 1 << 20;

pub struct FedEmulator {
    config: FedSimConfig,
    event: u64,
    trigger_ns: f64,
    timing_rng: Xoshiro256PlusPlus,
    payload_pool: Vec<u8>,
}

impl FedEmulator {
    pub fn new(config: FedSimConfig) -> Result<Self, FedConfigError> {
        config.validate()?;
        let mut pool_rng = Xoshiro256PlusPlus::seed_from_u64(mix(config.seed, 0, u64::MAX - 1));
        let payload_pool = (0..PAYLOAD_POOL_BYTES / FED_WORD)
            .flat_map(|_| pool_rng.random::<u64>().to_le_bytes())
            .collect();
        Ok(Self {
            timing_rng: Xoshiro256PlusPlus::seed_from_u64(config.seed),
            config,
            event: 0,
            trigger_ns: 0.0,
            payload_pool,
        })
    }

    pub fn config(&self) -> &FedSimConfig {
        &self.config
    }

    /// Produces the next level-1 accept into `out` (reusing its buffers) and appends the
    /// faults injected into it to `truth`.
    pub fn next_event(&mut self, out: &mut FedEvent, truth: &mut Vec<FedFault>) {
        self.event += 1;
        let event = self.event;
        let spacing_ns = 1e9 / self.config.trigger_rate_hz;
        if self.config.poisson {
            let exp = Exp::new(1.0).expect("unit rate");
            self.trigger_ns += spacing_ns * exp.sample(&mut self.timing_rng);
        } else {
            self.trigger_ns += spacing_ns;
        }
        out.event = event;
        out.trigger_ns = self.trigger_ns as u64;
        out.bx_id = (mix(self.config.seed, event, u64::MAX) % BX_PER_ORBIT) as u16;
        out.bytes.clear();
        out.fragments.clear();
        for spec in &self.config.feds {
            let mut rng =
                Xoshiro256PlusPlus::seed_from_u64(mix(self.config.seed, event, spec.id as u64));
            let fault = self.fault_for(spec.id, event, &mut rng);
            if let Some(kind) = fault {
                truth.push(FedFault {
                    event,
                    fed: spec.id,
                    kind,
                });
            }
            if matches!(fault, Some(FedFaultKind::Missing | FedFaultKind::Stopped)) {
                continue;
            }
            let payload = payload_slice(
                &self.payload_pool,
                fragment_size(spec, &mut rng) - FED_MIN_SIZE,
                &mut rng,
            );
            let mut l1_id = (event as u32) & FED_L1_ID_MASK;
            if fault == Some(FedFaultKind::WrongL1Id) {
                l1_id = (l1_id + 1 + rng.random_range(0..FED_L1_ID_MASK - 1)) & FED_L1_ID_MASK;
            }
            let header = FedHeader {
                event_type: 1,
                l1_id,
                bx_id: out.bx_id,
                source_id: spec.id,
                version: 0,
                more_headers: false,
            };
            let range =
                encode_fed_fragment(&mut out.bytes, &header, &FedTrailer::default(), &payload);
            let trailer_at = range.end - FED_WORD;
            match fault {
                // The CRC field's low byte is bits 16..24 of the trailer word.
                Some(FedFaultKind::BadCrc) => out.bytes[trailer_at + 2] ^= 0x5A,
                // Bits 32..56 hold the length in words; one word more than was sent.
                Some(FedFaultKind::BadLength) => {
                    let mut word = u64::from_le_bytes(
                        out.bytes[trailer_at..range.end]
                            .try_into()
                            .expect("8 bytes"),
                    );
                    word += 1 << 32;
                    out.bytes[trailer_at..range.end].copy_from_slice(&word.to_le_bytes());
                }
                _ => {}
            }
            out.fragments.push((spec.id, range));
        }
    }

    fn fault_for(
        &self,
        fed: u16,
        event: u64,
        rng: &mut Xoshiro256PlusPlus,
    ) -> Option<FedFaultKind> {
        let f = &self.config.faults;
        if f.stops.iter().any(|&(id, from)| id == fed && event >= from) {
            return Some(FedFaultKind::Stopped);
        }
        let draw: f64 = rng.random();
        let mut edge = 0.0;
        for (rate, kind) in [
            (f.missing, FedFaultKind::Missing),
            (f.wrong_l1_id, FedFaultKind::WrongL1Id),
            (f.bad_crc, FedFaultKind::BadCrc),
            (f.bad_length, FedFaultKind::BadLength),
        ] {
            edge += rate;
            if draw < edge {
                return Some(kind);
            }
        }
        None
    }
}

/// A distinct, well-mixed seed per (seed, event, stream).
fn mix(seed: u64, event: u64, stream: u64) -> u64 {
    seed ^ event.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03).rotate_left(29)
}

/// A fragment size in bytes: normal(mean, spread), whole words, at least header + trailer.
fn fragment_size(spec: &FedSpec, rng: &mut Xoshiro256PlusPlus) -> usize {
    let normal: f64 = StandardNormal.sample(rng);
    let bytes = spec.mean_bytes as f64 + spec.spread_bytes as f64 * normal;
    let words = (bytes / FED_WORD as f64)
        .round()
        .max((FED_MIN_SIZE / FED_WORD) as f64);
    words as usize * FED_WORD
}

/// `bytes` (whole words) of the pool from a random word; the pool repeats for sizes beyond it.
fn payload_slice<'a>(
    pool: &'a [u8],
    bytes: usize,
    rng: &mut Xoshiro256PlusPlus,
) -> std::borrow::Cow<'a, [u8]> {
    if bytes > pool.len() {
        return pool
            .iter()
            .cycle()
            .take(bytes)
            .copied()
            .collect::<Vec<u8>>()
            .into();
    }
    let start = rng.random_range(0..=(pool.len() - bytes) / FED_WORD) * FED_WORD;
    pool[start..start + bytes].into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::fed::FedFragment;

    fn config(faults: FedFaultRates) -> FedSimConfig {
        FedSimConfig {
            feds: FedSimConfig::uniform(100, 4, 1024, 128),
            trigger_rate_hz: 100_000.0,
            poisson: true,
            seed: 7,
            faults,
        }
    }

    #[test]
    fn clean_fragments_are_valid_and_numbered() {
        let mut emu = FedEmulator::new(config(FedFaultRates::default())).unwrap();
        let (mut ev, mut truth) = (FedEvent::default(), Vec::new());
        let mut bytes = 0;
        for n in 1..=500u64 {
            emu.next_event(&mut ev, &mut truth);
            assert_eq!(ev.event, n);
            assert_eq!(ev.fragments.len(), 4);
            for i in 0..4 {
                let (id, raw) = ev.fragment(i);
                let f = FedFragment::parse(raw).unwrap();
                assert!(f.crc_ok());
                assert_eq!((f.header.source_id, f.header.l1_id), (id, n as u32));
                bytes += raw.len();
            }
        }
        assert!(truth.is_empty());
        let mean = bytes as f64 / 2000.0;
        assert!((mean - 1024.0).abs() < 20.0, "mean fragment size {mean}");
        // 500 Poisson spacings of 10 us: the total is within a few sigma of 5 ms.
        assert!(
            (ev.trigger_ns as f64 - 5e6).abs() < 5e6 * 0.2,
            "{}",
            ev.trigger_ns
        );
    }

    #[test]
    fn same_config_same_accepts_across_emulators_of_different_feds() {
        let mut a = FedEmulator::new(config(FedFaultRates::default())).unwrap();
        let mut cfg_b = config(FedFaultRates::default());
        cfg_b.feds = FedSimConfig::uniform(200, 2, 512, 0);
        let mut b = FedEmulator::new(cfg_b).unwrap();
        let (mut ea, mut eb, mut t) = (FedEvent::default(), FedEvent::default(), Vec::new());
        for _ in 0..100 {
            a.next_event(&mut ea, &mut t);
            b.next_event(&mut eb, &mut t);
            assert_eq!(
                (ea.event, ea.trigger_ns, ea.bx_id),
                (eb.event, eb.trigger_ns, eb.bx_id)
            );
        }
    }

    #[test]
    fn each_injected_fault_shows_as_described() {
        let faults = FedFaultRates {
            missing: 0.05,
            wrong_l1_id: 0.05,
            bad_crc: 0.05,
            bad_length: 0.05,
            stops: vec![(103, 300)],
        };
        let mut emu = FedEmulator::new(config(faults)).unwrap();
        let (mut ev, mut truth) = (FedEvent::default(), Vec::new());
        let mut seen = std::collections::HashMap::new();
        for _ in 0..400 {
            let before = truth.len();
            emu.next_event(&mut ev, &mut truth);
            for fault in &truth[before..] {
                *seen.entry(fault.kind).or_insert(0) += 1;
                let sent = ev.fragments.iter().position(|(id, _)| *id == fault.fed);
                let raw = sent.map(|i| ev.fragment(i).1);
                match fault.kind {
                    FedFaultKind::Missing | FedFaultKind::Stopped => assert!(raw.is_none()),
                    FedFaultKind::BadLength => assert!(FedFragment::parse(raw.unwrap()).is_err()),
                    FedFaultKind::BadCrc => {
                        assert!(!FedFragment::parse(raw.unwrap()).unwrap().crc_ok())
                    }
                    FedFaultKind::WrongL1Id => {
                        let f = FedFragment::parse(raw.unwrap()).unwrap();
                        assert!(f.crc_ok());
                        assert_ne!(f.header.l1_id, ev.event as u32);
                    }
                }
            }
        }
        assert_eq!(seen[&FedFaultKind::Stopped], 101);
        for kind in [
            FedFaultKind::Missing,
            FedFaultKind::WrongL1Id,
            FedFaultKind::BadCrc,
            FedFaultKind::BadLength,
        ] {
            assert!(seen[&kind] > 20, "{kind:?}: {seen:?}");
        }
    }

    #[test]
    fn bad_configs_are_rejected() {
        let mut c = config(FedFaultRates::default());
        c.feds.push(c.feds[0]);
        assert_eq!(
            FedEmulator::new(c).err(),
            Some(FedConfigError::DuplicateId(100))
        );
        let mut c = config(FedFaultRates {
            missing: 0.7,
            bad_crc: 0.7,
            ..Default::default()
        });
        assert!(matches!(
            c.validate(),
            Err(FedConfigError::BadFaultRate { name: "sum", .. })
        ));
        c.faults = FedFaultRates::default();
        c.trigger_rate_hz = 0.0;
        assert!(matches!(c.validate(), Err(FedConfigError::BadRate(_))));
    }
}
