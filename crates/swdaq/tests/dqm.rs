//! `swdaq dqm` offline over the event builder's files (#37): a run's histograms saved as the
//! reference; a run of the same detector with another seed is judged with no histogram Bad;
//! a run whose FED 1 sends fragments twice as large is judged with that FED's size histogram
//! Bad, first in the list, and the others not Bad.
//! Online (`[dqm]` in the run's file): the set a run saves beside its data equals what
//! `swdaq dqm` computes over its files (event builder and SW ROD) and is on record with them;
//! judged against a reference run it flags the same grown FED; a full sample queue is counted
//! drops, never a stalled run. The chain's online monitoring flags a dead and a noisy channel
//! by number against a clean reference run. As applications, each model is monitored by the
//! supervising process from the streams its writing applications publish (the chain's
//! builders' records, the event builder's builder units' and the SW ROD's HLT applications'
//! events).

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `swdaq run` of a configuration whose `[run]` section is `duration_s` and the output
/// directory `out`, the rest being `model`, saved as `config`; its summary.
fn run_into(out: &Path, config: &Path, duration_s: f64, model: &str) -> Value {
    std::fs::write(
        config,
        format!(
            "[run]\nduration_s = {duration_s}\nmetrics_addr = \"\"\noutput_dir = {out:?}\n{model}"
        ),
    )
    .unwrap();
    let done = common::swdaq_run(config);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    serde_json::from_slice(&done.stdout).unwrap()
}

/// The files whose name ends in `extension`, in any directory below `dir`.
fn files_under(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == extension) {
                files.push(path);
            }
        }
    }
    assert!(
        !files.is_empty(),
        "no .{extension} file under {}",
        dir.display()
    );
    files
}

/// Runs `model` into `dir/<name>`; the files it wrote whose name ends in `extension`.
fn run_model(
    dir: &Path,
    name: &str,
    duration_s: f64,
    model: &str,
    extension: &str,
) -> Vec<PathBuf> {
    let out = dir.join(name);
    run_into(&out, &dir.join(format!("{name}.toml")), duration_s, model);
    files_under(&out, extension)
}

/// The event builder's section: 2 FEDs, FED 1's fragments of `fed1_bytes`, `events` events.
fn evb_section(seed: u64, fed1_bytes: u32, events: u64) -> String {
    format!(
        "[evb]\nbuilder_units = 1\nmax_events = {events}\npaced = false\nseed = {seed}\n\
         min_free_bytes = 0\nrus = [[{{ id = 0, mean_bytes = 1024, spread_bytes = 128 }}, \
         {{ id = 1, mean_bytes = {fed1_bytes}, spread_bytes = 128 }}]]\n"
    )
}

/// Runs the event builder (2 FEDs, FED 1's fragments of `fed1_bytes`, 5000 events) into
/// `dir/<name>`; its FRD files.
fn run(dir: &Path, name: &str, seed: u64, fed1_bytes: u32) -> Vec<PathBuf> {
    run_model(dir, name, 30.0, &evb_section(seed, fed1_bytes, 5000), "raw")
}

