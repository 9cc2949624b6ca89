//! Prometheus text exposition (format 0.0.4) and the one-line log summary.
//!
//! Written by hand rather than with `prometheus-client`: that crate owns its metric storage
//! (its own atomics, updated with read-modify-writes) and encodes from it, while swdaq
//! exports an already aggregated [`Snapshot`]. The format is small; tests check the output
//! with the reference Python parser.

use std::fmt::Write;

use crate::block::{MetricKind, THREAD_LABEL};
use crate::stats::{Family, ProcessHealth, Series, Snapshot, Value};

/// `Content-Type` of [`render_prometheus`] output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders every family of `snapshot` plus the process-health families, one HELP/TYPE pair
/// per name.
pub fn render_prometheus(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    for f in snapshot
        .families
        .iter()
        .chain(&process_families(&snapshot.process))
    {
        render_family(&mut out, f);
    }
    out
}

fn render_family(out: &mut String, f: &Family) {
    // Writing to a String cannot fail.
    let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
    let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
    for s in &f.series {
        match &s.value {
            Value::Counter { total, .. } => sample(out, &f.name, "", s, None, &total.to_string()),
            Value::Gauge { value } => sample(out, &f.name, "", s, None, &fmt_f64(*value)),
            Value::Histogram {
                buckets,
                count,
                sum,
                ..
            } => {
                for b in buckets {
                    let le = fmt_f64(b.le);
                    sample(out, &f.name, "_bucket", s, Some(&le), &b.count.to_string());
                }
                let count = count.to_string();
                sample(out, &f.name, "_bucket", s, Some("+Inf"), &count);
                sample(out, &f.name, "_sum", s, None, &fmt_f64(*sum));
                sample(out, &f.name, "_count", s, None, &count);
            }
        }
    }
}

fn sample(out: &mut String, name: &str, suffix: &str, s: &Series, le: Option<&str>, v: &str) {
    out.push_str(name);
    out.push_str(suffix);
    let labels = s
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(le.map(|le| ("le", le)));
    for (i, (k, v)) in labels.enumerate() {
        out.push(if i == 0 { '{' } else { ',' });
        let _ = write!(out, "{k}=\"{}\"", escape_label_value(v));
    }
    if !s.labels.is_empty() || le.is_some() {
        out.push('}');
    }
    out.push(' ');
    out.push_str(v);
    out.push('\n');
}

