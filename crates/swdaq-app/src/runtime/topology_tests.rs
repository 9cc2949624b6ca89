//! The checks every topology gets, whatever its model (each model tests its own kinds in its
//! folder).

use super::*;

const SPOKE: Field = Field {
    key: "spokes",
    elsewhere: "only hubs have spokes",
};

fn kinds() -> [KindRule<'static>; 2] {
    [
        KindRule {
            name: "hub",
            fields: &[SPOKE],
            at_least: 1,
            at_most: 1,
        },
        KindRule {
            name: "leaf",
            fields: &[],
            at_least: 1,
            at_most: usize::MAX,
        },
    ]
}

fn topology() -> TopologySection {
    TopologySection {
        apps: vec![
            App::new("hub", "hub", "tcp://127.0.0.1:7100").with("spokes", vec![1, 2]),
            App::new("leaf-0", "leaf", "tcp://127.0.0.1:7101"),
            App::new("leaf-1", "leaf", "tcp://127.0.0.1:7102"),
        ],
        ..Default::default()
    }
}

#[test]
fn a_complete_topology_is_valid_and_empty_means_one_process() {
    topology().validate(&kinds()).unwrap();
    assert!(!TopologySection::default().is_distributed());
    TopologySection::default().validate(&kinds()).unwrap();
    let spokes: Vec<u32> = topology().apps[0].field("spokes").unwrap();
    assert_eq!(spokes, [1, 2]);
    let none: Vec<u32> = topology().apps[1].field("spokes").unwrap();
    assert!(none.is_empty());
}

/// A kind's own keys go through the file and back as they were.
#[test]
fn a_topology_reads_back_from_its_toml() {
    let t = topology();
    let text = toml::to_string(&t).unwrap();
    assert_eq!(toml::from_str::<TopologySection>(&text).unwrap(), t);
}

#[test]
fn every_mistake_names_its_key() {
    type Change = Box<dyn Fn(&mut TopologySection)>;
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|t| t.apps.remove(0).name.clear()),
            "0 hub applications",
        ),
        (
            Box::new(|t| t.apps[2].name = "leaf-0".into()),
            "appears twice",
        ),
        (Box::new(|t| t.apps[2].name = "a b".into()), "apps.name"),
        (
            Box::new(|t| t.apps[2].address = t.apps[1].address.clone()),
            "used twice",
        ),
        (
            Box::new(|t| t.apps[2].address = "127.0.0.1:1".into()),
            "apps.address",
        ),
        (Box::new(|t| t.apps[2].host = "nowhere".into()), "no host"),
        (
            Box::new(|t| {
                t.apps[1]
                    .fields
                    .insert("spokes".into(), 3.into())
                    .map_or((), drop)
            }),
            "topology.apps.spokes: leaf-0: only hubs have spokes",
        ),
        (
            Box::new(|t| {
                t.apps[1]
                    .fields
                    .insert("adress".into(), "x".into())
                    .map_or((), drop)
            }),
            "topology.apps.adress: leaf-0: no such key for leaf applications (theirs: name, kind, host, address, metrics_addr)",
        ),
        (Box::new(|t| t.peer_timeout_ms = 100), "peer_timeout_ms"),
        (
            Box::new(|t| t.apps[2].kind = "rim".into()),
            "leaf-1: rim applications do not belong in this run (kinds here: hub, leaf)",
        ),
        (
            Box::new(|t| t.apps[2].kind = "hub".into()),
            "2 hub applications; there must be exactly one",
        ),
    ];
    for (change, expected) in cases {
        let mut t = topology();
        change(&mut t);
        let e = t.validate(&kinds()).unwrap_err().to_string();
        assert!(e.contains(expected), "{e:?} should say {expected:?}");
    }
}

#[test]
fn a_key_of_the_wrong_type_is_named() {
    let app = App::new("hub", "hub", "tcp://127.0.0.1:1").with("spokes", "many");
    let e = app.field::<Vec<u32>>("spokes").unwrap_err().to_string();
    assert!(e.contains("topology.apps.spokes: hub:"), "{e}");
}
