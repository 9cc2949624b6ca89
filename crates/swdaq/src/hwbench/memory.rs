//! Memory bandwidth as COMPASS measured it (with sysbench): read and write, sequential and
//! random, in blocks of 1 KiB to 1 MiB, on one core and on every core. Each thread works on
//! its own slice of one buffer at least twice the last-level cache, so the figures are the
//! memory's, not the cache's.
//!
//! A read sums the block's 64-bit words (the sum is observed, so the loads stay); a write
//! fills the block (a memset; the slice is observed after each pass). Sequential visits a
//! thread's blocks in order; random visits as many blocks at block-aligned positions drawn
//! with repetition from a cheap generator, before the clock starts. Both read the same kind
//! of precomputed list of block numbers, so they differ only in the order.

use super::{Access, Measurement, Operation, median_time, size_label};
use std::hint::black_box;

pub const BLOCK_SIZES: [usize; 4] = [1 << 10, 4 << 10, 64 << 10, 1 << 20];
pub const LARGEST_BLOCK: usize = BLOCK_SIZES[BLOCK_SIZES.len() - 1];

/// Twice the last-level cache, and at least 256 MiB, in MiB.
pub fn default_buffer_mib() -> usize {
    let cache_mib = last_level_cache_bytes().map_or(0, |b| b.div_ceil(1 << 20) as usize);
    (2 * cache_mib).max(256)
}

/// The largest cache level's size as the kernel lists it for CPU 0.
pub fn last_level_cache_bytes() -> Option<u64> {
    let caches = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    caches
        .filter_map(|entry| {
            let dir = entry.ok()?.path();
            let level: u32 = std::fs::read_to_string(dir.join("level"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let size = parse_cache_size(&std::fs::read_to_string(dir.join("size")).ok()?)?;
            Some((level, size))
        })
        .max()
        .map(|(_, size)| size)
}

/// A sysfs cache size ("48K", "491520K", "32M") in bytes.
fn parse_cache_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, shift) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 10),
        b'M' => (&text[..text.len() - 1], 20),
        b'G' => (&text[..text.len() - 1], 30),
        _ => (text, 0),
    };
    number.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Every read and write row: both accesses, every block size, one thread and every core.
pub fn all_rows(buffer_bytes: usize, repeats: usize, cores: usize) -> Vec<Measurement> {
    // Non-zero, so that allocating faults every page in before any clock starts.
    let mut buffer = vec![1u64; buffer_bytes / 8];
    let thread_counts = if cores > 1 { vec![1, cores] } else { vec![1] };
    let mut rows = vec![];
    for &threads in &thread_counts {
        rows.push(memory_read(&buffer, repeats, threads));
    }
    for operation in [Operation::Read, Operation::Write] {
        for access in [Access::Sequential, Access::Random] {
            for &threads in &thread_counts {
                for block_bytes in BLOCK_SIZES {
                    let way = Way {
                        operation,
                        access,
                        block_bytes,
                        threads,
                    };
                    rows.push(way.measure(&mut buffer, repeats));
                }
            }
        }
    }
    rows
}

/// One row of the table: how the buffer is accessed (`operation` is read or write).
struct Way {
    operation: Operation,
    access: Access,
    block_bytes: usize,
    threads: usize,
}

impl Way {
    fn measure(&self, buffer: &mut [u64], repeats: usize) -> Measurement {
        let block_words = self.block_bytes / 8;
        let slice_words = thread_slice_words(buffer.len(), self.threads, block_words);
        let slice_blocks = slice_words / block_words;
        assert!(slice_blocks > 0, "buffer checked against the cores");
        let orders: Vec<Vec<usize>> = (0..self.threads)
            .map(|thread| match self.access {
                Access::Sequential => (0..slice_blocks).collect(),
                Access::Random => random_blocks(thread as u64 + 1, slice_blocks, slice_blocks),
            })
            .collect();
        let writes = self.operation == Operation::Write;
        let mut fill = 0u64;
        let elapsed = median_time(repeats, || {
            // A different value every pass: each pass really stores.
            fill = fill.wrapping_add(0x0101_0101_0101_0101);
            std::thread::scope(|s| {
                for (slice, order) in buffer.chunks_mut(slice_words).zip(&orders) {
                    s.spawn(move || {
                        if writes {
                            write_blocks(slice, order, block_words, fill);
                        } else {
                            black_box(read_blocks(slice, order, block_words));
                        }
                    });
                }
            });
        });
        let bytes = (self.threads * slice_blocks * self.block_bytes) as u64;
        let name = format!(
            "memory_{}_{}_{}",
            self.operation.as_str(),
            self.access.as_str(),
            size_label(self.block_bytes, "")
        );
        Measurement::new(
            name,
            self.operation,
            self.access,
            self.threads,
            bytes,
            elapsed,
        )
        .counted_in(self.block_bytes, "blocks/s")
    }
}

