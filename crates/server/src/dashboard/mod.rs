//! The dashboard: one page and its script and style, embedded in the binary when it
//! is built ([`assets`]), served by the hub at `/`, and signed in with an API token
//! ([`session`]).
//!
//! The page reads everything through the `/v1` routes, with the caller's own rights:
//! what a tenant's viewer sees in it is what that viewer could read with the CLI. Its
//! only writes are its actions (retries, rollout controls: see [`session::credential`]),
//! each confirmed on the page and authorized by the token's role, and every view is a
//! page or a summary: the fleet's totals from each SyncSet's summary, the tenant's
//! failing keys by cause (`/v1/status/failures`), its rollouts (`/v1/rollouts`), a page
//! of keys as a SyncSet × cluster matrix, one cluster, SyncSet or key. It follows the event watch and re-reads only
//! what an event names; a rollout under way is also read again every few seconds,
//! since what agents report (readiness, drift) moves its counts without an event.
//!
//! | Route | |
//! |---|---|
//! | `GET /` | the page |
//! | `GET /ui/app.js`, `GET /ui/app.css` | its script and style |
//! | `POST /ui/session` | `{"token": "..."}` → a session cookie, `{"subject", "grants"}` |
//! | `DELETE /ui/session` | ends the session, clears the cookie |

pub mod assets;
pub mod origin;
pub mod session;
pub mod sign_in_limits;

pub use session::Sessions;

use crate::AppState;
use axum::routing::{get, post};
use axum::Router;

/// The dashboard's routes (each one public in the route table: the page and its
/// assets hold no data, and the session routes check what they are sent).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(assets::index))
        .route("/ui/app.js", get(assets::script))
        .route("/ui/app.css", get(assets::style))
        .route("/ui/session", post(session::sign_in).delete(session::sign_out))
}
