//! Several hosts from one topology file: three network namespaces made by this test (veth
//! pairs to a bridge in a fourth, addresses in 192.0.2.0/24), readout applications on two
//! of them, trigger, orchestrator and builders on the third, all started by one `swdaq run`
//! through `ip netns exec` launchers. Everything is removed at the end; without
//! CAP_NET_ADMIN (or without `ip`) the test says so and skips. Traffic stays inside the
//! namespaces.

use serde_json::Value;
use std::process::Command;

/// Runs `ip ARGS`, in namespace `ns` when given.
fn ip(ns: Option<&str>, args: &[&str]) -> Result<(), String> {
    let mut argv: Vec<&str> = Vec::new();
    if let Some(ns) = ns {
        argv.extend(["netns", "exec", ns, "ip"]);
    }
    argv.extend(args);
    let out = Command::new("ip")
        .args(&argv)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            argv.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Namespaces this test made; removed (with their links) when dropped.
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = ip(None, &["netns", "del", ns]);
        }
    }
}

/// Three hosts `<prefix>h1..h3` at 192.0.2.1..3 on a bridge in `<prefix>br`.
fn make_hosts(prefix: &str) -> Result<Namespaces, String> {
    let mut made = Namespaces(Vec::new());
    let bridge_ns = format!("{prefix}br");
    ip(None, &["netns", "add", &bridge_ns])?;
    made.0.push(bridge_ns.clone());
    ip(Some(&bridge_ns), &["link", "add", "br0", "type", "bridge"])?;
    ip(Some(&bridge_ns), &["link", "set", "br0", "up"])?;
    for i in 1..=3 {
        let host = format!("{prefix}h{i}");
        ip(None, &["netns", "add", &host])?;
        made.0.push(host.clone());
        let (a, b) = (format!("{prefix}a{i}"), format!("{prefix}b{i}"));
        ip(
            None,
            &["link", "add", &a, "type", "veth", "peer", "name", &b],
        )?;
        ip(None, &["link", "set", &a, "netns", &host])?;
        ip(None, &["link", "set", &b, "netns", &bridge_ns])?;
        ip(Some(&bridge_ns), &["link", "set", &b, "master", "br0"])?;
        ip(Some(&bridge_ns), &["link", "set", &b, "up"])?;
        let address = format!("192.0.2.{i}/24");
        ip(Some(&host), &["addr", "add", &address, "dev", &a])?;
        ip(Some(&host), &["link", "set", &a, "up"])?;
        ip(Some(&host), &["link", "set", "lo", "up"])?;
    }
    Ok(made)
}

#[test]
fn one_topology_file_boots_applications_on_three_hosts() {
    let prefix = format!("swdq{}", std::process::id() % 100_000);
    let probe = format!("{prefix}probe");
    if let Err(e) = ip(None, &["netns", "add", &probe]) {
        eprintln!(
            "SKIPPED: cannot make network namespaces here (needs CAP_NET_ADMIN and iproute2): {e}"
        );
        return;
    }
    let _ = ip(None, &["netns", "del", &probe]);
    let hosts = make_hosts(&prefix).expect("namespaces, veth pairs and a bridge");
    let dir = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_swdaq");
    let mut t = format!(
        "[run]\nduration_s = 5.0\nmetrics_addr = \"\"\noutput_dir = {:?}\n\
         [emulator]\nlinks = 2\n[trigger.periodic]\nrate_hz = 10.0\n",
        dir.path().join("data")
    );
    for i in 1..=3 {
        t += &format!(
            "[[topology.hosts]]\nname = \"h{i}\"\nlauncher = [\"ip\", \"netns\", \"exec\", \"{prefix}h{i}\"]\n"
        );
    }
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
    drop(hosts);
    let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&left.stdout).contains(&prefix),
        "namespaces removed"
    );
}
