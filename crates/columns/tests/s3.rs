//! S3 column locations against a real SeaweedFS S3 gateway (`scripts/seaweedfs.sh`), with signed
//! requests: round trips, atomic visibility of puts, listings over 1000 keys (paging), missing
//! objects, a dead or silent endpoint (an error within the timeout, never a hang) and wrong keys.
//!
//! The server is started (`sluice_test_support::s3`) by the first test that needs it (the
//! script is idempotent; a file lock keeps test binaries from starting it twice) and left running
//! for the next test binary; `make test` stops it at the end. It fails to start → the tests fail,
//! unless `SLUICE_SKIP_S3=1`.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use sluice_columns::location::s3::S3Location;
use sluice_columns::location::{open_location, Listed, Location, LocationError};
use sluice_test_support::s3::{encode, fresh_prefix, seaweedfs as server};

fn listed(path: &str, size: u64) -> Listed {
    Listed {
        path: path.into(),
        size,
    }
}

#[test]
fn put_get_list_delete_round_trip() {
    let Some(server) = server("put_get_list_delete_round_trip") else {
        return;
    };
    let prefix = fresh_prefix("round-trip");
    let location = open_location(&server.url(&prefix, "")).unwrap();
    assert!(
        !location.describe().contains(&server.secret_access_key),
        "describe() shows the secret: {}",
        location.describe()
    );
    assert!(location
        .describe()
        .starts_with(&format!("s3://{}/{prefix}", server.bucket)));

    let a = "date=2026-11-28/hour=18/dc=ams1/type=WEB/hour-c1.parquet";
    let b = "date=2026-11-28/hour=19/dc=ams1/type=WEB/part-0001.parquet";
    let c = "date=2026-11-28/hour=19/dc=ams1/type=API/part-0002.parquet";
    location.put(a, b"one").unwrap();
    location.put(b, b"two!").unwrap();
    location.put(c, &[7u8; 100_000]).unwrap();

    // A sibling prefix that starts with the same characters sees none of it, nor the reverse.
    let sibling = open_location(&server.url(&format!("{prefix}-sibling"), "")).unwrap();
    sibling.put("x.parquet", b"x").unwrap();
    assert_eq!(sibling.list("").unwrap(), vec![listed("x.parquet", 1)]);

    assert_eq!(
        location.list("").unwrap(),
        vec![listed(a, 3), listed(c, 100_000), listed(b, 4)],
        "sorted by path, sizes as put"
    );
    // Prefixes are string prefixes, as for a local directory: a whole directory or part of a name.
    assert_eq!(
        location.list("date=2026-11-28/hour=19").unwrap(),
        vec![listed(c, 100_000), listed(b, 4)]
    );
    assert_eq!(
        location
            .list("date=2026-11-28/hour=19/dc=ams1/type=W")
            .unwrap(),
        vec![listed(b, 4)]
    );
    assert_eq!(
        location.list("date=2026-11-28/hour=1").unwrap().len(),
        3,
        "a partial name matches both hours"
    );
    assert!(location.list("date=2026-11-29/").unwrap().is_empty());

    assert_eq!(&location.get(a).unwrap().unwrap()[..], b"one");
    assert_eq!(&location.get(c).unwrap().unwrap()[..], &[7u8; 100_000][..]);

    // A put replaces the whole object.
    location.put(a, b"replaced").unwrap();
    assert_eq!(&location.get(a).unwrap().unwrap()[..], b"replaced");
    assert_eq!(location.list(a).unwrap(), vec![listed(a, 8)]);

    for path in [a, b, c] {
        location.delete(path).unwrap();
        assert!(location.get(path).unwrap().is_none(), "{path} still there");
        location.delete(path).unwrap(); // already gone: no error
    }
    assert!(location.list("").unwrap().is_empty());
    assert_eq!(
        sibling.list("").unwrap().len(),
        1,
        "the sibling's file stays"
    );
    sibling.delete("x.parquet").unwrap();
}

#[test]
fn missing_objects_are_none_and_deleting_them_is_fine() {
    let Some(server) = server("missing_objects_are_none_and_deleting_them_is_fine") else {
        return;
    };
    let location = S3Location::open(&server.url(&fresh_prefix("missing"), "")).unwrap();
    assert!(location.get("nope.parquet").unwrap().is_none());
    assert!(location.get("no/such/dir/nope.parquet").unwrap().is_none());
    location.delete("nope.parquet").unwrap();
    assert!(location.list("").unwrap().is_empty());
    assert!(location.list("no/such/dir/").unwrap().is_empty());
}

