//! Where the hub may connect to apply: the egress policy for cluster endpoints.
//!
//! Whoever may write a Cluster (or the kubeconfig Secret it names) chooses the address
//! the hub sends requests to. Without a policy that is a server-side request forgery:
//! the hub's own loopback services, the cloud metadata service, link-local addresses.
//! [`EgressPolicy`] decides which addresses a cluster endpoint may reach:
//!
//! 1. the operator's deny list (`--egress-deny HOST|CIDR`) refuses, whatever else says;
//! 2. else the allow list (`--egress-allow HOST|CIDR`) allows;
//! 3. else the built-in deny refuses loopback (127.0.0.0/8, ::1), link-local
//!    (169.254.0.0/16, fe80::/10), unspecified (0.0.0.0/8, ::) and cloud metadata
//!    addresses (169.254.169.254, fd00:ec2::254, and the names
//!    `metadata.google.internal` and `metadata`);
//! 4. else the address is allowed (private ranges such as 10.0.0.0/8 included: that is
//!    where clusters live).
//!
//! A host rule matches a URL's host name exactly (case-insensitive, a trailing dot
//! ignored): allowing a name allows every address it resolves to, unless the deny list
//! refuses that address. A CIDR (or a single address) matches the URL's IP literal and
//! every address a name resolves to. The Kubernetes applier checks the URL's host when
//! it builds a client and every address a name resolves to when it connects (see
//! [`PolicyResolver`]), so a name that resolves, or is later re-pointed, to a denied
//! address is refused too.

use ipnet::IpNet;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Longest rule accepted (a host name is at most 253 bytes).
const MAX_RULE_LEN: usize = 253;

/// A refusal, or a rule that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    /// `target` (a host, or `host (address)`) may not be reached; `why` says which rule.
    #[error("egress to {target} is denied ({why})")]
    Denied { target: String, why: String },
    /// An `--egress-allow`/`--egress-deny` entry that is neither a host name nor a CIDR.
    #[error("egress rule {rule:?} is neither a host name nor an IP address or CIDR ({reason})")]
    Rule { rule: String, reason: &'static str },
}

/// One entry of an allow or deny list: a host name or an address range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Host(String),
    Net(IpNet),
}

impl FromStr for Rule {
    type Err = EgressError;

    /// `10.0.0.0/8`, `fd00::/8`, `127.0.0.1`, `::1`, `[::1]` or a host name.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason| EgressError::Rule { rule: s.chars().take(MAX_RULE_LEN).collect(), reason };
        let text = s.trim();
        if text.is_empty() || text.len() > MAX_RULE_LEN {
            return Err(bad("empty or longer than 253 bytes"));
        }
        let bare = text.trim_start_matches('[').trim_end_matches(']');
        if let Ok(net) = bare.parse::<IpNet>() {
            return Ok(Rule::Net(net.trunc()));
        }
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(Rule::Net(IpNet::from(canonical(ip))));
        }
        if text.contains('/') || text.contains(':') {
            return Err(bad("not a valid address or CIDR"));
        }
        let name = host_key(text);
        let label_ok =
            |l: &str| !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !name.split('.').all(label_ok) {
            return Err(bad("a host name is dot-separated labels of letters, digits and '-'"));
        }
        Ok(Rule::Host(name))
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rule::Host(h) => f.write_str(h),
            Rule::Net(n) => write!(f, "{n}"),
        }
    }
}

/// The hub's egress policy; the default is the built-in deny alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    allow: Vec<Rule>,
    deny: Vec<Rule>,
}

