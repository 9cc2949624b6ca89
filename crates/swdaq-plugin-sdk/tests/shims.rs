//! The functions `export_plugin!` generates, called as the host calls them: outputs within
//! the host's capacities, "need room" answers, errors and caught panics.

use std::ffi::{CStr, c_char};
use std::ptr;

use swdaq_plugin_sdk::abi::{
    self, RawChunk, RawDecision, RawEvent, RawFragment, RawFragmentRef, RawPlugin,
    RawTriggerPrimitive,
};
use swdaq_plugin_sdk::*;

/// Records of 4 bytes: source id u16 LE, value u8, marker u8 (0xEE: panic, 0xEF: error).
struct Everything {
    threshold: u8,
}

impl Plugin for Everything {
    const NAME: &'static CStr = c"everything";
    const VERSION: &'static CStr = c"0.1";
    fn create(config_toml: &str) -> Result<Self, String> {
        match config_toml.trim() {
            "" => Ok(Everything { threshold: 10 }),
            "panic" => panic!("asked to panic in create"),
            other => Err(format!(
                "unknown configuration {other:?}, which is a long message to be cut"
            )),
        }
    }
}

impl Decode for Everything {
    fn decode(
        &mut self,
        block: &[u8],
        out: &mut Output<'_, Fragment>,
    ) -> Result<usize, DecodeFailure> {
        let mut consumed = 0;
        for record in block.chunks_exact(4) {
            match record[3] {
                0xEE => panic!("marked record at byte {consumed}"),
                0xEF => {
                    return Err(DecodeFailure {
                        consumed: consumed + 4,
                        message: "bad record".into(),
                    });
                }
                _ => {}
            }
            let fragment =
                Fragment::at(consumed, 4).source(u16::from_le_bytes([record[0], record[1]]).into());
            if !out.push(fragment.event_number(record[2].into())) {
                break;
            }
            consumed += 4;
        }
        Ok(consumed)
    }
}

impl Aggregate for Everything {
    fn aggregate(
        &mut self,
        l1_id: u32,
        chunks: &[Chunk<'_>],
        payload: &mut Payload<'_>,
    ) -> Result<(), String> {
        payload.write(&l1_id.to_le_bytes());
        for chunk in chunks {
            payload.write(&[chunk.link as u8]);
            payload.write(chunk.data);
        }
        Ok(())
    }
}

impl ProcessFragments for Everything {
    fn process_fragment(
        &mut self,
        fragment: &FragmentRef<'_>,
        out: &mut Vec<TriggerPrimitive>,
    ) -> Result<(), String> {
        // One primitive per byte above the threshold.
        for (channel, &adc) in fragment.data.iter().enumerate() {
            if adc > self.threshold {
                out.push(TriggerPrimitive {
                    timestamp: fragment.timestamp,
                    channel: channel as u32,
                    adc_peak: adc.into(),
                    ..Default::default()
                });
            }
        }
        Ok(())
    }
}

impl FilterEvents for Everything {
    fn filter_event(&mut self, event: &Event<'_>) -> Result<Decision, String> {
        match event.event_number {
            13 => panic!("unlucky event"),
            n if n % 2 == 0 => Ok(Decision::Accept {
                stream: event.fragment_count() as u32,
            }),
            _ => Ok(Decision::Reject),
        }
    }
}

export_plugin!(
    Everything,
    [decode, aggregate, process_fragments, filter_events]
);

fn descriptor() -> &'static RawPlugin {
    // SAFETY: the generated entry returns a pointer to a static descriptor.
    unsafe { &*swdaq_plugin_v1() }
}

fn create(config: &str) -> Result<abi::InstancePtr, String> {
    let mut error = [0 as c_char; 32];
    // SAFETY: a live &str and a local buffer with their true lengths.
    let instance = unsafe {
        descriptor().create.unwrap()(
            config.as_ptr().cast(),
            config.len(),
            error.as_mut_ptr(),
            error.len(),
        )
    };
    if instance.is_null() {
        // SAFETY: the shim nul-terminates within the buffer.
        return Err(unsafe { CStr::from_ptr(error.as_ptr()) }
            .to_str()
            .unwrap()
            .to_string());
    }
    Ok(instance)
}

