//! The token on the wire, against scripted peers on loopback: every HTTP client sends
//! `Authorization: Bearer <token>` (and none without a token); the TCP sender sends
//! `auth <token>` first, goes on after `ok auth <name>` and fails with any other answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_client::{
    ClientOptions, HttpOptions, HttpReader, SendOptions, Sender, SubstreamAdmin, Transport,
};

/// Reads one request (head and a `content-length` body) and returns its head lines, lowercased.
fn read_request(s: &TcpStream) -> Vec<String> {
    let mut r = BufReader::new(s.try_clone().expect("clone"));
    let mut head = Vec::new();
    let mut len = 0usize;
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).expect("head") == 0 || l == "\r\n" {
            break;
        }
        let l = l.trim_end().to_ascii_lowercase();
        if let Some(v) = l.strip_prefix("content-length:") {
            len = v.trim().parse().expect("content-length");
        }
        head.push(l);
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).expect("body");
    head
}

/// A peer answering `n` requests with `body` (JSON), returning their heads.
fn http_peer(n: usize, body: &'static str) -> (String, JoinHandle<Vec<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let t = std::thread::spawn(move || {
        let mut heads = Vec::new();
        for _ in 0..n {
            let (mut s, _) = listener.accept().expect("accept");
            heads.push(read_request(&s));
            let resp = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            s.write_all(resp.as_bytes()).expect("write");
        }
        heads
    });
    (addr, t)
}

fn with_token(token: Option<&str>) -> ClientOptions {
    ClientOptions {
        token: token.map(str::to_owned),
        ..ClientOptions::default()
    }
}

fn authorization(head: &[String]) -> Option<&str> {
    head.iter().find_map(|l| l.strip_prefix("authorization: "))
}

#[test]
fn http_clients_send_the_token() {
    let (addr, peer) = http_peer(4, r#"{"accepted":1}"#);
    let http = HttpOptions::default().with_client(with_token(Some("sluice_abc_def")));
    // The reader.
    let reader = HttpReader::new(&addr, &http).expect("reader");
    reader.counts(0, 10, None).expect("counts");
    // The sender over HTTP.
    let opts = SendOptions {
        client: with_token(Some("sluice_abc_def")),
        ..SendOptions::default()
    };
    let mut sender = Sender::connect(&Transport::Http(addr.clone()), &opts).expect("sender");
    sender.send_line(b"{\"type\":\"WEB\"}").expect("send");
    let sent = sender.finish().expect("finish");
    assert_eq!(sent.accepted, 1);
    // The admin client: its own token wins over the options'.
    let admin = SubstreamAdmin::new(&addr, &http)
        .expect("admin")
        .with_token(Some("sluice_admin_x".into()));
    admin.list().expect("list");
    // No token: no header.
    let plain = HttpReader::new(&addr, &HttpOptions::default()).expect("reader");
    plain.counts(0, 10, None).expect("counts");
    let heads = peer.join().expect("peer");
    assert_eq!(heads.len(), 4);
    // Header values are lowercased by `read_request`.
    assert_eq!(
        authorization(&heads[0]),
        Some("bearer sluice_abc_def"),
        "{:?}",
        heads[0]
    );
    assert_eq!(
        authorization(&heads[1]),
        Some("bearer sluice_abc_def"),
        "{:?}",
        heads[1]
    );
    assert_eq!(
        authorization(&heads[2]),
        Some("bearer sluice_admin_x"),
        "{:?}",
        heads[2]
    );
    assert_eq!(
        heads[2]
            .iter()
            .filter(|l| l.starts_with("authorization:"))
            .count(),
        1
    );
    assert_eq!(authorization(&heads[3]), None, "{:?}", heads[3]);
}

/// A TCP peer: reads the first line, answers `first_reply`; then answers every line `ok 1 0`.
fn tcp_peer(first_reply: &'static str) -> (String, JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let t = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut r = BufReader::new(s.try_clone().expect("clone"));
        let mut lines = Vec::new();
        let mut first = true;
        loop {
            let mut l = String::new();
            if r.read_line(&mut l).unwrap_or(0) == 0 {
                break;
            }
            lines.push(l.trim_end().to_owned());
            let reply = if first { first_reply } else { "ok 1 0\n" };
            first = false;
            if s.write_all(reply.as_bytes()).is_err() || reply.contains("closing") {
                break;
            }
        }
        lines
    });
    (addr, t)
}

#[test]
fn tcp_sends_auth_first() {
    let (addr, peer) = tcp_peer("ok auth team-a\n");
    let opts = SendOptions {
        client: with_token(Some("sluice_t_1")),
        ..SendOptions::default()
    };
    let mut sender = Sender::connect(&Transport::Tcp(addr), &opts).expect("connect");
    sender.send_line(b"{\"type\":\"WEB\"}").expect("send");
    let sent = sender.finish().expect("finish");
    assert_eq!(sent.accepted, 1);
    let lines = peer.join().expect("peer");
    assert_eq!(lines, vec!["auth sluice_t_1", "{\"type\":\"WEB\"}"]);
}

#[test]
fn tcp_auth_refused_is_the_error() {
    let (addr, peer) = tcp_peer("error unauthorized unknown token; closing\n");
    let opts = SendOptions {
        client: with_token(Some("sluice_bad_1")),
        ..SendOptions::default()
    };
    let err = match Sender::connect(&Transport::Tcp(addr), &opts) {
        Ok(_) => panic!("a refused token must fail the connect"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("error unauthorized unknown token; closing"),
        "{err}"
    );
    assert_eq!(peer.join().expect("peer"), vec!["auth sluice_bad_1"]);
}

#[test]
fn tcp_without_token_sends_no_auth_line() {
    let (addr, peer) = tcp_peer("ok 1 0\n");
    let mut sender =
        Sender::connect(&Transport::Tcp(addr), &SendOptions::default()).expect("connect");
    sender.send_line(b"{\"type\":\"WEB\"}").expect("send");
    assert_eq!(sender.finish().expect("finish").accepted, 1);
    assert_eq!(peer.join().expect("peer"), vec!["{\"type\":\"WEB\"}"]);
}
