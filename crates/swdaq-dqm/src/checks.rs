//! Each histogram's check: a run's default [`Check`], and checks of their own for the
//! histograms whose names match a pattern (`noise_rms_*`: the noise histograms judged by
//! Kolmogorov at a stricter probability, say). The first pattern that matches a name wins.

use crate::compare::Check;
use serde::{Serialize, Serializer};

/// Checks of their own at most (a configuration is read by hand: this bounds its cost).
pub const MAX_NAMED: usize = 64;

/// The checks of a run's histograms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checks {
    pub default: Check,
    pub named: Vec<NamedCheck>,
}

/// A check for the histograms whose names match `names` (`*` any run of characters, `?` one,
/// `[...]` one of a set: shell patterns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NamedCheck {
    #[serde(serialize_with = "as_text")]
    pub names: glob::Pattern,
    pub check: Check,
}

fn as_text<S: Serializer>(p: &glob::Pattern, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.as_str())
}

impl NamedCheck {
    /// A check for the names `pattern` matches; an error says what is wrong with it.
    pub fn new(pattern: &str, check: Check) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("names: empty: give a histogram's name or a pattern".into());
        }
        let names = glob::Pattern::new(pattern).map_err(|e| format!("names: {pattern:?}: {e}"))?;
        Ok(Self { names, check })
    }
}

impl From<Check> for Checks {
    fn from(default: Check) -> Self {
        Self {
            default,
            named: Vec::new(),
        }
    }
}

impl Default for Checks {
    fn default() -> Self {
        Check::default().into()
    }
}

impl Checks {
    /// The check of the histogram called `name`.
    pub fn of(&self, name: &str) -> &Check {
        self.named
            .iter()
            .find(|n| n.names.matches(name))
            .map_or(&self.default, |n| &n.check)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::Test;

    #[test]
    fn the_first_pattern_that_matches_decides_and_the_rest_take_the_default() {
        let strict = Check {
            test: Test::Kolmogorov,
            min_probability: 1e-4,
            min_entries: 1000,
        };
        let lenient = Check {
            min_probability: 0.5,
            ..Check::default()
        };
        let checks = Checks {
            default: Check::default(),
            named: vec![
                NamedCheck::new("noise_rms_link_000[0-3]", strict).unwrap(),
                NamedCheck::new("noise_rms_*", lenient).unwrap(),
                NamedCheck::new("noise_rms_link_0000", lenient).unwrap(),
            ],
        };
        assert_eq!(checks.of("noise_rms_link_0000"), &strict);
        assert_eq!(checks.of("noise_rms_link_0004"), &lenient);
        assert_eq!(checks.of("pedestal_link_0000"), &Check::default());
        assert_eq!(checks.of("analyzer.noise_rms_x"), &Check::default());
        assert_eq!(checks.of("fed_size_0001"), &Check::default());
    }

    #[test]
    fn a_bad_pattern_is_named() {
        assert!(NamedCheck::new("", Check::default()).is_err());
        let e = NamedCheck::new("noise_[", Check::default()).unwrap_err();
        assert!(e.contains("noise_["), "{e}");
    }
}
