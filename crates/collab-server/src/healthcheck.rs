//! `git-collab-server healthcheck`: asks the local server's `/readyz` over
//! plain HTTP/1.0 so container health checks need no curl. Exit 0 on `200`,
//! else one error line.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::config::ServerConfig;

/// Long enough for a loaded server, short enough for a health check interval.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Where to reach a server listening on `listen`: a wildcard address is
/// reached through the loopback address of the same family.
pub fn target(listen: &str) -> anyhow::Result<SocketAddr> {
    let mut addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("http.listen = {listen:?}: invalid socket address"))?;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        });
    }
    Ok(addr)
}

/// `GET /readyz`; `Ok` only for status 200.
pub fn check(config: &ServerConfig) -> anyhow::Result<()> {
    let addr = target(&config.http.listen)?;
    let url = format!("http://{addr}/readyz");
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)
        .with_context(|| format!("healthcheck: cannot connect to {addr}"))?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    write!(
        stream,
        "GET /readyz HTTP/1.0\r\nHost: {addr}\r\nUser-Agent: git-collab-server-healthcheck\r\n\r\n"
    )
    .with_context(|| format!("healthcheck: cannot send to {url}"))?;
    // Only the status line matters; the body is never read.
    let mut status_line = String::new();
    let read = BufReader::new(&stream)
        .read_line(&mut status_line)
        .with_context(|| format!("healthcheck: no answer from {url}"))?;
    if read == 0 {
        bail!("healthcheck: {url} closed the connection without answering");
    }
    let status_line = status_line.trim_end();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !version.starts_with("HTTP/") || code.len() != 3 {
        bail!("healthcheck: {url} answered {status_line:?}, not HTTP");
    }
    if code != "200" {
        bail!("healthcheck: {url} answered {status_line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::net::TcpListener;

    /// A one-shot HTTP server on an ephemeral loopback port that answers
    /// `reply` and hands back the request it received.
    fn serve_once(reply: &'static str) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 512];
            while !request.ends_with(b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            conn.write_all(reply.as_bytes()).unwrap();
            String::from_utf8(request).unwrap()
        });
        (format!("0.0.0.0:{port}"), handle)
    }

    fn config(listen: &str) -> ServerConfig {
        let mut config = ServerConfig::with_state_dir("/nonexistent".into());
        config.http.listen = listen.into();
        config
    }

    #[test]
    fn wildcard_listen_is_reached_on_loopback() {
        assert_eq!(
            target("0.0.0.0:8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(target("[::]:8080").unwrap(), "[::1]:8080".parse().unwrap());
        assert_eq!(
            target("10.0.0.1:80").unwrap(),
            "10.0.0.1:80".parse().unwrap()
        );
    }

    #[test]
    fn ready_server_passes() {
        let (listen, server) = serve_once("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        check(&config(&listen)).unwrap();
        let request = server.join().unwrap();
        assert!(request.starts_with("GET /readyz HTTP/1.0\r\n"), "{request}");
    }

    #[test]
    fn unready_server_fails_with_its_status() {
        let (listen, server) = serve_once("HTTP/1.1 503 Service Unavailable\r\n\r\n");
        let e = format!("{:#}", check(&config(&listen)).unwrap_err());
        server.join().unwrap();
        assert!(
            e.ends_with("/readyz answered HTTP/1.1 503 Service Unavailable"),
            "{e}"
        );
    }

    #[test]
    fn nothing_listening_fails() {
        // Bind then drop to get a port that is (almost certainly) closed.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = format!(
            "{:#}",
            check(&config(&format!("127.0.0.1:{port}"))).unwrap_err()
        );
        assert!(
            e.starts_with("healthcheck: cannot connect to 127.0.0.1:"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }
}