/// The bytes a writer puts: `size` bytes of `fill`, so a reader can tell a whole object.
fn content(size: usize, fill: u8) -> Vec<u8> {
    vec![fill; size]
}

#[test]
fn a_put_is_never_visible_partially() {
    let Some(server) = server("a_put_is_never_visible_partially") else {
        return;
    };
    let location: Arc<S3Location> =
        Arc::new(S3Location::open(&server.url(&fresh_prefix("atomic"), "")).unwrap());
    // Sizes above the gateway's 4 MB chunk size, so an object is stored as several chunks.
    const SMALL: usize = 1_500_000;
    const LARGE: usize = 9_000_000;
    const WRITERS: usize = 3;
    const ROUNDS: usize = 4;
    let done = Arc::new(AtomicBool::new(false));

    // Each writer puts its own new objects and, in turn, overwrites one shared key with both sizes.
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let location = Arc::clone(&location);
            thread::spawn(move || {
                for round in 0..ROUNDS {
                    let (size, fill) = if (w + round) % 2 == 0 {
                        (LARGE, b'L')
                    } else {
                        (SMALL, b's')
                    };
                    location
                        .put(&format!("new/w{w}-r{round}.bin"), &content(size, fill))
                        .unwrap();
                    location.put("shared.bin", &content(size, fill)).unwrap();
                }
            })
        })
        .collect();

    let observer = {
        let location = Arc::clone(&location);
        let done = Arc::clone(&done);
        thread::spawn(move || {
            let mut listings = 0;
            let mut seen = 0;
            loop {
                let finished = done.load(Ordering::SeqCst);
                for file in location.list("").unwrap() {
                    seen += 1;
                    assert!(
                        file.size == SMALL as u64 || file.size == LARGE as u64,
                        "{} listed with {} bytes: a partial object",
                        file.path,
                        file.size
                    );
                }
                if let Some(bytes) = location.get("shared.bin").unwrap() {
                    let whole = (bytes.len() == SMALL && bytes.iter().all(|b| *b == b's'))
                        || (bytes.len() == LARGE && bytes.iter().all(|b| *b == b'L'));
                    assert!(
                        whole,
                        "shared.bin read with {} bytes: not one whole put",
                        bytes.len()
                    );
                }
                listings += 1;
                if finished {
                    return (listings, seen);
                }
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let (listings, seen) = observer.join().unwrap();
    assert!(
        listings >= 2,
        "the observer listed during and after the puts"
    );
    assert!(seen > 0, "the observer saw objects");

    let all = location.list("").unwrap();
    assert_eq!(all.len(), WRITERS * ROUNDS + 1, "{all:?}");
    for file in &all {
        location.delete(&file.path).unwrap();
    }
}

#[test]
fn listing_more_than_a_page() {
    let Some(server) = server("listing_more_than_a_page") else {
        return;
    };
    let location: Arc<S3Location> =
        Arc::new(S3Location::open(&server.url(&fresh_prefix("paging"), "")).unwrap());
    const KEYS: usize = 1_234; // S3 lists at most 1000 keys a page
    const THREADS: usize = 8;
    let name = |i: usize| format!("hour={:02}/part-{i:05}.parquet", i % 3);
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let location = Arc::clone(&location);
            thread::spawn(move || {
                for i in (t..KEYS).step_by(THREADS) {
                    location.put(&name(i), format!("{i}").as_bytes()).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }

    let all = location.list("").unwrap();
    let mut expected: Vec<Listed> = (0..KEYS)
        .map(|i| listed(&name(i), format!("{i}").len() as u64))
        .collect();
    expected.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(all.len(), KEYS);
    assert_eq!(all, expected);
    let hour1 = location.list("hour=01/").unwrap();
    assert_eq!(hour1.len(), (0..KEYS).filter(|i| i % 3 == 1).count());
    assert!(hour1.iter().all(|l| l.path.starts_with("hour=01/")));

    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let location = Arc::clone(&location);
            thread::spawn(move || {
                for i in (t..KEYS).step_by(THREADS) {
                    location.delete(&name(i)).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert!(location.list("").unwrap().is_empty());
}

/// Runs every operation on `location` in a thread; each must fail with an object-store error
/// naming the URL without secrets. The generous bound only guards against a hang (the calls
/// themselves give up after the location's timeout); nothing here measures time.
/// Every call fails within its timeout, naming the location without its secret: refused keys
/// as [`LocationError::Denied`] (a configuration to fix) when `denied`, anything else as
/// [`LocationError::ObjectStore`] (an outage to wait out).
fn assert_every_call_fails(location: S3Location, secret: &str, denied: bool) -> Vec<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let results: Vec<Result<(), LocationError>> = vec![
            location.put("a/b.parquet", b"x"),
            location.get("a/b.parquet").map(|_| ()),
            location.list("a/").map(|_| ()),
            location.delete("a/b.parquet"),
        ];
        let _ = tx.send((results, location.describe()));
    });
    let (results, shown) = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the calls hung past their timeout");
    assert!(
        !shown.contains(secret),
        "describe() shows the secret: {shown}"
    );
    results
        .into_iter()
        .map(|r| match (r, denied) {
            (Err(LocationError::ObjectStore { url, detail }), false)
            | (Err(LocationError::Denied { url, detail }), true) => {
                assert_eq!(url, shown, "the error names the location");
                assert!(
                    !url.contains(secret) && !detail.contains(secret),
                    "{detail}"
                );
                eprintln!("{detail}");
                detail
            }
            (other, _) => panic!(
                "expected {} error, got {other:?}",
                if denied { "a Denied" } else { "an ObjectStore" }
            ),
        })
        .collect()
}

#[test]
fn nothing_listening_gives_an_error_not_a_hang() {
    // A port nothing listens on: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let secret = "NOT-A-REAL-SECRET-1";
    let location = S3Location::open(&format!(
        "s3://bucket/p?endpoint=http://127.0.0.1:{port}&allow_http=true&timeout=2s\
         &access_key_id=k&secret_access_key={secret}"
    ))
    .unwrap();
    for detail in assert_every_call_fails(location, secret, false) {
        assert!(
            detail.contains("refused")
                || detail.contains("timed out")
                || detail.contains("connect"),
            "{detail}"
        );
    }
}

#[test]
fn a_silent_endpoint_times_out() {
    // Accepts connections (the kernel's backlog) but never answers: only the timeout ends a call.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let secret = "NOT-A-REAL-SECRET-2";
    let location = S3Location::open(&format!(
        "s3://bucket/p?endpoint=http://127.0.0.1:{port}&allow_http=true\
         &access_key_id=k&secret_access_key={secret}"
    ))
    .unwrap()
    .with_timeout(Duration::from_millis(1500));
    for detail in assert_every_call_fails(location, secret, false) {
        assert!(
            detail.contains("timed out") || detail.contains("timeout"),
            "{detail}"
        );
    }
    drop(silent);
}

#[test]
fn wrong_credentials_are_a_clear_error() {
    let Some(server) = server("wrong_credentials_are_a_clear_error") else {
        return;
    };
    let prefix = fresh_prefix("credentials");
    let wrong_secret = "WRONG-secret-0123456789";
    let wrong = format!(
        "s3://{}/{prefix}?endpoint={}&allow_http=true&timeout=10s&access_key_id={}&secret_access_key={wrong_secret}",
        server.bucket,
        encode(&server.endpoint),
        encode(&server.access_key_id),
    );
    for detail in assert_every_call_fails(S3Location::open(&wrong).unwrap(), wrong_secret, true) {
        assert!(detail.contains("SignatureDoesNotMatch"), "{detail}");
    }
    let unknown = format!(
        "s3://{}/{prefix}?endpoint={}&allow_http=true&timeout=10s&access_key_id=nobody&secret_access_key={wrong_secret}",
        server.bucket,
        encode(&server.endpoint),
    );
    for detail in assert_every_call_fails(S3Location::open(&unknown).unwrap(), wrong_secret, true) {
        assert!(detail.contains("InvalidAccessKeyId"), "{detail}");
    }
}

#[test]
fn used_and_dropped_inside_async_code() {
    // `sluice serve` opens its tier from async code and drops the view at shutdown there: a
    // nested `block_on` or a runtime dropped in async code would panic.
    let Some(server) = server("used_and_dropped_inside_async_code") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let url = server.url(&fresh_prefix("async"), "");
    runtime.block_on(async move {
        let location = S3Location::open(&url).unwrap();
        location.put("a.parquet", b"x").unwrap();
        assert_eq!(location.list("").unwrap(), vec![listed("a.parquet", 1)]);
        location.delete("a.parquet").unwrap();
        assert!(location.list("").unwrap().is_empty());
        drop(location);
    });
}
