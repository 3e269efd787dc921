//! A selection round trip through its three spellings: query string -> Selection -> CLI flags
//! (parsed by the real clap definition) -> Selection -> query string.

use clap::Parser;
use sluice_client::SelectionArgs;
use sluice_reader::Selection;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    selection: SelectionArgs,
}

fn through_flags(sel: &Selection) -> Selection {
    let args = std::iter::once("test".to_owned()).chain(sel.to_args());
    let flags = Flags::try_parse_from(args).expect("flags parse");
    flags.selection.selection().expect("selection parses")
}

#[test]
fn query_selection_flags_round_trip() {
    let queries = [
        "",
        "dc=ams1",
        "type=WEB&subtype=",
        "dc=lhr2&type=CRON&subtype=nightly&select=status&select=timings.db_ms&where=status+%3E%3D+500",
        "select=%22a+b%22.c&select=list%5B*%5D.x&where=not+exists+x+or+path+%3D%3D+%22-%26%3D%22",
        "dc=-lhr&type=--x&where=a+%3E+-1",
    ];
    for q in queries {
        let sel = Selection::from_query(q).expect(q);
        assert_eq!(sel.to_query(), q, "query -> selection -> query");
        let back = through_flags(&sel);
        assert_eq!(back, sel, "{q}: selection -> flags -> selection");
        assert_eq!(back.to_query(), q);
    }
}

#[test]
fn flags_reject_what_the_query_rejects() {
    for bad in [vec!["--where", "status >"], vec!["--select", "a..b"]] {
        let flags =
            Flags::try_parse_from(std::iter::once("t").chain(bad.iter().copied())).expect("clap");
        let err = flags.selection.selection().expect_err("invalid");
        let q = format!("{}={}", err.param, "x");
        assert!(q.starts_with(bad[0].trim_start_matches('-')), "{err}");
    }
}
