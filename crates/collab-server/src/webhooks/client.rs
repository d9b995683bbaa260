//! The delivery side shared by the workers and the `collab-hook` verbs
//! ([`Webhooks`], held in `App`): the HTTP client (no redirects, no proxy,
//! names resolved through the SSRF guard, `ssrf`), a URL's check before it
//! is stored, one signed POST per attempt (`sign`), and the retry backoff.
//! Two clients: one whose resolver applies the operator's allowlist (for
//! administrators' subscriptions, approved ones and declared ones) and one
//! that reaches public addresses only (everyone else's). An attempt keeps
//! only the HTTP status; every failure without a response reads the same
//! (`NO_RESPONSE`), its cause going to the server log.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rand::RngExt as _;
use tokio::sync::Notify;

use super::{sign, ssrf};
use crate::config::WebhooksConfig;

/// What every attempt that got no HTTP response says, whatever the cause
/// (connection refused, reset, timed out, name not found, TLS): telling
/// them apart would make webhooks a port scanner. The cause goes to the
/// server log.
pub const NO_RESPONSE: &str =
    "no response (could not connect, timed out, or the name did not resolve)";

/// Where a vetted URL points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Only public addresses.
    Public,
    /// A non-public address the operator's `webhooks.allowed_hosts` lets
    /// through: for administrators' subscriptions and approved ones.
    Internal,
}

/// The delivery side shared by the workers and the `collab-hook` verbs.
pub struct Webhooks {
    /// Resolves through the guard with the operator's allowlist.
    client: reqwest::Client,
    guard: Arc<ssrf::Guard>,
    /// Resolves through the bare guard: public addresses only. Used for
    /// every subscription not allowed to reach internal targets, so a name
    /// that later resolves inside is refused at delivery too.
    public_client: reqwest::Client,
    public_guard: Arc<ssrf::Guard>,
    pub(super) config: WebhooksConfig,
    /// Seals the signing secrets stored in the database (`secrets`).
    pub secrets: Arc<super::secrets::SecretBox>,
    /// Wakes the supervisor (a subscription was added, removed, enabled).
    pub(super) changed: Notify,
}

/// What one HTTP attempt came to.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    pub status: Option<u16>,
    /// `delivered` (2xx), `failed`, or `refused` by the SSRF guard.
    pub outcome: &'static str,
    pub latency_ms: i64,
    pub response: String,
}

impl AttemptResult {
    pub fn delivered(&self) -> bool {
        self.outcome == "delivered"
    }
}

impl Webhooks {
    /// `secrets_key`: the key file that seals stored secrets (created if
    /// missing).
    pub fn new(config: &WebhooksConfig, secrets_key: &std::path::Path) -> anyhow::Result<Webhooks> {
        let secrets = Arc::new(super::secrets::SecretBox::load_or_create(secrets_key)?);
        // rustls on ring, the provider the rest of the server uses.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let guard = Arc::new(ssrf::Guard::new(&config.allowed_hosts).map_err(anyhow::Error::msg)?);
        let public_guard = Arc::new(ssrf::Guard::default());
        let build = |guard: &Arc<ssrf::Guard>| {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .timeout(Duration::from_secs(config.attempt_timeout_secs))
                .connect_timeout(Duration::from_secs(config.attempt_timeout_secs))
                .dns_resolver(Arc::new(ssrf::GuardedResolver(guard.clone())))
                .user_agent(concat!("git-collab-webhooks/", env!("CARGO_PKG_VERSION")))
                .pool_max_idle_per_host(4)
                .build()
                .context("building the webhook HTTP client")
        };
        Ok(Webhooks {
            client: build(&guard)?,
            guard,
            public_client: build(&public_guard)?,
            public_guard,
            config: config.clone(),
            secrets,
            changed: Notify::new(),
        })
    }

    /// Tell the supervisor that subscriptions changed.
    pub fn poke(&self) {
        self.changed.notify_one();
    }

