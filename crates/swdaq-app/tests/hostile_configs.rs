//! Configurations that used to hang a run, fill memory or abort it (issue #33): each is
//! refused at configure, with the key named, in every model.

use swdaq_app::models::select;

fn refusal(text: &str) -> String {
    let model = select(text).expect("a model for the text");
    // The chain validates after command-line overrides; the others as they parse.
    match model.parse(text).and_then(|c| c.validate()) {
        Ok(()) => panic!("accepted:\n{text}"),
        Err(e) => format!("{e:#}"),
    }
}

fn assert_refused(text: &str, key: &str) {
    let e = refusal(text);
    assert!(
        e.contains(key),
        "the refusal of\n{text}\ndoes not name {key}: {e}"
    );
}

#[test]
fn emulator_rates_and_shaping_beyond_any_detector_are_refused() {
    for key in ["blip_rate_hz", "track_rate_hz", "peaking_time_us"] {
        assert_refused(&format!("[emulator.sim]\n{key} = 1e12\n"), key);
    }
}

#[test]
fn sw_rod_rates_and_tails_that_never_end_are_refused() {
    assert_refused("[swrod]\nl1a_rate_hz = 1e12\n", "swrod.l1a_rate_hz");
    assert_refused("[swrod]\nl1a_rate_hz = nan\n", "swrod.l1a_rate_hz");
    assert_refused(
        "[swrod]\nclean_tail_l1as = 1000000000000\n",
        "swrod.clean_tail_l1as",
    );
}

#[test]
fn fault_probabilities_outside_0_to_1_are_refused_in_every_model() {
    for (key, value) in [
        ("missing_chunk", "1.5"),
        ("truncated_chunk", "-1.0"),
        ("sequence_gap", "nan"),
        ("l1id_out_of_order", "2.0"),
    ] {
        assert_refused(&format!("[swrod.felix.faults]\n{key} = {value}\n"), key);
    }
    assert_refused("[emulator.sim.faults]\nmissing = 1.5\n", "faults.missing");
    assert_refused("[evb.faults]\nmissing = -1.0\n", "missing");
}

#[test]
fn sizes_beyond_the_machine_are_refused_naming_the_key_and_the_memory() {
    for (text, key) in [
        (
            "[storage]\nqueue_depth = 1000000000000\n",
            "storage.queue_depth",
        ),
        (
            "[swrod]\nrequest_store_fragments = 1000000000000\n",
            "swrod.request_store_fragments",
        ),
        (
            "[swrod]\nconsumer_queue = 1000000000000\n",
            "swrod.consumer_queue",
        ),
        (
            "[swrod]\nhlt_max_in_flight = 1000000000000\n",
            "swrod.hlt_max_in_flight",
        ),
        ("[evb]\nru_capacity = 1000000000000\n", "evb.ru_capacity"),
    ] {
        let e = refusal(text);
        assert!(
            e.contains(key) && e.contains("more than this machine's"),
            "{text}: {e}"
        );
    }
}

#[test]
fn an_event_builder_pacing_tick_longer_than_a_run_is_refused() {
    assert_refused("[evb]\npacing_tick = 1e12\n", "pacing_tick");
}

#[test]
fn every_shipped_configuration_still_passes() {
    let configs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs");
    for entry in std::fs::read_dir(configs).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let model = select(&text).unwrap();
        if let Err(e) = model.parse(&text).and_then(|c| c.validate()) {
            panic!("{}: {e:#}", path.display());
        }
    }
}

/// The applications' inboxes take messages up to `topology.max_message_mb`: a readout
/// window whose fragments would not fit is refused at configure, not dropped mid-run.
#[test]
fn a_readout_window_larger_than_the_inboxes_take_is_refused() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/topology-local.toml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    // 0.16 s after each trigger: 4883 WIBEth frames, 35 MB per link and window.
    let small = format!(
        "[topology]\nmax_message_mb = 32\n[trigger]\nwindow_after_ticks = 10000000\n{text}"
    );
    assert_refused(&small, "topology.max_message_mb");
    let select_and_validate =
        |text: &str| select(text).unwrap().parse(text).and_then(|c| c.validate());
    assert!(select_and_validate(&text).is_ok());
}

/// The same for the event builder's batches of super-fragments and the SW ROD's ROB
/// fragments, sized by their largest fragment settings.
#[test]
fn event_builder_and_sw_rod_messages_larger_than_the_inboxes_take_are_refused() {
    let config = |name: &str| {
        let path = format!("{}/../../configs/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(path).unwrap()
    };
    let select_and_validate =
        |text: &str| select(text).unwrap().parse(text).and_then(|c| c.validate());
    let small_inboxes =
        |text: &str| text.replace("[topology]\n", "[topology]\nmax_message_mb = 4\n");

    // 4 FEDs of up to 64 KiB, 32 super-fragments per batch: 8 MiB.
    let evb = config("evb-apps.toml") + "[evb.input]\nmax_fragment_bytes = 65536\n";
    assert!(
        select_and_validate(&evb).is_ok(),
        "the default 256 MB takes it"
    );
    assert_refused(&small_inboxes(&evb), "topology.max_message_mb");

    // 256 e-links per ROB (the most) of 65535-byte chunks: 16 MiB; the stores made small
    // enough for the machine.
    let mut swrod: toml::Table = config("swrod-apps.toml").parse().unwrap();
    let settings = swrod["swrod"].as_table_mut().unwrap();
    for (key, value) in [
        ("max_chunk_bytes", 65535),
        ("ring_slots", 128),
        ("timeout_fragments", 64),
        ("request_store_fragments", 64),
        ("consumer_queue", 64),
        ("hlt_max_in_flight", 64),
    ] {
        settings.insert(key.into(), value.into());
    }
    settings["felix"]["elinks"] = 512.into();
    let swrod = toml::to_string(&swrod).unwrap();
    if let Err(e) = select_and_validate(&swrod) {
        panic!("the default 256 MB takes it: {e:#}");
    }
    assert_refused(&small_inboxes(&swrod), "topology.max_message_mb");
}
