//! WIBEth frame: DUNE's TPC Ethernet readout format (`fddetdataformats::WIBEthFrame`),
//! 7200 bytes carrying 64 time samples of 64 channels of 14-bit ADC values.
//!
//! | bytes     | content |
//! |-----------|---------|
//! | 0..16     | [`DaqEthHeader`] (timestamp of the first sample, 12-bit sequence id) |
//! | 16..24    | WIB header word, bits LSB first: colddata_timestamp_0 [0,15), pad [15], colddata_timestamp_1 [16,31), pad [31], cd [32], crc_err [33,35), link_valid [35,37), lol [37], wib_sync [38], femb_sync [39,41), pulser [41], calibration [42], ready [43], context [44,52), version [52,56), channel [56,64) |
//! | 24..32    | extra_data (u64) |
//! | 32..7200  | 64 rows (one per time sample) of 14 little-endian u64 words; channel `c` occupies bits [14c, 14c+14) of the row's 896 bits |
//!
//! One sample is 32 ticks of the 62.5 MHz clock (~1.95 MHz sampling), one frame 2048 ticks:
//! ~30.5 kHz of frames, ~220 MB/s per link.

use crate::daq_eth::{DAQ_ETH_HEADER_SIZE, DaqEthHeader};
use crate::error::{FormatError, exact};
use crate::le::{bits, get_u64, put_u64, with_bits};

pub const FRAME_SIZE: usize = 7200;
pub const NUM_CHANNELS: usize = 64;
pub const SAMPLES_PER_FRAME: usize = 64;
pub const BITS_PER_ADC: u32 = 14;
pub const ADC_MAX: u16 = (1 << BITS_PER_ADC) - 1;
pub const TICKS_PER_SAMPLE: u64 = 32;
pub const TICKS_PER_FRAME: u64 = TICKS_PER_SAMPLE * SAMPLES_PER_FRAME as u64;
pub const WORDS_PER_SAMPLE: usize = NUM_CHANNELS * BITS_PER_ADC as usize / 64;
pub const ROW_BYTES: usize = WORDS_PER_SAMPLE * 8;
pub const WIB_HEADER_OFFSET: usize = DAQ_ETH_HEADER_SIZE;
pub const ADC_OFFSET: usize = WIB_HEADER_OFFSET + 16;
const _: () = assert!(ADC_OFFSET + SAMPLES_PER_FRAME * ROW_BYTES == FRAME_SIZE);

/// All ADC values of one frame, indexed `[sample][channel]`.
pub type WibEthAdcs = [[u16; NUM_CHANNELS]; SAMPLES_PER_FRAME];

/// The WIB header of a WIBEth frame. `crc_err`, `link_valid`, `lol`, the sync bits and
/// `ready` are the status a readout checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WibEthHeader {
    pub colddata_timestamp_0: u16,
    pub colddata_timestamp_1: u16,
    pub cd: u8,
    pub crc_err: u8,
    pub link_valid: u8,
    pub lol: u8,
    pub wib_sync: u8,
    pub femb_sync: u8,
    pub pulser: u8,
    pub calibration: u8,
    pub ready: u8,
    pub context: u8,
    pub version: u8,
    pub channel: u8,
    pub extra_data: u64,
}

const CD_TS0: (u32, u32) = (0, 15);
const CD_TS1: (u32, u32) = (16, 15);
const CD: (u32, u32) = (32, 1);
const CRC_ERR: (u32, u32) = (33, 2);
const LINK_VALID: (u32, u32) = (35, 2);
const LOL: (u32, u32) = (37, 1);
const WIB_SYNC: (u32, u32) = (38, 1);
const FEMB_SYNC: (u32, u32) = (39, 2);
const PULSER: (u32, u32) = (41, 1);
const CALIBRATION: (u32, u32) = (42, 1);
const READY: (u32, u32) = (43, 1);
const CONTEXT: (u32, u32) = (44, 8);
const VERSION: (u32, u32) = (52, 4);
const CHANNEL: (u32, u32) = (56, 8);

impl WibEthHeader {
    /// A header whose status says "all good": both links valid, in sync, ready.
    pub fn healthy() -> Self {
        Self {
            link_valid: 0b11,
            wib_sync: 1,
            femb_sync: 0b11,
            ready: 1,
            ..Self::default()
        }
    }

