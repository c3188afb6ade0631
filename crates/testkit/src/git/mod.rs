//! Git for tests: repositories committed to with the `git` command ([`Repo`]), and a
//! Git server over smart HTTP on a loopback port whose log of requests tells the
//! `ls-refs` of a fetch from the `fetch` that downloads a pack ([`GitServer`]), and
//! one over SSH ([`SshServer`]).

mod repo;
mod server;
mod ssh;

pub use repo::Repo;
pub use server::{Asked, GitServer};
pub use ssh::SshServer;
