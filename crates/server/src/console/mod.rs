//! The console: a web page for looking at events (Explore, Live, Rollups, Alerts, Health),
//! served at `/` and `/console/{file}` from assets embedded in the binary (`crates/server/console/`:
//! plain HTML, CSS and ES modules, vendored uPlot). User guide: `docs/console.md`.
//!
//! Contracts:
//! - The assets are the same bytes for everyone and hold no data, so they are served without a
//!   token (as `/healthz`), also under `auth`: a browser cannot put a bearer token on a page
//!   load. Every piece of data the page shows comes from the API (`/v1/…`, `/metrics`) under
//!   the API's own rules; the page sends the token the user pastes (kept in `sessionStorage`)
//!   as `Authorization: Bearer`. The console only reads (GET): it has no admin actions.
//! - Every answer carries a strict `Content-Security-Policy` (scripts and connections from this
//!   origin only, no framing), `X-Content-Type-Options: nosniff` and `Referrer-Policy:
//!   no-referrer`. Unknown files get **404**.
//! - The whole bundle stays within 300 KB (issue 27; checked by a test).

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// What every console answer says about where its scripts, styles and requests may come from.
/// No inline script or style attribute (uPlot and the page set styles through the CSSOM, which
/// the policy does not govern).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// One embedded file: its name under `/console/`, its media type, its bytes.
struct Asset {
    name: &'static str,
    media: &'static str,
    bytes: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $media:expr) => {
        Asset {
            name: $name,
            media: $media,
            bytes: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/console/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file of the console.
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("console.css", CSS),
    asset!("errors.js", JS),
    asset!("app.js", JS),
    asset!("ui.js", JS),
    asset!("api.js", JS),
    asset!("charts.js", JS),
    asset!("explore.js", JS),
    asset!("live.js", JS),
    asset!("rollups.js", JS),
    asset!("alerts.js", JS),
    asset!("health.js", JS),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("vendor/uPlot.iife.min.js", JS),
    asset!("vendor/uPlot.min.css", CSS),
];

/// The console's routes: `/` (the page), `/console/` (the same) and `/console/{file}`.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/console/", get(index))
        .route("/console/{*file}", get(file))
}

async fn index() -> Response {
    serve("index.html")
}

async fn file(Path(name): Path<String>) -> Response {
    serve(&name)
}

/// The asset `name` with its headers, or 404.
fn serve(name: &str) -> Response {
    let Some(a) = ASSETS.iter().find(|a| a.name == name) else {
        return crate::http::error(StatusCode::NOT_FOUND, format!("no console file {name:?}"));
    };
    let mut resp = (StatusCode::OK, a.bytes).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(a.media));
    // Revalidated each load: a new binary serves new assets at the same names.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The budget of the whole asset bundle (issue 27).
    const MAX_BUNDLE_BYTES: usize = 300 * 1024;

    #[test]
    fn the_bundle_fits_its_budget() {
        let total: usize = ASSETS.iter().map(|a| a.bytes.len()).sum();
        assert!(total <= MAX_BUNDLE_BYTES, "{total} bytes");
    }

    #[test]
    fn every_file_the_page_names_is_embedded() {
        // Each `./name.js` import and each `/console/name` reference in the assets.
        for a in ASSETS.iter().filter(|a| !a.name.starts_with("vendor/")) {
            let text = std::str::from_utf8(a.bytes).expect("utf-8");
            for part in text.split(['"', '\'']) {
                let name = part
                    .strip_prefix("/console/")
                    .or_else(|| part.strip_prefix("./"));
                if let Some(n) = name
                    .filter(|n| n.ends_with(".js") || n.ends_with(".css") || n.ends_with(".svg"))
                {
                    assert!(
                        ASSETS.iter().any(|x| x.name == n),
                        "{} names {n}, which is not embedded",
                        a.name
                    );
                }
            }
        }
    }
}
