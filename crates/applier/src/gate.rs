//! The last check before a request leaves the process. A request handed to the HTTP
//! client is written later, by the connection's own task — after a wait for a free
//! connection or for the executor — so a run's check before the call is not the last
//! moment. The request's body is gated instead: the connection polls it just before
//! writing it, and once the call's [`Deadline`] has passed the body fails, so the
//! request never reaches the target complete and the target acts on nothing.

use crate::Deadline;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// The body of a request whose call carries a deadline (in the request's extensions).
pub(crate) struct Gated {
    inner: kube::client::Body,
    deadline: Deadline,
}

#[derive(Debug, thiserror::Error)]
#[error("not sent: the lease's deadline passed before the request left (the process was paused or starved)")]
pub(crate) struct DeadlinePassed;

/// Moves the deadline a request carries (none: never passes) into its body.
pub(crate) fn gated(req: http::Request<kube::client::Body>) -> http::Request<Gated> {
    let deadline = req.extensions().get::<Deadline>().cloned().unwrap_or_default();
    req.map(|inner| Gated { inner, deadline })
}

impl Body for Gated {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.deadline.passed() {
            return Poll::Ready(Some(Err(Box::new(DeadlinePassed))));
        }
        Pin::new(&mut self.inner).poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    async fn first_frame(req: http::Request<kube::client::Body>) -> Option<Result<Frame<Bytes>, String>> {
        let mut body = gated(req).into_body();
        std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await.map(|r| r.map_err(|e| e.to_string()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_fails_once_its_deadline_has_passed() {
        let deadline = Deadline::at(Instant::now() + Duration::from_secs(1));
        let request = || {
            let mut req = http::Request::new(kube::client::Body::from(b"{}".to_vec()));
            req.extensions_mut().insert(deadline.clone());
            req
        };
        let frame = first_frame(request()).await.expect("a frame").expect("sent before the deadline");
        assert_eq!(frame.into_data().ok(), Some(Bytes::from_static(b"{}")));
        tokio::time::advance(Duration::from_secs(1)).await;
        let refused = first_frame(request()).await.expect("a frame");
        assert!(refused.expect_err("not sent").contains("deadline passed"));
        let no_deadline = http::Request::new(kube::client::Body::from(b"{}".to_vec()));
        assert!(first_frame(no_deadline).await.expect("a frame").is_ok(), "a request without a deadline goes");
    }
}
