//! The memory a configuration implies, checked against what the machine has before anything
//! starts. Queues, stores and buffers sized by the configuration are allocated (or may fill)
//! during the run; a size that cannot fit is refused at configure with the keys that ask for
//! it, instead of the run aborting half-way ("memory allocation of ... failed").

use anyhow::bail;

/// The configured sizes of one run, each with the key that sets it.
#[derive(Debug, Default)]
pub struct MemoryPlan {
    items: Vec<Item>,
}

#[derive(Debug)]
struct Item {
    key: String,
    count: u64,
    each_bytes: u64,
}

impl Item {
    fn bytes(&self) -> u64 {
        self.count.saturating_mul(self.each_bytes)
    }
}

impl MemoryPlan {
    /// `count` of something set by `key`, `each_bytes` each at most.
    pub fn add(&mut self, key: impl Into<String>, count: u64, each_bytes: u64) -> &mut Self {
        self.items.push(Item {
            key: key.into(),
            count,
            each_bytes,
        });
        self
    }

    pub fn total_bytes(&self) -> u64 {
        self.items
            .iter()
            .fold(0, |sum, i| sum.saturating_add(i.bytes()))
    }

    /// Refuses a plan that needs more than `machine_bytes`, naming its largest items.
    pub fn check_against(&self, machine_bytes: u64) -> anyhow::Result<()> {
        let total = self.total_bytes();
        if total <= machine_bytes {
            return Ok(());
        }
        let mut items: Vec<&Item> = self.items.iter().collect();
        items.sort_by_key(|i| std::cmp::Reverse(i.bytes()));
        let named: Vec<String> = items
            .iter()
            .take(3)
            .map(|i| {
                format!(
                    "{} = {} x {} = {}",
                    i.key,
                    i.count,
                    bytes_text(i.each_bytes),
                    bytes_text(i.bytes())
                )
            })
            .collect();
        bail!(
            "invalid configuration: the run would need up to {} of memory, more than this machine's {}: {}",
            bytes_text(total),
            bytes_text(machine_bytes),
            named.join("; ")
        )
    }

    /// [`Self::check_against`] this machine's memory (unchecked where it cannot be read).
    pub fn check(&self) -> anyhow::Result<()> {
        match machine_memory_bytes() {
            Some(machine) => self.check_against(machine),
            None => Ok(()),
        }
    }
}

/// `MemTotal` of `/proc/meminfo`. The total, not what is free now: a configuration is
/// refused only when it could never run here, not because of today's page cache.
pub fn machine_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "kB", "MB", "GB", "TB", "PB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_beyond_the_machine_is_refused_naming_its_largest_keys() {
        let mut plan = MemoryPlan::default();
        plan.add("swrod.consumer_queue", 4096, 1 << 20)
            .add("swrod.hlt_max_in_flight", 1_000_000_000_000, 104_000)
            .add("swrod.ring_slots", 64, 1 << 10);
        let e = plan.check_against(24 << 30).unwrap_err().to_string();
        assert!(
            e.contains("swrod.hlt_max_in_flight = 1000000000000 x 104.0 kB = 104.0 PB"),
            "{e}"
        );
        assert!(e.contains("more than this machine's 25.8 GB"), "{e}");
        assert!(
            e.find("hlt_max_in_flight") < e.find("consumer_queue"),
            "largest first: {e}"
        );
    }

    #[test]
    fn sizes_saturate_instead_of_wrapping() {
        let mut plan = MemoryPlan::default();
        plan.add("a", u64::MAX, u64::MAX).add("b", 2, u64::MAX);
        assert_eq!(plan.total_bytes(), u64::MAX);
        assert!(plan.check_against(u64::MAX - 1).is_err());
    }

    #[test]
    fn a_plan_within_the_machine_passes_and_the_machine_is_read() {
        let mut plan = MemoryPlan::default();
        plan.add("storage.queue_depth", 4, 1 << 20);
        assert!(plan.check_against(8 << 20).is_ok());
        assert!(machine_memory_bytes().is_some_and(|m| m > 64 << 20));
        assert!(plan.check().is_ok());
    }
}
