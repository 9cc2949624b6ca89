//! The dataflow models, one folder each with the same files (`mod.rs`: the model and its
//! configuration's `Configured`; `config.rs`, `system.rs`, `live.rs`, `summary.rs`; `apps/`
//! where it runs as applications; `wire.rs`: its messages between applications, with a wire
//! id of its own). A fourth model is a fourth folder and a line in [`MODELS`].

use crate::runtime::model::{Configured, Model};

pub mod chain;
pub mod evb;
pub mod swrod;
pub mod tally;

/// Every model, the default one (no table of its own) included.
pub static MODELS: &[&dyn Model] = &[&chain::CHAIN, &evb::EVB, &swrod::SWROD, &tally::TALLY];

/// The model a configuration's text is for: the one whose table it has, else the default.
pub fn select(text: &str) -> anyhow::Result<&'static dyn Model> {
    let table: toml::Table =
        toml::from_str(text).map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let mut chosen = MODELS
        .iter()
        .filter(|m| m.table().is_some_and(|t| table.contains_key(t)));
    match (chosen.next(), chosen.next()) {
        (Some(m), None) => Ok(*m),
        (Some(a), Some(b)) => anyhow::bail!(
            "invalid configuration: both [{}] and [{}]: one model per configuration",
            a.table().unwrap_or_default(),
            b.table().unwrap_or_default()
        ),
        (None, _) => Ok(*MODELS
            .iter()
            .find(|m| m.table().is_none())
            .expect("a default model is listed")),
    }
}

/// The models as `swdaq run --help` and `swdaq app --help` list them: each one's name, title,
/// the table that picks it and its application kinds, from [`MODELS`].
pub fn help() -> String {
    let mut out =
        String::from("Models (a configuration's top-level table picks one; none: the default):\n");
    for m in MODELS {
        let table = m
            .table()
            .map_or("default".to_string(), |t| format!("[{t}]"));
        out += &format!(
            "  {:<7} {:<9} {}; application kinds: {}\n",
            m.name(),
            table,
            m.title(),
            m.default_config().app_kinds().join(", ")
        );
    }
    out
}

/// The models as tools outside the binary read them (`swdaq models --json`): each one's
/// name, title, table, application kinds, wire id, dashboard and alerting terms (data, see
/// [`Model::dashboard`] and [`Model::alerts`]).
pub fn catalogue() -> anyhow::Result<serde_json::Value> {
    MODELS
        .iter()
        .map(|m| {
            let config = m.default_config();
            let data = |what: &str, text: Option<&str>| -> anyhow::Result<serde_json::Value> {
                text.map_or(Ok(serde_json::Value::Null), |t| {
                    serde_json::from_str(t).map_err(|e| {
                        anyhow::anyhow!("model {}: its {what} is not JSON: {e}", m.name())
                    })
                })
            };
            Ok(serde_json::json!({
                "name": m.name(),
                "title": m.title(),
                "table": m.table(),
                "kinds": config.app_kinds(),
                "wire_model": config.wire_model(),
                "dashboard": data("dashboard", m.dashboard())?,
                "alerts": data("alerts", m.alerts())?,
            }))
        })
        .collect()
}

