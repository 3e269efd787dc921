//! A token's restriction to dc and type patterns.

use serde::{Deserialize, Serialize};

use crate::SpecError;

/// Which (dc, type) pairs a token reaches: each list holds patterns where `*` matches any run
/// of characters; an empty list allows every value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allowed {
    /// Data-centre patterns (empty: any dc).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dcs: Vec<String>,
    /// Event-type patterns (empty: any type).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
}

impl Allowed {
    /// From comma-separated pattern lists (`"WEB,LB*"`); blanks are ignored.
    pub fn parse(dcs: &str, types: &str) -> Result<Allowed, SpecError> {
        let list = |what: &str, s: &str| -> Result<Vec<String>, SpecError> {
            s.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| {
                    if p.len() > 255 || p.chars().any(|c| c.is_control()) {
                        Err(SpecError(format!(
                            "{what} pattern {p:?}: at most 255 printable characters"
                        )))
                    } else {
                        Ok(p.to_string())
                    }
                })
                .collect()
        };
        Ok(Allowed {
            dcs: list("dc", dcs)?,
            types: list("type", types)?,
        })
    }

    /// Whether nothing is restricted.
    pub fn is_all(&self) -> bool {
        self.dcs.is_empty() && self.types.is_empty()
    }

    /// Whether events of `dc` and `type_` are reached.
    pub fn allows(&self, dc: &str, type_: &str) -> bool {
        self.allows_dc(dc) && (self.types.is_empty() || self.types.iter().any(|p| glob(p, type_)))
    }

    /// Whether some type of `dc` may be reached (listing a dc's seconds).
    pub fn allows_dc(&self, dc: &str) -> bool {
        self.dcs.is_empty() || self.dcs.iter().any(|p| glob(p, dc))
    }
}

/// `*`-glob match (no other metacharacters), linear in the text for each star.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty(); // no star: an exact match
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        for (p, t, want) in [
            ("WEB", "WEB", true),
            ("WEB", "WEBX", false),
            ("WEB*", "WEBX", true),
            ("*", "", true),
            ("*B*", "WEB", true),
            ("W*B", "WB", true),
            ("W*B*B", "WBB", true),
            ("W*B*B", "WB", false),
            ("a*a", "a", false),
            ("", "", true),
            ("", "x", false),
        ] {
            assert_eq!(glob(p, t), want, "{p} ~ {t}");
        }
    }

    #[test]
    fn lists_restrict_both_tags() {
        let a = Allowed::parse("ams*", "WEB, LB").unwrap();
        assert!(a.allows("ams1", "WEB") && a.allows("ams2", "LB"));
        assert!(!a.allows("fra1", "WEB") && !a.allows("ams1", "CRON"));
        assert!(Allowed::parse("", "").unwrap().is_all());
        assert!(Allowed::parse("", "\u{7}").is_err());
    }
}
