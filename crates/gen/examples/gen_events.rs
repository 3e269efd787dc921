//! Print generated events as JSON lines:
//! `cargo run -p sluice-gen --example gen_events -- [COUNT] [SEED] [web|mixed] [WEB_JSON_BYTES]`.
fn main() {
    let mut args = std::env::args().skip(1);
    let count = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let seed = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let mut cfg = match args.next().as_deref() {
        Some("web") => sluice_gen::GenConfig::web(seed, count),
        _ => sluice_gen::GenConfig::mixed(seed, count),
    };
    if let Some(size) = args.next().and_then(|a| a.parse().ok()) {
        cfg.web_json_bytes = size;
    }
    let stdout = std::io::stdout();
    if let Err(e) = sluice_gen::write_json_lines(&cfg, stdout.lock()) {
        eprintln!("gen_events: {e}");
        std::process::exit(1);
    }
}
