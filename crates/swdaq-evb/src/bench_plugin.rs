//! `swdaq bench plugin`: what the plugin interface costs (#35). One event's FED data — the
//! emulator's fragments back to back — is decoded into fragments (FED id, level-1 id, where
//! it lies) by swdaq's own walk ([`FedDataDecoder`]: `fed_fragments`, the markers and length
//! fields the readout units check, no CRC-16) and by a C plugin doing the same checks through
//! the ABI (`examples/plugins/fed_decoder.c`), every value it returns checked by the host.
//! Both go through the same [`Decoder`] trait, in alternating rounds of the same run, timed in
//! the thread's CPU time; before any timing, both must find the same fragments in every event.

use crate::bench_udp::bench_feds;
use crate::metrics::{load_average, thread_cpu_ns};
use serde::Serialize;
use std::path::Path;
use swdaq_format::fed::fed_fragments;
use swdaq_plugin::{DecodeError, DecodeProblem, Decoder, Fragment, Plugin, PluginDecoder};
use swdaq_sim::fed::{FedEmulator, FedEvent};

/// Distinct events decoded over and over: 1024 events of 8 FEDs of 1 KiB are 8 MiB, beyond the
/// caches, so both paths read memory as a readout unit would.
const DISTINCT_EVENTS: usize = 1024;
/// Rounds per path, alternated; the median round counts.
const ROUNDS: usize = 7;

/// swdaq's own walk over one event's FED data, as a [`Decoder`]: the fragments CMS-style
/// from the last trailer back, returned in block order.
#[derive(Debug, Default)]
pub struct FedDataDecoder;

