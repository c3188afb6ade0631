//! Secrets sealed at rest: the one place that seals and opens the stored form of a
//! Secret document, for every backend.
//!
//! A store given a [`Keyring`] ([`StoreConfig::keys`](crate::StoreConfig::keys)) keeps
//! each Secret's document (its canonical JSON, values included) sealed with the
//! keyring's first key, AES-256-GCM with a random 96-bit nonce per write:
//!
//! ```text
//! fleetsync:enc:aes256gcm:v1:<key name>:<base64 of nonce ‖ ciphertext ‖ tag>
//! ```
//!
//! The Secret's tenant and name are the authenticated data, so a sealed document copied
//! onto another Secret's row does not open. As Kubernetes' `EncryptionConfiguration`:
//! the first key seals, every key opens (the prefix names the key that sealed a
//! document), so a key is rotated by putting a new one first and keeping the old one
//! until every document is sealed again ([`reseal`], which the hub runs at start).
//! A store given no keyring writes documents in clear, as JSON, and refuses to read a
//! sealed one. Errors name the Secret and the key, never a value or key material.

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::stored::{decode_doc, table, WithGeneration};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use fleetsync_model::Kind;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};

/// What every sealed document starts with, up to the key's name.
const PREFIX: &str = "fleetsync:enc:aes256gcm:v1:";
/// The bytes of a key (AES-256).
pub const KEY_BYTES: usize = 32;
/// The longest key name.
const MAX_NAME: usize = 64;

/// The keys a store seals and opens Secrets with: the first seals, every one opens.
/// Never prints its keys (`Debug` shows their names).
pub struct Keyring {
    keys: Vec<Key>,
}

struct Key {
    name: String,
    key: LessSafeKey,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring").field("keys", &self.names().collect::<Vec<_>>()).finish()
    }
}

/// Why a key file cannot be used. Never quotes the file's content.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot read the encryption key file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("encryption key file, line {line}: {problem}")]
    Line { line: usize, problem: &'static str },
    #[error("encryption key file, line {line}: the key name {name:?} is used twice (line {first})")]
    Duplicate { line: usize, first: usize, name: String },
    #[error("the encryption key file holds no key (one a line: [NAME:]BASE64 of {KEY_BYTES} random bytes, e.g. from `head -c 32 /dev/urandom | base64`)")]
    Empty,
}

