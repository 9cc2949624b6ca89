//! Fragment buffers. `Pool` is the SW ROD paper's memory pool: buffers allocated once and
//! recycled, returned through a concurrent queue (here a bounded crossbeam channel, MPMC
//! like `tbb::concurrent_queue`) by whichever consumer drops the fragment last. The
//! aggregating thread takes them from a local stack, most recently returned first, so the
//! buffer it fills is still in its cache (a FIFO of thousands of buffers measured slower
//! than the allocator). `Heap` allocates a zeroed buffer per fragment: the paper's
//! new/delete, for the ablation.

use crossbeam_channel::{Receiver, Sender, bounded};
use std::ops::{Deref, DerefMut};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Allocation {
    Pool,
    Heap,
}

pub struct BufferPool {
    mode: Allocation,
    buffer_size: usize,
    /// Buffers ready for the owning thread, the most recently returned on top.
    local: Vec<Vec<u8>>,
    free_tx: Sender<Vec<u8>>,
    free_rx: Receiver<Vec<u8>>,
}

impl BufferPool {
    /// A pool of up to `buffers` buffers of `buffer_size` bytes, `prefill` of them
    /// allocated now (for `Pool`).
    pub fn new(mode: Allocation, buffer_size: usize, buffers: usize, prefill: usize) -> Self {
        let (free_tx, free_rx) = bounded(buffers);
        let local = match mode {
            Allocation::Pool => (0..prefill.min(buffers))
                .map(|_| vec![0u8; buffer_size])
                .collect(),
            Allocation::Heap => Vec::new(),
        };
        Self {
            mode,
            buffer_size,
            local,
            free_tx,
            free_rx,
        }
    }

    /// A buffer, and whether it had to be allocated (always for `Heap`; for `Pool` only
    /// when every pooled buffer is still held by a consumer).
    #[inline]
    pub fn take(&mut self) -> (PooledBuf, bool) {
        match self.mode {
            Allocation::Pool => {
                // Returned buffers go on top: the last one back is the warmest.
                self.local.extend(self.free_rx.try_iter());
                match self.local.pop() {
                    Some(bytes) => (
                        PooledBuf {
                            bytes,
                            home: Some(self.free_tx.clone()),
                        },
                        false,
                    ),
                    None => (
                        PooledBuf {
                            bytes: vec![0u8; self.buffer_size],
                            home: Some(self.free_tx.clone()),
                        },
                        true,
                    ),
                }
            }
            Allocation::Heap => (
                PooledBuf {
                    bytes: vec![0u8; self.buffer_size],
                    home: None,
                },
                true,
            ),
        }
    }

    pub fn buffer_size(&self) -> usize {
        self.buffer_size
    }
}

/// A buffer that goes back to its pool when dropped (if the pool has room).
pub struct PooledBuf {
    bytes: Vec<u8>,
    home: Option<Sender<Vec<u8>>>,
}

impl PooledBuf {
    /// A buffer of no pool (a fragment received from another process).
    pub fn unpooled(bytes: Vec<u8>) -> Self {
        Self { bytes, home: None }
    }
}

impl Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            // A full pool (buffers allocated on a miss) lets the extra buffer go.
            let _ = home.try_send(std::mem::take(&mut self.bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_buffers_come_back_and_misses_allocate() {
        let mut pool = BufferPool::new(Allocation::Pool, 64, 2, 2);
        let (a, fresh_a) = pool.take();
        let (b, fresh_b) = pool.take();
        let (c, fresh_c) = pool.take();
        assert_eq!((fresh_a, fresh_b, fresh_c), (false, false, true));
        assert_eq!(c.len(), 64);
        drop((a, b, c));
        assert!(!pool.take().1 && !pool.take().1);
        assert!(BufferPool::new(Allocation::Heap, 8, 4, 4).take().1);
    }
}
