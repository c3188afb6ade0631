//! This process's CPU time and peak memory, read from /proc (Linux).

use std::time::Duration;

/// Peak resident set size (VmHWM), in bytes; 0 where /proc is not available.
pub fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// User plus system CPU time used so far (utime + stime, in the kernel's USER_HZ
/// ticks of 1/100 s).
pub fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of stat; 12 and 13 after the name and state.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_usage() {
        let start = cpu_time();
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        assert!(cpu_time() >= start);
        assert!(peak_rss_bytes() > 1024 * 1024, "a process uses more than 1 MiB");
    }
}
