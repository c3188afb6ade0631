//! The client commands at their edges: a reader that stops early (`| head`), a hub that
//! never answers, a URL without a scheme; and `completion` and `version`.

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Runs a client command against `hub`, reads one line of its output and closes the
/// pipe, as `| head -1` does; the command must end without a panic.
fn read_one_line_and_close(hub: &Hub, args: &[&str]) {
    let mut child = bin()
        .args(args)
        .args(["--server", &hub.url])
        .env("FLEETSYNC_TOKEN", &hub.token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the client");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut first).expect("one line");
    assert!(!first.is_empty(), "{args:?} printed nothing");
    // The reader (and with it the pipe's only read end) is dropped here.
    let out = child.wait_with_output().expect("wait");
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{args:?} panicked on a closed pipe: {err}");
    assert_ne!(out.status.code(), Some(101), "{args:?} exited as a panic does: {err}");
    assert!(out.status.success(), "{args:?} ends quietly when its reader has gone: {:?} {err}", out.status);
}

#[test]
fn output_into_a_pipe_closed_early_ends_quietly() {
    let hub = Hub::start();
    // Far more output than a pipe buffers (64 KiB), so the client is still writing
    // when the pipe closes.
    let pad = "x".repeat(60);
    let mut yaml = String::new();
    for i in 0..3000 {
        yaml.push_str(&format!(
            "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{i}, labels: {{pad: {pad}}}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n---\n"
        ));
    }
    let path = hub.dir.path().join("many.yaml");
    std::fs::File::create(&path).and_then(|mut f| f.write_all(yaml.as_bytes())).expect("write the clusters");
    let out = hub.cli(&["apply", "-f", path.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));

    read_one_line_and_close(&hub, &["get", "clusters"]);
    read_one_line_and_close(&hub, &["get", "clusters", "-o", "json"]);
    read_one_line_and_close(&hub, &["get", "clusters", "-o", "yaml"]);
}

/// A server that accepts connections and never answers, on a thread of its own; the
/// accepted connections are held open for the life of the test process.
fn silent_server() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    url
}

#[test]
fn a_hub_that_never_answers_times_out_and_names_the_flag() {
    let url = silent_server();
    let start = Instant::now();
    let out = run(&["get", "clusters", "--request-timeout", "1s", "--server", &url]);
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    assert!(!out.status.success());
    assert!(stderr(&out).contains(&format!("no answer from {url} within 1s (--request-timeout)")), "{}", stderr(&out));

    // The environment sets it too; a watch waits that long for the hub to start answering.
    let start = Instant::now();
    let out = bin()
        .args(["get", "events", "--watch", "--server", &url])
        .env("FLEETSYNC_REQUEST_TIMEOUT", "500ms")
        .output()
        .expect("run");
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("no answer from {url} within 500ms (--request-timeout)")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_server_url_without_a_scheme_says_what_to_write() {
    let out = run(&["get", "clusters", "--server", "127.0.0.1:8080"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("the hub's URL needs a scheme: http://127.0.0.1:8080 or https://127.0.0.1:8080"), "{err}");
    assert!(!err.contains("builder error"), "{err}");
}

#[test]
fn completion_scripts_for_bash_zsh_and_fish() {
    let out = run(&["completion", "bash"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let script = stdout(&out);
    // The dynamic script: the shell asks `fleetsync` itself for each completion.
    assert!(script.contains("_clap_complete_fleetsync") && script.contains("COMPLETE=\"bash\""), "{script}");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("fleetsync.bash");
    std::fs::write(&file, &script).expect("write the script");
    let check = std::process::Command::new("bash").arg("-n").arg(&file).output().expect("run bash -n");
    assert!(check.status.success(), "bash -n: {}", String::from_utf8_lossy(&check.stderr));

    for shell in ["zsh", "fish"] {
        let out = run(&["completion", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        assert!(stdout(&out).contains("fleetsync") && stdout(&out).contains("COMPLETE"), "{shell}: {}", stdout(&out));
    }
    assert!(!run(&["completion", "tcsh"]).status.success(), "an unknown shell is refused");
}

#[test]
fn version_prints_the_clients_and_says_the_servers_is_unknown() {
    // Nothing listens on port 9: the server's version cannot be known.
    let out = run(&["version", "-o", "json", "--server", "http://127.0.0.1:9"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(v["client"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["server"], Value::Null, "{v}");
    assert!(stderr(&out).contains("cannot reach the hub at http://127.0.0.1:9"), "{}", stderr(&out));

    let out = run(&["version", "--server", "http://127.0.0.1:9"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with(&format!("client: {}\nserver: unknown (", env!("CARGO_PKG_VERSION"))),
        "{}",
        stdout(&out)
    );
}

/// A hub that answers reports its version (`GET /v1/version`).
#[test]
fn version_prints_the_hubs_when_it_answers() {
    let hub = Hub::start();
    let out = hub.cli(&["version", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(
        (&v["client"], &v["server"]),
        (&Value::from(env!("CARGO_PKG_VERSION")), &Value::from(env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    let schema = &v["schema"];
    assert_eq!(schema["store"], "sqlite", "{v}");
    let (version, latest) =
        (schema["version"].as_u64().expect("a version"), schema["latest"].as_u64().expect("the latest"));
    assert!(version >= 1 && version == latest, "a hub migrates its store when it starts: {v}");
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let out = hub.cli(&["version"]);
    let text = format!(
        "client: {0}\nserver: {0}\nschema: sqlite {version} (the hub's build keeps {latest})\n",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(stdout(&out), text);
}

/// The hub's connection flags are offered by the commands that talk to a hub only, and
/// `migrate` does not offer to skip migrating.
#[test]
fn flags_show_only_where_they_apply() {
    let flags = |args: &[&str]| -> Vec<String> {
        let out = run(&[args, &["--help"]].concat());
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let help = stdout(&out);
        let offered = |f: &&&str| help.lines().any(|l| l.trim_start().split([' ', '=']).next() == Some(**f));
        ["--server", "--request-timeout", "--context", "--no-migrate"]
            .iter()
            .filter(offered)
            .map(|f| f.to_string())
            .collect()
    };
    for hub_command in
        [&["get"][..], &["apply"], &["delete"], &["describe"], &["wait"], &["retry"], &["version"], &["token", "list"]]
    {
        assert_eq!(flags(hub_command)[..3], ["--server", "--request-timeout", "--context"], "{hub_command:?}");
    }
    assert_eq!(flags(&["serve"]), ["--no-migrate"]);
    assert_eq!(flags(&["worker"]), ["--no-migrate"]);
    assert!(flags(&["migrate"]).is_empty());
    assert!(flags(&["demo"]).is_empty());
    // The agent's own: its requests' timeout, and the context of its target's kubeconfig.
    assert_eq!(flags(&["agent"]), ["--request-timeout", "--context"], "the agent's own, to the hub and its target");
    let out = run(&["serve", "--server", "http://x"]);
    assert!(!out.status.success() && stderr(&out).contains("unexpected argument '--server'"), "{}", stderr(&out));
}
