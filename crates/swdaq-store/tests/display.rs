//! The event display draws the sample's muon-like track and its trigger primitives.

use swdaq_store::display::{DisplayOptions, display_file, render};
use swdaq_store::{RecordFileWriter, StoreConfig, StoreError, sample};

fn options() -> DisplayOptions {
    DisplayOptions {
        plane_of: Box::new(sample::plane_of),
        ..Default::default()
    }
}

#[test]
fn the_track_and_its_tps_are_drawn_one_panel_per_plane() {
    let s = sample::track_record(3);
    let image = render(&s.record, &options()).unwrap();
    let planes: Vec<(&str, usize, usize)> = image
        .summary
        .panels
        .iter()
        .map(|p| (p.plane.as_str(), p.channels, p.tps))
        .collect();
    assert_eq!(
        planes,
        vec![("U (induction)", 128, 0), ("X (collection)", 128, 128)]
    );
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("event_display.png");
    image.save_png(&out).unwrap();
    assert!(std::fs::metadata(&out).unwrap().len() > 10_000);
    let count = |f: &dyn Fn([u8; 3]) -> bool| {
        (0..image.height)
            .flat_map(|y| (0..image.width).map(move |x| (x, y)))
            .filter(|&(x, y)| f(image.pixel(x, y)))
            .count()
    };
    // The track: strong red (collection pulses, induction positive lobes) and blue lobes.
    assert!(count(&|[r, g, b]| r > 220 && g < 90 && b < 90) > 500);
    assert!(count(&|[r, g, b]| b > 220 && r < 150 && g < 150) > 200);
    // TP outlines: dark grey (translucent black over white or pale pixels).
    assert!(
        count(&|[r, g, b]| r == g && g == b && (80..=120).contains(&r)) > 1000,
        "TP boxes"
    );
    // Text was drawn (the embedded font works): dark pixels outside the plots.
    assert!(count(&|[r, g, b]| r < 60 && g < 60 && b < 60) > 2000);
}

#[test]
fn a_stored_record_is_displayed_and_a_missing_one_is_an_error() {
    let dir = std::env::temp_dir().join(format!("swdaq-display-{}", std::process::id()));
    let mut w = RecordFileWriter::new(StoreConfig {
        directory: dir.clone(),
        min_free_bytes: 0,
        ..Default::default()
    })
    .unwrap();
    w.write(&sample::track_record(5).record).unwrap();
    w.close().unwrap();
    let file = w.closed_files()[0].clone();
    let png = dir.join("five.png");
    let (summary, bad) = display_file(&file, 5, &png, &DisplayOptions::default()).unwrap();
    assert!(bad.is_empty());
    assert_eq!((summary.panels.len(), summary.samples), (1, 1280));
    assert_eq!(summary.panels[0].tps, 128);
    let err = display_file(&file, 6, &png, &DisplayOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Display(_)), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}