fn dqm(args: &[&str], files: &[PathBuf]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .arg("dqm")
        .args(args)
        .args(files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (name, quality) of each verdict, in the order given.
fn flags(report: &Value) -> Vec<(String, String)> {
    report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let name = v["name"].as_str().unwrap().to_owned();
            (name, v["verdict"]["quality"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// The grown FED's size histogram is Bad and the other FED's is not, worst first.
fn only_the_grown_fed_is_bad(verdicts: &[(String, String)]) {
    assert_eq!(verdicts[0].1, "Bad", "{verdicts:?}");
    let bad: Vec<&str> = verdicts
        .iter()
        .filter(|(_, q)| q == "Bad")
        .map(|(n, _)| n.as_str())
        .collect();
    assert!(
        bad.contains(&"fed_size_0001") && !bad.contains(&"fed_size_0000"),
        "{verdicts:?}"
    );
}

#[test]
fn a_grown_fed_is_bad_against_the_reference_and_a_like_run_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("reference.json");
    let saved = dqm(
        &["--json", "--save", reference.to_str().unwrap()],
        &run(dir.path(), "reference", 1, 1024),
    );
    let events: u64 = saved["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["events"].as_u64().unwrap())
        .sum();
    assert_eq!(events, 5000);
    let names: Vec<&str> = saved["histograms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "event_size",
            "fed_size_0000",
            "fed_size_0001",
            "feds_per_event"
        ]
    );

    let against = ["--json", "--reference", reference.to_str().unwrap()];
    let like = flags(&dqm(&against, &run(dir.path(), "like", 2, 1024)));
    assert!(like.iter().all(|(_, q)| q != "Bad"), "{like:?}");

    only_the_grown_fed_is_bad(&flags(&dqm(&against, &run(dir.path(), "grown", 3, 2048))));

    // The reference is never replaced.
    let again = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["dqm", "--save", reference.to_str().unwrap()])
        .args(run(dir.path(), "again", 4, 1024))
        .output()
        .unwrap();
    assert!(!again.status.success());
}

/// The SW ROD's sections: one card, 16 e-links in two ROBs of 8, 1000 L1 accepts, `faults`
/// lines under `[swrod.felix.faults]`.
fn swrod_sections(seed: u64, faults: &str) -> String {
    format!(
        "[swrod]\nmax_file_mb = 1\ncards = 1\nrobs_per_card = 2\nl1a_rate_hz = 0.0\n\
         max_l1as = 1000\nhlt_accept_every = 1\n\
         [swrod.felix]\nelinks = 16\nchunk_min = 8\nchunk_max = 90\nseed = {seed}\n\
         [swrod.felix.faults]\n{faults}\n"
    )
}

/// Runs the SW ROD ([`swrod_sections`]) into `dir/<name>`; its EventStorage files.
fn swrod_run(dir: &Path, name: &str, seed: u64, faults: &str) -> Vec<PathBuf> {
    run_model(dir, name, 0.0, &swrod_sections(seed, faults), "data")
}

/// A SW ROD run whose e-link 3 dies is Bad against a clean reference on that ROB's missing
/// e-link map, which shows the dead e-link at its index; the other ROB's map is not Bad.
#[test]
fn a_dead_elink_shows_on_its_robs_map_and_is_bad_against_a_clean_run() {
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("swrod-reference.json");
    dqm(
        &["--json", "--save", reference.to_str().unwrap()],
        &swrod_run(dir.path(), "clean", 5, ""),
    );
    let files = swrod_run(
        dir.path(),
        "dead",
        6,
        "dead_elinks = [{ elink = 3, after_l1as = 200 }]",
    );
    let report = dqm(
        &["--json", "--reference", reference.to_str().unwrap()],
        &files,
    );
    let verdicts = flags(&report);
    let quality = |name: &str| {
        verdicts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, q)| q.clone())
    };
    assert_eq!(
        quality("missing_elinks_00710000").as_deref(),
        Some("Bad"),
        "{verdicts:?}"
    );
    assert_ne!(
        quality("missing_elinks_00710001").as_deref(),
        Some("Bad"),
        "{verdicts:?}"
    );
    // The map itself, from the saved set of the dead run: e-link 3 and nothing else.
    let saved = dir.path().join("dead.json");
    dqm(&["--json", "--save", saved.to_str().unwrap()], &files);
    let set: Value = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let counts = set["histograms"]["missing_elinks_00710000"]["counts"]
        .as_array()
        .unwrap();
    let hit: Vec<usize> = (0..counts.len())
        .filter(|&i| counts[i].as_u64() != Some(0))
        .collect();
    // Slot 0 is the underflow: e-link 3 is slot 4.
    assert_eq!(hit, [4], "{counts:?}");
    assert!(counts[4].as_u64().unwrap() >= 700);
}

/// Runs the chain (1 emulated link, periodic triggers, 1.5 s) into `dir/<name>` with
/// `sim` lines under `[emulator.sim]`; its HDF5 files.
fn chain_run(dir: &Path, name: &str, sim: &str) -> Vec<PathBuf> {
    let chain = format!(
        "[emulator]\nlinks = 1\n[emulator.sim]\n{sim}\n\
         [trigger.periodic]\nenabled = true\nrate_hz = 40.0\n"
    );
    run_model(dir, name, 1.5, &chain, "hdf5")
}

/// The verdict on histogram `name` in a report's (`swdaq dqm`'s, or a run's `dqm`) verdicts.
fn verdict(report: &Value, name: &str) -> Value {
    let verdicts = report["verdicts"].as_array().unwrap();
    match verdicts.iter().find(|v| v["name"] == name) {
        Some(v) => v["verdict"].clone(),
        None => panic!("no verdict on {name}: {report}"),
    }
}

/// With the link's channel 5 dead and 9 noisy (offline 1573 and 1577): both channel maps Bad,
/// each naming its channel.
fn the_dead_and_the_noisy_channel_are_bad_by_number(report: &Value) {
    for (map, channel) in [
        ("dead_channels_link_0000", 5),
        ("noisy_channels_link_0000", 9),
    ] {
        let flagged = verdict(report, map);
        assert_eq!(flagged["quality"], "Bad", "{report}");
        let why = flagged["why"].as_str().unwrap();
        assert!(
            why.starts_with(&format!("channel of the link {channel}:")),
            "{why}"
        );
    }
}

/// The chain's histograms: against a clean reference, a run with the link's channel 5 dead
/// and channel 9 noisy (offline channels 1573 and 1577: the emulator's link 0 starts at 1568)
/// flags both channel maps Bad, naming the channels; a run whose noise is raised 30% flags the
/// noise histogram Bad. The same seed throughout: it sets the channels' pedestals, which are
/// a detector's own and stable.
#[test]
fn a_dead_and_a_noisy_channel_and_raised_noise_are_bad_against_a_clean_chain_run() {
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("chain-reference.json");
    let clean = dqm(
        &["--json", "--save", reference.to_str().unwrap()],
        &chain_run(dir.path(), "clean", "seed = 1"),
    );
    let records: u64 = clean["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["events"].as_u64().unwrap())
        .sum();
    assert!(records >= 20, "{clean}");
    let against = [
        "--json",
        "--reference",
        reference.to_str().unwrap(),
        "--min-entries",
        "10",
    ];

    let faulty = dqm(
        &against,
        &chain_run(
            dir.path(),
            "faulty",
            "seed = 1\ndead_channels = [1573]\nnoisy_channels = [1577]",
        ),
    );
    the_dead_and_the_noisy_channel_are_bad_by_number(&faulty);

    let louder = dqm(
        &against,
        &chain_run(dir.path(), "louder", "seed = 1\nwhite_noise_sigma = 5.2"),
    );
    assert_eq!(
        verdict(&louder, "noise_rms_link_0000")["quality"],
        "Bad",
        "{louder}"
    );
    assert_eq!(
        verdict(&louder, "dead_channels_link_0000")["quality"],
        "Good",
        "{louder}"
    );
}

/// An event-builder run of `events` events with `[dqm]` (`dqm` its keys) into `out`, its
/// number the next free there; its summary.
fn online_run(out: &Path, seed: u64, fed1_bytes: u32, events: u64, dqm: &str) -> Value {
    let config = online_config(out, seed);
    let model = format!(
        "{}[dqm]\nenabled = true\nmax_core_share = 1.0\n{dqm}\n",
        evb_section(seed, fed1_bytes, events)
    );
    run_into(out, &config, 30.0, &model)
}

/// Where [`online_run`] writes the configuration of its run of `seed`.
fn online_config(out: &Path, seed: u64) -> PathBuf {
    out.with_extension(format!("{seed}.toml"))
}

/// The set a run saved online beside its data.
fn saved_set(out: &Path, summary: &Value) -> swdaq_dqm::HistSet {
    let file = summary["dqm"]["file"].as_str().unwrap();
    let run = summary["run_number"].as_u64().unwrap();
    assert_eq!(
        Path::new(file),
        out.join(format!("dqm_run{run:06}.h5")),
        "{summary}"
    );
    swdaq_dqm::hdf5_file::load(Path::new(file)).unwrap()
}

/// Online monitoring sampling every event saves the very set `swdaq dqm` computes over the
/// run's FRD files: one fill function for both.
#[test]
fn online_monitoring_of_every_event_saves_what_swdaq_dqm_computes_from_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("online");
    let summary = online_run(&out, 1, 1024, 5000, "sample_every = 1\nqueue = 8192");
    let dqm_summary = &summary["dqm"];
    assert_eq!(
        (
            dqm_summary["sampled"].as_u64(),
            dqm_summary["dropped"].as_u64()
        ),
        (Some(5000), Some(0)),
        "{summary}"
    );
    let online = saved_set(&out, &summary);
    let offline_file = dir.path().join("offline.h5");
    dqm(
        &["--json", "--save", offline_file.to_str().unwrap()],
        &files_under(&out, "raw"),
    );
    let offline = swdaq_dqm::hdf5_file::load(&offline_file).unwrap();
    assert_eq!(online.events, 5000);
    assert_eq!(online, offline);

    // The run registry lists the set among the run's files.
    let shown = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["runs", "show", "1", "--json", "--config"])
        .arg(online_config(&out, 1))
        .output()
        .unwrap();
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let saved = out.join("dqm_run000001.h5");
    assert!(
        shown["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"].as_str() == saved.to_str()),
        "{shown}"
    );
}

