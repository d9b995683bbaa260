//! Value parsers for the text forms of sizes, durations, lease durations,
//! `MaxStartups` and log levels. They return the problem alone; the caller
//! adds which key, value and layer it was.

use std::time::Duration;

use figment::value::{Num, Value};

use super::server_config::MaxStartups;

/// Bytes, or a number with a unit: K/M/G/T and KiB/MiB/GiB/TiB are powers
/// of 1024, KB/MB/GB/TB powers of 1000 (case-insensitive), B is bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    let expected = "expected bytes or a size like 100MiB, 5M or 1GB";
    let count: u64 = digits.parse().map_err(|_| expected.to_string())?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(format!("unknown unit {:?}; {expected}", unit.trim())),
    };
    count
        .checked_mul(multiplier)
        .ok_or_else(|| "too large".to_string())
}

/// A duration: whole seconds, or a number with a unit: `ms`, `s`, `m`, `h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    let expected = "expected seconds or a duration like 500ms, 10s, 2m or 1h";
    let count: u64 = digits.parse().map_err(|_| expected.to_string())?;
    let millis: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("unknown unit {:?}; {expected}", unit.trim())),
    };
    count
        .checked_mul(millis)
        .map(Duration::from_millis)
        .ok_or_else(|| "too large".to_string())
}

/// `start:rate:full` (OpenSSH's `MaxStartups`), or one number `full`
/// (refuse past it, no early drop).
pub fn parse_max_startups(text: &str) -> Result<MaxStartups, String> {
    let expected = "expected start:rate:full like 10:30:100 (rate in percent), or one number";
    let parts: Vec<&str> = text.trim().split(':').map(str::trim).collect();
    let number = |s: &str| s.parse::<usize>().map_err(|_| expected.to_string());
    let limits = match parts.as_slice() {
        [full] => {
            let full = number(full)?;
            MaxStartups {
                start: full,
                rate: 100,
                full,
            }
        }
        [start, rate, full] => MaxStartups {
            start: number(start)?,
            rate: rate.parse().map_err(|_| expected.to_string())?,
            full: number(full)?,
        },
        _ => return Err(expected.to_string()),
    };
    if limits.full == 0 || limits.start == 0 {
        return Err("start and full must be at least 1".into());
    }
    if limits.start > limits.full {
        return Err("start must not exceed full".into());
    }
    if !(1..=100).contains(&limits.rate) {
        return Err("rate is a percentage from 1 to 100".into());
    }
    Ok(limits)
}

/// `"90"`, `"90s"`, `"15m"`, `"2h"`, `"7d"` -> seconds (the `leases.*`
/// keys, which also take days and zero).
pub fn parse_lease_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let unit_secs = match unit.trim() {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err("expected seconds or a duration like 90s, 15m, 2h, 7d".into()),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| "expected seconds or a duration like 90s, 15m, 2h, 7d".to_string())?;
    n.checked_mul(unit_secs)
        .ok_or_else(|| "duration too large".to_string())
}

/// `log.level` is a level (`info`) or a tracing filter with directives
/// (`info,russh=warn`). A lone word that is not a level would silently be
/// read as a target name, so it is refused.
pub fn validate_log_level(text: &str) -> Result<(), String> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    let expected = "expected trace, debug, info, warn, error, off or a filter like info,russh=warn";
    for directive in text.split(',') {
        let directive = directive.trim();
        if !directive.contains('=') && !LEVELS.contains(&directive.to_ascii_lowercase().as_str()) {
            return Err(expected.to_string());
        }
    }
    tracing_subscriber::EnvFilter::try_new(text).map_err(|e| format!("{e}; {expected}"))?;
    Ok(())
}

/// Join a multi-line message so every error stays on one line.
pub(super) fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join("; ")
}

pub(super) fn describe(value: &Value) -> &'static str {
    match value {
        Value::String(..) => "a string",
        Value::Char(..) => "a character",
        Value::Bool(..) => "a boolean",
        Value::Num(..) => "a number",
        Value::Empty(..) => "nothing",
        Value::Dict(..) => "a table",
        Value::Array(..) => "a list",
    }
}

/// A number as a `u64`, if it is a whole one in range: TOML integers
/// arrive signed, flags unsigned.
pub(super) fn whole_number(num: &Num) -> Option<u64> {
    num.to_u128()
        .and_then(|n| u64::try_from(n).ok())
        .or_else(|| num.to_i128().and_then(|n| u64::try_from(n).ok()))
}
