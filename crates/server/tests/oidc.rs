//! OIDC token verification against keys generated here: a JWKS file in a temp dir, or
//! a JWKS URL served on loopback.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use fleetsync_model::access::{Grant, TenantRole};
use fleetsync_server::access::jwks::JwksError;
use fleetsync_server::access::oidc::{looks_like_jwt, JwksSource, Oidc, OidcConfig, OidcError};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

const ISSUER: &str = "https://idp.example.test/realms/fleet";
const AUDIENCE: &str = "fleetsync-hub";

/// Which error a refused token must give.
type Expect = fn(&OidcError) -> bool;

/// A signing key and its public JWK.
struct TestKey {
    kid: String,
    alg: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn es256(kid: &str) -> TestKey {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("generate");
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).expect("parse");
    let public = pair.public_key().as_ref();
    assert_eq!(public.len(), 65, "uncompressed P-256 point");
    let jwk = json!({
        "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
        "x": b64(&public[1..33]), "y": b64(&public[33..65]),
    });
    TestKey { kid: kid.into(), alg: Algorithm::ES256, encoding: EncodingKey::from_ec_der(pkcs8.as_ref()), jwk }
}

fn ed25519(kid: &str) -> TestKey {
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("generate");
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("parse");
    let jwk = json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(pair.public_key().as_ref())});
    TestKey { kid: kid.into(), alg: Algorithm::EdDSA, encoding: EncodingKey::from_ed_der(pkcs8.as_ref()), jwk }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()
}

/// Valid claims for subject `alice` with `grants` in the default claim.
fn claims(grants: Value) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now(), "exp": now() + 600, "fleetsync_grants": grants})
}

fn sign(key: &TestKey, claims: &Value) -> String {
    let mut header = Header::new(key.alg);
    header.kid = Some(key.kid.clone());
    encode(&header, claims, &key.encoding).expect("sign")
}

/// Replaces the JWKS at `path` at once (a reader never sees half a file).
fn write_jwks(path: &Path, keys: &[&TestKey]) {
    let doc = json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, doc.to_string()).expect("write jwks");
    std::fs::rename(&tmp, path).expect("rename jwks");
}

fn config(jwks: JwksSource) -> OidcConfig {
    OidcConfig::new(ISSUER, AUDIENCE, jwks)
}

/// A verifier over a JWKS file holding `keys`, and the file's path.
async fn verifier(dir: &tempfile::TempDir, keys: &[&TestKey]) -> (Oidc, PathBuf) {
    let path = dir.path().join("jwks.json");
    write_jwks(&path, keys);
    let oidc = Oidc::load(config(JwksSource::File(path.clone()))).await.expect("load");
    (oidc, path)
}

fn tenant(tenant: &str, role: TenantRole) -> Grant {
    Grant::Tenant { tenant: tenant.into(), role }
}

#[tokio::test]
async fn a_valid_token_yields_its_subject_and_grants_in_array_or_string_form() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ec, ed) = (es256("ec-1"), ed25519("ed-1"));
    let (oidc, _) = verifier(&dir, &[&ec, &ed]).await;

    let array = sign(&ec, &claims(json!(["team-a:editor", "not a grant", "fleet-admin", "team-a:editor", 7])));
    let id = oidc.verify(&array).expect("array form");
    assert_eq!(id.subject, "alice");
    assert_eq!(id.grants, vec![tenant("team-a", TenantRole::Editor), Grant::Fleet]);

    let string = sign(&ed, &claims(json!("team-b:viewer team-b:agent:c1")));
    let id = oidc.verify(&string).expect("string form, EdDSA");
    let agent = Grant::Agent { tenant: "team-b".into(), cluster: "c1".into() };
    assert_eq!(id.grants, vec![tenant("team-b", TenantRole::Viewer), agent]);

    let mut many_audiences = claims(json!("team-a:admin"));
    many_audiences["aud"] = json!(["another-client", AUDIENCE]);
    assert!(oidc.verify(&sign(&ec, &many_audiences)).is_ok(), "aud is an array holding ours");

    let mut just_expired = claims(json!("team-a:admin"));
    just_expired["exp"] = json!(now() - 10);
    assert!(oidc.verify(&sign(&ec, &just_expired)).is_ok(), "within the leeway");
}

