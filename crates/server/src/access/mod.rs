pub mod jwks;
pub mod oidc;
