//! How much one source may cost: what it downloads, how many files it holds, how large
//! they are in all and one by one, and how deep its paths go. Each is checked while
//! the source is read, before anything of it is kept.

use std::fmt;

/// The limits one fetch enforces; [`Limits::DEFAULT`] is the policy, tests shrink it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes a fetch may download (a Git pack as it arrives).
    pub max_download_bytes: u64,
    /// The most files an artifact may hold (after `ignore`).
    pub max_files: usize,
    /// The most bytes all its files may add up to, uncompressed.
    pub max_bytes: u64,
    /// The most bytes one file may hold, uncompressed.
    pub max_file_bytes: u64,
    /// The most directories deep a file may be (`a/b/c.yaml` is 3).
    pub max_depth: usize,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        max_download_bytes: 256 << 20,
        max_files: 10_000,
        max_bytes: 64 << 20,
        max_file_bytes: 8 << 20,
        max_depth: 32,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// A limit a source broke, with its value; shown as `more than 10000 files (the limit)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    DownloadBytes(u64),
    Files(usize),
    Bytes(u64),
    FileBytes(u64),
    Depth(usize),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::DownloadBytes(n) => write!(f, "a download of more than {n} bytes (the limit)"),
            Limit::Files(n) => write!(f, "more than {n} files (the limit)"),
            Limit::Bytes(n) => write!(f, "more than {n} bytes of files in all (the limit)"),
            Limit::FileBytes(n) => write!(f, "a file of more than {n} bytes (the limit)"),
            Limit::Depth(n) => write!(f, "a path more than {n} directories deep (the limit)"),
        }
    }
}

/// Counts what an artifact holds so far against the [`Limits`].
#[derive(Debug)]
pub(crate) struct Tally {
    limits: Limits,
    files: usize,
    bytes: u64,
}

impl Tally {
    pub(crate) fn new(limits: Limits) -> Tally {
        Tally { limits, files: 0, bytes: 0 }
    }

    /// One more file at `path` of `size` bytes; the limit it breaks, if any.
    pub(crate) fn add(&mut self, path: &str, size: u64) -> Result<(), Limit> {
        let l = &self.limits;
        if path.split('/').count() - 1 > l.max_depth {
            return Err(Limit::Depth(l.max_depth));
        }
        if size > l.max_file_bytes {
            return Err(Limit::FileBytes(l.max_file_bytes));
        }
        self.files += 1;
        self.bytes = self.bytes.saturating_add(size);
        if self.files > l.max_files {
            return Err(Limit::Files(l.max_files));
        }
        if self.bytes > l.max_bytes {
            return Err(Limit::Bytes(l.max_bytes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_is_broken_by_one_more_and_named() {
        let limits = Limits { max_download_bytes: 0, max_files: 2, max_bytes: 10, max_file_bytes: 6, max_depth: 1 };
        let mut t = Tally::new(limits);
        assert_eq!(t.add("a/b.yaml", 6), Ok(()));
        assert_eq!(t.add("a/b/c.yaml", 1), Err(Limit::Depth(1)));
        assert_eq!(t.add("c.yaml", 7), Err(Limit::FileBytes(6)));
        assert_eq!(t.add("c.yaml", 5), Err(Limit::Bytes(10)));
        let mut t = Tally::new(limits);
        assert_eq!((t.add("a", 0), t.add("b", 0), t.add("c", 0)), (Ok(()), Ok(()), Err(Limit::Files(2))));
        assert_eq!(Limit::Files(2).to_string(), "more than 2 files (the limit)");
    }
}
