//! UDP source: WIBEth frames as datagrams, received straight into latency-buffer slots
//! (the kernel's copy from the socket is the only one), plus the matching sender.
//!
//! On Linux one `recvmmsg` call fills a run of consecutive slots handed out by the
//! producer ([`crate::ring::Producer::next_slots`]): each datagram's iovec is its own slot, so
//! batching keeps the zero-copy path. A datagram the checks reject leaves a hole that the
//! ingest loop closes by moving the batch's later frames down one slot: a copy paid only for
//! bad frames. Elsewhere (other Unixes) the source receives one datagram per `recvmsg`.
//!
//! A datagram longer than a slot is never delivered as a frame: the kernel flags it
//! `MSG_TRUNC`, the source reports it one byte longer than the slot, and the ingest loop
//! counts it as bad size.

#[cfg(target_os = "linux")]
use crate::ring::SlotRun;
use crate::source::{Batch, FrameSource, Poll};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Datagrams one `recvmmsg` asks for when the caller does not say.
#[cfg(target_os = "linux")]
pub const DEFAULT_BATCH: usize = 32;
#[cfg(not(target_os = "linux"))]
pub const DEFAULT_BATCH: usize = 1;
/// Most datagrams per call: the message headers live on the stack.
pub const MAX_BATCH: usize = 64;
/// Socket receive buffer asked for, so bursts wait in the kernel (capped by
/// `net.core.rmem_max`).
const RECEIVE_BUFFER_BYTES: libc::c_int = 64 << 20;
/// How long a receive waits for the first datagram, so the ingest loop can notice a stop.
const POLL_TIMEOUT: Duration = Duration::from_millis(10);

pub struct UdpSource {
    socket: UdpSocket,
    batch: usize,
}

impl UdpSource {
    /// Binds `addr`, asks for a large receive buffer and receives up to [`DEFAULT_BATCH`]
    /// datagrams per call.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_read_timeout(Some(POLL_TIMEOUT))?;
        let size = RECEIVE_BUFFER_BYTES;
        // SAFETY: the descriptor is the open socket's; the option value is a live c_int and
        // its size is passed with it.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&raw const size).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            socket,
            batch: DEFAULT_BATCH,
        })
    }

    /// Receives up to `batch` datagrams per call (1: one `recvmsg` per datagram). Clamped to
    /// `1..=MAX_BATCH`, and to 1 where `recvmmsg` does not exist.
    pub fn with_batch_size(mut self, batch: usize) -> Self {
        self.batch = if cfg!(target_os = "linux") {
            batch.clamp(1, MAX_BATCH)
        } else {
            1
        };
        self
    }

    /// Never waits for a datagram: a receive with nothing queued is `Idle` at once, for a
    /// thread that reads several sockets in turn (one silent socket must not hold the
    /// others up for the poll time-out).
    pub fn without_waiting(self) -> io::Result<Self> {
        self.socket.set_nonblocking(true)?;
        Ok(self)
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

/// The length to report for a datagram of `received` bytes with receive flags `flags`: a
/// truncated one is longer than the slot, whatever the kernel counted.
fn datagram_len(received: usize, flags: libc::c_int, slot_len: usize) -> usize {
    if flags & libc::MSG_TRUNC != 0 {
        received.max(slot_len + 1)
    } else {
        received
    }
}

/// `Idle` for the errors that only mean "nothing arrived in time".
fn idle_or(error: io::Error) -> io::Result<Batch> {
    match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => {
            Ok(Batch::Idle)
        }
        _ => Err(error),
    }
}

