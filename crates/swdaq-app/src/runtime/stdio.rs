//! How `swdaq run` drives its applications: over the child's standard streams, which work the
//! same through any launcher prefix (`ssh`, `ip netns exec`) and end with the launcher.
//!
//! - stdin, launcher to application: `config N` and N bytes of TOML (the run's effective
//!   configuration: the chain's, or the event builder's with its `[evb]` table), then command
//!   lines `start` and `stop`, for the application that holds the trigger (the chain's
//!   `trigger`) `trigger-control HEX` (run control: pause, resume, a prescale or rate;
//!   `postcard`), for the chain's readout applications `record SECONDS` (a raw burst of
//!   their links), for applications whose data follow the trigger's clock (the event
//!   builder's readout units) `pause-from EVENT` (hold every event from EVENT on: the point
//!   the trigger fixed) and the trigger's resume. End of input
//!   means `stop`, so an application never outlives a launcher that died.
//! - stdout, application to launcher: `ready` once its sockets are bound and its data are
//!   set up, then `report HEX` (its part of the run's summary, `postcard`-encoded: the chain's
//!   `RunReport`, or the event builder's `EvbAppReport`) at the end; every application also
//!   sends `live HEX` each status interval (its counters and gauges, `runtime::live_feed`);
//!   an application whose storage failed, where that stops the run, says `storage-failed WHY`
//!   at once (the launcher then stops the run); an application whose input has ended, where
//!   that ends the run (the SW ROD's HLT supervisor at `swrod.max_l1as`), says
//!   `input-ended` (the launcher then stops the run in order); a trigger that paused says
//!   `paused-from EVENT PAUSE` (the first event it holds, for its PAUSE-th pause request),
//!   which the launcher passes on as `pause-from EVENT`.
//! - stderr: the application's log.

use anyhow::{Context, bail};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use swdaq_trigger::TriggerControl;

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Start,
    Stop,
    /// For the trigger: a run-control request (`swdaq serve`).
    TriggerControl(TriggerControl),
    /// For readout: record a raw burst, the buffer and this many seconds after.
    Record(f64),
    /// For units following the trigger's clock: hold every event from this one on.
    PauseFrom(u64),
}

const TRIGGER_CONTROL: &str = "trigger-control ";
const RECORD: &str = "record ";
const PAUSE_FROM: &str = "pause-from ";
const PAUSED_FROM: &str = "paused-from ";

/// The command line that tells a unit following the trigger's clock where a pause begins.
pub fn pause_from_line(event: u64) -> String {
    format!("{PAUSE_FROM}{event}")
}

/// The command line that asks readout applications for a burst of `seconds` after.
pub fn record_line(seconds: f64) -> String {
    // `{}` prints the shortest text that parses back to the same f64.
    format!("{RECORD}{seconds}")
}

/// The command line that carries `control` to the trigger application (`postcard` in hex,
/// as reports travel: a rate arrives to the last bit).
pub fn trigger_control_line(control: &TriggerControl) -> String {
    let bytes = postcard::to_stdvec(control).expect("a trigger control is plain data");
    format!("{TRIGGER_CONTROL}{}", hex::encode(bytes))
}

/// Parses one command line; `None` for a line that is no command (logged by the caller).
fn parse_command(line: &str) -> Option<Command> {
    match line {
        "start" => Some(Command::Start),
        "stop" => Some(Command::Stop),
        l if l.starts_with(RECORD) => l[RECORD.len()..].parse().ok().map(Command::Record),
        l if l.starts_with(PAUSE_FROM) => {
            l[PAUSE_FROM.len()..].parse().ok().map(Command::PauseFrom)
        }
        l => {
            let bytes = hex::decode(l.strip_prefix(TRIGGER_CONTROL)?).ok()?;
            postcard::from_bytes(&bytes)
                .ok()
                .map(Command::TriggerControl)
        }
    }
}

/// Reads the configuration's text (`config N` and N bytes) from `input`.
pub fn read_config_text(input: &mut impl BufRead) -> anyhow::Result<String> {
    let mut line = String::new();
    input.read_line(&mut line)?;
    let Some(len) = line
        .trim_end()
        .strip_prefix("config ")
        .and_then(|n| n.parse::<usize>().ok())
    else {
        bail!(
            "expected `config N` from the launcher, got {:?}",
            line.trim_end()
        );
    };
    let mut text = vec![0u8; len];
    input
        .read_exact(&mut text)
        .context("the launcher's configuration ended early")?;
    String::from_utf8(text).context("configuration is not UTF-8")
}