#[tokio::test]
async fn the_grants_may_come_from_another_claim() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = es256("k");
    let path = dir.path().join("jwks.json");
    write_jwks(&path, &[&key]);
    let oidc = Oidc::load(OidcConfig { claim: "groups".into(), ..config(JwksSource::File(path)) }).await.expect("load");

    let mut with_groups = claims(json!("fleet-admin"));
    with_groups["groups"] = json!(["developers", "team-c:viewer"]);
    let id = oidc.verify(&sign(&key, &with_groups)).expect("groups");
    assert_eq!(id.grants, vec![tenant("team-c", TenantRole::Viewer)], "only the configured claim counts");

    let without = sign(&key, &claims(json!("fleet-admin")));
    assert!(matches!(oidc.verify(&without), Err(OidcError::NoGrants { claim }) if claim == "groups"));

    // A group a team may name itself does not make it admin of every tenant.
    let mut team_named = claims(json!([]));
    team_named["groups"] = json!(["team-a:fleet-admin", "team-a:viewer"]);
    let id = oidc.verify(&sign(&key, &team_named)).expect("groups");
    assert_eq!(id.grants, vec![tenant("team-a", TenantRole::Viewer)], "TENANT:fleet-admin is no grant");
    let mut only = claims(json!([]));
    only["groups"] = json!(["team-a:fleet-admin"]);
    assert!(matches!(oidc.verify(&sign(&key, &only)), Err(OidcError::NoGrants { .. })));
}

#[tokio::test]
async fn tokens_with_wrong_claims_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = es256("k");
    let (oidc, _) = verifier(&dir, &[&key]).await;
    let with = |field: &str, value: Value| {
        let mut c = claims(json!("team-a:editor"));
        c[field] = value;
        sign(&key, &c)
    };
    let without = |field: &str| {
        let mut c = claims(json!("team-a:editor"));
        c.as_object_mut().expect("object").remove(field);
        sign(&key, &c)
    };

    let cases: Vec<(&str, String, Expect)> = vec![
        ("wrong issuer", with("iss", json!("https://evil.test")), |e| matches!(e, OidcError::WrongIssuer { .. })),
        ("wrong audience", with("aud", json!("another-client")), |e| matches!(e, OidcError::WrongAudience { .. })),
        ("expired", with("exp", json!(now() - 120)), |e| matches!(e, OidcError::Expired)),
        ("not yet valid", with("nbf", json!(now() + 120)), |e| matches!(e, OidcError::NotYetValid)),
        ("no exp", without("exp"), |e| matches!(e, OidcError::MissingClaim { claim } if claim == "exp")),
        ("no aud", without("aud"), |e| matches!(e, OidcError::MissingClaim { claim } if claim == "aud")),
        ("no sub", without("sub"), |e| matches!(e, OidcError::NoSubject)),
        ("empty sub", with("sub", json!("")), |e| matches!(e, OidcError::NoSubject)),
        ("no grants", with("fleetsync_grants", json!(["admins", "team-a"])), |e| {
            matches!(e, OidcError::NoGrants { .. })
        }),
        ("grants claim absent", without("fleetsync_grants"), |e| matches!(e, OidcError::NoGrants { .. })),
    ];
    for (case, token, expected) in cases {
        let err = oidc.verify(&token).expect_err(case);
        assert!(expected(&err), "{case}: got {err:?}");
        assert_no_token_in(&err, &token);
    }
    assert!(matches!(oidc.verify("a.b.c"), Err(OidcError::Malformed { .. })));
    assert!(matches!(oidc.verify("fst_abc"), Err(OidcError::Malformed { .. })));
}

