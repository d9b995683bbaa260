//! TLS to PostgreSQL with rustls, configured as libpq reads it from the
//! URL: `sslmode` (`disable`, `prefer` — the default —, `require`,
//! `verify-ca`, `verify-full`), `sslrootcert` (PEM CA certificates),
//! `sslcert` and `sslkey` (a client certificate). The parameters are taken
//! out of the URL before the `postgres` crate parses it (it knows only
//! `disable|prefer|require`).
//!
//! - `verify-full`: the chain to a CA of `sslrootcert`, and the host name
//!   (or IP address) connected to must be in the certificate.
//! - `verify-ca`: the chain only.
//! - `require` and `prefer`: encrypted without verification, unless
//!   `sslrootcert` is given (then as `verify-ca`, as libpq does); `prefer`
//!   falls back to plain when the server does not offer TLS.
//!
//! A certificate that fails verification is a connection error naming the
//! reason ([`explain`]): the server refuses to start.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// The TLS parameters of a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    pub mode: Mode,
    pub rootcert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `url` without its TLS parameters, and them.
pub fn split(url: &str) -> Result<(String, Params), String> {
    let mut params = Params {
        mode: Mode::Prefer,
        rootcert: None,
        cert: None,
        key: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), params));
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value);
        match key {
            "sslmode" => {
                params.mode = match value.as_str() {
                    "disable" => Mode::Disable,
                    "allow" | "prefer" => Mode::Prefer,
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    other => {
                        return Err(format!(
                            "sslmode={other} is not one of disable, prefer, require, verify-ca, verify-full"
                        ))
                    }
                }
            }
            "sslrootcert" => params.rootcert = Some(PathBuf::from(value)),
            "sslcert" => params.cert = Some(PathBuf::from(value)),
            "sslkey" => params.key = Some(PathBuf::from(value)),
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, params))
}

impl Params {
    /// What the `postgres` crate is told.
    pub fn ssl_mode(&self) -> postgres::config::SslMode {
        match self.mode {
            Mode::Disable => postgres::config::SslMode::Disable,
            Mode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        }
    }

    /// The connector, `None` for `disable`.
    pub fn connector(&self) -> Result<Option<MakeRustls>, String> {
        if self.mode == Mode::Disable {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let rootcert = match (&self.rootcert, self.mode) {
            (Some(path), _) => Some(path.clone()),
            (None, Mode::VerifyCa | Mode::VerifyFull) => {
                let default = std::env::var_os("HOME")
                    .map(|h| PathBuf::from(h).join(".postgresql/root.crt"))
                    .filter(|p| p.exists());
                match default {
                    Some(p) => Some(p),
                    None => {
                        return Err(format!(
                            "sslmode={} needs sslrootcert=FILE (the CA certificates, PEM)",
                            if self.mode == Mode::VerifyCa {
                                "verify-ca"
                            } else {
                                "verify-full"
                            }
                        ))
                    }
                }
            }
            (None, _) => None,
        };
        let verifier: Arc<dyn ServerCertVerifier> = match rootcert {
            None => Arc::new(Unverified(provider.clone())),
            Some(path) => {
                let mut roots = rustls::RootCertStore::empty();
                let certs = CertificateDer::pem_file_iter(&path)
                    .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                for cert in certs {
                    let cert = cert.map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                }
                if roots.is_empty() {
                    return Err(format!(
                        "sslrootcert {}: no certificate in it",
                        path.display()
                    ));
                }
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                if self.mode == Mode::VerifyFull {
                    webpki
                } else {
                    Arc::new(ChainOnly(webpki))
                }
            }
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("sslcert {}: {e}", cert.display()))?;
                let key_der = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("sslkey {}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| format!("sslcert/sslkey: {e}"))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err("sslcert and sslkey go together".into()),
        };
        Ok(Some(MakeRustls(Arc::new(config))))
    }
}

/// Why a TLS connection failed, in words, if it failed in TLS.
pub fn explain(e: &postgres::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = source {
        // tokio-rustls wraps rustls' error in an io::Error, whose source()
        // skips it.
        let inner = err
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .map(|e| e as &(dyn std::error::Error + 'static));
        let tls = err
            .downcast_ref::<rustls::Error>()
            .or_else(|| inner.and_then(|e| e.downcast_ref::<rustls::Error>()));
        if let Some(tls) = tls {
            return Some(match tls {
                rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer | CertificateError::BadSignature,
                ) => "TLS to PostgreSQL: wrong CA: the server's certificate is not signed by a CA \
                      in sslrootcert"
                    .into(),
                rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                ) => "TLS to PostgreSQL: host name mismatch: the server's certificate does not \
                      name the host connected to"
                    .into(),
                other => format!("TLS to PostgreSQL: {other}"),
            });
        }
        source = err.source();
    }
    if e.to_string().contains("TLS") {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(err) = source {
            text.push_str(&format!(": {err}"));
            source = err.source();
        }
        return Some(text.replace('\n', " "));
    }
    None
}

/// No verification (`require`/`prefer` without `sslrootcert`), but the
/// handshake's signatures are still checked.
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain, not the name.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The `postgres` crate's TLS hook, over rustls.
#[derive(Clone)]
pub struct MakeRustls(Arc<rustls::ClientConfig>);

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<Connect> {
        let name = ServerName::try_from(domain.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(Connect(self.0.clone(), name))
    }
}

pub struct Connect(Arc<rustls::ClientConfig>, ServerName<'static>);

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let tls = tokio_rustls::TlsConnector::from(self.0)
                .connect(self.1, stream)
                .await?;
            Ok(Stream(tls))
        })
    }
}

