//! Event display (library side of `swdaq display`): one record's WIBEth data (whole frames or
//! ROI regions) as channel versus time, pedestal-subtracted ADC (per-channel median) as colour, one panel per plane, with the
//! record's trigger primitives drawn on top as translucent boxes. A record of a detector's own
//! streaming boards (`Detector_Frames`: no ADC layout swdaq knows) is drawn raw instead: per
//! link, the payload's bytes versus the slices of the window. PNG output; text is drawn with an
//! embedded DejaVu Sans (the `dejavu` crate; Bitstream Vera licence), so no system font is
//! needed.

use crate::error::{Result, StoreError};
use crate::reader::{BadFragment, RecordFileReader, decode};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Once;
use swdaq_format::board_frame;
use swdaq_format::roi::RoiPayload;
use swdaq_format::wibeth::{NUM_CHANNELS, SAMPLES_PER_FRAME, TICKS_PER_SAMPLE};
use swdaq_format::{Fragment, FragmentType, SourceId, TriggerPrimitive, TriggerRecord};

/// Microseconds per 62.5 MHz tick.
const US_PER_TICK: f64 = 0.016;
/// Longest record drawn, in samples (~67 ms): bounds memory on corrupt timestamps.
const MAX_SAMPLES: u64 = 1 << 17;

pub struct DisplayOptions {
    pub width: u32,
    pub height: u32,
    /// Offline channel of channel `c` (0..64) of the WIBEth fragment from `source`.
    pub channel_of: Box<dyn Fn(SourceId, usize) -> u32>,
    /// Panel (plane) of an offline channel; panels are drawn top to bottom in name order.
    pub plane_of: Box<dyn Fn(u32) -> String>,
}