/// The words of each thread's slice: an equal share of the buffer, in whole blocks.
fn thread_slice_words(buffer_words: usize, threads: usize, block_words: usize) -> usize {
    buffer_words / threads / block_words * block_words
}

/// `count` block numbers below `blocks`, uniform, from a splitmix64 sequence seeded by `seed`.
fn random_blocks(seed: u64, count: usize, blocks: usize) -> Vec<usize> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            // The high half of z * blocks: below `blocks`, without a division.
            ((u128::from(z) * blocks as u128) >> 64) as usize
        })
        .collect()
}

/// Sums the 64-bit words of the blocks of `block_words` words that `order` names, in that
/// order.
fn read_blocks(slice: &[u64], order: &[usize], block_words: usize) -> u64 {
    order.iter().fold(0u64, |sum, &block| {
        let words = &slice[block * block_words..][..block_words];
        words.iter().fold(sum, |sum, &word| sum.wrapping_add(word))
    })
}

/// Fills the blocks of `block_words` words that `order` names with `value`.
fn write_blocks(slice: &mut [u64], order: &[usize], block_words: usize, value: u64) {
    for &block in order {
        slice[block * block_words..][..block_words].fill(value);
    }
    black_box(slice);
}

/// Sums 64-bit words across the whole buffer (each of `threads` cores on its own slice): the
/// read bandwidth drawn from memory without blocks.
fn memory_read(words: &[u64], repeats: usize, threads: usize) -> Measurement {
    let chunk = words.len().div_ceil(threads);
    let elapsed = median_time(repeats, || {
        std::thread::scope(|s| {
            for part in words.chunks(chunk) {
                s.spawn(move || black_box(part.iter().fold(0u64, |a, &w| a.wrapping_add(w))));
            }
        });
    });
    Measurement::new(
        "memory_read",
        Operation::Read,
        Access::Sequential,
        threads,
        (words.len() * 8) as u64,
        elapsed,
    )
}

/// Copies one large buffer into another on one core (`memcpy` bandwidth).
pub fn memcpy(bytes: usize, repeats: usize) -> Measurement {
    let src = vec![0x5au8; bytes];
    let mut dst = vec![0u8; bytes];
    let elapsed = median_time(repeats, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    });
    Measurement::new(
        "memcpy",
        Operation::Copy,
        Access::Sequential,
        1,
        bytes as u64,
        elapsed,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_blocks_stay_in_bounds_and_spread() {
        let blocks = random_blocks(7, 100_000, 1000);
        assert_eq!(blocks.len(), 100_000);
        assert!(blocks.iter().all(|&b| b < 1000));
        let mut distinct = blocks.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 1000, "every block drawn at least once");
        assert_ne!(random_blocks(1, 100, 1000), random_blocks(2, 100, 1000));
    }

    #[test]
    fn thread_slices_are_whole_blocks_within_the_buffer() {
        for (buffer_words, threads, block_words) in
            [(1 << 21, 2, 128), (1000, 3, 64), (129, 1, 128)]
        {
            let slice = thread_slice_words(buffer_words, threads, block_words);
            assert_eq!(slice % block_words, 0);
            assert!(slice * threads <= buffer_words);
            assert!(
                buffer_words / threads - slice < block_words,
                "at most one block lost"
            );
        }
    }

    #[test]
    fn reads_sum_and_writes_fill_exactly_the_blocks_named() {
        let mut slice: Vec<u64> = (0..16).collect();
        // Four blocks of four words; block 2 is 8 + 9 + 10 + 11.
        assert_eq!(read_blocks(&slice, &[2, 2, 0, 0], 4), 2 * 38 + 2 * 6);
        write_blocks(&mut slice, &[3, 3, 1, 1], 4, 7);
        assert_eq!(&slice[..8], &[0, 1, 2, 3, 7, 7, 7, 7]);
        assert_eq!(&slice[8..], &[8, 9, 10, 11, 7, 7, 7, 7]);
    }

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("48K\n"), Some(48 << 10));
        assert_eq!(parse_cache_size("491520K"), Some(480 << 20));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("big"), None);
    }

    #[test]
    fn every_row_is_measured_with_positive_rates() {
        let rows = all_rows(2 << 20, 1, 2);
        // Two whole-buffer reads, then 2 operations x 2 accesses x 2 thread counts x 4 sizes.
        assert_eq!(rows.len(), 2 + 32);
        assert!(rows.iter().all(|m| m.value.is_finite() && m.value > 0.0));
        let names: Vec<&str> = rows.iter().map(|m| m.name.as_str()).collect();
        assert!(names.contains(&"memory_write_random_1KiB"), "{names:?}");
        assert!(names.contains(&"memory_read_sequential_1MiB"), "{names:?}");
    }
}
