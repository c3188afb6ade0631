//! An SSH server for Git on a loopback port: Debian's `sshd` (installed when missing,
//! as root) with a host key and one authorized client key of its own, made with
//! `ssh-keygen` in a temporary directory. It serves the repositories under a root over
//! `ssh://root@127.0.0.1:PORT/ROOT/NAME` (`git-upload-pack`, as any Git host over SSH).

use crate::tools::installed;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct SshServer {
    root: PathBuf,
    port: u16,
    /// The client's private key (OpenSSH format), the one key the server takes.
    pub identity: String,
    /// The server's host key as a `known_hosts` line.
    pub known_hosts: String,
    _dir: tempfile::TempDir,
    child: Child,
}

impl SshServer {
    /// Serves the repositories under `root`; waits until it listens.
    pub fn start(root: &Path) -> SshServer {
        let sshd = installed("sshd", &["openssh-server"]);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let keygen = |name: &str| {
            let path = dir.path().join(name);
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "fleetsync-test", "-f"])
                .arg(&path)
                .output()
                .expect("ssh-keygen");
            assert!(out.status.success(), "ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
            path
        };
        let (host, client) = (keygen("host"), keygen("client"));
        std::fs::copy(client.with_extension("pub"), dir.path().join("authorized_keys")).expect("authorized keys");
        // sshd's privilege separation directory, which Debian's service would make.
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let config = dir.path().join("sshd_config");
        let d = dir.path().display();
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host\nAuthorizedKeysFile {d}/authorized_keys\n\
                 PidFile {d}/sshd.pid\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
            ),
        )
        .expect("sshd_config");
        let child = Command::new(sshd)
            .arg("-D")
            .arg("-f")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start sshd");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sshd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let host_key = std::fs::read_to_string(host.with_extension("pub")).expect("the host key");
        let host_key: Vec<&str> = host_key.split_whitespace().take(2).collect();
        SshServer {
            root: root.to_path_buf(),
            port,
            identity: std::fs::read_to_string(&client).expect("the client key"),
            known_hosts: format!("[127.0.0.1]:{port} {}\n", host_key.join(" ")),
            _dir: dir,
            child,
        }
    }

    /// `ssh://root@127.0.0.1:PORT/ROOT/NAME`.
    pub fn url(&self, name: &str) -> String {
        format!("ssh://root@127.0.0.1:{}{}", self.port, self.root.join(name).display())
    }

    /// A `known_hosts` line for this address with another host key than the server's.
    pub fn impostor_known_hosts(&self) -> String {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("other");
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&path)
            .output()
            .expect("ssh-keygen");
        assert!(out.status.success(), "ssh-keygen");
        let key = std::fs::read_to_string(path.with_extension("pub")).expect("the key");
        let key: Vec<&str> = key.split_whitespace().take(2).collect();
        format!("[127.0.0.1]:{} {}\n", self.port, key.join(" "))
    }
}

impl Drop for SshServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
