//! The per-link hit finder: pedestal tracking, threshold and TP assembly over every channel
//! of a link, frame after frame, with a scalar reference and an AVX2 path that agree bit for bit.
//! Each group of 16 channels runs its plane's algorithm: `threshold` on the finder's own path,
//! the others through `crate::stages`.

use crate::config::{ConfigError, Plane, PlaneAlgorithms, ThresholdConfig};
use crate::hits::{ADC_FULL_SCALE, HitState, TpContext};
use crate::stages::{self, Kernel, StageState};
use swdaq_format::protowib::{self, ProtoWibFrame};
use swdaq_format::wibeth::{self, WibEthFrame};
use swdaq_format::{FormatError, FrameFormat, TriggerPrimitive};

/// Which code runs the per-sample work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Implementation {
    Scalar,
    Avx2,
}

impl Implementation {
    /// AVX2 where the CPU has it, the scalar reference otherwise.
    pub fn best() -> Self {
        if crate::avx2::available() {
            Self::Avx2
        } else {
            Self::Scalar
        }
    }
}

/// Channels are processed in SIMD groups of this many 16-bit lanes.
pub const LANES: usize = 16;

pub struct HitFinder {
    pub(crate) config: ThresholdConfig,
    pub(crate) ctx: TpContext,
    implementation: Implementation,
    pub(crate) ticks_per_sample: u64,
    /// The ADC's highest code: a sample there saturates and flags its hit.
    pub(crate) adc_full_scale: u16,
    pub(crate) channel_ids: Vec<u32>,
    pub(crate) pedestal: Vec<i16>,
    pub(crate) accumulator: Vec<i16>,
    /// -1 for masked channels (no processing, no TPs), 0 otherwise.
    pub(crate) masked: Vec<i16>,
    pub(crate) hits: HitState,
    /// Per group of 16 channels: the stages after the pedestal (`None`: `threshold`).
    pub(crate) kernels: Vec<Option<Kernel>>,
    /// The longest filter delay of any group, in ticks: how much earlier than "now" a hit
    /// opening on the next sample may be dated.
    max_delay_ticks: u64,
    /// Per group: the state of those stages (unused by `threshold` groups).
    pub(crate) stages: Vec<StageState>,
    /// Working rows of the AVX2 stages, allocated once (empty when no group needs them).
    pub(crate) scratch: Vec<stages::ScratchRow>,
    initialised: bool,
    row: Vec<u16>,
    /// ProtoDUNE WIB frames waiting to be processed as one block (one sample each).
    staged: ProtoWibBlock,
    /// Every sample before this time (ticks) has been processed.
    processed_until: u64,
}

/// Consecutive ProtoDUNE WIB frames gathered so the per-group state stays in registers for
/// up to [`PROTOWIB_BLOCK`] samples, as it does for a WIBEth frame's 64.
#[derive(Default)]
struct ProtoWibBlock {
    bytes: Vec<u8>,
    first_timestamp: u64,
}

impl ProtoWibBlock {
    fn frames(&self) -> usize {
        self.bytes.len() / protowib::FRAME_SIZE
    }
}

/// ProtoDUNE WIB frames per block: 32 samples, 16 us of data. The block (15 KB) stays in
/// L1 while each group of 16 channels walks it; 64 frames measured slower for `threshold`.
pub const PROTOWIB_BLOCK: usize = 32;
const _: () = assert!(PROTOWIB_BLOCK <= stages::MAX_SAMPLES);

impl HitFinder {
    /// A `threshold` finder for channels with offline ids `channel_ids` (a multiple of 16 of them).
    pub fn new(
        config: ThresholdConfig,
        channel_ids: Vec<u32>,
        ticks_per_sample: u64,
        detector_id: u8,
        implementation: Implementation,
    ) -> Result<Self, ConfigError> {
        let planes = vec![Plane::Collection; channel_ids.len()];
        Self::with_algorithms(
            config,
            &PlaneAlgorithms::default(),
            &planes,
            channel_ids,
            ticks_per_sample,
            detector_id,
            implementation,
        )
    }

