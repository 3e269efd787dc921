//! Engine comparison for the embedded store, on Sluice's workload: blobs of 1-500 KB
//! (log-uniform sizes, incompressible bytes like compressed blobs) spread over hourly partitions,
//! written by one writer with a group commit (fsync) per ~100 MB, then random gets by key, hourly
//! expiry, reopen and a torn tail.
//!
//! Candidates: `segment` (sluice-store's EmbeddedStore: per-hour append-only logs) and `redb`
//! (one database file per hour partition). Usage:
//! `cargo run --release -p sluice-store-bench -- [TOTAL_MB] [DIR]` (default 1024 MB, a temp dir).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::{ReadableTable, TableDefinition};
use sluice_store::{BlobKey, Durability, EmbeddedOptions, EmbeddedStore, Namespace, Store};

const BASE: i64 = 1_700_002_800; // an hour boundary
const HOURS: i64 = 4;
const BATCH_BYTES: usize = 100 << 20; // one group commit per ~100 MB (one second at the target)
const GETS: usize = 20_000;
const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("blobs");

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One blob of the workload: where it goes and which slice of the random pool it holds.
struct Item {
    epoch: i64,
    key: String,
    off: usize,
    len: usize,
}

fn workload(total: usize) -> (Vec<u8>, Vec<Item>) {
    let mut rng = Rng(0x5EED_1234_5678_9ABC);
    let pool: Vec<u8> = (0..(2 << 20)).map(|_| rng.next() as u8).collect();
    let mut items = Vec::new();
    let mut sum = 0;
    while sum < total {
        // log-uniform 1 KB .. 500 KB: mean ~80 KB
        let len = (1024.0 * 500f64.powf(rng.unit())) as usize;
        let off = (rng.next() as usize) % ((1 << 20) - 1);
        items.push(Item {
            epoch: 0,
            key: String::new(),
            off,
            len,
        });
        sum += len;
    }
    let n = items.len() as i64;
    for (i, it) in items.iter_mut().enumerate() {
        it.epoch = BASE + (i as i64) * HOURS * 3600 / n;
        it.key = format!("{}:ams:WEB::{i}", it.epoch);
    }
    (pool, items)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            n += if p.is_dir() {
                dir_bytes(&p)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            };
        }
    }
    n
}

struct Row {
    engine: String,
    write_mbs: f64,
    sync_put_mbs: f64,
    get_p50_us: f64,
    get_p99_us: f64,
    gets_mbs: f64,
    reopen_ms: f64,
    expire_ms: f64,
    disk_ratio: f64,
    torn: String,
}

/// The operations the bench needs from an engine.
trait Engine {
    fn put(&mut self, it: &Item, v: &[u8]);
    fn commit(&mut self);
    fn get(&mut self, it: &Item) -> Option<Vec<u8>>;
    fn expire_hours(&mut self, hours: i64);
    fn reopen(&mut self);
}

struct Segment {
    dir: PathBuf,
    durability: Durability,
    store: Option<EmbeddedStore>,
}

impl Segment {
    fn new(dir: PathBuf, durability: Durability) -> Self {
        let mut s = Segment {
            dir,
            durability,
            store: None,
        };
        s.reopen();
        s
    }
    fn s(&self) -> &EmbeddedStore {
        self.store.as_ref().expect("open")
    }
}

impl Engine for Segment {
    fn put(&mut self, it: &Item, v: &[u8]) {
        self.s()
            .put_blob(&Namespace::Events, BlobKey::new(it.epoch, &it.key), v)
            .expect("put");
    }
    fn commit(&mut self) {
        self.s().flush().expect("flush");
    }
    fn get(&mut self, it: &Item) -> Option<Vec<u8>> {
        self.s()
            .get_blob(&Namespace::Events, BlobKey::new(it.epoch, &it.key))
            .expect("get")
    }
    fn expire_hours(&mut self, hours: i64) {
        // Retention 10 days: "now" such that the first `hours` partitions are past it.
        let now = BASE + hours * 3600 + 10 * 86_400;
        self.s().expire(now).expect("expire");
    }
    fn reopen(&mut self) {
        self.store = None;
        let opts = EmbeddedOptions {
            durability: self.durability,
            ..EmbeddedOptions::default()
        };
        let s = EmbeddedStore::open_with(&self.dir, opts).expect("open");
        // Open is lazy: touch every partition so the index rebuild is measured.
        for h in 0..HOURS {
            let _ = s.get_blob(&Namespace::Events, BlobKey::new(BASE + h * 3600, "x"));
        }
        self.store = Some(s);
    }
}

/// redb, one database file per hour partition; one write transaction per batch.
struct Redb {
    dir: PathBuf,
    durability: redb::Durability,
    dbs: HashMap<i64, redb::Database>,
    txs: HashMap<i64, redb::WriteTransaction>,
}