impl FrameSource for UdpSource {
    fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
        let mut iov = libc::iovec {
            iov_base: slot.as_mut_ptr().cast(),
            iov_len: slot.len(),
        };
        // SAFETY: all-zero is a valid msghdr (null name and control, no iovecs).
        let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
        header.msg_iov = &raw mut iov;
        header.msg_iovlen = 1;
        // SAFETY: `header` points at one iovec covering `slot`, which is writable and
        // outlives the call; no name or control buffer is given.
        let received = unsafe { libc::recvmsg(self.socket.as_raw_fd(), &raw mut header, 0) };
        if received < 0 {
            return idle_or(io::Error::last_os_error()).map(|_| Poll::Idle);
        }
        let len = datagram_len(received as usize, header.msg_flags, slot.len());
        Ok(Poll::Frame(len))
    }

    fn batch_size(&self) -> usize {
        self.batch
    }

    #[cfg(target_os = "linux")]
    fn next_frames(&mut self, run: &mut SlotRun<'_>, lens: &mut [usize]) -> io::Result<Batch> {
        let count = run.len().min(self.batch).min(lens.len());
        let slot_len = run.slot_len();
        let mut iovecs: [libc::iovec; MAX_BATCH] = std::array::from_fn(|_| libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        });
        for (iov, slot) in iovecs.iter_mut().zip(run.slot_ptrs()).take(count) {
            iov.iov_base = slot.cast();
            iov.iov_len = slot_len;
        }
        // SAFETY: all-zero is a valid mmsghdr (null name and control, no iovecs, length 0).
        let mut headers: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        for (header, iov) in headers.iter_mut().zip(iovecs.iter_mut()).take(count) {
            header.msg_hdr.msg_iov = iov;
            header.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: the first `count` headers each point at one iovec covering one distinct
        // slot of the run (writable while `run` is mutably borrowed, `slot_len` bytes each);
        // headers and iovecs outlive the call. MSG_WAITFORONE: wait (up to the socket's read
        // time-out) for the first datagram only, then take what is queued.
        let received = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                headers.as_mut_ptr(),
                count as _,
                libc::MSG_WAITFORONE as _,
                std::ptr::null_mut(),
            )
        };
        let received = match received {
            ..0 => return idle_or(io::Error::last_os_error()),
            0 => return Ok(Batch::Idle),
            n => n as usize,
        };
        for (len, header) in lens.iter_mut().zip(&headers[..received]) {
            *len = datagram_len(header.msg_len as usize, header.msg_hdr.msg_flags, slot_len);
        }
        Ok(Batch::Frames(received))
    }

    #[cfg(target_os = "linux")]
    fn kernel_drops(&self) -> Option<u64> {
        // `SO_MEMINFO` fills the socket's memory counters; the drop count is the last we need.
        let mut info = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
        let mut len = size_of_val(&info) as libc::socklen_t;
        // SAFETY: the descriptor is the open socket's; `info` is writable for `len` bytes and
        // `len` is passed by pointer for the kernel to shorten.
        let rc = unsafe {
            libc::getsockopt(
                self.socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MEMINFO,
                info.as_mut_ptr().cast(),
                &raw mut len,
            )
        };
        (rc == 0 && len as usize == size_of_val(&info))
            .then(|| u64::from(info[libc::SK_MEMINFO_DROPS as usize]))
    }
}

/// Address `k` of a set of consecutive ports from `base`: link or FED `k` listens on `base`'s
/// port + `k`. The one mapping every sender and receiver of such a set uses.
pub fn port_offset(base: SocketAddr, k: usize) -> io::Result<SocketAddr> {
    let port = usize::from(base.port())
        .checked_add(k)
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{base}: port + {k} is not a port"),
            )
        })?;
    let mut addr = base;
    addr.set_port(port);
    Ok(addr)
}

/// Sleeping overshoots by the timer slack (Linux's default: 50 us) plus the wake-up, so a
/// pacer spins the last stretch before a deadline.
const SPIN_BELOW: Duration = Duration::from_micros(100);

/// Holds a sender to a schedule counted from one start: each item's due time is an offset
/// from the start, never from the previous send, so the pace does not drift.
pub struct Pacer {
    start: Instant,
}

