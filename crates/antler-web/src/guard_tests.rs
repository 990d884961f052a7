#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use pretty_assertions::assert_eq;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn non_public_addresses_are_blocked() {
    for a in [
        "0.0.0.0",
        "0.1.2.3",
        "10.1.2.3",
        "100.64.0.1",
        "100.100.100.200",
        "127.0.0.1",
        "127.9.9.9",
        "169.254.169.254",
        "172.16.0.1",
        "172.31.255.255",
        "192.0.0.170",
        "192.0.2.1",
        "192.168.1.1",
        "198.18.0.1",
        "198.51.100.7",
        "203.0.113.9",
        "224.0.0.1",
        "239.255.255.250",
        "240.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "::127.0.0.1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:10.0.0.1",
        "64:ff9b::7f00:1",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b:1::1",
        "2002:7f00:1::",
        "2002:a9fe:a9fe::1",
        "2001::1",
        "2001:db8::1",
        "3fff::1",
        "fc00::1",
        "fd12:3456::1",
        "fe80::1",
        "fec0::1",
        "ff02::1",
        "100::1",
    ] {
        assert!(is_blocked_ip(ip(a)), "{a} should be blocked");
    }
}

#[test]
fn public_addresses_are_allowed() {
    for a in [
        "1.1.1.1",
        "8.8.8.8",
        "93.184.216.34",
        "172.32.0.1",
        "100.128.0.1",
        "192.169.0.1",
        "2606:4700:4700::1111",
        "2a00:1450:4001::200e",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ] {
        assert!(!is_blocked_ip(ip(a)), "{a} should be allowed");
    }
}

#[test]
fn schemes_and_literals_are_checked_without_lookups() {
    let g = UrlGuard::new(false).with_resolver(Arc::new(StaticResolver::new()));
    for (raw, want) in [
        ("file:///etc/passwd", Refusal::Scheme),
        ("ftp://example.com/", Refusal::Scheme),
        ("gopher://127.0.0.1:6379/_INFO", Refusal::Scheme),
        ("example.com/page", Refusal::Scheme),
        ("javascript:alert(1)", Refusal::Scheme),
    ] {
        assert_eq!(g.check_literal(raw).unwrap_err(), want, "{raw}");
    }
    // Every spelling of loopback the URL parser understands is the same address.
    let blocked = [
        "http://127.0.0.1/",
        "http://127.1/",
        "http://2130706433/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://0x7f.0.0.1:8080/x",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[0:0:0:0:0:ffff:7f00:1]/",
        "https://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:2026/",
        "http://user:pw@10.0.0.1/",
    ];
    let local_names = [
        "http://localhost:8080/",
        "http://LOCALHOST./",
        "http://api.localhost/",
        "http://metadata.google.internal/computeMetadata/v1/",
    ];
    let is_blocked: fn(&Refusal) -> bool = |r| matches!(r, Refusal::Blocked { .. });
    let is_local_name: fn(&Refusal) -> bool = |r| matches!(r, Refusal::LocalName { .. });
    for (raws, refused_as) in [
        (&blocked[..], is_blocked),
        (&local_names[..], is_local_name),
    ] {
        for raw in raws {
            assert!(
                g.check_literal(raw).err().is_some_and(|r| refused_as(&r)),
                "{raw}"
            );
        }
    }
    assert!(g.check_literal("https://93.184.216.34/page").is_ok());
    assert!(g.check_literal("https://example.com/page").is_ok());
}

#[tokio::test]
async fn names_are_refused_when_any_address_is_private() {
    let r = StaticResolver::new()
        .with("public.test", &[ip("93.184.216.34")])
        .with("rebind.test", &[ip("93.184.216.34"), ip("10.0.0.5")])
        .with("inside.test", &[ip("192.168.0.10")]);
    let g = UrlGuard::new(false).with_resolver(Arc::new(r));
    assert_eq!(
        g.resolve("public.test").await.unwrap(),
        vec![ip("93.184.216.34")]
    );
    assert_eq!(
        g.resolve("rebind.test.").await.unwrap_err(),
        Refusal::Blocked {
            action: "fetch",
            host: "rebind.test".into(),
            addr: ip("10.0.0.5")
        }
    );
    assert!(g.check("http://inside.test/").await.is_err());
    assert_eq!(
        g.check("http://nowhere.test/").await.unwrap_err(),
        Refusal::Unresolvable
    );
    assert_eq!(
        g.check("http://inside.test/")
            .await
            .unwrap_err()
            .to_string(),
        "Refusing to fetch a private, loopback, or metadata address"
    );
}

#[tokio::test]
async fn the_opt_out_allows_private_addresses_but_not_other_schemes() {
    let r = StaticResolver::new().with("inside.test", &[ip("192.168.0.10")]);
    let g = UrlGuard::new(true).with_resolver(Arc::new(r));
    assert!(g.check("http://127.0.0.1:9/").await.is_ok());
    assert!(g.check("http://localhost/").await.is_ok());
    assert_eq!(
        g.resolve("inside.test").await.unwrap(),
        vec![ip("192.168.0.10")]
    );
    assert_eq!(
        g.check_literal("file:///etc/passwd").unwrap_err(),
        Refusal::Scheme
    );
}
