//! Request serving against a live ingest loop whose frames the test releases one by one.

use crossbeam_channel::{Receiver, unbounded};
use std::sync::Arc;
use std::time::Duration;
use swdaq_format::FrameFormat;
use swdaq_format::daq_eth::DaqEthHeader;
use swdaq_format::wibeth::{self, WibEthHeader};
use swdaq_format::{Fragment, SourceId, TriggerPrimitive};
use swdaq_monitor::{Collector, Registry, Value};
use swdaq_readout::link::{Ingest, LinkShared};
use swdaq_readout::request::{DataRequest, RequestPolicy, RequestStatus};
use swdaq_readout::server::ServerMetrics;
use swdaq_readout::server::{Outcome, ServerConfig, serve};
use swdaq_readout::source::{FrameSource, Poll};
use swdaq_readout::tp_buffer::TpBuffer;

const STEP: u64 = 2048;

/// A source that delivers frame numbers the test sends it, ending when the channel closes.
struct Released(Receiver<u64>);
impl FrameSource for Released {
    fn next_frame(&mut self, slot: &mut [u8]) -> std::io::Result<Poll> {
        Ok(match self.0.recv() {
            Ok(n) => {
                let daq = DaqEthHeader {
                    timestamp: n * STEP,
                    seq_id: n as u16 & 0xfff,
                    ..Default::default()
                };
                wibeth::encode(
                    &daq,
                    &WibEthHeader::healthy(),
                    &[[1; 64]; 64],
                    &mut slot[..wibeth::FRAME_SIZE],
                );
                Poll::Frame(wibeth::FRAME_SIZE)
            }
            Err(_) => Poll::End,
        })
    }
}

fn request(trigger: u64, source: SourceId, first: u64, last_excl: u64) -> DataRequest {
    DataRequest {
        trigger_number: trigger,
        trigger_timestamp: first * STEP,
        run_number: 1,
        sequence_number: 0,
        source,
        window_begin: first * STEP,
        window_end: last_excl * STEP,
        destination: 0,
    }
}

#[test]
fn requests_wait_for_data_time_out_and_name_unknown_sources() {
    let link = Arc::new(LinkShared::new(SourceId::readout(1), FrameFormat::WibEth, 0.05).unwrap());
    let tps = Arc::new(TpBuffer::new(SourceId::trigger(1), 1 << 30, 0));
    let registry = Registry::new();
    let metrics = ServerMetrics::register(&registry, "request-server").unwrap();
    let (frames_tx, frames_rx) = unbounded();
    let (req_tx, req_rx) = unbounded();
    let (resp_tx, resp_rx) = unbounded();
    let config = ServerConfig {
        policy: RequestPolicy {
            max_window_ticks: 1 << 20,
        },
        timeout: Duration::from_millis(300),
        poll: Duration::from_millis(1),
    };
    std::thread::scope(|s| {
        let ingest_link = link.clone();
        s.spawn(move || {
            Ingest::new(&ingest_link, Released(frames_rx), ())
                .unwrap()
                .run(|| true)
                .unwrap()
        });
        let links = [link.clone()];
        let tp_buffers = [tps.clone()];
        let server = s.spawn(move || {
            serve(
                &links,
                &tp_buffers,
                &[],
                req_rx,
                resp_tx,
                config,
                Some(metrics),
                |_| {},
            )
        });

        for n in 0..10 {
            frames_tx.send(n).unwrap();
        }
        req_tx
            .send(request(1, SourceId::readout(1), 20, 25))
            .unwrap(); // future: must wait
        req_tx.send(request(2, SourceId::readout(9), 0, 5)).unwrap(); // nobody has source 9
        let r = resp_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            (r.request.trigger_number, r.outcome),
            (2, Outcome::UnknownSource)
        );
        let f = Fragment::parse(&r.fragment).unwrap();
        assert_eq!(f.header.element_id, SourceId::readout(9));
        assert!(
            resp_rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "trigger 1 must still wait"
        );
        // The link's TPs are served from its TP buffer, once they are in.
        req_tx.send(request(4, SourceId::trigger(1), 0, 5)).unwrap();
        assert!(resp_rx.recv_timeout(Duration::from_millis(50)).is_err());
        let hit = TriggerPrimitive {
            time_start: 2 * STEP,
            ..Default::default()
        };
        tps.push(&[hit], 6 * STEP);
        let r = resp_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            (r.request.trigger_number, r.outcome),
            (4, Outcome::Served(RequestStatus::Complete))
        );
        let payload = Fragment::parse(&r.fragment).unwrap().payload.to_vec();
        assert_eq!(TriggerPrimitive::decode_all(&payload).unwrap(), [hit]);
        for n in 10..25 {
            frames_tx.send(n).unwrap();
        }
        let r = resp_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            (r.request.trigger_number, r.outcome),
            (1, Outcome::Served(RequestStatus::Complete))
        );
        assert_eq!(
            Fragment::parse(&r.fragment).unwrap().payload.len(),
            5 * wibeth::FRAME_SIZE
        );

        // Duplicate of trigger 1, and one that times out with only part of its data.
        req_tx
            .send(request(1, SourceId::readout(1), 20, 25))
            .unwrap();
        req_tx
            .send(request(3, SourceId::readout(1), 23, 30))
            .unwrap();
        let dup = resp_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(dup.outcome, Outcome::Served(RequestStatus::Complete));
        let late = resp_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            (late.request.trigger_number, late.outcome),
            (3, Outcome::Served(RequestStatus::Partial))
        );
        assert!(late.latency >= Duration::from_millis(300));
        drop(req_tx);
        drop(frames_tx);
        let counts = server.join().unwrap();
        assert_eq!((counts.duplicates, counts.timed_out), (1, 1));
        assert_eq!(
            counts.by_outcome[&Outcome::Served(RequestStatus::Complete)],
            3
        );
    });
    // The same counts reach the monitoring registry.
    let snapshot = Collector::new(registry).collect();
    let requests = |status: &str| {
        snapshot
            .families
            .iter()
            .filter(|f| f.name == "swdaq_readout_requests_total")
            .flat_map(|f| &f.series)
            .find(|s| s.labels.get("status").map(String::as_str) == Some(status))
            .map(|s| match s.value {
                Value::Counter { total, .. } => total,
                _ => panic!("a counter"),
            })
    };
    assert_eq!(requests("complete"), Some(3));
    assert_eq!(requests("partial"), Some(1));
    assert_eq!(requests("unknown_source"), Some(1));
}
