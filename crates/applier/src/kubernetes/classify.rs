//! How a cluster's answer, or the failure to get one, becomes an [`ApplyError`]: the API's
//! own `Status` where there is one, else the transport, naming the request's address
//! and every cause, each text bounded.

use super::MAX_MESSAGE;
use crate::clients::ClusterClient;
use crate::egress::refusal_in;
use crate::error::{causes, shorten, MAX_ERROR};
use crate::gate;
use crate::ApplyError;
use std::time::Duration;

/// An answer whose body is cut off after `limit` bytes: reading more fails with
/// [`TooLong`], so one cluster's endless answer costs the hub `limit` bytes at most.
pub(super) fn limited<B>(
    r: http::Response<B>,
    limit: usize,
) -> http::Response<impl http_body::Body<Data = bytes::Bytes, Error = tower::BoxError>>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: Into<tower::BoxError>,
{
    use http_body_util::BodyExt;
    r.map(|b| {
        http_body_util::Limited::new(b, limit).map_err(move |e| {
            if e.is::<http_body_util::LengthLimitError>() {
                Box::new(TooLong(limit)) as tower::BoxError
            } else {
                e
            }
        })
    })
}

/// An answer longer than the hub reads ([`KubeConfig::max_response_bytes`](super::KubeConfig::max_response_bytes)).
#[derive(Debug, thiserror::Error)]
#[error("the answer is longer than {0} bytes, the most the hub reads of one answer")]
struct TooLong(usize);

/// A request that ran out of time; mapped to [`ApplyError::Timeout`].
#[derive(Debug, thiserror::Error)]
#[error("request timed out after {0:?}")]
pub(super) struct TimedOut(pub(super) Duration);

/// What kube-rs puts in `reason` when an error body was not a `Status` (it then puts
/// the raw body in `message`).
const NOT_A_STATUS: &str = "Failed to parse error data";

/// A cluster URL as errors name it: scheme, host, port and path; never user info or
/// a query; no trailing `/`.
pub(super) fn base_of(url: &http::Uri) -> String {
    let scheme = url.scheme_str().unwrap_or("https");
    let host = url.host().unwrap_or("");
    let port = url.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{scheme}://{host}{port}{}", url.path().trim_end_matches('/'))
}

/// Where a request of a cluster's client goes, as errors name it.
pub(super) fn target_of<B>(c: &ClusterClient, req: &http::Request<B>) -> String {
    format!("{}{}", c.base, req.uri().path())
}

/// Types a kube-rs error of a request to `target`: the API's own status where there
/// is one, else transport. An egress refusal anywhere in the chain is
/// [`ApplyError::Egress`].
pub(super) fn classify(e: kube::Error, target: &str) -> ApplyError {
    if let Some(refused) = refusal_in(&e) {
        return ApplyError::Egress(shorten(&refused.to_string(), MAX_ERROR));
    }
    if let Some(passed) = cause_of::<gate::DeadlinePassed>(&e) {
        return ApplyError::Transient(passed.to_string());
    }
    if let Some(too_long) = cause_of::<TooLong>(&e) {
        return ApplyError::Transient(shorten(&format!("{target}: {too_long}"), MAX_ERROR));
    }
    match e {
        kube::Error::Api(s) => {
            let phrase = http::StatusCode::from_u16(s.code).ok().and_then(|c| c.canonical_reason()).unwrap_or("");
            // A real Status says `status: Failure`; any other JSON object parses as an
            // empty Status, and a body that is not JSON comes back as NOT_A_STATUS.
            let is_status = s.status.is_some() && s.reason != NOT_A_STATUS;
            let msg = match (is_status, s.message.is_empty()) {
                // kube-rs keeps no HTTP code for a JSON body that is not a Status.
                (false, _) if s.code == 0 => "an error response that is not a Kubernetes Status".to_string(),
                (false, _) => format!("{} {phrase}", s.code).trim_end().to_string(),
                (true, false) => bounded(&s.message),
                (true, true) => bounded(&s.reason),
            };
            match s.code {
                409 => ApplyError::Conflict(msg),
                401 | 403 => ApplyError::Forbidden(msg),
                404 => ApplyError::NotFound(msg),
                400 | 422 => ApplyError::Invalid(msg),
                _ if !is_status => ApplyError::Transient(msg),
                _ => ApplyError::Transient(format!("{} {}: {msg}", s.code, bounded(&s.reason))),
            }
        }
        kube::Error::Service(inner) if inner.is::<TimedOut>() => {
            let ms = inner.downcast_ref::<TimedOut>().map_or(0, |t| t.0.as_millis() as u64);
            ApplyError::Timeout { target: shorten(target, MAX_ERROR / 2), ms }
        }
        // The wrappers' own texts (`ServiceError: …`) say nothing the causes do not.
        kube::Error::HyperError(e) => unreachable(target, &e),
        kube::Error::Service(e) => unreachable(target, &*e),
        other => ApplyError::Transient(shorten(&causes(&other), MAX_ERROR)),
    }
}

/// A transport failure: the address of the request, then every cause.
fn unreachable(target: &str, e: &(dyn std::error::Error + 'static)) -> ApplyError {
    ApplyError::Unreachable(shorten(&format!("{target}: {}", causes(e)), MAX_ERROR))
}

/// The first error of type `E` in `e`'s chain of causes.
fn cause_of<'a, E: std::error::Error + 'static>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a E> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<E>() {
            return Some(found);
        }
        next = err.source();
    }
    None
}

/// `text` with control characters as spaces, cut to at most [`MAX_MESSAGE`] bytes on
/// a character boundary (`…` marks a cut).
fn bounded(text: &str) -> String {
    let clean: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if clean.len() <= MAX_MESSAGE {
        return clean;
    }
    let mut end = MAX_MESSAGE;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &clean[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors name a cluster by its URL without user info or a query.
    #[test]
    fn errors_name_the_url_without_credentials() {
        let uri: http::Uri = "https://user:s3cret@10.0.0.5:6443/clusters/c1/?token=s3cret".parse().expect("uri");
        assert_eq!(base_of(&uri), "https://10.0.0.5:6443/clusters/c1");
        assert_eq!(base_of(&"http://[::1]:8080".parse().expect("uri")), "http://[::1]:8080");
    }

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary() {
        let text = "é".repeat(MAX_MESSAGE);
        let cut = bounded(&text);
        assert!(cut.len() <= MAX_MESSAGE + '…'.len_utf8(), "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded("a\nb"), "a b");
    }
}