/// `reference_run` judges a run online against the set an earlier run saved in the same
/// output directory: a run whose FED 1 sends fragments twice as large has that FED's size
/// histogram Bad, a like run has none Bad.
#[test]
fn online_monitoring_flags_a_grown_fed_against_the_reference_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let every_other = "sample_every = 2\nqueue = 8192";
    let reference = online_run(&out, 1, 1024, 5000, every_other);
    let reference_run = reference["run_number"].as_u64().unwrap();
    assert_eq!(reference["dqm"]["sampled"].as_u64(), Some(2500));
    assert!(reference["dqm"]["verdicts"].is_null(), "{reference}");
    let against = format!("{every_other}\nreference_run = {reference_run}");

    let like = online_run(&out, 2, 1024, 5000, &against);
    let like = flags(&like["dqm"]);
    assert_eq!(like.len(), 4, "{like:?}");
    assert!(like.iter().all(|(_, q)| q == "Good"), "{like:?}");

    let grown = online_run(&out, 3, 2048, 5000, &against);
    only_the_grown_fed_is_bad(&flags(&grown["dqm"]));
}

/// A sample queue of one, every event offered, the builder flat out: samples are dropped and
/// counted, never waited for; every event is still written, and the saved set holds exactly
/// the samples taken.
#[test]
fn a_full_sample_queue_drops_counted_samples_and_the_run_completes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("full");
    let summary = online_run(&out, 1, 1024, 20_000, "sample_every = 1\nqueue = 1");
    assert_eq!(summary["written"].as_u64(), Some(20_000), "{summary}");
    let (sampled, dropped) = (
        summary["dqm"]["sampled"].as_u64().unwrap(),
        summary["dqm"]["dropped"].as_u64().unwrap(),
    );
    assert_eq!(sampled + dropped, 20_000, "{summary}");
    assert!(dropped > 0, "{summary}");
    assert_eq!(saved_set(&out, &summary).events, sampled);
}

