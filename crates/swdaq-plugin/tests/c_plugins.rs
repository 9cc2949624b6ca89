//! Plugins written in C, built with gcc against include/swdaq_plugin.h: the good triggered
//! board in all four capabilities, and faulty ones each breaking one rule of the ABI.

mod common;

use common::*;
use swdaq_plugin::*;

fn board_stream(packets: usize) -> Vec<u8> {
    (0..packets)
        .flat_map(|i| {
            board_packet(
                7,
                i as u32,
                1000 + 25 * i as u64,
                &[10, 200, 1500 - i as u16, 3],
            )
        })
        .collect()
}

#[test]
fn triggered_board_decodes_a_block_into_its_packets() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = Plugin::load(build_c_plugin(dir.path(), BOARD_SOURCE, "board", &[])).unwrap();
    assert_eq!(
        (plugin.name(), plugin.version()),
        ("triggered_board", "1.0.0")
    );
    // A batch of 3 makes the plugin ask for room: the host must go on where it stopped.
    let mut decoder = PluginDecoder::new(&plugin, "").unwrap().with_batch(3);
    let block = board_stream(10);
    let mut fragments = Vec::new();
    assert_eq!(decoder.decode(&block, &mut fragments), Ok(block.len()));
    assert_eq!(fragments.len(), 10);
    for (i, fragment) in fragments.iter().enumerate() {
        assert_eq!(fragment.offset, i * 28);
        assert_eq!(fragment.length, 28);
        assert_eq!(fragment.source_id, 7);
        assert_eq!(fragment.event_number, Some(i as u64));
        assert_eq!(fragment.timestamp, Some(1000 + 25 * i as u64));
    }
    assert_eq!(decoder.error_counts().total(), 0);
}

#[test]
fn a_stream_split_anywhere_gives_the_same_packets_as_the_no_code_format() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = Plugin::load(build_c_plugin(dir.path(), BOARD_SOURCE, "board", &[])).unwrap();
    let bytes = board_stream(40);
    for piece in [1, 7, 19, 28, 100, bytes.len()] {
        let mut from_plugin = Vec::new();
        let mut plugin_stream = Stream::new(PluginDecoder::new(&plugin, "").unwrap(), 1 << 21);
        let mut from_format = Vec::new();
        let mut format_stream =
            Stream::new(PacketFormat::from_toml(BOARD_FORMAT).unwrap(), 1 << 21);
        for chunk in bytes.chunks(piece) {
            plugin_stream
                .push(chunk, |f, b| {
                    from_plugin.push((f.source_id, f.event_number, f.timestamp, b.to_vec()))
                })
                .unwrap();
            format_stream
                .push(chunk, |f, b| {
                    from_format.push((f.source_id, f.event_number, f.timestamp, b.to_vec()))
                })
                .unwrap();
        }
        assert_eq!(from_plugin.len(), 40, "pieces of {piece}");
        assert_eq!(from_plugin, from_format, "pieces of {piece}");
        assert_eq!(plugin_stream.pending(), 0);
    }
}

#[test]
fn garbage_is_reported_and_the_packets_around_it_kept() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = Plugin::load(build_c_plugin(dir.path(), BOARD_SOURCE, "board", &[])).unwrap();
    let mut decoder = PluginDecoder::new(&plugin, "").unwrap();
    let mut block = board_stream(2);
    block.extend_from_slice(&[0x55; 30]);
    block.extend_from_slice(&board_stream(1));
    let mut fragments = Vec::new();
    let error = decoder.decode(&block, &mut fragments).unwrap_err();
    assert_eq!(
        fragments.len(),
        2,
        "the packets before the garbage are kept"
    );
    assert_eq!(error.consumed, 56 + 30, "skipped to the next magic word");
    assert_eq!(
        error.to_string(),
        "plugin triggered_board: reported: no packet header at byte 56 (block consumed up to byte 86)"
    );
    assert_eq!(decoder.error_counts().reported, 1);
    fragments.clear();
    assert_eq!(
        decoder.decode(&block[error.consumed..], &mut fragments),
        Ok(28)
    );
    assert_eq!(fragments.len(), 1);
}

#[test]
fn a_config_the_plugin_refuses_is_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_c_plugin(dir.path(), BOARD_SOURCE, "board", &[]);
    let plugin = Plugin::load(&path).unwrap();
    let error = PluginDecoder::new(&plugin, "threshold = 3")
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        error,
        format!(
            "plugin {}: create failed: triggered_board takes no configuration keys",
            path.display()
        )
    );
}

