//! Hit finding as the ingest loop's observer: each frame (WIBEth or ProtoDUNE WIB) is searched
//! for hits where it lies in the latency buffer, on the link's own thread, and the TPs leave
//! time-ordered.

use crate::link::FrameObserver;
use crate::ring::SlotMeta;
use swdaq_format::{FrameFormat, TriggerPrimitive};
use swdaq_tpg::{HitFinder, NoisyChannel, NoisyChannelDetector, NoisyConfig, TpOrderer};

pub struct HitFindingObserver {
    finder: HitFinder,
    format: FrameFormat,
    orderer: TpOrderer,
    closed: Vec<TriggerPrimitive>,
    /// Time-ordered TPs not yet taken by [`Self::take_tps`].
    ready: Vec<TriggerPrimitive>,
    /// Frames the finder could not read (wrong size or format): counted, skipped.
    pub unreadable_frames: u64,
    found: u64,
    /// Every TP starting before this tick has been released to `ready`.
    horizon: u64,
    noisy: Option<NoisyChannelDetector>,
    noisy_found: Vec<NoisyChannel>,
}

impl HitFindingObserver {
    /// Runs `finder` (built for the link's channels and ADC width) on frames of `format`.
    pub fn new(finder: HitFinder, format: FrameFormat) -> Self {
        Self {
            finder,
            format,
            orderer: TpOrderer::default(),
            closed: Vec::new(),
            ready: Vec::new(),
            unreadable_frames: 0,
            found: 0,
            horizon: 0,
            noisy: None,
            noisy_found: Vec::new(),
        }
    }

    /// Watches per-channel TP rates and reports (and, if configured, masks) noisy channels.
    pub fn with_noisy_channel_detection(mut self, config: NoisyConfig) -> Self {
        let watched = (0..self.finder.channels())
            .filter(|&c| !self.finder.is_masked(c))
            .map(|c| self.finder.channel_ids()[c])
            .collect();
        self.noisy = Some(NoisyChannelDetector::new(config, watched));
        self
    }

    /// Noisy channels found so far (masked too when auto-masking is on).
    pub fn noisy_channels(&self) -> &[NoisyChannel] {
        &self.noisy_found
    }

    /// Every TP of this link starting before this tick has been released (to [`Self::take_tps`]).
    pub fn horizon(&self) -> u64 {
        self.horizon
    }

    /// Moves the time-ordered TPs found so far into `out`.
    pub fn take_tps(&mut self, out: &mut Vec<TriggerPrimitive>) {
        out.append(&mut self.ready);
    }

    /// Closes open hits and releases every remaining TP (end of run).
    pub fn finish(&mut self) {
        self.finder.flush(&mut self.closed);
        self.found += self.closed.len() as u64;
        self.orderer.push(self.closed.drain(..));
        self.orderer.drain(&mut self.ready);
        self.horizon = self.finder.processed_until();
    }
}

impl FrameObserver for HitFindingObserver {
    fn tps_found(&self) -> u64 {
        self.found
    }

    fn observe(&mut self, _meta: &SlotMeta, frame: &[u8]) {
        let Ok(now) = self
            .finder
            .process_frame(self.format, frame, &mut self.closed)
        else {
            self.unreadable_frames += 1;
            return;
        };
        if !self.closed.is_empty() {
            self.found += self.closed.len() as u64;
            self.orderer.push(self.closed.drain(..));
        }
        let released_from = self.ready.len();
        // Hits still open, and hits an algorithm with a filter delay may still date earlier.
        self.horizon = self.finder.release_horizon(now);
        if !self.orderer.is_empty() {
            self.orderer.release(self.horizon, &mut self.ready);
        }
        if let Some(detector) = &mut self.noisy {
            for noisy in detector.observe(&self.ready[released_from..], now) {
                if detector.auto_mask()
                    && let Some(c) = self.finder.index_of(noisy.channel)
                {
                    self.finder.set_masked(c, true, &mut self.closed);
                    detector.forget(noisy.channel);
                }
                self.noisy_found.push(noisy);
            }
        }
    }
}
