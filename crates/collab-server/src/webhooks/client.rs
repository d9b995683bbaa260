//! The delivery side shared by the workers and the `collab-hook` verbs
//! ([`Webhooks`], held in `App`): the HTTP client (no redirects, no proxy,
//! names resolved through the SSRF guard, `ssrf`), a URL's check before it
//! is stored, one signed POST per attempt (`sign`), and the retry backoff.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rand::RngExt as _;
use tokio::sync::Notify;

use super::{sign, ssrf};
use crate::config::WebhooksConfig;

/// How much of a response body the log keeps.
const RESPONSE_KEEP: usize = 1024;

/// The delivery side shared by the workers and the `collab-hook` verbs.
pub struct Webhooks {
    client: reqwest::Client,
    guard: Arc<ssrf::Guard>,
    pub(super) config: WebhooksConfig,
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
    pub fn new(config: &WebhooksConfig) -> anyhow::Result<Webhooks> {
        // rustls on ring, the provider the rest of the server uses.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let guard = Arc::new(ssrf::Guard::new(&config.allowed_hosts).map_err(anyhow::Error::msg)?);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(Duration::from_secs(config.attempt_timeout_secs))
            .connect_timeout(Duration::from_secs(config.attempt_timeout_secs))
            .dns_resolver(Arc::new(ssrf::GuardedResolver(guard.clone())))
            .user_agent(concat!("git-collab-webhooks/", env!("CARGO_PKG_VERSION")))
            .pool_max_idle_per_host(4)
            .build()
            .context("building the webhook HTTP client")?;
        Ok(Webhooks {
            client,
            guard,
            config: config.clone(),
            changed: Notify::new(),
        })
    }

    /// Tell the supervisor that subscriptions changed.
    pub fn poke(&self) {
        self.changed.notify_one();
    }

    /// Check a URL before it is stored: http(s), a host, no credentials,
    /// and an address the guard accepts now (it is checked again at every
    /// delivery).
    pub async fn vet_url(&self, url: &str) -> Result<reqwest::Url, String> {
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
        self.guard
            .resolve(&host, port)
            .await
            .map_err(|e| format!("refused: {e}"))?;
        Ok(parsed)
    }

    /// POST `body` to `url`, signed, once.
    pub async fn post(
        &self,
        url: &str,
        message_id: &str,
        body: &[u8],
        secret: Option<&str>,
        key: &collab_record::sign::SigningKey,
    ) -> AttemptResult {
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
                if let Err(e) = self.guard.check(bare, ip) {
                    return finish(None, "refused", format!("refused: {e}"));
                }
            }
        }
        let timestamp = chrono::Utc::now().timestamp();
        let mut request = self
            .client
            .post(parsed)
            .header("content-type", "application/json")
            .body(body.to_vec());
        for (name, value) in sign::headers(message_id, timestamp, body, key, secret) {
            request = request.header(name, value);
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                let refused = std::error::Error::source(&e)
                    .into_iter()
                    .chain(std::iter::successors(std::error::Error::source(&e), |e| {
                        e.source()
                    }))
                    .any(|s| s.downcast_ref::<ssrf::Refused>().is_some());
                let text = error_chain(&e);
                return if refused {
                    finish(None, "refused", format!("refused: {text}"))
                } else {
                    finish(None, "failed", text)
                };
            }
        };
        let status = response.status();
        let mut kept = Vec::new();
        while kept.len() < RESPONSE_KEEP {
            match response.chunk().await {
                Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
                _ => break,
            }
        }
        kept.truncate(RESPONSE_KEEP);
        let mut text = String::from_utf8_lossy(&kept).into_owned();
        if status.is_redirection() {
            let location = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            text = format!("redirect to {location:?} not followed; {text}");
        }
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
