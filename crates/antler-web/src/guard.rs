//! The SSRF guard for every server-side fetch (DeerFlow's `url_safety`, tightened).
//!
//! A URL the model supplies is attacker-controlled: a prompt-injected page can ask the agent to
//! fetch `http://169.254.169.254/…` or an intranet host. The guard refuses, before any packet is
//! sent:
//!
//! - schemes other than `http`/`https`, and URLs without a host;
//! - names that are local by definition (`localhost`, `*.localhost`, cloud metadata names);
//! - hosts that are, or resolve to, a non-public address ([`is_blocked_ip`]: private, loopback,
//!   link-local, CGNAT, reserved, documentation, benchmarking, multicast, unspecified, and IPv6
//!   forms that embed such an IPv4 address). One bad address refuses the whole host.
//!
//! DNS rebinding is closed by connecting only to checked addresses: [`GuardedDns`] is the HTTP
//! client's resolver, so the addresses checked are the addresses connected to, on every
//! connection, including after each redirect. IP literals never reach a resolver, so
//! [`UrlGuard::check_literal`] checks them before the request is made.
//!
//! `allow_private_addresses: true` on a tool entry turns the address checks off (intranet use,
//! tests); the scheme check stays.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use futures::future::BoxFuture;
use url::{Host, Url};

/// Names refused without a lookup.
const BLOCKED_NAMES: &[&str] = &[
    "localhost",
    "localhost.localdomain",
    "ip6-localhost",
    "ip6-loopback",
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Why a URL is refused. The `Display` text is what the model reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("Only http:// and https:// URLs are supported")]
    Scheme,
    #[error("Invalid URL: {0}")]
    Invalid(String),
    #[error("URL host could not be parsed")]
    NoHost,
    #[error("URL host could not be resolved")]
    Unresolvable,
    // The texts name neither the host nor its address: a prompt-injected model must not learn
    // the internal DNS map from refusals (both are logged instead).
    #[error("Refusing to {action} a private or loopback address")]
    LocalName { action: &'static str, host: String },
    #[error("Refusing to {action} a private, loopback, or metadata address")]
    Blocked {
        action: &'static str,
        host: String,
        addr: IpAddr,
    },
}

/// Looks up the addresses of a host name.
pub trait Resolver: Send + Sync {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;
}

/// The system resolver (`getaddrinfo` through tokio).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host, 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// Fixed answers, for tests and for pinning names to known addresses.
#[derive(Debug, Default, Clone)]
pub struct StaticResolver {
    names: HashMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// Answer `host` with `addrs`.
    pub fn with(mut self, host: &str, addrs: &[IpAddr]) -> Self {
        self.names.insert(host.to_ascii_lowercase(), addrs.to_vec());
        self
    }
}

impl Resolver for StaticResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        let found = self.names.get(&host.to_ascii_lowercase()).cloned();
        Box::pin(async move {
            found.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "unknown host"))
        })
    }
}

type Policy = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

/// Checks URLs and resolves hosts for one tool. Cheap to clone.
#[derive(Clone)]
pub struct UrlGuard {
    allow_private: bool,
    resolver: Arc<dyn Resolver>,
    blocked: Policy,
    action: &'static str,
}

impl std::fmt::Debug for UrlGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlGuard")
            .field("allow_private", &self.allow_private)
            .finish_non_exhaustive()
    }
}

impl UrlGuard {
    /// A guard with the system resolver; `allow_private` turns the address checks off.
    pub fn new(allow_private: bool) -> Self {
        Self {
            allow_private,
            resolver: Arc::new(SystemResolver),
            blocked: Arc::new(is_blocked_ip),
            action: "fetch",
        }
    }

    /// Use another resolver (tests; pinned names).
    pub fn with_resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = resolver;
        self
    }

    /// Replace the address policy (`true` = refused). Tests use it to treat one loopback address
    /// as public; the default is [`is_blocked_ip`].
    pub fn with_policy(mut self, blocked: impl Fn(IpAddr) -> bool + Send + Sync + 'static) -> Self {
        self.blocked = Arc::new(blocked);
        self
    }

    pub fn allows_private(&self) -> bool {
        self.allow_private
    }

    /// Parse and check a URL's scheme and host syntax; literal addresses and local names are
    /// checked here, names are left to resolution.
    pub fn check_literal(&self, raw: &str) -> Result<Url, Refusal> {
        let url = Url::parse(raw.trim()).map_err(|e| match e {
            url::ParseError::RelativeUrlWithoutBase => Refusal::Scheme,
            other => Refusal::Invalid(other.to_string()),
        })?;
        self.check_url(&url)?;
        Ok(url)
    }

    /// [`UrlGuard::check_literal`] for an already-parsed URL (a redirect target).
    pub fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refusal::Scheme);
        }
        let host = url.host().ok_or(Refusal::NoHost)?;
        if self.allow_private {
            return Ok(());
        }
        match host {
            Host::Ipv4(ip) => self.check_addr(&ip.to_string(), IpAddr::V4(ip)),
            Host::Ipv6(ip) => self.check_addr(&ip.to_string(), IpAddr::V6(ip)),
            Host::Domain(name) => {
                let name = normalize(name);
                if is_local_name(&name) {
                    return Err(self.local_name(name));
                }
                Ok(())
            }
        }
    }

    fn local_name(&self, host: String) -> Refusal {
        tracing::info!(%host, "SSRF guard refused a local host name");
        Refusal::LocalName {
            action: self.action,
            host,
        }
    }

    fn check_addr(&self, host: &str, addr: IpAddr) -> Result<(), Refusal> {
        if (self.blocked)(addr) {
            tracing::info!(%host, %addr, "SSRF guard refused a non-public address");
            return Err(Refusal::Blocked {
                action: self.action,
                host: host.to_owned(),
                addr,
            });
        }
        Ok(())
    }

    /// Resolve `host` and check every address; the addresses to connect to.
    pub async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, Refusal> {
        let name = normalize(host);
        if !self.allow_private && is_local_name(&name) {
            return Err(self.local_name(name));
        }
        let addrs = self
            .resolver
            .lookup(&name)
            .await
            .map_err(|_| Refusal::Unresolvable)?;
        if addrs.is_empty() {
            return Err(Refusal::Unresolvable);
        }
        if !self.allow_private {
            for a in &addrs {
                self.check_addr(&name, *a)?;
            }
        }
        Ok(addrs)
    }

    /// The full check of a URL a provider will fetch elsewhere (scheme, host, every resolved
    /// address). The provider may resolve differently; only the direct fetcher pins.
    pub async fn check(&self, raw: &str) -> Result<Url, Refusal> {
        let url = self.check_literal(raw)?;
        if self.allow_private {
            return Ok(url);
        }
        if let Some(Host::Domain(name)) = url.host() {
            self.resolve(name).await?;
        }
        Ok(url)
    }

    /// The resolver to install in an HTTP client so it connects only to checked addresses.
    pub fn dns(&self) -> Arc<GuardedDns> {
        Arc::new(GuardedDns {
            guard: self.clone(),
        })
    }
}

