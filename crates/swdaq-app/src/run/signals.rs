//! How `swdaq run` answers SIGINT, SIGTERM and SIGHUP (the `ctrlc` crate's `termination`
//! feature delivers all three to one handler, on its own thread, not in signal context):
//! the first asks for the orderly stop Ctrl-C always gave (summary, files closed and
//! renamed), the second says what the stop is still waiting for, the third exits at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Exit status of the third signal: 128 + SIGINT, what a shell reports for an interrupt.
const EXIT_STATUS_FORCED: i32 = 130;

/// What the handler does for the `count`-th signal received (1-based).
#[derive(Debug, PartialEq, Eq)]
pub enum SignalAction {
    /// Ask the run to stop in data-flow order.
    Stop,
    /// The stop is under way: say what it waits for and how to skip it.
    ExplainWait,
    /// Leave now, without waiting for the stop.
    Exit,
}

pub fn action_for(count: u32) -> SignalAction {
    match count {
        1 => SignalAction::Stop,
        2 => SignalAction::ExplainWait,
        _ => SignalAction::Exit,
    }
}

/// Installs the handler; the returned flag becomes true at the first signal.
pub fn install() -> anyhow::Result<Arc<AtomicBool>> {
    let interrupt = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&interrupt);
    let received = AtomicU32::new(0);
    ctrlc::set_handler(
        move || match action_for(received.fetch_add(1, Ordering::Relaxed) + 1) {
            SignalAction::Stop => flag.store(true, Ordering::Relaxed),
            SignalAction::ExplainWait => eprintln!(
                "\nswdaq run: stopping: the trigger's open decision, the records being built \
                 and the files still open are being finished; signal once more to exit at once"
            ),
            SignalAction::Exit => {
                eprintln!("\nswdaq run: exiting at once; open .writing files are left as they lie");
                std::process::exit(EXIT_STATUS_FORCED);
            }
        },
    )?;
    Ok(interrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_signal_stops_second_explains_third_and_later_exit() {
        assert_eq!(action_for(1), SignalAction::Stop);
        assert_eq!(action_for(2), SignalAction::ExplainWait);
        assert_eq!(action_for(3), SignalAction::Exit);
        assert_eq!(action_for(7), SignalAction::Exit);
    }
}
