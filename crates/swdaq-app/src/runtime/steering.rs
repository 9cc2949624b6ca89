//! What run control can ask of a running system: its trigger (pause, resume, a prescale or
//! rate) and raw bursts. A model hands these over when data taking has begun
//! (`RunHooks::started`); what it does not have is `None`.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use swdaq_dataflow::TriggerInput;
use swdaq_trigger::TriggerControl;

/// What a running system can be asked; `None` where the model has no such thing.
#[derive(Default)]
pub struct Steering {
    pub trigger: Option<Box<dyn TriggerSteer>>,
    pub bursts: Option<Arc<dyn BurstRequests>>,
}

/// Reaches a running trigger without ever blocking the caller.
pub trait TriggerSteer: Send + Sync {
    /// Passes `control` on, or says why it cannot now (busy: a full queue, the run ending).
    fn send(&self, control: TriggerControl) -> Result<(), String>;
}

/// A trigger fed through its input queue (the chain's, in one process or through the
/// launcher to the trigger application).
impl TriggerSteer for crossbeam_channel::Sender<TriggerInput> {
    fn send(&self, control: TriggerControl) -> Result<(), String> {
        self.try_send(TriggerInput::Control(control))
            .map_err(|e| match e {
                crossbeam_channel::TrySendError::Full(_) => "its input queue is full".into(),
                crossbeam_channel::TrySendError::Disconnected(_) => "it has ended".into(),
            })
    }
}

/// Longest recording after a request that a configuration or a command may ask for.
pub const MAX_SECONDS_AFTER: f64 = 600.0;
/// Why a burst was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BurstReason {
    /// `swdaq ctl record` (run control) or the launcher's `record` line.
    Command,
    /// A decision carrying a configured trigger type.
    Trigger { number: u64, types: Vec<String> },
}

/// Why a burst was not started.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("recording is off ([recording] enabled = false)")]
    Disabled,
    #[error(
        "{0} burst(s) already in progress (recording.max_concurrent): request refused, counted"
    )]
    Busy(u32),
    #[error("recording seconds must be in (0, {MAX_SECONDS_AFTER}], not {0}")]
    BadSeconds(f64),
    #[error("cannot start a burst in {0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("the readout applications cannot take the request now: {0}")]
    NotPassedOn(&'static str),
}

/// A burst's seconds after the request must be in (0, [`MAX_SECONDS_AFTER`]].
pub fn check_seconds(seconds_after: f64) -> Result<(), RecordError> {
    if seconds_after > 0.0 && seconds_after <= MAX_SECONDS_AFTER {
        Ok(())
    } else {
        Err(RecordError::BadSeconds(seconds_after))
    }
}

/// What a request started.
#[derive(Debug, Clone, Serialize)]
pub struct BurstStarted {
    /// The burst's number in the run, or `None` when the request was passed on to other
    /// processes (readout applications), which number their own.
    pub burst: Option<u32>,
    pub directory: Option<PathBuf>,
    pub seconds_after: f64,
}

/// Something that records bursts on request: the run's own [`Recordings`], or the launcher
/// passing the request to its readout applications.
pub trait BurstRequests: Send + Sync {
    fn record(&self, seconds_after: f64, reason: BurstReason) -> Result<BurstStarted, RecordError>;
}