#[tokio::test]
async fn tokens_not_signed_by_a_jwks_key_with_its_algorithm_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = es256("k");
    let (oidc, _) = verifier(&dir, &[&key]).await;
    let good = claims(json!("fleet-admin"));

    let unknown_kid = sign(&es256("other"), &good);
    assert!(matches!(oidc.verify(&unknown_kid), Err(OidcError::UnknownKey)));

    let impostor = sign(&es256("k"), &good);
    assert!(matches!(oidc.verify(&impostor), Err(OidcError::BadSignature)), "same kid, another key");

    let ed_as_ec = sign(&ed25519("k"), &good);
    assert!(matches!(oidc.verify(&ed_as_ec), Err(OidcError::AlgorithmNotAllowed { alg }) if alg == "EdDSA"));

    let header = b64(json!({"alg": "none", "kid": "k", "typ": "JWT"}).to_string().as_bytes());
    let unsigned = format!("{header}.{}.", b64(good.to_string().as_bytes()));
    assert!(looks_like_jwt(&unsigned));
    assert!(matches!(oidc.verify(&unsigned), Err(OidcError::AlgorithmNotAllowed { alg }) if alg == "none"));

    // The public key's coordinates, used as an HMAC secret: the classic confusion attack.
    let secret = key.jwk["x"].as_str().expect("x");
    let mut hs = Header::new(Algorithm::HS256);
    hs.kid = Some("k".into());
    let hmac = encode(&hs, &good, &EncodingKey::from_secret(secret.as_bytes())).expect("sign");
    let err = oidc.verify(&hmac).expect_err("HS256");
    assert!(matches!(&err, OidcError::AlgorithmNotAllowed { alg } if alg == "HS256"), "{err:?}");
    assert_no_token_in(&err, &hmac);

    let mut tampered = sign(&key, &good);
    let payload = b64(claims(json!("team-z:admin")).to_string().as_bytes());
    let parts: Vec<&str> = tampered.split('.').collect();
    tampered = format!("{}.{payload}.{}", parts[0], parts[2]);
    assert!(matches!(oidc.verify(&tampered), Err(OidcError::BadSignature)));
}

#[tokio::test]
async fn an_rsa_key_allows_only_the_algorithm_it_names() {
    // A public key is enough here: every token below is refused before or at the signature.
    let modulus = b64(&[0xc3; 256]);
    let rsa = json!({"kty": "RSA", "kid": "r", "alg": "RS256", "n": modulus, "e": "AQAB"});
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, json!({"keys": [rsa]}).to_string()).expect("write");
    let oidc = Oidc::load(config(JwksSource::File(path))).await.expect("an RSA key is usable");
    let unsigned = |alg: &str| {
        let header = b64(json!({"alg": alg, "kid": "r"}).to_string().as_bytes());
        format!("{header}.{}.{}", b64(claims(json!("fleet-admin")).to_string().as_bytes()), b64(&[1; 256]))
    };
    for alg in ["PS256", "RS512", "ES256", "EdDSA", "HS256"] {
        let err = oidc.verify(&unsigned(alg)).expect_err(alg);
        assert!(matches!(&err, OidcError::AlgorithmNotAllowed { alg: named } if named == alg), "{alg}: {err:?}");
    }
    assert!(matches!(oidc.verify(&unsigned("RS256")), Err(OidcError::BadSignature)));
}

#[tokio::test]
async fn a_token_without_kid_is_checked_with_the_only_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = es256("k");
    let claims = claims(json!("fleet-admin"));
    let no_kid = encode(&Header::new(Algorithm::ES256), &claims, &key.encoding).expect("sign");
    let (one, _) = verifier(&dir, &[&key]).await;
    assert!(one.verify(&no_kid).is_ok());
    let (two, _) = verifier(&dir, &[&key, &es256("k2")]).await;
    assert!(matches!(two.verify(&no_kid), Err(OidcError::KeyNotNamed)), "ambiguous");
}

