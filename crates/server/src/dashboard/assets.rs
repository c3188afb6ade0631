//! The page, its script and its style, compiled into the binary (`include_str!`): no
//! JavaScript toolchain at build time, nothing fetched from elsewhere at run time.
//!
//! Each answer forbids what the page does not need: scripts, styles and requests
//! from anywhere but the hub itself (so no inline script runs, even injected), being
//! framed by another site, and content sniffing.

use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

/// The Content-Security-Policy of every dashboard answer.
pub const CSP: &str =
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'";

/// `GET /`.
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /ui/app.js`.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /ui/app.css`.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, HeaderValue); 7] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)),
        (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (HeaderName::from_static("cross-origin-opener-policy"), HeaderValue::from_static("same-origin")),
    ];
    (headers, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_assets() {
        assert!(INDEX.contains(r#"src="/ui/app.js""#) && INDEX.contains(r#"href="/ui/app.css""#));
        assert!(!INDEX.contains("<script>") && !INDEX.contains("style="), "nothing inline: the CSP forbids it");
        for text in [INDEX, SCRIPT, STYLE] {
            assert!(!text.contains("http://") && !text.contains("https://"), "nothing from elsewhere");
        }
        assert!(!SCRIPT.contains("innerHTML"), "text goes into the page as text");
    }
}
