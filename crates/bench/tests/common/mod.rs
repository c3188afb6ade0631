//! What the benchmarks' tests share: running `fleetsync-bench`, and the PostgreSQL
//! they drain on. (Copied from the few of crates/cli/tests/common they need.)
#![allow(dead_code)] // each test file uses its own part of this

use std::process::{Command, Output};

pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fleetsync-bench"));
    c.env_remove("RUST_LOG");
    c
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run fleetsync-bench")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn database_url() -> String {
    std::env::var("FLEETSYNC_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}
