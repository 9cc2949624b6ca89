//! Ground truth written beside emulated data: every injected pulse and every injected fault,
//! as CSV files a physicist can load with pandas.
//!
//! `truth_pulses.csv` columns: link, channel (in the link), offline_channel, plane (U/V/X),
//! start_tick and peak_tick (62.5 MHz ticks for WIBEth, 50 MHz for ProtoDUNE WIB), charge
//! (sum over samples of the noiseless pulse, absolute value for bipolar pulses, ADC x samples),
//! peak_adc (noiseless peak amplitude; for bipolar pulses the positive lobe), kind (track/blip).
//!
//! `truth_faults.csv` columns: link, frame_index (counting frames the front end produced,
//! emitted or not), timestamp (of the affected frame), kind, detail (jump in ticks, sequence
//! skip, bytes kept or flipped).

use crate::channel_map::Plane;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PulseKind {
    Track,
    Blip,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TruePulse {
    pub link: u32,
    pub channel: u32,
    pub offline_channel: u32,
    #[serde(with = "plane_letter")]
    pub plane: Plane,
    pub start_tick: u64,
    pub peak_tick: u64,
    pub charge: f64,
    pub peak_adc: f64,
    pub kind: PulseKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    Missing,
    TimestampJump,
    SequenceGap,
    HeaderError,
    Corrupt,
    Truncated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InjectedFault {
    pub link: u32,
    pub frame_index: u64,
    pub timestamp: u64,
    pub kind: FaultKind,
    pub detail: u64,
}

mod plane_letter {
    use crate::channel_map::Plane;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &Plane, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match p {
            Plane::U => "U",
            Plane::V => "V",
            Plane::X => "X",
        })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Plane, D::Error> {
        match String::deserialize(d)?.as_str() {
            "U" => Ok(Plane::U),
            "V" => Ok(Plane::V),
            "X" => Ok(Plane::X),
            other => Err(serde::de::Error::custom(format!("unknown plane {other:?}"))),
        }
    }
}

/// Truth records with a fixed CSV header, so an empty file still says what it would hold.
pub trait CsvRecord: Serialize {
    const COLUMNS: &'static [&'static str];
}

impl CsvRecord for TruePulse {
    const COLUMNS: &'static [&'static str] = &[
        "link",
        "channel",
        "offline_channel",
        "plane",
        "start_tick",
        "peak_tick",
        "charge",
        "peak_adc",
        "kind",
    ];
}

impl CsvRecord for InjectedFault {
    const COLUMNS: &'static [&'static str] =
        &["link", "frame_index", "timestamp", "kind", "detail"];
}

/// Writes records as CSV with a header line (also when there are none).
pub fn write_csv<T: CsvRecord>(path: &Path, records: &[T]) -> Result<(), csv::Error> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_path(path)?;
    w.write_record(T::COLUMNS)?;
    for r in records {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(())
}

/// Reads records written by [`write_csv`].
pub fn read_csv<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, csv::Error> {
    csv::Reader::from_path(path)?.deserialize().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truth_round_trips_through_csv() {
        let dir = std::env::temp_dir().join(format!("swdaq-truth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pulses = vec![TruePulse {
            link: 1,
            channel: 2,
            offline_channel: 1602,
            plane: Plane::X,
            start_tick: 100,
            peak_tick: 225,
            charge: 812.5,
            peak_adc: 60.25,
            kind: PulseKind::Track,
        }];
        let faults = vec![InjectedFault {
            link: 1,
            frame_index: 9,
            timestamp: 18432,
            kind: FaultKind::TimestampJump,
            detail: 7,
        }];
        write_csv(&dir.join("p.csv"), &pulses).unwrap();
        write_csv(&dir.join("f.csv"), &faults).unwrap();
        assert_eq!(read_csv::<TruePulse>(&dir.join("p.csv")).unwrap(), pulses);
        assert_eq!(
            read_csv::<InjectedFault>(&dir.join("f.csv")).unwrap(),
            faults
        );
        write_csv::<InjectedFault>(&dir.join("empty.csv"), &[]).unwrap();
        assert_eq!(
            read_csv::<InjectedFault>(&dir.join("empty.csv")).unwrap(),
            vec![]
        );
        let text = std::fs::read_to_string(dir.join("p.csv")).unwrap();
        assert!(text.starts_with(
            "link,channel,offline_channel,plane,start_tick,peak_tick,charge,peak_adc,kind\n"
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
