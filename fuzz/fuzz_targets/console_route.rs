#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_console::{Route, route};

// Whatever method and target a client sends to `swdaq serve`, as the first line and the
// rest: a console route or none, never a panic; a history's `since` is a finite number, and
// an asset is served for the same path whatever query follows it.
fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (method, target) = text.split_once('\n').unwrap_or((&text, ""));
    match route(method, target) {
        Some(Route::History { since: Some(t) }) => assert!(t.is_finite()),
        Some(Route::Asset(asset)) => {
            let path = target.split(['?', '#']).next().unwrap_or_default();
            assert_eq!(route("GET", &format!("{path}?x")), Some(Route::Asset(asset)));
        }
        _ => {}
    }
});
