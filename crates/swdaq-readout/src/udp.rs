//! UDP source: WIBEth frames as datagrams, received straight into latency-buffer slots
//! (the kernel's copy from the socket is the only one), plus the matching sender.
//!
//! One `recv` per datagram; batching with `recvmmsg` needs several slots handed out at once
//! and is the next step if the per-datagram syscall shows up in `swdaq bench readout`.

use crate::source::{FrameSource, Poll};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

pub struct UdpSource {
    socket: UdpSocket,
}

impl UdpSource {
    /// Binds `addr` and asks for a large receive buffer so bursts wait in the kernel.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)?;
        // Poll with a short timeout so the ingest loop can notice a stop request.
        socket.set_read_timeout(Some(Duration::from_millis(10)))?;
        Ok(Self { socket })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

impl FrameSource for UdpSource {
    fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
        match self.socket.recv(slot) {
            Ok(n) => Ok(Poll::Frame(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(Poll::Idle)
            }
            Err(e) => Err(e),
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
    use crate::link_format::LinkFormat;
    use swdaq_format::SourceId;
    use swdaq_format::daq_eth::DaqEthHeader;
    use swdaq_format::wibeth::{self, WibEthHeader};

    #[test]
    fn frames_cross_loopback_into_the_buffer_and_short_datagrams_are_rejected() {
        let source = UdpSource::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let sender = UdpSender::connect(source.local_addr().unwrap()).unwrap();
        let link = LinkShared::new(SourceId::readout(1), LinkFormat::WibEth, 0.01).unwrap();
        let mut ingest = Ingest::new(&link, source, ()).unwrap();
        let mut frame = vec![0u8; wibeth::FRAME_SIZE];
        for n in 0..20u64 {
            let daq = DaqEthHeader {
                timestamp: n * 2048,
                seq_id: n as u16,
                ..Default::default()
            };
            wibeth::encode(&daq, &WibEthHeader::healthy(), &[[3; 64]; 64], &mut frame);
            sender.send(&frame).unwrap();
            if n == 5 {
                sender.send(&frame[..100]).unwrap();
            }
            // Loopback does not drop, but pace a little so the socket buffer never overflows.
            ingest.step().unwrap();
        }
        while ingest.counts.frames < 20 {
            ingest.step().unwrap();
        }
        assert_eq!(ingest.checker.counts.bad_size, 1);
        assert_eq!(ingest.checker.counts.frames_ok, 20);
    }
}
