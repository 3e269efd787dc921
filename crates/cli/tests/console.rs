//! The console (`/`, issue 27) in a real headless Chromium against a real `sluice serve`: every
//! screen loads; Explore's histogram totals and table agree with `sluice cat --count-by` on the
//! same data; a bad `--where` shows the server's caret; a facet click adds a filter; the live
//! tail follows events as they are posted, pauses and resumes from its cursor with no gap and no
//! duplicate; rollups, alerts and health draw from the API; the page never logs a JavaScript
//! error (`window.__consoleErrors`: errors, rejections, `console.error`, failed loads, CSP
//! violations). Under `--auth` the page loads but reads nothing until a token is pasted.
//! Screenshots of each screen go to `target/console-screenshots/` (a set is committed in
//! `docs/console/`).
//!
//! Needs Debian's `chromium` and `chromium-driver` (`scripts/chromium.sh`, run by `make test`),
//! driven by `sluice_test_support::browser`; `SLUICE_SKIP_BROWSER=1` skips it (it then prints
//! SKIPPED).

mod common;
mod process;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, MouseActions, PointerAction, MOUSE_BUTTON_LEFT};
use fantoccini::{Client, Locator};
use process::Server;
use serde_json::{json, Value};
use sluice_test_support::browser::{self, Driver};
/// Events of the history the test explores (`sluice gen`, seed 7).
const HISTORY: usize = 3000;
/// Longest wait for anything the page should show.
const WAIT: Duration = Duration::from_secs(30);

#[test]
fn the_console_shows_what_the_api_and_the_cli_say() {
    if std::env::var("SLUICE_SKIP_BROWSER").as_deref() == Ok("1") {
        eprintln!("\n*** SKIPPED: SLUICE_SKIP_BROWSER=1 (the console browser test) ***\n");
        return;
    }
    let chromedriver = browser_installed();
    let dir = sluice_test_support::temp_dir("console");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\ntcp = \"off\"\nudp = \"off\"\ngrace_ms = 100\n"),
    )
    .unwrap();
    let server = Server::start(&config, &data);
    let base = format!("http://{}", server.addr);
    let data_arg = data.to_str().unwrap();

    // A rollup first (it runs on what is stored from now on), then a history of HISTORY events
    // dated t0 .. t0 + 150 s.
    common::assert_success(&common::sluice(&[
        "rollup",
        "add",
        "web_status",
        "--type",
        "WEB",
        "--group-by",
        "status",
        "--agg",
        "count,p99:timings.total_ms,distinct:ip",
        "--step",
        "10s",
        "--data",
        data_arg,
    ]));
    let t0 = common::now() - 400;
    let (from, to) = (t0, t0 + 300);
    let gen = common::sluice(&[
        "gen",
        "--count",
        &HISTORY.to_string(),
        "--rate",
        "20",
        "--seed",
        "7",
        "--epoch",
        &t0.to_string(),
    ]);
    common::assert_success(&gen);
    post(&server, &gen.stdout);
    common::wait_for(WAIT, "the history stored", || {
        count_by(&base, from, to, None).values().sum::<u64>() == HISTORY as u64
    });
    let all_counts = count_by(&base, from, to, None);
    let web = all_counts["WEB"];
    // The rollup has seen every WEB event before the page looks at it.
    common::wait_for(WAIT, "the rollup's states", || {
        rollup_count(&base, from, to) == web
    });

    let shots = screenshots_dir();
    let driver = Driver::start(&chromedriver, &dir);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async {
        let c = driver.session(&dir.join("chromium"), 1300, 1000).await?;
        let r = Steps {
            c: &c,
            base: &base,
            server: &server,
            shots: &shots,
            data: &data,
        }
        .run(from, to, &all_counts, web)
        .await;
        let _ = c.close().await;
        r
    });
    drop(driver);
    if let Err(e) = result {
        panic!("{e}");
    }

    // Under --auth the page still loads (its assets hold no data) but reads nothing without a
    // token; with a read token pasted it does.
    let auth = auth_run(&chromedriver, &dir, &shots);
    if let Err(e) = auth {
        panic!("{e}");
    }
    server.stop();
}

/// The steps of one browser session against the server with the history.
struct Steps<'a> {
    c: &'a Client,
    base: &'a str,
    server: &'a Server,
    shots: &'a Path,
    data: &'a Path,
}