#[test]
fn triggered_board_aggregates_processes_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = Plugin::load(build_c_plugin(dir.path(), BOARD_SOURCE, "board", &[])).unwrap();

    let mut aggregator = PluginAggregator::new(&plugin, "").unwrap();
    let chunks = [
        Chunk {
            link: 2,
            data: &[1, 2, 3],
        },
        Chunk { link: 5, data: &[] },
    ];
    let mut payload = Vec::new(); // no room at all: the plugin asks for it, the host grows
    aggregator.aggregate(17, &chunks, &mut payload).unwrap();
    assert_eq!(
        payload,
        [0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 0, 0, 0, 5, 0, 0, 0, 0]
    );
    let mut limited = PluginAggregator::new(&plugin, "")
        .unwrap()
        .with_max_payload(8);
    let error = limited.aggregate(17, &chunks, &mut Vec::new()).unwrap_err();
    assert_eq!(
        error.kind,
        ErrorKind::PayloadAboveLimit {
            needed: 19,
            limit: 8
        }
    );
    assert_eq!(limited.error_counts().bad_room_request, 1);

    let quiet = board_packet(3, 1, 500, &[10, 150, 120, 90]);
    let loud = board_packet(4, 1, 510, &[10, 1200, 900]);
    let refs = |packet: &'static [u8]| FragmentRef {
        data: packet,
        source_id: 0,
        event_number: 1,
        timestamp: 0,
        flags: 0,
    };
    let (quiet, loud): (&'static [u8], &'static [u8]) = (quiet.leak(), loud.leak());
    let mut processor = PluginFragmentProcessor::new(&plugin, "").unwrap();
    let mut primitives = Vec::new();
    processor
        .process(&[refs(quiet), refs(loud)], &mut primitives)
        .unwrap();
    assert_eq!(
        primitives,
        [
            TriggerPrimitive {
                timestamp: 500,
                channel: 3,
                time_over_threshold: 2,
                adc_peak: 150,
                adc_integral: 370,
                flags: 0
            },
            TriggerPrimitive {
                timestamp: 510,
                channel: 4,
                time_over_threshold: 2,
                adc_peak: 1200,
                adc_integral: 2110,
                flags: 0
            },
        ]
    );
    // With room for one primitive per call the plugin asks for more: the same primitives.
    let mut one_at_a_time = PluginFragmentProcessor::new(&plugin, "")
        .unwrap()
        .with_batch(1);
    let mut again = Vec::new();
    one_at_a_time
        .process(&[refs(quiet), refs(loud)], &mut again)
        .unwrap();
    assert_eq!(again, primitives);

    let short = FragmentRef {
        data: &[1, 2, 3],
        ..refs(quiet)
    };
    primitives.clear();
    let error = processor
        .process(&[refs(quiet), short], &mut primitives)
        .unwrap_err();
    assert_eq!(
        error.error.kind,
        ErrorKind::Reported("fragment 1 is shorter than its header".into())
    );
    assert_eq!(error.fragments_done, 1);
    assert_eq!(processor.error_counts().reported, 1);
    assert_eq!(
        primitives.len(),
        1,
        "the first fragment's primitive is kept"
    );

    let mut filter = PluginEventFilter::new(&plugin, "").unwrap();
    let quiet_event = [refs(quiet)];
    let loud_event = [refs(quiet), refs(loud)];
    let events = [
        Event {
            event_number: 1,
            fragments: &quiet_event,
        },
        Event {
            event_number: 2,
            fragments: &loud_event,
        },
        Event {
            event_number: 3,
            fragments: &[],
        },
    ];
    let mut decisions = Vec::new();
    filter.filter(&events, &mut decisions).unwrap();
    assert_eq!(
        decisions,
        [
            Decision::Reject,
            Decision::Accept { stream: 1 },
            Decision::Reject
        ]
    );
}

fn faulty(dir: &std::path::Path, fault: &str) -> std::path::PathBuf {
    build_c_plugin(
        dir,
        FAULTY_SOURCE,
        &fault.to_lowercase(),
        &[&format!("FAULT={fault}")],
    )
}

/// Four 8-byte records (source id, event number), the third one bad when `bad_third`.
fn records(bad_third: bool) -> Vec<u8> {
    let mut block = Vec::new();
    for i in 0..4u32 {
        block.extend_from_slice(&(100 + i).to_le_bytes());
        block.extend_from_slice(&i.to_le_bytes());
    }
    if bad_third {
        block[16] = 0xFF;
    }
    block
}

