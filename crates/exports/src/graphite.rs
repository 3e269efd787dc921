//! Graphite plaintext (carbon) over TCP: `path value timestamp\n`, the path from
//! [`crate::naming::graphite_path`], the timestamp the step's end in seconds.
//!
//! One connection per batch: connect (deadline), write every line (write deadline), close the
//! write side, then wait (read deadline) for the receiver to close its side. Carbon has no
//! acknowledgement: a batch counts as delivered when every byte was written and the connection
//! closed without a reset (a reset or a refused connection is retried). A receiver that keeps
//! the connection open past the read deadline after our close is taken as having received it.
//! Values that are not finite (NaN, ±Inf) are not sent: carbon receivers disagree on them.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::time::Duration;

use sluice_rollups::RollupRow;

use crate::naming::{graphite_path, timestamp_secs};
use crate::prometheus::format_value;
use crate::{Sink, SinkError};

/// The plaintext lines of `rows` (one per aggregate with a finite value).
pub fn graphite_lines(rows: &[RollupRow]) -> String {
    let mut out = String::new();
    for row in rows {
        for (aggregate, value) in &row.values {
            let Some(v) = value.filter(|v| v.is_finite()) else {
                continue;
            };
            out.push_str(&graphite_path(row, aggregate));
            out.push(' ');
            out.push_str(&format_value(v));
            out.push(' ');
            out.push_str(&timestamp_secs(row).to_string());
            out.push('\n');
        }
    }
    out
}

/// Sends batches to a carbon plaintext listener (`host:port`).
pub struct GraphiteSink {
    addr: String,
    connect: Duration,
    timeout: Duration,
}

impl GraphiteSink {
    /// A sink for `addr`: connecting may take `connect`; each write and the wait for the close
    /// `timeout`.
    pub fn new(addr: &str, connect: Duration, timeout: Duration) -> GraphiteSink {
        GraphiteSink {
            addr: addr.to_owned(),
            connect,
            timeout,
        }
    }

    fn send_lines(&self, lines: &[u8]) -> std::io::Result<()> {
        let mut last = None;
        let mut stream = None;
        for addr in self.addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, self.connect) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let mut stream = match stream {
            Some(s) => s,
            None => {
                return Err(last.unwrap_or_else(|| {
                    std::io::Error::new(ErrorKind::NotFound, "no address to connect to")
                }))
            }
        };
        stream.set_write_timeout(Some(self.timeout))?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.write_all(lines)?;
        stream.flush()?;
        stream.shutdown(Shutdown::Write)?;
        let mut buf = [0u8; 512];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(())
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Sink for GraphiteSink {
    fn send(&mut self, rows: &[RollupRow]) -> Result<(), SinkError> {
        let lines = graphite_lines(rows);
        if lines.is_empty() {
            return Ok(());
        }
        self.send_lines(lines.as_bytes())
            .map_err(|e| SinkError::Retry(format!("graphite {}: {e}", self.addr)))
    }

    fn describe(&self) -> String {
        format!("graphite {}", self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let row = RollupRow {
            rollup: "web".into(),
            start: 100,
            step: 10,
            group: vec![("path".into(), "/a".into())],
            values: vec![
                ("count".into(), Some(3.0)),
                ("p95:ms".into(), Some(2.5)),
                ("max:ms".into(), None),
                ("ratio:x".into(), Some(f64::NAN)),
            ],
        };
        assert_eq!(
            graphite_lines(&[row]),
            "sluice.web._a.count 3 110\nsluice.web._a.p95_ms 2.5 110\n"
        );
    }

    #[test]
    fn refused_connection_is_retryable() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut sink = GraphiteSink::new(
            &format!("127.0.0.1:{port}"),
            Duration::from_secs(1),
            Duration::from_secs(1),
        );
        let row = RollupRow {
            rollup: "w".into(),
            start: 0,
            step: 1,
            group: vec![],
            values: vec![("count".into(), Some(1.0))],
        };
        assert!(matches!(sink.send(&[row]), Err(SinkError::Retry(_))));
    }
}
