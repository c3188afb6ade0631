//! `Origin` against `Host`: a browser names the page a request comes from in `Origin`,
//! and a page of this hub has the hub's own host and port. Anything else (another
//! site, `null`, a malformed value) is foreign.

use crate::tls::OverTls;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Uri};

/// Where a request says it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin<'a> {
    /// No `Origin` header (a same-origin GET, or a client that is not a browser).
    Absent,
    /// The hub's own origin; `https` if the page was served over https.
    Same { https: bool },
    /// Another origin (or an unreadable one), kept to name it in the refusal.
    Foreign(&'a str),
}

impl Origin<'_> {
    /// The `Origin` of a request, judged against its `Host` (or its URI's authority).
    pub fn of<'a>(headers: &'a HeaderMap, uri: &Uri, over_tls: bool) -> Origin<'a> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Origin::Absent;
        };
        let Ok(origin) = origin.to_str() else {
            return Origin::Foreign("(not text)");
        };
        let host =
            headers.get(header::HOST).and_then(|h| h.to_str().ok()).or_else(|| uri.authority().map(|a| a.as_str()));
        match host.and_then(|host| same(origin, host, over_tls)) {
            Some(https) => Origin::Same { https },
            None => Origin::Foreign(origin),
        }
    }

    /// [`Origin::of`] for a request's parts.
    pub fn of_parts(parts: &Parts) -> Origin<'_> {
        Origin::of(&parts.headers, &parts.uri, parts.extensions.get::<OverTls>().is_some())
    }
}

/// `Some(https)` if `origin` (`scheme://host[:port]`) is the origin of `host`
/// (`host[:port]`), default ports ignored. Over a plain connection the origin may be
/// https (a proxy in front of the hub ends TLS); over https it must be https.
fn same(origin: &str, host: &str, over_tls: bool) -> Option<bool> {
    let (https, authority) = if let Some(rest) = origin.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = origin.strip_prefix("http://") {
        (false, rest)
    } else {
        return None;
    };
    if over_tls && !https {
        return None;
    }
    let default_port = if https { ":443" } else { ":80" };
    let normal = |a: &str| {
        let a = a.to_ascii_lowercase();
        a.strip_suffix(default_port).map(str::to_string).unwrap_or(a)
    };
    (!authority.is_empty() && normal(authority) == normal(host)).then_some(https)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_host_and_port_only() {
        assert_eq!(same("http://127.0.0.1:8080", "127.0.0.1:8080", false), Some(false));
        assert_eq!(same("https://Hub.example", "hub.example:443", false), Some(true));
        assert_eq!(same("https://hub.example", "hub.example", true), Some(true));
        assert_eq!(same("http://hub.example", "hub.example", true), None, "http page on an https hub");
        assert_eq!(same("http://127.0.0.1:8081", "127.0.0.1:8080", false), None);
        assert_eq!(same("http://evil.example", "hub.example", false), None);
        assert_eq!(same("http://hub.example.evil.example", "hub.example", false), None);
        assert_eq!(same("null", "hub.example", false), None);
        assert_eq!(same("http://", "", false), None);
    }

    #[test]
    fn absent_same_or_foreign() {
        let uri: Uri = "/v1/status".parse().expect("uri");
        let mut headers = HeaderMap::new();
        assert_eq!(Origin::of(&headers, &uri, false), Origin::Absent);
        headers.insert(header::HOST, "hub:8080".parse().expect("value"));
        headers.insert(header::ORIGIN, "http://hub:8080".parse().expect("value"));
        assert_eq!(Origin::of(&headers, &uri, false), Origin::Same { https: false });
        headers.insert(header::ORIGIN, "http://other:8080".parse().expect("value"));
        assert_eq!(Origin::of(&headers, &uri, false), Origin::Foreign("http://other:8080"));
    }
}