    /// True when the status bits report a problem: a CRC error, loss of lock, a link
    /// not valid, or a front end out of sync.
    pub fn has_error(&self) -> bool {
        self.crc_err != 0
            || self.lol != 0
            || self.link_valid != 0b11
            || self.femb_sync != 0b11
            || self.wib_sync != 1
    }

    fn read(b: &[u8]) -> Self {
        let w = get_u64(b, WIB_HEADER_OFFSET);
        let f = |(s, n): (u32, u32)| bits(w, s, n);
        Self {
            colddata_timestamp_0: f(CD_TS0) as u16,
            colddata_timestamp_1: f(CD_TS1) as u16,
            cd: f(CD) as u8,
            crc_err: f(CRC_ERR) as u8,
            link_valid: f(LINK_VALID) as u8,
            lol: f(LOL) as u8,
            wib_sync: f(WIB_SYNC) as u8,
            femb_sync: f(FEMB_SYNC) as u8,
            pulser: f(PULSER) as u8,
            calibration: f(CALIBRATION) as u8,
            ready: f(READY) as u8,
            context: f(CONTEXT) as u8,
            version: f(VERSION) as u8,
            channel: f(CHANNEL) as u8,
            extra_data: get_u64(b, WIB_HEADER_OFFSET + 8),
        }
    }

    fn write(&self, b: &mut [u8]) {
        let mut w = 0u64;
        for ((s, n), v) in [
            (CD_TS0, self.colddata_timestamp_0 as u64),
            (CD_TS1, self.colddata_timestamp_1 as u64),
            (CD, self.cd as u64),
            (CRC_ERR, self.crc_err as u64),
            (LINK_VALID, self.link_valid as u64),
            (LOL, self.lol as u64),
            (WIB_SYNC, self.wib_sync as u64),
            (FEMB_SYNC, self.femb_sync as u64),
            (PULSER, self.pulser as u64),
            (CALIBRATION, self.calibration as u64),
            (READY, self.ready as u64),
            (CONTEXT, self.context as u64),
            (VERSION, self.version as u64),
            (CHANNEL, self.channel as u64),
        ] {
            w = with_bits(w, s, n, v);
        }
        put_u64(b, WIB_HEADER_OFFSET, w);
        put_u64(b, WIB_HEADER_OFFSET + 8, self.extra_data);
    }
}

/// A bounds-checked, zero-copy view of one WIBEth frame.
#[derive(Clone, Copy)]
pub struct WibEthFrame<'a> {
    bytes: &'a [u8; FRAME_SIZE],
}

impl<'a> WibEthFrame<'a> {
    /// Views `bytes` as a frame; it must be exactly [`FRAME_SIZE`] long.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        Ok(Self {
            bytes: exact("WIBEth frame", bytes)?,
        })
    }

    pub fn as_bytes(&self) -> &'a [u8; FRAME_SIZE] {
        self.bytes
    }

    pub fn daq_header(&self) -> DaqEthHeader {
        DaqEthHeader::read(self.bytes)
    }

    pub fn wib_header(&self) -> WibEthHeader {
        WibEthHeader::read(self.bytes)
    }

    /// Timestamp of the first sample, in 62.5 MHz ticks.
    pub fn timestamp(&self) -> u64 {
        get_u64(self.bytes, 8)
    }

    /// The 896-bit packed row of one time sample.
    pub fn row(&self, sample: usize) -> &'a [u8; ROW_BYTES] {
        let at = ADC_OFFSET + sample * ROW_BYTES;
        self.bytes[at..at + ROW_BYTES]
            .try_into()
            .expect("row within frame")
    }

    /// ADC value of `channel` at time `sample`. Panics if either index is out of range.
    pub fn adc(&self, sample: usize, channel: usize) -> u16 {
        assert!(sample < SAMPLES_PER_FRAME && channel < NUM_CHANNELS);
        adc_in_row(self.row(sample), channel)
    }

    /// Unpacks every ADC value (the scalar reference; hit finding fuses its own unpacking).
    pub fn unpack(&self, out: &mut WibEthAdcs) {
        for (sample, row_out) in out.iter_mut().enumerate() {
            unpack_row(self.row(sample), row_out);
        }
    }
}

