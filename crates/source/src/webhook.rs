//! Whether a push notification really comes from the source's host: the signatures
//! GitHub and GitLab send, and a generic form, checked against the source's secret.
//!
//! - GitHub (and Gitea, Forgejo): `X-Hub-Signature-256: sha256=HEX`, the HMAC-SHA256 of
//!   the body under the secret.
//! - Generic: `X-Signature: sha256=HEX`, the same, for any sender that can sign.
//! - GitLab: `X-Gitlab-Token: SECRET`, the secret itself (GitLab signs nothing).
//!
//! Every comparison takes the same time whatever the value (ring's HMAC verification,
//! and a constant-time comparison for GitLab's token). A notification names no
//! revision that is trusted: it only says "fetch now"; what is fetched is what the
//! remote advertises.

use ring::hmac;

/// Which form a notification was signed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signed {
    GitHub,
    GitLab,
    Generic,
}

/// Why a notification is refused. None carries the secret or the signature sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    #[error("no signature: send X-Hub-Signature-256 (GitHub), X-Gitlab-Token (GitLab) or X-Signature (sha256=HEX)")]
    Unsigned,
    #[error("{header}: not of the form sha256=HEX")]
    Malformed { header: &'static str },
    #[error("{header}: the signature does not match the source's secret")]
    Mismatch { header: &'static str },
}

/// Checks a notification's signature; `header` looks a request header up by its
/// lowercase name.
pub fn verify<'a>(header: impl Fn(&str) -> Option<&'a str>, body: &[u8], secret: &[u8]) -> Result<Signed, HookError> {
    for (name, signed) in [("x-hub-signature-256", Signed::GitHub), ("x-signature", Signed::Generic)] {
        if let Some(value) = header(name) {
            let header = if signed == Signed::GitHub { "X-Hub-Signature-256" } else { "X-Signature" };
            let tag = value.strip_prefix("sha256=").and_then(unhex).ok_or(HookError::Malformed { header })?;
            let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
            return hmac::verify(&key, body, &tag).map(|()| signed).map_err(|_| HookError::Mismatch { header });
        }
    }
    if let Some(token) = header("x-gitlab-token") {
        return if constant_time_eq(token.as_bytes(), secret) {
            Ok(Signed::GitLab)
        } else {
            Err(HookError::Mismatch { header: "X-Gitlab-Token" })
        };
    }
    Err(HookError::Unsigned)
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's own example: "Validating webhook deliveries".
    const SECRET: &[u8] = b"It's a Secret to Everybody";
    const BODY: &[u8] = b"Hello, World!";
    const SIGNATURE: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    fn headers<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
        move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    #[test]
    fn githubs_example_signature_verifies_and_anything_else_does_not() {
        assert_eq!(verify(headers(&[("x-hub-signature-256", SIGNATURE)]), BODY, SECRET), Ok(Signed::GitHub));
        assert_eq!(verify(headers(&[("x-signature", SIGNATURE)]), BODY, SECRET), Ok(Signed::Generic));
        let mismatch = Err(HookError::Mismatch { header: "X-Hub-Signature-256" });
        assert_eq!(verify(headers(&[("x-hub-signature-256", SIGNATURE)]), b"Hello, World?", SECRET), mismatch);
        assert_eq!(verify(headers(&[("x-hub-signature-256", SIGNATURE)]), BODY, b"another secret"), mismatch);
        let malformed = Err(HookError::Malformed { header: "X-Hub-Signature-256" });
        assert_eq!(verify(headers(&[("x-hub-signature-256", "sha1=abcd")]), BODY, SECRET), malformed);
        assert_eq!(verify(headers(&[("x-hub-signature-256", "sha256=zz")]), BODY, SECRET), malformed);
    }

    #[test]
    fn gitlabs_token_must_be_the_secret_and_an_unsigned_hook_is_refused() {
        let secret = "It's a Secret to Everybody";
        assert_eq!(verify(headers(&[("x-gitlab-token", secret)]), BODY, SECRET), Ok(Signed::GitLab));
        let err = verify(headers(&[("x-gitlab-token", "It's a Secret to Everybod")]), BODY, SECRET);
        assert_eq!(err, Err(HookError::Mismatch { header: "X-Gitlab-Token" }));
        assert_eq!(verify(headers(&[]), BODY, SECRET), Err(HookError::Unsigned));
        let shown = HookError::Mismatch { header: "X-Gitlab-Token" }.to_string();
        assert!(!shown.contains("Secret"), "{shown}");
    }
}
