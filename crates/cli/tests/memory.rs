//! The decoder's default limits keep any input of up to 10 MB within 1 GB of memory: hostile
//! 10 MB documents are decoded by the real binary and its peak RSS is read back.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Run `sluice sereal decode FILE` and return (exit code, peak RSS in MiB of the child).
fn decode_peak_rss(doc: &[u8], name: &str) -> (Option<i32>, u64) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("memory");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join(name);
    std::fs::write(&file, doc).expect("write");
    let status = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["sereal", "decode", file.to_str().expect("path")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run sluice");
    // ru_maxrss of RUSAGE_CHILDREN is the peak of the largest child waited for so far: each case
    // is checked against that running maximum, which must stay under 1 GiB.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes into the struct we pass.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    (status.code(), usage.ru_maxrss as u64 / 1024)
}

fn zlib(declared_body: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(declared_body).expect("compress");
    let c = z.finish().expect("finish");
    let mut d = b"=\xF3rl\x33\x00".to_vec();
    sereal::varint::write(&mut d, declared_body.len() as u64);
    sereal::varint::write(&mut d, c.len() as u64);
    d.extend_from_slice(&c);
    d
}

#[test]
fn hostile_10mb_inputs_stay_under_1gib() {
    const TEN_MB: usize = 10 << 20;
    let mut cases: Vec<(&str, Vec<u8>, bool)> = Vec::new();

    // 1. Raw: an array of 8 M one-byte values (just under the value limit).
    let mut d = b"=\xF3rl\x03\x00\x2b".to_vec();
    sereal::varint::write(&mut d, 8_000_000);
    d.resize(d.len() + 8_000_000, 0x01);
    cases.push(("small-ints.srl", d, true));

    // 2. Raw: an array of 4 M one-byte strings.
    let mut d = b"=\xF3rl\x03\x00\x2b".to_vec();
    sereal::varint::write(&mut d, 4_000_000);
    for _ in 0..4_000_000 {
        d.extend_from_slice(b"\x61x");
    }
    cases.push(("short-strings.srl", d, true));

    // 3. zlib: 8 M 31-byte strings (256 MB, the decompression limit) behind a small document.
    let mut body = vec![0x2b];
    sereal::varint::write(&mut body, 8_000_000);
    for i in 0..8_000_000u32 {
        body.push(0x7f);
        body.extend_from_slice(&[b'a' + (i % 26) as u8; 31]);
    }
    cases.push(("zlib-strings.srl", zlib(&body), true));

    // 4. Raw: a 1 MB string copied as often as fits (COPY amplification, stopped by the limit).
    let mut d = b"=\xF3rl\x03\x00\x2b".to_vec();
    sereal::varint::write(&mut d, 4_000_000);
    let at = d.len() - 6 + 1;
    d.push(0x26);
    sereal::varint::write(&mut d, 1 << 20);
    d.resize(d.len() + (1 << 20), b'a');
    while d.len() < TEN_MB - 4 {
        d.push(0x2f);
        sereal::varint::write(&mut d, at as u64);
    }
    cases.push(("copies.srl", d, false));

    // 5. Raw: a hash with 1.4 M distinct keys.
    let mut d = b"=\xF3rl\x03\x00\x2a".to_vec();
    sereal::varint::write(&mut d, 1_400_000);
    for i in 0..1_400_000u32 {
        d.push(0x64);
        d.extend_from_slice(&i.to_le_bytes());
        d.push(0x01);
    }
    cases.push(("wide-hash.srl", d, true));

    for (name, doc, valid) in cases {
        assert!(doc.len() <= TEN_MB + 64, "{name} is {} bytes", doc.len());
        let (code, peak_mib) = decode_peak_rss(&doc, name);
        eprintln!(
            "{name}: {} bytes, exit {code:?}, peak RSS so far {peak_mib} MiB",
            doc.len()
        );
        assert_eq!(code, Some(if valid { 0 } else { 1 }), "{name}");
        assert!(peak_mib < 1024, "{name}: peak RSS {peak_mib} MiB");
    }
}
