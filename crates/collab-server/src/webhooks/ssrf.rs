//! The SSRF guard: which addresses a webhook may be delivered to.
//!
//! A target is refused when its address is loopback, unspecified, private
//! (RFC 1918), shared (CGNAT), link-local (which holds the cloud metadata
//! endpoint 169.254.169.254), unique-local or site-local IPv6, multicast,
//! broadcast, documentation or reserved — for IPv4, IPv6, and IPv4 carried
//! inside IPv6 (v4-mapped, v4-translated, v4-compatible, NAT64, 6to4: the
//! embedded IPv4 address decides; local-use NAT64 and Teredo are refused).
//! The operator lifts the refusal per host name, address or CIDR with
//! `webhooks.allowed_hosts` (for webhooks) or `mirrors.allowed_hosts` (for
//! repository mirrors, `mirrors::url`, which use this same guard).
//!
//! Names are resolved once, here; the HTTP client connects to exactly the
//! addresses this guard vetted (it is the client's DNS resolver), so a
//! name cannot resolve to a public address for the check and a private one
//! for the connection. Redirects are never followed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

/// The vetting rules: the built-in refusals minus the operator's allowlist.
#[derive(Debug, Clone)]
pub struct Guard {
    allowed_names: Vec<String>,
    allowed_nets: Vec<IpNet>,
    /// The configuration key of the allowlist, for the refusals' words.
    key: &'static str,
}

impl Default for Guard {
    fn default() -> Guard {
        Guard {
            allowed_names: Vec::new(),
            allowed_nets: Vec::new(),
            key: "webhooks.allowed_hosts",
        }
    }
}

/// Why a target was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{host} resolves to {addr}, a {kind} address; allow it with {key}")]
    Address {
        host: String,
        addr: IpAddr,
        kind: &'static str,
        key: &'static str,
    },
    #[error("cannot resolve {host}: {reason}")]
    Resolve { host: String, reason: String },
}

impl Guard {
    /// `allowed`: host names (case-insensitive), IP addresses or CIDRs.
    pub fn new(allowed: &[String]) -> Result<Guard, String> {
        Guard::for_key("webhooks.allowed_hosts", allowed)
    }

    /// A guard whose allowlist is the configuration key `key`.
    pub fn for_key(key: &'static str, allowed: &[String]) -> Result<Guard, String> {
        let mut guard = Guard {
            key,
            ..Guard::default()
        };
        for entry in allowed {
            let entry = entry.trim();
            if let Ok(net) = entry.parse::<IpNet>() {
                guard.allowed_nets.push(net);
            } else if let Ok(ip) = entry.parse::<IpAddr>() {
                guard.allowed_nets.push(IpNet::from(ip));
            } else if !entry.is_empty()
                && entry
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'))
            {
                guard.allowed_names.push(entry.to_ascii_lowercase());
            } else {
                return Err(format!(
                    "{key}: {entry:?} is not a host name, address or CIDR"
                ));
            }
        }
        Ok(guard)
    }

    /// Check one resolved address of `host`.
    pub fn check(&self, host: &str, addr: IpAddr) -> Result<(), Refused> {
        let host_lower = host.trim_end_matches('.').to_ascii_lowercase();
        if self.allowed_names.contains(&host_lower)
            || self.allowed_nets.iter().any(|net| net.contains(&addr))
        {
            return Ok(());
        }
        match forbidden(addr) {
            None => Ok(()),
            Some(kind) => Err(Refused::Address {
                host: host.to_string(),
                addr,
                kind,
                key: self.key,
            }),
        }
    }

    /// Resolve `host` and keep the addresses that pass; an error when none
    /// does (naming the first refused one).
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Refused> {
        let resolved: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| Refused::Resolve {
                    host: host.to_string(),
                    reason: e.to_string(),
                })?
                .collect(),
        };
        let mut first_refusal = None;
        let mut vetted = Vec::new();
        for addr in resolved {
            match self.check(host, addr.ip()) {
                Ok(()) => vetted.push(addr),
                Err(e) => {
                    first_refusal.get_or_insert(e);
                }
            }
        }
        if vetted.is_empty() {
            return Err(first_refusal.unwrap_or_else(|| Refused::Resolve {
                host: host.to_string(),
                reason: "no addresses".into(),
            }));
        }
        Ok(vetted)
    }
}

/// The HTTP client's DNS resolver: only vetted addresses come back, and the
/// client connects to them without resolving again.
pub struct GuardedResolver(pub Arc<Guard>);

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.0.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            // Port 0: the client fills in the URL's port.
            let addrs = guard.resolve(&host, 0).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// What kind of non-public address `ip` is, if it is one.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match () {
        _ if ip.is_loopback() => "loopback",
        _ if ip.is_unspecified() || a == 0 => "unspecified",
        _ if ip.is_private() => "private",
        _ if a == 100 && (64..128).contains(&b) => "shared (CGNAT)",
        _ if ip.is_link_local() => "link-local (cloud metadata)",
        _ if ip.is_multicast() => "multicast",
        _ if ip.is_broadcast() => "broadcast",
        _ if ip.is_documentation() => "documentation",
        _ if a == 192 && b == 0 && c == 0 => "IETF protocol assignment",
        _ if a == 198 && (18..20).contains(&b) => "benchmarking",
        _ if a >= 240 => "reserved",
        _ => return None,
    })
}

