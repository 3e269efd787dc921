//! Token secrets: their form, their hash, and the `Authorization` header.

use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The prefix of every secret (so a leaked one is recognisable, e.g. by secret scanners).
const PREFIX: &str = "sluice_";
/// Characters of a token id.
const ID_LEN: usize = 8;
/// Characters of the random part (32 bytes, base64url without padding).
const RANDOM_LEN: usize = 43;
/// Longest `Authorization` value looked at.
const MAX_HEADER: usize = 512;

/// A token's secret: `sluice_<id>_<random>`. Its [`Debug`] form hides the random part.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({PREFIX}{}_…)", self.id())
    }
}

impl Secret {
    /// A new secret with a new random id.
    pub fn generate() -> Result<Secret, crate::AuthError> {
        let mut bytes = [0u8; 38];
        getrandom::fill(&mut bytes).map_err(crate::AuthError::Random)?;
        let id: String = bytes[..ID_LEN / 2]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let random = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&bytes[6..]);
        Ok(Secret(format!("{PREFIX}{id}_{random}")))
    }

    /// Parses a presented secret (any other form is refused without looking further).
    pub fn parse(text: &str) -> Option<Secret> {
        let rest = text.strip_prefix(PREFIX)?;
        let (id, random) = rest.split_at_checked(ID_LEN)?;
        let random = random.strip_prefix('_')?;
        let ok = id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            && random.len() == RANDOM_LEN
            && random
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        ok.then(|| Secret(text.to_string()))
    }

    /// The public id (the catalog name of its record).
    pub fn id(&self) -> &str {
        &self.0[PREFIX.len()..PREFIX.len() + ID_LEN]
    }

    /// The whole secret, to show once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// SHA-256 of the secret, hex: what the store keeps.
    pub fn hash_hex(&self) -> String {
        String::from_utf8_lossy(&self.hash()).into_owned()
    }

    /// SHA-256 of the secret as hex digits, without an allocation (a request's check hashes the
    /// presented secret once and compares this with each candidate).
    pub fn hash(&self) -> [u8; 64] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digest = Sha256::digest(self.0.as_bytes());
        let mut out = [0u8; 64];
        for (i, b) in digest.iter().enumerate() {
            out[2 * i] = HEX[usize::from(b >> 4)];
            out[2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
        out
    }

    /// Whether this secret's hash is `hash_hex`, compared in constant time.
    pub fn matches(&self, hash_hex: &str) -> bool {
        hash_matches(&self.hash(), hash_hex)
    }
}

/// Whether the hex hash `mine` ([`Secret::hash`]) is `hash_hex`, compared in constant time.
pub fn hash_matches(mine: &[u8; 64], hash_hex: &str) -> bool {
    hash_hex.len() == mine.len() && bool::from(mine.as_slice().ct_eq(hash_hex.as_bytes()))
}

/// The secret of an `Authorization` header value: `Bearer <secret>` (scheme case-insensitive,
/// spaces around trimmed). `None`: not a bearer header, or not a secret's form.
pub fn bearer(value: &[u8]) -> Option<Secret> {
    if value.len() > MAX_HEADER {
        return None;
    }
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    Secret::parse(token.trim())
}

/// Where a server on this machine leaves its local secret for the CLI of its user, by its HTTP
/// address (`127.0.0.1:8180`): `$XDG_RUNTIME_DIR/sluice/http-<addr>.secret`, else
/// `$HOME/.local/state/sluice/run/http-<addr>.secret` (as Jupyter keeps its runtime files).
/// `None` when neither variable is set.
pub fn runtime_secret_path(http_addr: &str) -> Option<std::path::PathBuf> {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => std::path::PathBuf::from(d).join("sluice"),
        None => std::path::PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?)
            .join(".local/state/sluice/run"),
    };
    let name: String = http_addr
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    Some(dir.join(format!("http-{name}.secret")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secrets_parse_and_match_only_their_hash() {
        let s = Secret::generate().unwrap();
        assert_eq!(Secret::parse(s.expose()), Some(s.clone()));
        assert!(s.matches(&s.hash_hex()));
        let other = Secret::generate().unwrap();
        assert_ne!(s.id(), other.id());
        assert!(!other.matches(&s.hash_hex()));
        assert!(!format!("{s:?}").contains(&s.expose()[16..]));
    }

    #[test]
    fn headers() {
        let s = Secret::generate().unwrap();
        assert_eq!(
            bearer(format!("Bearer {}", s.expose()).as_bytes()),
            Some(s.clone())
        );
        assert_eq!(
            bearer(format!("bearer  {} ", s.expose()).as_bytes()),
            Some(s.clone())
        );
        for bad in [
            "".to_string(),
            "Bearer".to_string(),
            format!("Basic {}", s.expose()),
            format!("Bearer {}x", s.expose()),
            format!("Bearer {}", &s.expose()[..20]),
            "Bearer sluice_ABCDEF12_".to_string() + &"a".repeat(43),
            "x".repeat(1000),
        ] {
            assert_eq!(bearer(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(bearer(&[0xff, 0xfe]), None);
    }
}
