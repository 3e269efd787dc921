//! `sluice serve --statsd` with real statsd clients: the PyPI `statsd` package (UDP and TCP) and
//! the npm `hot-shots` package (UDP with multi-line datagrams, and its TCP protocol) send
//! counters with sample rates, gauges with deltas, timers, histograms, distributions, sets and
//! tags; every metric is read back through `GET /v1/events?type=statsd` and must equal what was
//! sent (value ÷ rate for counters, rate, delta, tags), exactly once. Then malformed lines over
//! UDP and TCP, counted by reason in `/metrics`, and a statsd line sent to the events UDP port,
//! dropped as `statsd_line`.
//!
//! Needs a Python with `statsd` (`$SLUICE_PYTHON`, else `python/.venv`, else
//! `scripts/python-setup.sh`) and Node.js with hot-shots (`$SLUICE_NODE_MODULES`, else
//! `scripts/node-deps.sh`, which installs it outside the repository). Missing either fails.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{free_port, now, spawn_serve, wait_for};
use serde_json::{json, Value};
use sluice_test_support::{http, metrics, temp_dir};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The last line a setup script prints (a path), or a panic with its stderr.
fn setup_output(script: &str) -> String {
    let out = Command::new(repo_root().join(script))
        .output()
        .unwrap_or_else(|e| panic!("{script}: {e}"));
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().last().unwrap_or("").trim().to_string()
}

fn python() -> PathBuf {
    let py = match std::env::var_os("SLUICE_PYTHON").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => {
            let venv = repo_root().join("python/.venv/bin/python");
            let has_statsd = venv.exists()
                && Command::new(&venv)
                    .args(["-c", "import statsd"])
                    .status()
                    .is_ok_and(|s| s.success());
            if has_statsd {
                venv
            } else {
                PathBuf::from(setup_output("scripts/python-setup.sh"))
            }
        }
    };
    let ok = Command::new(&py)
        .args(["-c", "import statsd"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot `import statsd`: run scripts/python-setup.sh (it installs it)",
        py.display()
    );
    py
}

fn node_modules() -> String {
    let dir = match std::env::var("SLUICE_NODE_MODULES") {
        Ok(d) if !d.is_empty() => d,
        _ => setup_output("scripts/node-deps.sh"),
    };
    assert!(
        Path::new(&dir).join("hot-shots/package.json").exists(),
        "no hot-shots in {dir}: run scripts/node-deps.sh"
    );
    dir
}

const PY_CLIENT: &str = r#"
import sys, types
import statsd
import statsd.client.base as base
# Sampled calls are sent only when random() <= rate: make every one go (the rate is still sent).
base.random = types.SimpleNamespace(random=lambda: 0.0)
host, port, proto, p = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
c = statsd.StatsClient(host, port) if proto == "udp" else statsd.TCPStatsClient(host, port)
c.incr(p + "hits", 3)
c.incr(p + "sampled", 1, rate=0.25)
c.decr(p + "down", 2)
c.gauge(p + "temp", 21.5)
c.gauge(p + "temp_up", 2, delta=True)
c.gauge(p + "temp_down", -3, delta=True)
c.timing(p + "load", 320)
c.timing(p + "load_sampled", 12.5, rate=0.5)
c.set(p + "users", "alice")
# This client has no histogram, distribution or tags: sent through its own _send_stat (its
# socket, its framing, its sampling).
c._send_stat(p + "size", "512|h", 1)
c._send_stat(p + "lat", "3.25|d", 1)
c._send_stat(p + "tagged", "1|c|#env:prod,canary", 0.5)
with c.pipeline() as pipe:  # several lines in one datagram / write
    pipe.incr(p + "piped_a")
    pipe.incr(p + "piped_b", 5)
if proto == "tcp":
    c.close()
"#;

const NODE_CLIENT: &str = r#"
const StatsD = require('hot-shots');
Math.random = () => 0; // every sampled call is sent (with its rate)
const [host, port, proto, p] = process.argv.slice(2);
const opts = { host, port: Number(port), protocol: proto, includeDatadogTelemetry: false,
  errorHandler: (e) => { console.error('hot-shots:', e); process.exitCode = 1; } };