fn last_error(instance: abi::InstancePtr) -> String {
    // SAFETY: a live instance.
    unsafe { CStr::from_ptr(descriptor().last_error.unwrap()(instance)) }
        .to_str()
        .unwrap()
        .to_string()
}

fn destroy(instance: abi::InstancePtr) {
    // SAFETY: made by create, destroyed once.
    unsafe { descriptor().destroy.unwrap()(instance) }
}

fn decode(
    instance: abi::InstancePtr,
    block: &[u8],
    capacity: usize,
) -> (abi::Status, Vec<RawFragment>, usize) {
    let mut out = vec![RawFragment::default(); capacity];
    let (mut count, mut consumed) = (usize::MAX, usize::MAX);
    // SAFETY: the block and the output with their true sizes.
    let status = unsafe {
        descriptor().decode.unwrap()(
            instance,
            block.as_ptr(),
            block.len(),
            out.as_mut_ptr(),
            capacity,
            &mut count,
            &mut consumed,
        )
    };
    out.truncate(count);
    (status, out, consumed)
}

#[test]
fn the_descriptor_says_version_size_name_and_capabilities() {
    let d = descriptor();
    assert_eq!(
        (d.abi_version, d.struct_size as usize),
        (1, size_of::<RawPlugin>())
    );
    // SAFETY: static C strings.
    let (name, version) = unsafe { (CStr::from_ptr(d.name), CStr::from_ptr(d.version)) };
    assert_eq!((name, version), (c"everything", c"0.1"));
    assert!(
        d.decode.is_some()
            && d.aggregate.is_some()
            && d.process_fragments.is_some()
            && d.filter_events.is_some()
    );
}

#[test]
fn create_refusing_or_panicking_is_a_message_in_the_hosts_buffer() {
    assert_eq!(
        create("threshold = 3"),
        Err("unknown configuration \"threshol".to_string()),
        "cut to 31 bytes and a nul"
    );
    assert_eq!(
        create("panic"),
        Err("panicked: asked to panic in cre".to_string())
    );
    destroy(create("").unwrap());
}

#[test]
fn decode_fills_the_hosts_buffer_and_asks_for_room() {
    let instance = create("").unwrap();
    let block = [1, 0, 5, 0, 2, 0, 6, 0, 3, 0, 7, 0, 0xAA];
    let (status, fragments, consumed) = decode(instance, &block, 2);
    assert_eq!((status, consumed), (abi::NEED_ROOM, 8));
    assert_eq!(
        fragments
            .iter()
            .map(|f| (f.offset, f.source_id, f.event_number, f.flags))
            .collect::<Vec<_>>(),
        [(0, 1, 5, 1), (4, 2, 6, 1)]
    );
    let (status, fragments, consumed) = decode(instance, &block[8..], 2);
    assert_eq!(
        (status, fragments.len(), consumed),
        (abi::OK, 1, 4),
        "the last byte waits for the rest of its record"
    );
    destroy(instance);
}

#[test]
fn a_panic_becomes_an_error_with_its_message_and_the_instance_lives_on() {
    let instance = create("").unwrap();
    let block = [1, 0, 5, 0, 2, 0, 6, 0xEE];
    let (status, fragments, consumed) = decode(instance, &block, 8);
    assert_eq!(status, abi::ERROR);
    assert_eq!(last_error(instance), "panicked: marked record at byte 4");
    // What was pushed before the panic is there; the host decides what to keep.
    assert_eq!((fragments.len(), consumed), (1, 0));
    let (status, _, _) = decode(instance, &block[..4], 8);
    assert_eq!(status, abi::OK);
    let (status, fragments, consumed) = decode(instance, &[1, 0, 5, 0, 2, 0, 6, 0xEF], 8);
    assert_eq!((status, fragments.len(), consumed), (abi::ERROR, 1, 8));
    assert_eq!(last_error(instance), "bad record");
    destroy(instance);
}