/// Monitoring held to a thousandth of a core, every event offered, the builder flat out:
/// samples beyond its share are skipped and counted, never waited for; every event is still
/// written, and the saved set holds exactly the samples read.
#[test]
fn monitoring_over_its_share_of_a_core_skips_counted_samples_and_the_run_completes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("budget");
    let model = format!(
        "{}[dqm]\nenabled = true\nsample_every = 1\nqueue = 8192\nmax_core_share = 0.001\n",
        evb_section(1, 1024, 20_000)
    );
    let summary = run_into(&out, &online_config(&out, 1), 30.0, &model);
    assert_eq!(summary["written"].as_u64(), Some(20_000), "{summary}");
    let count = |key: &str| summary["dqm"][key].as_u64().unwrap();
    assert_eq!(count("sampled") + count("dropped"), 20_000, "{summary}");
    assert!(count("skipped") > 0, "{summary}");
    assert_eq!(
        saved_set(&out, &summary).events,
        count("sampled") - count("skipped") - count("unreadable")
    );
}

/// A reference run with no saved set is refused before the run starts, naming the file.
#[test]
fn a_missing_reference_run_is_refused_before_data_taking() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("none");
    let config = dir.path().join("none.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nmetrics_addr = \"\"\noutput_dir = {out:?}\n{}[dqm]\nenabled = true\nreference_run = 41\n",
            evb_section(1, 1024, 100)
        ),
    )
    .unwrap();
    let done = common::swdaq_run(&config);
    assert!(!done.status.success());
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(stderr.contains("dqm_run000041.h5"), "{stderr}");
    assert!(files_under_or_none(&out, "raw"), "no data taken: {stderr}");
}

/// Whether no file ending in `extension` is below `dir` (or `dir` does not exist).
fn files_under_or_none(dir: &Path, extension: &str) -> bool {
    !dir.exists()
        || std::fs::read_dir(dir).unwrap().all(|e| {
            let path = e.unwrap().path();
            if path.is_dir() {
                files_under_or_none(&path, extension)
            } else {
                path.extension().is_none_or(|e| e != extension)
            }
        })
}

