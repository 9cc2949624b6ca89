//! What the binary's integration tests share. Each test binary uses a part of it.
#![allow(dead_code)]

pub mod models;
pub mod watch;

/// A TCP port on 127.0.0.1 free at the moment of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The chain as applications on loopback, each inbox on a free port: `readout-0` with link 0,
/// `readout-1` with link 1, `trigger`, `dfo` and `builders` builders (`builder-0`, ...), as
/// `[[topology.apps]]` entries.
pub fn loopback_apps(builders: usize) -> String {
    let mut apps = vec![
        ("readout-0".to_string(), "readout", "links = [0]"),
        ("readout-1".to_string(), "readout", "links = [1]"),
        ("trigger".to_string(), "trigger", ""),
        ("dfo".to_string(), "dfo", ""),
    ];
    apps.extend((0..builders).map(|b| (format!("builder-{b}"), "builder", "")));
    apps.iter()
        .map(|(name, kind, links)| {
            format!(
                "[[topology.apps]]\nname = \"{name}\"\nkind = \"{kind}\"\naddress = \"tcp://127.0.0.1:{}\"\n{links}\n",
                free_port()
            )
        })
        .collect()
}

/// The SW ROD as applications on loopback, each inbox on a free port: `swrod-0` with card 0,
/// `swrod-1` with card 1, `hltsv`, `hlt-0` and `hlt-1`, as `[[topology.apps]]` entries.
pub fn loopback_swrod_apps() -> String {
    [
        ("swrod-0", "swrod", "cards = [0]"),
        ("swrod-1", "swrod", "cards = [1]"),
        ("hltsv", "hltsv", ""),
        ("hlt-0", "hlt", ""),
        ("hlt-1", "hlt", ""),
    ]
    .iter()
    .map(|(name, kind, cards)| {
        format!(
            "[[topology.apps]]\nname = \"{name}\"\nkind = \"{kind}\"\naddress = \"tcp://127.0.0.1:{}\"\n{cards}\n",
            free_port()
        )
    })
    .collect()
}
