//! Deterministic, realistic event streams for demos, tests and benches.
//!
//! A [`Generator`] turns a [`GenConfig`] (seed, count, data centres, type mix, subtypes, start
//! epoch and rate, approximate WEB event size) into a stream of events of the three kinds the
//! design names — `WEB` (web requests), `CRON` (job runs) and `LB` (load-balancer decisions) —
//! as [`sereal::Value`] hashes whose keys are always in the same order. The same configuration
//! always yields the same events, bit for bit, on every platform: the only source of randomness
//! is the small [`Rng`] (SplitMix64) in this crate, seeded from the configuration.
//!
//! The events look like real request logs: nested (`timings`, `experiments`, `queries`),
//! repetitive (host names, paths, user agents, languages, experiment names recur across events
//! with a skewed distribution) and with some unique strings (`request_id`, most IPs). A WEB event
//! is about [`GenConfig::web_json_bytes`] bytes as compact JSON (500 by default); CRON and LB
//! events are smaller and shaped differently.
//!
//! ```
//! use sluice_gen::{GenConfig, Generator};
//!
//! let events: Vec<sereal::Value> = Generator::new(GenConfig::web(42, 3)).collect();
//! assert_eq!(events.len(), 3);
//! assert_eq!(events[0].get("type").and_then(|v| v.as_str()), Some("WEB"));
//! // Same seed, same events.
//! assert_eq!(events, Generator::new(GenConfig::web(42, 3)).collect::<Vec<_>>());
//! // JSON lines, one event per line.
//! let text = sluice_gen::events_json_lines(&GenConfig::web(42, 3));
//! assert_eq!(text.lines().count(), 3);
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::io::{self, Write};

use sereal::{Key, Value};

// ---------------------------------------------------------------------------------------------
// PRNG
// ---------------------------------------------------------------------------------------------

/// A tiny, fast, deterministic pseudo-random generator (SplitMix64). Not cryptographic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 finaliser: a bijection on `u64` that scrambles its input thoroughly.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator seeded with `seed` (any value, zero included).
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix64(self.state)
    }

    /// A uniform integer in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: bias is below 2^-64 * n, irrelevant here.
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// A uniform integer in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below((hi - lo) as u64 + 1) as i64
    }

    /// A uniform float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A uniformly chosen element of a non-empty slice.
    ///
    /// # Panics
    /// If `items` is empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// An index in `0..n` skewed towards small values (roughly Zipf-like: index 0 is the most
    /// frequent), so that a few items of a pool recur often and the tail appears rarely.
    pub fn skewed(&mut self, n: usize) -> usize {
        let u = self.unit();
        ((u * u * u) * n as f64) as usize
    }

    /// An index chosen according to `weights` (all zero: index 0).
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| w as u64).sum();
        if total == 0 {
            return 0;
        }
        let mut r = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if r < w as u64 {
                return i;
            }
            r -= w as u64;
        }
        weights.len() - 1
    }

    /// A positive float with a long right tail (log-normal around `median`).
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        // Box-Muller; `1 - unit()` is in (0, 1] so the log is finite.
        let (u1, u2) = (1.0 - self.unit(), self.unit());
        let n = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        median * (sigma * n).exp()
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// The three kinds of events the generator makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    /// A web request (~500 bytes of JSON, nested).
    Web,
    /// A cron job run (~300 bytes).
    Cron,
    /// A load-balancer decision (~400 bytes).
    Lb,
}

impl EventType {
    /// All event types, in the order of [`TypeMix`]'s fields.
    pub const ALL: [EventType; 3] = [EventType::Web, EventType::Cron, EventType::Lb];

    /// The `type` tag: `"WEB"`, `"CRON"` or `"LB"`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Web => "WEB",
            EventType::Cron => "CRON",
            EventType::Lb => "LB",
        }
    }
}

/// Relative weights of the event types in a stream (need not sum to anything in particular).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeMix {
    /// Weight of `WEB` events.
    pub web: u32,
    /// Weight of `CRON` events.
    pub cron: u32,
    /// Weight of `LB` events.
    pub lb: u32,
}

impl TypeMix {
    /// Only `WEB` events.
    pub fn web_only() -> TypeMix {
        TypeMix {
            web: 1,
            cron: 0,
            lb: 0,
        }
    }
}

impl Default for TypeMix {
    /// 75 % WEB, 5 % CRON, 20 % LB.
    fn default() -> TypeMix {
        TypeMix {
            web: 75,
            cron: 5,
            lb: 20,
        }
    }
}

