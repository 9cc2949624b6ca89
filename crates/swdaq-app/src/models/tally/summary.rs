//! The tally's closing summary: what each counter counted and, with applications, what it
//! heard from the counter before it; one typed source for the text and the JSON.

use super::apps::CounterReport;
use crate::runtime::outcome::{AppOutcome, StopReason, apps_text};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Serialize)]
pub struct TallySummary {
    pub counters: Vec<CounterSummary>,
    pub counted: u64,
    pub seconds: f64,
    pub counted_per_s: f64,
    /// Counts a counter application could not pass on at once (the next one's queue full).
    pub untold: u64,
    #[serde(skip)]
    pub stop_reason: StopReason,
    /// With applications: how each ended, what their inboxes refused, their threads' CPU.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<AppOutcome>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub refused_messages: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub thread_cpu: Vec<(String, f64)>,
}

#[derive(Debug, Serialize)]
pub struct CounterSummary {
    pub name: String,
    /// `None`: the application sent no report.
    pub counted: Option<u64>,
    /// With applications: the counter before it in the ring, and the last count heard from
    /// it (`heard_final`: the one it sent when stopped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heard_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heard: Option<u64>,
    pub heard_final: bool,
}

impl CounterSummary {
    /// A counter of one process: nobody to hear from.
    pub fn alone(name: String, counted: u64) -> Self {
        Self {
            name,
            counted: Some(counted),
            heard_from: None,
            heard: None,
            heard_final: false,
        }
    }

    /// The counter applications' reports in topology order, each hearing the one before it.
    pub fn ring(reports: &[(String, Option<CounterReport>)]) -> Vec<Self> {
        let n = reports.len();
        (0..n)
            .map(|i| {
                let (name, report) = &reports[i];
                Self {
                    name: name.clone(),
                    counted: report.as_ref().map(|r| r.counted),
                    heard_from: Some(reports[(i + n - 1) % n].0.clone()),
                    heard: report.as_ref().map(|r| r.heard),
                    heard_final: report.as_ref().is_some_and(|r| r.heard_final),
                }
            })
            .collect()
    }

    /// Why what it heard is not what the one before it counted, if it is not.
    fn mismatch(&self, counters: &[CounterSummary]) -> Option<String> {
        let from = self.heard_from.as_ref()?;
        let before = counters.iter().find(|c| &c.name == from)?;
        match (self.heard, before.counted) {
            (_, None) => Some(format!("{from} sent no report")),
            (None, _) => Some(format!("{} sent no report", self.name)),
            (Some(_), Some(_)) if !self.heard_final => {
                Some(format!("{} did not hear {from}'s final count", self.name))
            }
            (Some(heard), Some(counted)) => (heard != counted).then(|| {
                format!(
                    "{} heard {heard} from {from}, which counted {counted}",
                    self.name
                )
            }),
        }
    }
}

impl TallySummary {
    pub fn new(counters: Vec<CounterSummary>, seconds: f64, stop_reason: StopReason) -> Self {
        let counted = counters.iter().filter_map(|c| c.counted).sum();
        Self {
            counters,
            counted,
            seconds,
            counted_per_s: counted as f64 / seconds.max(f64::MIN_POSITIVE),
            untold: 0,
            stop_reason,
            apps: Vec::new(),
            refused_messages: BTreeMap::new(),
            thread_cpu: Vec::new(),
        }
    }

    /// The applications' outcomes and what their reports say beyond the counts.
    pub fn add_apps(
        &mut self,
        apps: Vec<AppOutcome>,
        reports: impl Iterator<Item = CounterReport>,
    ) {
        self.apps = apps;
        for r in reports {
            self.untold += r.untold;
            for (reason, n) in r.refused_messages {
                *self.refused_messages.entry(reason).or_insert(0) += n;
            }
            self.thread_cpu.extend(r.thread_cpu);
        }
    }

    /// Every counter whose count did not travel whole to the next, in words.
    pub fn failures(&self) -> Vec<String> {
        self.counters
            .iter()
            .filter_map(|c| c.mismatch(&self.counters))
            .collect()
    }

    pub fn text(&self) -> String {
        let mut out = format!(
            "Tally     {} counted in {:.1} s ({:.0}/s), {}\n",
            self.counted, self.seconds, self.counted_per_s, self.stop_reason
        );
        for c in &self.counters {
            let counted = c.counted.map_or("no report".into(), |n| n.to_string());
            out += &format!("Counter   {:<12} {counted}", c.name);
            if let (Some(from), Some(heard)) = (&c.heard_from, c.heard) {
                let last = if c.heard_final { "final" } else { "not final" };
                out += &format!(", heard {heard} from {from} ({last})");
            }
            out += "\n";
        }
        if self.untold > 0 {
            out += &format!(
                "Untold    {} counts not passed on (the next counter's queue full or it gone)\n",
                self.untold
            );
        }
        for failure in self.failures() {
            out += &format!("Mismatch  {failure}\n");
        }
        out + &apps_text(&self.apps, &self.refused_messages)
    }
}