    /// A finder running each channel's plane's algorithm, `planes[c]` being the plane of
    /// `channel_ids[c]`. The 16 channels of each SIMD group must share a plane. `config`
    /// holds the pedestal and TP settings of every algorithm (and `threshold`'s threshold).
    pub fn with_algorithms(
        config: ThresholdConfig,
        algorithms: &PlaneAlgorithms,
        planes: &[Plane],
        channel_ids: Vec<u32>,
        ticks_per_sample: u64,
        detector_id: u8,
        implementation: Implementation,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        algorithms.validate()?;
        if channel_ids.is_empty() || !channel_ids.len().is_multiple_of(LANES) {
            return Err(ConfigError {
                field: "channels",
                reason: "need a positive multiple of 16 channels",
            });
        }
        if planes.len() != channel_ids.len() {
            return Err(ConfigError {
                field: "planes",
                reason: "need one plane per channel",
            });
        }
        if planes
            .chunks_exact(LANES)
            .any(|group| group.iter().any(|&p| p != group[0]))
        {
            return Err(ConfigError {
                field: "planes",
                reason: "each group of 16 channels must be on one plane",
            });
        }
        let kernels: Vec<Option<Kernel>> = planes
            .chunks_exact(LANES)
            .map(|group| Kernel::new(&algorithms.of(group[0])))
            .collect();
        let stages = kernels
            .iter()
            .map(|k| k.as_ref().map(StageState::new).unwrap_or_default())
            .collect();
        if implementation == Implementation::Avx2 && !crate::avx2::available() {
            return Err(ConfigError {
                field: "implementation",
                reason: "this CPU has no AVX2",
            });
        }
        let n = channel_ids.len();
        let start = config.initial_pedestal.unwrap_or(0);
        Ok(Self {
            ctx: TpContext {
                detector_id,
                max_hit_samples: config.max_hit_samples,
            },
            implementation,
            ticks_per_sample,
            adc_full_scale: ADC_FULL_SCALE,
            pedestal: vec![start; n],
            accumulator: vec![0; n],
            masked: vec![0; n],
            hits: HitState::new(n),
            scratch: if kernels.iter().any(Option::is_some) {
                vec![stages::ScratchRow::default(); stages::SCRATCH_ROWS]
            } else {
                Vec::new()
            },
            max_delay_ticks: kernels
                .iter()
                .flatten()
                .map(Kernel::delay_samples)
                .max()
                .unwrap_or(0)
                * ticks_per_sample,
            kernels,
            stages,
            initialised: config.initial_pedestal.is_some(),
            row: vec![0; n],
            staged: ProtoWibBlock::default(),
            processed_until: 0,
            channel_ids,
            config,
        })
    }

    /// For ADCs of `bits` bits (14 by default, as WIBEth; ProtoDUNE WIB is 12): a sample at
    /// the highest code flags its hit as saturated.
    pub fn with_adc_bits(mut self, bits: u32) -> Result<Self, ConfigError> {
        if !(1..=14).contains(&bits) {
            return Err(ConfigError {
                field: "adc_bits",
                reason: "must be 1 to 14",
            });
        }
        self.adc_full_scale = (1 << bits) - 1;
        Ok(self)
    }

    pub fn channels(&self) -> usize {
        self.channel_ids.len()
    }

    pub fn implementation(&self) -> Implementation {
        self.implementation
    }

    /// Masks (or unmasks) channel index `c`: a masked channel is not processed and makes no
    /// TPs; an open hit on it is closed now.
    pub fn set_masked(&mut self, c: usize, masked: bool, out: &mut Vec<TriggerPrimitive>) {
        if masked && self.hits.open[c] != 0 {
            self.hits.close(c, self.channel_ids[c], self.ctx, out);
        }
        self.masked[c] = if masked { -1 } else { 0 };
    }

    /// Index of the channel with offline id `channel`.
    pub fn index_of(&self, channel: u32) -> Option<usize> {
        self.channel_ids.iter().position(|&c| c == channel)
    }

    pub fn channel_ids(&self) -> &[u32] {
        &self.channel_ids
    }

    pub fn is_masked(&self, c: usize) -> bool {
        self.masked[c] != 0
    }

    pub fn pedestal(&self, c: usize) -> i16 {
        self.pedestal[c]
    }

    /// Start time of the earliest hit still open: TPs starting before it are final.
    pub fn earliest_open_hit(&self) -> Option<u64> {
        self.hits.earliest_open()
    }

    /// TPs starting before this are final, once every sample before `now` (ticks) has been
    /// processed: the earliest open hit's start, or `now` less the longest FIR delay (a hit
    /// opening on the next sample is dated that much earlier).
    pub fn release_horizon(&self, now: u64) -> u64 {
        let settled = now.saturating_sub(self.max_delay_ticks);
        self.earliest_open_hit().map_or(settled, |t| t.min(settled))
    }

