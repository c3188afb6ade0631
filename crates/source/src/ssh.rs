//! Git over SSH with the source's own key and known hosts, nothing of the hub's.
//!
//! A fetch over `ssh://` (or `git@host:path`) runs the `ssh` program, as Git does. It
//! is given the Secret's `identity` (a private key, written 0600 into the fetch's
//! temporary directory and deleted with it) and `known_hosts`, and nothing else: no
//! ssh configuration file, no agent, no other key, no host key accepted that
//! `known_hosts` does not list, and never a prompt. A remote whose host key is not
//! listed is refused by `ssh` before anything is sent.

use crate::git::GitError;
use fleetsync_model::{Secret, SecretValue};
use std::io::Write;
use std::path::Path;

/// An SSH private key and the host keys the remote may present.
#[derive(Clone, PartialEq, Eq)]
pub struct SshKey {
    /// The private key (OpenSSH or PEM, unencrypted). Never printed.
    pub identity: SecretValue,
    /// Lines as in `~/.ssh/known_hosts` (`host key-type key`, `[host]:port …`).
    pub known_hosts: String,
}

impl std::fmt::Debug for SshKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshKey").field("known_hosts", &self.known_hosts).finish_non_exhaustive()
    }
}

/// How long `ssh` may take to connect.
const CONNECT_SECONDS: u32 = 10;

impl SshKey {
    /// The key a source's Secret holds: `identity` and `known_hosts` (Flux's keys). An
    /// error names the Secret and the key it lacks, never a value.
    pub fn from_secret(secret: &Secret) -> Result<SshKey, GitError> {
        let lacks = |key: &str| GitError::Credentials {
            secret: secret.metadata.name.clone(),
            reason: format!("an ssh URL needs `identity` (a private key) and `known_hosts`; it has no `{key}`"),
        };
        let identity = secret.get("identity").filter(|v| !v.is_empty()).ok_or_else(|| lacks("identity"))?;
        let known_hosts = secret.get("known_hosts").filter(|v| !v.is_empty()).ok_or_else(|| lacks("known_hosts"))?;
        Ok(SshKey { identity: identity.clone(), known_hosts: known_hosts.expose().to_string() })
    }

    /// Writes the key files into `dir` (the fetch's own temporary directory) and
    /// makes `repo` run `ssh` with them alone.
    pub(crate) fn configure(&self, repo: &mut gix::Repository, dir: &Path) -> Result<(), String> {
        let identity = dir.join("ssh-identity");
        let known_hosts = dir.join("ssh-known-hosts");
        // ssh wants the key to end with a newline.
        write_private(&identity, format!("{}\n", self.identity.expose().trim_end()).as_bytes())?;
        std::fs::write(&known_hosts, &self.known_hosts).map_err(|e| format!("writing known hosts: {e}"))?;
        let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
        let command = format!(
            "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o IdentityAgent=none -o UserKnownHostsFile={} \
             -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o BatchMode=yes \
             -o PasswordAuthentication=no -o ConnectTimeout={CONNECT_SECONDS}",
            quote(&identity),
            quote(&known_hosts)
        );
        let mut config = repo.config_snapshot_mut();
        config
            .set_raw_value(&gix::config::tree::Core::SSH_COMMAND, command.as_str())
            .map_err(|e| format!("setting the ssh command: {e}"))?;
        config.commit().map_err(|e| format!("setting the ssh command: {e}"))?;
        Ok(())
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("writing the ssh key: {e}"))?;
    file.write_all(bytes).map_err(|e| format!("writing the ssh key: {e}"))
}