impl Default for DisplayOptions {
    /// 1600 x 900; channel `c` of source id `s` is offline channel `64 s + c`; one panel.
    fn default() -> Self {
        Self {
            width: 1600,
            height: 900,
            channel_of: Box::new(|s, c| s.id * NUM_CHANNELS as u32 + c as u32),
            plane_of: Box::new(|_| "all channels".into()),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PanelSummary {
    pub plane: String,
    pub channels: usize,
    pub first_channel: u32,
    pub last_channel: u32,
    pub tps: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct DisplaySummary {
    pub trigger_number: u64,
    pub samples: usize,
    /// The ADC deviation drawn at full colour.
    pub adc_scale: f32,
    pub panels: Vec<PanelSummary>,
    /// Fragments that parse but whose content is garbage, left out of the picture, with why.
    pub left_out: Vec<BadFragment>,
}

/// A rendered display: RGB pixels, row by row.
pub struct EventImage {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
    pub summary: DisplaySummary,
}

impl EventImage {
    pub fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let at = 3 * (y as usize * self.width as usize + x as usize);
        [self.rgb[at], self.rgb[at + 1], self.rgb[at + 2]]
    }

    pub fn save_png(&self, path: &Path) -> Result<()> {
        save_rgb_png(path, self.width, self.height, &self.rgb)
    }
}

/// Writes 8-bit RGB pixels (`3 * width * height` bytes, rows top down) as a PNG file.
pub fn save_rgb_png(path: &Path, width: u32, height: u32, rgb: &[u8]) -> Result<()> {
    let io = |source| StoreError::Io {
        what: "cannot write",
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(path).map_err(io)?;
    encode_png(std::io::BufWriter::new(file), width, height, rgb).map_err(|e| match e {
        png::EncodingError::IoError(source) => io(source),
        other => StoreError::Display(other.to_string()),
    })
}

/// 8-bit RGB pixels (`3 * width * height` bytes, rows top down) as the bytes of a PNG file
/// (`swdaq serve`'s `/display.png`).
pub fn rgb_png(width: u32, height: u32, rgb: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    encode_png(&mut out, width, height, rgb).map_err(|e| StoreError::Display(e.to_string()))?;
    Ok(out)
}

fn encode_png(
    out: impl std::io::Write,
    width: u32,
    height: u32,
    rgb: &[u8],
) -> std::result::Result<(), png::EncodingError> {
    let mut encoder = png::Encoder::new(out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .write_header()
        .and_then(|mut w| w.write_image_data(rgb))
}

/// Renders record `trigger` (sequence 0) of `file` into a PNG at `out`; fragments that cannot
/// be read, or whose content is garbage, are left out of the picture and returned with why.
pub fn display_file(
    file: &Path,
    trigger: u64,
    out: &Path,
    options: &DisplayOptions,
) -> Result<(DisplaySummary, Vec<BadFragment>)> {
    let reader = RecordFileReader::open(file)?;
    let id = reader
        .record_ids()?
        .into_iter()
        .find(|id| id.trigger_number == trigger)
        .ok_or_else(|| {
            StoreError::Display(format!("{} has no record {trigger}", file.display()))
        })?;
    let (record, mut bad_fragments) = reader.read_record_skipping_bad(&id)?;
    let image = render(&record, options)?;
    image.save_png(out)?;
    bad_fragments.extend(image.summary.left_out.iter().cloned());
    Ok((image.summary, bad_fragments))
}

/// One plane's channels: pedestal-subtracted samples on the record's common time grid.
struct Panel {
    plane: String,
    channels: BTreeMap<u32, Vec<f32>>,
    tps: Vec<TriggerPrimitive>,
}

fn median(values: &mut [f32]) -> f32 {
    if values.is_empty() {
        return 0.0;
    }
    let mid = values.len() / 2;
    *values.select_nth_unstable_by(mid, f32::total_cmp).1
}

/// Consecutive samples of one offline channel from `first_timestamp` on.
struct SampleRun {
    channel: u32,
    first_timestamp: u64,
    adcs: Vec<u16>,
}

/// What one fragment adds to the picture.
#[derive(Default)]
struct Drawn {
    runs: Vec<SampleRun>,
    tps: Vec<TriggerPrimitive>,
}

/// A fragment's samples as runs per offline channel (every channel of each WIBEth frame,
/// every channel row of each ROI region, whose channel ids are offline already) and its TPs;
/// or why the fragment is garbage and left out: a frame or payload that does not parse, a
/// sampling the display does not draw, or samples too far from the trigger to share its
/// time axis (a corrupt timestamp would otherwise stretch the picture past drawing).
fn fragment_content(
    f: &Fragment<'_>,
    trigger_timestamp: u64,
    options: &DisplayOptions,
) -> std::result::Result<Drawn, String> {
    let mut drawn = Drawn::default();
    match f.header.fragment_type {
        FragmentType::WIBETH => {
            for (i, frame) in decode::wibeth_frames(f.payload).enumerate() {
                let frame = frame.map_err(|e| format!("WIBEth frame {i}: {e}"))?;
                drawn.runs.extend((0..NUM_CHANNELS).map(|c| SampleRun {
                    channel: (options.channel_of)(f.header.element_id, c),
                    first_timestamp: frame.timestamp(),
                    adcs: (0..SAMPLES_PER_FRAME).map(|s| frame.adc(s, c)).collect(),
                }));
            }
        }
        FragmentType::ROI => {
            let roi = RoiPayload::parse(f.payload).map_err(|e| format!("ROI payload: {e}"))?;
            if roi.ticks_per_sample as u64 != TICKS_PER_SAMPLE {
                return Err(format!(
                    "ROI samples every {} ticks: the display draws WIBEth's {TICKS_PER_SAMPLE}",
                    roi.ticks_per_sample
                ));
            }
            for region in roi.regions() {
                let adcs = region.adcs();
                let rows = adcs.chunks_exact(region.samples.max(1));
                drawn.runs.extend(
                    region
                        .channel_ids()
                        .zip(rows)
                        .map(|(channel, row)| SampleRun {
                            channel,
                            first_timestamp: region.first_timestamp,
                            adcs: row.to_vec(),
                        }),
                );
            }
        }
        FragmentType::TRIGGER_PRIMITIVE => {
            drawn.tps = decode::trigger_primitives(f.payload)
                .map_err(|e| format!("trigger primitives: {e}"))?;
        }
        _ => {}
    }
    let reach = MAX_SAMPLES / 2 * TICKS_PER_SAMPLE;
    if let Some(far) = drawn
        .runs
        .iter()
        .map(|r| r.first_timestamp)
        .find(|t| t.abs_diff(trigger_timestamp) > reach)
    {
        return Err(format!(
            "samples at timestamp {far}, more than {} samples from the trigger's {trigger_timestamp}",
            MAX_SAMPLES / 2
        ));
    }
    Ok(drawn)
}

/// Collects the record's samples (WIBEth frames and ROI regions) per offline channel and its
/// TPs, by plane; garbage fragments are left out and returned with why.
fn collect(
    record: &TriggerRecord,
    options: &DisplayOptions,
) -> Result<(Vec<Panel>, u64, usize, Vec<BadFragment>)> {
    let (mut runs, mut tps, mut left_out) = (Vec::new(), Vec::new(), Vec::new());
    for f in record.fragments().filter_map(|f| f.ok()) {
        match fragment_content(&f, record.header.trigger_timestamp, options) {
            Ok(drawn) => {
                runs.extend(drawn.runs);
                tps.extend(drawn.tps);
            }
            Err(reason) => left_out.push(BadFragment {
                dataset: crate::layout::fragment_dataset(&f.header),
                reason,
            }),
        }
    }
    let t0 = runs
        .iter()
        .filter(|r| !r.adcs.is_empty())
        .map(|r| r.first_timestamp)
        .min()
        .ok_or_else(|| {
            StoreError::Display(format!(
                "record {} has no WIBEth frame or ROI region to display ({} fragments left out as garbage)",
                record.header.trigger_number,
                left_out.len()
            ))
        })?;
    let end = runs
        .iter()
        .map(|r| r.first_timestamp + r.adcs.len() as u64 * TICKS_PER_SAMPLE)
        .max()
        .unwrap_or(t0);
    let samples = (end - t0).div_ceil(TICKS_PER_SAMPLE);
    if samples > MAX_SAMPLES {
        return Err(StoreError::Display(format!(
            "record {} spans {samples} samples, more than the {MAX_SAMPLES} drawn",
            record.header.trigger_number
        )));
    }
    let samples = samples as usize;
    let mut panels: BTreeMap<String, Panel> = BTreeMap::new();
    fn panel<'p>(
        panels: &'p mut BTreeMap<String, Panel>,
        options: &DisplayOptions,
        channel: u32,
    ) -> &'p mut Panel {
        let plane = (options.plane_of)(channel);
        panels.entry(plane.clone()).or_insert_with(|| Panel {
            plane,
            channels: BTreeMap::new(),
            tps: Vec::new(),
        })
    }
    for run in &runs {
        let first = ((run.first_timestamp - t0) / TICKS_PER_SAMPLE) as usize;
        let row = panel(&mut panels, options, run.channel)
            .channels
            .entry(run.channel)
            .or_insert_with(|| vec![f32::NAN; samples]);
        for (at, &adc) in row[first..].iter_mut().zip(&run.adcs) {
            *at = f32::from(adc);
        }
    }
    for tp in tps {
        panel(&mut panels, options, tp.channel).tps.push(tp);
    }
    let mut panels: Vec<Panel> = panels
        .into_values()
        .filter(|p| !p.channels.is_empty())
        .collect();
    subtract_row_medians(&mut panels);
    Ok((panels, t0, samples, left_out))
}

/// Each row less its median (a channel's pedestal; a payload byte's usual value).
fn subtract_row_medians(panels: &mut [Panel]) {
    for p in panels {
        for row in p.channels.values_mut() {
            let mut present: Vec<f32> = row.iter().copied().filter(|v| !v.is_nan()).collect();
            let pedestal = median(&mut present);
            row.iter_mut().for_each(|v| *v -= pedestal);
        }
    }
}

/// Most payload bytes and slices of one board link drawn raw: bounds memory on a huge window.
const MAX_RAW_BYTES: usize = 4096;
const MAX_RAW_SLICES: usize = 4096;

/// A record of streaming boards only (`Detector_Frames`, no WIBEth or ROI): drawn raw.
fn is_raw(record: &TriggerRecord) -> bool {
    let kinds: Vec<FragmentType> = record
        .fragments()
        .filter_map(|f| f.ok())
        .map(|f| f.header.fragment_type)
        .collect();
    kinds.contains(&FragmentType::DETECTOR_FRAMES)
        && !kinds
            .iter()
            .any(|k| [FragmentType::WIBETH, FragmentType::ROI].contains(k))
}

/// One panel per board link: row = payload byte (up to [`MAX_RAW_BYTES`]), column = slice of
/// the window in order, less each row's median. A damaged board frame ends its fragment's
/// picture there and is named; the slices before it are drawn.
fn collect_raw(record: &TriggerRecord) -> Result<(Vec<Panel>, u64, usize, Vec<BadFragment>)> {
    let (mut panels, mut left_out, mut slices) = (Vec::new(), Vec::new(), 0);
    for f in record.fragments().filter_map(|f| f.ok()) {
        if f.header.fragment_type != FragmentType::DETECTOR_FRAMES {
            continue;
        }
        let mut rows: BTreeMap<u32, Vec<f32>> = BTreeMap::new();
        let mut drawn = 0;
        for frame in board_frame::frames(f.payload) {
            let frame = match frame {
                Ok((_, frame)) => frame,
                Err(e) => {
                    left_out.push(BadFragment {
                        dataset: crate::layout::fragment_dataset(&f.header),
                        reason: format!("board frame {drawn}: {e} (the frames before it drawn)"),
                    });
                    break;
                }
            };
            if drawn == MAX_RAW_SLICES {
                return Err(StoreError::Display(format!(
                    "record {} holds more than the {MAX_RAW_SLICES} slices of a link drawn",
                    record.header.trigger_number
                )));
            }
            for (byte, &value) in frame.payload.iter().take(MAX_RAW_BYTES).enumerate() {
                let row = rows.entry(byte as u32).or_default();
                row.resize(drawn, f32::NAN);
                row.push(f32::from(value));
            }
            drawn += 1;
        }
        slices = slices.max(drawn);
        if !rows.is_empty() {
            panels.push(Panel {
                plane: f.header.element_id.to_string(),
                channels: rows,
                tps: Vec::new(),
            });
        }
    }
    if panels.is_empty() {
        return Err(StoreError::Display(format!(
            "record {} has no board frame to display ({} fragments left out as garbage)",
            record.header.trigger_number,
            left_out.len()
        )));
    }
    for row in panels.iter_mut().flat_map(|p| p.channels.values_mut()) {
        row.resize(slices, f32::NAN);
    }
    subtract_row_medians(&mut panels);
    Ok((panels, 0, slices, left_out))
}

/// Full-colour deviation: the 99.9th percentile of |ADC - pedestal| (at least 10 ADC), so a
/// few hot samples do not wash out a track.
fn adc_scale(panels: &[Panel]) -> f32 {
    let mut all: Vec<f32> = panels
        .iter()
        .flat_map(|p| p.channels.values().flatten())
        .filter(|v| !v.is_nan())
        .map(|v| v.abs())
        .collect();
    let at = ((all.len() as f64 * 0.999) as usize).min(all.len().saturating_sub(1));
    let q = if all.is_empty() {
        0.0
    } else {
        *all.select_nth_unstable_by(at, f32::total_cmp).1
    };
    q.max(10.0)
}

/// White at the pedestal, red above, blue below; grey where there is no data.
fn colour(v: f32, scale: f32) -> RGBColor {
    if v.is_nan() {
        return RGBColor(225, 225, 225);
    }
    let x = (v / scale).clamp(-1.0, 1.0);
    let fade = (255.0 * (1.0 - x.abs())) as u8;
    if x >= 0.0 {
        RGBColor(255, fade, fade)
    } else {
        RGBColor(fade, fade, 255)
    }
}

/// Makes the embedded DejaVu Sans the `sans-serif` font of every plotters drawing in this
/// process (the event display's and any other), so no system font is needed.
pub fn register_fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Both are valid TrueType fonts shipped in the crate; a failure would leave text
        // undrawn and surface as a drawing error, not a panic.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
        let _ = plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold());
    });
}

