//! The picture `swdaq tpg-quality` writes: efficiency versus true peak / noise for each
//! threshold of the scan (left), and efficiency for pulses >= 5 sigma with the fake-hit rate
//! versus the threshold (right, fake rate on a log scale with the 10 Hz goal marked).

use anyhow::{Context, anyhow};
use plotters::chart::SeriesLabelStyle;
use plotters::prelude::*;
use std::path::Path;
use swdaq_tpg::quality::{BINS, QualityRow};

const WIDTH: u32 = 1400;
const HEIGHT: u32 = 600;
/// Where a bin's point is drawn: its middle (the open last bin at 14 sigma).
fn bin_centre((lo, hi): (f64, f64)) -> f64 {
    if hi.is_finite() {
        (lo + hi) / 2.0
    } else {
        lo + 2.0
    }
}

/// The legend's look, the same on both panels.
fn legend<'s, 'a, 'b, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    labels: &'s mut SeriesLabelStyle<'a, 'b, DB, CT>,
    position: SeriesLabelPosition,
) -> &'s mut SeriesLabelStyle<'a, 'b, DB, CT> {
    labels
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
}

fn draw_error<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> anyhow::Error {
    anyhow!("drawing the quality plot: {e}")
}

pub fn write(path: &Path, rows: &[QualityRow], title: &str) -> anyhow::Result<()> {
    swdaq_store::display::register_fonts();
    let mut rgb = vec![255u8; 3 * WIDTH as usize * HEIGHT as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
        let root = root.titled(title, ("sans-serif", 22)).map_err(draw_error)?;
        let (left, right) = root.split_horizontally(WIDTH / 2);
        efficiency_by_peak(&left, rows)?;
        threshold_scan(&right, rows)?;
        root.present().map_err(draw_error)?;
    }
    swdaq_store::display::save_rgb_png(path, WIDTH, HEIGHT, &rgb)
        .with_context(|| format!("writing {}", path.display()))
}

fn efficiency_by_peak<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    rows: &[QualityRow],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let mut chart = ChartBuilder::on(area)
        .caption("efficiency vs true peak / noise sigma", ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(2.0f64..16.0, 0.0f64..1.05)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("true peak / noise sigma")
        .y_desc("fraction of true pulses found")
        .draw()
        .map_err(draw_error)?;
    for (i, row) in rows.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = BINS
            .iter()
            .zip(&row.efficiency_by_peak_sigma)
            .filter(|(_, e)| e.is_finite())
            .map(|(&bin, &e)| (bin_centre(bin), e))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))
            .map_err(draw_error)?
            .label(format!("threshold {}", row.threshold))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, colour.filled())))
            .map_err(draw_error)?;
    }
    legend(
        &mut chart.configure_series_labels(),
        SeriesLabelPosition::LowerRight,
    )
    .draw()
    .map_err(draw_error)?;
    Ok(())
}

fn threshold_scan<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    rows: &[QualityRow],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let lo = rows
        .iter()
        .map(|r| r.threshold)
        .fold(f64::INFINITY, f64::min);
    let hi = rows
        .iter()
        .map(|r| r.threshold)
        .fold(f64::NEG_INFINITY, f64::max);
    let pad = ((hi - lo) * 0.05).max(0.5);
    let x = (lo - pad)..(hi + pad);
    // Fake rates are shown from 0.01 Hz up; a zero rate sits on the axis.
    let floor = 0.01;
    let top = rows
        .iter()
        .map(|r| r.fake_rate_hz_per_channel)
        .fold(100.0f64, f64::max)
        * 2.0;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "efficiency (>= 5 sigma) and fake hits vs threshold",
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .right_y_label_area_size(65)
        .build_cartesian_2d(x.clone(), 0.0f64..1.05)
        .map_err(draw_error)?
        .set_secondary_coord(x, (floor..top).log_scale());
    chart
        .configure_mesh()
        .x_desc("threshold (algorithm's unit)")
        .y_desc("efficiency, pulses >= 5 sigma")
        .draw()
        .map_err(draw_error)?;
    chart
        .configure_secondary_axes()
        .y_desc("fake hits / s / channel")
        .draw()
        .map_err(draw_error)?;
    let efficiency: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (r.threshold, r.efficiency_5_sigma))
        .collect();
    chart
        .draw_series(LineSeries::new(efficiency.clone(), BLUE.stroke_width(2)))
        .map_err(draw_error)?
        .label("efficiency >= 5 sigma (left)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart
        .draw_series(efficiency.iter().map(|&p| Circle::new(p, 4, BLUE.filled())))
        .map_err(draw_error)?;
    let fakes: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (r.threshold, r.fake_rate_hz_per_channel.max(floor)))
        .collect();
    chart
        .draw_secondary_series(LineSeries::new(fakes.clone(), RED.stroke_width(2)))
        .map_err(draw_error)?
        .label("fake hits / s / channel (right)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED.stroke_width(2)));
    chart
        .draw_secondary_series(
            fakes
                .iter()
                .map(|&p| TriangleMarker::new(p, 5, RED.filled())),
        )
        .map_err(draw_error)?;
    let goal = [(lo - pad, 10.0), (hi + pad, 10.0)];
    chart
        .draw_secondary_series(LineSeries::new(goal, RED.mix(0.5).stroke_width(1)))
        .map_err(draw_error)?
        .label("fake-rate goal, 10 Hz (right)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED.mix(0.5)));
    let target = [(lo - pad, 0.95), (hi + pad, 0.95)];
    chart
        .draw_series(LineSeries::new(target, BLUE.mix(0.5).stroke_width(1)))
        .map_err(draw_error)?
        .label("efficiency goal, 95% (left)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.mix(0.5)));
    legend(
        &mut chart.configure_series_labels(),
        SeriesLabelPosition::LowerLeft,
    )
    .draw()
    .map_err(draw_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(threshold: f64, efficiency: f64, fakes: f64) -> QualityRow {
        QualityRow {
            algorithm: "threshold",
            threshold,
            threshold_sigma: f64::NAN,
            efficiency_5_sigma: efficiency,
            efficiency_by_peak_sigma: vec![0.0, 0.2, f64::NAN, 0.9, 1.0, 1.0, 1.0],
            fake_rate_hz_per_channel: fakes,
            time_bias_ticks: 0.0,
            time_rms_ticks: 0.0,
            charge_ratio_mean: 1.0,
            charge_ratio_rms: 0.1,
        }
    }

    #[test]
    fn the_plot_is_a_png_even_with_empty_bins_and_zero_fake_rates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.png");
        let rows = [row(10.0, 1.0, 500.0), row(20.0, 0.99, 0.0)];
        write(&path, &rows, "test").unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(bytes.len() > 10_000, "something was drawn");
    }
}
