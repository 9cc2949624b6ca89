//! Every fault the emulator injects is detected and counted exactly: readout counters are
//! compared with the emulator's truth, one fault kind at a time.

use swdaq_format::FrameFormat;
use swdaq_format::SourceId;
use swdaq_readout::link::{Ingest, LinkShared};
use swdaq_readout::source::{FrameSource, Poll};
use swdaq_sim::{Detector, FaultKind, FaultRates, LinkSimulator, SimConfig};

/// Feeds the emulator's frames straight to the readout; missing frames are simply not sent.
struct Emulated {
    sim: LinkSimulator,
    left: u64,
}

impl FrameSource for Emulated {
    fn next_frame(&mut self, slot: &mut [u8]) -> std::io::Result<Poll> {
        loop {
            if self.left == 0 {
                return Ok(Poll::End);
            }
            self.left -= 1;
            let info = self.sim.next_frame(slot);
            if info.len > 0 {
                return Ok(Poll::Frame(info.len));
            }
        }
    }
}

#[test]
fn readout_counters_equal_the_emulator_truth() {
    const FRAMES: u64 = 4000;
    for kind in [
        FaultKind::Missing,
        FaultKind::TimestampJump,
        FaultKind::SequenceGap,
        FaultKind::HeaderError,
        FaultKind::Corrupt,
        FaultKind::Truncated,
    ] {
        let config = SimConfig {
            faults: FaultRates::only(kind, 0.01),
            ..SimConfig::white_noise_only(4.0)
        };
        let sim = Detector::new(config)
            .unwrap()
            .link(0, FrameFormat::WibEth, 1 << 20);
        let link = LinkShared::new(SourceId::readout(0), FrameFormat::WibEth, 0.2).unwrap();
        let mut ingest = Ingest::new(&link, Emulated { sim, left: FRAMES }, ()).unwrap();
        ingest.run(|| true).unwrap();
        let (counts, frames_out) = (ingest.checker.counts, ingest.counts.frames);
        let truth = ingest.into_parts().0.sim.drain_faults();
        let n = truth.len() as u64;
        assert!(n > 10, "{kind:?}: only {n} faults injected");
        let last_is = |k| {
            truth
                .last()
                .is_some_and(|f| f.kind == k && f.frame_index == FRAMES - 1)
        };
        let expected_missing = match kind {
            FaultKind::Missing => n - last_is(FaultKind::Missing) as u64,
            FaultKind::Truncated => n - last_is(FaultKind::Truncated) as u64,
            _ => 0,
        };
        assert_eq!(
            counts.missing_frames, expected_missing,
            "{kind:?} {counts:?}"
        );
        assert_eq!(
            counts.bad_size,
            if kind == FaultKind::Truncated { n } else { 0 },
            "{kind:?}"
        );
        assert_eq!(
            counts.timestamp_jumps,
            if kind == FaultKind::TimestampJump {
                n
            } else {
                0
            },
            "{kind:?}"
        );
        assert_eq!(
            counts.sequence_errors,
            if kind == FaultKind::SequenceGap { n } else { 0 },
            "{kind:?}"
        );
        assert_eq!(
            counts.header_errors,
            if kind == FaultKind::HeaderError { n } else { 0 },
            "{kind:?}"
        );
        // Corrupted payload bytes cannot be seen without a checksum, which WIBEth frames lack:
        // such frames are kept and counted as good.
        let lost = matches!(kind, FaultKind::Missing | FaultKind::Truncated) as u64 * n;
        assert_eq!(frames_out, FRAMES - lost, "{kind:?}");
    }
}
