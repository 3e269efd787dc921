//! The wire format between the pool and a worker (`python/sluice/_worker.py` is the other end).
//!
//! All integers are little endian. The parent sends one *request* per blob on the worker's stdin:
//!
//! ```text
//! request  = u32 len | u32 header_len | header (JSON) | Sereal document (the blob's Sereal part)
//! header   = {"ctx": {"epoch", "dc", "type", "subtype", "chunk"},
//!             "jobs": [{"name", "file", "func", "max_result_bytes"}, …]}
//! ```
//!
//! The worker answers on its stdout (its fd 1 is moved away before any user code runs, so a
//! transform's `print` goes to stderr) with *frames* `u32 len | kind u8 | body` (`len` counts
//! the kind byte and the body):
//!
//! | kind | body | meaning |
//! |---|---|---|
//! | `R` | protocol version (`1`) | started, `sluice` imported |
//! | `D` | u32 events | the blob is decoded |
//! | `B` | message | the document does not decode, or its body is not an array |
//! | `M` | message | out of memory while decoding |
//! | `S` | u32 job | job started (its budgets start now) |
//! | `O` | u32 job, Sereal document | job result: the array of the returned dicts |
//! | `X` | u32 job, code u8, message | job failed: `E` exception, `M` memory, `L` result too large (message = its size) |
//! | `F` | — | every job of the request answered |
//!
//! Job numbers count from 0 within the request. Frames other than `O` are at most
//! [`MAX_CONTROL_FRAME`] bytes; an `O` frame over the job's `max_result_bytes` is not read: the
//! worker is killed.

use crate::{BlobContext, Job};

/// Largest frame other than a result that a worker may send.
pub const MAX_CONTROL_FRAME: usize = 64 * 1024;
/// Protocol version the worker announces in its `R` frame.
pub const VERSION: &[u8] = b"1";

/// The first four bytes of a frame: its length.
pub fn frame_len(head: [u8; 4]) -> usize {
    u32::from_le_bytes(head) as usize
}

/// The request for `jobs` on `doc` (the blob's Sereal part), ready to write.
pub fn request(doc: &[u8], ctx: &BlobContext, jobs: &[Job]) -> Vec<u8> {
    let header = serde_json::json!({
        "ctx": {
            "epoch": ctx.epoch,
            "dc": ctx.dc,
            "type": ctx.type_,
            "subtype": ctx.subtype,
            "chunk": ctx.chunk,
        },
        "jobs": jobs.iter().map(|j| serde_json::json!({
            "name": j.name,
            "file": j.file.to_string_lossy(),
            "func": j.func,
            "max_result_bytes": j.max_result_bytes,
        })).collect::<Vec<_>>(),
    })
    .to_string();
    let total = 4 + header.len() + doc.len();
    let mut out = Vec::with_capacity(4 + total);
    out.extend_from_slice(&(total as u32).to_le_bytes());
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(doc);
    out
}

/// A frame from a worker, parsed.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// `R`: started.
    Ready(Vec<u8>),
    /// `D`: decoded, with its number of events.
    Decoded(u32),
    /// `B`: the blob does not decode.
    BadBlob(String),
    /// `M`: out of memory while decoding.
    DecodeMemory(String),
    /// `S`: job started.
    Started(u32),
    /// `O`: job result.
    Result(u32, Vec<u8>),
    /// `X`: job failed.
    Failed(u32, FailCode, String),
    /// `F`: every job answered.
    Finished,
}

/// The code of an `X` frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailCode {
    /// The function raised.
    Exception,
    /// `MemoryError`.
    Memory,
    /// Result over `max_result_bytes`.
    ResultTooLarge,
}

/// Parses a frame's `kind | body`; `Err` says how the worker broke the protocol.
pub fn parse(frame: Vec<u8>) -> Result<Frame, crate::ProtocolError> {
    parse_frame(frame).map_err(crate::ProtocolError)
}

fn parse_frame(frame: Vec<u8>) -> Result<Frame, String> {
    let Some((&kind, body)) = frame.split_first() else {
        return Err("empty frame".into());
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let index = |b: &[u8]| -> Result<(u32, usize), String> {
        let head: [u8; 4] = b
            .get(..4)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| format!("frame {:?} too short", kind as char))?;
        Ok((u32::from_le_bytes(head), 4))
    };
    Ok(match kind {
        b'R' => Frame::Ready(body.to_vec()),
        b'D' => Frame::Decoded(index(body)?.0),
        b'B' => Frame::BadBlob(text(body)),
        b'M' => Frame::DecodeMemory(text(body)),
        b'S' => Frame::Started(index(body)?.0),
        b'O' => {
            let (i, at) = index(body)?;
            let mut frame = frame;
            // Drop kind + index in place: the document is the rest, no second copy.
            frame.drain(..1 + at);
            Frame::Result(i, frame)
        }
        b'X' => {
            let (i, at) = index(body)?;
            let code = match body.get(at) {
                Some(b'E') => FailCode::Exception,
                Some(b'M') => FailCode::Memory,
                Some(b'L') => FailCode::ResultTooLarge,
                other => return Err(format!("unknown failure code {other:?}")),
            };
            Frame::Failed(i, code, text(&body[at + 1..]))
        }
        b'F' => Frame::Finished,
        other => return Err(format!("unknown frame kind {other:#04x}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_refuses_garbage() {
        assert_eq!(parse(b"R1".to_vec()), Ok(Frame::Ready(b"1".to_vec())));
        assert_eq!(parse(b"D\x05\0\0\0".to_vec()), Ok(Frame::Decoded(5)));
        assert_eq!(parse(b"S\x01\0\0\0".to_vec()), Ok(Frame::Started(1)));
        assert_eq!(
            parse(b"O\x02\0\0\0doc".to_vec()),
            Ok(Frame::Result(2, b"doc".to_vec()))
        );
        assert_eq!(
            parse(b"X\x00\0\0\0Eboom".to_vec()),
            Ok(Frame::Failed(0, FailCode::Exception, "boom".into()))
        );
        assert_eq!(parse(b"F".to_vec()), Ok(Frame::Finished));
        assert!(parse(Vec::new()).is_err());
        assert!(parse(b"S\x01".to_vec()).is_err());
        assert!(parse(b"X\x00\0\0\0Q".to_vec()).is_err());
        assert!(parse(b"Z".to_vec()).is_err());
    }

    #[test]
    fn request_layout() {
        let ctx = BlobContext {
            epoch: 7,
            dc: "ams1".into(),
            type_: "WEB".into(),
            subtype: String::new(),
            chunk: 2,
        };
        let req = request(b"DOC", &ctx, &[Job::new("n", "/t.py", "transform")]);
        let total = frame_len(req[..4].try_into().unwrap());
        assert_eq!(total, req.len() - 4);
        let hlen = frame_len(req[4..8].try_into().unwrap());
        let header: serde_json::Value = serde_json::from_slice(&req[8..8 + hlen]).unwrap();
        assert_eq!(header["ctx"]["type"], "WEB");
        assert_eq!(header["jobs"][0]["func"], "transform");
        assert_eq!(&req[8 + hlen..], b"DOC");
    }
}
