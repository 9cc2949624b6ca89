//! `[run.hooks]`: commands run before and after a run's configure, start and stop, with the
//! run's facts in their environment, each for at most `timeout_s` ([`command`]). A failing
//! `pre_configure` or `pre_start` refuses its transition with the hook's output; `pre_stop`
//! cannot (a stop is always honoured) and a `post_*` hook does not undo its transition:
//! those are said on stderr and kept with the run like every hook's output. `swdaq run` and
//! `swdaq serve` run them the same way: the configure hooks around loading the configuration,
//! `pre_start` once the run has its number, then [`run_between_hooks`].

pub mod command;

use crate::live::Live;
use crate::runtime::model::{Configured, Outcome, RunHooks};
use crate::runtime::outcome::StopReason;
use crate::runtime::steering::Steering;
use command::HookOutput;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

/// A hook's default time limit.
const DEFAULT_TIMEOUT_S: f64 = 30.0;

/// Each hook: a program and its arguments, run without a shell (write `["sh", "-c", "..."]`
/// for one); empty: none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksSection {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_configure: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_configure: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_start: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_start: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_stop: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_stop: Vec<String>,
    /// Seconds each hook may take; at the limit its process group is killed.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: f64,
}

fn default_timeout_s() -> f64 {
    DEFAULT_TIMEOUT_S
}

impl Default for HooksSection {
    fn default() -> Self {
        Self {
            pre_configure: Vec::new(),
            post_configure: Vec::new(),
            pre_start: Vec::new(),
            post_start: Vec::new(),
            pre_stop: Vec::new(),
            post_stop: Vec::new(),
            timeout_s: DEFAULT_TIMEOUT_S,
        }
    }
}

/// Which hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    PreConfigure,
    PostConfigure,
    PreStart,
    PostStart,
    PreStop,
    PostStop,
}

impl Hook {
    const ALL: [Hook; 6] = [
        Hook::PreConfigure,
        Hook::PostConfigure,
        Hook::PreStart,
        Hook::PostStart,
        Hook::PreStop,
        Hook::PostStop,
    ];

    /// Its key in `[run.hooks]`.
    pub fn name(self) -> &'static str {
        match self {
            Hook::PreConfigure => "pre_configure",
            Hook::PostConfigure => "post_configure",
            Hook::PreStart => "pre_start",
            Hook::PostStart => "post_start",
            Hook::PreStop => "pre_stop",
            Hook::PostStop => "post_stop",
        }
    }

    /// The transition it is run around.
    pub fn transition(self) -> &'static str {
        match self {
            Hook::PreConfigure | Hook::PostConfigure => "configure",
            Hook::PreStart | Hook::PostStart => "start",
            Hook::PreStop | Hook::PostStop => "stop",
        }
    }
}

impl HooksSection {
    fn argv(&self, hook: Hook) -> &[String] {
        match hook {
            Hook::PreConfigure => &self.pre_configure,
            Hook::PostConfigure => &self.post_configure,
            Hook::PreStart => &self.pre_start,
            Hook::PostStart => &self.post_start,
            Hook::PreStop => &self.pre_stop,
            Hook::PostStop => &self.post_stop,
        }
    }

    /// Checks the keys before anything starts; an error names the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.timeout_s > 0.0 && self.timeout_s <= 3600.0,
            "invalid configuration: run.hooks.timeout_s: must be in (0, 3600] seconds"
        );
        for hook in Hook::ALL {
            if let Some(program) = self.argv(hook).first() {
                anyhow::ensure!(
                    !program.trim().is_empty(),
                    "invalid configuration: run.hooks.{}: its first word is the program to run, and is empty",
                    hook.name()
                );
            }
        }
        Ok(())
    }

    /// Runs a hook whose failure refuses its transition (`pre_configure`, `pre_start`),
    /// if it is given: `Err` holds how it ended and what it printed; `ran` its record.
    pub fn run_refusing(
        &self,
        hook: Hook,
        facts: &RunFacts,
        ran: &mut Vec<HookRun>,
    ) -> anyhow::Result<()> {
        match self.run(hook, facts) {
            Some(r) if !r.output.end.succeeded() => {
                let said = r.describe();
                ran.push(r);
                anyhow::bail!("{} refused: {said}", hook.transition())
            }
            Some(r) => ran.push(r),
            None => {}
        }
        Ok(())
    }

    /// Runs a hook that cannot undo its transition, if it is given; a failure is said on
    /// stderr (and kept in `ran` like every hook's record).
    pub fn run_telling(&self, hook: Hook, facts: &RunFacts, ran: &mut Vec<HookRun>) {
        if let Some(r) = self.run(hook, facts) {
            if !r.output.end.succeeded() {
                eprintln!("swdaq: run {}: {}", facts.number_text(), r.describe());
            }
            ran.push(r);
        }
    }

    /// Whether no hook is given.
    pub fn is_empty(&self) -> bool {
        Hook::ALL.iter().all(|h| self.argv(*h).is_empty())
    }

    fn run(&self, hook: Hook, facts: &RunFacts) -> Option<HookRun> {
        let argv = self.argv(hook);
        if argv.is_empty() {
            return None;
        }
        let started_at = SystemTime::now();
        let output = command::run(
            argv,
            &facts.environment(hook),
            Duration::from_secs_f64(self.timeout_s),
        );
        Some(HookRun {
            hook: hook.name(),
            argv: argv.to_vec(),
            started_at,
            output,
        })
    }
}

