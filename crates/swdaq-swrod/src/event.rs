//! The full event the HLT stores for an accepted L1 accept: eformat v5
//! ([`swdaq_format::eformat_event`]) with the header filled from what the emulated trigger
//! and the HLT know — the L1 accept's time, global id, luminosity block, L1 ID, BCID,
//! trigger type and trigger info words, the HLT's accept in its info words and its one
//! physics stream tag — and every ROB in source-id order, a ROB the HLT could not collect
//! as an empty stand-in fragment whose status says why.

use crate::hlt::{AssembledEvent, MissingRob};
use swdaq_format::eformat::{RobFragment, RodHeader};
use swdaq_format::eformat_event::{
    EventHeader, EventLists, StreamTag, dummy_rob_status, encode_event, encode_stream_tags,
};

/// The HLT's one chain: bit 0 of its info words, set in every event it accepts.
pub const HLT_ACCEPT_CHAIN: usize = 0;

/// eformat's `RunType::PHYSICS`.
pub const RUN_TYPE_PHYSICS: u32 = 0;

/// The stream every accepted event goes to.
pub fn stream_tag() -> StreamTag {
    StreamTag {
        name: "Main".into(),
        kind: "physics".into(),
        obeys_lumiblock: true,
    }
}

/// Builds full events of one run.
pub struct EventEncoder {
    run_number: u32,
    stream_tags: Vec<u32>,
    hlt_info: Vec<u32>,
}

impl EventEncoder {
    pub fn new(run_number: u32) -> Self {
        let mut hlt_info = vec![0; HLT_ACCEPT_CHAIN / 32 + 1];
        hlt_info[HLT_ACCEPT_CHAIN / 32] |= 1 << (HLT_ACCEPT_CHAIN % 32);
        Self {
            run_number,
            stream_tags: encode_stream_tags(&[stream_tag()]),
            hlt_info,
        }
    }

    /// The event's bytes.
    pub fn encode(&self, e: &AssembledEvent) -> Vec<u8> {
        let l1a = &e.l1a;
        let stand_ins: Vec<(u32, Vec<u8>)> = e
            .missing
            .iter()
            .map(|&(source_id, why)| {
                let lost = matches!(why, MissingRob::Gone | MissingRob::Invalid);
                let rod = RodHeader {
                    source_id,
                    run_number: self.run_number,
                    l1_id: l1a.l1_id,
                    bc_id: u32::from(l1a.bc_id),
                    l1_trigger_type: u32::from(l1a.trigger_type),
                    detector_event_type: 0,
                };
                let rob = RobFragment::assemble(source_id, &[dummy_rob_status(lost)], &rod, &[]);
                (source_id, rob)
            })
            .collect();
        let mut robs: Vec<(u32, &[u8])> = e
            .robs
            .iter()
            .map(|r| (source_id_of(r.bytes()), r.bytes()))
            .chain(stand_ins.iter().map(|(s, b)| (*s, b.as_slice())))
            .collect();
        robs.sort_by_key(|r| r.0);
        let robs: Vec<&[u8]> = robs.into_iter().map(|r| r.1).collect();
        let header = EventHeader {
            bc_time_seconds: l1a.time_seconds,
            bc_time_nanoseconds: l1a.time_nanoseconds,
            global_id: l1a.global_id,
            run_type: RUN_TYPE_PHYSICS,
            run_number: self.run_number,
            lumi_block: l1a.lumi_block,
            l1_id: l1a.l1_id,
            bc_id: u32::from(l1a.bc_id),
            l1_trigger_type: u32::from(l1a.trigger_type),
        };
        let l1_info = l1a.trigger_info();
        let lists = EventLists {
            l1_trigger_info: &l1_info,
            l2_trigger_info: &[],
            hlt_info: &self.hlt_info,
            stream_tags: &self.stream_tags,
        };
        let mut out = Vec::with_capacity(robs.iter().map(|r| r.len()).sum::<usize>() + 512);
        encode_event(&mut out, &header, &[0], &lists, &robs);
        out
    }
}

/// A built ROB's source id (word 4 of its header; the SW ROD builds whole headers).
fn source_id_of(rob: &[u8]) -> u32 {
    rob.get(16..20)
        .map_or(0, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}