impl Decoder for FedDataDecoder {
    fn decode(&mut self, block: &[u8], out: &mut Vec<Fragment>) -> Result<usize, DecodeError> {
        let first = out.len();
        let mut failed = None;
        for found in fed_fragments(block) {
            match found {
                Ok((offset, fed)) => out.push(Fragment {
                    offset,
                    length: fed.bytes.len(),
                    source_id: u32::from(fed.header.source_id),
                    event_number: Some(u64::from(fed.header.l1_id)),
                    timestamp: None,
                    flags: 0,
                }),
                Err(e) => failed = Some(e),
            }
        }
        out[first..].reverse();
        match failed {
            None => Ok(block.len()),
            Some(e) => Err(DecodeError {
                consumed: block.len(),
                problem: DecodeProblem::Format(e.to_string()),
            }),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PluginDecodeRow {
    /// "built-in" or the plugin's name.
    pub path: String,
    pub events: u64,
    pub fragments: u64,
    pub ns_per_event: f64,
    pub events_per_core_second: f64,
    pub gbps_per_core: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PluginBenchResult {
    pub feds: u16,
    pub fed_bytes: u32,
    pub rows: Vec<PluginDecodeRow>,
    /// The plugin's events/s per core over the built-in path's, same run.
    pub plugin_over_built_in: f64,
    pub load_average: f64,
}

/// `events` events of `feds` FEDs of `fed_bytes` (spread an eighth) decoded per round by
/// each path, `plugin` being the FED decoder plugin's library.
pub fn decode_cost(
    plugin: &Path,
    feds: u16,
    fed_bytes: u32,
    events: u64,
) -> Result<PluginBenchResult, String> {
    let blocks = event_blocks(feds, fed_bytes)?;
    let loaded = Plugin::load(plugin).map_err(|e| e.to_string())?;
    let mut plugin_decoder = PluginDecoder::new(&loaded, "").map_err(|e| e.to_string())?;
    let name = plugin_decoder.plugin_name().to_string();
    let mut built_in = FedDataDecoder;
    for (i, block) in blocks.iter().enumerate() {
        let ours = decoded(&mut built_in, block)?;
        let theirs = decoded(&mut plugin_decoder, block)?;
        if ours != theirs {
            return Err(format!(
                "event {i}: the plugin found {theirs:?}, swdaq {ours:?}"
            ));
        }
    }
    let mut times = [Vec::new(), Vec::new()];
    let mut fragments = Vec::with_capacity(4 * feds as usize);
    let mut found = [0u64; 2];
    for _ in 0..ROUNDS {
        for (path, decoder) in [
            &mut built_in as &mut dyn Decoder,
            &mut plugin_decoder as &mut dyn Decoder,
        ]
        .into_iter()
        .enumerate()
        {
            let start = thread_cpu_ns();
            let mut count = 0u64;
            for block in blocks.iter().cycle().take(events as usize) {
                fragments.clear();
                // Checked equal above: the result is the same every time.
                let _ = decoder.decode(block, &mut fragments);
                count += fragments.len() as u64;
            }
            times[path].push(thread_cpu_ns() - start);
            found[path] = count;
        }
    }
    let bytes: usize = blocks
        .iter()
        .cycle()
        .take(events as usize)
        .map(Vec::len)
        .sum();
    let rows: Vec<PluginDecodeRow> = ["built-in".to_string(), name]
        .into_iter()
        .zip(&mut times)
        .zip(found)
        .map(|((path, times), fragments)| {
            times.sort_by(f64::total_cmp);
            let ns = times[times.len() / 2];
            PluginDecodeRow {
                path,
                events,
                fragments,
                ns_per_event: ns / events as f64,
                events_per_core_second: events as f64 / (ns / 1e9),
                gbps_per_core: bytes as f64 / ns,
            }
        })
        .collect();
    Ok(PluginBenchResult {
        feds,
        fed_bytes,
        plugin_over_built_in: rows[1].events_per_core_second / rows[0].events_per_core_second,
        rows,
        load_average: load_average(),
    })
}

/// Every fragment `decoder` finds in `block`, or its error.
fn decoded(decoder: &mut dyn Decoder, block: &[u8]) -> Result<Vec<Fragment>, String> {
    let mut out = Vec::new();
    decoder.decode(block, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// The emulator's events, each event's FED fragments back to back.
fn event_blocks(feds: u16, fed_bytes: u32) -> Result<Vec<Vec<u8>>, String> {
    let config = bench_feds(feds, fed_bytes);
    let mut emulator = FedEmulator::new(config).map_err(|e| e.to_string())?;
    let (mut event, mut faults) = (FedEvent::default(), Vec::new());
    Ok((0..DISTINCT_EVENTS)
        .map(|_| {
            emulator.next_event(&mut event, &mut faults);
            event
                .fragments
                .iter()
                .flat_map(|(_, range)| event.bytes[range.clone()].iter().copied())
                .collect()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// swdaq's walk finds every FED of an emulated event in order, with its id and number.
    #[test]
    fn the_built_in_decoder_finds_every_fed_in_order() {
        let blocks = event_blocks(4, 256).unwrap();
        for (i, block) in blocks.iter().take(10).enumerate() {
            let found = decoded(&mut FedDataDecoder, block).unwrap();
            let ids: Vec<u32> = found.iter().map(|f| f.source_id).collect();
            assert_eq!(ids, [0, 1, 2, 3]);
            assert!(found.iter().all(|f| f.event_number == Some(i as u64 + 1)));
            assert_eq!(found.iter().map(|f| f.length).sum::<usize>(), block.len());
        }
    }

    /// A block with garbage in front of its fragments keeps the fragments and says so.
    #[test]
    fn garbage_before_the_fragments_is_an_error_with_the_fragments_kept() {
        let blocks = event_blocks(2, 128).unwrap();
        let block = [vec![0x11; 8], blocks[0].clone()].concat();
        let mut out = Vec::new();
        let error = FedDataDecoder.decode(&block, &mut out).unwrap_err();
        assert_eq!(out.len(), 2);
        assert!(error.to_string().contains("FED"), "{error}");
    }
}
