use super::{emulated, print_results};
use swdaq_format::FrameFormat;

/// `swdaq bench tpg`'s arguments (what each measures: `swdaq bench tpg --help`).
#[derive(clap::Args)]
pub struct Args {
    /// Emulated WIBEth frames (replayed `passes` times); ProtoDUNE WIB gets as many
    /// channel-samples.
    #[arg(long, default_value_t = 2000)]
    pub frames: u64,
    #[arg(long, default_value_t = 5)]
    pub passes: usize,
    /// `threshold`'s threshold in ADC counts over the pedestal.
    #[arg(long, default_value_t = 20)]
    pub threshold: i16,
}

pub fn run(bench: &Args, json: bool) -> anyhow::Result<()> {
    let Args {
        frames,
        passes,
        threshold,
    } = bench;
    anyhow::ensure!(
        *frames > 0 && *passes > 0,
        "frames and passes must be at least 1"
    );
    let config = swdaq_tpg::ThresholdConfig {
        threshold: *threshold,
        ..Default::default()
    };
    config.validate()?;
    let wibeth = emulated(FrameFormat::WibEth, *frames);
    let protowib = emulated(FrameFormat::ProtoWib, *frames * 16);
    let links = [
        (FrameFormat::WibEth, &wibeth),
        (FrameFormat::ProtoWib, &protowib),
    ]
    .map(|(format, bytes)| swdaq_tpg::bench::LinkFrames { format, bytes });
    let results = swdaq_tpg::bench::run(&links, config, *passes);
    print_results(
        json,
        &results,
        &[
            "algorithm",
            "format",
            "implementation",
            "ns/ch-sample",
            "channels/core",
            "links/core",
            "x scalar",
            "TPs",
        ],
        |r| {
            vec![
                r.algorithm.to_string(),
                r.format.to_string(),
                format!("{:?}", r.implementation).to_lowercase(),
                format!("{:.3}", r.ns_per_channel_sample),
                format!("{:.0}", r.channels_per_core_realtime),
                format!("{:.1}", r.links_per_core_realtime),
                format!("{:.2}", r.speedup_vs_scalar),
                r.tps.to_string(),
            ]
        },
    )
}
