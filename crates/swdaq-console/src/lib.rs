//! The operator's console that `swdaq serve` serves at `/`: a page written against run
//! control's JSON (`/status`, `/history`, the command routes) and the one `Live` schema every
//! model reports, so it needs no code per model. Plain HTML, CSS and JavaScript with no build
//! step; plots by uPlot, vendored unchanged from its npm package with its licence beside it
//! (`assets/vendor/uplot/VENDORED.md` says which version and how it was taken). Every asset
//! is embedded in the binary: the page loads nothing from another host.
//!
//! The shell is static and holds nothing about the system, so it is served without the
//! token; every figure it shows comes from routes that need it.

/// A file the console is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asset {
    pub bytes: &'static [u8],
    pub content_type: &'static str,
}

/// The prefix of every asset's path but the page's own (`/`).
pub const PREFIX: &str = "/console/";

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// An embedded file under `assets/` and its content type.
macro_rules! embedded {
    ($name:literal, $content_type:expr) => {
        (
            $name,
            Asset {
                bytes: include_bytes!(concat!("../assets/", $name)),
                content_type: $content_type,
            },
        )
    };
}

/// Every asset by its path under [`PREFIX`] (the page itself is `index.html`).
const ASSETS: &[(&str, Asset)] = &[
    embedded!("index.html", HTML),
    embedded!("console.js", JS),
    embedded!("console.css", CSS),
    embedded!("vendor/uplot/uPlot.iife.min.js", JS),
    embedded!("vendor/uplot/uPlot.min.css", CSS),
    embedded!("vendor/uplot/LICENSE", TEXT),
    embedded!("vendor/uplot/VENDORED.md", TEXT),
];

/// The asset at request path `path` (a query string is ignored): `/` is the page, the rest
/// are under [`PREFIX`]; `None` for any other path.
pub fn asset(path: &str) -> Option<Asset> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let name = match path {
        "/" | "/console" | "/console/" => "index.html",
        other => other.strip_prefix(PREFIX)?,
    };
    ASSETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, asset)| asset)
}

/// Whether `path` is one of the console's (served without the token).
pub fn is_console_path(path: &str) -> bool {
    asset(path).is_some()
}

/// What a request to `swdaq serve` asks of the console, beside the API's commands.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// The page or one of its assets (no token needed).
    Asset(Asset),
    /// The live series after unix time `since` (all ten minutes without it).
    History { since: Option<f64> },
    /// The newest stored event: its fragments' sizes per source (JSON).
    LatestEvent,
    /// The newest stored event drawn (PNG), where the model has an event display.
    Display,
    /// The run's online data-quality histograms and their verdicts (JSON).
    Dqm,
    /// The newest runs in the run registry with their files and logbooks (JSON).
    Runs,
    /// Run control's own Prometheus metrics.
    Metrics,
}

/// The console route `method` and `target` (path and query) ask for, if any.
pub fn route(method: &str, target: &str) -> Option<Route> {
    if method != "GET" {
        return None;
    }
    if let Some(asset) = asset(target) {
        return Some(Route::Asset(asset));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match path {
        "/history" => Some(Route::History {
            since: query
                .split('&')
                .find_map(|p| p.strip_prefix("since="))
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite()),
        }),
        "/latest-event" => Some(Route::LatestEvent),
        "/display.png" => Some(Route::Display),
        "/dqm" => Some(Route::Dqm),
        "/runs" => Some(Route::Runs),
        "/metrics" => Some(Route::Metrics),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(path: &str) -> &'static str {
        std::str::from_utf8(asset(path).unwrap().bytes).unwrap()
    }

    /// Every `src="..."` and `href="..."` of the page.
    fn references(html: &str) -> Vec<&str> {
        ["src=\"", "href=\""]
            .iter()
            .flat_map(|attr| html.match_indices(attr).map(move |(at, _)| at + attr.len()))
            .map(|start| {
                let end = html[start..].find('"').unwrap();
                &html[start..start + end]
            })
            .collect()
    }

    #[test]
    fn the_page_and_what_it_references_are_served() {
        assert_eq!(asset("/").unwrap().content_type, HTML);
        assert_eq!(asset("/?token=x"), asset("/"));
        let refs = references(text("/"));
        assert!(refs.len() >= 4, "{refs:?}");
        for r in refs {
            assert!(
                asset(r).is_some(),
                "the page references {r}, which is not served"
            );
        }
    }

    #[test]
    fn nothing_is_loaded_from_another_host() {
        for own in ["/", "/console/console.js", "/console/console.css"] {
            let t = text(own);
            for scheme in ["http://", "https://", "//cdn", "@import"] {
                assert!(!t.contains(scheme), "{own} contains {scheme}");
            }
        }
        for r in references(text("/")) {
            assert!(r.starts_with(PREFIX), "{r} is not one of ours");
        }
    }

    #[test]
    fn uplot_is_the_recorded_version_with_its_licence() {
        let js = text("/console/vendor/uplot/uPlot.iife.min.js");
        assert!(js.starts_with("/*! https://github.com/leeoniya/uPlot (v1.6.32) */"));
        assert!(text("/console/vendor/uplot/LICENSE").contains("The MIT License"));
        assert!(text("/console/vendor/uplot/VENDORED.md").contains("uplot@1.6.32"));
    }

    #[test]
    fn the_page_its_assets_and_its_data_routes_are_known() {
        assert!(matches!(route("GET", "/"), Some(Route::Asset(_))));
        assert!(matches!(
            route("GET", "/console/console.js"),
            Some(Route::Asset(_))
        ));
        assert_eq!(
            route("GET", "/history?since=1700000000.5"),
            Some(Route::History {
                since: Some(1_700_000_000.5)
            })
        );
        assert_eq!(
            route("GET", "/history"),
            Some(Route::History { since: None })
        );
        assert_eq!(
            route("GET", "/history?since=NaN&x"),
            Some(Route::History { since: None })
        );
        assert_eq!(route("GET", "/latest-event"), Some(Route::LatestEvent));
        assert_eq!(route("GET", "/display.png"), Some(Route::Display));
        assert_eq!(route("GET", "/dqm"), Some(Route::Dqm));
        assert_eq!(route("POST", "/dqm"), None);
        assert_eq!(route("GET", "/runs"), Some(Route::Runs));
        assert_eq!(route("POST", "/runs"), None);
        assert_eq!(route("GET", "/metrics"), Some(Route::Metrics));
        for (method, target) in [("POST", "/"), ("GET", "/status"), ("GET", "/console/x")] {
            assert_eq!(route(method, target), None, "{method} {target}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_target_is_a_route_or_none_never_a_panic(method in ".{0,6}", target in ".{0,60}") {
            if let Some(Route::History { since: Some(t) }) = route(&method, &target) {
                proptest::prop_assert!(t.is_finite());
            }
        }
    }

    #[test]
    fn other_paths_are_not_assets() {
        for path in [
            "/status",
            "/console/../Cargo.toml",
            "/console/vendor",
            "/console/nothing.js",
            "/index.html",
            "",
        ] {
            assert!(asset(path).is_none(), "{path}");
            assert!(!is_console_path(path));
        }
    }
}