type R<T> = Result<T, String>;

impl Steps<'_> {
    async fn run(&self, from: i64, to: i64, all: &BTreeMap<String, u64>, web: u64) -> R<()> {
        let c = self.c;
        let total: u64 = all.values().sum();

        // `/`: the console, Explore first, with its links.
        let opened = Instant::now();
        goto(c, &format!("{}/", self.base)).await?;
        wait_js(
            c,
            "return document.querySelector('#hist-total')?.dataset.total",
            "/ shows Explore",
        )
        .await?;
        wait_js(
            c,
            "return performance.getEntriesByName('sluice:table-drawn').length",
            "the table drawn",
        )
        .await?;
        let marks = js(
            c,
            "const at = (n) => performance.getEntriesByName(n)[0].startTime;
             return [performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd,
                     at('sluice:histogram-drawn'), at('sluice:table-drawn')]",
        )
        .await?;
        eprintln!(
            "console: / in a fresh browser: DOMContentLoaded {:.0} ms, histogram drawn {:.0} ms, table drawn {:.0} ms after the navigation began ({:.0} ms by the test's clock, WebDriver included)",
            marks[0].as_f64().unwrap_or(0.0),
            marks[1].as_f64().unwrap_or(0.0),
            marks[2].as_f64().unwrap_or(0.0),
            opened.elapsed().as_secs_f64() * 1000.0
        );
        let links = js(
            c,
            "return [...document.querySelectorAll('footer a')].map(a => a.getAttribute('href'))",
        )
        .await?;
        assert_eq!(links, json!(["/metrics", "/healthz"]));
        wait_js(
            c,
            "return document.getElementById('version').textContent.startsWith('v')",
            "the version",
        )
        .await?;
        self.clean("landing").await?;

        // Explore over the history: the histogram's totals per type are `sluice cat --count-by
        // type`; the table holds the newest 200.
        let url = format!("{}/#/explore?from={from}&to={to}", self.base);
        let legend = self.explore(&url).await?;
        assert_eq!(
            &legend, all,
            "histogram legend vs sluice cat --count-by type"
        );
        let hist_total = js(
            c,
            "return Number(document.querySelector('#hist-total').dataset.total)",
        )
        .await?;
        assert_eq!(hist_total, json!(total));
        let rows = table_events(c).await?;
        assert_eq!(rows.len(), 200.min(total as usize));
        let mut epochs: Vec<i64> = cat_events(self.base, from, to, None)
            .iter()
            .map(|e| e["epoch"].as_i64().unwrap())
            .collect();
        epochs.sort_unstable();
        let cutoff = epochs[epochs.len() - rows.len()];
        assert!(
            rows.iter().all(|e| e["epoch"].as_i64().unwrap() >= cutoff),
            "the table shows the newest events (all at or after {cutoff})"
        );
        self.shot("explore").await?;

        // A filter: totals and every row agree with the CLI.
        let filter = "status >= 500";
        let url = format!(
            "{}/#/explore?from={from}&to={to}&where={}",
            self.base,
            enc(filter)
        );
        let legend = self.explore(&url).await?;
        let want = count_by(self.base, from, to, Some(filter));
        assert_eq!(legend, want, "filtered histogram vs sluice cat --count-by");
        let rows = table_events(c).await?;
        let filtered: u64 = want.values().sum();
        assert!(
            filtered <= 200,
            "the filter keeps the table whole ({filtered})"
        );
        let mut by_type = BTreeMap::new();
        for e in &rows {
            assert!(e["status"].as_i64().unwrap() >= 500, "{e}");
            *by_type
                .entry(e["type"].as_str().unwrap().to_owned())
                .or_insert(0u64) += 1;
        }
        assert_eq!(by_type, want, "table rows by type vs sluice cat --count-by");
        // A row's JSON on click.
        c.find(Locator::Css("#results tr.row"))
            .await
            .map_err(s)?
            .click()
            .await
            .map_err(s)?;
        let detail = wait_js(
            c,
            "return document.querySelector('#results tr.detail pre')?.textContent",
            "a row's JSON",
        )
        .await?;
        let ev: Value = serde_json::from_str(detail.as_str().unwrap()).map_err(s)?;
        assert_eq!(ev, rows[0]);
        // A column: ticked in Columns, it joins the URL and the table.
        c.find(Locator::Css("#columns summary"))
            .await
            .map_err(s)?
            .click()
            .await
            .map_err(s)?;
        c.find(Locator::Css("#columns input[data-col=status]"))
            .await
            .map_err(s)?
            .click()
            .await
            .map_err(s)?;
        let statuses = wait_js(c, "const i = [...document.querySelectorAll('#results th')].findIndex(th => th.textContent === 'status'); return i >= 0 && location.hash.includes('cols=') && [...document.querySelectorAll('#results tr.row')].map(r => Number(r.cells[i].textContent))", "the status column").await?;
        let want: Vec<i64> = rows.iter().map(|e| e["status"].as_i64().unwrap()).collect();
        assert_eq!(statuses, json!(want));
        self.clean("explore-filtered").await?;

        // Cancel: Run again, then Cancel while its requests are in flight (before any answer can
        // arrive); nothing is drawn.
        let progress = js(
            c,
            "// Cancel right after the app's own hashchange listener mounted the run.
             window.addEventListener('hashchange', () => document.getElementById('cancel').click(), {once: true});
             document.getElementById('run').click();
             return new Promise(r => { const t = setInterval(() => {
               const p = document.getElementById('progress').textContent;
               if (p === 'cancelled' || p.startsWith('done')) { clearInterval(t); r(p); } }, 20); })",
        )
        .await?;
        assert_eq!(progress, json!("cancelled"));
        assert!(
            js(
                c,
                "return document.querySelectorAll('#results tr.row').length"
            )
            .await?
                == json!(0),
            "a cancelled run draws no table"
        );
        self.clean("cancel").await?;

        // A bad expression: the server's message with its caret.
        let url = format!(
            "{}/#/explore?from={from}&to={to}&where={}",
            self.base,
            enc("status >>")
        );
        goto(c, &url).await?;
        let err = wait_js(
            c,
            "return document.querySelector('#errors pre.error')?.textContent",
            "the where error",
        )
        .await?;
        let err = err.as_str().unwrap();
        assert!(err.contains("where:") && err.contains('^'), "{err}");
        self.shot("explore-error").await?;
        self.clean("explore-error").await?;

        // A facet: dc's top values; a click adds `dc == "…"` and the totals follow.
        let url = format!("{}/#/explore?from={from}&to={to}&facets=dc", self.base);
        self.explore(&url).await?;
        let value = wait_js(
            c,
            "return document.querySelector('[data-field=dc] a.facet-value')?.dataset.value",
            "the dc facet",
        )
        .await?;
        let dc = value.as_str().unwrap().to_owned();
        c.find(Locator::Css("[data-field=dc] a.facet-value"))
            .await
            .map_err(s)?
            .click()
            .await
            .map_err(s)?;
        let cond = format!("dc == \"{dc}\"");
        wait_js(
            c,
            &format!(
                "return decodeURIComponent(location.hash.replace(/\\+/g, ' ')).includes({})",
                json!(cond)
            ),
            "the facet's filter in the URL",
        )
        .await?;
        let legend = self.wait_legend().await?;
        assert_eq!(
            legend,
            count_by(self.base, from, to, Some(&cond)),
            "after the facet click"
        );
        self.shot("explore-facet").await?;
        self.clean("facet").await?;

        // Stacked by another field: the legend is `sluice cat --count-by status` (all of it:
        // the histogram draws 8 series, its legend lists every value).
        let filter = "type == \"WEB\"";
        let url = format!(
            "{}/#/explore?from={from}&to={to}&stack=status&where={}",
            self.base,
            enc(filter)
        );
        let legend = self.explore(&url).await?;
        assert_eq!(
            legend,
            count_by_field(self.base, from, to, "status", Some(filter)),
            "stacked by status"
        );
        self.clean("stack by status").await?;

        // Drag on the histogram: the range narrows to the selection.
        let url = format!("{}/#/explore?from={from}&to={to}", self.base);
        self.explore(&url).await?;
        // A real drag (WebDriver actions) from 30 % to 60 % of the plot's width.
        let over = c
            .find(Locator::Css("#histogram .u-over"))
            .await
            .map_err(s)?;
        let (_, _, w, _) = over.rectangle().await.map_err(s)?;
        let drag = MouseActions::new("mouse".into())
            .then(PointerAction::MoveToElement {
                element: over.clone(),
                duration: None,
                x: -0.2 * w,
                y: 0.0,
            })
            .then(PointerAction::Down {
                button: MOUSE_BUTTON_LEFT,
            })
            .then(PointerAction::MoveToElement {
                element: over.clone(),
                duration: Some(Duration::from_millis(200)),
                x: 0.1 * w,
                y: 0.0,
            })
            .then(PointerAction::Up {
                button: MOUSE_BUTTON_LEFT,
            });
        c.perform_actions(drag).await.map_err(s)?;
        let hash = wait_js(
            c,
            &format!("return !location.hash.includes('from={from}&') && location.hash"),
            "the zoomed range",
        )
        .await?;
        let q = hash.as_str().unwrap().to_owned();
        let zfrom: i64 = param(&q, "from").parse().map_err(s)?;
        let zto: i64 = param(&q, "to").parse().map_err(s)?;
        assert!(from < zfrom && zfrom < zto && zto < to, "{q}");
        let legend = self.wait_legend().await?;
        assert_eq!(
            legend,
            count_by(self.base, zfrom, zto, None),
            "zoomed {zfrom}..{zto}"
        );
        self.clean("zoom").await?;

        // Live: follow WEB events as they are posted; pause, post, resume: every one once.
        goto(c, &format!("{}/#/live?type=WEB", self.base)).await?;
        wait_js(
            c,
            "return document.querySelector('#live-status')?.dataset.state === 'live'",
            "the tail connected",
        )
        .await?;
        let first = live_batch(0, 40);
        post(self.server, &first);
        let want: Vec<i64> = (0..40).collect();
        self.wait_live_ids(&want).await?;
        self.shot("live").await?;
        c.find(Locator::Css("#live-pause"))
            .await
            .map_err(s)?
            .click()
            .await
            .map_err(s)?;
        wait_js(
            c,
            "return document.querySelector('#live-status').dataset.state === 'paused'",
            "paused",
        )
        .await?;
        post(self.server, &live_batch(40, 30));
        c.find(Locator::Css("#live-pause"))
            .await
            .map_err(s)?
            .click()
            .await
            .map_err(s)?;
        let want: Vec<i64> = (0..70).collect();
        self.wait_live_ids(&want).await?;
        let rate = js(
            c,
            "return Number(document.querySelector('#live-rate').dataset.total)",
        )
        .await?;
        assert_eq!(rate, json!(70), "the sparkline counted every event");
        self.clean("live").await?;

        // 1,000 WEB events/s for 3 s (and as many LB): every one received, 500 rows kept. The
        // page's long tasks (> 50 ms on its main thread) are reported, not asserted.
        js(c, "window.__long = []; new PerformanceObserver(l => window.__long.push(...l.getEntries().map(e => e.duration))).observe({type: 'longtask'}); return 1").await?;
        let started = Instant::now();
        for i in 0..30 {
            post(self.server, &live_batch(10_000 + i * 100, 100));
            let next = Duration::from_millis(100 * (i as u64 + 1));
            tokio::time::sleep(next.saturating_sub(started.elapsed())).await;
        }
        let posted = started.elapsed();
        wait_js(
            c,
            "return Number(document.querySelector('#live-rate').dataset.total) === 3070",
            "3,070 events received",
        )
        .await?;
        let rows = wait_js(
            c,
            "const n = document.querySelectorAll('#live-rows tr').length; return n === 500 && n",
            "500 rows kept",
        )
        .await?;
        assert_eq!(rows, json!(500));
        let newest = js(
            c,
            "return JSON.parse(document.querySelector('#live-rows tr').dataset.event).live_id",
        )
        .await?;
        assert_eq!(
            newest,
            json!(10_000 + 29 * 100 + 99),
            "the newest row is the last event"
        );
        let long = js(c, "return window.__long").await?;
        let long: Vec<f64> = long
            .as_array()
            .map_or_else(Vec::new, |a| a.iter().filter_map(Value::as_f64).collect());
        eprintln!(
            "console: live at ~1,000 WEB events/s (posted in {:.1} s): {} long tasks, longest {:.0} ms",
            posted.as_secs_f64(),
            long.len(),
            long.iter().cloned().fold(0.0, f64::max)
        );
        self.shot("live-1000").await?;
        self.clean("live at 1,000/s").await?;

        // Rollups: a chart per aggregation; the count chart's total is the WEB events'.
        goto(
            c,
            &format!(
                "{}/#/rollups?name=web_status&from={from}&to={to}",
                self.base
            ),
        )
        .await?;
        let n = wait_js(c, "const n = document.querySelectorAll('.rollup-chart .uplot').length; return n >= 3 && n", "the rollup charts").await?;
        assert_eq!(n, json!(3));
        let count = js(
            c,
            "return Number(document.querySelector('.rollup-chart[data-agg=count]').dataset.total)",
        )
        .await?;
        assert_eq!(count, json!(web), "the rollup's counts vs the WEB events");
        self.shot("rollups").await?;
        // A group ticked: drawn too (a line per ticked group), and in the URL.
        let before = js(
            c,
            "return document.querySelectorAll('#rollup-groups input:checked').length",
        )
        .await?;
        let before = before.as_u64().unwrap_or(0);
        c.find(Locator::Css("#rollup-groups input:not(:checked)"))
            .await
            .map_err(s)?
            .click()
            .await
            .map_err(s)?;
        wait_js(c, &format!("const lines = document.querySelectorAll('.rollup-chart[data-agg=count] .u-series').length - 1; return location.hash.includes('groups=') && lines === {}", before + 1), "the ticked group drawn").await?;
        // Another step (6 × 10 s): fewer points, the same events.
        goto(
            c,
            &format!(
                "{}/#/rollups?name=web_status&from={from}&to={to}&step=60",
                self.base
            ),
        )
        .await?;
        let count = wait_js(c, "const p = document.querySelector('.rollup-chart[data-agg=count]'); return p && document.getElementById('step').value === '60' && Number(p.dataset.total)", "the rollup at step 60").await?;
        assert_eq!(count, json!(web), "the rollup's counts at step 60");
        self.clean("rollups").await?;

        // Alerts: the rules, or "no alerts API" while the endpoint is not there.
        // With the API, a rule over the rollup, whose backtest the page draws point for point.
        let alerts_api = self.server.get("/v1/alerts");
        let backtest = if alerts_api.status == 404 {
            None
        } else {
            let rule = r#"{"name":"web_busy","rollup":"web_status","by":["status"],"expr":"sum(count) > 20"}"#;
            let (code, text) = self.admin("POST", "/v1/alerts", rule);
            assert_eq!(code, 201, "{text}");
            let (code, text) = self.admin(
                "GET",
                &format!("/v1/alerts/web_busy/test?from={from}&to={to}"),
                "",
            );
            assert_eq!(code, 200, "{text}");
            let bt: Value = serde_json::from_str(&text).map_err(s)?;
            Some(bt)
        };
        goto(c, &format!("{}/#/alerts?from={from}&to={to}", self.base)).await?;
        let shown = wait_js(
            c,
            "return document.querySelector('#alerts-missing, #alerts-rules')?.id",
            "the alerts screen",
        )
        .await?;
        match &backtest {
            None => assert_eq!(shown, json!("alerts-missing")),
            Some(bt) => {
                assert_eq!(shown, json!("alerts-rules"), "{}", alerts_api.text());
                let drawn = wait_js(c, "const p = document.querySelector('#alerts-backtest'); return p?.dataset.points !== undefined && [Number(p.dataset.points), Number(p.dataset.transitions)]", "the backtest").await?;
                let points = bt["points"].as_array().map_or(0, Vec::len);
                let transitions = bt["transitions"].as_array().map_or(0, Vec::len);
                assert!(points > 0, "{bt}");
                assert_eq!(drawn, json!([points, transitions]));
            }
        }
        self.shot("alerts").await?;
        self.clean("alerts").await?;

        // Health: the stored count of the history's seconds is the history.
        goto(c, &format!("{}/#/health?from={from}&to={to}", self.base)).await?;
        let stored = wait_js(
            c,
            "return document.querySelector('#health-counts')?.dataset.stored",
            "the completeness counts",
        )
        .await?;
        assert_eq!(stored, json!(total.to_string()));
        let ins = wait_js(
            c,
            "return document.querySelector('[data-metric=events_in]')?.dataset.value",
            "the /metrics essentials",
        )
        .await?;
        let ins: f64 = ins.as_str().unwrap().parse().map_err(s)?;
        assert!(ins >= (total + 70) as f64, "events in {ins}");
        self.shot("health").await?;
        self.clean("health").await?;

        // Drops: an event without a type, dropped; the page's count of the dropped (and of the
        // incomplete seconds) is what /v1/counts says.
        let since = common::now() - 2;
        let r = process::try_request(
            self.server.addr,
            "POST",
            "/v1/events",
            br#"[{"type":"WEB","x":1},{"x":2}]"#,
        )
        .map_err(s)?;
        assert_eq!(r.status, 200, "{}", r.text());
        let api_dropped = || -> u64 {
            let r = self
                .server
                .get(&format!("/v1/counts?from={since}&to={}", since + 60));
            process::lines(&r.text())
                .iter()
                .map(|l| {
                    let reasons: u64 = l["dropped"].as_object().map_or(0, |d| {
                        d.iter()
                            .filter(|(k, _)| !k.starts_with("substream:"))
                            .filter_map(|(_, v)| v.as_u64())
                            .sum()
                    });
                    reasons + l["kernel_dropped"].as_u64().unwrap_or(0)
                })
                .sum()
        };
        common::wait_for(WAIT, "the drop counted", || api_dropped() >= 1);
        let want = api_dropped();
        goto(
            c,
            &format!("{}/#/health?from={since}&to={}", self.base, since + 60),
        )
        .await?;
        let shown = wait_js(c, "const p = document.querySelector('#health-counts'); return document.getElementById('main').dataset.hash === location.hash && p?.dataset.dropped !== undefined && [Number(p.dataset.dropped), Number(p.dataset.incomplete)]", "the drops").await?;
        assert_eq!(shown[0], json!(want), "dropped per /v1/counts");
        assert!(
            shown[1].as_u64().unwrap_or(0) >= 1,
            "an incomplete second: {shown}"
        );
        self.shot("health-drops").await?;
        self.clean("health drops").await?;
        Ok(())
    }

    /// Opens `url` (an Explore view) and returns its legend once drawn.
    async fn explore(&self, url: &str) -> R<BTreeMap<String, u64>> {
        goto(self.c, url).await?;
        self.wait_legend().await
    }

    /// The legend of the histogram once its run is done: series → total.
    async fn wait_legend(&self) -> R<BTreeMap<String, u64>> {
        wait_js(self.c, "return document.getElementById('main').dataset.hash === location.hash && document.querySelector('#table-note')?.dataset.rows !== undefined && document.querySelector('#hist-total')?.dataset.total !== undefined", "the histogram and the table").await?;
        let v = js(self.c, "return [...document.querySelectorAll('#hist-legend .legend-item')].map(e => [e.dataset.series, Number(e.dataset.total)])").await?;
        Ok(v.as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_str().unwrap().to_owned(), p[1].as_u64().unwrap()))
            .collect())
    }

    async fn wait_live_ids(&self, want: &[i64]) -> R<()> {
        let script = "return [...document.querySelectorAll('#live-rows tr')].map(r => JSON.parse(r.dataset.event).live_id)";
        let deadline = Instant::now() + WAIT;
        loop {
            let v = js(self.c, script).await?;
            let mut ids: Vec<i64> = v
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_i64)
                .collect();
            ids.sort_unstable();
            if ids == want {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("live rows {ids:?}, wanted {want:?}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn shot(&self, name: &str) -> R<()> {
        shot(self.c, self.shots, name).await
    }

    /// `method path` with the server's local secret (admin): (status, body).
    fn admin(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let secret = std::fs::read_to_string(self.data.join("admin.secret")).unwrap_or_default();
        let req = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .build()
            .request(method, &format!("{}{path}", self.base))
            .set("authorization", &format!("Bearer {}", secret.trim()));
        let r = if body.is_empty() {
            req.call()
        } else {
            req.set("content-type", "application/json")
                .send_string(body)
        };
        match r {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        }
    }

    /// No JavaScript error so far (`step` names the step that failed).
    async fn clean(&self, step: &str) -> R<()> {
        no_js_errors(self.c, step).await
    }
}

async fn shot(c: &Client, dir: &Path, name: &str) -> R<()> {
    // Charts draw on the next frame.
    js(
        c,
        "return new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))",
    )
    .await?;
    let png = c.screenshot().await.map_err(s)?;
    std::fs::write(dir.join(format!("{name}.png")), png).map_err(s)
}

async fn no_js_errors(c: &Client, step: &str) -> R<()> {
    let errs = js(c, "return window.__consoleErrors").await?;
    if errs.as_array().is_some_and(|a| a.is_empty()) {
        Ok(())
    } else {
        Err(format!("JavaScript errors after {step}: {errs}"))
    }
}

/// A second server with `--auth`: the page loads, its reads answer 401 until a read token is
/// pasted into the header, then Explore shows the event.
fn auth_run(chromedriver: &Path, dir: &Path, shots: &Path) -> R<()> {
    let adir = dir.join("auth");
    let data = adir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = adir.join("sluice.toml");
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\ntcp = \"off\"\nudp = \"off\"\ngrace_ms = 100\nauth = true\n"),
    )
    .unwrap();
    let server = Server::start(&config, &data);
    let base = format!("http://{}", server.addr);
    let made = common::sluice(&[
        "token",
        "create",
        "--name",
        "viewer",
        "--scope",
        "read,ingest",
        "--data",
        data.to_str().unwrap(),
        "--server",
        &base,
    ]);
    common::assert_success(&made);
    let secret = String::from_utf8_lossy(&made.stdout)
        .split_whitespace()
        .find(|w| w.starts_with("sluice_"))
        .ok_or("no secret printed by sluice token create")?
        .to_owned();
    let t = common::now() - 5;
    let body = format!("{{\"type\":\"AUTHED\",\"epoch\":{t},\"n\":1}}");
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let bearer = format!("Bearer {secret}");
    agent
        .post(&format!("{base}/v1/events"))
        .set("authorization", &bearer)
        .send_string(&body)
        .map_err(s)?;
    common::wait_for(WAIT, "the event stored", || {
        agent
            .get(&format!("{base}/v1/events?from={}&to={}", t - 60, t + 60))
            .set("authorization", &bearer)
            .call()
            .ok()
            .and_then(|r| r.into_string().ok())
            .is_some_and(|t| t.contains("AUTHED"))
    });
    let driver = Driver::start(chromedriver, &adir);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async {
        let c = driver.session(&adir.join("chromium"), 1300, 1000).await?;
        let r = async {
            let url = format!("{base}/#/explore?from={}&to={}", t - 60, t + 60);
            goto(&c, &url).await?;
            let err = wait_js(
                &c,
                "return document.querySelector('#errors pre.error')?.textContent",
                "the 401",
            )
            .await?;
            assert!(err.as_str().unwrap().contains("token"), "{err}");
            let input = c.find(Locator::Css("#token")).await.map_err(s)?;
            input.send_keys(&secret).await.map_err(s)?;
            c.find(Locator::Css("#token-form button"))
                .await
                .map_err(s)?
                .click()
                .await
                .map_err(s)?;
            let total = wait_js(
                &c,
                "return document.querySelector('#hist-total')?.dataset.total",
                "the events with the token",
            )
            .await?;
            assert_eq!(total, json!("1"));
            // The token stays in this tab's sessionStorage, never in the URL.
            let hash = js(&c, "return location.href").await?;
            assert!(!hash.as_str().unwrap().contains(&secret));
            shot(&c, shots, "auth-token").await?;
            no_js_errors(&c, "auth").await
        }
        .await;
        let _ = c.close().await;
        r
    });
    drop(driver);
    server.stop();
    result
}

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn enc(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A parameter of a view's hash (`#/explore?from=…`).
fn param(hash: &str, key: &str) -> String {
    let q = hash.split_once('?').map_or("", |(_, q)| q);
    q.split('&')
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or("")
        .to_owned()
}

/// POSTs an NDJSON body; it must all be accepted.
fn post(server: &Server, body: &[u8]) {
    let r = process::try_request(server.addr, "POST", "/v1/events", body).expect("POST");
    assert_eq!(r.status, 200, "{}", r.text());
    let v: Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(v["dropped_total"], 0, "{v}");
}

/// `n` WEB events (and as many LB ones, which the Live filter hides) numbered from `first`.
fn live_batch(first: i64, n: i64) -> Vec<u8> {
    let mut out = String::new();
    for i in first..first + n {
        out.push_str(&format!(
            "{{\"type\":\"WEB\",\"subtype\":\"live\",\"live_id\":{i}}}\n"
        ));
        out.push_str(&format!("{{\"type\":\"LB\",\"live_id\":{}}}\n", 1000 + i));
    }
    out.into_bytes()
}

/// `sluice cat --count-by type` over `[from, to)` (with `--where`).
fn count_by(base: &str, from: i64, to: i64, filter: Option<&str>) -> BTreeMap<String, u64> {
    count_by_field(base, from, to, "type", filter)
}

/// `sluice cat --count-by FIELD` over `[from, to)` (with `--where`): value as text → count.
fn count_by_field(
    base: &str,
    from: i64,
    to: i64,
    field: &str,
    filter: Option<&str>,
) -> BTreeMap<String, u64> {
    let (f, t) = (from.to_string(), to.to_string());
    let mut args = vec![
        "cat",
        "--server",
        base,
        "--from",
        &f,
        "--to",
        &t,
        "--count-by",
        field,
        "--top",
        "1000",
    ];
    if let Some(w) = filter {
        args.extend(["--where", w]);
    }
    let out = common::sluice(&args);
    common::assert_success(&out);
    process::lines(&String::from_utf8_lossy(&out.stdout))
        .into_iter()
        .map(|v| {
            let key = match &v[field] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (key, v["count"].as_u64().unwrap())
        })
        .collect()
}

/// `sluice cat` over `[from, to)`: the events.
fn cat_events(base: &str, from: i64, to: i64, filter: Option<&str>) -> Vec<Value> {
    let (f, t) = (from.to_string(), to.to_string());
    let mut args = vec!["cat", "--server", base, "--from", &f, "--to", &t];
    if let Some(w) = filter {
        args.extend(["--where", w]);
    }
    let out = common::sluice(&args);
    common::assert_success(&out);
    process::lines(&String::from_utf8_lossy(&out.stdout))
}

/// The sum of the rollup's `count` over `[from, to)` (0 until it answers).
fn rollup_count(base: &str, from: i64, to: i64) -> u64 {
    let addr = base.trim_start_matches("http://").parse().unwrap();
    let Ok(r) = process::try_request(
        addr,
        "GET",
        &format!("/v1/rollups/web_status?from={from}&to={to}"),
        b"",
    ) else {
        return 0;
    };
    let v: Value = serde_json::from_str(&r.text()).unwrap_or_default();
    v["rows"].as_array().map_or(0, |rows| {
        rows.iter().filter_map(|r| r["count"].as_u64()).sum()
    })
}

/// The events of the table (each row's JSON, as its detail shows it).
async fn table_events(c: &Client) -> R<Vec<Value>> {
    let v = js(
        c,
        "return [...document.querySelectorAll('#results tr.row')].map(r => r.dataset.event)",
    )
    .await?;
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| serde_json::from_str(t.as_str().unwrap_or("null")).map_err(s))
        .collect()
}

