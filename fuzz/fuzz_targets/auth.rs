//! Any bytes as credentials and token records: `Authorization` values (`bearer`),
//! secrets (`Secret::parse`), dc/type patterns (`Allowed::parse`, the input split at its first
//! NUL), scope lists (`Scopes::parse`) and catalog records (`TokenRecord` from JSON) must return,
//! never panic; what parses re-parses to itself (a secret, also through `Bearer <secret>`), a
//! pattern list keeps no blank, comma or control character, a pattern matches exactly as a
//! plain `*`-glob does. The same invariants over generated inputs, on stable:
//! `crates/auth/tests/hostile.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/auth/tests/invariants/mod.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| {
    invariants::check(data, &mut invariants::Seen::default());
});
