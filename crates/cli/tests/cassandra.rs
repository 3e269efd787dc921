//! End to end on a real single-node Cassandra (`scripts/cassandra.sh`; skipped only with
//! `SLUICE_SKIP_CASSANDRA=1`): `sluice serve --store cassandra://…` ingests over HTTP, TCP and
//! UDP and `sluice cat` / `tail --store` read every event back exactly once; the original's
//! read API answers a Perl consumer (HTTP::Tiny + Sereal::Decoder); `sluice store copy` moves
//! the range (events, substream results and registry) to an embedded store and back, verified;
//! two servers with distinct collector ids
//! writing the same second give one complete listing.

mod cassandra_common;
mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cassandra_common::{assert_exactly_once, emit, events, ids, Keyspace};
use common::{free_port, now, spawn_serve, wait_healthy, Proc};
use sluice_store_cassandra::testing::cluster;

/// `sluice serve --store url` with fresh ports; (process, http base, tcp addr, udp addr).
fn serve(url: &str, dir: &Path, collector: &str) -> (Proc, String, String, String) {
    let (h, t, u) = (free_port(), free_port(), free_port());
    let (http, tcp, udp) = (
        format!("127.0.0.1:{h}"),
        format!("127.0.0.1:{t}"),
        format!("127.0.0.1:{u}"),
    );
    let p = spawn_serve(&[
        "--store",
        url,
        "--data",
        dir.to_str().expect("path"),
        "--collector-id",
        collector,
        "--http",
        &http,
        "--tcp",
        &tcp,
        "--udp",
        &udp,
        "--grace",
        "1",
    ]);
    let base = format!("http://{http}");
    wait_healthy(
        &ureq::agent(),
        &base,
        Instant::now() + Duration::from_secs(30),
        Duration::from_millis(100),
    );
    (p, base, tcp, udp)
}

/// The Perl consumer's `total` line for `dc` over `[from, to)` through `base`.
fn perl_total(base: &str, dc: &str, from: i64, to: i64) -> u64 {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/perl/riak_consumer.pl");
    let out = Command::new("perl")
        .arg(script)
        .args([base, dc, &from.to_string(), &to.to_string()])
        .output()
        .expect("perl");
    assert!(
        out.status.success(),
        "perl consumer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("total "))
        .and_then(|n| n.parse().ok())
        .expect("a total line")
}

/// The results of substream `ids` in `[from, to)` (`<epoch>:<dc>:<entry>`), each blob present
/// and passing its checksum, and whether the registry lists `ids`.
fn id_results(store: &dyn sluice_store::Store, from: i64, to: i64) -> (BTreeSet<String>, bool) {
    use sluice_store::{BlobKey, Namespace};
    let ns = Namespace::Substream("ids".into());
    let mut out = BTreeSet::new();
    for (epoch, dc) in store.list_epochs(None, from, to).expect("epochs") {
        for e in store.get_namespace_index(&ns, epoch, &dc).expect("index") {
            let key = format!("{epoch}:{dc}:{e}");
            let blob = store
                .get_blob(&ns, BlobKey::new(epoch, &key))
                .expect("result")
                .expect("a listed result is stored");
            sluice_blob::Blob::parse(&blob).expect("result checksum");
            out.insert(key);
        }
    }
    let registered = store
        .get_catalog(sluice_substreams::registry::CATALOG_KIND)
        .expect("catalog")
        .contains_key("ids");
    (out, registered)
}

/// A reader's store on `url` (`cassandra://…` or `embedded:DIR`).
fn open_reader(url: &str) -> std::sync::Arc<dyn sluice_store::Store> {
    url.parse::<sluice_store_cassandra::StoreUrl>()
        .expect("url")
        .open(
            sluice_store_cassandra::OpenMode::ReadOnly,
            sluice_store::Retention::default(),
        )
        .expect("open")
}

fn sluice_ok(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("sluice");
    assert!(
        out.status.success(),
        "sluice {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn serve_on_cassandra_reads_back_every_transport_the_original_way_and_copies() {
    let Some(c) = cluster(1, "serve on cassandra") else {
        return;
    };
    let ks = Keyspace::new(&c.hosts, "e2e");
    let url = ks.url("rf=1&write_cl=quorum&read_cl=one");
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut server, base, tcp, udp) = serve(&url, &tmp.path().join("data"), "c1");
    // A substream, so that `store copy` has results and a registry to carry.
    sluice_ok(&[
        "substream",
        "add",
        "ids",
        "--type",
        "WEB",
        "--select",
        "id",
        "--server",
        &base,
    ]);

    let epoch = now();
    let (h, t, u) = (
        events("http", 300, epoch, "ams"),
        events("tcp", 300, epoch, "ams"),
        events("udp", 150, epoch, "ams"),
    );
    assert!(emit("http", &base, &h));
    assert!(emit("tcp", &tcp, &t));
    assert!(emit("udp", &udp, &u));
    let mut want: BTreeSet<String> = ids(&h);
    want.extend(ids(&t));
    want.extend(ids(&u));
    let (from, to) = (epoch - 5, epoch + 10);
    assert_exactly_once(
        &url,
        from,
        to,
        &want,
        &BTreeSet::new(),
        Duration::from_secs(30),
    );

    // `tail --store` reads the same history.
    let tail = sluice_ok(&[
        "tail",
        "--store",
        &url,
        "--from",
        &from.to_string(),
        "--limit",
        &want.len().to_string(),
    ]);
    let tailed: BTreeSet<String> = tail
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            v["id"].as_str().unwrap_or("").to_owned()
        })
        .collect();
    assert_eq!(tailed, want, "tail --store");

    // The original's read API: listing + blobs, decoded by the Perl reference.
    assert_eq!(perl_total(&base, "ams", from, to), want.len() as u64);
    let listing = ureq::get(&format!("{base}/buckets/epochs/keys/{epoch}-ams"))
        .call()
        .expect("listing")
        .into_string()
        .expect("text");
    assert!(
        listing.split('|').any(|e| e.starts_with("WEB:www:")),
        "{listing}"
    );
    let none = ureq::get(&format!("{base}/buckets/epochs/keys/{}-ams", epoch - 100)).call();
    assert!(matches!(none, Err(ureq::Error::Status(404, _))), "{none:?}");

    // Every WEB chunk gets its result (the runner works after the store write).
    let web_chunks = |store: &dyn sluice_store::Store| -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (e, dc) in store.list_epochs(None, from, to).expect("epochs") {
            for entry in store.get_epoch_index(e, &dc).expect("index") {
                if entry.starts_with("WEB:") {
                    out.insert(format!("{e}:{dc}:{entry}"));
                }
            }
        }
        out
    };
    let src_store = open_reader(&url);
    let want_results = web_chunks(&*src_store);
    assert!(!want_results.is_empty());
    let deadline = Instant::now() + Duration::from_secs(30);
    while id_results(&*src_store, from, to).0 != want_results {
        assert!(Instant::now() < deadline, "substream results not stored");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(src_store);

    // Cassandra → embedded → another keyspace, each copy verified, each readable.
    let copy_dir = tmp.path().join("copy");
    let embedded = format!("embedded:{}", copy_dir.display());
    let (f, tt) = (from.to_string(), to.to_string());
    let out = sluice_ok(&[
        "store",
        "copy",
        "--from",
        &url,
        "--to",
        &embedded,
        "--from-time",
        &f,
        "--to-time",
        &tt,
    ]);
    assert!(out.contains("0 damaged"), "{out}");
    let ks2 = Keyspace::new(&c.hosts, "copy");
    let url2 = ks2.url("rf=1");
    sluice_ok(&["store", "init", "--store", &url2]);
    sluice_ok(&[
        "store",
        "copy",
        "--from",
        &embedded,
        "--to",
        &url2,
        "--from-time",
        &f,
        "--to-time",
        &tt,
    ]);
    let none_extra = BTreeSet::new();
    assert_exactly_once(
        &embedded,
        from,
        to,
        &want,
        &none_extra,
        Duration::from_secs(5),
    );
    assert_exactly_once(&url2, from, to, &want, &none_extra, Duration::from_secs(5));
    // The registry and the substream's results came along both ways, verified.
    for target in [&embedded, &url2] {
        let (results, registered) = id_results(&*open_reader(target), from, to);
        assert!(registered, "{target}: substream registry not copied");
        assert_eq!(results, want_results, "{target}: substream results");
    }
    // A second copy changes nothing (every blob already there, counts applied once).
    let again = sluice_ok(&[
        "store",
        "copy",
        "--from",
        &embedded,
        "--to",
        &url2,
        "--from-time",
        &f,
        "--to-time",
        &tt,
    ]);
    assert!(again.contains(" 0 blobs written"), "{again}");
    assert_exactly_once(&url2, from, to, &want, &none_extra, Duration::from_secs(5));
    server.terminate(Duration::from_secs(20));
}

