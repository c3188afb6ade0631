//! The `fleetsync` binary that hive-fleet starts as `fleetsync worker`s: next to this
//! executable (cargo builds both into one directory), else on `PATH`.

use anyhow::{anyhow, Result};
use std::path::PathBuf;

pub fn find() -> Result<PathBuf> {
    fleetsync::sibling::find("fleetsync").ok_or_else(|| {
        anyhow!(
            "cannot find the `fleetsync` binary next to this executable or on PATH (it runs the workers); \
             build it with `cargo build --release -p fleetsync` or put it on PATH"
        )
    })
}
