//! The chain's stored event for the console: the newest record of a run read back from its
//! HDF5 files, each fragment's size, and the record drawn as `swdaq display` draws it
//! (`swdaq_store::display`, the emulator's channel map and planes).

use crate::stored::{self, StoredEvent, StoredFragment};
use std::path::{Path, PathBuf};
use swdaq_sim::{Plane, SimConfig};
use swdaq_store::RecordFileReader;
use swdaq_store::display::{DisplayOptions, render, rgb_png};

/// The console's picture is smaller than `swdaq display`'s default.
const SIZE: (u32, u32) = (1200, 675);

/// `swdaq display`'s options: offline channel `first_channel + 64 * link + c`, one panel per
/// plane of the emulator's channel map.
pub fn emulator_options(first_channel: u32) -> DisplayOptions {
    DisplayOptions {
        channel_of: Box::new(move |source, c| first_channel + 64 * source.id + c as u32),
        plane_of: Box::new(|channel| {
            match Plane::of(channel) {
                Plane::U => "U (induction)",
                Plane::V => "V (induction)",
                Plane::X => "X (collection)",
            }
            .to_string()
        }),
        ..DisplayOptions::default()
    }
}

/// Records tried, newest first, before an older file is looked at: the last records of a
/// run can hold no data to draw (every fragment missing once readout has stopped).
const TRIED: usize = 16;

/// The newest record of run `run` in `dirs` that can be drawn, from the newest file that can
/// be read (a file still open for writing cannot be); the ones passed over are named in its
/// `left_out`.
pub fn stored_record(dirs: &[PathBuf], run: u32) -> Result<StoredEvent, String> {
    stored::newest_event(dirs, run, &[".hdf5", ".hdf5.writing"], draw_newest_record)
}

/// The newest of the last [`TRIED`] records of `file` that can be drawn; those that cannot
/// are added to `passed_over` with why.
fn draw_newest_record(
    file: &Path,
    passed_over: &mut Vec<String>,
) -> Result<Option<StoredEvent>, String> {
    let reader = RecordFileReader::open(file).map_err(|e| e.to_string())?;
    let mut ids = reader.record_ids().map_err(|e| e.to_string())?;
    ids.sort_by_key(|id| std::cmp::Reverse((id.trigger_number, id.sequence_number)));
    let options = DisplayOptions {
        width: SIZE.0,
        height: SIZE.1,
        ..emulator_options(SimConfig::default().first_channel)
    };
    // Records passed over, newest first, with why the newest could not be drawn.
    let mut not_drawn: Vec<u64> = Vec::new();
    let mut why_not = String::new();
    let mut passed = |not_drawn: &[u64], why_not: &str| {
        if let (Some(newest), Some(oldest)) = (not_drawn.first(), not_drawn.last()) {
            passed_over.push(format!(
                "{} newer record(s) not drawn (triggers {oldest}..={newest}): {why_not}",
                not_drawn.len()
            ));
        }
    };
    for id in ids.iter().take(TRIED) {
        let drawn = reader
            .read_record_skipping_bad(id)
            .map_err(|e| e.to_string())
            .and_then(|(record, bad)| {
                let image = render(&record, &options).map_err(|e| e.to_string())?;
                let png =
                    rgb_png(image.width, image.height, &image.rgb).map_err(|e| e.to_string())?;
                let left_out = bad
                    .iter()
                    .chain(&image.summary.left_out)
                    .map(|b| format!("{}: {}", b.dataset, b.reason))
                    .collect();
                Ok((png, fragments_of(&record), left_out))
            });
        match drawn {
            Ok((png, fragments, left_out)) => {
                passed(&not_drawn, &why_not);
                return Ok(Some(StoredEvent {
                    file: file.to_path_buf(),
                    event: id.trigger_number,
                    bytes: fragments.iter().map(|f| f.bytes).sum(),
                    fragments,
                    left_out,
                    picture: Some(png),
                }));
            }
            Err(e) => {
                if not_drawn.is_empty() {
                    why_not = e;
                }
                not_drawn.push(id.trigger_number);
            }
        }
    }
    passed(&not_drawn, &why_not);
    Ok(None)
}

/// Each fragment of `record` that reads, named by its kind and source (a detector link's
/// by its link number, as the live figures name links).
fn fragments_of(record: &swdaq_format::TriggerRecord) -> Vec<StoredFragment> {
    record
        .fragments
        .iter()
        .filter_map(|bytes| Some((swdaq_format::Fragment::parse(bytes).ok()?, bytes.len())))
        .map(|(f, bytes)| StoredFragment {
            source: format!("{} {}", f.header.fragment_type.name(), f.header.element_id),
            bytes: bytes as u64,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_record_of_the_run_is_drawn_and_kept_a_while() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = swdaq_store::RecordFileWriter::new(swdaq_store::StoreConfig {
            directory: dir.path().to_path_buf(),
            run_number: 7,
            min_free_bytes: 0,
            ..Default::default()
        })
        .unwrap();
        for trigger in 1..=3 {
            writer
                .write(&swdaq_store::sample::track_record(trigger).record)
                .unwrap();
        }
        writer.close().unwrap();
        let file = writer.closed_files()[0].clone();
        let dirs = [dir.path().to_path_buf()];
        let stored = stored_record(&dirs, 7).unwrap();
        assert_eq!(stored.file, file);
        assert_eq!(stored.event, 3);
        assert!(stored.picture.unwrap().starts_with(b"\x89PNG\r\n\x1a\n"));
        let sample = swdaq_store::sample::track_record(3).record;
        assert_eq!(stored.fragments.len(), sample.fragments.len());
        let total: usize = sample.fragments.iter().map(Vec::len).sum();
        assert_eq!(stored.bytes, total as u64);
        assert!(
            stored
                .fragments
                .iter()
                .all(|f| f.bytes > 0 && !f.source.is_empty())
        );
        let none = stored_record(&dirs, 8).unwrap_err();
        assert!(
            none.contains("run 8 has no stored event to show yet"),
            "{none}"
        );
    }
}