fn adc_in_row(row: &[u8; ROW_BYTES], channel: usize) -> u16 {
    let bit = channel * BITS_PER_ADC as usize;
    let (word, shift) = (bit / 64, (bit % 64) as u32);
    let low = get_u64(row, word * 8) >> shift;
    let value = if shift + BITS_PER_ADC > 64 {
        low | (get_u64(row, word * 8 + 8) << (64 - shift))
    } else {
        low
    };
    (value & ADC_MAX as u64) as u16
}

/// Unpacks one 14-bit row into 64 values. The row's words are loaded once and the constant
/// channel loop unrolls into fixed shifts (several times faster than [`adc_in_row`] per channel).
pub fn unpack_row(row: &[u8; ROW_BYTES], out: &mut [u16; NUM_CHANNELS]) {
    let words: [u64; WORDS_PER_SAMPLE] = std::array::from_fn(|i| get_u64(row, i * 8));
    for (channel, v) in out.iter_mut().enumerate() {
        let bit = channel * BITS_PER_ADC as usize;
        let (word, shift) = (bit / 64, (bit % 64) as u32);
        let mut value = words[word] >> shift;
        if shift + BITS_PER_ADC > 64 {
            value |= words[word + 1] << (64 - shift);
        }
        *v = (value & ADC_MAX as u64) as u16;
    }
}

/// Packs 64 values (masked to 14 bits) into one row.
pub fn pack_row(values: &[u16; NUM_CHANNELS], row: &mut [u8]) {
    let mut words = [0u64; WORDS_PER_SAMPLE];
    for (channel, &v) in values.iter().enumerate() {
        let v = (v & ADC_MAX) as u64;
        let bit = channel * BITS_PER_ADC as usize;
        let (word, shift) = (bit / 64, (bit % 64) as u32);
        words[word] |= v << shift;
        if shift + BITS_PER_ADC > 64 {
            words[word + 1] |= v >> (64 - shift);
        }
    }
    for (i, w) in words.iter().enumerate() {
        put_u64(row, i * 8, *w);
    }
}