/// The launcher's commands as they come, and a flag that is set once `stop` has come.
pub struct Commands {
    receiver: Receiver<Command>,
    stop: Arc<AtomicBool>,
}

impl Commands {
    /// Reads command lines from `input` on a thread of its own.
    pub fn spawn(input: impl BufRead + Send + 'static) -> anyhow::Result<Self> {
        let (tx, receiver) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                for line in input.lines() {
                    let Ok(line) = line else { break };
                    let command = match parse_command(line.trim()) {
                        Some(Command::Stop) => break,
                        Some(c) => c,
                        None => {
                            eprintln!("swdaq app: ignored an unknown command {line:?}");
                            continue;
                        }
                    };
                    if tx.send(command).is_err() {
                        return;
                    }
                }
                flag.store(true, Ordering::Release);
                let _ = tx.send(Command::Stop);
            })?;
        Ok(Self { receiver, stop })
    }

    /// The commands as they come, for an application that takes run-control requests
    /// while it runs (the trigger).
    pub fn receiver(&self) -> Receiver<Command> {
        self.receiver.clone()
    }

    /// Waits for `start`; false if `stop` (or the end of input) came first.
    pub fn wait_for_start(&self) -> bool {
        matches!(self.receiver.recv(), Ok(Command::Start))
    }

    /// Waits up to `wait` for `stop`; true once it has come.
    pub fn wait_for_stop(&self, wait: Duration) -> bool {
        match self.receiver.recv_timeout(wait) {
            Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => true,
            Ok(
                Command::Start
                | Command::TriggerControl(_)
                | Command::Record(_)
                | Command::PauseFrom(_),
            )
            | Err(RecvTimeoutError::Timeout) => self.stop_requested(),
        }
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The flag, for threads that only need to look.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }
}

/// Tells the launcher this application is ready.
pub fn say_ready() -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()
}

/// Sends this application's part of the summary (`postcard` bytes) to the launcher.
pub fn send_report(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "report {}", hex::encode(bytes))?;
    out.flush()?;
    Ok(())
}

/// Tells the launcher this application's storage failed and the run must stop.
pub fn say_storage_failed(why: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "storage-failed {}", why.replace('\n', " "))?;
    out.flush()
}

/// Tells the launcher this application's input has ended: the run may stop.
pub fn say_input_ended() -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "input-ended")?;
    out.flush()
}

/// Tells the launcher the trigger's `pause`-th pause holds every event from `event` on.
pub fn say_paused_from(event: u64, pause: u64) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{PAUSED_FROM}{event} {pause}")?;
    out.flush()
}

/// Sends the launcher this application's latest figures for the live line.
pub fn send_live(figures: &impl serde::Serialize) -> anyhow::Result<()> {
    let bytes = postcard::to_stdvec(figures).context("encoding the live figures")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "live {}", hex::encode(bytes))?;
    out.flush()?;
    Ok(())
}

/// What the launcher reads from an application's stdout.
#[derive(Debug)]
pub enum Event {
    Ready,
    /// The report's `postcard` bytes, decoded by whoever knows the run's kind.
    Report(Vec<u8>),
    /// The latest live figures' `postcard` bytes, likewise.
    Live(Vec<u8>),
    /// Its storage failed: the run stops (why, as the application says it).
    StorageFailed(String),
    /// Its input has ended: the run stops.
    InputEnded,
    /// The trigger's pause (its number among the requests) holds from this event on.
    PausedFrom {
        event: u64,
        pause: u64,
    },
}

