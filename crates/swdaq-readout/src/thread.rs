//! Readout threads: each runs the ingest loops of several links round-robin, named after
//! the links it serves, optionally pinned to a core.
//!
//! NUMA: a link's latency buffer is faulted in by the thread that creates it, and Linux
//! places pages on the node of the core that first touches them. So the application creates
//! each link's buffer on its readout thread after pinning it ([`pin_current_thread`] first),
//! which keeps the buffer on the pinned core's node. On a one-node machine (like the one
//! these tests run on) this changes nothing measurable; the pinning itself is tested.

use crate::link::{FrameObserver, Ingest};
use crate::source::{Batch, FrameSource};
use std::io;
use std::time::Duration;

/// Frames taken from one link before moving to the next, so no link starves the others.
pub const BURST_FRAMES: usize = 64;

/// Pins the calling thread to `core`; an error names the core if the OS refuses.
pub fn pin_current_thread(core: usize) -> io::Result<()> {
    let available = core_affinity::get_core_ids().unwrap_or_default();
    let Some(id) = available.into_iter().find(|c| c.id == core) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("core {core} does not exist or is not available to this process"),
        ));
    };
    if core_affinity::set_for_current(id) {
        Ok(())
    } else {
        Err(io::Error::other(format!("could not pin to core {core}")))
    }
}

/// What happened to a link in the last burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    Running,
    /// The source finished (or failed: the error is in [`run_links`]'s result).
    Ended,
}

/// Runs `links` round-robin until every source ends or `keep_going` says stop. After each
/// burst of a link, `after_burst(index, ingest, state)` runs on this thread (the place to
/// hand the link's TPs on); it is told once when a link ends. When nothing arrived on any
/// link the thread sleeps `idle_sleep` rather than spin: the machine is shared with the rest
/// of the chain. Returns each link's final result.
pub fn run_links<S: FrameSource, O: FrameObserver>(
    links: &mut [Ingest<'_, S, O>],
    keep_going: impl Fn() -> bool,
    idle_sleep: Duration,
    mut after_burst: impl FnMut(usize, &mut Ingest<'_, S, O>, LinkState),
) -> Vec<io::Result<()>> {
    let mut results: Vec<Option<io::Result<()>>> = (0..links.len()).map(|_| None).collect();
    while keep_going() && results.iter().any(Option::is_none) {
        let mut moved = 0;
        for (i, ingest) in links.iter_mut().enumerate() {
            if results[i].is_some() {
                continue;
            }
            let mut ended = None;
            for _ in 0..BURST_FRAMES {
                match ingest.step() {
                    Ok(Batch::Frames(n)) => moved += n,
                    Ok(Batch::Idle) => break,
                    Ok(Batch::End) => {
                        ended = Some(Ok(()));
                        break;
                    }
                    Err(e) => {
                        ended = Some(Err(e));
                        break;
                    }
                }
            }
            if ended.is_some() {
                ingest.publish_metrics();
            }
            let state = if ended.is_some() {
                LinkState::Ended
            } else {
                LinkState::Running
            };
            after_burst(i, ingest, state);
            results[i] = ended;
        }
        if moved == 0 {
            std::thread::sleep(idle_sleep);
        }
    }
    for ingest in links.iter_mut() {
        ingest.publish_metrics();
    }
    results.into_iter().map(|r| r.unwrap_or(Ok(()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::LinkShared;
    use crate::source::Poll;
    use swdaq_format::FrameFormat;
    use swdaq_format::SourceId;
    use swdaq_format::daq_eth::DaqEthHeader;
    use swdaq_format::wibeth::{self, WibEthHeader};

    /// `left` good frames, then the end, or an error if `fails`.
    struct Scripted {
        left: u64,
        next_timestamp: u64,
        fails: bool,
    }

    fn scripted(left: u64, fails: bool) -> Scripted {
        Scripted {
            left,
            next_timestamp: 0,
            fails,
        }
    }

    impl FrameSource for Scripted {
        fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
            if self.left == 0 {
                return if self.fails {
                    Err(io::Error::other("link lost"))
                } else {
                    Ok(Poll::End)
                };
            }
            self.left -= 1;
            let frame = &mut slot[..wibeth::FRAME_SIZE];
            let daq = DaqEthHeader {
                timestamp: self.next_timestamp,
                seq_id: ((self.next_timestamp / 2048) % 4096) as u16,
                ..Default::default()
            };
            wibeth::encode(&daq, &WibEthHeader::healthy(), &[[0; 64]; 64], frame);
            self.next_timestamp += 2048;
            Ok(Poll::Frame(frame.len()))
        }
    }

    fn links(n: u32) -> Vec<LinkShared> {
        (0..n)
            .map(|i| LinkShared::new(SourceId::readout(i), FrameFormat::WibEth, 0.01).unwrap())
            .collect()
    }

    #[test]
    fn every_link_is_run_to_its_end_and_reported_once_as_ended() {
        let shared = links(3);
        let mut ingests: Vec<_> = shared
            .iter()
            .enumerate()
            .map(|(i, s)| Ingest::new(s, scripted(100 * (i as u64 + 1), false), ()).unwrap())
            .collect();
        let mut ended = Vec::new();
        let results = run_links(
            &mut ingests,
            || true,
            Duration::ZERO,
            |i, _, state| {
                if state == LinkState::Ended {
                    ended.push(i);
                }
            },
        );
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(ended, [0, 1, 2], "shortest first, each once");
        let frames: Vec<u64> = ingests.iter().map(|l| l.counts.frames).collect();
        assert_eq!(frames, [100, 200, 300]);
    }

    #[test]
    fn a_failing_link_ends_alone_and_the_others_go_on() {
        let shared = links(2);
        let mut ingests = vec![
            Ingest::new(&shared[0], scripted(10, true), ()).unwrap(),
            Ingest::new(&shared[1], scripted(500, false), ()).unwrap(),
        ];
        let results = run_links(&mut ingests, || true, Duration::ZERO, |_, _, _| {});
        assert_eq!(results[0].as_ref().unwrap_err().to_string(), "link lost");
        assert!(results[1].is_ok());
        assert_eq!(ingests[0].counts.frames, 10);
        assert_eq!(ingests[1].counts.frames, 500);
    }

    #[test]
    fn a_pinned_thread_runs_on_its_core_and_an_absent_core_is_a_clear_error() {
        let handle = std::thread::Builder::new()
            .name("readout-test".into())
            .spawn(|| {
                pin_current_thread(0).unwrap();
                // SAFETY: sched_getcpu has no preconditions; it only reads the current CPU.
                let cpu = unsafe { libc::sched_getcpu() };
                (std::thread::current().name().map(str::to_owned), cpu)
            })
            .unwrap();
        let (name, cpu) = handle.join().unwrap();
        assert_eq!(name.as_deref(), Some("readout-test"));
        assert_eq!(cpu, 0);
        let err = pin_current_thread(100_000).unwrap_err();
        assert!(err.to_string().contains("core 100000"), "{err}");
    }
}
