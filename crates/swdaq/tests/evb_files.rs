//! The event builder reading FED raw files end to end, through the binary: `swdaq gen
//! --format fed` with every fault kind on, `swdaq run` of an `[evb]` configuration with
//! `[evb.input] kind = "file"`, then `swdaq inspect --json` of every FRD file. Every event is
//! in the files once, each FED fragment in it is byte for byte the generated file's record,
//! and the summary's per-FED failures are the generator's truth by kind.

#[path = "common/fed_streams.rs"]
mod fed_streams;
use fed_streams::{
    FEDS, built_events, expected_failures, fed_specs, generate, good_fragments, swdaq, truth,
    two_readout_units, write_generator_config,
};
use serde_json::Value;

const EVENTS: u64 = 600;

#[test]
fn fed_files_build_into_frd_files_with_every_fault_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let gen_dir = dir.path().join("gen");
    let feds = fed_specs(256);
    let seconds = write_generator_config(dir.path(), &feds, 10000.0, EVENTS);
    generate(dir.path(), &seconds, &["--out", "gen"]);
    std::fs::write(
        dir.path().join("evb.toml"),
        format!(
            "duration_s = 0\nmetrics_addr = \"\"\n[evb]\nbuilder_units = 2\nevents_per_file = 100\n\
             min_free_bytes = 0\noutput = {:?}\n{}\n\
             [evb.input]\nkind = \"file\"\ndirectory = {:?}\n",
            dir.path().join("out"),
            two_readout_units(&feds),
            gen_dir,
        ),
    )
    .unwrap();
    let summary: Value = serde_json::from_str(&swdaq(
        &["run", "--config", "evb.toml", "--json"],
        dir.path(),
    ))
    .unwrap();

    // Every event once, its FED fragments exactly the good records each FED's file holds.
    let faults = truth(&gen_dir);
    let good = good_fragments(&gen_dir, &faults, EVENTS);
    let built = built_events(dir.path(), &dir.path().join("out"));
    assert!(built.keys().copied().eq(1..=EVENTS), "events built");
    for (&event, fragments) in &built {
        let expected: Vec<(u16, Vec<u8>)> = good
            .range((event, 0)..(event + 1, 0))
            .map(|(&(_, fed), bytes)| (fed, bytes.clone()))
            .collect();
        assert_eq!(fragments, &expected, "event {event}");
    }

    // Per FED, each failure counter is the truth's count of its kind.
    let reported = summary["feds"].as_array().unwrap();
    assert_eq!(reported.len(), usize::from(FEDS));
    for fed in reported {
        let id = fed["fed"].as_u64().unwrap() as u16;
        let expected = expected_failures(&faults, id);
        for (name, count) in fed["failures"].as_object().unwrap() {
            let want = expected.get(name.as_str()).copied().unwrap_or(0);
            assert_eq!(count.as_u64().unwrap(), want, "FED {id} {name}");
        }
        let good = EVENTS - expected.values().sum::<u64>();
        assert_eq!(fed["good"].as_u64().unwrap(), good, "FED {id}");
    }
    assert_eq!(summary["built"].as_u64().unwrap(), EVENTS);
    assert_eq!(summary["lost"].as_u64().unwrap(), 0);
}