/// Writes a complete frame into `out` (which must be [`FRAME_SIZE`] long).
pub fn encode(daq: &DaqEthHeader, wib: &WibEthHeader, adcs: &WibEthAdcs, out: &mut [u8]) {
    assert_eq!(out.len(), FRAME_SIZE, "WIBEth frame buffer size");
    daq.write(out);
    wib.write(out);
    for (sample, values) in adcs.iter().enumerate() {
        let at = ADC_OFFSET + sample * ROW_BYTES;
        pack_row(values, &mut out[at..at + ROW_BYTES]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_daq() -> impl Strategy<Value = DaqEthHeader> {
        (
            any::<[u8; 5]>(),
            any::<u16>(),
            any::<u16>(),
            any::<u16>(),
            any::<u64>(),
        )
            .prop_map(
                |(b, crate_id, seq_id, block_length, timestamp)| DaqEthHeader {
                    version: b[0] & 0x3f,
                    det_id: b[1] & 0x3f,
                    crate_id: crate_id & 0x3ff,
                    slot_id: b[2] & 0xf,
                    stream_id: b[3],
                    seq_id: seq_id & 0xfff,
                    block_length: block_length & 0xfff,
                    timestamp,
                },
            )
    }

    fn arb_wib() -> impl Strategy<Value = WibEthHeader> {
        (any::<[u8; 12]>(), any::<u16>(), any::<u16>(), any::<u64>()).prop_map(
            |(b, t0, t1, extra_data)| WibEthHeader {
                colddata_timestamp_0: t0 & 0x7fff,
                colddata_timestamp_1: t1 & 0x7fff,
                cd: b[0] & 1,
                crc_err: b[1] & 3,
                link_valid: b[2] & 3,
                lol: b[3] & 1,
                wib_sync: b[4] & 1,
                femb_sync: b[5] & 3,
                pulser: b[6] & 1,
                calibration: b[7] & 1,
                ready: b[8] & 1,
                context: b[9],
                version: b[10] & 0xf,
                channel: b[11],
                extra_data,
            },
        )
    }

    fn arb_adcs() -> impl Strategy<Value = Box<WibEthAdcs>> {
        proptest::collection::vec(0..=ADC_MAX, NUM_CHANNELS * SAMPLES_PER_FRAME).prop_map(|v| {
            let mut adcs = Box::new([[0u16; NUM_CHANNELS]; SAMPLES_PER_FRAME]);
            for (i, x) in v.into_iter().enumerate() {
                adcs[i / NUM_CHANNELS][i % NUM_CHANNELS] = x;
            }
            adcs
        })
    }

    proptest! {
        #[test]
        fn encode_then_decode_round_trips(daq in arb_daq(), wib in arb_wib(), adcs in arb_adcs()) {
            let mut buf = vec![0u8; FRAME_SIZE];
            encode(&daq, &wib, &adcs, &mut buf);
            let frame = WibEthFrame::parse(&buf).unwrap();
            prop_assert_eq!(frame.daq_header(), daq);
            prop_assert_eq!(frame.wib_header(), wib);
            prop_assert_eq!(frame.timestamp(), daq.timestamp);
            let mut out = Box::new([[0u16; NUM_CHANNELS]; SAMPLES_PER_FRAME]);
            frame.unpack(&mut out);
            prop_assert_eq!(&out, &adcs);
            prop_assert_eq!(frame.adc(63, 63), adcs[63][63]);
        }

        #[test]
        fn unpack_row_agrees_with_adc_on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), FRAME_SIZE)) {
            let frame = WibEthFrame::parse(&bytes).unwrap();
            let mut row = [0u16; NUM_CHANNELS];
            for sample in [0, 17, SAMPLES_PER_FRAME - 1] {
                unpack_row(frame.row(sample), &mut row);
                for (channel, &v) in row.iter().enumerate() {
                    prop_assert_eq!(v, frame.adc(sample, channel));
                }
            }
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..8000)) {
            if let Ok(frame) = WibEthFrame::parse(&bytes) {
                let _ = (frame.daq_header(), frame.wib_header());
                let mut out = Box::new([[0u16; NUM_CHANNELS]; SAMPLES_PER_FRAME]);
                frame.unpack(&mut out);
            }
        }
    }

    #[test]
    fn channel_bit_positions_match_the_layout() {
        // Channel 4 starts at bit 56 and straddles words 0 and 1.
        let mut adcs = Box::new([[0u16; NUM_CHANNELS]; SAMPLES_PER_FRAME]);
        adcs[0][4] = ADC_MAX;
        let mut buf = vec![0u8; FRAME_SIZE];
        encode(
            &DaqEthHeader::default(),
            &WibEthHeader::default(),
            &adcs,
            &mut buf,
        );
        let w0 = get_u64(&buf, ADC_OFFSET);
        let w1 = get_u64(&buf, ADC_OFFSET + 8);
        assert_eq!(w0, 0xff << 56);
        assert_eq!(w1, 0x3f);
    }

    #[test]
    fn wrong_sizes_are_typed_errors() {
        assert!(matches!(
            WibEthFrame::parse(&[0u8; 100]),
            Err(FormatError::Truncated {
                need: FRAME_SIZE,
                got: 100,
                ..
            })
        ));
        assert!(matches!(
            WibEthFrame::parse(&[0u8; FRAME_SIZE + 1]),
            Err(FormatError::Inconsistent { .. })
        ));
    }

    #[test]
    fn restamp_changes_only_timestamp_and_sequence() {
        let daq = DaqEthHeader {
            version: 1,
            det_id: 3,
            crate_id: 7,
            seq_id: 5,
            timestamp: 99,
            ..Default::default()
        };
        let mut buf = vec![0u8; FRAME_SIZE];
        encode(
            &daq,
            &WibEthHeader::healthy(),
            &[[7; NUM_CHANNELS]; SAMPLES_PER_FRAME],
            &mut buf,
        );
        DaqEthHeader::restamp(&mut buf, 1 << 40, 0xfff);
        let got = WibEthFrame::parse(&buf).unwrap().daq_header();
        assert_eq!(
            got,
            DaqEthHeader {
                seq_id: 0xfff,
                timestamp: 1 << 40,
                ..daq
            }
        );
    }
}