pub struct Stream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_are_taken_out_of_the_url() {
        let (url, p) = split(
            "postgres://u@h/db?application_name=x&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&connect_timeout=5",
        )
        .unwrap();
        assert_eq!(
            url,
            "postgres://u@h/db?application_name=x&connect_timeout=5"
        );
        assert_eq!(p.mode, Mode::VerifyFull);
        assert_eq!(p.rootcert, Some(PathBuf::from("/tmp/ca.pem")));
        let (url, p) = split("postgres://u@h/db?sslmode=disable").unwrap();
        assert_eq!((url.as_str(), p.mode), ("postgres://u@h/db", Mode::Disable));
        assert_eq!(split("postgres://u@h/db").unwrap().1.mode, Mode::Prefer);
        let err = split("postgres://u@h/db?sslmode=bogus").unwrap_err();
        assert!(err.contains("sslmode=bogus"), "{err}");
        let err = split("postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent")
            .unwrap()
            .1
            .connector()
            .err()
            .unwrap();
        assert!(err.starts_with("sslrootcert /nonexistent"), "{err}");
    }

    /// A throwaway cluster with `ssl = on` that takes TCP only over TLS
    /// (`hostssl` alone in `pg_hba.conf`), its certificates generated with
    /// the openssl CLI; stopped when dropped.
    struct SslCluster {
        dir: tempfile::TempDir,
        bin: PathBuf,
        owner: Option<&'static str>,
        port: u16,
    }

    fn run(cmd: &mut std::process::Command) {
        let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    impl SslCluster {
        fn as_owner(&self, program: &str) -> std::process::Command {
            let path = self.bin.join(program);
            let mut cmd = match self.owner {
                Some(user) => {
                    let mut c = std::process::Command::new("runuser");
                    c.args(["-u", user, "--"]).arg(path);
                    c
                }
                None => std::process::Command::new(path),
            };
            cmd.current_dir("/");
            cmd
        }

        fn start() -> Option<SslCluster> {
            let bin = std::fs::read_dir("/usr/lib/postgresql")
                .ok()?
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .find(|b| b.join("initdb").exists())?;
            let owner = unsafe { libc_getuid() == 0 }.then_some("postgres");
            let dir = tempfile::tempdir().unwrap();
            let d = dir.path();
            let ssl = |args: &[&str]| {
                run(std::process::Command::new("openssl")
                    .current_dir(d)
                    .args(args))
            };
            for ca in ["ca", "wrong-ca"] {
                ssl(&[
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "1",
                    "-subj",
                    &format!("/CN={ca}"),
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                ]);
            }
            ssl(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
            ]);
            std::fs::write(d.join("san.ext"), "subjectAltName=DNS:localhost\n").unwrap();
            ssl(&[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                "san.ext",
                "-out",
                "server.crt",
            ]);
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let cluster = SslCluster {
                dir,
                bin,
                owner,
                port,
            };
            let d = cluster.dir.path();
            if let Some(user) = owner {
                run(std::process::Command::new("chown")
                    .args(["-R", user])
                    .arg(d));
            }
            run(std::process::Command::new("chmod")
                .arg("0600")
                .arg(d.join("server.key")));
            run(cluster
                .as_owner("initdb")
                .args(["-U", "collab", "--auth=trust", "-D"])
                .arg(d.join("data")));
            std::fs::write(
                d.join("data/pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
            )
            .unwrap();
            let mut conf = std::fs::OpenOptions::new()
                .append(true)
                .open(d.join("data/postgresql.conf"))
                .unwrap();
            std::io::Write::write_all(
                &mut conf,
                format!(
                    "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{dir}'\n\
                     ssl = on\nssl_cert_file = '{dir}/server.crt'\nssl_key_file = '{dir}/server.key'\n\
                     fsync = off\n",
                    dir = d.display()
                )
                .as_bytes(),
            )
            .unwrap();
            run(cluster
                .as_owner("pg_ctl")
                .arg("-D")
                .arg(d.join("data"))
                .arg("-l")
                .arg(d.join("log"))
                .args(["-w", "start"]));
            Some(cluster)
        }

        fn url(&self, host: &str, query: &str) -> String {
            format!("postgres://collab@{host}:{}/postgres?{query}", self.port)
        }

        fn file(&self, name: &str) -> String {
            self.dir.path().join(name).display().to_string()
        }
    }

    impl Drop for SslCluster {
        fn drop(&mut self) {
            let _ = self
                .as_owner("pg_ctl")
                .arg("-D")
                .arg(self.dir.path().join("data"))
                .args(["-m", "immediate", "-w", "stop"])
                .output();
        }
    }

    extern "C" {
        #[link_name = "getuid"]
        fn libc_getuid() -> u32;
    }

    fn connect(url: &str) -> Result<(), String> {
        let conn = crate::sql::Connection::open_postgres(url).map_err(|e| e.to_string())?;
        let one: i64 = conn
            .query_row("SELECT 1", [], |r| r.get(0))
            .map_err(|e| e.to_string())?;
        assert_eq!(one, 1);
        Ok(())
    }

    #[test]
    fn verify_full_connects_with_the_right_ca_and_refuses_a_wrong_one_or_name() {
        let Some(pg) = SslCluster::start() else {
            eprintln!("no PostgreSQL binaries under /usr/lib/postgresql: skipped");
            return;
        };
        let (ca, wrong) = (pg.file("ca.crt"), pg.file("wrong-ca.crt"));
        // The right CA and the certificate's name (`hostaddr` says where).
        connect(&pg.url(
            "localhost",
            &format!("hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={ca}"),
        ))
        .unwrap();
        // verify-ca does not look at the name; require without a CA does
        // not verify at all; prefer takes TLS when offered.
        connect(&pg.url("127.0.0.1", &format!("sslmode=verify-ca&sslrootcert={ca}"))).unwrap();
        connect(&pg.url("127.0.0.1", "sslmode=require")).unwrap();
        connect(&pg.url("127.0.0.1", "")).unwrap();
        // A wrong CA: refused, one line naming it.
        let err = connect(&pg.url(
            "localhost",
            &format!("hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={wrong}"),
        ))
        .unwrap_err();
        assert!(err.contains("wrong CA") && !err.contains('\n'), "{err}");
        let err = connect(&pg.url(
            "127.0.0.1",
            &format!("sslmode=verify-ca&sslrootcert={wrong}"),
        ))
        .unwrap_err();
        assert!(err.contains("wrong CA"), "{err}");
        // The right CA, but the certificate names `localhost`, not the
        // address connected to.
        let err = connect(&pg.url(
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ))
        .unwrap_err();
        assert!(
            err.contains("host name mismatch") && !err.contains('\n'),
            "{err}"
        );
        // Plain TCP against a server that takes only TLS: refused.
        let err = connect(&pg.url("127.0.0.1", "sslmode=disable")).unwrap_err();
        assert!(
            err.contains("no encryption") || err.contains("pg_hba.conf"),
            "{err}"
        );
    }
}