impl Keyring {
    /// Reads a key file: one key a line, `[NAME:]BASE64` of 32 bytes, the first line's
    /// key sealing; blank lines and lines starting with `#` are skipped. A key without a
    /// name is named `sha256-` and the first 8 hex digits of its SHA-256 (so reordering
    /// the lines keeps what each sealed document names). Warns when other users may
    /// read the file.
    pub fn from_file(path: &Path) -> Result<Keyring, KeyFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyFileError::Read { path: path.into(), source })?;
        #[cfg(unix)]
        if let Ok(meta) = std::fs::metadata(path) {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(path = %path.display(), mode = %format!("{mode:o}"), "the encryption key file may be read by other users: chmod 600 it");
            }
        }
        Keyring::parse(&text)
    }

    /// Reads a key file's text (see [`Keyring::from_file`]).
    pub fn parse(text: &str) -> Result<Keyring, KeyFileError> {
        let mut keys: Vec<(usize, Key)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let entry = raw.trim();
            if entry.is_empty() || entry.starts_with('#') {
                continue;
            }
            // Base64 has no ':', so a name is whatever comes before the first one.
            let (name, encoded) = match entry.split_once(':') {
                Some((name, encoded)) => (Some(name.trim()), encoded.trim()),
                None => (None, entry),
            };
            let bytes = BASE64.decode(encoded).ok().filter(|b| b.len() == KEY_BYTES).ok_or(KeyFileError::Line {
                line,
                problem: "expected [NAME:]BASE64 of exactly 32 bytes (e.g. from `head -c 32 /dev/urandom | base64`)",
            })?;
            let name = match name {
                Some(name) if valid_name(name) => name.to_string(),
                Some(_) => {
                    return Err(KeyFileError::Line {
                        line,
                        problem: "a key name (before ':') must be 1 to 64 letters, digits, '.', '_' or '-'",
                    })
                }
                None => fingerprint(&bytes),
            };
            if let Some((first, _)) = keys.iter().find(|(_, k)| k.name == name) {
                return Err(KeyFileError::Duplicate { line, first: *first, name });
            }
            let key = UnboundKey::new(&AES_256_GCM, &bytes)
                .map_err(|_| KeyFileError::Line { line, problem: "not a usable AES-256 key" })?;
            keys.push((line, Key { name, key: LessSafeKey::new(key) }));
        }
        if keys.is_empty() {
            return Err(KeyFileError::Empty);
        }
        Ok(Keyring { keys: keys.into_iter().map(|(_, k)| k).collect() })
    }

    /// The name of the key that seals (the first).
    pub fn sealing_key(&self) -> &str {
        &self.keys[0].name
    }

    /// The names of the keys, in the file's order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.name.as_str())
    }

    fn find(&self, name: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.name == name)
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The name of a key given without one.
fn fingerprint(key: &[u8]) -> String {
    let digest = Sha256::digest(key);
    format!("sha256-{}", digest[..4].iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// Why a Secret's stored document cannot be sealed or opened. Names the Secret and the
/// key, never a value.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("Secret {tenant}/{name} is sealed with key {key:?}, but this process was given no encryption key (--encryption-key-file)")]
    NoKey { tenant: String, name: String, key: String },
    #[error("Secret {tenant}/{name} is sealed with key {key:?}, which the encryption key file does not hold (it holds {held})")]
    UnknownKey { tenant: String, name: String, key: String, held: String },
    #[error("Secret {tenant}/{name} does not open with key {key:?}: the key of that name in the encryption key file is not the one that sealed it, or the stored row was altered")]
    WrongKey { tenant: String, name: String, key: String },
    #[error("Secret {tenant}/{name}: its stored form is not a sealed document this build reads")]
    Malformed { tenant: String, name: String },
    #[error("the system's random number generator failed")]
    Random,
}

impl From<SealError> for crate::StoreError {
    /// Not transient: the same keys fail the same way.
    fn from(e: SealError) -> Self {
        let step = if matches!(e, SealError::Random) { "sealing a Secret" } else { "opening a sealed Secret" };
        crate::StoreError::backend(step, false, e)
    }
}

/// A stored document of `kind` read back: a Secret's opened first (see [`open`]), then
/// decoded with its stored generation. Every backend reads documents through this.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn decode_stored<T: serde::de::DeserializeOwned + WithGeneration>(
    kind: Kind,
    keys: Option<&Keyring>,
    tenant: &str,
    name: &str,
    stored: &str,
    generation: i64,
) -> crate::Result<T> {
    let doc = match kind {
        Kind::Secret => open(keys, tenant, name, stored)?,
        Kind::Cluster | Kind::SyncSet | Kind::GitRepository | Kind::OCIRepository | Kind::Notifier => {
            Cow::Borrowed(stored)
        }
    };
    decode_doc(table(kind), &doc, generation)
}

/// Whether a stored document is sealed (a document in clear is JSON, `{…`).
pub(crate) fn is_sealed(doc: &str) -> bool {
    doc.starts_with(PREFIX)
}

/// The name of the key that sealed a stored document, if it is sealed.
pub(crate) fn sealed_by(doc: &str) -> Option<&str> {
    doc.strip_prefix(PREFIX).and_then(|rest| rest.split_once(':')).map(|(key, _)| key)
}

/// The authenticated data of Secret `tenant/name`: a sealed document opens only as it.
fn aad(tenant: &str, name: &str) -> Vec<u8> {
    serde_json::to_vec(&["fleetsync", "Secret", tenant, name]).unwrap_or_default()
}

/// The stored form of Secret `tenant/name`'s canonical document `doc`: sealed with
/// the keyring's first key, or `doc` itself without a keyring.
pub(crate) fn seal(keys: Option<&Keyring>, tenant: &str, name: &str, doc: String) -> Result<String, SealError> {
    let Some(keys) = keys else { return Ok(doc) };
    let key = &keys.keys[0];
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new().fill(&mut nonce).map_err(|_| SealError::Random)?;
    let mut sealed = doc.into_bytes();
    key.key
        .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad(tenant, name)), &mut sealed)
        .map_err(|_| SealError::Random)?;
    let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    Ok(format!("{PREFIX}{}:{}", key.name, BASE64.encode(out)))
}