if (proto === 'udp') { opts.maxBufferSize = 1000; opts.bufferFlushInterval = 20; } // multi-line datagrams
const c = new StatsD(opts);
c.increment(p + 'hits', 3);
c.increment(p + 'sampled', 1, 0.25);
c.decrement(p + 'down', 2);
c.gauge(p + 'temp', 21.5);
c.gaugeDelta(p + 'temp_up', 2);
c.gaugeDelta(p + 'temp_down', -3);
c.timing(p + 'load', 320);
c.timing(p + 'load_sampled', 12.5, 0.5);
c.set(p + 'users', 'alice');
c.histogram(p + 'size', 512);
c.distribution(p + 'lat', 3.25);
c.increment(p + 'tagged', 1, 0.5, ['env:prod', 'canary']);
c.histogram(p + 'tagged_h', 7, { team: 'core', region: 'eu-west:1' });
c.distribution(p + 'tagged_d', 0.125, 1, ['team:core']);
setTimeout(() => c.close((err) => { if (err) { console.error(err); process.exitCode = 1; } }), 200);
"#;

/// What every client sends in common, as the events it must become (without epoch, dc, type).
fn common_expected(p: &str) -> Vec<Value> {
    let e = |name: &str, subtype: &str, value: Value| json!({"subtype": subtype, "name": format!("{p}{name}"), "value": value});
    let with = |mut v: Value, k: &str, x: Value| {
        v[k] = x;
        v
    };
    vec![
        e("hits", "counter", json!(3)),
        with(e("sampled", "counter", json!(4)), "rate", json!(0.25)),
        e("down", "counter", json!(-2)),
        e("temp", "gauge", json!(21.5)),
        with(e("temp_up", "gauge", json!(2)), "delta", json!(true)),
        with(e("temp_down", "gauge", json!(-3)), "delta", json!(true)),
        e("load", "timer", json!(320)),
        with(e("load_sampled", "timer", json!(12.5)), "rate", json!(0.5)),
        e("users", "set", json!("alice")),
        e("size", "histogram", json!(512)),
        e("lat", "distribution", json!(3.25)),
        with(
            with(e("tagged", "counter", json!(2)), "rate", json!(0.5)),
            "tags",
            json!({"env": "prod", "canary": ""}),
        ),
    ]
}

fn py_expected(p: &str) -> Vec<Value> {
    let mut v = common_expected(p);
    v.push(json!({"subtype": "counter", "name": format!("{p}piped_a"), "value": 1}));
    v.push(json!({"subtype": "counter", "name": format!("{p}piped_b"), "value": 5}));
    v
}

