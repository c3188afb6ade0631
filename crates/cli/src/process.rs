//! CPU time and peak memory of this process or a child, read from /proc (Linux).

use std::time::Duration;

/// Which process to read: this one, or another by pid (a child, read before it is
/// reaped: once it has exited /proc no longer has it).
#[derive(Debug, Clone, Copy)]
pub enum Proc {
    Me,
    Pid(u32),
}

impl Proc {
    fn read(self, file: &str) -> String {
        let path = match self {
            Proc::Me => format!("/proc/self/{file}"),
            Proc::Pid(pid) => format!("/proc/{pid}/{file}"),
        };
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// Peak resident set size (VmHWM), in bytes; 0 where /proc is not available.
    pub fn peak_rss_bytes(self) -> u64 {
        self.read("status")
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// User plus system CPU time used so far (utime + stime, in the kernel's USER_HZ
    /// ticks of 1/100 s).
    pub fn cpu_time(self) -> Duration {
        let stat = self.read("stat");
        // Fields after the command name (which may contain spaces) start after ')'.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        // utime and stime are fields 14 and 15 of stat; 12 and 13 after the name and state.
        Duration::from_millis((ticks(11) + ticks(12)) * 10)
    }
}

/// This process's peak resident set size, in bytes.
pub fn peak_rss_bytes() -> u64 {
    Proc::Me.peak_rss_bytes()
}

/// This process's CPU time so far.
pub fn cpu_time() -> Duration {
    Proc::Me.cpu_time()
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
        let me = Proc::Pid(std::process::id());
        assert!(me.peak_rss_bytes() > 1024 * 1024 && me.cpu_time() >= start, "by pid as by self");
        assert_eq!(Proc::Pid(u32::MAX).cpu_time(), Duration::ZERO, "no such process");
    }
}
