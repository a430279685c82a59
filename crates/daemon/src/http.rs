//! The daemon's HTTP endpoints: `/metrics` (Prometheus text, or OpenMetrics
//! when the scraper asks for it), `/healthz` (the daemon's loop turns) and
//! `/readyz` (the file is applied). One thread; a scrape reads the maps
//! while it runs, so two scrapes never overlap.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Result};

/// What the endpoints report, shared with the daemon's loop.
#[derive(Default)]
pub struct Health {
    /// The file is applied (and the last reload did not fail to apply).
    pub ready: AtomicBool,
    /// Seconds since the epoch when the loop last turned.
    pub beat: AtomicU64,
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Serves on `addr` until the process ends.
pub fn serve(addr: SocketAddr, health: Arc<Health>) -> Result<()> {
    let server = tiny_http::Server::http(addr).map_err(|e| anyhow!("serving metrics on {addr}: {e} (set [daemon] listen in the box file)"))?;
    let registry = crate::metrics::registry();
    std::thread::Builder::new().name("xnf-http".into()).spawn(move || {
        for req in server.incoming_requests() {
            let (code, body, kind) = respond(&req, &registry, &health);
            let header = tiny_http::Header::from_bytes("Content-Type", kind).expect("a valid header");
            let _ = req.respond(tiny_http::Response::from_string(body).with_status_code(code).with_header(header));
        }
    })?;
    Ok(())
}

fn respond(req: &tiny_http::Request, registry: &prometheus_client::registry::Registry, health: &Health) -> (u16, String, &'static str) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if req.method() != &tiny_http::Method::Get {
        return (405, "GET only\n".into(), TEXT);
    }
    match req.url().split('?').next().unwrap_or("") {
        "/metrics" => {
            let om = req.headers().iter().any(|h| h.field.equiv("Accept") && h.value.as_str().contains("application/openmetrics-text"));
            match crate::metrics::render(registry, om) {
                Ok(body) if om => (200, body, "application/openmetrics-text; version=1.0.0; charset=utf-8"),
                Ok(body) => (200, body, "text/plain; version=0.0.4; charset=utf-8"),
                Err(e) => (500, format!("{e:#}\n"), TEXT),
            }
        }
        // The loop turns every quarter second; 10 s without a turn is a hang.
        "/healthz" if now().saturating_sub(health.beat.load(Ordering::Relaxed)) <= 10 => (200, "ok\n".into(), TEXT),
        "/healthz" => (503, "the daemon's loop is stuck\n".into(), TEXT),
        "/readyz" if health.ready.load(Ordering::Relaxed) => (200, "ready\n".into(), TEXT),
        "/readyz" => (503, "the box file is not applied\n".into(), TEXT),
        _ => (404, "/metrics, /healthz, /readyz\n".into(), TEXT),
    }
}
