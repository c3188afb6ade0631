//! Caps on open event watches: beyond them a watch is 429 naming the limit, and a
//! watch's slot comes back when its stream ends or its client goes away.

use crate::harness::Api;
use axum::body::Body;
use axum::http::StatusCode;
use fleetsync_server::{WatchLimits, Watches};
use std::time::Duration;

const WATCH: &str = "/v1/events?watch=true";

fn api(max_watches: usize, max_per_identity: usize) -> Api {
    let watches = Watches::new(Duration::from_secs(600), Duration::from_secs(600)).with_limits(WatchLimits {
        max_watches,
        max_per_identity,
        ..WatchLimits::default()
    });
    Api::with_watches(watches)
}

async fn refused(api: &Api, token: &str) -> String {
    let answer = api.call_as(Some(token), "GET", WATCH, None, Body::empty()).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{}", answer.text);
    answer.error()
}

#[tokio::test]
async fn watches_beyond_the_cap_per_identity_are_429_and_a_closed_watch_frees_its_slot() {
    let api = api(100, 2);
    let a = api.issue("team-a:viewer", None).await;
    let (s1, _, first) = api.stream_as(Some(&a), WATCH).await;
    let (s2, _, _second) = api.stream_as(Some(&a), WATCH).await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK));
    assert_eq!(
        refused(&api, &a).await,
        "too many watches: 2 open for this identity (the limit); close one or try again later"
    );
    // Another caller is not held back by this one's watches.
    let b = api.issue("team-a:viewer", None).await;
    let (s3, _, _third) = api.stream_as(Some(&b), WATCH).await;
    assert_eq!(s3, StatusCode::OK);
    assert_eq!(api.watches.open(), 3);
    // The client goes away: its slot comes back.
    drop(first);
    assert_eq!(api.watches.open(), 2);
    assert_eq!(api.stream_as(Some(&a), WATCH).await.0, StatusCode::OK);
}

#[tokio::test]
async fn watches_beyond_the_cap_in_all_are_429_and_ended_streams_free_their_slots() {
    let api = api(3, 100);
    let token = api.admin_token().await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let (status, _, lines) = api.stream(WATCH).await;
        assert_eq!(status, StatusCode::OK);
        open.push(lines);
    }
    let other = api.issue("team-b:viewer", None).await;
    assert_eq!(
        refused(&api, &other).await,
        "too many watches: 3 open on this server (the limit); close one or try again later"
    );
    assert_eq!(
        refused(&api, &token).await,
        "too many watches: 3 open on this server (the limit); close one or try again later"
    );
    // The server ends its streams: every slot comes back once the ends are read.
    api.watches.close();
    for lines in &mut open {
        while lines.chunk().await.is_some() {}
    }
    assert_eq!(api.watches.open(), 0);
}

/// One tenant cannot take the server's watches: with the default caps (500 in all, 100
/// per identity, 250 per tenant), a tenant whose admin mints five viewers that open 100
/// watches each stops at 250, and another tenant's viewer still gets its watch.
#[tokio::test]
async fn one_tenant_cannot_fill_the_servers_watches() {
    let api = Api::with_watches(Watches::new(Duration::from_secs(600), Duration::from_secs(600)));
    let mut viewers_a = Vec::new();
    for _ in 0..5 {
        viewers_a.push(api.issue("team-a:viewer", None).await);
    }
    let mut open = Vec::new();
    let mut refusals = Vec::new();
    for token in &viewers_a {
        for _ in 0..100 {
            let answer_or_stream = api.stream_as(Some(token), WATCH).await;
            match answer_or_stream.0 {
                StatusCode::OK => open.push(answer_or_stream.2),
                status => refusals.push(status),
            }
        }
    }
    assert_eq!(open.len(), 250, "tenant a stops at its cap");
    assert!(refusals.iter().all(|s| *s == StatusCode::TOO_MANY_REQUESTS), "{refusals:?}");
    let sixth = api.issue("team-a:viewer", None).await;
    assert_eq!(
        refused(&api, &sixth).await,
        "too many watches: 250 open for a tenant of this identity (the limit); close one or try again later"
    );
    let viewer_b = api.issue("team-b:viewer", None).await;
    let (status, _, _b) = api.stream_as(Some(&viewer_b), WATCH).await;
    assert_eq!(status, StatusCode::OK, "tenant b still gets a watch");
}