fn normalize(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

fn is_local_name(name: &str) -> bool {
    BLOCKED_NAMES.contains(&name) || name.ends_with(".localhost")
}

/// reqwest's resolver backed by a [`UrlGuard`]: a refused host fails the connection with the
/// [`Refusal`] as the error's source.
pub struct GuardedDns {
    guard: UrlGuard,
}

impl reqwest::dns::Resolve for GuardedDns {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.guard.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            match guard.resolve(&host).await {
                Ok(addrs) => {
                    let it: reqwest::dns::Addrs =
                        Box::new(addrs.into_iter().map(|ip| SocketAddr::new(ip, 0)));
                    Ok(it)
                }
                Err(r) => Err(Box::new(r) as Box<dyn std::error::Error + Send + Sync>),
            }
        })
    }
}

/// The refusal somewhere in an error's source chain, if the guard caused it.
pub fn refusal_in(err: &(dyn std::error::Error + 'static)) -> Option<Refusal> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(r) = e.downcast_ref::<Refusal>() {
            return Some(r.clone());
        }
        cur = e.source();
    }
    None
}

fn v4_in(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn v6_in(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

/// IPv4 ranges that are not the public internet.
const V4_BLOCKED: &[([u8; 4], u32)] = &[
    ([0, 0, 0, 0], 8),  // "this network", includes 0.0.0.0 (reaches localhost on Linux)
    ([10, 0, 0, 0], 8), // private
    ([100, 64, 0, 0], 10), // CGNAT; also Alibaba Cloud's metadata service
    ([127, 0, 0, 0], 8), // loopback
    ([169, 254, 0, 0], 16), // link-local, cloud metadata
    ([172, 16, 0, 0], 12), // private
    ([192, 0, 0, 0], 24), // IETF protocol assignments
    ([192, 0, 2, 0], 24), // documentation
    ([192, 88, 99, 0], 24), // 6to4 relay anycast
    ([192, 168, 0, 0], 16), // private
    ([198, 18, 0, 0], 15), // benchmarking
    ([198, 51, 100, 0], 24), // documentation
    ([203, 0, 113, 0], 24), // documentation
    ([224, 0, 0, 0], 4), // multicast
    ([240, 0, 0, 0], 4), // reserved, broadcast
];

fn v4_blocked(ip: Ipv4Addr) -> bool {
    V4_BLOCKED.iter().any(|(net, p)| v4_in(ip, *net, *p))
}

fn v6(s: [u16; 8]) -> Ipv6Addr {
    Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
}

/// Whether the web tools refuse to connect to `ip`. IPv6 is allowed only in global unicast
/// (2000::/3) outside its special blocks; forms that carry an IPv4 address (mapped, NAT64,
/// 6to4) are judged by that address.
pub fn is_blocked_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_blocked(v4),
        IpAddr::V6(ip6) => {
            if let Some(v4) = ip6.to_ipv4_mapped() {
                return v4_blocked(v4);
            }
            let bits = u128::from(ip6);
            if v6_in(ip6, v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0]), 96) {
                // NAT64: the gateway connects to the embedded IPv4 address.
                return v4_blocked(Ipv4Addr::from((bits & 0xffff_ffff) as u32));
            }
            if v6_in(ip6, v6([0x2002, 0, 0, 0, 0, 0, 0, 0]), 16) {
                // 6to4: bits 16..48 are the IPv4 address.
                return v4_blocked(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32));
            }
            if !v6_in(ip6, v6([0x2000, 0, 0, 0, 0, 0, 0, 0]), 3) {
                // Loopback, unspecified, IPv4-compatible, ULA, link-local, multicast, reserved.
                return true;
            }
            [
                (v6([0x2001, 0, 0, 0, 0, 0, 0, 0]), 23), // IETF protocol assignments, Teredo
                (v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0]), 32), // documentation
                (v6([0x3fff, 0, 0, 0, 0, 0, 0, 0]), 20), // documentation (RFC 9637)
            ]
            .iter()
            .any(|(net, p)| v6_in(ip6, *net, *p))
        }
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
