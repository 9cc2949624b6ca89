//! What one core computes: CRC32C (COMPASS's CRC32 cost, 0.6 to 1 GB/s there) and the scalar
//! reference unpacking of both DUNE frame formats; the CPU's model and SIMD level.

use super::{Access, Measurement, Operation, median_time};
use std::hint::black_box;
use swdaq_format::{crc, protowib, wibeth};

pub fn all_rows(repeats: usize) -> Vec<Measurement> {
    vec![
        crc32c(repeats),
        wibeth_unpack(repeats),
        protowib_unpack(repeats),
    ]
}

/// CRC32C over 1 MiB blocks (cache-resident, so this is the CRC engine's speed).
fn crc32c(repeats: usize) -> Measurement {
    let block: Vec<u8> = (0..1 << 20).map(|i| (i * 31 % 251) as u8).collect();
    let passes = 256;
    let elapsed = median_time(repeats, || {
        for _ in 0..passes {
            black_box(crc::crc32c(black_box(&block)));
        }
    });
    Measurement::new(
        "crc32c",
        Operation::Checksum,
        Access::Sequential,
        1,
        (block.len() * passes) as u64,
        elapsed,
    )
    .counted_in(block.len(), "blocks/s")
}

/// Scalar reference unpacking of WIBEth frames (the hit finder fuses a faster one).
fn wibeth_unpack(repeats: usize) -> Measurement {
    let frames = 4096;
    let mut data = vec![0u8; frames * wibeth::FRAME_SIZE];
    let adcs = [[0x1234u16; wibeth::NUM_CHANNELS]; wibeth::SAMPLES_PER_FRAME];
    for f in data.chunks_exact_mut(wibeth::FRAME_SIZE) {
        wibeth::encode(&Default::default(), &Default::default(), &adcs, f);
    }
    let mut out = Box::new(adcs);
    let elapsed = median_time(repeats, || {
        for f in data.chunks_exact(wibeth::FRAME_SIZE) {
            wibeth::WibEthFrame::parse(f)
                .expect("encoded frame")
                .unpack(&mut out);
            black_box(&mut out);
        }
    });
    Measurement::new(
        "wibeth_unpack_scalar",
        Operation::Unpack,
        Access::Sequential,
        1,
        data.len() as u64,
        elapsed,
    )
    .counted_in(wibeth::FRAME_SIZE, "frames/s")
}

fn protowib_unpack(repeats: usize) -> Measurement {
    let frames = 65536;
    let mut data = vec![0u8; frames * protowib::FRAME_SIZE];
    for f in data.chunks_exact_mut(protowib::FRAME_SIZE) {
        protowib::encode(&Default::default(), &[0xabc; protowib::NUM_CHANNELS], f);
    }
    let mut out = [0u16; protowib::NUM_CHANNELS];
    let elapsed = median_time(repeats, || {
        for f in data.chunks_exact(protowib::FRAME_SIZE) {
            protowib::ProtoWibFrame::parse(f)
                .expect("encoded frame")
                .unpack(&mut out);
            black_box(&mut out);
        }
    });
    Measurement::new(
        "protowib_unpack_scalar",
        Operation::Unpack,
        Access::Sequential,
        1,
        data.len() as u64,
        elapsed,
    )
    .counted_in(protowib::FRAME_SIZE, "frames/s")
}

pub fn model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

pub fn simd_level() -> Vec<&'static str> {
    let mut found = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => {$( if std::arch::is_x86_feature_detected!($f) { found.push($f); } )*};
        }
        probe!(
            "sse4.2",
            "avx",
            "avx2",
            "bmi2",
            "pclmulqdq",
            "avx512f",
            "avx512bw"
        );
    }
    found
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_row_has_a_positive_rate_and_its_item() {
        let rows = super::all_rows(1);
        let names: Vec<&str> = rows.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            ["crc32c", "wibeth_unpack_scalar", "protowib_unpack_scalar"]
        );
        for m in &rows {
            assert!(m.value.is_finite() && m.value > 0.0, "{}", m.name);
            assert!(m.items_per_second.is_some_and(|v| v > 0.0), "{}", m.name);
        }
    }
}