    /// Check a URL before it is stored: http(s), a host, no credentials,
    /// and an address the guard accepts now (it is checked again at every
    /// delivery); whether it reaches only public addresses.
    pub async fn vet_url(&self, url: &str) -> Result<(reqwest::Url, Target), String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("invalid URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err("the URL must be http:// or https://".into());
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err("the URL must not carry credentials; use a secret".into());
        }
        let host = parsed
            .host_str()
            .ok_or("the URL has no host")?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = parsed.port_or_known_default().unwrap_or(80);
        let addrs = self
            .guard
            .resolve(&host, port)
            .await
            .map_err(|e| format!("refused: {e}"))?;
        // One non-public address (let through by the allowlist) makes the
        // target internal: delivery could go there.
        let target = if addrs.iter().any(|a| ssrf::forbidden(a.ip()).is_some()) {
            Target::Internal
        } else {
            Target::Public
        };
        Ok((parsed, target))
    }

    /// POST `body` to `url`, signed, once; to an address the allowlist lets
    /// through only when `internal` (see `Target`).
    pub async fn post(
        &self,
        url: &str,
        message_id: &str,
        body: &[u8],
        secret: Option<&str>,
        key: &collab_record::sign::SigningKey,
        internal: bool,
    ) -> AttemptResult {
        // Stored sealed (`secrets`); opened only for signing.
        let opened = match secret.map(|s| self.secrets.open(s)).transpose() {
            Ok(opened) => opened,
            Err(e) => {
                tracing::error!(url, "webhook attempt: {e}");
                return AttemptResult {
                    status: None,
                    outcome: "failed",
                    latency_ms: 0,
                    response: "the server cannot open this subscription's secret".into(),
                };
            }
        };
        let secret = opened.as_deref();
        let (client, guard) = if internal {
            (&self.client, &self.guard)
        } else {
            (&self.public_client, &self.public_guard)
        };
        let started = Instant::now();
        let finish = |status, outcome, response: String| AttemptResult {
            status,
            outcome,
            latency_ms: started.elapsed().as_millis() as i64,
            response,
        };
        let parsed = match reqwest::Url::parse(url) {
            Ok(u) => u,
            Err(e) => return finish(None, "failed", format!("invalid URL: {e}")),
        };
        // IP literals never reach the resolver: vet them here.
        if let Some(host) = parsed.host_str() {
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
                if let Err(e) = guard.check(bare, ip) {
                    tracing::info!(url, "webhook attempt refused: {e}");
                    return finish(None, "refused", NO_RESPONSE.to_string());
                }
            }
        }
        let timestamp = chrono::Utc::now().timestamp();
        let mut request = client
            .post(parsed)
            .header("content-type", "application/json")
            .body(body.to_vec());
        for (name, value) in sign::headers(message_id, timestamp, body, key, secret) {
            request = request.header(name, value);
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                let refused = std::error::Error::source(&e)
                    .into_iter()
                    .chain(std::iter::successors(std::error::Error::source(&e), |e| {
                        e.source()
                    }))
                    .any(|s| s.downcast_ref::<ssrf::Refused>().is_some());
                tracing::info!(url, "webhook attempt: {}", error_chain(&e));
                let outcome = if refused { "refused" } else { "failed" };
                return finish(None, outcome, NO_RESPONSE.to_string());
            }
        };
        // Only the status is kept and shown: a response body (or a redirect
        // target) would make webhooks a way to read internal services.
        let status = response.status();
        drop(response);
        let text = if status.is_redirection() {
            "redirect not followed".to_string()
        } else {
            String::new()
        };
        let outcome = if status.is_success() {
            "delivered"
        } else {
            "failed"
        };
        finish(Some(status.as_u16()), outcome, text)
    }

    /// The wait before attempt `n + 1` after `n` failures: base * 2^(n-1),
    /// capped, with ±25 % jitter so failing receivers are not hit in step.
    pub fn backoff(&self, failures: i64) -> Duration {
        let base = self.config.retry_base_secs as f64;
        let exp = base * 2f64.powi((failures.max(1) - 1).min(30) as i32);
        let capped = exp.min(self.config.retry_max_secs as f64);
        let jitter = rand::rng().random_range(0.75..1.25);
        Duration::from_secs_f64((capped * jitter).max(0.1))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