#[tokio::test]
async fn a_jwks_without_usable_keys_or_unreadable_is_refused_at_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jwks.json");
    let load = |path: PathBuf| Oidc::load(config(JwksSource::File(path)));

    let missing = load(dir.path().join("absent.json")).await.expect_err("absent");
    assert!(matches!(missing, OidcError::Jwks(JwksError::File { .. })), "{missing:?}");

    std::fs::write(&path, r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}"#).expect("write");
    let symmetric = load(path.clone()).await.expect_err("oct only");
    assert!(matches!(symmetric, OidcError::Jwks(JwksError::NoUsableKey { .. })), "{symmetric:?}");

    let mut enc = es256("e").jwk;
    enc["use"] = json!("enc");
    std::fs::write(&path, json!({"keys": [enc]}).to_string()).expect("write");
    assert!(matches!(load(path.clone()).await, Err(OidcError::Jwks(JwksError::NoUsableKey { .. }))));

    std::fs::write(&path, "not json").expect("write");
    assert!(matches!(load(path.clone()).await, Err(OidcError::Jwks(JwksError::NotJwks { .. }))));

    std::fs::write(&path, vec![b' '; 2 * 1024 * 1024]).expect("write");
    assert!(matches!(load(path).await, Err(OidcError::Jwks(JwksError::TooLarge { .. }))));
}

#[test]
fn looks_like_jwt_tells_jwts_from_hub_tokens() {
    assert!(looks_like_jwt("eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln-_"));
    assert!(!looks_like_jwt("fst_0123456789abcdef"));
    assert!(!looks_like_jwt("a.b"));
    assert!(!looks_like_jwt("a.b.c.d"));
    assert!(!looks_like_jwt(".b.c"));
    assert!(!looks_like_jwt("a+b.c.d"));
}

