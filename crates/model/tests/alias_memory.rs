//! The alias bomb (a 4 MiB anchor used 1,000 times: 4 GB expanded) is refused while
//! memory grows by less than 64 MiB. Alone in its test binary, so that no other test
//! moves this process's peak resident size.

mod common;

use fleetsync_model::{parse_documents, Limit, ParseError};

/// A field of /proc/self/status, in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}"));
    let kib: u64 = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number");
    kib * 1024
}

#[test]
fn alias_bomb_is_refused_within_64_mib() {
    let bomb = common::alias_bomb(4 * 1024 * 1024, 1000);
    // Reset the peak to what is resident now (where allowed); without the reset the
    // peak only grows, and the measure below can only overstate the growth.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = status_bytes("VmRSS:");
    let r = parse_documents(&bomb);
    let peak = status_bytes("VmHWM:");
    assert!(matches!(r, Err(ParseError::Limit { limit: Limit::ExpandedBytes(_), .. })), "{r:?}");
    let grown = peak.saturating_sub(before);
    eprintln!("peak resident size grew by {} KiB while refusing the bomb", grown / 1024);
    assert!(grown < 64 * 1024 * 1024, "grew by {grown} bytes");
}
