//! The built `sluice` binary the CLI tests spawn. Cargo builds it for the `sluice` package's own
//! tests and names it at compile time (`CARGO_BIN_EXE_sluice`), so [`sluice_bin!`](crate::sluice_bin)
//! is a macro: it expands in that test crate, where the name is set, and a test never runs a
//! stale binary left in `target/`.

use std::path::PathBuf;

/// The environment variable that runs the tests against another `sluice` binary (a release
/// build, an installed one) instead of the one cargo built.
pub const BIN_ENV: &str = "SLUICE_BIN";

/// `SLUICE_BIN` if set, else `built`; panics when that file is missing.
pub fn checked(built: &str) -> PathBuf {
    let bin = std::env::var_os(BIN_ENV).map_or_else(|| PathBuf::from(built), PathBuf::from);
    assert!(
        bin.is_file(),
        "the sluice binary {} is missing",
        bin.display()
    );
    bin
}

/// The `sluice` binary (a `PathBuf`): `SLUICE_BIN`, else the one cargo built for this test
/// crate. Only in the `sluice` package's tests (`crates/cli/tests`), where cargo sets the name.
#[macro_export]
macro_rules! sluice_bin {
    () => {
        $crate::bin::checked(env!("CARGO_BIN_EXE_sluice"))
    };
}
