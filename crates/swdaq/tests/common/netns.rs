//! Hosts as network namespaces made by the test: `<prefix>h1..hN` at 192.0.2.1..N, each with
//! a veth pair to a bridge in `<prefix>br`, nothing else. Everything is removed when the
//! guard drops, also when the test fails. Needs CAP_NET_ADMIN and iproute2's `ip`.

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
pub struct Hosts {
    prefix: String,
    made: Vec<String>,
}

impl Hosts {
    /// The bridge's namespace; `Err` when namespaces cannot be made here at all.
    fn bridge(tag: &str) -> Result<Self, String> {
        let prefix = format!("sw{tag}{}", std::process::id() % 100_000);
        let bridge_ns = format!("{prefix}br");
        ip(None, &["netns", "add", &bridge_ns])?;
        Ok(Self {
            prefix,
            made: vec![bridge_ns],
        })
    }

    /// Hosts `1..=hosts`, each a namespace with a veth pair to the bridge.
    fn add_hosts(&mut self, hosts: u32) -> Result<(), String> {
        let bridge_ns = self.made[0].clone();
        ip(Some(&bridge_ns), &["link", "add", "br0", "type", "bridge"])?;
        ip(Some(&bridge_ns), &["link", "set", "br0", "up"])?;
        for i in 1..=hosts {
            let host = self.name(i);
            ip(None, &["netns", "add", &host])?;
            self.made.push(host.clone());
            let (a, b) = (
                format!("{}a{i}", self.prefix),
                format!("{}b{i}", self.prefix),
            );
            ip(
                None,
                &["link", "add", &a, "type", "veth", "peer", "name", &b],
            )?;
            ip(None, &["link", "set", &a, "netns", &host])?;
            ip(None, &["link", "set", &b, "netns", &bridge_ns])?;
            ip(Some(&bridge_ns), &["link", "set", &b, "master", "br0"])?;
            ip(Some(&bridge_ns), &["link", "set", &b, "up"])?;
            let address = format!("{}/24", Self::address(i));
            ip(Some(&host), &["addr", "add", &address, "dev", &a])?;
            ip(Some(&host), &["link", "set", &a, "up"])?;
            ip(Some(&host), &["link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// Host `i`'s namespace.
    pub fn name(&self, i: u32) -> String {
        format!("{}h{i}", self.prefix)
    }

    /// Host `i`'s address on the bridge.
    pub fn address(i: u32) -> String {
        format!("192.0.2.{i}")
    }

    /// `[[topology.hosts]]` entries `h1..hN`, each started through `ip netns exec`.
    pub fn topology(&self) -> String {
        // The first namespace made is the bridge's.
        (1..self.made.len() as u32)
            .map(|i| {
                format!(
                    "[[topology.hosts]]\nname = \"h{i}\"\nlauncher = [\"ip\", \"netns\", \"exec\", \"{}\"]\n",
                    self.name(i)
                )
            })
            .collect()
    }

    /// Removes every namespace now and says whether any of this test's is left.
    pub fn remove(mut self) -> bool {
        self.remove_all();
        let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
        !String::from_utf8_lossy(&left.stdout).contains(&self.prefix)
    }

    fn remove_all(&mut self) {
        for ns in self.made.drain(..) {
            let _ = ip(None, &["netns", "del", &ns]);
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        self.remove_all();
    }
}

/// `hosts` namespaces named from `tag` and this process (tests running at once never share
/// one), or `None` after saying on stderr why the test skips: namespaces cannot be made here.
/// Once the first is made, any later failure fails the test (the guard still cleans up).
pub fn hosts_or_skip(tag: &str, hosts: u32) -> Option<Hosts> {
    let mut made = match Hosts::bridge(tag) {
        Ok(h) => h,
        Err(e) => {
            eprintln!(
                "SKIPPED: cannot make network namespaces here (needs CAP_NET_ADMIN and iproute2): {e}"
            );
            return None;
        }
    };
    made.add_hosts(hosts)
        .expect("namespaces, veth pairs and a bridge");
    Some(made)
}
