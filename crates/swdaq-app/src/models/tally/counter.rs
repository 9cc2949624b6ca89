//! One counter: counts `rate_hz` a second from its start until told to stop, publishing its
//! count as `swdaq_tally_counted_total{counter}`. The same in one process and in a
//! `counter` application.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_monitor::Registry;

/// How often a counter looks at its clock (and at its stop flag).
const TICK: Duration = Duration::from_millis(1);

pub const COUNTED: &str = "swdaq_tally_counted_total";

/// Counts until `stop`; `each_tick` sees the count after every tick (a counter application
/// passes it on). Returns the final count.
pub fn count(
    name: &str,
    rate_hz: f64,
    stop: &AtomicBool,
    registry: &Registry,
    mut each_tick: impl FnMut(u64),
) -> anyhow::Result<u64> {
    let mut block = registry.block("counter", &[("counter", name)]);
    let published = block.counter(COUNTED, "Counts made by the tally's counter")?;
    let started = Instant::now();
    let mut counted = 0;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(TICK);
        let due = (started.elapsed().as_secs_f64() * rate_hz) as u64;
        published.add(due - counted);
        counted = due;
        each_tick(counted);
    }
    Ok(counted)
}
