//! The topology section's checks, model by model.

use super::*;

fn app(name: &str, kind: AppKind, port: u16, links: &[u32]) -> App {
    App {
        name: name.into(),
        kind,
        host: String::new(),
        address: format!("tcp://127.0.0.1:{port}"),
        links: links.to_vec(),
        cards: Vec::new(),
        record_stream: String::new(),
        record_stream_every: 1,
        metrics_addr: String::new(),
    }
}

fn topology() -> TopologySection {
    TopologySection {
        apps: vec![
            app("ro-0", AppKind::Readout, 7100, &[0, 1]),
            app("ro-1", AppKind::Readout, 7101, &[2, 3]),
            app("trigger", AppKind::Trigger, 7102, &[]),
            app("dfo", AppKind::Dfo, 7103, &[]),
            app("builder-0", AppKind::Builder, 7104, &[]),
        ],
        ..Default::default()
    }
}

#[test]
fn a_complete_topology_is_valid_and_empty_means_one_process() {
    topology().validate(4).unwrap();
    assert!(!TopologySection::default().is_distributed());
    TopologySection::default().validate(4).unwrap();
}

fn evb_topology() -> TopologySection {
    TopologySection {
        apps: vec![
            app("evm", AppKind::Evm, 7200, &[]),
            app("ru-1", AppKind::Ru, 7201, &[]),
            app("bu-0", AppKind::Bu, 7202, &[]),
            app("bu-1", AppKind::Bu, 7203, &[]),
        ],
        ..Default::default()
    }
}

#[test]
fn an_event_builder_topology_has_one_evm_and_the_configured_units() {
    let t = evb_topology();
    t.validate_evb(2, 2).unwrap();
    let e = t.validate_evb(3, 2).unwrap_err().to_string();
    assert!(
        e.contains("1 ru applications; there must be exactly 2"),
        "{e}"
    );
    let e = t.validate_evb(2, 1).unwrap_err().to_string();
    assert!(e.contains("bu applications"), "{e}");
    let mut t = evb_topology();
    t.apps[1].kind = AppKind::Builder;
    let e = t.validate_evb(2, 2).unwrap_err().to_string();
    assert!(e.contains("do not belong"), "{e}");
    let mut t = evb_topology();
    t.apps[0].kind = AppKind::Ru;
    assert!(
        t.validate_evb(3, 2)
            .unwrap_err()
            .to_string()
            .contains("evm")
    );
}

#[test]
fn a_sw_rod_topology_reads_every_card_once_with_one_supervisor() {
    let swrod = |name: &str, port, cards: &[u16]| App {
        cards: cards.to_vec(),
        ..app(name, AppKind::Swrod, port, &[])
    };
    let t = TopologySection {
        apps: vec![
            swrod("swrod-0", 7300, &[0, 2]),
            swrod("swrod-1", 7301, &[1]),
            app("hltsv", AppKind::Hltsv, 7302, &[]),
            app("hlt-0", AppKind::Hlt, 7303, &[]),
        ],
        ..Default::default()
    };
    t.validate_swrod(3).unwrap();
    let fails = |change: &dyn Fn(&mut TopologySection), cards, expected: &str| {
        let mut t = t.clone();
        change(&mut t);
        let e = t.validate_swrod(cards).unwrap_err().to_string();
        assert!(e.contains(expected), "{e:?} should say {expected:?}");
    };
    fails(&|_| {}, 4, "cards [3] are read out by no swrod");
    fails(&|_| {}, 2, "card 2 does not exist");
    fails(
        &|t| t.apps[1].cards = vec![1, 2],
        3,
        "card 2 is read out twice",
    );
    fails(&|t| t.apps[2].cards = vec![2], 3, "only swrod applications");
    fails(
        &|t| t.apps[2].kind = AppKind::Hlt,
        3,
        "0 hltsv applications",
    );
    fails(&|t| t.apps[3].kind = AppKind::Bu, 3, "do not belong");
}

#[test]
fn every_mistake_names_its_key() {
    type Change = Box<dyn Fn(&mut TopologySection)>;
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|t| t.apps[1].links = vec![1, 2, 3]),
            "read out twice",
        ),
        (
            Box::new(|t| t.apps[1].links = vec![2]),
            "read out by no application",
        ),
        (
            Box::new(|t| t.apps[1].links = vec![2, 3, 9]),
            "does not exist",
        ),
        (
            Box::new(|t| t.apps.remove(3).name.clear()),
            "dfo applications",
        ),
        (
            Box::new(|t| t.apps[2].name = "ro-0".into()),
            "appears twice",
        ),
        (Box::new(|t| t.apps[2].name = "a b".into()), "apps.name"),
        (
            Box::new(|t| t.apps[3].address = t.apps[2].address.clone()),
            "used twice",
        ),
        (
            Box::new(|t| t.apps[3].address = "127.0.0.1:1".into()),
            "apps.address",
        ),
        (Box::new(|t| t.apps[4].host = "nowhere".into()), "no host"),
        (Box::new(|t| t.apps[2].links = vec![0]), "only readout"),
        (
            Box::new(|t| t.apps[0].record_stream = "tcp://x:1".into()),
            "only builders",
        ),
        (Box::new(|t| t.peer_timeout_ms = 100), "peer_timeout_ms"),
        (Box::new(|t| t.apps[4].kind = AppKind::Bu), "do not belong"),
    ];
    for (change, expected) in cases {
        let mut t = topology();
        change(&mut t);
        let e = t.validate(4).unwrap_err().to_string();
        assert!(e.contains(expected), "{e:?} should say {expected:?}");
    }
}