/// The canonical document of Secret `tenant/name` from its stored form: opened if
/// sealed (with the key it names), as it is if in clear.
pub(crate) fn open<'a>(
    keys: Option<&Keyring>,
    tenant: &str,
    name: &str,
    stored: &'a str,
) -> Result<Cow<'a, str>, SealError> {
    let Some(rest) = stored.strip_prefix(PREFIX) else { return Ok(Cow::Borrowed(stored)) };
    let malformed = || SealError::Malformed { tenant: tenant.into(), name: name.into() };
    let (key_name, encoded) = rest.split_once(':').ok_or_else(malformed)?;
    let Some(keys) = keys else {
        return Err(SealError::NoKey { tenant: tenant.into(), name: name.into(), key: key_name.into() });
    };
    let key = keys.find(key_name).ok_or_else(|| SealError::UnknownKey {
        tenant: tenant.into(),
        name: name.into(),
        key: key_name.into(),
        held: keys.names().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", "),
    })?;
    let mut bytes = BASE64.decode(encoded).map_err(|_| malformed())?;
    if bytes.len() < NONCE_LEN {
        return Err(malformed());
    }
    let mut sealed = bytes.split_off(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(&bytes).map_err(|_| malformed())?;
    let wrong = || SealError::WrongKey { tenant: tenant.into(), name: name.into(), key: key_name.into() };
    let plain = key.key.open_in_place(nonce, Aad::from(aad(tenant, name)), &mut sealed).map_err(|_| wrong())?;
    let len = plain.len();
    sealed.truncate(len);
    // Sealed from a `String`: not UTF-8 only if altered, which the tag rules out.
    String::from_utf8(sealed).map(Cow::Owned).map_err(|_| malformed())
}

/// What [`reseal`] finds a stored document to need.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reseal {
    /// Sealed with the sealing key already (and it opens), or in clear with no keyring.
    Keep,
    /// To be stored as this: it was in clear, or sealed with another key.
    Write(String),
}

/// What Secret `tenant/name`'s stored document `stored` needs so that it is sealed
/// with the keyring's first key; fails if it does not open (an unknown or wrong key,
/// or no keyring for a sealed document), which is what a process checks at start.
pub(crate) fn reseal(keys: Option<&Keyring>, tenant: &str, name: &str, stored: &str) -> Result<Reseal, SealError> {
    let doc = open(keys, tenant, name, stored)?;
    let Some(keys) = keys else { return Ok(Reseal::Keep) };
    if sealed_by(stored) == Some(keys.sealing_key()) {
        return Ok(Reseal::Keep);
    }
    Ok(Reseal::Write(seal(Some(keys), tenant, name, doc.into_owned())?))
}

/// What a store's [`reseal`] of every Secret did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Resealed {
    /// Secrets sealed with the sealing key already.
    pub sealed: u64,
    /// Secrets sealed again with the sealing key (they were in clear or sealed with
    /// another key).
    pub resealed: u64,
    /// Of those, the ones that were in clear.
    pub were_in_clear: u64,
    /// Secrets left in clear (the store has no keyring).
    pub in_clear: u64,
}