#[test]
fn a_plugin_error_keeps_the_good_fragments_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = Plugin::load(faulty(dir.path(), "FAULT_NONE")).unwrap();
    let mut decoder = PluginDecoder::new(&plugin, "").unwrap();
    let mut fragments = Vec::new();
    let error = decoder.decode(&records(true), &mut fragments).unwrap_err();
    assert_eq!(error.consumed, 24);
    assert_eq!(
        error.problem.to_string(),
        "plugin faulty: reported: bad record at byte 16"
    );
    assert_eq!(
        fragments.iter().map(|f| f.source_id).collect::<Vec<_>>(),
        [100, 101]
    );
    assert_eq!(decoder.error_counts().reported, 1);
}

/// A faulty build, the error it causes, that error's counter, errors counted, fragments kept.
type BrokenReturn = (
    &'static str,
    &'static str,
    fn(&ErrorCounts) -> u64,
    u64,
    usize,
);

#[test]
fn every_broken_return_is_a_counted_named_error() {
    let dir = tempfile::tempdir().unwrap();
    let block = records(false);
    // (fault, the error, its counter, errors counted, fragments kept)
    let cases: [BrokenReturn; 6] = [
        (
            "FAULT_OUT_OF_BLOCK",
            "fragment 1 at 32+8 is outside the 32 bytes consumed",
            |c| c.fragment_out_of_block,
            1,
            3,
        ),
        (
            "FAULT_ABOVE_CAPACITY",
            "returned 1025 items with room for 1024",
            |c| c.count_out_of_range,
            1,
            0,
        ),
        (
            "FAULT_CONSUMED",
            "consumed 33 bytes of a 32-byte block",
            |c| c.count_out_of_range,
            1,
            0,
        ),
        (
            "FAULT_STATUS",
            "returned unknown status 7",
            |c| c.unknown_status,
            1,
            0,
        ),
        (
            "FAULT_FLAGS",
            "fragment 0 has unknown flags 0x101",
            |c| c.unknown_flags,
            4,
            0,
        ),
        (
            "FAULT_NO_PROGRESS",
            "asked for more room without making progress",
            |c| c.bad_room_request,
            1,
            0,
        ),
    ];
    for (fault, message, counter, counted, kept) in cases {
        let plugin = Plugin::load(faulty(dir.path(), fault)).unwrap();
        let mut decoder = PluginDecoder::new(&plugin, "").unwrap();
        let mut fragments = Vec::new();
        let error = decoder.decode(&block, &mut fragments).unwrap_err();
        assert_eq!(
            error.problem.to_string(),
            format!("plugin faulty: {message}"),
            "{fault}"
        );
        assert_eq!(counter(decoder.error_counts()), counted, "{fault}");
        assert_eq!(decoder.error_counts().total(), counted, "{fault}");
        // An impossible count makes the whole call untrusted; one bad fragment loses only itself.
        assert_eq!(fragments.len(), kept, "{fault}");
        assert!(fragments.iter().all(|f| f.offset + f.length <= block.len()));
    }
}

#[test]
fn a_plugin_asking_for_room_is_called_again_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = Plugin::load(faulty(dir.path(), "FAULT_NONE")).unwrap();
    // With room for one fragment the plugin asks for more after each: the host goes on.
    let mut decoder = PluginDecoder::new(&plugin, "").unwrap().with_batch(1);
    let mut fragments = Vec::new();
    assert_eq!(decoder.decode(&records(false), &mut fragments), Ok(32));
    assert_eq!(fragments.len(), 4);
    assert_eq!(
        fragments[3].offset, 24,
        "offsets are from the start of the whole block"
    );
}

#[test]
fn a_library_that_cannot_be_a_plugin_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |path: &std::path::Path| {
        let line = Plugin::load(path).err().expect("refused").to_string();
        assert!(!line.contains('\n'), "{line}");
        line
    };
    let missing = dir.path().join("libmissing.so");
    assert_eq!(
        refused(&missing),
        format!("plugin {}: no such file", missing.display())
    );

    let text = dir.path().join("notes.so");
    std::fs::write(&text, "not a library").unwrap();
    assert!(refused(&text).starts_with(&format!("plugin {}: cannot be loaded: ", text.display())));

    let no_entry = build_c_plugin(
        dir.path(),
        "crates/swdaq-plugin/tests/plugins/no_entry.c",
        "no_entry",
        &[],
    );
    assert_eq!(
        refused(&no_entry),
        format!(
            "plugin {}: not a swdaq plugin (no symbol swdaq_plugin_v1)",
            no_entry.display()
        )
    );

    let abi = faulty(dir.path(), "FAULT_ABI");
    assert_eq!(
        refused(&abi),
        format!(
            "plugin {}: ABI version mismatch: got 99, want 1",
            abi.display()
        )
    );

    let small = faulty(dir.path(), "FAULT_SMALL");
    assert_eq!(
        refused(&small),
        format!(
            "plugin {}: descriptor too small: 16 bytes, version 1 has 80",
            small.display()
        )
    );

    let nameless = faulty(dir.path(), "FAULT_NULL_NAME");
    assert_eq!(
        refused(&nameless),
        format!(
            "plugin {}: name missing from its descriptor",
            nameless.display()
        )
    );

    let create = faulty(dir.path(), "FAULT_CREATE");
    let plugin = Plugin::load(&create).unwrap();
    let line = PluginDecoder::new(&plugin, "").err().unwrap().to_string();
    assert_eq!(
        line,
        format!(
            "plugin {}: create failed: no calibration file for board 3",
            create.display()
        )
    );
    let line = PluginAggregator::new(&plugin, "")
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        line,
        format!("plugin {}: does not provide aggregate", create.display())
    );
}

