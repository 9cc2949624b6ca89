//! A ROB fragment's payload (its ROD data) built by a detector's aggregation plugin (#35)
//! instead of swdaq's chunk records.
//!
//! The aggregator always copies each chunk in as a record (e-link, length, data), as without
//! a plugin: the records are where the chunks wait until the fragment completes, and they are
//! the fallback when the plugin fails. At completion the records are read back into the
//! plugin's chunks, sorted by e-link number (the ABI gives them in e-link order), and the
//! plugin is called once for the L1 ID: the ABI's aggregate call is one L1 ID's chunks, and the
//! aggregator completes one L1 ID at a time.
//!
//! eformat counts ROD data in 32-bit words, so a payload that is not whole words is padded
//! with zero bytes (a plugin whose layout needs its exact length must carry it itself).

use swdaq_format::eformat::{ChunkRecords, chunk_record_size};
use swdaq_plugin::{Aggregator as PluginLayout, Chunk, PluginError};

/// The plugin building payloads for one ROB: one instance, used by that ROB's thread only.
pub struct PayloadPlugin {
    plugin: Box<dyn PluginLayout + Send>,
    /// The payload of the fragment being completed, reused for its capacity.
    payload: Vec<u8>,
    /// (e-link, start, length) of each record's chunk within the ROD data, reused.
    chunk_places: Vec<(u32, usize, usize)>,
    /// Errors of this ROB's plugin instance, and the first one's message.
    pub errors: u64,
    pub first_error: Option<PluginError>,
}

impl PayloadPlugin {
    pub fn new(plugin: Box<dyn PluginLayout + Send>) -> Self {
        Self {
            plugin,
            payload: Vec::new(),
            chunk_places: Vec::new(),
            errors: 0,
            first_error: None,
        }
    }

    /// The plugin's payload for `l1_id` from the chunk records in `records`, padded to whole
    /// words; `None` when the plugin failed (counted, the first error kept) or the records do
    /// not parse (they are the aggregator's own, so they always do).
    pub fn build(&mut self, l1_id: u32, records: &[u8]) -> Option<&[u8]> {
        self.chunk_places.clear();
        let mut record_at = 0;
        for record in ChunkRecords::new(records) {
            let record = record.ok()?;
            let len = record.data.len();
            // A record is a head word, then the chunk.
            self.chunk_places
                .push((u32::from(record.elink), record_at + 4, len));
            record_at += chunk_record_size(len);
        }
        // Stable: a record's place is its arrival, which is kept for equal e-links (none: a
        // duplicate chunk is never recorded).
        self.chunk_places.sort_by_key(|&(link, _, _)| link);
        // Borrowing the records: a new (small) array per L1 ID.
        let chunks: Vec<Chunk<'_>> = self
            .chunk_places
            .iter()
            .map(|&(link, start, len)| Chunk {
                link,
                data: &records[start..start + len],
            })
            .collect();
        match self.plugin.aggregate(l1_id, &chunks, &mut self.payload) {
            Ok(()) => {
                let words = self.payload.len().next_multiple_of(4);
                self.payload.resize(words, 0);
                Some(&self.payload)
            }
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
                None
            }
        }
    }
}
