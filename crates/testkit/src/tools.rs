//! Programs the tests run (Chromium and ChromeDriver, promtool): found on `PATH`, or
//! installed from Debian's packages when the tests run as root with apt-get, as on CI.
//! Otherwise the test fails naming the packages: it never skips.

use std::path::PathBuf;
use std::process::Command;

/// `name` on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// `name`'s path, installing `packages` first (`apt-get install`) if it is missing and
/// this is root with apt-get; else a panic naming the packages.
pub fn installed(name: &str, packages: &[&str]) -> PathBuf {
    // One install at a time: tests of one binary run in parallel, and apt-get holds a lock.
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALLING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(p) = which(name) {
        return p;
    }
    let how = format!("{name} is needed: apt-get install -y {}", packages.join(" "));
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    assert!(root && which("apt-get").is_some(), "{how} (it cannot be installed here: not root, or no apt-get)");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        let _ = Command::new("apt-get").args(["update", "-qq"]).status();
        assert!(install(), "apt-get could not install them: {how}");
    }
    which(name).unwrap_or_else(|| panic!("still missing after apt-get: {how}"))
}
