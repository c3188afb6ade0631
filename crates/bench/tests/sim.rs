//! `fleetsync-bench sim` (also run as `fleetsync sim`): the simulator says where it
//! listens on its first line, serves simulated clusters there, and refuses bad flags
//! naming them.

mod common;

use common::{bin, run, stderr};
use std::io::{BufRead, BufReader};
use std::process::Stdio;

#[test]
fn sim_rejects_bad_flags() {
    for (arg, want) in [("--fail-status=200", "--fail-status"), ("--latency-scale=-1", "--latency-scale")] {
        let out = run(&["sim", arg]);
        assert!(!out.status.success() && stderr(&out).contains(want), "{arg}: {}", stderr(&out));
    }
}

#[test]
fn sim_prints_its_address_and_serves_clusters_there() {
    let mut child = bin()
        .args(["sim", "--listen", "127.0.0.1:0", "--latency-scale", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the simulator");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
    let addr = line.trim().strip_prefix("listening on ").expect("the address on the first line").to_string();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let resp = rt.block_on(reqwest::get(format!("http://{addr}/clusters/c1/api/v1")));
    let _ = child.kill();
    let _ = child.wait();
    let resp = resp.expect("reach the simulator");
    assert!(resp.status().is_success(), "{}", resp.status());
}
