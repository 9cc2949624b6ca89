//! Several hosts from one topology file: three network namespaces made by this test (veth
//! pairs to a bridge in a fourth, addresses in 192.0.2.0/24), readout applications on two
//! of them, trigger, orchestrator and builders on the third, all started by one `swdaq run`
//! through `ip netns exec` launchers. Everything is removed at the end; without
//! CAP_NET_ADMIN (or without `ip`) the test says so and skips. Traffic stays inside the
//! namespaces.

#[path = "common/netns.rs"]
mod netns;
use serde_json::Value;
use std::process::Command;

#[test]
fn one_topology_file_boots_applications_on_three_hosts() {
    let Some(hosts) = netns::hosts_or_skip("dq", 3) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_swdaq");
    let mut t = format!(
        "[run]\nduration_s = 5.0\nmetrics_addr = \"\"\noutput_dir = {:?}\n\
         [emulator]\nlinks = 2\n[trigger.periodic]\nrate_hz = 10.0\n",
        dir.path().join("data")
    );
    t += &hosts.topology();
    let apps = [
        ("readout-0", "readout", 1, 7400, "links = [0]"),
        ("readout-1", "readout", 2, 7400, "links = [1]"),
        ("trigger", "trigger", 3, 7401, ""),
        ("dfo", "dfo", 3, 7402, ""),
        ("builder-0", "builder", 3, 7403, ""),
        ("builder-1", "builder", 3, 7404, ""),
    ];
    for (name, kind, host, port, links) in apps {
        t += &format!(
            "[[topology.apps]]\nname = \"{name}\"\nkind = \"{kind}\"\nhost = \"h{host}\"\n\
             address = \"tcp://192.0.2.{host}:{port}\"\n{links}\n"
        );
    }
    let config = dir.path().join("hosts.toml");
    std::fs::write(&config, t).unwrap();
    let out = Command::new(exe)
        .args(["run", "--json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let decisions = s["trigger"]["decisions"].as_u64().unwrap();
    assert!(decisions >= 20, "{s}");
    assert_eq!(s["records"]["complete"].as_u64(), Some(decisions), "{s}");
    for name in [
        "readout-0",
        "readout-1",
        "trigger",
        "dfo",
        "builder-0",
        "builder-1",
    ] {
        assert!(stderr.contains(&format!("swdaq run: {name} (")), "{stderr}");
    }
    assert!(
        stderr.contains(" on h1") && stderr.contains(" on h3"),
        "{stderr}"
    );
    assert!(hosts.remove(), "namespaces removed");
}