    fn initialise_from(&mut self, row: &[u16]) {
        if !self.initialised {
            for (p, &x) in self.pedestal.iter_mut().zip(row) {
                *p = x as i16;
            }
            self.initialised = true;
        }
    }

    /// Processes one frame of `format` (see [`Self::process_wibeth`],
    /// [`Self::process_protowib`]); returns the time (ticks) up to which samples have been
    /// processed ([`Self::processed_until`]).
    pub fn process_frame(
        &mut self,
        format: FrameFormat,
        bytes: &[u8],
        out: &mut Vec<TriggerPrimitive>,
    ) -> Result<u64, FormatError> {
        match format {
            FrameFormat::WibEth => self.process_wibeth(&WibEthFrame::parse(bytes)?, out),
            FrameFormat::ProtoWib => self.process_protowib(&ProtoWibFrame::parse(bytes)?, out),
            // Hit finding in a detector's own payload is its plugin's (`process_fragments`).
            FrameFormat::Board(_) => {
                return Err(FormatError::NotReadHere {
                    what: "a board frame's payload, by swdaq's hit finding",
                });
            }
        }
        Ok(self.processed_until)
    }

    /// Every sample before this time (ticks) has been processed: the "now" to give
    /// [`Self::release_horizon`].
    pub fn processed_until(&self) -> u64 {
        self.processed_until
    }

    /// Processes one WIBEth frame (its 64 channels must be this finder's), appending the
    /// TPs of hits that closed to `out` (in closing order; see `TpOrderer`).
    pub fn process_wibeth(&mut self, frame: &WibEthFrame<'_>, out: &mut Vec<TriggerPrimitive>) {
        assert_eq!(
            self.channels(),
            wibeth::NUM_CHANNELS,
            "a WIBEth finder has 64 channels"
        );
        let t0 = frame.timestamp();
        if !self.initialised {
            let mut first = [0u16; wibeth::NUM_CHANNELS];
            wibeth::unpack_row(frame.row(0), &mut first);
            self.initialise_from(&first);
        }
        match self.implementation {
            Implementation::Scalar => {
                let mut row = [0u16; wibeth::NUM_CHANNELS];
                for s in 0..wibeth::SAMPLES_PER_FRAME {
                    wibeth::unpack_row(frame.row(s), &mut row);
                    self.process_row_scalar(t0 + s as u64 * self.ticks_per_sample, &row, out);
                }
            }
            Implementation::Avx2 => {
                // SAFETY: an Avx2 finder is only built when the CPU has AVX2 (checked in `new`).
                unsafe { crate::avx2::process_wibeth(self, frame, t0, self.ticks_per_sample, out) }
            }
        }
        self.processed_until = t0 + wibeth::SAMPLES_PER_FRAME as u64 * self.ticks_per_sample;
    }

    /// Takes one ProtoDUNE WIB frame (one sample of its 256 channels, which must be this
    /// finder's; 12-bit ADCs, see [`Self::with_adc_bits`]). Frames are gathered into blocks of
    /// up to [`PROTOWIB_BLOCK`] consecutive samples (a copy of 464 bytes each) and processed
    /// when the block is full or the next frame does not follow on, so TPs lag by at most a
    /// block (16 us; [`Self::processed_until`] says how far processing got, [`Self::flush`]
    /// processes the rest). TPs of hits that closed go to `out`.
    pub fn process_protowib(&mut self, frame: &ProtoWibFrame<'_>, out: &mut Vec<TriggerPrimitive>) {
        assert_eq!(
            self.channels(),
            protowib::NUM_CHANNELS,
            "a ProtoDUNE WIB finder has 256 channels"
        );
        assert_eq!(
            self.adc_full_scale,
            protowib::ADC_MAX,
            "a ProtoDUNE WIB finder is built `with_adc_bits(12)`"
        );
        let timestamp = frame.timestamp();
        let staged = self.staged.frames() as u64;
        if staged > 0 && timestamp != self.staged.first_timestamp + staged * self.ticks_per_sample {
            self.process_staged(out);
        }
        if self.staged.bytes.is_empty() {
            self.staged.first_timestamp = timestamp;
            // Allocates for the first block only; the capacity stays (`process_staged` clears).
            self.staged
                .bytes
                .reserve_exact(PROTOWIB_BLOCK * protowib::FRAME_SIZE);
        }
        self.staged.bytes.extend_from_slice(frame.as_bytes());
        if self.staged.frames() == PROTOWIB_BLOCK {
            self.process_staged(out);
        }
    }