/// The SW ROD's online monitoring of every stored event, with an e-link dying part-way,
/// saves the very set `swdaq dqm` computes over the run's EventStorage files.
#[test]
fn swrod_online_monitoring_of_every_event_saves_what_swdaq_dqm_computes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("swrod-online");
    let model = format!(
        "{}[dqm]\nenabled = true\nsample_every = 1\nqueue = 2048\nmax_core_share = 1.0\n",
        swrod_sections(7, "dead_elinks = [{ elink = 3, after_l1as = 200 }]")
    );
    let summary = run_into(&out, &dir.path().join("swrod-online.toml"), 0.0, &model);
    assert_eq!(summary["dqm"]["dropped"].as_u64(), Some(0), "{summary}");
    let online = saved_set(&out, &summary);
    let offline_file = dir.path().join("swrod-offline.h5");
    dqm(
        &["--json", "--save", offline_file.to_str().unwrap()],
        &files_under(&out, "data"),
    );
    assert_eq!(online.events, 1000);
    assert_eq!(online, swdaq_dqm::hdf5_file::load(&offline_file).unwrap());
}

/// The chain's trigger: 40 records a second, none from the self-trigger.
const PERIODIC_ONLY: &str = "[trigger.periodic]\nenabled = true\nrate_hz = 40.0\n\
    [trigger.multiplicity]\nenabled = false\n[trigger.adc_sum]\nenabled = false\n\
    [trigger.track]\nenabled = false";

/// A chain run like [`chain_run`]'s with `[dqm]` (`dqm` its keys, every record sampled) into
/// `out`, its number the next free there; its summary. Periodic records only: a noisy channel
/// would otherwise make the self-trigger fire on it, and the run's load with it.
fn chain_online_run(out: &Path, name: &str, sim: &str, dqm: &str) -> Value {
    let model = format!(
        "[emulator]\nlinks = 1\n[emulator.sim]\n{sim}\n{PERIODIC_ONLY}\n\
         [dqm]\nenabled = true\nsample_every = 1\nmin_entries = 10\nmax_core_share = 1.0\n{dqm}\n"
    );
    run_into(
        out,
        &out.with_extension(format!("{name}.toml")),
        1.5,
        &model,
    )
}

/// The chain online: a clean reference run saves the set `swdaq dqm` computes over its HDF5
/// files; against it, a run with the link's channel 5 dead and 9 noisy has both channel maps
/// Bad, each naming its channel, in its summary, and saves its set; a clean run of the same
/// detector has none Bad.
#[test]
fn chain_online_monitoring_flags_a_dead_and_a_noisy_channel_by_number() {
    let _alone = not_beside_a_topology();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("chain-online");
    // A noise run, no tracks or blips: the ADC distributions of two like runs, each of some
    // 10^6 samples, then match to the chi2's precision (where particles fell differs).
    let noise_run = "seed = 1\ntrack_rate_hz = 0.0\nblip_rate_hz = 0.0";
    let reference = chain_online_run(&out, "reference", noise_run, "");
    let reference_run = reference["run_number"].as_u64().unwrap();
    let sampled = reference["dqm"]["sampled"].as_u64().unwrap();
    assert!(sampled >= 20, "{reference}");
    assert_eq!(reference["dqm"]["dropped"].as_u64(), Some(0), "{reference}");
    let online = saved_set(&out, &reference);
    assert_eq!(online.events, sampled);
    let offline_file = dir.path().join("chain-offline.h5");
    dqm(
        &["--json", "--save", offline_file.to_str().unwrap()],
        &files_under(&out, "hdf5"),
    );
    assert_eq!(online, swdaq_dqm::hdf5_file::load(&offline_file).unwrap());

    let against = format!("reference_run = {reference_run}");
    let faulty = chain_online_run(
        &out,
        "faulty",
        &format!("{noise_run}\ndead_channels = [1573]\nnoisy_channels = [1577]"),
        &against,
    );
    the_dead_and_the_noisy_channel_are_bad_by_number(&faulty["dqm"]);
    saved_set(&out, &faulty);

    let clean = chain_online_run(&out, "clean", noise_run, &against);
    let bad: Vec<_> = (flags(&clean["dqm"]).into_iter())
        .filter(|(_, q)| q == "Bad")
        .collect();
    assert!(bad.is_empty(), "{bad:?}");
    assert!(!flags(&clean["dqm"]).is_empty(), "{clean}");
}

