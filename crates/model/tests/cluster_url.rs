//! A Cluster's `spec.endpoint.http.url` is parsed strictly when the document is read.

use fleetsync_model::document::parse_value;
use serde_json::json;

fn check(url: &str) -> Result<(), String> {
    let doc = json!({"apiVersion": fleetsync_model::API_VERSION, "kind": "Cluster", "metadata": {"name": "c"},
                     "spec": {"endpoint": {"http": {"url": url}}}});
    match parse_value(1, doc) {
        Ok(_) => Ok(()),
        Err(e) => {
            assert_eq!(e.field, "spec.endpoint.http.url", "{e:?}");
            Err(e.rule)
        }
    }
}

#[test]
fn good_urls_are_accepted() {
    for url in [
        "http://127.0.0.1:8080/clusters/c1",
        "https://api.example.com",
        "https://[fd00::1]:6443/",
        "http://k8s.internal:80/x/y",
    ] {
        assert_eq!(check(url), Ok(()), "{url}");
    }
}

#[test]
fn malformed_and_ambiguous_urls_are_refused_naming_the_rule() {
    let cases = [
        ("http://[::1", "not a valid URL"),
        ("ftp://example.com", "http:// or https://"),
        ("http:example.com", "http:// or https://"),
        ("http://", "not a valid URL"),
        ("http://example.com/?a=b", "query or fragment"),
        ("http://example.com/#top", "query or fragment"),
        ("http://exa mple.com/", "whitespace"),
        ("http://example.com\\@evil/", "backslashes"),
        ("http://example.com:99999/", "not a valid URL"),
    ];
    for (url, expect) in cases {
        let rule = check(url).expect_err(url);
        assert!(rule.contains(expect), "{url}: {rule}");
    }
    let long = format!("http://example.com/{}", "a".repeat(3000));
    assert!(check(&long).expect_err("long").contains("at most 2048 bytes"));
}

#[test]
fn user_info_is_refused_and_never_quoted() {
    for url in ["http://admin:hunter2@example.com/", "https://hunter2@example.com"] {
        let rule = check(url).expect_err(url);
        assert!(rule.contains("user info"), "{rule}");
        assert!(!rule.contains("hunter2"), "{rule}");
    }
}
