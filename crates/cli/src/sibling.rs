//! Finding the other binary: `fleetsync bench` runs `fleetsync-bench`, whose
//! hive-fleet starts `fleetsync sim` and `fleetsync worker`s. Each looks next to its
//! own executable first (as built by cargo, or installed together), then on `PATH`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// `name` next to this executable, else the first on `PATH`; `None` if neither exists.
pub fn find(name: &str) -> Option<PathBuf> {
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join(name)));
    beside.filter(|p| is_executable(p)).or_else(|| on_path(name, std::env::var_os("PATH").as_deref()?))
}

fn on_path(name: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path).map(|dir| dir.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_an_executable_on_path_and_skips_what_is_not_one() {
        let (a, b) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
        std::fs::write(a.path().join("tool"), "not executable").expect("write");
        let tool = b.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").expect("write");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let path = std::env::join_paths([a.path(), b.path()]).expect("PATH");
        assert_eq!(on_path("tool", &path), Some(tool));
        assert_eq!(on_path("other", &path), None);
    }
}
