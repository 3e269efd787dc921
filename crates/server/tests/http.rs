//! End to end on real sockets: spawn the server on 127.0.0.1:0, POST generated events, read
//! them back over HTTP. The client is a minimal HTTP/1.1 client on a TcpStream.

use serde_json::Value;
use sluice_gen::GenConfig;
use sluice_server::{spawn, ServerConfig};

mod common;
use common::*;
use sluice_test_support::metrics::series;

fn gen_lines(seed: u64, count: usize, epoch_start: i64) -> (Vec<u8>, Vec<Value>) {
    let mut buf = Vec::new();
    sluice_gen::write_json_lines(
        &GenConfig {
            epoch_start,
            ..GenConfig::web(seed, count)
        },
        &mut buf,
    )
    .unwrap();
    let vals = lines(std::str::from_utf8(&buf).unwrap());
    (buf, vals)
}

#[test]
fn ingest_ndjson_and_array_then_read_back_exactly_once() {
    let dir = temp_dir("roundtrip");
    let server = spawn(config(&dir, 0)).unwrap();
    let addr = server.http_addr.unwrap();
    let start = now() - 5;

    let (nd, mut expected) = gen_lines(1, 2000, start);
    let r = request(addr, "POST", "/v1/events", &nd);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["accepted"], 2000);
    assert_eq!(r.json()["dropped"], serde_json::json!([]));

    let (_, arr_events) = gen_lines(2, 700, start);
    let array = serde_json::to_vec(&arr_events).unwrap();
    let r = request(addr, "POST", "/v1/events", &array);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["accepted"], 700);
    expected.extend(arr_events);

    wait_flushed(addr, 2700);
    let r = request(
        addr,
        "GET",
        &format!("/v1/events?from={}&to={}", start - 1, now() + 10),
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.head.to_ascii_lowercase().contains("application/x-ndjson"),
        "{}",
        r.head
    );
    let got = lines(&r.text());
    assert_eq!(got.len(), 2700);
    assert_eq!(sorted_canon(&got), sorted_canon(&expected));
    // Epoch order.
    let epochs: Vec<i64> = got.iter().map(|e| e["epoch"].as_i64().unwrap()).collect();
    assert!(epochs.windows(2).all(|w| w[0] <= w[1]));

    // dc filter, RFC 3339-free relative `from`, select + where.
    let dc = expected[0]["dc"].as_str().unwrap().to_string();
    let r = request(addr, "GET", &format!("/v1/events?from=-1h&dc={dc}"), b"");
    let want = expected.iter().filter(|e| e["dc"] == dc.as_str()).count();
    assert_eq!(lines(&r.text()).len(), want);

    let q = format!(
        "/v1/events?from={}&select=status&select=epoch&where=status%20%3E%3D%20500",
        start - 1
    );
    let r = request(addr, "GET", &q, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let got = lines(&r.text());
    let want: Vec<Value> = expected
        .iter()
        .filter(|e| e["status"].as_i64().unwrap() >= 500)
        .map(|e| serde_json::json!({"status": e["status"], "epoch": e["epoch"]}))
        .collect();
    assert!(!want.is_empty());
    assert_eq!(sorted_canon(&got), sorted_canon(&want));

    // Bad read requests.
    assert_eq!(request(addr, "GET", "/v1/events", b"").status, 400);
    assert_eq!(
        request(addr, "GET", "/v1/events?from=yesterday-ish", b"").status,
        400
    );
    assert_eq!(
        request(
            addr,
            "GET",
            "/v1/events?from=-1h&where=status%20%3E%3E",
            b""
        )
        .status,
        400
    );
    assert_eq!(
        request(addr, "GET", "/v1/events?from=100&to=50", b"").status,
        400
    );

    // Metrics.
    let m = request(addr, "GET", "/metrics", b"").text();
    assert!(
        m.contains("sluice_events_in_total{transport=\"http\",type=\"WEB\"} 2700"),
        "{m}"
    );
    assert_eq!(
        series(&m, "sluice_events_dropped_total{reason=\"malformed\"}"),
        0.0,
        "{m}"
    );
    assert!(metric(addr, "sluice_blobs_written_total") > 0.0);
    assert!(metric(addr, "sluice_blob_bytes_written_total") > 0.0);
    assert_eq!(metric(addr, "sluice_store_errors_total"), 0.0);

    server.shutdown().unwrap();
}

