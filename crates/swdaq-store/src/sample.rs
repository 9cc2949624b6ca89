//! A synthetic trigger record with known content, for tests, examples and demonstrations: a
//! few WIBEth links with pedestals and noise, a muon-like track (a diagonal line of pulses
//! across channels, bipolar on induction channels, unipolar on collection channels) and a TP
//! fragment with one trigger primitive per collection-channel pulse.

use swdaq_format::daq_eth::DaqEthHeader;
use swdaq_format::wibeth::{
    self, NUM_CHANNELS, SAMPLES_PER_FRAME, TICKS_PER_FRAME, TICKS_PER_SAMPLE, WibEthAdcs,
    WibEthHeader,
};
use swdaq_format::{
    DETECTOR_ID_HD_TPC, Fragment, FragmentHeader, FragmentType, SourceId, Subsystem,
    TriggerPrimitive, TriggerRecord, TriggerRecordHeader,
};

/// Links (source ids `0..LINKS`), 64 channels each: offline channel `64 link + c`.
pub const LINKS: u32 = 4;
/// Frames per link: 1280 samples, 655 us.
pub const FRAMES: usize = 20;
/// Channels below this are induction channels, the rest collection.
pub const FIRST_COLLECTION_CHANNEL: u32 = 128;
const PEDESTAL_INDUCTION: f64 = 2350.0;
const PEDESTAL_COLLECTION: f64 = 900.0;

/// The record and, per link, the ADC values its frames carry.
pub struct SampleRecord {
    pub record: TriggerRecord,
    pub adcs: Vec<Vec<WibEthAdcs>>,
}

/// Plane of an offline channel of the sample, for the display's panels.
pub fn plane_of(channel: u32) -> String {
    if channel < FIRST_COLLECTION_CHANNEL {
        "U (induction)".into()
    } else {
        "X (collection)".into()
    }
}

/// Sample at which the track crosses `channel`.
fn track_sample(channel: u32) -> f64 {
    300.0 + 3.0 * f64::from(channel)
}

/// Deterministic noise (xorshift64), roughly Gaussian with sigma ~3 ADC.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f64 {
        let mut sum = 0.0;
        for _ in 0..4 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            sum += (self.0 >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
        }
        sum * 5.2
    }
}

fn adc(channel: u32, sample: usize, noise: &mut Noise) -> u16 {
    let d = sample as f64 - track_sample(channel);
    let gauss = (-0.5 * (d / 2.5).powi(2)).exp();
    let value = if channel < FIRST_COLLECTION_CHANNEL {
        PEDESTAL_INDUCTION - 60.0 * d / 2.5 * gauss * 1.65
    } else {
        PEDESTAL_COLLECTION + 120.0 * gauss
    };
    (value + noise.next())
        .round()
        .clamp(0.0, f64::from(wibeth::ADC_MAX)) as u16
}

fn fragment(
    trigger: u64,
    timestamp: u64,
    window: (u64, u64),
    kind: FragmentType,
    source: SourceId,
    payload: &[u8],
) -> Vec<u8> {
    let header = FragmentHeader {
        size: 0,
        trigger_number: trigger,
        trigger_timestamp: timestamp,
        window_begin: window.0,
        window_end: window.1,
        run_number: 1,
        error_bits: 0,
        fragment_type: kind,
        sequence_number: 0,
        detector_id: DETECTOR_ID_HD_TPC,
        element_id: source,
    };
    Fragment::assemble(header, [payload])
}

/// The sample record for trigger `trigger`, its trigger timestamp in the middle of the window.
pub fn track_record(trigger: u64) -> SampleRecord {
    let timestamp = 1_000_000 * TICKS_PER_FRAME + trigger * 100 * TICKS_PER_FRAME;
    let t0 = timestamp - (FRAMES as u64 / 2) * TICKS_PER_FRAME;
    let window = (t0, t0 + FRAMES as u64 * TICKS_PER_FRAME);
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15 ^ trigger);
    let mut fragments = Vec::new();
    let mut adcs = Vec::new();
    for link in 0..LINKS {
        let mut link_adcs = vec![[[0u16; NUM_CHANNELS]; SAMPLES_PER_FRAME]; FRAMES];
        let mut payload = vec![0u8; FRAMES * wibeth::FRAME_SIZE];
        for (f, (out, frame)) in link_adcs
            .iter_mut()
            .zip(payload.chunks_exact_mut(wibeth::FRAME_SIZE))
            .enumerate()
        {
            for (s, row) in out.iter_mut().enumerate() {
                for (c, v) in row.iter_mut().enumerate() {
                    let channel = link * NUM_CHANNELS as u32 + c as u32;
                    *v = adc(channel, f * SAMPLES_PER_FRAME + s, &mut noise);
                }
            }
            let daq = DaqEthHeader {
                det_id: DETECTOR_ID_HD_TPC as u8,
                stream_id: link as u8,
                seq_id: f as u16,
                timestamp: t0 + f as u64 * TICKS_PER_FRAME,
                ..Default::default()
            };
            wibeth::encode(&daq, &WibEthHeader::healthy(), out, frame);
        }
        fragments.push(fragment(
            trigger,
            timestamp,
            window,
            FragmentType::WIBETH,
            SourceId::readout(link),
            &payload,
        ));
        adcs.push(link_adcs);
    }
    let tps: Vec<u8> = (FIRST_COLLECTION_CHANNEL..LINKS * NUM_CHANNELS as u32)
        .flat_map(|channel| {
            let start = track_sample(channel) as u64 - 4;
            TriggerPrimitive {
                detector_id: DETECTOR_ID_HD_TPC as u8,
                channel,
                samples_over_threshold: 9,
                time_start: t0 + start * TICKS_PER_SAMPLE,
                samples_to_peak: 4,
                adc_integral: 750,
                adc_peak: 120,
                ..Default::default()
            }
            .to_bytes()
        })
        .collect();
    fragments.push(fragment(
        trigger,
        timestamp,
        window,
        FragmentType::TRIGGER_PRIMITIVE,
        SourceId::trigger(0),
        &tps,
    ));
    SampleRecord {
        record: TriggerRecord {
            header: TriggerRecordHeader {
                trigger_number: trigger,
                trigger_timestamp: timestamp,
                run_number: 1,
                status_bits: 0,
                trigger_type: 1,
                sequence_number: 0,
                max_sequence_number: 0,
                element_id: SourceId::new(Subsystem::TR_BUILDER, 0),
                components: Vec::new(),
            },
            fragments,
        },
        adcs,
    }
}

/// Overwrites the payload of record group `group`'s first WIBEth fragment in the file at
/// `path` with garbage, its fragment header kept: a fragment that parses but holds nonsense,
/// for tests of the readers and the display. Returns the fragment's dataset name.
pub fn garble_wibeth_payload(path: &std::path::Path, group: &str) -> hdf5::Result<String> {
    let file = hdf5::File::open_rw(path)?;
    let raw = file.group(&format!("{group}/{}", crate::layout::RAW_DATA_GROUP))?;
    let name = raw
        .member_names()?
        .into_iter()
        .find(|n| n.ends_with("WIBEth"))
        .ok_or_else(|| hdf5::Error::from(format!("{group} has no WIBEth fragment")))?;
    let dataset = raw.dataset(&name)?;
    let mut bytes = dataset.read_raw::<i8>()?;
    bytes[swdaq_format::fragment::FRAGMENT_HEADER_SIZE..].fill(0x5a);
    dataset.write_raw(&bytes)?;
    Ok(name)
}
