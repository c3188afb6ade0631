//! `fleetsync serve` over https (its TLS flags, and what it says when they are
//! wrong), and `fleetsync agent`'s TLS flags.

mod common;

use common::{bin, run, stderr};
use fleetsync_api::{Client, ClientTls};
use fleetsync_testkit::tls::TestCa;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn serve_with_a_certificate_serves_https_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("cli test CA").expect("CA");
    let ca_file = ca.write_cert(dir.path(), "ca").expect("write");
    let files = ca.server_cert().expect("cert").write(dir.path(), "server").expect("write");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let log = dir.path().join("serve.log");
    let mut child = bin()
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--db",
            dir.path().join("hub.db").to_str().expect("utf-8"),
        ])
        .env("FLEETSYNC_TLS_CERT_FILE", &files.cert)
        .env("FLEETSYNC_TLS_PRIVATE_KEY_FILE", &files.key)
        .args(["--tls-reload-interval", "1s"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn serve");

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let tls = ClientTls { ca_file: Some(ca_file), ..ClientTls::default() };
    let hub = Client::build(&format!("https://localhost:{port}"), &tls, Some(Duration::from_secs(2))).expect("client");
    let start = Instant::now();
    while let Err(e) = rt.block_on(hub.health()) {
        assert!(start.elapsed() < Duration::from_secs(20), "no https answer: {}", fleetsync_api::describe(&e));
        assert!(
            child.try_wait().expect("wait").is_none(),
            "serve exited: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let said = std::fs::read_to_string(&log).expect("log");
    assert!(said.contains(&format!("https://127.0.0.1:{port}")) && said.contains("serving https"), "{said}");

    // The CLI over https, with the token the hub wrote beside its database.
    let token = std::fs::read_to_string(dir.path().join("hub.db.admin-token")).expect("the first token");
    let server = format!("https://localhost:{port}");
    let cli = |ca: &std::path::Path| {
        let ca = ca.to_str().expect("utf-8");
        bin()
            .args(["get", "clusters", "--server", &server, "--certificate-authority", ca])
            .env("FLEETSYNC_TOKEN", token.trim())
            .output()
            .expect("run")
    };
    let ok = cli(tls.ca_file.as_deref().expect("the CA file"));
    assert!(ok.status.success(), "{}", stderr(&ok));
    let other = TestCa::new("another CA").expect("CA").write_cert(dir.path(), "other").expect("write");
    let wrong = cli(&other);
    assert!(
        !wrong.status.success() && stderr(&wrong).contains("invalid peer certificate: UnknownIssuer"),
        "{}",
        stderr(&wrong)
    );

    std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "serve exits 0 on SIGTERM");
}

#[test]
fn tls_flags_that_do_not_go_together_are_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("hub.db");
    let db = db.to_str().expect("utf-8");
    let serve = |flags: &[&str]| {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--db", db];
        args.extend_from_slice(flags);
        run(&args)
    };
    let out = serve(&["--tls-cert-file", "a.crt"]);
    assert!(!out.status.success() && stderr(&out).contains("--tls-private-key-file"), "{}", stderr(&out));
    let out = serve(&["--client-ca-file", "ca.crt"]);
    assert!(!out.status.success() && stderr(&out).contains("--tls-cert-file"), "{}", stderr(&out));
    let missing = dir.path().join("missing.crt");
    let out = serve(&["--tls-cert-file", missing.to_str().expect("utf-8"), "--tls-private-key-file", "k.key"]);
    let said = stderr(&out);
    assert!(
        !out.status.success() && said.contains(&format!("cannot read the certificate file {}", missing.display())),
        "{said}"
    );

    let agent = ["agent", "--hub", "https://hub:8443", "--cluster", "c1", "--token-file", "t", "--target", "http://t"];
    let out = run(&[&agent[..], &["--client-certificate", "c.crt"]].concat());
    assert!(!out.status.success() && stderr(&out).contains("--client-key"), "{}", stderr(&out));
}