/// Held by the topology's test and by the test whose clean run must judge Good: a topology's
/// seven processes beside it on two cores skewed the clean run's ADC distribution enough to
/// judge it Bad.
fn not_beside_a_topology() -> std::sync::MutexGuard<'static, ()> {
    static TOPOLOGY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TOPOLOGY.lock().unwrap_or_else(|e| e.into_inner())
}

/// The chain as applications with `[dqm]`: the process running `swdaq run` monitors the
/// records both builders publish on their `record_stream`, and saves the set beside the run's
/// data as a one-process run does; every record a builder published is either sampled or
/// counted dropped.
#[test]
fn a_chain_topology_is_monitored_from_its_builders_record_streams() {
    let _alone = not_beside_a_topology();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("chain-apps");
    // The streams' ports held while the inboxes' are chosen: no two the same.
    let (held, streams) = stream_keys("record_stream", 2);
    let apps = common::loopback_topology_apps(&[
        ("readout-0", "readout", "links = [0]"),
        ("readout-1", "readout", "links = [1]"),
        ("trigger", "trigger", ""),
        ("dfo", "dfo", ""),
        ("builder-0", "builder", &streams[0]),
        ("builder-1", "builder", &streams[1]),
    ]);
    drop(held);
    let model = format!(
        "[emulator]\nlinks = 2\n{PERIODIC_ONLY}\n\
         [dqm]\nenabled = true\nsample_every = 1\nqueue = 1024\nmax_core_share = 1.0\n\
         [topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\nsend_timeout_ms = 500\n{apps}"
    );
    let summary = run_into(&out, &dir.path().join("chain-apps.toml"), 3.0, &model);
    let dqm = &summary["dqm"];
    let sampled = dqm["sampled"].as_u64().unwrap();
    let decisions = summary["trigger"]["decisions"].as_u64().unwrap();
    assert!(sampled >= 20, "{summary}");
    assert_eq!(
        sampled + dqm["dropped"].as_u64().unwrap(),
        decisions,
        "every record published: {dqm}"
    );
    assert_eq!(dqm["unreadable"].as_u64(), Some(0), "{dqm}");
    let saved = saved_set(&out, &summary);
    assert_eq!(saved.events, sampled);
    for link in [0, 1] {
        let name = format!("pedestal_link_{link:04}");
        let h = saved
            .histograms
            .get(&name)
            .unwrap_or_else(|| panic!("{name}"));
        assert!(h.entries() > 0, "{name}");
    }
}

/// `n` free loopback ports for sample streams, held (until the listeners are dropped) while
/// the topology's inboxes are chosen, as `KEY = "tcp://127.0.0.1:PORT"` lines.
fn stream_keys(key: &str, n: usize) -> (Vec<std::net::TcpListener>, Vec<String>) {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let lines = (held.iter())
        .map(|l| {
            let port = l.local_addr().unwrap().port();
            format!("{key} = \"tcp://127.0.0.1:{port}\"")
        })
        .collect();
    (held, lines)
}

/// What a topology's monitoring took in, from its summary: every event published was
/// either sampled or counted dropped (`published` of them), some were sampled, none was
/// unreadable, and the saved set holds exactly the samples.
fn streamed_set(out: &Path, summary: &Value, published: u64) -> swdaq_dqm::HistSet {
    let dqm = &summary["dqm"];
    let sampled = dqm["sampled"].as_u64().unwrap();
    assert!(sampled >= 20, "{summary}");
    assert_eq!(
        sampled + dqm["dropped"].as_u64().unwrap(),
        published,
        "every event published: {dqm}"
    );
    assert_eq!(dqm["unreadable"].as_u64(), Some(0), "{dqm}");
    let saved = saved_set(out, summary);
    assert_eq!(saved.events, sampled);
    saved
}