#[test]
fn malformed_and_oversized_bodies_are_refused() {
    let dir = temp_dir("malformed");
    let server = spawn(ServerConfig {
        max_body_bytes: 100_000,
        ..config(&dir, 1)
    })
    .unwrap();
    let addr = server.http_addr.unwrap();

    let r = request(addr, "GET", "/healthz", b"");
    assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));

    let r = request(addr, "POST", "/v1/events", b"[{\"type\":\"WEB\",");
    assert_eq!(r.status, 400, "{}", r.text());
    let j = r.json();
    assert_eq!(j["accepted"], 0);
    assert!(
        !j["dropped"][0]["reason"].as_str().unwrap().is_empty(),
        "{j}"
    );
    assert!(j["dropped"][0]["detail"].is_string(), "{j}");

    // Partly good: 200 with the drop listed.
    let body = format!("{{\"type\":\"WEB\",\"epoch\":{}}}\n{{\"ms\":1}}\n", now());
    let r = request(addr, "POST", "/v1/events", body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert_eq!(j["accepted"], 1);
    assert_eq!(j["dropped"][0]["index"], 1);
    assert_eq!(j["dropped"][0]["reason"], "missing_type");

    // Every event bad: 400.
    let r = request(addr, "POST", "/v1/events", b"{\"ms\":1}\n{\"ms\":2}\n");
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["dropped"].as_array().unwrap().len(), 2);

    let r = request(addr, "POST", "/v1/events", &vec![b' '; 200_000]);
    assert_eq!(r.status, 413, "{}", r.text());

    let m = request(addr, "GET", "/metrics", b"").text();
    assert_eq!(
        series(
            &m,
            "sluice_events_dropped_total{transport=\"http\",reason=\"missing_type\"}"
        ),
        3.0,
        "{m}"
    );
    assert!(metric(addr, "sluice_payloads_rejected_total") >= 1.0);

    assert_eq!(
        request(
            addr,
            "GET",
            "/buckets/events/keys/1700000000:local:WEB::0",
            b""
        )
        .status,
        404
    );
    assert_eq!(
        request(
            addr,
            "GET",
            "/buckets/nope/keys/1700000000:local:WEB::0",
            b""
        )
        .status,
        400
    );
    // A key the store cannot hold (a NUL byte, an overlong key) is the client's error, not a 500.
    for key in [
        "1700000000:local:WEB%00::0".to_owned(),
        format!("1700000000:{}", "x".repeat(2000)),
    ] {
        let r = request(addr, "GET", &format!("/buckets/events/keys/{key}"), b"");
        assert_eq!(r.status, 400, "{key}: {}", r.text());
    }
    assert_eq!(request(addr, "GET", "/nowhere", b"").status, 404);

    server.shutdown().unwrap();
}