#[test]
fn two_collectors_writing_one_second_give_one_complete_listing() {
    let Some(c) = cluster(1, "two collectors") else {
        return;
    };
    let ks = Keyspace::new(&c.hosts, "two");
    let url = ks.url("rf=1");
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut a, base_a, _, _) = serve(&url, &tmp.path().join("a"), "c1");
    let (mut b, base_b, _, _) = serve(&url, &tmp.path().join("b"), "c2");
    let epoch = now();
    let (ea, eb) = (
        events("a", 200, epoch, "ams"),
        events("b", 200, epoch, "ams"),
    );
    let ta = std::thread::spawn({
        let (base, ea) = (base_a.clone(), ea.clone());
        move || emit("http", &base, &ea)
    });
    assert!(emit("http", &base_b, &eb));
    assert!(ta.join().expect("thread"));
    let mut want = ids(&ea);
    want.extend(ids(&eb));
    assert_exactly_once(
        &url,
        epoch - 5,
        epoch + 10,
        &want,
        &BTreeSet::new(),
        Duration::from_secs(30),
    );
    // One listing with both collectors' chunks, whichever server answers it.
    for base in [&base_a, &base_b] {
        let listing = ureq::get(&format!("{base}/buckets/epochs/keys/{epoch}-ams"))
            .call()
            .expect("listing")
            .into_string()
            .expect("text");
        let entries: Vec<&str> = listing.split('|').collect();
        assert!(entries.iter().any(|e| e.contains(":c1.")), "{listing}");
        assert!(entries.iter().any(|e| e.contains(":c2.")), "{listing}");
        assert_eq!(perl_total(base, "ams", epoch, epoch + 1), 400);
    }
    a.terminate(Duration::from_secs(20));
    b.terminate(Duration::from_secs(20));
}

/// The original's read API on the embedded store (no cluster needed): the Perl consumer reads
/// every event of `sluice serve --data` the original way.
#[test]
fn perl_consumer_reads_the_embedded_store_the_original_way() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let (mut server, base, tcp, _) = serve(&format!("embedded:{}", dir.display()), &dir, "c1");
    let epoch = now();
    let lines = events("emb", 400, epoch, "ams");
    assert!(emit("tcp", &tcp, &lines));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let total = perl_total(&base, "ams", epoch - 2, epoch + 3);
        if total == 400 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Perl consumer read {total} of 400"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    server.terminate(Duration::from_secs(20));
}
