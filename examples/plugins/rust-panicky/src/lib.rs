//! Decodes 8-byte records (source id and event number, little-endian u32s), one fragment each,
//! and panics on a record whose source id is 0xDEADBEEF, or in `create` when its configuration
//! is `panic_in_create = true`: swdaq's plugin tests load it to see the panic come back as an
//! error naming the plugin, with the instance still usable.

use std::ffi::CStr;

use swdaq_plugin_sdk::{Decode, DecodeFailure, Fragment, Output, Plugin, export_plugin};

const RECORD_BYTES: usize = 8;
const MARKED_SOURCE: u32 = 0xDEAD_BEEF;

struct Panicky;

impl Plugin for Panicky {
    const NAME: &'static CStr = c"rust_panicky";
    const VERSION: &'static CStr = c"0.1.0";

    fn create(config_toml: &str) -> Result<Self, String> {
        if config_toml.trim() == "panic_in_create = true" {
            panic!("told to panic in create");
        }
        Ok(Panicky)
    }
}

impl Decode for Panicky {
    fn decode(
        &mut self,
        block: &[u8],
        out: &mut Output<'_, Fragment>,
    ) -> Result<usize, DecodeFailure> {
        let mut consumed = 0;
        for record in block.chunks_exact(RECORD_BYTES) {
            let word = |at: usize| {
                u32::from_le_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]])
            };
            if word(0) == MARKED_SOURCE {
                panic!("marked record at byte {consumed}");
            }
            let fragment = Fragment::at(consumed, RECORD_BYTES)
                .source(word(0))
                .event_number(word(4).into());
            if !out.push(fragment) {
                break;
            }
            consumed += RECORD_BYTES;
        }
        Ok(consumed)
    }
}

export_plugin!(Panicky, [decode]);
