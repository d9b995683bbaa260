//! Which mirror URLs are taken, and where git may connect for them.
//!
//! Only `https://`, `http://`, `ssh://` and `git://` URLs: never `file://`
//! (the server's own files), `ext::` (a command line), scp-like
//! `host:path` (git reads a local path or an ssh host depending on the
//! characters in it) or any other transport. A URL carrying a password, a
//! query (`?private_token=…`) or an `@` in its path is refused (the
//! credential goes in `--credential-file`, sealed); an http(s) URL carries
//! no user name either, and an ssh one only a plain user name. A URL is
//! shown ([`shown`], [`scrub`] for git's errors) as `scheme://host/path`.
//! The host is resolved through the webhooks' SSRF guard with its own
//! allowlist (`mirrors.allowed_hosts`), at `add` and again at every sync,
//! and git is pinned to the address the guard vetted ([`Pinned`]), so a
//! name cannot resolve to a public address for the check and an internal
//! one for the connection.

use std::net::SocketAddr;

use crate::webhooks::ssrf::Guard;

/// The transports a mirror may use.
pub const SCHEMES: &[&str] = &["https", "http", "ssh", "git"];

/// The longest URL taken.
pub const MAX_URL: usize = 2048;

/// A URL that passed the shape checks (not yet the address check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub url: reqwest::Url,
    pub scheme: &'static str,
    /// Without brackets for IPv6.
    pub host: String,
    pub port: u16,
}

/// Check a URL's shape: transport, host, no credentials, no option-like
/// parts. The message is the one-line refusal.
pub fn check(raw: &str) -> Result<Checked, String> {
    if raw.len() > MAX_URL {
        return Err(format!("invalid URL: longer than {MAX_URL} bytes"));
    }
    // git's `<transport>::<address>` form (`ext::<command>`, `fd::`, a
    // remote helper): `::` before any `://`.
    if raw.split("://").next().unwrap_or(raw).contains("::") {
        return Err("refused: the ext:: and <transport>:: forms are never allowed; use https://, http://, ssh:// or git://".into());
    }
    if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("invalid URL: it holds spaces or control characters".into());
    }
    let Ok(url) = reqwest::Url::parse(raw) else {
        return Err(
            "invalid URL: give a full https://, http://, ssh:// or git:// URL (scp-like host:path is not taken)"
                .into(),
        );
    };
    let Some(scheme) = SCHEMES.iter().copied().find(|s| *s == url.scheme()) else {
        return Err(format!(
            "refused: the {}:// transport is not allowed; use https://, http://, ssh:// or git://",
            url.scheme()
        ));
    };
    if url.password().is_some() {
        return Err(
            "refused: the URL carries a password; pass it with --credential-file (it is stored sealed)"
                .into(),
        );
    }
    let user = url.username();
    if !user.is_empty() {
        if scheme != "ssh" {
            return Err(
                "refused: an http(s) or git URL carries no user name; put user:token in --credential-file"
                    .into(),
            );
        }
        if user.starts_with('-')
            || !user
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err("invalid URL: the ssh user name is not a plain name".into());
        }
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or("invalid URL: it has no host")?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if host.starts_with('-') {
        return Err("invalid URL: the host may not start with '-'".into());
    }
    if url.fragment().is_some() {
        return Err("invalid URL: a fragment (#…) is not taken".into());
    }
    // A token in the query (`?private_token=…`) or a `user:token@` in the
    // path would be shown wherever the URL is, and quoted in git's errors.
    if url.query().is_some() {
        return Err(
            "refused: a mirror URL takes no query (?…), where tokens hide; pass the credential with --credential-file (it is stored sealed)"
                .into(),
        );
    }
    if path_holds_credentials(url.path()) {
        return Err(
            "refused: the URL's path holds an '@' (a user:token@ in disguise?); pass the credential with --credential-file (it is stored sealed)"
                .into(),
        );
    }
    if url.path().trim_start_matches('/').is_empty() {
        return Err("invalid URL: it names no repository path".into());
    }
    let port = url.port_or_known_default().unwrap_or(match scheme {
        "ssh" => 22,
        "git" => 9418,
        "https" => 443,
        _ => 80,
    });
    Ok(Checked {
        url,
        scheme,
        host,
        port,
    })
}