fn draw_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> StoreError {
    StoreError::Display(format!("drawing failed: {e}"))
}

/// Draws the record into an RGB image.
pub fn render(record: &TriggerRecord, options: &DisplayOptions) -> Result<EventImage> {
    register_fonts();
    let raw = is_raw(record);
    let (panels, t0, samples, left_out) = if raw {
        collect_raw(record)?
    } else {
        collect(record, options)?
    };
    let axes = if raw { &RAW_AXES } else { &ADC_AXES };
    let scale = adc_scale(&panels);
    let (width, height) = (options.width.max(200), options.height.max(150));
    let mut rgb = vec![255u8; 3 * width as usize * height as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let h = &record.header;
        let title = format!(
            "run {}  trigger {}  timestamp {}  |  colour: {}, full at \u{b1}{scale:.0}",
            h.run_number, h.trigger_number, h.trigger_timestamp, axes.colour
        );
        let body = root
            .titled(&title, ("sans-serif", 22).into_font())
            .map_err(draw_err)?;
        let areas = body.split_evenly((panels.len(), 1));
        // A board's slices are drawn by their place in the window: its clock is not known here.
        let t_of = |sample: f64| {
            if raw {
                sample
            } else {
                (t0 as f64 + sample * TICKS_PER_SAMPLE as f64 - h.trigger_timestamp as f64)
                    * US_PER_TICK
            }
        };
        for (panel, area) in panels.iter().zip(&areas) {
            draw_panel(panel, area, scale, Grid { t0, samples }, &t_of, axes)?;
        }
        root.present().map_err(draw_err)?;
    }
    Ok(EventImage {
        width,
        height,
        rgb,
        summary: DisplaySummary {
            trigger_number: record.header.trigger_number,
            samples,
            adc_scale: scale,
            panels: panels
                .iter()
                .map(|p| PanelSummary {
                    plane: p.plane.clone(),
                    channels: p.channels.len(),
                    first_channel: p.channels.keys().next().copied().unwrap_or(0),
                    last_channel: p.channels.keys().next_back().copied().unwrap_or(0),
                    tps: p.tps.len(),
                })
                .collect(),
            left_out,
        },
    })
}

