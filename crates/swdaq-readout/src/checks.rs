//! Continuity and integrity checks on every frame: size, header error bits, timestamp step
//! and 12-bit sequence id with wrap-around. Each finding is counted and, where it affects
//! data in a time range, recorded as an interval so fragments covering it carry an error flag.

use swdaq_format::frame_format::{FrameFormat, FrameHeader};

/// Per-frame findings stored in the latency buffer beside the frame.
pub mod frame_flags {
    /// Frames are missing just before this one.
    pub const GAP_BEFORE: u32 = 1 << 0;
    /// The timestamp did not advance by one frame, and not by a whole number of frames.
    pub const TIMESTAMP_JUMP: u32 = 1 << 1;
    /// The sequence id did not follow the previous one.
    pub const SEQUENCE_ERROR: u32 = 1 << 2;
    /// The front end flagged an error in the header.
    pub const HEADER_ERROR: u32 = 1 << 3;

    /// Names of the set bits, for people reading `inspect` output.
    pub fn names(flags: u32) -> Vec<&'static str> {
        [
            (GAP_BEFORE, "gap_before"),
            (TIMESTAMP_JUMP, "timestamp_jump"),
            (SEQUENCE_ERROR, "sequence_error"),
            (HEADER_ERROR, "header_error"),
        ]
        .into_iter()
        .filter(|(mask, _)| flags & mask != 0)
        .map(|(_, name)| name)
        .collect()
    }
}

/// What a check found, counted by kind. One frame can add to several.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckCounts {
    pub frames_ok: u64,
    /// Frames that never arrived, inferred from timestamp (and sequence) steps.
    pub missing_frames: u64,
    pub timestamp_jumps: u64,
    pub sequence_errors: u64,
    pub header_errors: u64,
    /// Frames shorter or longer than the format's size: rejected, not buffered.
    pub bad_size: u64,
}

/// The verdict on one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Keep the frame, with these [`frame_flags`] (0 when all is well).
    Keep {
        header: FrameHeader,
        flags: u32,
        missing_before: u64,
    },
    /// Not a frame of this format: drop it.
    Reject,
}

impl Verdict {
    /// What the checks found, named ([`frame_flags::names`], or `bad_size` for a rejected
    /// frame); empty for a good frame.
    pub fn findings(&self) -> Vec<&'static str> {
        match self {
            Self::Keep { flags, .. } => frame_flags::names(*flags),
            Self::Reject => vec!["bad_size"],
        }
    }
}

/// A time range `[begin, end)` in ticks whose data is missing or suspect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorInterval {
    pub begin: u64,
    pub end: u64,
    pub flags: u32,
}

/// Checks one link's frames in arrival order.
pub struct ContinuityChecker {
    format: FrameFormat,
    previous: Option<FrameHeader>,
    pub counts: CheckCounts,
}

impl ContinuityChecker {
    pub fn new(format: FrameFormat) -> Self {
        Self {
            format,
            previous: None,
            counts: CheckCounts::default(),
        }
    }

    /// Checks `frame` and returns the verdict plus the interval it marks bad, if any.
    pub fn check(&mut self, frame: &[u8]) -> (Verdict, Option<ErrorInterval>) {
        let Some(header) = self.format.header(frame) else {
            self.counts.bad_size += 1;
            return (Verdict::Reject, None);
        };
        let step = self.format.ticks_per_frame();
        let mut flags = 0;
        let mut missing = 0;
        let mut interval = None;
        if let Some(prev) = self.previous {
            let expected = prev.timestamp.wrapping_add(step);
            if header.timestamp != expected {
                let delta = header.timestamp.wrapping_sub(prev.timestamp);
                if header.timestamp > prev.timestamp && delta % step == 0 {
                    missing = delta / step - 1;
                    flags |= frame_flags::GAP_BEFORE;
                    interval = Some((expected, header.timestamp));
                } else {
                    flags |= frame_flags::TIMESTAMP_JUMP;
                    interval = Some((
                        prev.timestamp.min(header.timestamp),
                        prev.timestamp.max(header.timestamp) + step,
                    ));
                }
            }
            if let (Some(p), Some(s)) = (prev.seq_id, header.seq_id) {
                let modulus = self.format.seq_modulus() as u64;
                let seq_step = (s as u64 + modulus - p as u64) % modulus;
                if seq_step != (missing + 1) % modulus {
                    flags |= frame_flags::SEQUENCE_ERROR;
                }
            }
        }
        if header.header_error {
            flags |= frame_flags::HEADER_ERROR;
            let (b, e) = interval.unwrap_or((header.timestamp, header.timestamp));
            interval = Some((b.min(header.timestamp), e.max(header.timestamp + step)));
        }
        self.count(flags, missing);
        self.previous = Some(header);
        let interval = interval.map(|(begin, end)| ErrorInterval { begin, end, flags });
        (
            Verdict::Keep {
                header,
                flags,
                missing_before: missing,
            },
            interval,
        )
    }