    /// Processes the staged ProtoDUNE WIB block, 16 channels at a time with the 12-bit
    /// unpacking fused in on AVX2.
    fn process_staged(&mut self, out: &mut Vec<TriggerPrimitive>) {
        let mut block = std::mem::take(&mut self.staged.bytes);
        let t0 = self.staged.first_timestamp;
        let frames = || {
            block
                .chunks_exact(protowib::FRAME_SIZE)
                .map(|bytes| ProtoWibFrame::parse(bytes).expect("staged frames are whole"))
        };
        let mut row = [0u16; protowib::NUM_CHANNELS];
        if !self.initialised
            && let Some(first) = frames().next()
        {
            first.unpack(&mut row);
            self.initialise_from(&row);
        }
        match self.implementation {
            Implementation::Scalar => {
                for (s, frame) in frames().enumerate() {
                    frame.unpack(&mut row);
                    self.process_row_scalar(t0 + s as u64 * self.ticks_per_sample, &row, out);
                }
            }
            // SAFETY: an Avx2 finder is only built when the CPU has AVX2 (checked in `new`).
            Implementation::Avx2 => unsafe {
                crate::avx2::process_protowib_block(self, &block, t0, out)
            },
        }
        let samples = (block.len() / protowib::FRAME_SIZE) as u64;
        self.processed_until = t0 + samples * self.ticks_per_sample;
        block.clear();
        self.staged.bytes = block;
    }

    /// Processes samples given as rows of `channels()` unpacked ADC values, the first row at
    /// `first_timestamp` (any format).
    pub fn process_rows(
        &mut self,
        first_timestamp: u64,
        rows: &[u16],
        out: &mut Vec<TriggerPrimitive>,
    ) {
        let n = self.channels();
        assert_eq!(rows.len() % n, 0, "rows must hold whole samples");
        if let Some(first) = rows.get(..n) {
            self.initialise_from(first);
        }
        for (s, row) in rows.chunks_exact(n).enumerate() {
            let ts = first_timestamp + s as u64 * self.ticks_per_sample;
            match self.implementation {
                Implementation::Scalar => self.process_row_scalar(ts, row, out),
                // SAFETY: an Avx2 finder is only built when the CPU has AVX2 (checked in `new`).
                Implementation::Avx2 => unsafe { crate::avx2::process_row(self, ts, row, out) },
            }
            self.processed_until = ts + self.ticks_per_sample;
        }
    }

    /// Processes any staged frames, then closes every open hit (end of run): their TPs are
    /// emitted as they stand.
    pub fn flush(&mut self, out: &mut Vec<TriggerPrimitive>) {
        if !self.staged.bytes.is_empty() {
            self.process_staged(out);
        }
        for c in 0..self.channels() {
            if self.hits.open[c] != 0 {
                self.hits.close(c, self.channel_ids[c], self.ctx, out);
            }
        }
    }

    /// The reference: frugal-streaming pedestal (updated before it is subtracted), then a
    /// strict threshold or the group's stages, one channel at a time.
    pub(crate) fn process_row_scalar(
        &mut self,
        timestamp: u64,
        row: &[u16],
        out: &mut Vec<TriggerPrimitive>,
    ) {
        self.row.copy_from_slice(row);
        let (limit, threshold) = (self.config.accumulator_limit, self.config.threshold);
        for c in 0..self.channels() {
            if self.masked[c] != 0 {
                continue;
            }
            let x = self.row[c] as i16;
            let pedestal = stages::scalar::frugal_step(
                &mut self.pedestal[c],
                &mut self.accumulator[c],
                x,
                1,
                1,
                limit,
            );
            let signal = x - pedestal;
            let rail = self.row[c] >= self.adc_full_scale;
            let (g, lane) = (c / LANES, c % LANES);
            let (value, over, saturated, ts) = match &self.kernels[g] {
                None => (signal, signal > threshold, rail, timestamp),
                Some(kernel) => {
                    let o = stages::scalar::step(kernel, &mut self.stages[g], lane, signal, limit);
                    let delay = kernel.delay_samples() * self.ticks_per_sample;
                    (
                        o.value,
                        o.over,
                        rail || o.clipped,
                        timestamp.saturating_sub(delay),
                    )
                }
            };
            self.hits.update(
                c,
                value,
                over,
                saturated,
                ts,
                self.channel_ids[c],
                self.ctx,
                out,
            );
        }
    }
}