impl Redb {
    fn new(dir: PathBuf, durability: redb::Durability) -> Self {
        fs::create_dir_all(&dir).expect("mkdir");
        Redb {
            dir,
            durability,
            dbs: HashMap::new(),
            txs: HashMap::new(),
        }
    }
    fn db(&mut self, part: i64) -> &redb::Database {
        let path = self.dir.join(format!("p{part}.redb"));
        self.dbs
            .entry(part)
            .or_insert_with(|| redb::Database::create(path).expect("redb create"))
    }
}

impl Engine for Redb {
    fn put(&mut self, it: &Item, v: &[u8]) {
        let part = it.epoch - it.epoch.rem_euclid(3600);
        if !self.txs.contains_key(&part) {
            let mut tx = self.db(part).begin_write().expect("begin");
            tx.set_durability(self.durability);
            self.txs.insert(part, tx);
        }
        let tx = self.txs.get(&part).expect("tx");
        let mut t = tx.open_table(TABLE).expect("table");
        // Write-once, as the store contract requires: check first.
        if t.get(it.key.as_str()).expect("get").is_none() {
            t.insert(it.key.as_str(), v).expect("insert");
        }
    }
    fn commit(&mut self) {
        for (_, tx) in self.txs.drain() {
            tx.commit().expect("commit");
        }
    }
    fn get(&mut self, it: &Item) -> Option<Vec<u8>> {
        let part = it.epoch - it.epoch.rem_euclid(3600);
        let tx = self.db(part).begin_read().expect("read tx");
        let t = tx.open_table(TABLE).expect("table");
        let v = t
            .get(it.key.as_str())
            .expect("get")
            .map(|g| g.value().to_vec());
        v
    }
    fn expire_hours(&mut self, hours: i64) {
        for h in 0..hours {
            let part = BASE + h * 3600;
            self.dbs.remove(&part);
            let _ = fs::remove_file(self.dir.join(format!("p{part}.redb")));
        }
    }
    fn reopen(&mut self) {
        self.commit();
        self.dbs.clear();
        for h in 0..HOURS {
            let part = BASE + h * 3600;
            if self.dir.join(format!("p{part}.redb")).exists() {
                self.db(part);
            }
        }
    }
}

fn run(
    name: &str,
    dir: &Path,
    pool: &[u8],
    items: &[Item],
    mk: &dyn Fn(&Path, bool) -> Box<dyn Engine>,
) -> Row {
    let total: usize = items.iter().map(|i| i.len).sum();
    let d = dir.join(name);
    let mut e = mk(&d, false);
    // 1. Writes with a group commit per ~100 MB.
    let t = Instant::now();
    let mut pending = 0;
    for it in items {
        e.put(it, &pool[it.off..it.off + it.len]);
        pending += it.len;
        if pending >= BATCH_BYTES {
            e.commit();
            pending = 0;
        }
    }
    e.commit();
    let write_mbs = total as f64 / 1e6 / t.elapsed().as_secs_f64();
    let disk_ratio = dir_bytes(&d) as f64 / total as f64;
    // 2. Random gets (page cache warm: the data fits in RAM, as the recent hours do).
    let mut rng = Rng(42);
    let mut lat = Vec::with_capacity(GETS);
    let t = Instant::now();
    let mut got_bytes = 0;
    for _ in 0..GETS {
        let it = &items[(rng.next() as usize) % items.len()];
        let t1 = Instant::now();
        let v = e.get(it).expect("written key present");
        lat.push(t1.elapsed());
        assert_eq!(
            &v[..],
            &pool[it.off..it.off + it.len],
            "{name}: wrong bytes"
        );
        got_bytes += v.len();
    }
    let gets_mbs = got_bytes as f64 / 1e6 / t.elapsed().as_secs_f64();
    lat.sort();
    // 3. Reopen (index rebuild / file open).
    let t = Instant::now();
    e.reopen();
    let reopen_ms = t.elapsed().as_secs_f64() * 1e3;
    // 4. Expire the oldest two hours.
    let t = Instant::now();
    e.expire_hours(2);
    let expire_ms = t.elapsed().as_secs_f64() * 1e3;
    drop(e);
    // 5. Fsync per put, on the first 2000 items (≈ 160 MB) of a fresh directory.
    let d2 = dir.join(format!("{name}-sync"));
    let mut e = mk(&d2, true);
    let few = &items[..items.len().min(2000)];
    let t = Instant::now();
    for it in few {
        e.put(it, &pool[it.off..it.off + it.len]);
        e.commit();
    }
    let sync_put_mbs =
        few.iter().map(|i| i.len).sum::<usize>() as f64 / 1e6 / t.elapsed().as_secs_f64();
    drop(e);
    let _ = fs::remove_dir_all(&d2);
    Row {
        engine: name.to_string(),
        write_mbs,
        sync_put_mbs,
        get_p50_us: pct(&lat, 0.5),
        get_p99_us: pct(&lat, 0.99),
        gets_mbs,
        reopen_ms,
        expire_ms,
        disk_ratio,
        torn: String::new(),
    }
}