/// The IPv4 address in the low 32 bits of `seg[6..8]`.
fn low_v4(seg: &[u16; 8]) -> Ipv4Addr {
    Ipv4Addr::new(
        (seg[6] >> 8) as u8,
        seg[6] as u8,
        (seg[7] >> 8) as u8,
        seg[7] as u8,
    )
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let seg = ip.segments();
    if ip.is_loopback() {
        return Some("loopback");
    }
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    // Forms that carry an IPv4 address which a translator, tunnel or dual
    // stack may deliver to: the IPv4 address decides.
    // ::ffff:0:0/96 (IPv4-mapped), ::ffff:0:0:0/96 (IPv4-translated, SIIT),
    // 64:ff9b::/96 (well-known NAT64 prefix), ::/96 (IPv4-compatible).
    if seg[0..6] == [0, 0, 0, 0, 0, 0xffff]
        || seg[0..6] == [0, 0, 0, 0, 0xffff, 0]
        || seg[0..6] == [0x64, 0xff9b, 0, 0, 0, 0]
        || seg[0..6] == [0; 6]
    {
        return forbidden_v4(low_v4(&seg));
    }
    // 2002::/16 (6to4): the IPv4 address is bits 16..48.
    if seg[0] == 0x2002 {
        let v4 = Ipv4Addr::new(
            (seg[1] >> 8) as u8,
            seg[1] as u8,
            (seg[2] >> 8) as u8,
            seg[2] as u8,
        );
        return forbidden_v4(v4).map(|_| "6to4 with a non-public IPv4");
    }
    Some(match () {
        // 64:ff9b:1::/48 (RFC 8215, local-use NAT64): where the IPv4 address
        // sits depends on the operator's prefix length, so it cannot be
        // judged; it only ever leads into a local network.
        _ if seg[0..3] == [0x64, 0xff9b, 1] => "local-use NAT64",
        // 2001::/32 (Teredo): the IPv4 server and client are obfuscated
        // inside; a tunnel endpoint is never a webhook receiver.
        _ if seg[0] == 0x2001 && seg[1] == 0 => "Teredo",
        _ if (seg[0] & 0xfe00) == 0xfc00 => "unique-local",
        _ if (seg[0] & 0xffc0) == 0xfe80 => "link-local",
        _ if (seg[0] & 0xffc0) == 0xfec0 => "site-local",
        _ if ip.is_multicast() => "multicast",
        _ if seg[0] == 0x2001 && seg[1] == 0x0db8 => "documentation",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> bool {
        forbidden(text.parse().unwrap()).is_some()
    }

    #[test]
    fn private_ranges_are_refused() {
        for bad in [
            "127.0.0.1",
            "127.9.9.9",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "::127.0.0.1",
        ] {
            assert!(refused(bad), "{bad} must be refused");
        }
        for good in [
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(!refused(good), "{good} must pass");
        }
    }

    /// Every IPv4-embedding IPv6 form is judged by the IPv4 address it
    /// carries (or refused when that cannot be told).
    #[test]
    fn ipv4_embedding_ipv6_is_judged_by_the_embedded_address() {
        let cases = [
            // ::ffff:0:0/96, IPv4-mapped.
            ("::ffff:127.0.0.1", true),
            ("::ffff:192.168.0.1", true),
            ("::ffff:8.8.8.8", false),
            // ::ffff:0:0:0/96, IPv4-translated.
            ("::ffff:0:127.0.0.1", true),
            ("::ffff:0:a9fe:a9fe", true),
            ("::ffff:0:10.1.2.3", true),
            ("::ffff:0:8.8.8.8", false),
            // 64:ff9b::/96, well-known NAT64.
            ("64:ff9b::127.0.0.1", true),
            ("64:ff9b::10.0.0.1", true),
            ("64:ff9b::8.8.8.8", false),
            // 64:ff9b:1::/48, local-use NAT64: refused whatever it carries.
            ("64:ff9b:1::8.8.8.8", true),
            ("64:ff9b:1:a9fe:a900::", true),
            // 2002::/16, 6to4.
            ("2002:7f00:1::", true),
            ("2002:a9fe:a9fe::1", true),
            ("2002:c0a8:0101::", true),
            ("2002:0808:0808::1", false),
            // ::/96, IPv4-compatible.
            ("::127.0.0.1", true),
            ("::10.0.0.1", true),
            ("::0.0.0.2", true),
            ("::8.8.8.8", false),
            // Teredo.
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", true),
        ];
        for (text, refuse) in cases {
            assert_eq!(refused(text), refuse, "{text}");
        }
    }

    #[test]
    fn the_allowlist_lifts_a_refusal() {
        let guard = Guard::new(&[
            "127.0.0.1".into(),
            "10.0.0.0/8".into(),
            "Hooks.Local".into(),
        ])
        .unwrap();
        assert!(guard.check("x", "127.0.0.1".parse().unwrap()).is_ok());
        assert!(guard.check("x", "127.0.0.2".parse().unwrap()).is_err());
        assert!(guard.check("x", "10.9.9.9".parse().unwrap()).is_ok());
        assert!(guard
            .check("hooks.local.", "192.168.0.1".parse().unwrap())
            .is_ok());
        let err = Guard::default()
            .check("meta", "169.254.169.254".parse().unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("link-local"), "{err}");
        assert!(Guard::new(&["not a host".into()]).is_err());
    }

    #[tokio::test]
    async fn names_are_vetted_after_resolution() {
        let guard = Guard::default();
        let err = guard.resolve("localhost", 80).await.unwrap_err();
        assert!(matches!(err, Refused::Address { .. }), "{err}");
        let allowed = Guard::new(&["localhost".into()]).unwrap();
        assert!(!allowed.resolve("localhost", 80).await.unwrap().is_empty());
    }
}