/// Reads a configuration file (or the default model's defaults) for its model.
pub fn load(path: Option<&std::path::Path>) -> anyhow::Result<Box<dyn Configured>> {
    use anyhow::Context;
    let Some(path) = path else {
        return Ok(select("")?.default_config());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    let model = select(&text).with_context(|| format!("in {}", path.display()))?;
    let configured = model
        .parse(&text)
        .with_context(|| format!("in {}", path.display()))?;
    for line in model.deprecations(&text) {
        eprintln!("swdaq: {}: {line}", path.display());
    }
    Ok(configured)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_picks_its_model_by_table() {
        assert_eq!(select("").unwrap().name(), "chain");
        assert_eq!(select("[run]\nduration_s = 1\n").unwrap().name(), "chain");
        assert_eq!(select("[evb]\n").unwrap().name(), "evb");
        assert_eq!(select("duration_s = 1\n[swrod]\n").unwrap().name(), "swrod");
        let e = select("[evb]\n[swrod]\n").err().unwrap().to_string();
        assert!(e.contains("one model per configuration"), "{e}");
        assert!(select("[evb").is_err());
    }

    #[test]
    fn the_catalogue_lists_every_model_with_a_dashboard_grafana_can_lay_out() {
        let catalogue = catalogue().unwrap();
        let models = catalogue.as_array().unwrap();
        assert_eq!(models.len(), MODELS.len());
        let mut files = std::collections::BTreeSet::new();
        let mut uids = std::collections::BTreeSet::new();
        for m in models.iter().filter(|m| !m["dashboard"].is_null()) {
            let d = &m["dashboard"];
            assert!(files.insert(d["file"].as_str().unwrap().to_string()), "{m}");
            assert!(uids.insert(d["uid"].as_str().unwrap().to_string()), "{m}");
            for row in d["rows"].as_array().unwrap() {
                let panels = row["panels"].as_array().unwrap();
                assert!(!panels.is_empty(), "{row}");
                for p in panels {
                    assert!(p["width"].as_u64().unwrap_or(8) <= 24, "{p}");
                    for key in ["title", "description", "unit"] {
                        assert!(!p[key].as_str().unwrap().is_empty(), "{p}");
                    }
                    let targets = p["targets"].as_array().unwrap();
                    assert!(!targets.is_empty(), "{p}");
                    for t in targets {
                        assert!(t["expr"].as_str().unwrap().contains("swdaq_"), "{t}");
                        assert!(t["legend"].is_string(), "{t}");
                    }
                }
            }
        }
        assert_eq!(files.len(), 3, "chain, evb and swrod have one each");
        for m in models.iter().filter(|m| !m["alerts"].is_null()) {
            for (rule, terms) in m["alerts"].as_object().unwrap() {
                let terms = terms.as_array().unwrap();
                assert!(!terms.is_empty(), "{rule}");
                assert!(terms.iter().all(|t| t.as_str().unwrap().contains("swdaq_")));
            }
        }
    }

    #[test]
    fn every_model_s_default_is_valid_and_reads_back_as_itself() {
        for model in crate::models::MODELS {
            let c = model.default_config();
            c.validate()
                .unwrap_or_else(|e| panic!("{}: {e:#}", model.name()));
            let text = c.to_toml();
            assert_eq!(select(&text).unwrap().name(), model.name());
            assert_eq!(
                model.parse(&text).unwrap().to_toml(),
                text,
                "{}",
                model.name()
            );
        }
    }

    /// Every model's wire id, and the messages of the models with applications.
    mod wire {
        use super::super::{MODELS, chain, evb, swrod};
        use proptest::prelude::*;
        use std::collections::BTreeSet;
        use std::fmt::Debug;
        use swdaq_net::Framework;
        use swdaq_net::bench::BenchMessage;
        use swdaq_net::wire::{WireMessage, decode, encode};

        #[test]
        fn every_model_has_a_wire_id_of_its_own() {
            let mut ids = vec![Framework::MODEL, BenchMessage::MODEL];
            ids.extend(MODELS.iter().map(|m| m.default_config().wire_model()));
            let unique: BTreeSet<u16> = ids.iter().copied().collect();
            assert_eq!(unique.len(), ids.len(), "{ids:?}");
        }

        fn round_trips<M: WireMessage + PartialEq + Debug>(kinds: Vec<M>) {
            for m in kinds {
                let frames = m.frames_after() as u16;
                let d = decode::<M>(&encode(9, &m, frames)).unwrap();
                assert_eq!((d.sender, &d.message, d.frames_after), (9, &m, frames));
            }
        }

        #[test]
        fn every_message_survives_the_round_trip() {
            round_trips(chain::wire::tests::every_kind());
            round_trips(evb::wire::tests::every_kind());
            round_trips(swrod::wire::tests::every_kind());
        }

        #[test]
        fn a_model_s_message_is_refused_by_every_other_model() {
            let chain = encode(1, &chain::wire::ChainMessage::End, 0);
            let e = decode::<evb::wire::EvbMessage>(&chain).unwrap_err();
            assert_eq!(e.reason(), "model");
            let e = decode::<swrod::wire::SwrodMessage>(&chain).unwrap_err();
            assert_eq!(e.reason(), "model");
        }

        /// A valid message of `kinds`, a byte changed and then cut, decoded as each model's.
        fn mangled<M: WireMessage>(kinds: &[M], pick: usize, flip: (usize, u8), cut: usize) {
            let m = &kinds[pick % kinds.len()];
            let mut frame = encode(1, m, m.frames_after() as u16);
            let at = flip.0 % frame.len();
            frame[at] ^= flip.1;
            let decode_all = |frame: &[u8]| {
                let _ = decode::<chain::wire::ChainMessage>(frame);
                let _ = decode::<evb::wire::EvbMessage>(frame);
                let _ = decode::<swrod::wire::SwrodMessage>(frame);
            };
            decode_all(&frame);
            frame.truncate(cut % (frame.len() + 1));
            decode_all(&frame);
        }

        proptest! {
            /// Any valid message of any model cut or with a byte changed: a message or an
            /// error, never a panic.
            #[test]
            fn any_model_s_mangled_message_decodes_or_fails_cleanly(
                pick in any::<usize>(),
                cut in 0usize..512,
                flip in any::<(usize, u8)>(),
            ) {
                mangled(&chain::wire::tests::every_kind(), pick, flip, cut);
                mangled(&evb::wire::tests::every_kind(), pick, flip, cut);
                mangled(&swrod::wire::tests::every_kind(), pick, flip, cut);
            }
        }
    }
}