    fn count(&mut self, flags: u32, missing: u64) {
        let c = &mut self.counts;
        c.missing_frames += missing;
        c.timestamp_jumps += (flags & frame_flags::TIMESTAMP_JUMP != 0) as u64;
        c.sequence_errors += (flags & frame_flags::SEQUENCE_ERROR != 0) as u64;
        c.header_errors += (flags & frame_flags::HEADER_ERROR != 0) as u64;
        c.frames_ok += (flags == 0) as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::daq_eth::DaqEthHeader;
    use swdaq_format::wibeth::{self, WibEthHeader};

    fn frame(ts: u64, seq: u16, healthy: bool) -> Vec<u8> {
        let mut b = vec![0u8; wibeth::FRAME_SIZE];
        let daq = DaqEthHeader {
            timestamp: ts,
            seq_id: seq & 0xfff,
            ..Default::default()
        };
        let wib = if healthy {
            WibEthHeader::healthy()
        } else {
            WibEthHeader {
                crc_err: 1,
                ..WibEthHeader::healthy()
            }
        };
        wibeth::encode(&daq, &wib, &[[0; 64]; 64], &mut b);
        b
    }

    fn run(frames: &[Vec<u8>]) -> (ContinuityChecker, Vec<Option<ErrorInterval>>) {
        let mut c = ContinuityChecker::new(FrameFormat::WibEth);
        let intervals = frames.iter().map(|f| c.check(f).1).collect();
        (c, intervals)
    }

    #[test]
    fn clean_stream_across_sequence_wrap() {
        let frames: Vec<_> = (0..5000u64)
            .map(|i| frame(1000 + i * 2048, (4090 + i) as u16, true))
            .collect();
        let (c, intervals) = run(&frames);
        assert_eq!(
            c.counts,
            CheckCounts {
                frames_ok: 5000,
                ..Default::default()
            }
        );
        assert!(intervals.iter().all(Option::is_none));
    }

    #[test]
    fn missing_frames_are_counted_once_each_with_the_gap_interval() {
        // Frames 3 and 4 never arrive; the sequence id advances as the hardware's would.
        let frames: Vec<_> = [0u64, 1, 2, 5, 6]
            .iter()
            .map(|&i| frame(i * 2048, i as u16, true))
            .collect();
        let (c, intervals) = run(&frames);
        assert_eq!(c.counts.missing_frames, 2);
        assert_eq!(c.counts.sequence_errors, 0);
        assert_eq!(
            intervals[3],
            Some(ErrorInterval {
                begin: 3 * 2048,
                end: 5 * 2048,
                flags: frame_flags::GAP_BEFORE
            })
        );
    }

    #[test]
    fn timestamp_jump_sequence_gap_and_header_error() {
        let frames = vec![
            frame(0, 0, true),
            frame(2048 + 7, 1, true), // not a whole number of frames: a jump
            frame(2 * 2048 + 7, 5, true), // sequence gap with continuous time
            frame(3 * 2048 + 7, 6, false), // header error
            frame(4 * 2048 + 7, 7, true),
        ];
        let (c, intervals) = run(&frames);
        assert_eq!(c.counts.timestamp_jumps, 1);
        assert_eq!(c.counts.sequence_errors, 1);
        assert_eq!(c.counts.header_errors, 1);
        assert_eq!(c.counts.missing_frames, 0);
        assert_eq!(c.counts.frames_ok, 2);
        assert_eq!(intervals[1].unwrap().flags, frame_flags::TIMESTAMP_JUMP);
        assert!(
            intervals[2].is_none(),
            "a sequence error alone does not mark data bad"
        );
        assert_eq!(
            intervals[3],
            Some(ErrorInterval {
                begin: 3 * 2048 + 7,
                end: 4 * 2048 + 7,
                flags: frame_flags::HEADER_ERROR
            })
        );
    }

    #[test]
    fn backwards_timestamp_is_a_jump() {
        let frames = vec![frame(10 * 2048, 0, true), frame(2048, 1, true)];
        let (c, intervals) = run(&frames);
        assert_eq!(c.counts.timestamp_jumps, 1);
        assert_eq!(intervals[1].unwrap().begin, 2048);
    }

    #[test]
    fn wrong_size_is_rejected_and_counted() {
        let mut c = ContinuityChecker::new(FrameFormat::WibEth);
        let good = frame(0, 0, true);
        assert_eq!(c.check(&good[..100]).0, Verdict::Reject);
        assert_eq!(
            c.check(&[good.clone(), vec![0]].concat()).0,
            Verdict::Reject
        );
        assert!(matches!(c.check(&good).0, Verdict::Keep { flags: 0, .. }));
        assert_eq!(c.counts.bad_size, 2);
    }

    #[test]
    fn findings_are_named() {
        let frames = [frame(0, 0, true), frame(5 * 2048, 9, false)];
        let mut c = ContinuityChecker::new(FrameFormat::WibEth);
        assert!(c.check(&frames[0]).0.findings().is_empty());
        assert_eq!(
            c.check(&frames[1]).0.findings(),
            ["gap_before", "sequence_error", "header_error"]
        );
        assert_eq!(c.check(&[0; 3]).0.findings(), ["bad_size"]);
    }
}
