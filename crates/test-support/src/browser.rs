//! Headless Chromium driven over WebDriver, for tests that open a real page: Debian's
//! `chromedriver` on a free port in a process group of its own (so that the browsers it starts
//! go with it), and fresh browser sessions on it.
//!
//! What it takes to drive Chromium here (`--no-sandbox` as root; the real binary
//! `/usr/lib/chromium/chromium`, not the `/usr/bin/chromium` wrapper; a profile and a home of
//! its own) is adapted from the project's research probe (`shared/research/browser.md` and
//! `browser-probe/tests/browser.rs`, 2026-11-24). `scripts/chromium.sh` installs the browser;
//! whether a test skips or fails without it is the test's call ([`chromedriver`] says why).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

/// The Chromium binary itself (the `/usr/bin/chromium` wrapper adds flags from /etc/chromium.d).
pub const CHROMIUM: &str = "/usr/lib/chromium/chromium";

/// chromedriver's path when it is on `PATH` and [`CHROMIUM`] is installed; otherwise what is
/// missing and how to install it.
pub fn chromedriver() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|d| d.join("chromedriver"))
        .find(|p| p.is_file());
    let why = match (found, Path::new(CHROMIUM).is_file()) {
        (Some(p), true) => return Ok(p),
        (None, _) => "chromedriver is not on PATH".to_string(),
        (_, false) => format!("{CHROMIUM} is missing"),
    };
    Err(format!(
        "Debian's chromium and chromium-driver are needed: {why} (scripts/chromium.sh installs \
         them: apt-get install --no-install-recommends chromium chromium-driver \
         fonts-dejavu-core)"
    ))
}

/// A running chromedriver; dropping it kills its process group (chromedriver and any browser
/// it left).
pub struct Driver {
    child: Child,
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Driver {
    /// Starts `chromedriver` (the path [`chromedriver`] found) on a free port, with Chromium's
    /// config and cache (crash reports included) under `dir/home`, so that they go with the
    /// test's directory rather than into the user's home. Panics when it is not up within 20 s.
    pub fn start(chromedriver: &Path, dir: &Path) -> Driver {
        use std::os::unix::process::CommandExt;
        let home = dir.join("home");
        let mut child = Command::new(chromedriver)
            .arg("--port=0")
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", chromedriver.display()));
        let out = child.stdout.take().expect("piped stdout");
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let kept = lines.clone();
        // Read its port, then drain its output for as long as it runs (a full pipe would stall
        // it).
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(p) = line
                    .strip_prefix("ChromeDriver was started successfully on port ")
                    .and_then(|p| p.trim_end_matches('.').parse::<u16>().ok())
                {
                    let _ = tx.send(p);
                }
                kept.lock().unwrap().push(line);
            }
        });
        let mut driver = Driver {
            child,
            port: 0,
            lines,
        };
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(port) => driver.port = port,
            Err(_) => panic!("chromedriver did not start within 20 s:\n{}", driver.log()),
        }
        driver
    }

    /// What chromedriver printed so far.
    pub fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// A WebDriver session on a fresh headless Chromium with its profile under `profile` and a
    /// window of `width` × `height`; the error carries chromedriver's output.
    pub async fn session(&self, profile: &Path, width: u32, height: u32) -> Result<Client, String> {
        let caps = json!({ "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     format!("--window-size={width},{height}"),
                     "--disable-background-networking", "--disable-component-update",
                     "--disable-quic", "--no-first-run", "--disable-breakpad",
                     format!("--user-data-dir={}", profile.display())] } });
        let caps = caps.as_object().expect("an object").clone();
        // chromedriver may need a moment before it takes sessions.
        let mut tries = 0;
        loop {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{}", self.port))
                .await
            {
                Ok(c) => return Ok(c),
                Err(_) if tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(format!("no WebDriver session: {e}\n{}", self.log())),
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group: chromedriver and any browser it left.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