async fn goto(c: &Client, url: &str) -> R<()> {
    c.goto(url).await.map_err(|e| format!("goto {url}: {e}"))
}

async fn js(c: &Client, script: &str) -> R<Value> {
    c.execute(script, vec![])
        .await
        .map_err(|e| format!("{script}: {e}"))
}

/// Polls `script` until it returns something truthy (WAIT at most): that value.
async fn wait_js(c: &Client, script: &str, what: &str) -> R<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let v = js(c, script).await?;
        let truthy =
            !matches!(&v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("");
        if truthy {
            return Ok(v);
        }
        if Instant::now() > deadline {
            let errs = js(c, "return window.__consoleErrors")
                .await
                .unwrap_or_default();
            let text = js(c, "return document.getElementById('main')?.innerText")
                .await
                .unwrap_or_default();
            return Err(format!(
                "{what}: not shown within {WAIT:?}; JS errors {errs}; page:\n{}",
                text.as_str().unwrap_or("")
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Where the screenshots go: `target/console-screenshots/`.
fn screenshots_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("console-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// chromedriver's path; a failure naming `scripts/chromium.sh` when the browser is missing.
fn browser_installed() -> PathBuf {
    browser::chromedriver().unwrap_or_else(|why| {
        panic!(
            "the console test cannot run: {why}; make test runs scripts/chromium.sh, or set \
             SLUICE_SKIP_BROWSER=1 to skip it"
        )
    })
}
