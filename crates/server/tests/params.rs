//! The query parameters of the read endpoints over real sockets: each bad parameter gets a 400
//! whose message names it, on every endpoint that takes it (`crate::http::params` is the one
//! parser behind them).

use sluice_server::spawn;

mod common;
use common::*;

const FROM_REQUIRED: &str =
    "`from` is required (Unix seconds, RFC 3339, `now` or relative like -5m)";

#[test]
fn bad_parameters_are_refused_with_their_name_on_every_read_endpoint() {
    let dir = temp_dir("params");
    let server = spawn(config(&dir, 0)).unwrap();
    let addr = server.http_addr.unwrap();

    let refused = |path: &str| -> String {
        let r = request(addr, "GET", path, b"");
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert!(
            r.head.to_ascii_lowercase().contains("application/json"),
            "{path}: {}",
            r.head
        );
        r.json()["error"].as_str().unwrap_or_default().to_owned()
    };
    for endpoint in ["/v1/events", "/v1/counts"] {
        assert_eq!(refused(endpoint), FROM_REQUIRED);
        assert_eq!(refused(&format!("{endpoint}?to=now")), FROM_REQUIRED);
        let e = refused(&format!("{endpoint}?from=yesterday"));
        assert!(e.starts_with("from: "), "{endpoint}: {e}");
        let e = refused(&format!("{endpoint}?from=-5m&to=soon"));
        assert!(e.starts_with("to: "), "{endpoint}: {e}");
        assert_eq!(
            refused(&format!("{endpoint}?from=-5m&limit=5")),
            "unknown parameter \"limit\""
        );
    }
    let e = refused("/v1/events?from=-5m&format=xml");
    assert!(e.starts_with("format: "), "{e}");
    // `format` and the filters belong to /v1/events, not to /v1/counts.
    assert_eq!(
        refused("/v1/counts?from=-5m&format=json"),
        "unknown parameter \"format\""
    );
    assert_eq!(
        refused("/v1/counts?from=-5m&type=WEB"),
        "unknown parameter \"type\""
    );
    let e = refused("/v1/tail?from=yesterday");
    assert!(e.starts_with("from: "), "{e}");
    let e = refused("/v1/tail?cursor=nonsense");
    assert!(e.starts_with("cursor: "), "{e}");
    assert_eq!(refused("/v1/tail?limit=5"), "unknown parameter \"limit\"");

    // Good parameters are taken: an empty range reads nothing, with 200.
    for path in [
        "/v1/events?from=-5m&to=-5m&format=sereal&dc=local&type=WEB",
        "/v1/counts?from=-5m&to=-5m&dc=local",
    ] {
        let r = request(addr, "GET", path, b"");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(r.text(), "", "{path}");
    }

    server.shutdown().unwrap();
}