/// The subtypes each event type is spread over (chosen uniformly per event; an empty list means
/// the empty subtype).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subtypes {
    /// Subtypes of `WEB` events (default `www`, `api`, `mobile`).
    pub web: Vec<String>,
    /// Subtypes of `CRON` events (default the empty subtype only).
    pub cron: Vec<String>,
    /// Subtypes of `LB` events (default `haproxy`).
    pub lb: Vec<String>,
}

impl Default for Subtypes {
    fn default() -> Subtypes {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
        Subtypes {
            web: v(&["www", "api", "mobile"]),
            cron: v(&[""]),
            lb: v(&["haproxy"]),
        }
    }
}

impl Subtypes {
    /// The list for one event type.
    pub fn of(&self, t: EventType) -> &[String] {
        match t {
            EventType::Web => &self.web,
            EventType::Cron => &self.cron,
            EventType::Lb => &self.lb,
        }
    }
}

/// What to generate. `Default` is 10,000 mixed events from seed 1 over four data centres, at
/// 1,000 events per second from epoch 1,700,000,000, with WEB events of about 500 JSON bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct GenConfig {
    /// Seed of the stream: equal configurations give equal streams.
    pub seed: u64,
    /// Number of events to produce.
    pub count: usize,
    /// Data-centre ids to spread events over (uniformly); must not be empty.
    pub dcs: Vec<String>,
    /// Relative weights of the event types.
    pub mix: TypeMix,
    /// Subtypes per event type.
    pub subtypes: Subtypes,
    /// Epoch (UTC Unix second) of the first event.
    pub epoch_start: i64,
    /// Events per second: event `i` has epoch `epoch_start + i / events_per_second` (0 is
    /// taken as 1).
    pub events_per_second: u32,
    /// Approximate average size of a WEB event as compact JSON, in bytes (default 500). Events
    /// vary around it (±25 %); sizes below ~350 bytes cannot be reached and give the smallest
    /// events the generator makes.
    pub web_json_bytes: usize,
}

impl Default for GenConfig {
    fn default() -> GenConfig {
        GenConfig {
            seed: 1,
            count: 10_000,
            dcs: ["ams1", "ams4", "lhr2", "fra3"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            mix: TypeMix::default(),
            subtypes: Subtypes::default(),
            epoch_start: 1_700_000_000,
            events_per_second: 1_000,
            web_json_bytes: 500,
        }
    }
}

impl GenConfig {
    /// `count` WEB events only, from `seed`, otherwise the defaults.
    pub fn web(seed: u64, count: usize) -> GenConfig {
        GenConfig {
            seed,
            count,
            mix: TypeMix::web_only(),
            ..GenConfig::default()
        }
    }

