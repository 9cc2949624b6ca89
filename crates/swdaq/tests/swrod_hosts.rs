//! The SW ROD on several hosts from one topology file: three network namespaces made by this
//! test (veth pairs to a bridge in a fourth, addresses in 192.0.2.0/24), a `swrod`
//! application (one FELIX card each) on each of two of them, the HLT supervisor and both HLT
//! applications on the third, all started by one `swdaq run` through `ip netns exec`
//! launchers, so every ROB fragment crosses the bridge. The files are read back with
//! `swdaq inspect`. Everything is removed at the end, also on failure; without CAP_NET_ADMIN
//! (or without `ip`) the test says so and skips. Traffic stays inside the namespaces (no
//! `/metrics` listener, inboxes on the namespaces' addresses only).

// Its signal-sending part serves the kill drills only.
#[allow(dead_code)]
#[path = "common/launched.rs"]
mod launched;
#[path = "common/netns.rs"]
mod netns;
// Its drill checks serve the kill drills only.
#[path = "common/summary.rs"]
mod summary;
#[path = "common/swrod.rs"]
mod swrod;
use launched::Run;
use netns::Hosts;
use std::time::Instant;

#[test]
fn one_topology_file_builds_events_from_sw_rods_on_two_other_hosts() {
    let started = Instant::now();
    let Some(hosts) = netns::hosts_or_skip("sr", 3) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let apps = [
        ("swrod-0", "swrod", 1, "cards = [0]"),
        ("swrod-1", "swrod", 2, "cards = [1]"),
        ("hltsv", "hltsv", 3, ""),
        ("hlt-0", "hlt", 3, ""),
        ("hlt-1", "hlt", 3, ""),
    ];
    let mut topology = hosts.topology();
    for (port, (name, kind, host, cards)) in (7600..).zip(apps) {
        topology += &format!(
            "[[topology.apps]]\nname = \"{name}\"\nkind = \"{kind}\"\nhost = \"h{host}\"\n\
             address = \"tcp://{}:{port}\"\n{cards}\n",
            Hosts::address(host)
        );
    }
    let s = Run::start(&swrod::config(dir.path(), 3.0, &topology)).summary();
    let names: Vec<&str> = apps.iter().map(|a| a.0).collect();
    swrod::assert_every_event_stored_once(dir.path(), &s, &names);
    // Each application ran on its host.
    for (name, _, host, _) in apps {
        let app = s["apps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap();
        assert_eq!(app["host"], format!("h{host}"), "{s}");
    }
    assert!(hosts.remove(), "namespaces removed");
    assert!(
        started.elapsed().as_secs() < 25,
        "took {:?}",
        started.elapsed()
    );
}