#[test]
fn shutdown_flushes_open_epochs_and_restart_reads_them() {
    let dir = temp_dir("shutdown");
    // A long grace: nothing is written before the shutdown.
    let server = spawn(config(&dir, 300)).unwrap();
    let addr = server.http_addr.unwrap();
    let start = now() - 2;
    let (nd, expected) = gen_lines(3, 1500, start);
    let r = request(addr, "POST", "/v1/events", &nd);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(metric(addr, "sluice_events_flushed_total"), 0.0);
    server.shutdown().unwrap();

    let server = spawn(config(&dir, 1)).unwrap();
    let addr = server.http_addr.unwrap();
    let r = request(
        addr,
        "GET",
        &format!("/v1/events?from={}&to={}", start, now() + 10),
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let got = lines(&r.text());
    assert_eq!(got.len(), 1500);
    assert_eq!(sorted_canon(&got), sorted_canon(&expected));

    // The raw blob of the first event's chunk, Riak-style.
    let e = &expected[0];
    let key = format!(
        "{}:{}:{}:{}:0",
        e["epoch"],
        e["dc"].as_str().unwrap(),
        "WEB",
        e["subtype"].as_str().unwrap()
    );
    let r = request(addr, "GET", &format!("/buckets/events/keys/{key}"), b"");
    assert_eq!(r.status, 200, "{key}: {}", r.text());
    assert!(r.body.len() > 100);
    assert!(r.head.contains("application/octet-stream"));
    // The original's listing of that second lists the chunk; an empty second is 404.
    let dc = e["dc"].as_str().unwrap();
    let r = request(
        addr,
        "GET",
        &format!("/buckets/epochs/keys/{}-{dc}", e["epoch"]),
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let listing = r.text();
    let entry = format!("WEB:{}:0", e["subtype"].as_str().unwrap());
    assert!(listing.split('|').any(|x| x == entry), "{listing}");
    assert!(r.head.contains("text/plain"));
    let r = request(addr, "GET", &format!("/buckets/epochs/keys/1000-{dc}"), b"");
    assert_eq!(r.status, 404, "{}", r.text());
    let r = request(addr, "GET", "/buckets/epochs/keys/notanepoch", b"");
    assert_eq!(r.status, 400, "{}", r.text());

    // Sereal output: concatenated documents (magic =\xF3rl at the start).
    let r = request(
        addr,
        "GET",
        &format!("/v1/events?from={start}&format=sereal"),
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..4], b"=\xF3rl");

    server.shutdown().unwrap();
}

#[test]
fn config_from_toml_has_defaults() {
    let c = ServerConfig::from_toml("").unwrap();
    assert_eq!(c, ServerConfig::default());
    assert_eq!(c.http.unwrap().port(), sluice_server::DEFAULT_HTTP_PORT);
    let c = ServerConfig::from_toml("http = \"off\"\ngrace_secs = 3\nprofile = \"original\"\n")
        .unwrap();
    assert_eq!(
        (c.http, c.grace()),
        (None, std::time::Duration::from_secs(3))
    );
    c.validate().unwrap();
    assert!(ServerConfig::from_toml("bogus = 1").is_err());
    // Typed settings are refused at load, with the type's own message.
    let bad = ServerConfig::from_toml("profile = \"zip\"")
        .unwrap_err()
        .to_string();
    assert!(bad.contains("zip"), "{bad}");
    let bad = ServerConfig::from_toml("fsync = \"sometimes\"")
        .unwrap_err()
        .to_string();
    assert!(bad.contains("always, batch, batch:<ms> or never"), "{bad}");
    let c = ServerConfig::from_toml("fsync = \"batch:20\"\nprofile = \"default:9\"").unwrap();
    assert_eq!(c.fsync.to_string(), "batch:20");
    assert_eq!(
        c.profile,
        "default:9".parse::<sluice_blob::Profile>().unwrap()
    );
    // `store`: the one StoreUrl parser; a bad URL is refused by validate, with its reason.
    let c = ServerConfig::from_toml(
        "store = \"cassandra://127.0.0.1:9042,127.0.0.2/sluice?rf=3&write_cl=quorum&read_cl=one\"",
    )
    .unwrap();
    assert!(matches!(
        c.store_url().unwrap(),
        sluice_store_cassandra::StoreUrl::Cassandra(ref k) if k.replication_factor == 3
    ));
    c.validate().unwrap();
    let c = ServerConfig::from_toml("store = \"cassandra://h/ks?rf=zero\"").unwrap();
    let bad = c.validate().unwrap_err().to_string();
    assert!(bad.contains("rf"), "{bad}");
    assert!(matches!(
        ServerConfig::default().store_url().unwrap(),
        sluice_store_cassandra::StoreUrl::Embedded(_)
    ));
}

/// `GET /v1/events` with `count_by` / `top` / `by` / `group_by`: rows computed by the server
/// (the same `sluice_reader::reduce` as `sluice cat`), equal to the counting done here.
#[test]
fn events_reduced_by_the_server() {
    let dir = temp_dir("http-reduce");
    let server = spawn(config(&dir, 0)).unwrap();
    let addr = server.http_addr.unwrap();
    let e = now() - 3;
    let statuses = [200, 500, 200, 404, 200, 500, 200];
    let body: String = statuses
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{}\n",
                serde_json::json!({"epoch": e, "type": "WEB", "status": s, "ms": i})
            )
        })
        .collect();
    assert_eq!(
        request(addr, "POST", "/v1/events", body.as_bytes()).status,
        200
    );
    wait_flushed(addr, statuses.len() as u64);
    let range = format!("from={e}&to={}", e + 1);

    let r = request(
        addr,
        "GET",
        &format!("/v1/events?{range}&count_by=status&top=2"),
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let rows = lines(&r.text());
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"status": 200, "count": 4}),
            serde_json::json!({"status": 500, "count": 2})
        ]
    );
    let r = request(addr, "GET", &format!("/v1/events?{range}&top=2&by=ms"), b"");
    let ms: Vec<i64> = lines(&r.text())
        .iter()
        .map(|v| v["ms"].as_i64().unwrap())
        .collect();
    assert_eq!(ms, vec![6, 5]);
    let r = request(
        addr,
        "GET",
        &format!("/v1/events?{range}&group_by=type&agg=count,max:ms"),
        b"",
    );
    assert_eq!(
        lines(&r.text()),
        vec![serde_json::json!({"type": "WEB", "count": 7, "max:ms": 6})]
    );
    for bad in ["top=2", "by=ms", "count_by=status&select=ms", "top=x&by=ms"] {
        let r = request(addr, "GET", &format!("/v1/events?{range}&{bad}"), b"");
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
    server.shutdown().unwrap();
}
