//! What the binary's integration tests share. Each test binary uses a part of it.
#![allow(dead_code)]

pub mod models;
pub mod watch;

/// `swdaq run --json --config <config>`, waited for.
pub fn swdaq_run(config: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["run", "--json", "--config"])
        .arg(config)
        .output()
        .unwrap()
}

/// A TCP port on 127.0.0.1 free at the moment of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `[[topology.apps]]` entries of `(name, kind, extra lines)` on 127.0.0.1, each inbox on a
/// port free at the moment of asking: all are bound at once, so no two are the same (one at a
/// time, a port let go could be handed out again).
pub fn loopback_topology_apps(apps: &[(&str, &str, &str)]) -> String {
    let held: Vec<std::net::TcpListener> = apps
        .iter()
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    apps.iter()
        .zip(&held)
        .map(|((name, kind, extra), port)| {
            format!(
                "[[topology.apps]]\nname = \"{name}\"\nkind = \"{kind}\"\naddress = \"tcp://127.0.0.1:{}\"\n{extra}\n",
                port.local_addr().unwrap().port()
            )
        })
        .collect()
}

/// The chain as applications on loopback, each inbox on a free port: `readout-0` with link 0,
/// `readout-1` with link 1, `trigger`, `dfo` and `builders` builders (`builder-0`, ...), as
/// `[[topology.apps]]` entries.
pub fn loopback_apps(builders: usize) -> String {
    let builders: Vec<String> = (0..builders).map(|b| format!("builder-{b}")).collect();
    let mut apps = vec![
        ("readout-0", "readout", "links = [0]"),
        ("readout-1", "readout", "links = [1]"),
        ("trigger", "trigger", ""),
        ("dfo", "dfo", ""),
    ];
    apps.extend(builders.iter().map(|b| (b.as_str(), "builder", "")));
    loopback_topology_apps(&apps)
}

/// The SW ROD as applications on loopback, each inbox on a free port: `swrod-0` with card 0,
/// `swrod-1` with card 1, `hltsv`, `hlt-0` and `hlt-1`, as `[[topology.apps]]` entries.
pub fn loopback_swrod_apps() -> String {
    loopback_topology_apps(&[
        ("swrod-0", "swrod", "cards = [0]"),
        ("swrod-1", "swrod", "cards = [1]"),
        ("hltsv", "hltsv", ""),
        ("hlt-0", "hlt", ""),
        ("hlt-1", "hlt", ""),
    ])
}
