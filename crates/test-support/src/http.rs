//! A minimal HTTP/1.1 client on a `TcpStream`: one request a connection (`Connection: close`),
//! every step bounded, the answer's chunked body decoded. The tests speak raw HTTP so that they
//! see what the server wrote (heads, early answers, a body cut by a killed server).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Resp {
    /// The status code.
    pub status: u16,
    /// The status line and the headers, as text.
    pub head: String,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Resp {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the text when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }

    /// The status and the body as text.
    pub fn into_pair(self) -> (u16, String) {
        let text = self.text();
        (self.status, text)
    }
}

/// How one raw HTTP/1.1 exchange (one request on its own connection) is bounded and read.
#[derive(Clone, Copy, Debug)]
pub struct Http {
    /// Bound on the connect; `None`: the system's own.
    pub connect: Option<Duration>,
    /// Read timeout.
    pub read: Duration,
    /// Write timeout; `None`: none.
    pub write: Option<Duration>,
    /// The server may answer (413) before reading the whole body: a failed write of the body or
    /// a failed read is not an error, what arrived is parsed.
    pub early_answer: bool,
    /// A malformed chunked body gives what was decoded before the damage instead of a panic
    /// (a server killed mid-answer).
    pub lenient_chunks: bool,
}

/// [`request`]'s bounds: no connect bound, reads 60 s, an early answer accepted.
pub const PLAIN: Http = Http {
    connect: None,
    read: Duration::from_secs(60),
    write: None,
    early_answer: true,
    lenient_chunks: false,
};

/// Bounds for talking to a server that may be gone: connect 2 s, read and write 30 s each.
pub const BOUNDED: Http = Http {
    connect: Some(Duration::from_secs(2)),
    read: Duration::from_secs(30),
    write: Some(Duration::from_secs(30)),
    early_answer: false,
    lenient_chunks: false,
};

impl Http {
    /// One request with `Connection: close`; `Err` when the server cannot be reached or its
    /// answer has no head or status.
    pub fn try_request(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> std::io::Result<Resp> {
        let mut s = match self.connect {
            Some(bound) => TcpStream::connect_timeout(&addr, bound)?,
            None => TcpStream::connect(addr)?,
        };
        s.set_read_timeout(Some(self.read))?;
        if self.write.is_some() {
            s.set_write_timeout(self.write)?;
        }
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes())?;
        let mut raw = Vec::new();
        if self.early_answer {
            let _ = s.write_all(body);
            let _ = s.read_to_end(&mut raw);
        } else {
            s.write_all(body)?;
            s.read_to_end(&mut raw)?;
        }
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| std::io::Error::other("no response head"))?;
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("bad status line"))?;
        let mut body = raw[split + 4..].to_vec();
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            body = match try_dechunk(&body) {
                Ok(b) => b,
                Err(partial) if self.lenient_chunks => partial,
                Err(_) => panic!("malformed chunked body from {method} {path}"),
            };
        }
        Ok(Resp { status, head, body })
    }

    /// [`try_request`](Self::try_request), panicking when there is no answer.
    pub fn request(&self, addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Resp {
        self.try_request(addr, method, path, body)
            .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"))
    }
}

/// One request with [`PLAIN`] bounds; panics when there is no answer.
pub fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Resp {
    PLAIN.request(addr, method, path, body)
}

/// `GET path` with [`BOUNDED`] bounds; panics when there is no answer.
pub fn get(addr: SocketAddr, path: &str) -> Resp {
    BOUNDED.request(addr, "GET", path, b"")
}

/// The socket address of a base URL `http://HOST:PORT` (a trailing `/` allowed); panics on
/// anything else (the tests' servers listen on loopback addresses, never on names).
pub fn addr_of(base: &str) -> SocketAddr {
    let hostport = base
        .strip_prefix("http://")
        .unwrap_or(base)
        .trim_end_matches('/');
    hostport
        .parse()
        .unwrap_or_else(|e| panic!("{base}: not http://IP:PORT: {e}"))
}

/// A chunked body decoded; `Err` with what was decoded before a malformed or missing chunk.
pub fn try_dechunk(mut b: &[u8]) -> Result<Vec<u8>, Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return Err(out);
        };
        let Ok(size) = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16) else {
            return Err(out);
        };
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if size > b.len() {
            return Err(out);
        }
        out.extend_from_slice(&b[..size]);
        b = &b[(size + 2).min(b.len())..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dechunks_and_keeps_what_came_before_damage() {
        assert_eq!(
            try_dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
            Ok(b"abcde".to_vec())
        );
        assert_eq!(try_dechunk(b"3\r\nabc\r\nff\r\nde"), Err(b"abc".to_vec()));
    }

    #[test]
    fn addr_of_a_base_url() {
        assert_eq!(addr_of("http://127.0.0.1:8080/").port(), 8080);
        assert_eq!(addr_of("127.0.0.1:9").port(), 9);
    }
}