/// Label values escape `\`, `"` and newline.
pub fn escape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text escapes `\` and newline (quotes are literal there).
pub fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Prometheus float syntax: `+Inf`, `-Inf`, `NaN`, otherwise the shortest round-trip form.
pub fn fmt_f64(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        // Debug uses exponents for very large/small values instead of hundreds of digits.
        format!("{v:?}")
    }
}

/// Process health as metric families (names reserved in the registry).
pub fn process_families(p: &ProcessHealth) -> Vec<Family> {
    let thread_series = |value: &dyn Fn(&crate::stats::ThreadHealth) -> Value| {
        p.threads
            .iter()
            .map(|t| Series {
                labels: [
                    ("thread".to_owned(), t.name.clone()),
                    ("tid".to_owned(), t.tid.to_string()),
                ]
                .into(),
                value: value(t),
            })
            .collect::<Vec<_>>()
    };
    let family = |name: &str, help: &str, kind, series| Family {
        name: name.into(),
        help: help.into(),
        kind,
        series,
    };
    let mut out = vec![
        family(
            "swdaq_thread_cpu_seconds_total",
            "CPU time (user + system) used by the thread",
            MetricKind::Counter,
            // Fractional seconds: carried as a float value, still typed as a counter.
            thread_series(&|t| Value::Gauge {
                value: t.cpu_seconds_total,
            }),
        ),
        family(
            "swdaq_thread_cpu_usage_ratio",
            "CPU seconds per second over the last statistics interval",
            MetricKind::Gauge,
            thread_series(&|t| Value::Gauge {
                value: t.cpu_usage_ratio,
            }),
        ),
        family(
            "swdaq_thread_last_cpu",
            "Core the thread last ran on",
            MetricKind::Gauge,
            thread_series(&|t| Value::Gauge {
                value: f64::from(t.last_cpu),
            }),
        ),
    ];
    if let Some(rss) = p.resident_memory_bytes {
        out.push(family(
            "swdaq_process_resident_memory_bytes",
            "Resident set size of the process",
            MetricKind::Gauge,
            vec![Series {
                labels: Default::default(),
                value: Value::Gauge { value: rss as f64 },
            }],
        ));
    }
    out
}

/// One compact log line: memory, busiest threads and the `top` highest counter rates, e.g.
/// `rss=41.2MiB cpu: readout-0 98% tpg-0 40% | rates: swdaq_readout_frames_total{link=0} 2.0M/s`.
pub fn summary_line(snapshot: &Snapshot, top: usize) -> String {
    let mut out = String::new();
    if let Some(rss) = snapshot.process.resident_memory_bytes {
        let _ = write!(out, "rss={:.1}MiB ", rss as f64 / (1024.0 * 1024.0));
    }
    let mut threads: Vec<_> = snapshot.process.threads.iter().collect();
    threads.sort_by(|a, b| b.cpu_usage_ratio.total_cmp(&a.cpu_usage_ratio));
    out.push_str("cpu:");
    for t in threads.iter().take(top) {
        let name = escape_label_value(&t.name);
        let _ = write!(out, " {name} {:.0}%", t.cpu_usage_ratio * 100.0);
    }
    let mut rates: Vec<(String, f64)> = snapshot
        .families
        .iter()
        .flat_map(|f| f.series.iter().map(move |s| (f, s)))
        .filter_map(|(f, s)| match s.value {
            Value::Counter {
                rate_per_second, ..
            }
            | Value::Histogram {
                rate_per_second, ..
            } => {
                // Thread first and unnamed, the rest as k=v; escaped to stay on one line.
                let thread = s.labels.get(THREAD_LABEL).map_or("", String::as_str);
                let labels: Vec<String> = std::iter::once(escape_label_value(thread))
                    .chain(
                        s.labels
                            .iter()
                            .filter(|(k, _)| *k != THREAD_LABEL)
                            .map(|(k, v)| format!("{k}={}", escape_label_value(v))),
                    )
                    .collect();
                Some((
                    format!("{}{{{}}}", f.name, labels.join(",")),
                    rate_per_second,
                ))
            }
            Value::Gauge { .. } => None,
        })
        .collect();
    rates.sort_by(|a, b| b.1.total_cmp(&a.1));
    out.push_str(" | rates:");
    for (name, rate) in rates.iter().take(top) {
        let _ = write!(out, " {name} {}/s", si(*rate));
    }
    out
}

fn si(v: f64) -> String {
    match v.abs() {
        a if a >= 1e9 => format!("{:.2}G", v / 1e9),
        a if a >= 1e6 => format!("{:.2}M", v / 1e6),
        a if a >= 1e3 => format!("{:.2}k", v / 1e3),
        _ => format!("{v:.1}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::Registry;
    use crate::stats::Collector;

    fn snapshot() -> Snapshot {
        let reg = Registry::new();
        for link in ["0", "1"] {
            let mut b = reg.block("readout", &[("link", link), ("odd", "a\"b\\c\nd")]);
            b.counter("frames_total", "Frames \\ received\nok")
                .unwrap()
                .add(7);
            b.histogram("lat_seconds", "Latency", &[1e-5, 0.5])
                .unwrap()
                .observe(0.25);
        }
        Collector::new(reg).collect()
    }

    #[test]
    fn groups_and_escapes() {
        let text = render_prometheus(&snapshot());
        assert_eq!(text.matches("# TYPE frames_total counter").count(), 1);
        assert_eq!(text.matches("# HELP lat_seconds ").count(), 1);
        assert!(text.contains("# HELP frames_total Frames \\\\ received\\nok\n"));
        assert!(
            text.contains(
                "frames_total{link=\"0\",odd=\"a\\\"b\\\\c\\nd\",thread=\"readout\"} 7\n"
            )
        );
        assert!(text.contains("lat_seconds_bucket{link=\"1\",odd=\"a\\\"b\\\\c\\nd\",thread=\"readout\",le=\"1e-5\"} 0\n"));
        assert!(text.contains(",le=\"0.5\"} 1\n"));
        assert!(text.contains(",le=\"+Inf\"} 1\n"));
        assert!(text.contains(
            "lat_seconds_sum{link=\"1\",odd=\"a\\\"b\\\\c\\nd\",thread=\"readout\"} 0.25\n"
        ));
        assert!(text.contains("lat_seconds_count{"));
        // Each family's samples follow its TYPE line, before the next family's.
        let frames_type = text.find("# TYPE frames_total").unwrap();
        let lat_type = text.find("# TYPE lat_seconds").unwrap();
        let last_frames = text.rfind("\nframes_total{").unwrap();
        assert!(frames_type < last_frames && last_frames < lat_type);
    }

    #[test]
    fn floats() {
        assert_eq!(fmt_f64(f64::INFINITY), "+Inf");
        assert_eq!(fmt_f64(f64::NEG_INFINITY), "-Inf");
        assert_eq!(fmt_f64(f64::NAN), "NaN");
        assert_eq!(fmt_f64(1.0), "1.0");
        assert_eq!(fmt_f64(1e300), "1e300");
    }

    #[test]
    fn summary_is_one_line() {
        let line = summary_line(&snapshot(), 3);
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.contains(" | rates: frames_total{readout,link=0,odd=a\\\"b\\\\c\\nd} 0.0/s"),
            "{line}"
        );
    }
}
