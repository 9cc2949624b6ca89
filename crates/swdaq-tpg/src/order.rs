//! TPs leave a link ordered by `time_start`: hits close in a different order than they open,
//! so finished TPs wait here until no open hit can start earlier.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use swdaq_format::TriggerPrimitive;

#[derive(Default)]
pub struct TpOrderer {
    pending: BinaryHeap<Reverse<(u64, u32, TpKey)>>,
}

/// The TP itself, ordered by its bytes so equal start times still sort deterministically.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct TpKey([u8; swdaq_format::tp::TP_SIZE]);

impl TpOrderer {
    pub fn push(&mut self, tps: impl IntoIterator<Item = TriggerPrimitive>) {
        for tp in tps {
            self.pending
                .push(Reverse((tp.time_start, tp.channel, TpKey(tp.to_bytes()))));
        }
    }

    /// Moves to `out`, in time order, every TP that starts before `horizon` (the earliest open
    /// hit's start, or "now" when none is open): nothing earlier can still arrive.
    pub fn release(&mut self, horizon: u64, out: &mut Vec<TriggerPrimitive>) {
        while let Some(Reverse((start, _, _))) = self.pending.peek() {
            if *start >= horizon {
                break;
            }
            let Reverse((_, _, TpKey(bytes))) = self.pending.pop().expect("peeked");
            out.push(TriggerPrimitive::decode(&bytes).expect("encoded here"));
        }
    }

    /// Everything left, in time order (end of run).
    pub fn drain(&mut self, out: &mut Vec<TriggerPrimitive>) {
        self.release(u64::MAX, out);
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}