    /// `count` events of the default mix, from `seed`, otherwise the defaults.
    pub fn mixed(seed: u64, count: usize) -> GenConfig {
        GenConfig {
            seed,
            count,
            ..GenConfig::default()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Vocabulary
// ---------------------------------------------------------------------------------------------

/// (user agent, is a bot, weight)
const USER_AGENTS: &[(&str, bool, u32)] = &[
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.0.0 Safari/537.36", false, 22),
    ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15", false, 10),
    ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_1_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1", false, 14),
    ("Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.0.0 Mobile Safari/537.36", false, 10),
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:120.0) Gecko/20100101 Firefox/120.0", false, 5),
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.0.0 Safari/537.36 Edg/119.0.2151.72", false, 4),
    ("Booking.App/40.6 Android/13; Type: phone; AppStore: google; Brand: samsung; Model: SM-S911B.", false, 8),
    ("Booking.App/40.6 iOS/17.1.1; Type: phone", false, 12),
    ("okhttp/4.11.0", false, 8),
    ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", true, 3),
    ("Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)", true, 1),
    ("curl/8.4.0", true, 1),
];

/// (action, method, path template) — `{id}`, `{cc}`, `{slug}`, `{hex}` are filled per event.
const ROUTES: &[(&str, &str, &str, u32)] = &[
    ("index", "GET", "/index.html", 10),
    (
        "searchresults",
        "GET",
        "/searchresults.html?dest_id=-{id}&dest_type=city",
        20,
    ),
    ("hotel", "GET", "/hotel/{cc}/{slug}.html", 22),
    ("reviews", "GET", "/reviews/{cc}/hotel/{slug}.html", 5),
    ("book", "POST", "/book/{id}", 3),
    ("confirmation", "GET", "/confirmation/{id}", 2),
    (
        "api_availability",
        "GET",
        "/api/v1/hotels/{id}/availability",
        12,
    ),
    ("api_user_bookings", "GET", "/api/v1/users/{id}/bookings", 5),
    ("api_autocomplete", "GET", "/api/v1/autocomplete", 8),
    ("login", "POST", "/login", 2),
    ("mybooking", "GET", "/mybooking.html", 3),
    ("static", "GET", "/static/js/app.{hex}.js", 6),
    ("robots", "GET", "/robots.txt", 2),
];

const COUNTRIES: &[&str] = &[
    "nl", "gb", "de", "fr", "es", "it", "us", "jp", "br", "pl", "pt", "gr",
];
const SLUG_WORDS: &[&str] = &[
    "grand",
    "hotel",
    "canal",
    "house",
    "city",
    "centre",
    "park",
    "view",
    "residence",
    "palace",
    "boutique",
    "inn",
    "sea",
    "breeze",
    "old",
    "town",
    "apartments",
    "garden",
    "royal",
    "station",
];
const LANGS: &[&str] = &[
    "en-gb", "en-us", "de", "nl", "fr", "es", "it", "pt-br", "ja", "pl", "ru", "zh-cn",
];
const CURRENCIES: &[&str] = &["EUR", "USD", "GBP", "EUR", "BRL", "JPY", "PLN", "CHF"];
const SEARCHES: &[&str] = &[
    "Amsterdam",
    "Zürich",
    "München",
    "São Paulo",
    "Kraków",
    "東京",
    "Paris",
    "Lisboa",
];
const STATUS: &[(i64, u32)] = &[
    (200, 880),
    (301, 12),
    (302, 25),
    (304, 20),
    (400, 8),
    (401, 4),
    (403, 6),
    (404, 25),
    (429, 2),
    (500, 12),
    (502, 3),
    (503, 3),
];
const DBS: &[(&str, &[&str])] = &[
    (
        "hotels_ro",
        &["hotel", "hotel_photo", "room", "facility", "policy"],
    ),
    ("avail_ro", &["availability", "rate_plan", "price_cache"]),
    ("users_rw", &["account", "session", "booking"]),
    ("reviews_ro", &["review", "review_score"]),
];
const CRON_JOBS: &[(&str, &str, &str)] = &[
    (
        "rotate_logs",
        "/usr/sbin/logrotate /etc/logrotate.conf",
        "root",
    ),
    (
        "refresh_price_cache",
        "/usr/local/bin/refresh-price-cache --all",
        "app",
    ),
    (
        "send_reminders",
        "/usr/local/bin/send-reminders --window 24h",
        "app",
    ),
    ("compact_sessions", "/usr/local/bin/compact-sessions", "app"),
    (
        "sync_exchange_rates",
        "/usr/local/bin/sync-fx --source ecb",
        "app",
    ),
    (
        "backup_db",
        "/usr/local/bin/db-backup --incremental",
        "mysql",
    ),
    (
        "puppet_run",
        "/opt/puppetlabs/bin/puppet agent --onetime",
        "root",
    ),
];
const LB_BACKENDS: &[(&str, &str, u32)] = &[
    ("www", "web", 60),
    ("api", "api", 25),
    ("static", "static", 10),
    ("admin", "admin", 1),
    ("mobile_api", "mapi", 4),
];
const LB_TERMINATION: &[(&str, u32)] = &[
    ("----", 95),
    ("CD--", 2),
    ("sH--", 1),
    ("SC--", 1),
    ("cD--", 1),
];
const TLS: &[(&str, &str)] = &[
    ("TLSv1.3", "TLS_AES_128_GCM_SHA256"),
    ("TLSv1.3", "TLS_AES_256_GCM_SHA384"),
    ("TLSv1.2", "ECDHE-RSA-AES128-GCM-SHA256"),
];

// ---------------------------------------------------------------------------------------------
// Generator
// ---------------------------------------------------------------------------------------------

/// An iterator over [`GenConfig::count`] events as [`Value::Hash`]es.
///
/// Event `i` depends only on the configuration and `i` (each event has its own random stream),
/// so [`Iterator::nth`] skips cheaply and a prefix of a longer stream equals a shorter stream.
#[derive(Debug, Clone)]
pub struct Generator {
    cfg: GenConfig,
    next: usize,
    /// Scratch buffer for measuring JSON sizes.
    scratch: Vec<u8>,
}

impl Generator {
    /// A generator for `cfg`.
    ///
    /// # Panics
    /// If `cfg.dcs` is empty.
    pub fn new(cfg: GenConfig) -> Generator {
        assert!(
            !cfg.dcs.is_empty(),
            "GenConfig::dcs must name at least one data centre"
        );
        Generator {
            cfg,
            next: 0,
            scratch: Vec::new(),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &GenConfig {
        &self.cfg
    }

    /// Event number `index` of the stream (also past `count`), with its type.
    pub fn event(&mut self, index: usize) -> (EventType, Value) {
        let mut rng = Rng::new(mix64(
            self.cfg.seed ^ mix64(index as u64 ^ 0x005E_ED0F_E7E7),
        ));
        let w = [self.cfg.mix.web, self.cfg.mix.cron, self.cfg.mix.lb];
        let kind = EventType::ALL[rng.weighted(&w)];
        let eps = self.cfg.events_per_second.max(1) as i64;
        let epoch = self.cfg.epoch_start + index as i64 / eps;
        let dc = rng.pick(&self.cfg.dcs).clone();
        let subtype = match self.cfg.subtypes.of(kind) {
            [] => String::new(),
            list => rng.pick(list).clone(),
        };
        let mut b = EventBuilder::new();
        b.int("epoch", epoch)
            .str("dc", &dc)
            .str("type", kind.as_str())
            .str("subtype", &subtype);
        let v = match kind {
            EventType::Web => self.web(&mut rng, b, index, &dc),
            EventType::Cron => cron(&mut rng, b, epoch, &dc),
            EventType::Lb => lb(&mut rng, b, &dc),
        };
        (kind, v)
    }

    fn web(&mut self, rng: &mut Rng, mut b: EventBuilder, index: usize, dc: &str) -> Value {
        let host = format!("web{:03}.{}", 1 + rng.skewed(120), dc);
        let route_w: Vec<u32> = ROUTES.iter().map(|r| r.3).collect();
        let (action, method, template, _) = ROUTES[rng.weighted(&route_w)];
        let cc = *rng.pick(COUNTRIES);
        let path = fill_path(rng, template, cc);
        let (ua, is_bot, _) =
            USER_AGENTS[rng.weighted(&USER_AGENTS.iter().map(|u| u.2).collect::<Vec<_>>())];
        let status = STATUS[rng.weighted(&STATUS.iter().map(|s| s.1).collect::<Vec<_>>())].0;
        let bytes = match status {
            304 => 0,
            301 | 302 => rng.range(150, 400),
            s if s >= 400 => rng.range(800, 6_000),
            _ if action == "static" => rng.range(20_000, 400_000),
            _ if action.starts_with("api") => rng.range(300, 20_000),
            _ => rng.range(15_000, 180_000),
        };
        let total = round3(rng.lognormal(if action == "static" { 2.0 } else { 85.0 }, 0.8));
        let db = round3(total * (0.1 + 0.5 * rng.unit()));
        let render = (total - db).max(0.0) as i64 * rng.range(30, 90) / 100;
        let user_id = if is_bot || rng.chance(0.45) {
            Value::Undef
        } else {
            Value::Int(rng.range(1, 60_000_000))
        };
        let n_exp = if is_bot {
            0
        } else {
            rng.weighted(&[35, 25, 18, 12, 6, 4])
        };
        let mut experiments = Vec::with_capacity(n_exp);
        let mut seen_exp = [0i64; 6];
        for _ in 0..n_exp {
            let mut e = EventBuilder::new();
            // Distinct experiment ids per request, popular ones more often.
            let mut id = 4_000 + rng.skewed(60) as i64;
            while seen_exp[..experiments.len()].contains(&id) {
                id += 1;
            }
            seen_exp[experiments.len()] = id;
            e.int("id", id).int("variant", rng.range(0, 2));
            experiments.push(e.build());
        }
        let ip = if rng.chance(0.2) {
            // A handful of busy NATs / proxies recur.
            format!("185.28.{}.{}", 1 + rng.skewed(4), 10 + rng.skewed(20))
        } else {
            format!(
                "{}.{}.{}.{}",
                2 + rng.below(220),
                rng.below(256),
                rng.below(256),
                1 + rng.below(254)
            )
        };
        // Unique within a stream: mix64 is a bijection, so distinct indexes give distinct ids.
        let request_id = format!("{:016x}", mix64(index as u64 ^ mix64(self.cfg.seed)));

        b.str("host", &host)
            .str("method", method)
            .str("path", &path)
            .int("status", status)
            .int("bytes", bytes);
        let timings_at = b.entries.len();
        b.value("timings", Value::Undef); // filled in below, once the query count is known
        b.str("user_agent", ua)
            .bool("is_bot", is_bot)
            .str("ip", &ip)
            .str("lang", pick_str(rng, LANGS))
            .str("currency", pick_str(rng, CURRENCIES))
            .value("user_id", user_id);
        if action == "searchresults" || action == "api_autocomplete" {
            b.str("search", pick_str(rng, SEARCHES));
        }
        b.value("experiments", Value::Array(experiments))
            .str("request_id", &request_id);

        // Size tuning: the per-event target varies ±25 % around the configured average; the db
        // queries the request made are listed while they keep the event within its target.
        let target = (self.cfg.web_json_bytes as f64 * (0.75 + 0.5 * rng.unit())) as usize;
        let mut queries = Vec::new();
        let timings = |n: usize| {
            let mut t = EventBuilder::new();
            t.float("total_ms", total)
                .float("db_ms", db)
                .int("render_ms", render);
            if n > 0 {
                t.int("db_queries", n as i64);
            }
            t.build()
        };
        b.entries[timings_at].1 = timings(0);
        // `,"queries":[]` and `,"db_queries":N` come with the first query.
        let mut size = json_len(&mut self.scratch, &b.clone().build()) + 13 + 15;
        let per_query_ms = db / 4.0;
        loop {
            let (dbname, tables) = DBS[rng.skewed(DBS.len())];
            let mut q = EventBuilder::new();
            q.str("db", dbname)
                .str("table", pick_str(rng, tables))
                .float("ms", round3(rng.lognormal(per_query_ms.max(0.05), 0.7)))
                .int("rows", rng.skewed(200) as i64);
            let q = q.build();
            let extra = json_len(&mut self.scratch, &q) + usize::from(!queries.is_empty());
            if size + extra > target || queries.len() >= 10_000 {
                break;
            }
            size += extra;
            queries.push(q);
        }
        b.entries[timings_at].1 = timings(queries.len());
        if !queries.is_empty() {
            b.value("queries", Value::Array(queries));
        }
        b.build()
    }
}

fn cron(rng: &mut Rng, mut b: EventBuilder, epoch: i64, dc: &str) -> Value {
    let (job, cmd, user) = CRON_JOBS[rng.skewed(CRON_JOBS.len())];
    let duration_ms = rng.lognormal(4_000.0, 1.5).round() as i64;
    let exit = if rng.chance(0.96) {
        0
    } else {
        *rng.pick(&[1, 2, 124, 137])
    };
    let mut stats = EventBuilder::new();
    stats
        .float(
            "user_s",
            round3(duration_ms as f64 / 1000.0 * 0.6 * rng.unit()),
        )
        .float(
            "sys_s",
            round3(duration_ms as f64 / 1000.0 * 0.1 * rng.unit()),
        )
        .int("max_rss_kb", rng.range(8_000, 900_000));
    b.str("host", &format!("cron{:02}.{}", 1 + rng.below(6), dc))
        .str("job", job)
        .str("command", cmd)
        .str("user", user)
        .int("pid", rng.range(1_000, 4_000_000))
        .int("started", epoch - duration_ms / 1000)
        .int("duration_ms", duration_ms)
        .int("exit_code", exit)
        .value("stats", stats.build())
        .value(
            "error",
            if exit == 0 {
                Value::Undef
            } else {
                string("non-zero exit status")
            },
        )
        .bool("locked", rng.chance(0.02))
        .build()
}

fn lb(rng: &mut Rng, mut b: EventBuilder, dc: &str) -> Value {
    let w: Vec<u32> = LB_BACKENDS.iter().map(|x| x.2).collect();
    let (backend, server_prefix, _) = LB_BACKENDS[rng.weighted(&w)];
    let status = STATUS[rng.weighted(&STATUS.iter().map(|s| s.1).collect::<Vec<_>>())].0;
    let term =
        LB_TERMINATION[rng.weighted(&LB_TERMINATION.iter().map(|t| t.1).collect::<Vec<_>>())].0;
    let connect = rng.range(0, 3);
    let response = rng.lognormal(60.0, 0.9).round() as i64;
    let (tls_version, cipher) = *rng.pick(TLS);
    let mut timings = EventBuilder::new();
    timings
        .int("queue_ms", rng.skewed(5) as i64)
        .int("connect_ms", connect)
        .int("response_ms", response)
        .int("total_ms", connect + response + rng.range(0, 40));
    let mut tls = EventBuilder::new();
    tls.str("version", tls_version)
        .str("cipher", cipher)
        .bool("resumed", rng.chance(0.6));
    b.str("lb", &format!("lb{:02}.{}", 1 + rng.below(4), dc))
        .str("frontend", "https-in")
        .str("backend", backend)
        .str(
            "server",
            &format!("{}{:03}.{}:8080", server_prefix, 1 + rng.skewed(120), dc),
        )
        .str(
            "client_ip",
            &format!(
                "{}.{}.{}.{}",
                2 + rng.below(220),
                rng.below(256),
                rng.below(256),
                1 + rng.below(254)
            ),
        )
        .int("status", status)
        .int("bytes_in", rng.range(200, 2_500))
        .int("bytes_out", rng.range(150, 200_000))
        .value("timings", timings.build())
        .int("retries", if rng.chance(0.01) { 1 } else { 0 })
        .str("termination_state", term)
        .value("tls", tls.build())
        .build()
}

impl Iterator for Generator {
    type Item = Value;

    fn next(&mut self) -> Option<Value> {
        if self.next >= self.cfg.count {
            return None;
        }
        let i = self.next;
        self.next += 1;
        Some(self.event(i).1)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.cfg.count.saturating_sub(self.next);
        (n, Some(n))
    }

    fn nth(&mut self, n: usize) -> Option<Value> {
        self.next = self.next.saturating_add(n).min(self.cfg.count);
        self.next()
    }
}

impl ExactSizeIterator for Generator {}

// ---------------------------------------------------------------------------------------------
// Convenience
// ---------------------------------------------------------------------------------------------

/// All events of `cfg` as one `Value::Array` — the body of an events blob.
pub fn events_array(cfg: &GenConfig) -> Value {
    Value::Array(Generator::new(cfg.clone()).collect())
}

/// All events of `cfg` as JSON lines (compact JSON, one event per line, each line ending in `\n`).
pub fn events_json_lines(cfg: &GenConfig) -> String {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = write_json_lines(cfg, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// Write all events of `cfg` to `w` as JSON lines.
pub fn write_json_lines<W: Write>(cfg: &GenConfig, mut w: W) -> io::Result<()> {
    for event in Generator::new(cfg.clone()) {
        sereal::json::to_writer(&mut w, &event)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

thread_local! {
    /// Keys handed out so far: events share their key allocations, as decoded events do.
    static KEYS: std::cell::RefCell<std::collections::HashMap<String, Key>> = Default::default();
}

fn interned_key(k: &str) -> Key {
    KEYS.with(|keys| {
        let mut keys = keys.borrow_mut();
        if let Some(key) = keys.get(k) {
            return key.clone();
        }
        let key = Key::from(k);
        keys.insert(k.to_owned(), key.clone());
        key
    })
}

/// Builds a hash with keys in insertion order.
#[derive(Clone)]
struct EventBuilder {
    entries: Vec<(Key, Value)>,
}

impl EventBuilder {
    fn new() -> Self {
        EventBuilder {
            entries: Vec::with_capacity(24),
        }
    }
    fn value(&mut self, k: &str, v: Value) -> &mut Self {
        self.entries.push((interned_key(k), v));
        self
    }
    fn str(&mut self, k: &str, v: &str) -> &mut Self {
        self.value(k, string(v))
    }
    fn int(&mut self, k: &str, v: i64) -> &mut Self {
        self.value(k, Value::Int(v))
    }
    fn float(&mut self, k: &str, v: f64) -> &mut Self {
        self.value(k, Value::Float(v))
    }
    fn bool(&mut self, k: &str, v: bool) -> &mut Self {
        self.value(k, Value::Bool(v))
    }
    fn build(&mut self) -> Value {
        Value::Hash(std::mem::take(&mut self.entries))
    }
}

fn pick_str(rng: &mut Rng, items: &[&'static str]) -> &'static str {
    items[rng.below(items.len() as u64) as usize]
}

fn string(s: &str) -> Value {
    Value::String(s.to_owned())
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn json_len(scratch: &mut Vec<u8>, v: &Value) -> usize {
    scratch.clear();
    let _ = sereal::json::to_writer(&mut *scratch, v);
    scratch.len()
}

fn fill_path(rng: &mut Rng, template: &str, cc: &str) -> String {
    let mut out = String::with_capacity(template.len() + 24);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = open + rest[open..].find('}').unwrap_or(0);
        match &rest[open + 1..close] {
            // Popular destinations and hotels recur; the long tail is mostly unique.
            "id" => out.push_str(&(1_000 + rng.skewed(2_000_000)).to_string()),
            "cc" => out.push_str(cc),
            "slug" => {
                let n = 1 + rng.below(3);
                for i in 0..n {
                    if i > 0 {
                        out.push('-');
                    }
                    out.push_str(SLUG_WORDS[rng.skewed(SLUG_WORDS.len())]);
                }
                if rng.chance(0.5) {
                    out.push('-');
                    out.push_str(&rng.skewed(500).to_string());
                }
            }
            "hex" => out.push_str(&format!("{:08x}", mix64(rng.skewed(12) as u64) as u32)),
            other => out.push_str(other),
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("missing string {k}"))
    }

    #[test]
    fn deterministic() {
        let a: Vec<Value> = Generator::new(GenConfig::mixed(7, 500)).collect();
        let b: Vec<Value> = Generator::new(GenConfig::mixed(7, 500)).collect();
        assert_eq!(a, b);
        assert_eq!(
            events_json_lines(&GenConfig::mixed(7, 200)),
            events_json_lines(&GenConfig::mixed(7, 200))
        );
        let c: Vec<Value> = Generator::new(GenConfig::mixed(8, 500)).collect();
        assert_ne!(a, c);
        // A prefix of a longer stream is the shorter stream; nth skips to the same event.
        let long: Vec<Value> = Generator::new(GenConfig::mixed(7, 800)).collect();
        assert_eq!(&long[..500], &a[..]);
        assert_eq!(
            Generator::new(GenConfig::mixed(7, 800)).nth(650).as_ref(),
            Some(&long[650])
        );
    }

    #[test]
    fn stable_across_versions() {
        // Guards against accidental changes of the stream (benches compare runs over time).
        let first = Generator::new(GenConfig::web(1, 1)).next().unwrap();
        assert_eq!(
            first.get("epoch").and_then(Value::as_i64),
            Some(1_700_000_000)
        );
        let json = sereal::json::to_string(&first);
        assert!(json.starts_with(r#"{"epoch":1700000000,"dc":""#), "{json}");
    }

    #[test]
    fn web_json_size_in_range() {
        let text = events_json_lines(&GenConfig::web(3, 2_000));
        let avg = (text.len() - 2_000) as f64 / 2_000.0;
        assert!(
            (400.0..=650.0).contains(&avg),
            "average WEB event is {avg} bytes"
        );
        // Size knob: bigger events on request.
        let big = events_json_lines(&GenConfig {
            web_json_bytes: 2_000,
            ..GenConfig::web(3, 300)
        });
        let avg_big = (big.len() - 300) as f64 / 300.0;
        assert!(
            (1_600.0..=2_200.0).contains(&avg_big),
            "average big WEB event is {avg_big} bytes"
        );
    }

    #[test]
    fn shapes_present() {
        let events: Vec<Value> = Generator::new(GenConfig::mixed(11, 3_000)).collect();
        let mut seen = std::collections::BTreeMap::new();
        let mut statuses = std::collections::BTreeSet::new();
        let mut null_users = 0;
        let mut max_exp = 0;
        let mut ids = std::collections::HashSet::new();
        for (i, e) in events.iter().enumerate() {
            let Value::Hash(entries) = e else {
                panic!("event {i} is not a hash")
            };
            let keys: Vec<&str> = entries
                .iter()
                .take(4)
                .map(|(k, _)| k.as_str().unwrap())
                .collect();
            assert_eq!(keys, ["epoch", "dc", "type", "subtype"]);
            assert_eq!(
                e.get("epoch").and_then(Value::as_i64),
                Some(1_700_000_000 + i as i64 / 1000)
            );
            let t = str_of(e, "type");
            *seen.entry(t.to_string()).or_insert(0) += 1;
            match t {
                "WEB" => {
                    for k in [
                        "host",
                        "method",
                        "path",
                        "user_agent",
                        "ip",
                        "lang",
                        "currency",
                        "request_id",
                    ] {
                        str_of(e, k);
                    }
                    let timings = e.get("timings").unwrap();
                    assert!(matches!(timings.get("total_ms"), Some(Value::Float(_))));
                    assert!(matches!(timings.get("render_ms"), Some(Value::Int(_))));
                    statuses.insert(e.get("status").and_then(Value::as_i64).unwrap());
                    if e.get("user_id") == Some(&Value::Undef) {
                        null_users += 1;
                    }
                    let exps = e.get("experiments").and_then(Value::as_array).unwrap();
                    max_exp = max_exp.max(exps.len());
                    for x in exps {
                        assert!(x.get("id").and_then(Value::as_i64).is_some());
                        assert!(x.get("variant").and_then(Value::as_i64).is_some());
                    }
                    assert!(matches!(e.get("is_bot"), Some(Value::Bool(_))));
                    assert!(
                        ids.insert(str_of(e, "request_id").to_string()),
                        "request_id repeats"
                    );
                    assert_eq!(str_of(e, "request_id").len(), 16);
                }
                "CRON" => {
                    str_of(e, "job");
                    assert!(e.get("duration_ms").and_then(Value::as_i64).is_some());
                    assert!(e.get("url").is_none());
                }
                "LB" => {
                    str_of(e, "backend");
                    assert!(e
                        .get("timings")
                        .and_then(|t| t.get("response_ms"))
                        .is_some());
                }
                other => panic!("unexpected type {other}"),
            }
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(
            seen["WEB"] > seen["LB"] && seen["LB"] > seen["CRON"],
            "{seen:?}"
        );
        assert!(statuses.contains(&200) && statuses.iter().any(|s| (300..400).contains(s)));
        assert!(
            statuses.iter().any(|s| (400..500).contains(s)) && statuses.iter().any(|s| *s >= 500)
        );
        assert!(null_users > 0 && null_users < seen["WEB"]);
        assert_eq!(max_exp, 5);
    }

    #[test]
    fn repetitive_like_real_logs() {
        // Many strings recur (so dedupe and compression have something to find).
        let events: Vec<Value> = Generator::new(GenConfig::web(5, 2_000)).collect();
        let hosts: std::collections::HashSet<&str> =
            events.iter().map(|e| str_of(e, "host")).collect();
        let uas: std::collections::HashSet<&str> =
            events.iter().map(|e| str_of(e, "user_agent")).collect();
        assert!(hosts.len() <= 4 * 120, "{}", hosts.len());
        assert!(uas.len() <= USER_AGENTS.len());
        let plain = sereal::to_vec(
            &Value::Array(events.clone()),
            &sereal::EncoderOptions {
                protocol: 3,
                ..Default::default()
            },
        )
        .unwrap();
        let dedupe = sereal::to_vec(
            &Value::Array(events),
            &sereal::EncoderOptions {
                protocol: 3,
                dedupe_strings: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(
            dedupe.len() * 10 < plain.len() * 8,
            "dedupe {} vs plain {}",
            dedupe.len(),
            plain.len()
        );
    }

    #[test]
    fn config_knobs() {
        let cfg = GenConfig {
            dcs: vec!["x1".into()],
            mix: TypeMix {
                web: 0,
                cron: 1,
                lb: 0,
            },
            subtypes: Subtypes {
                cron: vec!["nightly".into()],
                ..Subtypes::default()
            },
            epoch_start: 100,
            events_per_second: 2,
            ..GenConfig::mixed(1, 5)
        };
        let events: Vec<Value> = Generator::new(cfg).collect();
        let epochs: Vec<i64> = events
            .iter()
            .map(|e| e.get("epoch").and_then(Value::as_i64).unwrap())
            .collect();
        assert_eq!(epochs, [100, 100, 101, 101, 102]);
        for e in &events {
            assert_eq!(
                (str_of(e, "dc"), str_of(e, "type"), str_of(e, "subtype")),
                ("x1", "CRON", "nightly")
            );
        }
    }

    #[test]
    fn rng_basics() {
        let mut r = Rng::new(0);
        let first: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        // Reference SplitMix64 output for seed 0.
        assert_eq!(
            first,
            [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
        );
        for _ in 0..1000 {
            assert!(r.below(7) < 7);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
            assert!((3..=5).contains(&r.range(3, 5)));
        }
    }
}