impl Pacer {
    pub fn start_now() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    /// Returns once `offset` has passed since the start: sleeps while the deadline is far,
    /// spins the last [`SPIN_BELOW`].
    pub fn wait_until(&self, offset: Duration) {
        let due = self.start + offset;
        loop {
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            if left > SPIN_BELOW {
                std::thread::sleep(left - SPIN_BELOW);
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Sends frames as datagrams to one destination.
pub struct UdpSender {
    socket: UdpSocket,
}

impl UdpSender {
    pub fn connect(dest: SocketAddr) -> io::Result<Self> {
        let bind: SocketAddr = if dest.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        }
        .parse()
        .expect("literal");
        let socket = UdpSocket::bind(bind)?;
        socket.connect(dest)?;
        Ok(Self { socket })
    }

    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        self.socket.send(frame).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{Ingest, LinkShared};
    use std::time::Instant;
    use swdaq_format::FrameFormat;
    use swdaq_format::SourceId;
    use swdaq_format::daq_eth::DaqEthHeader;
    use swdaq_format::wibeth::{self, WibEthHeader};

    /// Frame `n` of a continuous stream, its samples marked with `n` so frames differ.
    fn frame(n: u64) -> Vec<u8> {
        let mut frame = vec![0u8; wibeth::FRAME_SIZE];
        let daq = DaqEthHeader {
            timestamp: n * 2048,
            seq_id: n as u16 & 0xfff,
            ..Default::default()
        };
        let adcs = [[(n % 4096) as u16; 64]; 64];
        wibeth::encode(&daq, &WibEthHeader::healthy(), &adcs, &mut frame);
        frame
    }

    struct Received {
        frames: Vec<Vec<u8>>,
        bad_size: u64,
    }

    /// Sends `datagrams` over loopback to a source receiving `batch` per call and ingests
    /// until `expected` frames are buffered; returns the buffer's frames in order.
    fn send_and_ingest(batch: usize, datagrams: &[Vec<u8>], expected: u64) -> Received {
        let source = UdpSource::bind("127.0.0.1:0".parse().unwrap())
            .unwrap()
            .with_batch_size(batch);
        assert_eq!(source.batch_size(), batch);
        let sender = UdpSender::connect(source.local_addr().unwrap()).unwrap();
        let link = LinkShared::new(SourceId::readout(1), FrameFormat::WibEth, 0.01).unwrap();
        let mut ingest = Ingest::new(&link, source, ()).unwrap();
        // Few enough to wait in the socket buffer: everything is queued before the first
        // receive, so batches come out full.
        for d in datagrams {
            sender.send(d).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while ingest.counts.frames < expected {
            assert!(Instant::now() < deadline, "frames lost on loopback");
            ingest.step().unwrap();
        }
        assert_eq!(ingest.step().unwrap(), Batch::Idle, "more frames than sent");
        let mut reader = link.buffer.reader().unwrap();
        let frames = reader
            .with_view(0, |v| {
                (v.first..v.end).map(|i| v.frame(i).to_vec()).collect()
            })
            .unwrap();
        Received {
            frames,
            bad_size: ingest.checker.counts.bad_size,
        }
    }

    const BATCH_SIZES: [usize; 4] = [1, 7, DEFAULT_BATCH, MAX_BATCH];

    #[test]
    fn frames_arrive_byte_identical_and_in_order_across_batch_boundaries() {
        // 150 frames: not a multiple of any batch size, so the last batch is partial.
        let frames: Vec<_> = (0..150).map(frame).collect();
        for batch in BATCH_SIZES {
            let got = send_and_ingest(batch, &frames, 150);
            assert_eq!(got.frames.len(), 150, "batch {batch}");
            assert!(got.frames == frames, "batch {batch}: frames differ");
            assert_eq!(got.bad_size, 0);
        }
    }

    #[test]
    fn bad_datagrams_leave_no_hole_and_oversized_ones_are_never_frames() {
        let mut datagrams = Vec::new();
        let mut good = Vec::new();
        for n in 0..40 {
            let f = frame(n);
            good.push(f.clone());
            datagrams.push(f);
            match n {
                // A short datagram mid-batch: later frames move down over its slot.
                5 => datagrams.push(frame(100)[..100].to_vec()),
                // One byte too long, and far too long: MSG_TRUNC, never a frame.
                9 => datagrams.push(vec![0xab; wibeth::FRAME_SIZE + 1]),
                20 => datagrams.push(frame(100).repeat(8)),
                _ => {}
            }
        }
        for batch in BATCH_SIZES {
            let got = send_and_ingest(batch, &datagrams, 40);
            assert!(got.frames == good, "batch {batch}: frames differ");
            assert_eq!(got.bad_size, 3, "batch {batch}");
        }
    }

    #[test]
    fn truncation_is_reported_as_longer_than_the_slot() {
        let mut source = UdpSource::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let sender = UdpSender::connect(source.local_addr().unwrap()).unwrap();
        sender.send(&[7; 65]).unwrap();
        sender.send(&[7; 64]).unwrap();
        let mut slot = [0u8; 64];
        assert_eq!(source.next_frame(&mut slot).unwrap(), Poll::Frame(65));
        assert_eq!(source.next_frame(&mut slot).unwrap(), Poll::Frame(64));
        assert_eq!(slot, [7; 64]);
    }

    /// More datagrams than the socket buffer holds, sent before any is received: each one
    /// is either received or in the kernel's drop count.
    #[cfg(target_os = "linux")]
    #[test]
    fn kernel_drops_account_for_every_datagram_not_received() {
        let mut source = UdpSource::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        assert_eq!(source.kernel_drops(), Some(0));
        let sender = UdpSender::connect(source.local_addr().unwrap()).unwrap();
        // Loopback delivers (or drops) each datagram within `send`: send until one is dropped.
        let mut sent = 0u64;
        while source.kernel_drops() == Some(0) {
            assert!(sent < 1 << 20, "1 GiB sent and nothing dropped");
            for _ in 0..1024 {
                sender.send(&[1; 1024]).unwrap();
            }
            sent += 1024;
        }
        let mut slot = [0u8; 1024];
        let mut received = 0;
        while source.next_frame(&mut slot).unwrap() == Poll::Frame(1024) {
            received += 1;
        }
        assert_eq!(received + source.kernel_drops().unwrap(), sent);
    }

    /// 100 receives on an empty socket: waiting would take 100 poll time-outs (1 s).
    #[test]
    fn a_socket_without_waiting_is_idle_at_once() {
        for batch in BATCH_SIZES {
            let mut source = UdpSource::bind("127.0.0.1:0".parse().unwrap())
                .unwrap()
                .with_batch_size(batch)
                .without_waiting()
                .unwrap();
            let link = LinkShared::new(SourceId::readout(1), FrameFormat::WibEth, 0.01).unwrap();
            let mut producer = link.buffer.producer().unwrap();
            let mut lens = [0; MAX_BATCH];
            let start = Instant::now();
            for _ in 0..100 {
                let mut run = producer.next_slots(batch).unwrap();
                assert_eq!(
                    source.next_frames(&mut run, &mut lens).unwrap(),
                    Batch::Idle
                );
            }
            assert!(start.elapsed() < 50 * POLL_TIMEOUT, "{:?}", start.elapsed());
        }
    }

    #[test]
    fn ports_are_offset_from_the_base_and_never_wrap() {
        let base: SocketAddr = "127.0.0.1:65530".parse().unwrap();
        assert_eq!(port_offset(base, 5).unwrap().port(), 65535);
        assert_eq!(port_offset(base, 0).unwrap(), base);
        assert!(port_offset(base, 6).is_err());
        assert!(port_offset(base, usize::MAX).is_err());
    }

    #[test]
    fn a_pacer_never_returns_before_the_deadline() {
        let pacer = Pacer::start_now();
        for ms in [0, 1, 3, 6] {
            let offset = Duration::from_millis(ms);
            pacer.wait_until(offset);
            assert!(pacer.start.elapsed() >= offset);
        }
    }

    #[test]
    fn an_idle_socket_returns_idle_promptly() {
        for batch in BATCH_SIZES {
            let source = UdpSource::bind("127.0.0.1:0".parse().unwrap())
                .unwrap()
                .with_batch_size(batch);
            let link = LinkShared::new(SourceId::readout(1), FrameFormat::WibEth, 0.01).unwrap();
            let mut ingest = Ingest::new(&link, source, ()).unwrap();
            let start = Instant::now();
            assert_eq!(ingest.step().unwrap(), Batch::Idle);
            let waited = start.elapsed();
            assert!(waited < Duration::from_millis(500), "{waited:?}");
        }
    }
}
