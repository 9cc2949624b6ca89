//! The console's event display: the latest record stored by the run going on (or the last
//! run), drawn as `swdaq display` draws it (`swdaq_store::display`, the emulator's channel
//! map and planes). Drawing takes a core for a moment and reads through the HDF5 library the
//! writer uses, so a picture is drawn at most every [`REDRAW_AFTER`] however many consoles
//! ask, one at a time; in between they all get the last one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use swdaq_format::run_files::RunsOnDisk;
use swdaq_sim::{Plane, SimConfig};
use swdaq_store::RecordFileReader;
use swdaq_store::display::{DisplayOptions, render, rgb_png};

/// The least time between two drawings.
pub const REDRAW_AFTER: Duration = Duration::from_secs(5);
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

/// A drawn record: the PNG and what it shows.
pub struct Picture {
    pub png: Arc<Vec<u8>>,
    pub file: PathBuf,
    pub trigger_number: u64,
    /// Fragments left out of the picture, with why.
    pub left_out: Vec<String>,
}

#[derive(Default)]
pub struct Display {
    last: Mutex<Option<(Instant, Arc<Picture>)>>,
}

impl Display {
    /// The picture of the latest record of run `run` in `dir`: drawn anew if the last one is
    /// older than [`REDRAW_AFTER`], else the last one. `Err` says why there is none.
    pub fn latest(&self, dir: &Path, run: u32) -> Result<Arc<Picture>, String> {
        // Held while drawing: the other consoles wait and then take this drawing.
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, picture)) = last.as_ref()
            && at.elapsed() < REDRAW_AFTER
        {
            return Ok(Arc::clone(picture));
        }
        // Aged from when drawing began: a console asking REDRAW_AFTER after its last ask gets
        // a new drawing however long the last one took.
        let began = Instant::now();
        let picture = Arc::new(draw_latest(dir, run)?);
        *last = Some((began, Arc::clone(&picture)));
        Ok(picture)
    }
}

/// Records tried, newest first, before an older file is looked at: the last records of a
/// run can hold no data to draw (every fragment missing once readout has stopped).
const TRIED: usize = 16;

/// Draws the newest record of run `run` that can be drawn, from the newest file that can be
/// read (a file still open for writing cannot be); the ones passed over are named in the
/// picture's `left_out`.
fn draw_latest(dir: &Path, run: u32) -> Result<Picture, String> {
    let files = RunsOnDisk::scan(dir, Some(run))
        .map_err(|e| format!("cannot look into {}: {e}", dir.display()))?
        .files_of_run;
    let hdf5 = files.iter().rev().filter(|f| {
        let name = f.to_string_lossy();
        name.ends_with(".hdf5") || name.ends_with(".hdf5.writing")
    });
    let mut passed_over = Vec::new();
    for file in hdf5 {
        match draw_newest_record(file, &mut passed_over) {
            Ok(Some(mut picture)) => {
                passed_over.append(&mut picture.left_out);
                picture.left_out = passed_over;
                return Ok(picture);
            }
            Ok(None) => {}
            Err(e) => passed_over.push(format!("{}: {e}", file.display())),
        }
    }
    passed_over.insert(
        0,
        format!(
            "run {run} has no stored record to draw yet in {}",
            dir.display()
        ),
    );
    Err(passed_over.join("; "))
}

/// The newest of the last [`TRIED`] records of `file` that can be drawn; those that cannot
/// are added to `passed_over` with why.
fn draw_newest_record(
    file: &Path,
    passed_over: &mut Vec<String>,
) -> Result<Option<Picture>, String> {
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
                Ok((png, left_out))
            });
        match drawn {
            Ok((png, left_out)) => {
                passed(&not_drawn, &why_not);
                return Ok(Some(Picture {
                    png: Arc::new(png),
                    file: file.to_path_buf(),
                    trigger_number: id.trigger_number,
                    left_out,
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
        let display = Display::default();
        let picture = display.latest(dir.path(), 7).unwrap();
        assert_eq!(picture.file, file);
        assert_eq!(picture.trigger_number, 3);
        assert!(picture.png.starts_with(b"\x89PNG\r\n\x1a\n"));
        let again = display.latest(dir.path(), 7).unwrap();
        assert!(
            Arc::ptr_eq(&picture, &again),
            "drawn once within REDRAW_AFTER"
        );
        let none = Display::default().latest(dir.path(), 8).err().unwrap();
        assert!(
            none.contains("run 8 has no stored record to draw yet"),
            "{none}"
        );
    }
}
