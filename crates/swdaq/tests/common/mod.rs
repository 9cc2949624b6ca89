//! What the binary's integration tests share. Each test binary uses a part of it.
#![allow(dead_code)]

pub mod models;
pub mod served;
pub mod watch;

/// `swdaq run --json --config <config>`, waited for.
pub fn swdaq_run(config: &std::path::Path) -> std::process::Output {
    spawn_run(config).wait_with_output().unwrap()
}

/// `swdaq run --json --config <config>` that must succeed; its summary.
pub fn swdaq_run_json(config: &std::path::Path) -> serde_json::Value {
    summary_of(spawn_run(config))
}

/// `swdaq run --json --config <config>` started, its stdout and stderr piped, no stdin.
pub fn spawn_run(config: &std::path::Path) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["run", "--json", "--config"])
        .arg(config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The summary of a [`spawn_run`] that must end well, waited for.
pub fn summary_of(run: std::process::Child) -> serde_json::Value {
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "swdaq run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A TCP port on 127.0.0.1 free at the moment of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A base port on 127.0.0.1 with the `count` ports from it free now (a run binds them next).
pub fn free_udp_ports(count: u16) -> u16 {
    free_ports(count, |port| {
        std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok()
    })
}

/// A base port below 60 000 from which `bind` (of the socket kind asked for) takes `count`
/// ports now; port 0 asks the kernel for the base.
fn free_ports(count: u16, bind: impl Fn(u16) -> bool) -> u16 {
    loop {
        let base = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = base.local_addr().unwrap().port();
        drop(base);
        if port < 60_000 && (0..count).all(|k| bind(port + k)) {
            return port;
        }
    }
}

/// True once some socket is bound to 127.0.0.1:`port` (`/proc/net/udp`), without binding it.
pub fn udp_port_bound(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    let local = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(1) == Some(local.as_str()))
}

/// Waits (at most 10 s) until the `count` UDP ports from `port` are bound.
pub fn wait_for_udp_ports(port: u16, count: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !(0..count).all(|k| udp_port_bound(port + k)) {
        assert!(
            std::time::Instant::now() < deadline,
            "swdaq run never bound its ports"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A base port on 127.0.0.1 with the `count` TCP ports from it free now (the run or a
/// sender binds them next).
pub fn free_tcp_ports(count: u16) -> u16 {
    free_ports(count, |port| {
        std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
    })
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