#[test]
fn aggregate_tells_the_room_it_needs() {
    let instance = create("").unwrap();
    let chunks = [
        RawChunk {
            data: [9u8, 8].as_ptr(),
            length: 2,
            link: 3,
            reserved: 0,
        },
        RawChunk {
            data: ptr::null(),
            length: 0,
            link: 4,
            reserved: 0,
        },
    ];
    let mut payload = vec![0u8; 4];
    let mut len = 0;
    let call = |payload: &mut Vec<u8>, len: &mut usize| {
        // SAFETY: the chunks and the payload buffer with their true sizes.
        unsafe {
            descriptor().aggregate.unwrap()(
                instance,
                0x0102_0304,
                chunks.as_ptr(),
                chunks.len(),
                payload.as_mut_ptr(),
                payload.len(),
                len,
            )
        }
    };
    assert_eq!((call(&mut payload, &mut len), len), (abi::NEED_ROOM, 8));
    payload.resize(len, 0);
    assert_eq!((call(&mut payload, &mut len), len), (abi::OK, 8));
    assert_eq!(payload, [4, 3, 2, 1, 3, 9, 8, 4]);
    destroy(instance);
}

#[test]
fn process_stops_before_a_fragment_whose_primitives_do_not_fit() {
    let instance = create("").unwrap();
    let data: [&[u8]; 3] = [&[20, 1, 30], &[1, 1], &[40, 50]];
    let refs: Vec<RawFragmentRef> = data
        .iter()
        .map(|d| RawFragmentRef {
            data: d.as_ptr(),
            length: d.len() as u64,
            event_number: 1,
            timestamp: 77,
            source_id: 0,
            flags: 0,
        })
        .collect();
    let mut out = vec![RawTriggerPrimitive::default(); 3];
    let (mut count, mut done) = (0, 0);
    // SAFETY: the refs and the output with their true sizes.
    let status = unsafe {
        descriptor().process_fragments.unwrap()(
            instance,
            refs.as_ptr(),
            refs.len(),
            out.as_mut_ptr(),
            3,
            &mut count,
            &mut done,
        )
    };
    assert_eq!(
        (status, count, done),
        (abi::NEED_ROOM, 2, 2),
        "the third fragment's two primitives do not fit in the one slot left"
    );
    assert_eq!(
        out[..2]
            .iter()
            .map(|p| (p.channel, p.adc_peak, p.timestamp))
            .collect::<Vec<_>>(),
        [(0, 20, 77), (2, 30, 77)]
    );
    // SAFETY: as above, with room for one primitive only: the fragment can never fit.
    let status = unsafe {
        descriptor().process_fragments.unwrap()(
            instance,
            refs[2..].as_ptr(),
            1,
            out.as_mut_ptr(),
            1,
            &mut count,
            &mut done,
        )
    };
    assert_eq!((status, count, done), (abi::ERROR, 0, 0));
    assert_eq!(
        last_error(instance),
        "fragment 0 has 2 primitives, more than the host's 1"
    );
    destroy(instance);
}

#[test]
fn filter_decides_every_event_and_reports_a_panic() {
    let instance = create("").unwrap();
    let fragment = RawFragmentRef {
        data: [1u8].as_ptr(),
        length: 1,
        event_number: 0,
        timestamp: 0,
        source_id: 0,
        flags: 0,
    };
    let fragments = [fragment, fragment];
    let event = |n: u64, count: u64| RawEvent {
        event_number: n,
        fragments: fragments.as_ptr(),
        fragment_count: count,
    };
    let events = [event(2, 2), event(3, 1), event(4, 0)];
    let mut decisions = [RawDecision {
        accept: 9,
        stream: 9,
    }; 3];
    // SAFETY: the events and the decisions with their true sizes.
    let status = unsafe {
        descriptor().filter_events.unwrap()(instance, events.as_ptr(), 3, decisions.as_mut_ptr())
    };
    assert_eq!(status, abi::OK);
    assert_eq!(
        decisions.map(|d| (d.accept, d.stream)),
        [(1, 2), (0, 0), (1, 0)]
    );
    let unlucky = [event(13, 1)];
    // SAFETY: as above.
    let status = unsafe {
        descriptor().filter_events.unwrap()(instance, unlucky.as_ptr(), 1, decisions.as_mut_ptr())
    };
    assert_eq!(status, abi::ERROR);
    assert_eq!(last_error(instance), "panicked: unlucky event");
    destroy(instance);
}