/// What a hook is told of the run, in its environment.
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    /// `None` before a number is claimed (the configure hooks).
    pub run_number: Option<u32>,
    pub run_type: String,
    pub model: String,
    pub output_dir: String,
    /// The stop hooks': why the run stopped (`post_stop`), or is stopping (`pre_stop`).
    pub stop_reason: Option<String>,
}

impl RunFacts {
    /// What `config`'s hooks are told (`numbered`: once the run has its number).
    pub fn of(config: &dyn Configured, numbered: bool) -> Self {
        let run = config.run_section();
        Self {
            run_number: numbered.then(|| config.run_number()),
            run_type: run.run_type.clone(),
            model: config.model().name().into(),
            output_dir: run.output_dir.display().to_string(),
            stop_reason: None,
        }
    }

    /// For messages: the run's number, or that it has none yet.
    fn number_text(&self) -> String {
        self.run_number
            .map_or_else(|| "(no number yet)".into(), |n| n.to_string())
    }

    fn environment(&self, hook: Hook) -> Vec<(String, String)> {
        let mut env = vec![
            ("SWDAQ_HOOK".into(), hook.name().into()),
            ("SWDAQ_TRANSITION".into(), hook.transition().into()),
            ("SWDAQ_RUN_TYPE".into(), self.run_type.clone()),
            ("SWDAQ_MODEL".into(), self.model.clone()),
            ("SWDAQ_OUTPUT_DIR".into(), self.output_dir.clone()),
        ];
        if let Some(n) = self.run_number {
            env.push(("SWDAQ_RUN_NUMBER".into(), n.to_string()));
        }
        if let Some(why) = &self.stop_reason {
            env.push(("SWDAQ_STOP_REASON".into(), why.clone()));
        }
        env
    }
}

/// One hook that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct HookRun {
    pub hook: &'static str,
    pub argv: Vec<String>,
    pub started_at: SystemTime,
    pub output: HookOutput,
}

impl HookRun {
    /// Which hook and how it ended on the first line, then what it printed.
    pub fn describe(&self) -> String {
        let o = &self.output;
        let mut text = format!("{} hook {:?} {}", self.hook, self.argv, o.end);
        if o.output.trim().is_empty() {
            text += " (it printed nothing)";
        } else {
            text += &format!("; it printed:\n{}", o.output.trim_end());
        }
        if o.truncated_bytes > 0 {
            text += &format!("\n[{} more bytes not kept]", o.truncated_bytes);
        }
        text
    }
}

impl HookRun {
    /// As the run registry keeps it.
    pub fn for_registry(&self) -> swdaq_registry::NewHook {
        swdaq_registry::NewHook {
            hook: self.hook.into(),
            argv: self.argv.clone(),
            started_at: self.started_at,
            millis: (self.output.seconds * 1e3).round() as u64,
            ended: serde_json::to_value(&self.output.end)
                .expect("a hook's end is representable in JSON"),
            output: self.output.output.clone(),
            truncated_bytes: self.output.truncated_bytes,
        }
    }
}

/// The hooks run while data is taken, around `inner` (which hears everything it would):
/// `post_start` once data taking has begun, on a thread of its own so the run is not held
/// up; `pre_stop` when the stop begins, which it holds up for at most the time limit.
pub struct DuringRun<'a> {
    inner: &'a dyn RunHooks,
    hooks: HooksSection,
    facts: RunFacts,
    ran: Mutex<Vec<HookRun>>,
    post_start: Mutex<Option<JoinHandle<Vec<HookRun>>>>,
}

impl<'a> DuringRun<'a> {
    pub fn new(inner: &'a dyn RunHooks, hooks: &HooksSection, facts: RunFacts) -> Self {
        Self {
            inner,
            hooks: hooks.clone(),
            facts,
            ran: Mutex::new(Vec::new()),
            post_start: Mutex::new(None),
        }
    }

