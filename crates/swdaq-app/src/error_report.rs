//! How the `swdaq` binary prints a failure: one line per cause, outermost first, each said
//! once. Many error types (`thiserror` variants with `{source}` in their text, `io::Error`
//! wrapped with its path) already quote their source in their own message; anyhow's default
//! report would then print it again as "Caused by", so a cause whose text an earlier line
//! already contains is left out.

/// The lines of the report for `err`, outermost cause first, none repeating another.
pub fn cause_lines(err: &anyhow::Error) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !lines.iter().any(|earlier| earlier.contains(&text)) {
            lines.push(text);
        }
    }
    lines
}

/// The report as printed on stderr: `error: ...` then one `  caused by: ...` per cause.
pub fn render(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for (i, line) in cause_lines(err).iter().enumerate() {
        out.push_str(if i == 0 { "error: " } else { "  caused by: " });
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot bind the metrics endpoint to 127.0.0.1:9: {source}")]
    struct QuotesItsSource {
        source: std::io::Error,
    }

    #[test]
    fn a_source_quoted_by_its_wrapper_is_printed_once() {
        let os = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let os_text = os.to_string();
        let err = Err::<(), _>(QuotesItsSource { source: os })
            .context("run.metrics_addr = \"127.0.0.1:9\": cannot serve /metrics")
            .unwrap_err();
        let report = render(&err);
        assert_eq!(report.lines().count(), 2, "{report}");
        assert!(report.starts_with("error: run.metrics_addr"), "{report}");
        assert!(report.contains("  caused by: cannot bind"), "{report}");
        assert_eq!(report.matches(&os_text).count(), 1, "{report}");
    }

    #[test]
    fn distinct_causes_each_get_a_line() {
        let err = anyhow::anyhow!("disk full")
            .context("cannot write record 7")
            .context("storage failed");
        assert_eq!(
            cause_lines(&err),
            ["storage failed", "cannot write record 7", "disk full"]
        );
    }
}
