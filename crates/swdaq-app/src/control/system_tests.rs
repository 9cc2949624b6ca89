//! Tests of `system`.

use super::*;
use crate::models::chain::config::RunConfig;

#[test]
fn a_configuration_that_does_not_load_leaves_the_system_unconfigured_and_says_why() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let broken = Arc::new(AtomicBool::new(false));
    let source_broken = Arc::clone(&broken);
    let control = RunControl::new(Box::new(move || {
        if source_broken.load(Ordering::Relaxed) {
            anyhow::bail!("run.toml: no such file");
        }
        Ok(Box::new(RunConfig::default()))
    }));
    control.configure("test").unwrap();
    assert_eq!(control.state(), State::Configured);
    // The file is edited to be invalid: the configuration loaded before is dropped.
    broken.store(true, Ordering::Relaxed);
    let e = control.configure("test").unwrap_err();
    assert!(
        matches!(&e, ControlError::Failed(m) if m.contains("no such file")),
        "{e}"
    );
    assert_eq!(control.state(), State::Initial);
    let status = control.status();
    assert_eq!(status["state"], "initial");
    let error = status["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("configure failed: run.toml: no such file"),
        "{status}"
    );
    assert!(matches!(
        control.start(None, false, "test"),
        Err(ControlError::Illegal(_))
    ));
    // Fixed again: configured, and the error is gone.
    broken.store(false, Ordering::Relaxed);
    control.configure("test").unwrap();
    assert_eq!(control.state(), State::Configured);
    assert!(control.status()["error"].is_null());
}

#[test]
fn a_recording_request_without_a_run_or_with_recording_off_is_a_conflict() {
    let control = RunControl::new(Box::new(|| {
        let mut c = RunConfig::default();
        c.recording.enabled = true;
        Ok(Box::new(c))
    }));
    control.configure("test").unwrap();
    let (code, answer) = super::super::http::execute(
        &control,
        swdaq_control::Command::Record { seconds: None },
        "test",
    );
    assert_eq!(code, 409, "{answer}");
    let off = RunControl::new(Box::new(|| Ok(Box::new(RunConfig::default()))));
    off.configure("test").unwrap();
    // Running without recording: refused by the configuration, not the state.
    off.shared.lock().state = State::Running;
    let e = off.record(Some(1.0), "test").unwrap_err();
    assert!(
        matches!(&e, ControlError::NotApplicable(m) if m.contains("recording is off")),
        "{e}"
    );
}

#[test]
fn a_trigger_change_is_checked_and_kept_for_the_next_runs() {
    let control = RunControl::new(Box::new(|| Ok(Box::new(RunConfig::default()))));
    let change = |trigger: &str, prescale| TriggerChange {
        trigger: trigger.into(),
        prescale: Some(prescale),
        rate_hz: None,
    };
    assert!(matches!(
        control.change_trigger(change("multiplicity", 2), "test"),
        Err(ControlError::Illegal(_))
    ));
    control.configure("test").unwrap();
    control
        .change_trigger(change("multiplicity", 3), "test")
        .unwrap();
    let e = control.change_trigger(change("multiplicity", 0), "test");
    assert!(matches!(e, Err(ControlError::BadRequest(_))));
    let inner = control.shared.lock();
    let kept = RunConfig::parse(&inner.config.as_ref().unwrap().to_toml()).unwrap();
    assert_eq!(kept.trigger.multiplicity.prescale, 3);
}

#[test]
fn every_operator_command_is_a_route_of_the_api() {
    for (route, event) in OPERATOR_COMMANDS {
        let body = if event == Event::ChangeTrigger {
            &br#"{"trigger":"random","rate_hz":1}"#[..]
        } else {
            b""
        };
        assert!(
            swdaq_control::parse_request("POST", &format!("/{route}"), body).is_ok(),
            "{route}"
        );
    }
}

#[test]
fn a_run_number_far_beyond_the_last_needs_confirming() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(swdaq_format::run_files::LAST_RUN_FILE),
        "7\n",
    )
    .unwrap();
    let dirs = [dir.path()];
    assert!(check_jump(&dirs, 7 + MAX_RUN_JUMP, None).is_ok());
    for wanted in [8 + MAX_RUN_JUMP, u32::MAX] {
        let e = check_jump(&dirs, wanted, None).unwrap_err();
        assert!(matches!(e, ControlError::Conflict(_)), "{e}");
        assert!(e.to_string().contains("\"confirm_jump\": true"), "{e}");
    }
    // The last run started here counts too, when its files are elsewhere or gone.
    assert!(check_jump(&dirs, 2000 + MAX_RUN_JUMP, Some(2000)).is_ok());
}