    /// The hooks that ran, in the order they started (waits for `post_start`, which its
    /// time limit bounds).
    pub fn into_ran(self) -> Vec<HookRun> {
        let mut ran = self.ran.into_inner().unwrap_or_else(|e| e.into_inner());
        let post_start = self
            .post_start
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(thread) = post_start {
            ran.extend(thread.join().unwrap_or_default());
        }
        ran.sort_by_key(|r| r.started_at);
        ran
    }
}

impl RunHooks for DuringRun<'_> {
    fn started(&self, steer: Steering) {
        self.inner.started(steer);
        let mut post_start = self.post_start.lock().unwrap_or_else(|e| e.into_inner());
        if post_start.is_some() || self.hooks.post_start.is_empty() {
            return;
        }
        let (hooks, facts) = (self.hooks.clone(), self.facts.clone());
        let thread = std::thread::Builder::new()
            .name("hook-post-start".into())
            .spawn(move || {
                let mut ran = Vec::new();
                hooks.run_telling(Hook::PostStart, &facts, &mut ran);
                ran
            });
        match thread {
            Ok(thread) => *post_start = Some(thread),
            Err(e) => eprintln!("swdaq: the post_start hook was not run: no thread for it: {e}"),
        }
    }

    fn live(&self, live: &Live) {
        self.inner.live(live);
    }

    fn dqm(&self, view: crate::runtime::dqm::DqmView) {
        self.inner.dqm(view);
    }

    fn stopping(&self, reason: &StopReason) {
        self.inner.stopping(reason);
        let facts = RunFacts {
            stop_reason: Some(reason.to_string()),
            ..self.facts.clone()
        };
        let mut ran = self.ran.lock().unwrap_or_else(|e| e.into_inner());
        self.hooks.run_telling(Hook::PreStop, &facts, &mut ran);
    }
}

/// Runs `config`'s run (its `pre_start` hook already passed) with `post_start` and `pre_stop`
/// around it ([`DuringRun`] over `inner`), then `post_stop` told how it ended; every hook's
/// record is added to `ran`.
pub fn run_between_hooks(
    config: &dyn Configured,
    stop: &crate::runtime::stop::StopRequest,
    inner: &dyn RunHooks,
    ran: &mut Vec<HookRun>,
) -> anyhow::Result<Box<dyn Outcome>> {
    let hooks = &config.run_section().hooks;
    let facts = RunFacts::of(config, true);
    let during = DuringRun::new(inner, hooks, facts.clone());
    let result = config.run(stop, &during);
    ran.extend(during.into_ran());
    let stopped = RunFacts {
        stop_reason: Some(match &result {
            Ok(outcome) => outcome.stop_reason().to_string(),
            Err(e) => format!("failed: {e:#}"),
        }),
        ..facts
    };
    hooks.run_telling(Hook::PostStop, &stopped, ran);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[test]
    fn a_failing_pre_start_refuses_with_its_output_and_a_post_hook_does_not() {
        let hooks = HooksSection {
            pre_start: sh("echo no beam; exit 1"),
            post_stop: sh("exit 2"),
            ..HooksSection::default()
        };
        let facts = RunFacts {
            run_number: Some(5),
            ..RunFacts::default()
        };
        let mut ran = Vec::new();
        let e = hooks
            .run_refusing(Hook::PreStart, &facts, &mut ran)
            .unwrap_err();
        assert!(e.to_string().contains("no beam"), "{e}");
        hooks.run_telling(Hook::PostStop, &facts, &mut ran);
        hooks.run_telling(Hook::PreStop, &facts, &mut ran);
        assert_eq!(ran.len(), 2, "pre_stop is not given");
        assert_eq!(ran[1].output.end, command::HookEnd::Exited { code: 2 });
    }

    #[test]
    fn the_environment_names_the_run_and_its_stop() {
        let facts = RunFacts {
            run_number: Some(12),
            stop_reason: Some("duration reached".into()),
            ..RunFacts::default()
        };
        let env = facts.environment(Hook::PostStop);
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("SWDAQ_RUN_NUMBER"), Some("12"));
        assert_eq!(get("SWDAQ_STOP_REASON"), Some("duration reached"));
        assert_eq!(get("SWDAQ_TRANSITION"), Some("stop"));
    }

    #[test]
    fn bad_keys_are_named() {
        let zero = HooksSection {
            timeout_s: 0.0,
            ..HooksSection::default()
        };
        assert!(
            zero.validate()
                .unwrap_err()
                .to_string()
                .contains("timeout_s")
        );
        let empty = HooksSection {
            pre_start: vec![String::new()],
            ..HooksSection::default()
        };
        assert!(
            empty
                .validate()
                .unwrap_err()
                .to_string()
                .contains("pre_start")
        );
    }
}
