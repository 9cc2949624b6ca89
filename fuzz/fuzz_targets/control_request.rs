#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_control::parse_request;

// Whatever a client sends to `swdaq serve`: method, URL and body as the first two lines and
// the rest. A command or a typed error, never a panic; a command comes back unchanged from
// the request `swdaq ctl` would send for it.
fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |&b| b == b'\n');
    let method = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let url = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let body = parts.next().unwrap_or_default();
    if let Ok(command) = parse_request(&method, &url, body) {
        let request = command.request();
        let body = request.body.map(|b| b.to_string()).unwrap_or_default();
        let again = parse_request(request.method.as_str(), request.path, body.as_bytes());
        assert_eq!(again, Ok(command));
    }
});