fn node_expected(p: &str) -> Vec<Value> {
    let mut v = common_expected(p);
    v.push(
        json!({"subtype": "histogram", "name": format!("{p}tagged_h"), "value": 7,
                  "tags": {"team": "core", "region": "eu-west:1"}}),
    );
    v.push(
        json!({"subtype": "distribution", "name": format!("{p}tagged_d"), "value": 0.125,
                  "tags": {"team": "core"}}),
    );
    v
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The statsd events stored now, by name (each name's events in a list).
fn stored(http: SocketAddr) -> BTreeMap<String, Vec<Value>> {
    let resp = http::get(http, "/v1/events?type=statsd&from=-10m");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let mut by_name: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for line in resp.text().lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let name = v["name"].as_str().unwrap_or_default().to_string();
        by_name.entry(name).or_default().push(v);
    }
    by_name
}

#[test]
fn real_statsd_clients_round_trip_and_drops_are_counted() {
    let dir = temp_dir("statsd");
    let (hp, up, sp) = (free_port(), free_port(), free_port());
    let (http_s, udp_s, statsd_s) = (
        format!("127.0.0.1:{hp}"),
        format!("127.0.0.1:{up}"),
        format!("127.0.0.1:{sp}"),
    );
    let data = dir.path().join("data");
    let _server = spawn_serve(&[
        "--data",
        data.to_str().unwrap(),
        "--http",
        &http_s,
        "--tcp",
        "off",
        "--udp",
        &udp_s,
        "--statsd",
        &statsd_s,
        "--dc",
        "ams1",
    ]);
    let http: SocketAddr = http_s.parse().unwrap();
    wait_for(Duration::from_secs(30), "the server", || {
        http::PLAIN
            .try_request(http, "GET", "/healthz", b"")
            .is_ok()
    });
    let python = python();
    let modules = node_modules();
    let start = now();

    // The clients, each over UDP and TCP.
    let py_script = dir.path().join("client.py");
    std::fs::write(&py_script, PY_CLIENT).unwrap();
    let node_script = dir.path().join("client.js");
    std::fs::write(&node_script, NODE_CLIENT).unwrap();
    let port = sp.to_string();
    let mut expected: Vec<Value> = Vec::new();
    for proto in ["udp", "tcp"] {
        let p = format!("py.{proto}.");
        run(
            Command::new(&python)
                .arg(&py_script)
                .args(["127.0.0.1", &port, proto, &p]),
            &format!("python statsd over {proto}"),
        );
        expected.extend(py_expected(&p));
        let p = format!("node.{proto}.");
        run(
            Command::new("node")
                .arg(&node_script)
                .args(["127.0.0.1", &port, proto, &p])
                .env("NODE_PATH", &modules),
            &format!("hot-shots over {proto}"),
        );
        expected.extend(node_expected(&p));
    }

    // Read back: every metric exactly once, exactly as sent.
    let want = expected.len();
    let mut got = BTreeMap::new();
    wait_for(Duration::from_secs(30), "every statsd event stored", || {
        got = stored(http);
        got.values().map(Vec::len).sum::<usize>() >= want
    });
    std::thread::sleep(Duration::from_millis(1500)); // duplicates would show by now
    got = stored(http);
    let end = now();
    let mut missing = Vec::new();
    for want in &expected {
        let name = want["name"].as_str().unwrap();
        match got.get(name).map(Vec::as_slice) {
            Some([one]) => {
                let mut one = one.clone();
                let epoch = one["epoch"].as_i64().expect("epoch");
                assert!((start..=end).contains(&epoch), "{one}: epoch");
                assert_eq!(one["type"], "statsd");
                assert_eq!(one["dc"], "ams1", "the server's dc");
                let m = one.as_object_mut().unwrap();
                for k in ["epoch", "type", "dc"] {
                    m.remove(k);
                }
                assert_eq!(&one, want, "{name}: as sent");
            }
            Some(more) => panic!("{name}: {} events, want one: {more:?}", more.len()),
            None => missing.push(name.to_string()),
        }
    }
    assert!(
        missing.is_empty(),
        "not stored: {missing:?}; stored: {got:?}"
    );
    assert_eq!(got.len(), want, "no other statsd events: {got:?}");

    let m = metrics::fetch(http);
    assert_eq!(
        metrics::metric(&m, "sluice_statsd_events_total", &[]),
        want as f64
    );
    assert_eq!(
        metrics::metric(&m, "sluice_statsd_dropped_total", &[]),
        0.0,
        "{m}"
    );

    // Malformed lines, by reason: one UDP datagram with good and bad lines, and a TCP stream.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let bad = "bad.ok:1|c\nnovalue\nbad.v:abc|c\nbad.t:1|zz\nbad.r:1|c|@2\nbad.tag:1|c|#,\nbad.f:1|c|T123\n:1|c\nbad.ok2:2|g";
    udp.send_to(bad.as_bytes(), &statsd_s).unwrap();
    let mut tcp = TcpStream::connect(&statsd_s).unwrap();
    let long = format!("bad.long:1|c|#{}\n", "x".repeat(5000));
    tcp.write_all(format!("bad.tcp:1|ms\n{long}bad.v2:NaN|g\nbad.last:4|h").as_bytes())
        .unwrap();
    drop(tcp);
    // A statsd datagram on the events UDP port: its own reason.
    udp.send_to(b"api.hits:1|c|#env:prod", &udp_s).unwrap();
    let reasons = [
        ("no_value", 1.0),
        ("bad_value", 2.0),
        ("bad_type", 1.0),
        ("bad_rate", 1.0),
        ("bad_tag", 1.0),
        ("bad_field", 1.0),
        ("bad_name", 1.0),
        ("too_long", 1.0),
    ];
    let mut m = String::new();
    wait_for(Duration::from_secs(20), "the drops counted", || {
        m = metrics::fetch(http);
        // The TCP connection's last line is taken at its close, after the others: wait for it.
        metrics::try_metric(&m, "sluice_statsd_dropped_total", &[]) == Some(9.0)
            && metrics::try_metric(&m, "sluice_statsd_events_total", &[]) >= Some(want as f64 + 4.0)
            && metrics::try_metric(
                &m,
                "sluice_events_dropped_total",
                &[("reason", "statsd_line"), ("transport", "udp")],
            ) == Some(1.0)
    });
    for (reason, n) in reasons {
        assert_eq!(
            metrics::metric(&m, "sluice_statsd_dropped_total", &[("reason", reason)]),
            n,
            "{reason}"
        );
    }
    assert_eq!(
        metrics::metric(
            &m,
            "sluice_events_dropped_total",
            &[("reason", "payload_error"), ("transport", "udp")]
        ),
        0.0
    );
    let lines_udp = metrics::metric(&m, "sluice_statsd_lines_total", &[("transport", "udp")]);
    let lines_tcp = metrics::metric(&m, "sluice_statsd_lines_total", &[("transport", "tcp")]);
    let events = metrics::metric(&m, "sluice_statsd_events_total", &[]);
    assert_eq!(lines_udp + lines_tcp, events + 9.0, "{m}");
    assert_eq!(events, want as f64 + 4.0);
    assert!(metrics::try_metric(&m, "sluice_statsd_kernel_drops_total", &[]).is_some());
    wait_for(
        Duration::from_secs(20),
        "the good lines of the bad batch",
        || {
            let got = stored(http);
            ["bad.ok", "bad.ok2", "bad.tcp", "bad.last"]
                .iter()
                .all(|n| got.get(*n).is_some_and(|v| v.len() == 1))
        },
    );
}

/// `statsd = "…"` in the TOML file, and sources outside `udp_allow` refused on UDP and TCP
/// (counted, nothing stored), as on the UDP events port.
#[test]
fn toml_setting_and_sources_outside_udp_allow_are_refused() {
    let dir = temp_dir("statsd-allow");
    let (hp, sp) = (free_port(), free_port());
    let statsd_s = format!("127.0.0.1:{sp}");
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\nhttp = \"127.0.0.1:{hp}\"\ntcp = \"off\"\nudp = \"off\"\nstatsd = \"{statsd_s}\"\nudp_allow = [\"10.0.0.0/8\"]\n",
            dir.path().join("data").to_str().unwrap()
        ),
    )
    .unwrap();
    let _server = spawn_serve(&["--config", config.to_str().unwrap()]);
    let http: SocketAddr = format!("127.0.0.1:{hp}").parse().unwrap();
    wait_for(Duration::from_secs(30), "the server", || {
        http::PLAIN
            .try_request(http, "GET", "/healthz", b"")
            .is_ok()
    });
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut m = String::new();
    wait_for(Duration::from_secs(20), "the refusals counted", || {
        // Sent until counted: the listener may start a moment after /healthz answers.
        udp.send_to(b"refused.udp:1|c", &statsd_s).unwrap();
        if let Ok(mut tcp) = TcpStream::connect(&statsd_s) {
            let _ = tcp.write_all(b"refused.tcp:1|c\n");
        }
        std::thread::sleep(Duration::from_millis(200));
        m = metrics::fetch(http);
        metrics::try_metric(
            &m,
            "sluice_statsd_refused_total",
            &[("transport", "udp"), ("reason", "source")],
        )
        .is_some_and(|n| n >= 1.0)
            && metrics::try_metric(
                &m,
                "sluice_statsd_refused_total",
                &[("transport", "tcp"), ("reason", "source")],
            )
            .is_some_and(|n| n >= 1.0)
    });
    assert_eq!(metrics::metric(&m, "sluice_statsd_lines_total", &[]), 0.0);
    assert_eq!(metrics::metric(&m, "sluice_statsd_events_total", &[]), 0.0);
    std::thread::sleep(Duration::from_millis(1000));
    assert!(stored(http).is_empty());
}