/// Built-in denied ranges, most specific first so a refusal names the narrowest reason.
const BUILT_IN: [(&str, &str); 8] = [
    ("169.254.169.254/32", "cloud metadata"),
    ("fd00:ec2::254/128", "cloud metadata"),
    ("127.0.0.0/8", "loopback"),
    ("::1/128", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("fe80::/10", "link-local"),
    ("0.0.0.0/8", "unspecified"),
    ("::/128", "unspecified"),
];

/// Built-in denied host names (cloud metadata services).
const BUILT_IN_NAMES: [&str; 2] = ["metadata.google.internal", "metadata"];

impl EgressPolicy {
    pub fn new(allow: Vec<Rule>, deny: Vec<Rule>) -> Self {
        Self { allow, deny }
    }

    /// A policy from the command line's `--egress-allow` and `--egress-deny` entries.
    pub fn parse<S: AsRef<str>>(allow: &[S], deny: &[S]) -> Result<Self, EgressError> {
        let rules = |list: &[S]| list.iter().map(|s| s.as_ref().parse()).collect::<Result<Vec<Rule>, _>>();
        Ok(Self::new(rules(allow)?, rules(deny)?))
    }

    /// This policy with `rule` added to the allow list.
    pub fn allowing(mut self, rule: Rule) -> Self {
        self.allow.push(rule);
        self
    }

    /// Checks a URL's host (`example.com`, `10.0.0.1`, `[::1]`): an IP literal is
    /// decided here; a name is refused here only by a rule about the name itself (the
    /// addresses it resolves to are checked by [`EgressPolicy::check_resolved`]).
    pub fn check_host(&self, host: &str) -> Result<(), EgressError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) => self.check_ip(None, ip),
            Err(_) => self.check_name(&host_key(host)).map(|_| ()),
        }
    }

    /// Checks the addresses `host` resolved to: all must be allowed.
    pub fn check_resolved(&self, host: &str, addrs: &[SocketAddr]) -> Result<(), EgressError> {
        let name = host_key(host);
        let allowed_by_name = self.check_name(&name)?;
        for addr in addrs {
            let ip = canonical(addr.ip());
            if let Some(rule) = self.deny.iter().find(|r| matches_ip(r, ip)) {
                return Err(denied(Some(&name), ip, format!("the hub's deny list: --egress-deny {rule}")));
            }
            if !allowed_by_name {
                self.check_ip(Some(&name), ip)?;
            }
        }
        Ok(())
    }

    /// Rules about a name: `Ok(true)` if the allow list names it (its addresses are
    /// then allowed unless denied by address), `Ok(false)` if nothing names it.
    fn check_name(&self, name: &str) -> Result<bool, EgressError> {
        let named = |r: &Rule| matches!(r, Rule::Host(h) if h == name);
        if self.deny.iter().any(named) {
            return Err(EgressError::Denied {
                target: name.into(),
                why: format!("the hub's deny list: --egress-deny {name}"),
            });
        }
        if self.allow.iter().any(named) {
            return Ok(true);
        }
        if BUILT_IN_NAMES.contains(&name) {
            return Err(EgressError::Denied { target: name.into(), why: format!("cloud metadata; {HOW_TO_ALLOW}") });
        }
        Ok(false)
    }

    /// One address, by the order in the module docs.
    fn check_ip(&self, name: Option<&str>, ip: IpAddr) -> Result<(), EgressError> {
        let ip = canonical(ip);
        if let Some(rule) = self.deny.iter().find(|r| matches_ip(r, ip)) {
            return Err(denied(name, ip, format!("the hub's deny list: --egress-deny {rule}")));
        }
        if self.allow.iter().any(|r| matches_ip(r, ip)) {
            return Ok(());
        }
        match built_in(ip) {
            Some(what) => Err(denied(name, ip, format!("{what}; {HOW_TO_ALLOW}"))),
            None => Ok(()),
        }
    }
}

const HOW_TO_ALLOW: &str = "allow it with --egress-allow";

fn denied(name: Option<&str>, ip: IpAddr, why: String) -> EgressError {
    let target = match name {
        Some(n) => format!("{n} ({ip})"),
        None => ip.to_string(),
    };
    EgressError::Denied { target, why }
}

fn matches_ip(rule: &Rule, ip: IpAddr) -> bool {
    matches!(rule, Rule::Net(net) if net.contains(&ip))
}

fn built_in(ip: IpAddr) -> Option<&'static str> {
    BUILT_IN.iter().find(|(net, _)| net.parse::<IpNet>().is_ok_and(|n| n.contains(&ip))).map(|(_, what)| *what)
}

/// An IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) as the IPv4 address it reaches.
fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// A host name as rules compare it: lower case, no trailing dot.
fn host_key(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// The resolver the Kubernetes applier's connector uses: the system's resolver, whose
/// answer is refused as a whole if the policy denies any address in it.
#[derive(Debug, Clone)]
pub struct PolicyResolver {
    policy: Arc<EgressPolicy>,
    inner: hyper_util::client::legacy::connect::dns::GaiResolver,
}

impl PolicyResolver {
    pub fn new(policy: Arc<EgressPolicy>) -> Self {
        Self { policy, inner: hyper_util::client::legacy::connect::dns::GaiResolver::new() }
    }
}

type Resolved = Result<std::vec::IntoIter<SocketAddr>, Box<dyn std::error::Error + Send + Sync>>;

impl tower::Service<hyper_util::client::legacy::connect::dns::Name> for PolicyResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Resolved> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, name: hyper_util::client::legacy::connect::dns::Name) -> Self::Future {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        let lookup = self.inner.call(name);
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = lookup.await?.collect();
            policy.check_resolved(&host, &addrs)?;
            Ok(addrs.into_iter())
        })
    }
}