impl Resealed {
    /// Counts one Secret's stored document `stored`, of which [`reseal`] said `what`.
    pub(crate) fn count(&mut self, stored: &str, what: &Reseal) {
        match (what, is_sealed(stored)) {
            (Reseal::Keep, true) => self.sealed += 1,
            (Reseal::Keep, false) => self.in_clear += 1,
            (Reseal::Write(_), was_sealed) => {
                self.resealed += 1;
                self.were_in_clear += u64::from(!was_sealed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_line(name: Option<&str>, byte: u8) -> String {
        let key = BASE64.encode([byte; KEY_BYTES]);
        match name {
            Some(n) => format!("{n}:{key}"),
            None => key,
        }
    }

    const DOC: &str = r#"{"metadata":{"name":"kc"},"stringData":{"kubeconfig":"MARKER-secret"}}"#;

    #[test]
    fn sealed_documents_open_only_with_their_key_and_as_their_secret() {
        let keys = Keyring::parse(&key_line(Some("k1"), 1)).expect("keys");
        let sealed = seal(Some(&keys), "t", "kc", DOC.into()).expect("seal");
        assert!(sealed.starts_with("fleetsync:enc:aes256gcm:v1:k1:") && !sealed.contains("MARKER"), "{sealed}");
        assert_ne!(sealed, seal(Some(&keys), "t", "kc", DOC.into()).expect("seal"), "a new nonce each time");
        assert_eq!(open(Some(&keys), "t", "kc", &sealed).expect("open"), DOC);
        assert_eq!(sealed_by(&sealed), Some("k1"));

        // Another Secret's row, another key of the same name, no key, an unknown key.
        let moved = open(Some(&keys), "t", "other", &sealed).expect_err("bound to its Secret");
        assert!(matches!(moved, SealError::WrongKey { .. }), "{moved}");
        let other = Keyring::parse(&key_line(Some("k1"), 2)).expect("keys");
        let wrong = open(Some(&other), "t", "kc", &sealed).expect_err("a wrong key");
        assert_eq!(wrong.to_string(), "Secret t/kc does not open with key \"k1\": the key of that name in the encryption key file is not the one that sealed it, or the stored row was altered");
        let none = open(None, "t", "kc", &sealed).expect_err("no key");
        assert!(
            matches!(none, SealError::NoKey { .. }) && none.to_string().contains("--encryption-key-file"),
            "{none}"
        );
        let unknown = Keyring::parse(&key_line(Some("k2"), 1)).expect("keys");
        let e = open(Some(&unknown), "t", "kc", &sealed).expect_err("unknown key");
        assert!(e.to_string().contains("\"k1\", which the encryption key file does not hold (it holds \"k2\")"), "{e}");

        // An altered byte does not open.
        let mut altered = sealed.clone().into_bytes();
        let at = altered.len() - 5;
        altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).expect("utf-8");
        assert!(open(Some(&keys), "t", "kc", &altered).is_err());
        // A document in clear reads as it is, with or without keys.
        assert_eq!(open(Some(&keys), "t", "kc", DOC).expect("clear"), DOC);
        assert_eq!(seal(None, "t", "kc", DOC.into()).expect("no keys"), DOC);
    }

    #[test]
    fn the_first_key_seals_and_every_key_opens() {
        let old = Keyring::parse(&key_line(Some("old"), 1)).expect("keys");
        let both =
            Keyring::parse(&format!("# rotation\n\n{}\n{}\n", key_line(Some("new"), 2), key_line(Some("old"), 1)))
                .expect("keys");
        assert_eq!(both.sealing_key(), "new");
        let by_old = seal(Some(&old), "t", "kc", DOC.into()).expect("seal");
        assert_eq!(open(Some(&both), "t", "kc", &by_old).expect("the old key opens"), DOC);
        let Reseal::Write(by_new) = reseal(Some(&both), "t", "kc", &by_old).expect("reseal") else {
            panic!("not resealed")
        };
        assert_eq!(sealed_by(&by_new), Some("new"));
        assert_eq!(reseal(Some(&both), "t", "kc", &by_new).expect("kept"), Reseal::Keep);
        let Reseal::Write(from_clear) = reseal(Some(&both), "t", "kc", DOC).expect("reseal") else {
            panic!("not sealed")
        };
        assert_eq!(sealed_by(&from_clear), Some("new"));
        assert_eq!(reseal(None, "t", "kc", DOC).expect("clear"), Reseal::Keep);
        assert!(reseal(None, "t", "kc", &by_new).is_err(), "a sealed document needs a key");
        let mut n = Resealed::default();
        n.count(&by_old, &Reseal::Write(String::new()));
        n.count(DOC, &Reseal::Write(String::new()));
        n.count(&by_new, &Reseal::Keep);
        n.count(DOC, &Reseal::Keep);
        assert_eq!(n, Resealed { sealed: 1, resealed: 2, were_in_clear: 1, in_clear: 1 });
    }

    #[test]
    fn key_files_are_checked_without_showing_their_keys() {
        let secret_ish = BASE64.encode([7u8; 16]);
        for (text, says) in [
            (String::new(), "holds no key"),
            ("# only a comment\n".to_string(), "holds no key"),
            (format!("k1:{secret_ish}"), "line 1: expected [NAME:]BASE64 of exactly 32 bytes"),
            (format!("\nk1:{secret_ish}!!"), "line 2: expected"),
            (format!("bad name:{}", BASE64.encode([1u8; 32])), "line 1: a key name"),
            (
                format!("{}\n{}", key_line(Some("a"), 1), key_line(Some("a"), 2)),
                "line 2: the key name \"a\" is used twice (line 1)",
            ),
        ] {
            let e = Keyring::parse(&text).expect_err(says).to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains(&secret_ish) && !e.contains(&BASE64.encode([1u8; 32])), "{e}");
        }
        let unnamed = Keyring::parse(&key_line(None, 1)).expect("unnamed");
        assert!(
            unnamed.sealing_key().starts_with("sha256-") && unnamed.sealing_key().len() == 15,
            "{}",
            unnamed.sealing_key()
        );
        assert!(!format!("{unnamed:?}").contains(&BASE64.encode([1u8; 32])));
        let unreadable = Keyring::from_file(Path::new("/nonexistent/keys")).expect_err("missing");
        assert!(
            unreadable.to_string().starts_with("cannot read the encryption key file /nonexistent/keys"),
            "{unreadable}"
        );
    }
}
