//! The oracle: the PyPI `python-hll` package (a port of java-hll) and `mmh3` (the reference
//! MurmurHash3). For the same inputs hashed as postgresql-hll hashes them, python-hll's bytes
//! equal ours, python-hll reads our bytes as the same cardinality, and we read its bytes as the
//! same estimate — in every form (empty, explicit, sparse, full).
//!
//! The interpreter: `$SLUICE_HLL_PYTHON`, else `python/.venv/hll-oracle` (which
//! `scripts/python-setup.sh` creates: python-hll 0.1.3 needs numpy < 1.24, older than the
//! project venv's). Nothing here is skipped: without them the test fails, saying why.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use sluice_sketches::Distinct;

const SCRIPT: &str = r#"
import struct, sys, warnings
# python-hll's own numpy arithmetic warns of overflows it relies on (Java long semantics).
warnings.simplefilter('ignore', RuntimeWarning)
import mmh3
from python_hll.hll import HLL

def h(data):
    # postgresql-hll's hll_hash_*: MurmurHash3 x64 128, seed 0, the first 64 bits (signed).
    return mmh3.hash64(data, seed=0, x64arch=True, signed=True)[0]

for line in sys.stdin:
    kind, n, ours = line.split()
    n = int(n)
    hll = HLL(11, 5)  # postgresql-hll's defaults: expthresh -1 (auto), sparse on
    for i in range(n):
        hll.add_raw(h(struct.pack('<q', i * 7919 - 3) if kind == 'i' else b'user-%d' % i))
    theirs = bytes(b & 0xff for b in hll.to_bytes())
    read = HLL.from_bytes(bytes.fromhex(ours) if ours != '-' else b'')
    print(hll.cardinality(), theirs.hex(), read.cardinality(), flush=True)
"#;

fn python() -> PathBuf {
    let p = std::env::var_os("SLUICE_HLL_PYTHON")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../python/.venv/hll-oracle/bin/python")
        });
    let ok = Command::new(&p)
        .args(["-c", "import python_hll.hll, mmh3"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "{} cannot `import python_hll.hll, mmh3`: run scripts/python-setup.sh (it makes python/.venv/hll-oracle) or set SLUICE_HLL_PYTHON",
        p.display()
    );
    p
}

#[test]
fn python_hll_reads_our_bytes_and_we_read_its() {
    let cases: Vec<(char, i64)> = [0, 1, 5, 160, 161, 300, 512, 513, 2_000, 50_000]
        .iter()
        .flat_map(|&n| [('i', n), ('s', n)])
        .collect();
    let mut ours = Vec::new();
    let mut input = String::new();
    for &(kind, n) in &cases {
        let mut d = Distinct::new();
        for i in 0..n {
            if kind == 'i' {
                d.add_i64(i * 7919 - 3);
            } else {
                d.add_bytes(format!("user-{i}").as_bytes());
            }
        }
        let hex: String = d.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
        input.push_str(&format!("{kind} {n} {hex}\n"));
        ours.push(d);
    }
    let mut child = Command::new(python())
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python output");
    assert!(out.status.success(), "python-hll script failed");
    let lines: Vec<String> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), cases.len());
    let mut forms = std::collections::BTreeSet::new();
    for ((&(kind, n), d), line) in cases.iter().zip(&ours).zip(&lines) {
        let f: Vec<&str> = line.split(' ').collect();
        let (their_card, their_hex, their_read_of_ours) = (f[0], f[1], f[2]);
        let ours_hex: String = d.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
        forms.insert(d.to_bytes()[0] & 0x0f);
        // The format is deterministic (sorted explicit values, sorted sparse registers, full
        // registers): the same inputs give the same bytes.
        assert_eq!(their_hex, ours_hex, "{kind} {n}: bytes");
        assert_eq!(
            their_read_of_ours,
            d.cardinality().to_string(),
            "{kind} {n}: python-hll reading ours"
        );
        let theirs: Vec<u8> = (0..their_hex.len() / 2)
            .map(|i| u8::from_str_radix(&their_hex[2 * i..2 * i + 2], 16).expect("hex"))
            .collect();
        let read = Distinct::from_bytes(&theirs).expect("python-hll's bytes");
        assert_eq!(
            read.cardinality().to_string(),
            their_card,
            "{kind} {n}: ours reading python-hll's"
        );
        eprintln!(
            "{kind} {n:>6}: form {} cardinality {} ({} bytes)",
            theirs[0] & 0x0f,
            their_card,
            theirs.len()
        );
    }
    assert_eq!(
        forms.into_iter().collect::<Vec<_>>(),
        [1, 2, 3, 4],
        "every form"
    );
}
