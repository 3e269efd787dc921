//! What a range read asks a server: `--no-columns` (`HttpOptions::no_columns`) reaches it as
//! `columns=off`, and without it the parameter is absent (the server's default: columns on).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use sluice_client::{HttpOptions, HttpReader};
use sluice_reader::{OutputFormat, Selection};

/// The request line of one `events` call made with `no_columns`.
fn asked(no_columns: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    let addr = listener.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut line = String::new();
        BufReader::new(s.try_clone().expect("clone"))
            .read_line(&mut line)
            .expect("request line");
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .expect("answer");
        line
    });
    let opts = HttpOptions {
        no_columns,
        ..HttpOptions::default()
    };
    let reader = HttpReader::new(&format!("http://{addr}"), &opts).expect("reader");
    reader
        .events(1, 2, &Selection::default(), OutputFormat::Json)
        .expect("events");
    server.join().expect("server")
}

#[test]
fn no_columns_reaches_the_server_as_columns_off() {
    assert!(asked(true).contains("columns=off"), "{}", asked(true));
    assert!(!asked(false).contains("columns="), "{}", asked(false));
}