/// The event builder as applications with `[dqm]`: the process running `swdaq run` monitors
/// the events its builder unit publishes on its `event_stream` and saves the set beside the
/// run's data; FED 1, sending fragments three times FED 0's size, shows it in its own size
/// histogram.
#[test]
fn an_event_builder_topology_is_monitored_from_its_builder_units_event_streams() {
    let _alone = not_beside_a_topology();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("evb-apps");
    let (held, streams) = stream_keys("event_stream", 1);
    let apps = common::loopback_topology_apps(&[("evm", "evm", ""), ("bu-0", "bu", &streams[0])]);
    drop(held);
    let events = 2000;
    let model = format!(
        "{}[dqm]\nenabled = true\nsample_every = 1\nqueue = 4096\nmax_core_share = 1.0\n\
         [topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\nsend_timeout_ms = 500\n{apps}",
        evb_section(3, 3072, events)
    );
    // Applications wait for the stop once `max_events` is reached: the run lasts its
    // duration, long enough for them.
    let summary = run_into(&out, &dir.path().join("evb-apps.toml"), 3.0, &model);
    let saved = streamed_set(&out, &summary, events);
    let mean = |name: &str| {
        let h = saved
            .histograms
            .get(name)
            .unwrap_or_else(|| panic!("{name}"));
        assert_eq!(h.entries(), saved.events, "{name}");
        h.mean_and_rms().unwrap().0
    };
    let (fed0, fed1) = (mean("fed_size_0000"), mean("fed_size_0001"));
    assert!(fed1 > 2.5 * fed0, "FED 1 {fed1} bytes, FED 0 {fed0}");
    assert!(mean("event_size") > fed0 + fed1, "{summary}");
    assert_eq!(saved.histograms["feds_per_event"].bins()[2], saved.events);
}

/// The SW ROD as applications with `[dqm]`: the process running `swdaq run` monitors the
/// events its HLT application publishes on its `event_stream`; e-link 3, dying after 200 L1
/// accepts, shows on its ROB's missing e-link map at its index and nowhere else.
#[test]
fn a_swrod_topology_is_monitored_from_its_hlt_applications_event_streams() {
    let _alone = not_beside_a_topology();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("swrod-apps");
    let (held, streams) = stream_keys("event_stream", 1);
    let apps = common::loopback_topology_apps(&[
        ("swrod-0", "swrod", "cards = [0]"),
        ("hltsv", "hltsv", ""),
        ("hlt-0", "hlt", &streams[0]),
    ]);
    drop(held);
    let model = format!(
        "{}[dqm]\nenabled = true\nsample_every = 1\nqueue = 2048\nmax_core_share = 1.0\n\
         [topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\nsend_timeout_ms = 500\n{apps}",
        // Applications follow the L1A clock, which needs a rate: 1000 L1 accepts in a second.
        swrod_sections(7, "dead_elinks = [{ elink = 3, after_l1as = 200 }]")
            .replace("l1a_rate_hz = 0.0", "l1a_rate_hz = 1000.0")
    );
    let summary = run_into(&out, &dir.path().join("swrod-apps.toml"), 30.0, &model);
    let saved = streamed_set(&out, &summary, 1000);
    let hist = |name: &str| {
        saved
            .histograms
            .get(name)
            .unwrap_or_else(|| panic!("{name}"))
    };
    // E-link 3, hit in (nearly) every event sampled after its death.
    let dead = hist("missing_elinks_00710000").bins();
    let hit: Vec<usize> = (0..dead.len()).filter(|&i| dead[i] != 0).collect();
    assert_eq!(hit, [3], "{dead:?}");
    assert!(
        dead[3] * 10 >= saved.events * 7,
        "{dead:?} of {}",
        saved.events
    );
    let other = hist("missing_elinks_00710001");
    assert!(other.bins().iter().all(|&c| c == 0), "{:?}", other.bins());
    for rob in [
        "rob_data_size_00710000",
        "rob_data_size_00710001",
        "event_size",
    ] {
        assert_eq!(hist(rob).entries(), saved.events, "{rob}");
    }
}

/// `[dqm]` with an event-builder topology whose builder unit has no `event_stream` is
/// refused before anything starts, naming the key and the unit.
#[test]
fn dqm_in_an_event_builder_topology_without_event_streams_is_refused_naming_the_unit() {
    let dir = tempfile::tempdir().unwrap();
    let apps = common::loopback_topology_apps(&[("evm", "evm", ""), ("bu-0", "bu", "")]);
    let config = dir.path().join("evb-apps.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nmetrics_addr = \"\"\noutput_dir = {:?}\n{}[dqm]\nenabled = true\n[topology]\n{apps}",
            dir.path().join("out"),
            evb_section(1, 1024, 10)
        ),
    )
    .unwrap();
    let done = common::swdaq_run(&config);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(!done.status.success());
    assert!(
        stderr.contains("topology.apps.event_stream: bu-0"),
        "{stderr}"
    );
}