/// The egress refusal somewhere in an error's chain of causes, if there is one.
pub fn refusal_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a EgressError> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<EgressError>() {
            return Some(found);
        }
        next = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> EgressPolicy {
        EgressPolicy::parse(allow, deny).expect("rules")
    }

    fn addr(s: &str) -> SocketAddr {
        SocketAddr::new(s.parse().expect("ip"), 443)
    }

    #[test]
    fn built_in_deny_names_the_reason() {
        let p = EgressPolicy::default();
        let cases = [
            ("127.0.0.1", "egress to 127.0.0.1 is denied (loopback; allow it with --egress-allow)"),
            ("127.9.9.9", "loopback"),
            ("[::1]", "loopback"),
            ("169.254.169.254", "cloud metadata"),
            ("[fd00:ec2::254]", "cloud metadata"),
            ("169.254.10.1", "link-local"),
            ("[fe80::1]", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("[::]", "unspecified"),
            ("[::ffff:127.0.0.1]", "loopback"),
            ("metadata.google.internal", "cloud metadata"),
            ("METADATA.", "cloud metadata"),
        ];
        for (host, expect) in cases {
            let err = p.check_host(host).expect_err(host).to_string();
            assert!(err.contains(expect), "{host}: {err}");
        }
        for host in ["10.1.2.3", "192.168.0.1", "172.16.0.1", "[fd00::1]", "8.8.8.8", "api.example.com"] {
            assert_eq!(p.check_host(host), Ok(()), "{host}");
        }
    }

    #[test]
    fn a_name_resolving_to_a_denied_address_is_refused() {
        let p = EgressPolicy::default();
        let err = p.check_resolved("localhost", &[addr("127.0.0.1")]).expect_err("loopback").to_string();
        assert_eq!(err, "egress to localhost (127.0.0.1) is denied (loopback; allow it with --egress-allow)");
        let err =
            p.check_resolved("api.example.com", &[addr("10.0.0.1"), addr("169.254.169.254")]).expect_err("any denied");
        assert!(err.to_string().contains("cloud metadata"), "{err}");
        assert_eq!(p.check_resolved("api.example.com", &[addr("10.0.0.1")]), Ok(()));
    }

    #[test]
    fn the_allow_list_overrides_the_built_in_deny() {
        let p = policy(&["127.0.0.1", "fe80::/10", "localhost", "metadata"], &[]);
        assert_eq!(p.check_host("127.0.0.1"), Ok(()));
        assert!(p.check_host("127.0.0.2").is_err(), "only what is listed");
        assert_eq!(p.check_host("[fe80::99]"), Ok(()));
        assert_eq!(
            p.check_resolved("LocalHost.", &[addr("127.0.0.5"), addr("::1")]),
            Ok(()),
            "an allowed name, any address"
        );
        assert_eq!(p.check_host("metadata"), Ok(()));
    }

    #[test]
    fn the_operator_deny_list_wins_over_the_allow_list() {
        let p = policy(&["10.0.0.0/8", "127.0.0.1", "db.example.com"], &["10.9.0.0/16", "127.0.0.1", "db.example.com"]);
        let err = p.check_host("127.0.0.1").expect_err("denied").to_string();
        assert!(err.contains("the hub's deny list: --egress-deny 127.0.0.1/32"), "{err}");
        assert!(p.check_host("10.9.1.1").is_err());
        assert_eq!(p.check_host("10.8.1.1"), Ok(()));
        assert!(p
            .check_host("db.example.com")
            .expect_err("by name")
            .to_string()
            .contains("--egress-deny db.example.com"));
        let allowed_name = policy(&["api.example.com"], &["10.9.0.0/16"]);
        assert!(
            allowed_name.check_resolved("api.example.com", &[addr("10.9.0.1")]).is_err(),
            "an allowed name, a denied address"
        );
    }

    #[test]
    fn rules_are_read_strictly() {
        assert_eq!("10.1.2.3/8".parse::<Rule>(), Ok(Rule::Net("10.0.0.0/8".parse().expect("net"))));
        assert_eq!("[::1]".parse::<Rule>(), Ok(Rule::Net("::1/128".parse().expect("net"))));
        assert_eq!("Example.COM.".parse::<Rule>(), Ok(Rule::Host("example.com".into())));
        for bad in ["", "10.0.0.0/33", "a..b", "x:y", "http://x", "a_b", &"a".repeat(300)] {
            assert!(bad.parse::<Rule>().is_err(), "{bad}");
        }
    }
}