/// Parses one stdout line of an application (`None` for anything else, e.g. stray output).
pub fn parse_event(line: &str) -> Option<anyhow::Result<Event>> {
    match line.trim_end() {
        "ready" => Some(Ok(Event::Ready)),
        "input-ended" => Some(Ok(Event::InputEnded)),
        l => {
            if let Some(hex) = l.strip_prefix("live ") {
                return Some(hex::decode(hex).context("live: not hex").map(Event::Live));
            }
            if let Some(why) = l.strip_prefix("storage-failed ") {
                return Some(Ok(Event::StorageFailed(why.to_string())));
            }
            if let Some(point) = l.strip_prefix(PAUSED_FROM) {
                let parsed = point
                    .split_once(' ')
                    .and_then(|(e, p)| Some((e.parse().ok()?, p.parse().ok()?)));
                return Some(
                    parsed
                        .map(|(event, pause)| Event::PausedFrom { event, pause })
                        .with_context(|| format!("paused-from: not two numbers: {point:?}")),
                );
            }
            let hex = l.strip_prefix("report ")?;
            Some(
                hex::decode(hex)
                    .context("report: not hex")
                    .map(Event::Report),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::chain::config::RunConfig;
    use crate::models::chain::system::RunReport;

    #[test]
    fn the_configuration_and_commands_are_read_in_order() {
        let toml = RunConfig::default().to_toml();
        let input = format!("config {}\n{toml}start\nstop\n", toml.len());
        let mut reader = std::io::BufReader::new(std::io::Cursor::new(input.into_bytes()));
        assert_eq!(
            RunConfig::parse(&read_config_text(&mut reader).unwrap()).unwrap(),
            RunConfig::default()
        );
        let commands = Commands::spawn(reader).unwrap();
        assert!(commands.wait_for_start());
        assert!(commands.wait_for_stop(Duration::from_secs(5)));
        assert!(commands.stop_requested());
    }

    #[test]
    fn trigger_controls_come_in_order_between_start_and_stop() {
        let change = TriggerControl::Change(swdaq_trigger::TriggerChange {
            trigger: "random".into(),
            prescale: Some(4),
            rate_hz: Some(2.5),
        });
        let input = format!(
            "start\n{}\ntrigger-control {{bad\n{}\nstop\n",
            trigger_control_line(&TriggerControl::Pause),
            trigger_control_line(&change)
        );
        let commands = Commands::spawn(std::io::Cursor::new(input.into_bytes())).unwrap();
        let received = commands.receiver();
        assert!(commands.wait_for_start());
        let next = || received.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(next(), Command::TriggerControl(TriggerControl::Pause));
        assert_eq!(
            next(),
            Command::TriggerControl(change),
            "the bad line skipped"
        );
        assert_eq!(next(), Command::Stop);
    }

    proptest::proptest! {
        /// Any line is a command or not, never a panic; every trigger control survives its line.
        #[test]
        fn any_command_line_parses_or_is_skipped(
            line in ".{0,80}",
            prescale in proptest::option::of(proptest::num::u32::ANY),
            rate_hz in proptest::option::of(-1e6..1e6f64),
        ) {
            let _ = parse_command(&line);
            let change = TriggerControl::Change(swdaq_trigger::TriggerChange {
                trigger: line,
                prescale,
                rate_hz,
            });
            proptest::prop_assert_eq!(
                parse_command(&trigger_control_line(&change)),
                Some(Command::TriggerControl(change))
            );
        }

        /// Every burst length survives its line, to the last bit.
        #[test]
        fn a_record_line_carries_its_seconds(seconds in 1e-9..1e6f64) {
            proptest::prop_assert_eq!(
                parse_command(&record_line(seconds)),
                Some(Command::Record(seconds))
            );
        }
    }

    #[test]
    fn the_end_of_input_means_stop() {
        let commands = Commands::spawn(std::io::Cursor::new(Vec::new())).unwrap();
        assert!(!commands.wait_for_start());
        assert!(commands.wait_for_stop(Duration::from_secs(5)));
    }

    #[test]
    fn a_bad_first_line_is_refused_and_reports_survive_the_round_trip() {
        let mut input = std::io::Cursor::new(b"hello\n".to_vec());
        assert!(read_config_text(&mut input).is_err());
        let report = RunReport {
            seconds: 2.5,
            ..Default::default()
        };
        let line = format!(
            "report {}",
            hex::encode(postcard::to_stdvec(&report).unwrap())
        );
        let Some(Ok(Event::Report(bytes))) = parse_event(&line) else {
            panic!("not parsed")
        };
        let back: RunReport = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back.seconds, 2.5);
        assert!(parse_event("report zz").unwrap().is_err());
        assert!(matches!(parse_event("live 0102"), Some(Ok(Event::Live(b))) if b == [1, 2]));
        assert!(parse_event("something else").is_none());
        assert!(matches!(
            parse_event("input-ended"),
            Some(Ok(Event::InputEnded))
        ));
        assert!(matches!(
            parse_event("paused-from 1234 2"),
            Some(Ok(Event::PausedFrom {
                event: 1234,
                pause: 2
            }))
        ));
        assert!(parse_event("paused-from 1234").unwrap().is_err());
        assert_eq!(
            parse_command(&pause_from_line(77)),
            Some(Command::PauseFrom(77))
        );
    }
}
