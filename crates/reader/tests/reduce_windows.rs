//! A reduce's windows as people read them: a window the read's range cuts (the first when
//! `from` is not on a boundary, the last when `to` is not) carries `"partial": true`; the human
//! formats show `window` as a time with a `~partial` mark, `json` keeps Unix seconds.

use sluice_reader::reduce::{Plan, PlanArgs, Sink};
use sluice_reader::{EventWriter, OutputFormat};

/// 2026-11-29T05:00:00Z, a minute boundary.
const T: i64 = 1_795_928_400;

/// The rows of `count` per 1-minute window over one event per 10 s of `[from, to)`.
fn rows(from: i64, to: i64, range: Option<(i64, i64)>) -> Vec<sereal::Value> {
    let mut plan: Plan = PlanArgs {
        agg: vec!["count".into()],
        window: Some("1m".into()),
        ..PlanArgs::default()
    }
    .plan(false)
    .unwrap()
    .unwrap();
    if let Some((f, t)) = range {
        plan.set_range(f, t);
    }
    let mut sink = Sink::new(plan).unwrap();
    let event = sereal::json::from_json_slice(br#"{"type":"WEB"}"#).unwrap();
    let mut out = Vec::new();
    for e in (from..to).step_by(10) {
        out.extend(sink.push(e, &event).unwrap());
    }
    out.extend(sink.finish().0);
    out
}

fn json(rows: &[sereal::Value]) -> Vec<String> {
    rows.iter()
        .map(|r| sereal::json::to_json_value(r).to_string())
        .collect()
}

#[test]
fn cut_windows_are_partial() {
    // 05:00:30 to 05:02:20: the first and last minutes are cut, the middle one is whole.
    let (from, to) = (T + 30, T + 140);
    assert_eq!(
        json(&rows(from, to, Some((from, to)))),
        vec![
            format!(r#"{{"window":{T},"partial":true,"count":3}}"#),
            format!(r#"{{"window":{},"count":6}}"#, T + 60),
            format!(r#"{{"window":{},"partial":true,"count":2}}"#, T + 120),
        ]
    );
    // Aligned: nothing is partial.
    let (from, to) = (T, T + 120);
    assert!(json(&rows(from, to, Some((from, to))))
        .iter()
        .all(|r| !r.contains("partial")));
    // No range given (a substream, a rollup state): nothing is marked.
    assert!(json(&rows(T + 30, T + 140, None))
        .iter()
        .all(|r| !r.contains("partial")));
}

#[test]
fn human_formats_show_the_window_as_a_time_and_json_keeps_seconds() {
    let rows = rows(T + 30, T + 140, Some((T + 30, T + 140)));
    let render = |format: OutputFormat| {
        let mut w = EventWriter::new(Vec::new(), format).rows();
        for r in &rows {
            w.write(r).unwrap();
        }
        w.finish().unwrap();
        String::from_utf8(w.into_inner()).unwrap()
    };
    let table = render(OutputFormat::Table);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(
        lines[0].starts_with("WINDOW") && !lines[0].contains("PARTIAL"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("2026-11-29T05:00:00Z ~partial"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("2026-11-29T05:01:00Z") && !lines[2].contains('~'),
        "{table}"
    );
    assert!(
        lines[3].starts_with("2026-11-29T05:02:00Z ~partial"),
        "{table}"
    );
    let pretty = render(OutputFormat::Pretty);
    assert!(
        pretty.contains("window=2026-11-29T05:01:00Z count=6"),
        "{pretty}"
    );

    let raw = render(OutputFormat::Json);
    assert!(
        raw.starts_with(&format!(r#"{{"window":{T},"partial":true,"count":3}}"#)),
        "{raw}"
    );

    // Events (not rows) keep a field named `window` as it is.
    let mut w = EventWriter::new(Vec::new(), OutputFormat::Table);
    w.write(&sereal::json::from_json_slice(br#"{"window":5}"#).unwrap())
        .unwrap();
    w.finish().unwrap();
    assert!(String::from_utf8(w.into_inner()).unwrap().contains('5'));
}
