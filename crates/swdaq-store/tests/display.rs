//! The event display draws the sample's muon-like track and its trigger primitives, from whole
//! WIBEth frames or from ROI regions.

use swdaq_format::roi::RoiPayloadWriter;
use swdaq_format::wibeth::{SAMPLES_PER_FRAME, TICKS_PER_SAMPLE};
use swdaq_format::{Fragment, FragmentHeader, FragmentType, TriggerRecord};
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

/// The sample record with each link's WIBEth fragment replaced by an ROI fragment holding the
/// samples of `channels` (link-local) from sample `from` for `samples` samples.
fn as_roi(
    s: &sample::SampleRecord,
    channels: std::ops::Range<usize>,
    from: usize,
    samples: usize,
) -> TriggerRecord {
    let mut record = s.record.clone();
    for (link, fragment) in record
        .fragments
        .iter_mut()
        .enumerate()
        .take(sample::LINKS as usize)
    {
        let parsed = Fragment::parse(fragment).unwrap();
        assert_eq!(parsed.header.fragment_type, FragmentType::WIBETH);
        let t0 = parsed.header.window_begin;
        let ids: Vec<u32> = channels.clone().map(|c| (64 * link + c) as u32).collect();
        let adcs: Vec<u16> = channels
            .clone()
            .flat_map(|c| (from..from + samples).map(move |t| (c, t)))
            .map(|(c, t)| s.adcs[link][t / SAMPLES_PER_FRAME][t % SAMPLES_PER_FRAME][c])
            .collect();
        let mut roi = RoiPayloadWriter::new(TICKS_PER_SAMPLE as u32);
        roi.push(
            t0 + (from as u64) * TICKS_PER_SAMPLE,
            0,
            &ids,
            samples,
            &adcs,
        );
        let header = FragmentHeader {
            fragment_type: FragmentType::ROI,
            ..parsed.header
        };
        *fragment = Fragment::assemble(header, [&roi.finish(parsed.payload.len() as u64)[..]]);
    }
    record
}

#[test]
fn roi_regions_holding_every_sample_draw_the_same_picture_as_the_frames() {
    let s = sample::track_record(3);
    let frames = render(&s.record, &options()).unwrap();
    let roi = render(
        &as_roi(&s, 0..64, 0, sample::FRAMES * SAMPLES_PER_FRAME),
        &options(),
    )
    .unwrap();
    assert_eq!(roi.summary.samples, frames.summary.samples);
    assert!(roi.rgb == frames.rgb, "the pictures differ");
}

#[test]
fn only_the_regions_channels_and_samples_are_drawn() {
    let s = sample::track_record(3);
    let record = as_roi(&s, 10..20, 400, 100);
    let image = render(&record, &options()).unwrap();
    // Four links' channels 10..20: offline 10..20 and 74..84 induction, 138..148 and 202..212
    // collection; the grid spans the region's 100 samples.
    let planes: Vec<(&str, usize)> = image
        .summary
        .panels
        .iter()
        .map(|p| (p.plane.as_str(), p.channels))
        .collect();
    assert_eq!(planes, vec![("U (induction)", 20), ("X (collection)", 20)]);
    assert_eq!(image.summary.samples, 100);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// A record with one fragment of any payload (under a good header, of a drawn type) is
    /// still drawn: that fragment is drawn or left out and named, never the record refused.
    #[test]
    fn any_garbage_fragment_is_drawn_or_named_never_the_record_refused(
        payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20_000),
        kind in proptest::sample::select(vec![FragmentType::WIBETH, FragmentType::ROI, FragmentType::TRIGGER_PRIMITIVE]),
    ) {
        let mut record = sample::track_record(1).record;
        let template = Fragment::parse(&record.fragments[0]).unwrap().header;
        let header = FragmentHeader { fragment_type: kind, ..template };
        record.fragments.push(Fragment::assemble(header, [&payload[..]]));
        let small = DisplayOptions { width: 240, height: 160, ..options() };
        let image = render(&record, &small).unwrap();
        proptest::prop_assert!(image.summary.left_out.len() <= 1);
    }
}

/// A streaming board's fragment: `slices` board frames of 32 payload bytes at 100, byte 5 of
/// slice 3 at 250; frames written by hand from `swdaq_format::board_frame`'s documented layout.
fn board_fragment(template: FragmentHeader, link: u32, slices: usize) -> Vec<u8> {
    let mut payload = Vec::new();
    for slice in 0..slices {
        let mut bytes = [100u8; 32];
        if slice == 3 {
            bytes[5] = 250;
        }
        payload.extend_from_slice(b"SWBF");
        payload.extend_from_slice(&32u32.to_le_bytes());
        payload.extend_from_slice(&(1000 + 64 * slice as u64).to_le_bytes());
        payload.extend_from_slice(&link.to_le_bytes());
        payload.extend_from_slice(&0u32.to_le_bytes());
        payload.extend_from_slice(&bytes);
    }
    let header = FragmentHeader {
        fragment_type: FragmentType::DETECTOR_FRAMES,
        element_id: swdaq_format::SourceId::readout(link),
        ..template
    };
    Fragment::assemble(header, [&payload[..]])
}

/// A record of streaming boards has no ADC layout: each link is drawn raw, payload bytes
/// versus slices, the odd byte in colour; a damaged frame ends its link's picture there and
/// is named, the slices before it drawn.
#[test]
fn board_frames_are_drawn_raw_and_a_damaged_one_is_named() {
    let mut record = sample::track_record(1).record;
    let template = Fragment::parse(&record.fragments[0]).unwrap().header;
    let mut damaged = board_fragment(template, 1, 8);
    let fifth_frame = swdaq_format::fragment::FRAGMENT_HEADER_SIZE + 4 * (24 + 32);
    damaged[fifth_frame] ^= 0xFF;
    record.fragments = vec![board_fragment(template, 0, 8), damaged];
    let image = render(&record, &options()).unwrap();
    let panels: Vec<(&str, usize)> = image
        .summary
        .panels
        .iter()
        .map(|p| (p.plane.as_str(), p.channels))
        .collect();
    assert_eq!(panels.len(), 2, "{panels:?}");
    assert!(panels.iter().all(|&(_, rows)| rows == 32), "{panels:?}");
    assert_eq!(panels[0].0, "Detector_Readout:0x00000000", "{panels:?}");
    assert_eq!(image.summary.samples, 8, "slices of the window");
    assert_eq!(image.summary.left_out.len(), 1);
    assert!(
        image.summary.left_out[0].reason.contains("board frame 4"),
        "{:?}",
        image.summary.left_out
    );
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("board_display.png");
    image.save_png(&out).unwrap();
    let red = (0..image.height)
        .flat_map(|y| (0..image.width).map(move |x| (x, y)))
        .filter(|&(x, y)| {
            let [r, g, b] = image.pixel(x, y);
            r > 220 && g < 60 && b < 60
        })
        .count();
    assert!(
        red > 100,
        "the odd byte drawn in both links: {red} red pixels"
    );
}
