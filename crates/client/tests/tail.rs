//! `TailClient` against a scripted SSE peer on loopback: a batch cut before its cursor is not
//! handed out (it comes again after the reconnect), the reconnect carries the last cursor,
//! `event: shutdown` leads to a reconnect, and a 400 is final.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use sluice_client::{Backoff, ClientError, HttpOptions, TailClient, TailItem, TailStart};
use sluice_reader::Selection;

/// Reads one request's head and returns its request line.
fn request_line(s: &TcpStream) -> String {
    let mut r = BufReader::new(s.try_clone().expect("clone"));
    let mut first = String::new();
    r.read_line(&mut first).expect("request line");
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).expect("header") == 0 || l == "\r\n" {
            break;
        }
    }
    first
}

fn sse(s: &mut TcpStream, body: &str) {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    s.write_all(head.as_bytes()).expect("write");
    s.write_all(body.as_bytes()).expect("write");
}

#[test]
fn partial_batches_are_dropped_and_the_cursor_resumes() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let peer = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let (mut s, _) = listener.accept().expect("accept 1");
        lines.push(request_line(&s));
        sse(&mut s, "event: event\ndata: {\"id\":1}\n\nevent: cursor\ndata: C1\n\nevent: event\ndata: {\"id\":2}\n\n");
        drop(s); // cut before the second batch's cursor
        let (mut s, _) = listener.accept().expect("accept 2");
        lines.push(request_line(&s));
        sse(&mut s, "event: event\ndata: {\"id\":2}\n\nevent: warning\ndata: {\"key\":\"k\"}\n\nevent: cursor\ndata: C2\n\nevent: event\ndata: {\"id\":3}\n\nevent: shutdown\ndata: {\"reason\":\"x\"}\n\n");
        drop(s);
        let (mut s, _) = listener.accept().expect("accept 3");
        lines.push(request_line(&s));
        let body = "bad cursor";
        let resp = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(resp.as_bytes()).expect("write");
        lines
    });

    let selection = Selection::from_query("type=WEB").expect("selection");
    let http = HttpOptions {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
        ..HttpOptions::default()
    };
    let backoff = Backoff {
        first: Duration::from_millis(10),
        max: Duration::from_millis(20),
    };
    let mut client = TailClient::new(
        &addr.to_string(),
        &selection,
        TailStart::At(1_700_000_000),
        &http,
        backoff,
    )
    .expect("client");
    let mut items = Vec::new();
    let err = loop {
        match client.next_item() {
            Ok(item) => items.push(item),
            Err(e) => break e,
        }
        assert!(items.len() < 20, "{items:?}");
    };
    assert!(
        matches!(err, ClientError::Status { status: 400, .. }),
        "{err}"
    );
    let batches: Vec<(Vec<String>, Vec<String>, String)> = items
        .iter()
        .filter_map(|i| match i {
            TailItem::Batch(b) => Some((b.events.clone(), b.warnings.clone(), b.cursor.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        batches,
        vec![
            (vec!["{\"id\":1}".to_owned()], vec![], "C1".to_owned()),
            (
                vec!["{\"id\":2}".to_owned()],
                vec!["{\"key\":\"k\"}".to_owned()],
                "C2".to_owned()
            ),
        ],
        "{items:?}"
    );
    assert_eq!(client.cursor(), Some("C2"));
    let reconnects = items
        .iter()
        .filter(|i| matches!(i, TailItem::Reconnecting { .. }))
        .count();
    assert_eq!(reconnects, 2, "{items:?}");
    assert!(items.iter().any(
        |i| matches!(i, TailItem::Reconnecting { reason, .. } if reason.contains("shutting down"))
    ));

    let requests = peer.join().expect("peer");
    assert!(
        requests[0].contains("from=1700000000") && requests[0].contains("type=WEB"),
        "{}",
        requests[0]
    );
    assert!(requests[1].contains("cursor=C1"), "{}", requests[1]);
    assert!(requests[2].contains("cursor=C2"), "{}", requests[2]);
}