/// An `@` anywhere in the path, percent-encoded or not: git URLs have none,
/// and `/x-access-token:TOKEN@host/…` segments are credentials.
fn path_holds_credentials(path: &str) -> bool {
    path.contains('@') || path.to_ascii_lowercase().contains("%40")
}

/// A mirror URL as it is shown (web page, `mirror list`, replies, the
/// log): `scheme://host[:port]/path`, without user, password, query or
/// fragment, and any path segment holding an `@` replaced. Mirrors added
/// before such URLs were refused may still hold one.
pub fn shown(raw: &str) -> String {
    let Ok(url) = reqwest::Url::parse(raw) else {
        return "[unreadable URL]".into();
    };
    let Some(host) = url.host_str() else {
        return format!("{}://[redacted]", url.scheme());
    };
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    let path: Vec<&str> = url
        .path()
        .split('/')
        .map(|segment| {
            if path_holds_credentials(segment) {
                "[redacted]"
            } else {
                segment
            }
        })
        .collect();
    format!("{}://{host}{port}{}", url.scheme(), path.join("/"))
}

/// `text` (git's error, kept and shown) with every URL in it as [`shown`]
/// shows it: git quotes the URL it was given, and an upstream's message
/// may quote others.
pub fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        // The scheme: the letters, digits, `+`, `-` and `.` before `://`.
        let start = rest[..at]
            .char_indices()
            .rev()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '<' | '>' | '`'))
            .map_or(rest.len(), |i| at + i);
        out.push_str(&rest[..start]);
        if start == at {
            // `://` with no scheme: not a URL, but what follows may be
            // user:token@host all the same.
            out.push_str("://[redacted]");
        } else {
            out.push_str(&shown(&rest[start..end]));
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A checked URL and the one address git will connect to.
#[derive(Debug, Clone)]
pub struct Pinned {
    pub checked: Checked,
    pub addr: SocketAddr,
}

/// Resolve the URL's host through the guard: the first vetted address.
pub async fn pin(guard: &Guard, checked: Checked) -> Result<Pinned, String> {
    let addrs = guard
        .resolve(&checked.host, checked.port)
        .await
        .map_err(|e| format!("refused: {e}"))?;
    Ok(Pinned {
        addr: addrs[0],
        checked,
    })
}

impl Pinned {
    /// The URL git is given: `git://` gets the address itself (git's own
    /// resolver would ask the name again); the others keep the name and are
    /// pinned by [`Pinned::git_config`] / the ssh command line.
    pub fn git_url(&self) -> String {
        let mut url = self.checked.url.clone();
        if self.checked.scheme == "git" {
            let _ = url.set_ip_host(self.addr.ip());
        }
        url.to_string()
    }

    /// `-c` settings that pin http(s) to the vetted address
    /// (`http.curloptResolve`, git ≥ 2.37) and never follow a redirect.
    pub fn git_config(&self) -> Vec<String> {
        match self.checked.scheme {
            "http" | "https" => {
                let ip = match self.addr.ip() {
                    std::net::IpAddr::V6(v6) => format!("[{v6}]"),
                    v4 => v4.to_string(),
                };
                vec![
                    format!(
                        "http.curloptResolve={}:{}:{ip}",
                        self.checked.host, self.checked.port
                    ),
                    "http.followRedirects=false".into(),
                ]
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_full_urls_of_four_transports_without_passwords_are_taken() {
        for ok in [
            "https://example.com/a/b.git",
            "http://example.com:8080/x",
            "ssh://git@example.com:2222/team/app.git",
            "git://example.com/x.git",
            "https://[::1]:8443/x.git",
        ] {
            assert!(check(ok).is_ok(), "{ok}: {:?}", check(ok));
        }
        for (bad, says) in [
            ("file:///etc/passwd", "file://"),
            ("ext::sh -c touch% /tmp/pwned", "ext::"),
            ("ext::ssh", "ext::"),
            ("fd::17", "::"),
            ("https::example.com/x", "::"),
            ("git@example.com:team/app.git", "scp-like"),
            ("/srv/repos/x.git", "scp-like"),
            ("ftp://example.com/x", "ftp://"),
            ("https://user:hunter2@example.com/x", "password"),
            ("ssh://git:pw@example.com/x", "password"),
            ("https://token@example.com/x", "user name"),
            ("ssh://-oProxyCommand=x@example.com/x", "plain name"),
            ("ssh://-oProxyCommand=x/x", "'-'"),
            ("https://example.com/x#frag", "fragment"),
            ("https://example.com/", "no repository path"),
            ("https://exa mple.com/x", "spaces"),
        ] {
            let err = check(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn credentials_in_the_query_or_the_path_are_refused_and_never_shown() {
        for (bad, says) in [
            ("https://example.com/x.git?token=hunter2", "query"),
            ("https://example.com/x.git?access_token=hunter2", "query"),
            ("https://example.com/x.git?private_token=hunter2", "query"),
            ("https://example.com/x.git?", "query"),
            (
                "https://example.com/x-access-token:hunter2@github.com/o/x.git",
                "'@'",
            ),
            ("https://example.com/u:hunter2%40/x.git", "'@'"),
            ("ssh://git@example.com/a/b:hunter2@c/x.git", "'@'"),
            ("ssh://git:hunter2@example.com/x.git", "password"),
        ] {
            let err = check(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
        for (stored, want) in [
            (
                "https://bob:hunter2@example.com:8443/x.git?private_token=hunter2#f",
                "https://example.com:8443/x.git",
            ),
            (
                "https://example.com/x-access-token:hunter2@github.com/o/x.git",
                "https://example.com/[redacted]/o/x.git",
            ),
            (
                "ssh://git@example.com/team/app.git",
                "ssh://example.com/team/app.git",
            ),
            ("git://127.0.0.1:9000/x.git", "git://127.0.0.1:9000/x.git"),
            ("not a url hunter2", "[unreadable URL]"),
        ] {
            assert_eq!(shown(stored), want, "{stored}");
        }
        let git_said = "fatal: unable to access 'https://u:hunter2@example.com/x.git/?token=hunter2': \
                        The requested URL returned error: 403 | remote: see \
                        http://example.com/a?access_token=hunter2. (git+ssh://k:hunter2@h/x) ://u:hunter2@h";
        let scrubbed = scrub(git_said);
        assert!(!scrubbed.contains("hunter2"), "{scrubbed}");
        assert!(
            scrubbed.starts_with(
                "fatal: unable to access 'https://example.com/x.git/': The requested URL returned error: 403"
            ),
            "{scrubbed}"
        );
        assert_eq!(scrub("no URL here: host:22"), "no URL here: host:22");
        assert_eq!(scrub("…ähttps://u:p@h/x é"), "…ähttps://h/x é");
    }

    #[tokio::test]
    async fn internal_addresses_need_the_allowlist_and_git_is_pinned_to_the_vetted_one() {
        let checked = check("http://127.0.0.1:8080/x.git").unwrap();
        let err = pin(
            &Guard::for_key("mirrors.allowed_hosts", &[]).unwrap(),
            checked.clone(),
        )
        .await
        .unwrap_err();
        assert!(
            err.contains("loopback") && err.contains("mirrors.allowed_hosts"),
            "{err}"
        );
        let guard = Guard::for_key("mirrors.allowed_hosts", &["127.0.0.0/8".into()]).unwrap();
        let pinned = pin(&guard, checked).await.unwrap();
        assert_eq!(
            pinned.git_config(),
            vec![
                "http.curloptResolve=127.0.0.1:8080:127.0.0.1".to_string(),
                "http.followRedirects=false".into()
            ]
        );
        let git = pin(&guard, check("git://localhost:9000/x.git").unwrap()).await;
        // `localhost` is not on the list by name; its address is.
        let git = git.unwrap();
        assert!(
            git.git_url().starts_with("git://127.0.0.1:9000/")
                || git.git_url().starts_with("git://[::1]:9000/"),
            "{}",
            git.git_url()
        );
    }
}
