//! A webhook target: the operator's allowlist entries, then a URL's host
//! and a resolved address judged by the SSRF guard. The first line is the
//! allowlist (comma-separated), the second the URL, the rest an address.
#![no_main]
use collab_server::webhooks::ssrf::Guard;
use libfuzzer_sys::fuzz_target;

collab_fuzz::capped_allocator!();

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(3, '\n');
    let allowed: Vec<String> = parts
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let Ok(guard) = Guard::new(&allowed) else {
        return;
    };
    let url = parts.next().unwrap_or("");
    let addr = parts.next().unwrap_or("");
    let host = match url.split_once("://") {
        Some((_, rest)) => rest.split(['/', ':', '?', '#']).next().unwrap_or(""),
        None => url,
    };
    if let Ok(ip) = addr.trim().parse::<std::net::IpAddr>() {
        let _ = guard.check(host, ip);
    }
});