/// Serves `jwks` on loopback at `/jwks`, 2 MiB of padding at `/big`, and redirects at
/// `/moved-here` (to `/jwks`) and `/moved-away` (to plain http off loopback); returns
/// the base URL.
async fn serve_jwks(jwks: Value) -> String {
    use axum::response::Redirect;
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let here = format!("{base}/jwks");
    let app = axum::Router::new()
        .route("/jwks", get(move || async move { jwks.to_string() }))
        .route("/big", get(|| async { " ".repeat(2 * 1024 * 1024) }))
        .route("/moved-here", get(move || async move { Redirect::temporary(&here) }))
        .route("/moved-away", get(|| async { Redirect::temporary("http://idp.example.test/jwks") }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test]
async fn the_jwks_can_be_fetched_from_a_url() {
    let key = es256("k");
    let base = serve_jwks(json!({"keys": [key.jwk.clone()]})).await;
    let load = |path: &str| Oidc::load(config(JwksSource::Url(format!("{base}{path}"))));
    let token = sign(&key, &claims(json!("team-a:viewer")));
    let id = load("/jwks").await.expect("load from URL").verify(&token).expect("verify");
    assert_eq!(id.grants, vec![tenant("team-a", TenantRole::Viewer)]);
    assert!(load("/moved-here").await.expect("redirect on loopback").verify(&token).is_ok());

    let err = load("/big").await.expect_err("too large");
    assert!(matches!(err, OidcError::Jwks(JwksError::TooLarge { .. })), "{err:?}");
    let err = load("/nothing-here").await.expect_err("404");
    assert!(matches!(err, OidcError::Jwks(JwksError::Status { status: 404, .. })), "{err:?}");
    let err = load("/moved-away").await.expect_err("redirect to http off loopback");
    assert!(matches!(err, OidcError::Jwks(JwksError::Status { status: 307, .. })), "{err:?}");

    let plain = Oidc::load(config(JwksSource::Url("http://idp.example.test/jwks".into()))).await;
    assert!(matches!(plain, Err(OidcError::Jwks(JwksError::InsecureUrl { .. }))), "http off loopback");
}

/// Polls `verify` until it accepts `token`, for at most `within`.
async fn accepted_within(oidc: &Oidc, token: &str, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if oidc.verify(token).is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn a_rotated_jwks_file_is_picked_up_by_the_periodic_refresh() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (old, new) = (es256("2024"), es256("2025"));
    let path = dir.path().join("jwks.json");
    write_jwks(&path, &[&old]);
    let refresh = Duration::from_millis(200);
    let oidc = Oidc::load(OidcConfig { refresh, ..config(JwksSource::File(path.clone())) }).await.expect("load");
    let stop = CancellationToken::new();
    let task = oidc.spawn_refresh(stop.clone());
    let (old_token, new_token) = (sign(&old, &claims(json!("fleet-admin"))), sign(&new, &claims(json!("fleet-admin"))));
    assert!(oidc.verify(&old_token).is_ok());

    std::fs::write(&path, "{ broken").expect("break the file");
    tokio::time::sleep(refresh * 3).await;
    assert!(oidc.verify(&old_token).is_ok(), "a failed refresh keeps the keys");
    assert!(oidc.refresh().await.is_err());

    write_jwks(&path, &[&new]);
    assert!(accepted_within(&oidc, &new_token, Duration::from_secs(5)).await, "the new key is loaded");
    assert!(matches!(oidc.verify(&old_token), Err(OidcError::UnknownKey)), "the old key is gone");

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("the task stops").expect("no panic");
}

#[tokio::test]
async fn an_unknown_kid_refreshes_early_but_at_most_once_per_interval() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b, c) = (es256("a"), es256("b"), es256("c"));
    let path = dir.path().join("jwks.json");
    write_jwks(&path, &[&a]);
    let refresh = Duration::from_secs(3600);
    let oidc = Oidc::load(OidcConfig { refresh, ..config(JwksSource::File(path.clone())) }).await.expect("load");
    let stop = CancellationToken::new();
    oidc.spawn_refresh(stop.clone());
    let token = |key: &TestKey| sign(key, &claims(json!("fleet-admin")));

    write_jwks(&path, &[&a, &b]);
    assert!(matches!(oidc.verify(&token(&b)), Err(OidcError::UnknownKey)), "not loaded yet");
    assert!(accepted_within(&oidc, &token(&b), Duration::from_secs(5)).await, "the unknown kid caused a refresh");

    write_jwks(&path, &[&a, &b, &c]);
    for _ in 0..50 {
        assert!(matches!(oidc.verify(&token(&c)), Err(OidcError::UnknownKey)));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(oidc.verify(&token(&c)).is_err(), "no second early refresh within the interval");
    stop.cancel();
}

#[tokio::test]
async fn verify_or_refresh_accepts_the_first_token_of_a_new_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b, c) = (es256("a"), es256("b"), es256("c"));
    let (oidc, path) = verifier(&dir, &[&a]).await;
    let token = |key: &TestKey| sign(key, &claims(json!("team-a:viewer")));

    write_jwks(&path, &[&a, &b]);
    assert!(oidc.verify_or_refresh(&token(&b)).await.is_ok(), "refreshed in place");
    write_jwks(&path, &[&a, &b, &c]);
    let err = oidc.verify_or_refresh(&token(&c)).await.expect_err("within the interval");
    assert!(matches!(err, OidcError::UnknownKey), "{err:?}");
    assert!(oidc.verify_or_refresh(&token(&a)).await.is_ok());
}

fn assert_no_token_in(err: &OidcError, token: &str) {
    let message = format!("{err} {err:?}");
    for part in token.split('.').filter(|p| p.len() > 8) {
        assert!(!message.contains(part), "the error echoes the token: {message}");
    }
}