#[test]
fn broken_payloads_and_decisions_are_counted_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let chunks = [Chunk {
        link: 1,
        data: &[7; 3],
    }];
    let mut payload = Vec::with_capacity(16);

    let plugin = Plugin::load(faulty(dir.path(), "FAULT_PAYLOAD_LONG")).unwrap();
    let mut aggregator = PluginAggregator::new(&plugin, "").unwrap();
    let error = aggregator.aggregate(1, &chunks, &mut payload).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "plugin faulty: payload of {0} bytes in a {1}-byte buffer",
            payload.capacity() + 1,
            payload.capacity()
        )
    );
    assert!(payload.is_empty(), "no payload after an error");
    assert_eq!(aggregator.error_counts().payload_out_of_range, 1);

    let plugin = Plugin::load(faulty(dir.path(), "FAULT_ROOM_TWICE")).unwrap();
    let mut aggregator = PluginAggregator::new(&plugin, "").unwrap();
    let error = aggregator
        .aggregate(1, &chunks, &mut Vec::new())
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::NeedRoomTwice);
    assert_eq!(aggregator.error_counts().bad_room_request, 1);

    let fragments = [FragmentRef {
        data: &[1],
        source_id: 1,
        event_number: 1,
        timestamp: 1,
        flags: 0,
    }];
    let events = [
        Event {
            event_number: 1,
            fragments: &fragments,
        },
        Event {
            event_number: 2,
            fragments: &[],
        },
    ];
    let mut decisions = vec![Decision::Reject; 5];
    for (fault, accept) in [("FAULT_DECISION", 2), ("FAULT_UNDECIDED", u32::MAX)] {
        let plugin = Plugin::load(faulty(dir.path(), fault)).unwrap();
        let mut filter = PluginEventFilter::new(&plugin, "").unwrap();
        let error = filter.filter(&events, &mut decisions).unwrap_err();
        let index = if fault == "FAULT_DECISION" { 0 } else { 1 };
        assert_eq!(
            error.kind,
            ErrorKind::BadDecision { index, accept },
            "{fault}"
        );
        assert!(decisions.is_empty(), "{fault}: no decision is used");
        assert_eq!(filter.error_counts().bad_decision, 1, "{fault}");
    }
}

#[test]
fn instances_can_move_to_the_threads_that_use_them() {
    fn movable<T: Send>() {}
    movable::<PluginDecoder>();
    movable::<PluginAggregator>();
    movable::<PluginFragmentProcessor>();
    movable::<PluginEventFilter>();
    movable::<Stream<PluginDecoder>>();
    fn shared<T: Send + Sync>() {}
    shared::<Plugin>();
}

#[test]
fn relative_paths_are_from_the_working_directory_and_bare_names_never_searched() {
    let dir = tempfile::tempdir().unwrap();
    build_c_plugin(dir.path(), BOARD_SOURCE, "board", &[]);
    // The test's working directory is the crate's: load from there by a relative path.
    let relative = pathdiff(dir.path());
    let plugin = Plugin::load(relative.join("libboard.so")).unwrap();
    assert_eq!(plugin.name(), "triggered_board");
    // A bare name that is not in the working directory is missing, not searched for.
    let line = Plugin::load("libc.so.6").err().unwrap().to_string();
    assert_eq!(line, "plugin libc.so.6: no such file");
}

/// `dir` relative to the working directory, through the root.
fn pathdiff(dir: &std::path::Path) -> std::path::PathBuf {
    let cwd = std::env::current_dir().unwrap();
    let up: std::path::PathBuf = cwd.components().skip(1).map(|_| "..").collect();
    up.join(dir.strip_prefix("/").unwrap())
}