/// Cuts the newest file of `dir` by 4000 bytes and reports what reopening does.
fn torn_segment(dir: &Path, items: &[Item], pool: &[u8]) -> String {
    let d = dir.join("segment");
    let last = items.last().expect("items");
    let part = last.epoch - last.epoch.rem_euclid(3600);
    let log = d.join(format!("p{part}")).join("blobs.log");
    let len = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("open log");
    f.set_len(len - 4000).expect("truncate");
    let s = EmbeddedStore::open(&d).expect("reopen");
    let got = s
        .get_blob(&Namespace::Events, BlobKey::new(last.epoch, &last.key))
        .expect("get");
    let prev = &items[items.len() - 2];
    let prev_ok = s
        .get_blob(&Namespace::Events, BlobKey::new(prev.epoch, &prev.key))
        .expect("get")
        .as_deref()
        == Some(&pool[prev.off..prev.off + prev.len]);
    format!(
        "opened; last record dropped ({}), previous intact ({prev_ok}), {:?}",
        got.is_none(),
        s.recovery_stats()
    )
}

fn torn_redb(dir: &Path, items: &[Item]) -> String {
    let last = items.last().expect("items");
    let part = last.epoch - last.epoch.rem_euclid(3600);
    let path = dir.join("redb").join(format!("p{part}.redb"));
    let len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open db");
    f.set_len(len - 4000).expect("truncate");
    drop(f);
    // redb sizes its file itself, so a cut file is not what a crash leaves it; this only shows
    // how it treats a damaged file. A panic is caught and reported.
    std::panic::set_hook(Box::new(|_| {}));
    let opened = std::panic::catch_unwind(|| redb::Database::open(&path));
    let _ = std::panic::take_hook();
    let opened = match opened {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned());
            return format!("Database::open panics: {}", msg.unwrap_or_default());
        }
    };
    match opened {
        Err(e) => format!("open fails: {e}"),
        Ok(db) => {
            let r = (|| -> Result<bool, String> {
                let tx = db.begin_read().map_err(|e| e.to_string())?;
                let t = tx.open_table(TABLE).map_err(|e| e.to_string())?;
                let found = t
                    .get(last.key.as_str())
                    .map_err(|e| e.to_string())?
                    .is_some();
                Ok(found)
            })();
            format!("opened; last key readable: {r:?}")
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let total_mb: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1024);
    let tmp;
    let dir = match args.next() {
        Some(d) => PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir().expect("temp dir");
            tmp.path().to_path_buf()
        }
    };
    let (pool, items) = workload(total_mb << 20);
    let total: usize = items.iter().map(|i| i.len).sum();
    println!(
        "workload: {} blobs, {:.0} MB, mean {:.0} KB, {HOURS} hourly partitions, group commit per {} MB, {GETS} random gets",
        items.len(),
        total as f64 / 1e6,
        total as f64 / items.len() as f64 / 1024.0,
        BATCH_BYTES >> 20
    );
    let seg = |d: &Path, sync: bool| -> Box<dyn Engine> {
        let dur = if sync {
            Durability::Immediate
        } else {
            Durability::OnFlush
        };
        Box::new(Segment::new(d.to_path_buf(), dur))
    };
    let rdb = |d: &Path, _sync: bool| -> Box<dyn Engine> {
        Box::new(Redb::new(d.to_path_buf(), redb::Durability::Immediate))
    };
    let mut rows = vec![
        run("segment", &dir, &pool, &items, &seg),
        run("redb", &dir, &pool, &items, &rdb),
    ];
    rows[0].torn = torn_segment(&dir, &items, &pool);
    rows[1].torn = torn_redb(&dir, &items);
    println!(
        "| engine | write MB/s (fsync/100 MB) | write MB/s (fsync/put) | get p50 µs | get p99 µs | get MB/s | reopen ms | expire 2 h ms | disk / data |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.2} |",
            r.engine,
            r.write_mbs,
            r.sync_put_mbs,
            r.get_p50_us,
            r.get_p99_us,
            r.gets_mbs,
            r.reopen_ms,
            r.expire_ms,
            r.disk_ratio
        );
    }
    for r in &rows {
        println!("torn tail ({}): {}", r.engine, r.torn);
    }
}