/// What a picture's axes and colours mean.
struct Axes {
    x: &'static str,
    y: &'static str,
    /// What a panel's rows are, for its caption ("channels").
    rows: &'static str,
    /// What the colour shows, for the title.
    colour: &'static str,
}

const ADC_AXES: Axes = Axes {
    x: "time since trigger [\u{b5}s]",
    y: "offline channel",
    rows: "channels",
    colour: "ADC - pedestal",
};

const RAW_AXES: Axes = Axes {
    x: "slice of the window",
    y: "payload byte",
    rows: "bytes",
    colour: "byte - its row's median",
};

/// The record's common time grid: first sample's timestamp and number of samples.
#[derive(Clone, Copy)]
struct Grid {
    t0: u64,
    samples: usize,
}

fn draw_panel<DB: DrawingBackend>(
    panel: &Panel,
    area: &DrawingArea<DB, Shift>,
    scale: f32,
    grid: Grid,
    t_of: &dyn Fn(f64) -> f64,
    axes: &Axes,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let first = *panel.channels.keys().next().unwrap_or(&0);
    let last = *panel.channels.keys().next_back().unwrap_or(&0);
    let (lo, hi) = (f64::from(first), f64::from(last) + 1.0);
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{}: {} {first}..={last}", panel.plane, axes.rows),
            ("sans-serif", 18).into_font(),
        )
        .margin(8)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(t_of(0.0)..t_of(grid.samples as f64), lo..hi)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .label_style(("sans-serif", 14))
        .x_label_formatter(&|t| format!("{t:.0}"))
        .y_label_formatter(&|c| format!("{c:.0}"))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(draw_err)?;
    // The heat map pixel by pixel: each pixel shows its channel's largest deviation over the
    // samples that fall in its column, so narrow pulses survive downsampling.
    let plot = chart.plotting_area();
    let (xs, ys) = plot.get_pixel_range();
    let (w, h) = (
        (xs.end - xs.start).max(1) as usize,
        (ys.end - ys.start).max(1) as usize,
    );
    let pixels = plot.strip_coord_spec();
    for j in 0..h {
        let channel = lo + (h - 1 - j) as f64 * (hi - lo) / h as f64;
        let Some(row) = panel.channels.get(&(channel as u32)) else {
            continue;
        };
        for i in 0..w {
            let a = i * grid.samples / w;
            let b = ((i + 1) * grid.samples / w).clamp(a + 1, grid.samples);
            let v = row[a.min(b - 1)..b]
                .iter()
                .copied()
                .filter(|v| !v.is_nan())
                .max_by(|x, y| x.abs().total_cmp(&y.abs()))
                .unwrap_or(f32::NAN);
            pixels
                .draw_pixel((i as i32, j as i32), &colour(v, scale))
                .map_err(draw_err)?;
        }
    }
    // TPs: a translucent outline around the samples over threshold of the TP's channel row
    // (at least 3 pixels tall), so the pulse stays visible inside it.
    let half = (1.5 * (hi - lo) / h as f64).max(0.5);
    let ticks = |t: u64| t_of((t as f64 - grid.t0 as f64) / TICKS_PER_SAMPLE as f64);
    let outline = BLACK.mix(0.6).stroke_width(1);
    chart
        .draw_series(panel.tps.iter().map(|tp| {
            let y = f64::from(tp.channel) + 0.5;
            let end = tp.time_end(TICKS_PER_SAMPLE) + TICKS_PER_SAMPLE;
            Rectangle::new(
                [(ticks(tp.time_start), y - half), (ticks(end), y + half)],
                outline,
            )
        }))
        .map_err(draw_err)?;
    Ok(())
}
