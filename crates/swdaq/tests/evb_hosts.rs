//! The event builder on several hosts from one topology file: three network namespaces made
//! by this test (veth pairs to a bridge in a fourth, addresses in 192.0.2.0/24), readout
//! units `ru-1` and `ru-2` on two of them, the event manager (readout unit 0) and both
//! builder units on the third, all started by one `swdaq run` through `ip netns exec`
//! launchers, so every super-fragment of `ru-1` and `ru-2` crosses the bridge. The files are
//! read back with `swdaq inspect`. Everything is removed at the end, also on failure;
//! without CAP_NET_ADMIN (or without `ip`) the test says so and skips. Traffic stays inside
//! the namespaces (no `/metrics` listener, inboxes on the namespaces' addresses only).

#[path = "common/evb.rs"]
mod evb;
// Its drill checks serve the kill drills only.
#[path = "common/summary.rs"]
mod summary;
// Its signal-sending part serves the kill drills only.
#[allow(dead_code)]
#[path = "common/launched.rs"]
mod launched;
#[path = "common/netns.rs"]
mod netns;
use launched::Run;
use netns::Hosts;
use std::time::Instant;

#[test]
fn one_topology_file_builds_events_from_readout_units_on_two_other_hosts() {
    let started = Instant::now();
    let Some(hosts) = netns::hosts_or_skip("eb", 3) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let apps = [
        ("ru-1", "ru", 1),
        ("ru-2", "ru", 2),
        ("evm", "evm", 3),
        ("bu-0", "bu", 3),
        ("bu-1", "bu", 3),
    ];
    let mut topology = hosts.topology();
    for (port, (name, kind, host)) in (7500..).zip(apps) {
        topology += &format!(
            "[[topology.apps]]\nname = \"{name}\"\nkind = \"{kind}\"\nhost = \"h{host}\"\n\
             address = \"tcp://{}:{port}\"\n",
            Hosts::address(host)
        );
    }
    let run = Run::start(&evb::config(dir.path(), 3.0, 3, &topology));
    let s = run.summary();
    let names: Vec<&str> = apps.iter().map(|a| a.0).collect();
    evb::assert_every_event_written_once(dir.path(), &s, &names, 12);
    // Each application ran on its host.
    for (name, _, host) in apps {
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
        started.elapsed().as_secs() < 20,
        "took {:?}",
        started.elapsed()
    );
}
