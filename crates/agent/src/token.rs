//! A bearer token kept in a file that is rotated under the agent (as a Kubernetes
//! service-account token is): read at start, and read again once it is older than a
//! refresh interval, so a rotated token is used without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Why a token file could not be read. Never carries the token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the token file {}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the token file {} is empty", path.display())]
    Empty { path: PathBuf },
}

/// A token file and the token last read from it.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    refresh: Duration,
    last: Mutex<(String, Instant)>,
}

impl TokenFile {
    /// How long a token read from the file is used before the file is read again.
    pub const REFRESH: Duration = Duration::from_secs(60);

    /// Reads the token now; fails if the file cannot be read or holds no token.
    pub fn open(path: &Path, refresh: Duration) -> Result<TokenFile, TokenError> {
        let token = read(path)?;
        Ok(TokenFile { path: path.into(), refresh, last: Mutex::new((token, Instant::now())) })
    }

    /// The token to send now: the file's content, read again if the last read is older
    /// than the refresh interval. A file that cannot be read then keeps the last token
    /// (logged; the target will say if it no longer takes it).
    pub fn current(&self) -> String {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.1.elapsed() >= self.refresh {
            last.1 = Instant::now();
            match read(&self.path) {
                Ok(token) => last.0 = token,
                Err(e) => tracing::warn!(error = %fleetsync_api::describe(&e), "keeping the last token read"),
            }
        }
        last.0.clone()
    }
}

fn read(path: &Path) -> Result<String, TokenError> {
    let text = std::fs::read_to_string(path).map_err(|source| TokenError::Unreadable { path: path.into(), source })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(TokenError::Empty { path: path.into() });
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_token_is_read_once_the_last_read_is_old_enough() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, "one\n").expect("write");
        let file = TokenFile::open(&path, Duration::from_millis(50)).expect("open");
        std::fs::write(&path, "two").expect("rotate");
        assert_eq!(file.current(), "one", "not read again yet");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(file.current(), "two");
        std::fs::remove_file(&path).expect("remove");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(file.current(), "two", "a vanished file keeps the last token");
        assert!(matches!(TokenFile::open(&path, Duration::ZERO), Err(TokenError::Unreadable { .. })));
        std::fs::write(&path, " \n").expect("write");
        let e = TokenFile::open(&path, Duration::ZERO).expect_err("empty");
        assert_eq!(e.to_string(), format!("the token file {} is empty", path.display()));
    }
}
