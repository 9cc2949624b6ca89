//! Framing on a TCP stream: whole messages out, and messages read back across read
//! time-outs (a receive that times out part-way keeps what it has and goes on next call).

use super::wire::{HEADER_SIZE, Header, Kind, MAX_PAYLOAD};
use std::io::{self, Read, Write};
use swdaq_format::FormatError;

/// Why a stream cannot be read further.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("the peer closed the connection")]
    Closed,
    #[error("the peer closed the connection in the middle of a message")]
    ClosedMidMessage,
    #[error("not a message of this protocol: {0}")]
    Malformed(FormatError),
    #[error(transparent)]
    Io(io::Error),
}

/// Reads messages; keeps a partly read one across calls.
pub struct MessageReader {
    header: [u8; HEADER_SIZE],
    header_got: usize,
    parsed: Option<Header>,
    payload: Vec<u8>,
    payload_got: usize,
    /// The payload length of the last whole message read.
    last_len: usize,
}

impl Default for MessageReader {
    fn default() -> Self {
        Self {
            header: [0; HEADER_SIZE],
            header_got: 0,
            parsed: None,
            // The largest payload, allocated (and zeroed) once.
            payload: vec![0; MAX_PAYLOAD],
            payload_got: 0,
            last_len: 0,
        }
    }
}

impl MessageReader {
    /// The next whole message's header (its payload in [`Self::payload`]), or `None` if a
    /// read timed out first (call again).
    pub fn read(&mut self, r: &mut impl Read) -> Result<Option<Header>, StreamError> {
        while self.parsed.is_none() {
            match r.read(&mut self.header[self.header_got..]) {
                Ok(0) if self.header_got == 0 => return Err(StreamError::Closed),
                Ok(0) => return Err(StreamError::ClosedMidMessage),
                Ok(n) => self.header_got += n,
                Err(e) => return idle_or(e),
            }
            if self.header_got == HEADER_SIZE {
                let header = Header::parse(&self.header).map_err(StreamError::Malformed)?;
                self.parsed = Some(header);
                self.payload_got = 0;
            }
        }
        let header = self.parsed.expect("parsed above");
        while self.payload_got < header.len {
            match r.read(&mut self.payload[self.payload_got..header.len]) {
                Ok(0) => return Err(StreamError::ClosedMidMessage),
                Ok(n) => self.payload_got += n,
                Err(e) => return idle_or(e),
            }
        }
        self.parsed = None;
        self.header_got = 0;
        self.last_len = header.len;
        Ok(Some(header))
    }

    /// The payload of the last message [`Self::read`] returned.
    pub fn payload(&self) -> &[u8] {
        &self.payload[..self.last_len]
    }
}

fn idle_or<T>(e: io::Error) -> Result<Option<T>, StreamError> {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => {
            Ok(None)
        }
        _ => Err(StreamError::Io(e)),
    }
}

/// Writes one message (header and payload) whole; `sequence` counts the sender's messages.
pub fn write_message(
    w: &mut impl Write,
    kind: Kind,
    sequence: &mut u32,
    payload: &[u8],
) -> io::Result<()> {
    let header = Header {
        kind,
        len: payload.len(),
        sequence: *sequence,
    };
    *sequence = sequence.wrapping_add(1);
    w.write_all(&header.encode())?;
    w.write_all(payload)
}

/// A `Blocks` message built in place: room for the header, then blocks appended.
pub struct BlocksMessage {
    bytes: Vec<u8>,
    block_size: usize,
}

impl BlocksMessage {
    /// A message of blocks of `block_size` bytes (whole KiB, at most [`MAX_PAYLOAD`]).
    pub fn new(block_size: usize) -> Self {
        let mut bytes = Vec::with_capacity(HEADER_SIZE + MAX_PAYLOAD);
        bytes.resize(HEADER_SIZE, 0);
        Self { bytes, block_size }
    }

    pub fn blocks(&self) -> usize {
        (self.bytes.len() - HEADER_SIZE) / self.block_size
    }

    /// No room for another block.
    pub fn is_full(&self) -> bool {
        self.bytes.len() - HEADER_SIZE + self.block_size > MAX_PAYLOAD
    }

    /// Forgets the blocks held (the peer is gone).
    pub fn clear(&mut self) {
        self.bytes.truncate(HEADER_SIZE);
    }

    pub fn push(&mut self, block: &[u8]) {
        self.bytes.extend_from_slice(block);
    }

    /// Sends the blocks held (if any) as one message with one write, and empties it.
    pub fn send(&mut self, w: &mut impl Write, sequence: &mut u32) -> io::Result<usize> {
        let blocks = self.blocks();
        if blocks == 0 {
            return Ok(0);
        }
        let header = Header {
            kind: Kind::Blocks,
            len: blocks * self.block_size,
            sequence: *sequence,
        };
        *sequence = sequence.wrapping_add(1);
        self.bytes[..HEADER_SIZE].copy_from_slice(&header.encode());
        let sent = w.write_all(&self.bytes);
        self.bytes.truncate(HEADER_SIZE);
        sent.map(|()| blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `step` bytes per call and times out every other call.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
        calls: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(2) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = self.step.min(buf.len()).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    #[test]
    fn messages_survive_time_outs_at_any_byte() {
        let mut wire = Vec::new();
        let mut sequence = 0;
        // FULL mode's 4 KiB blocks.
        const BLOCK: usize = 4096;
        let mut m = BlocksMessage::new(BLOCK);
        m.push(&[7u8; BLOCK]);
        m.push(&[8u8; BLOCK]);
        assert_eq!(m.send(&mut wire, &mut sequence).unwrap(), 2);
        write_message(&mut wire, Kind::End, &mut sequence, &[1; 16]).unwrap();
        for step in [1, 5, 16, 1000, 5000] {
            let mut r = Trickle {
                bytes: &wire,
                step,
                calls: 0,
            };
            let mut reader = MessageReader::default();
            let mut got = Vec::new();
            loop {
                match reader.read(&mut r) {
                    Ok(Some(h)) => got.push((h, reader.payload().to_vec())),
                    Ok(None) => {}
                    Err(StreamError::Closed) => break,
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
            assert_eq!(got.len(), 2);
            assert_eq!((got[0].0.kind, got[0].0.sequence), (Kind::Blocks, 0));
            assert_eq!(got[0].1[BLOCK], 8);
            assert_eq!((got[1].0.kind, got[1].0.sequence), (Kind::End, 1));
        }
        // Cut short: the peer closed in the middle.
        let mut reader = MessageReader::default();
        let mut cut = &wire[..100];
        assert!(matches!(
            reader.read(&mut cut),
            Err(StreamError::ClosedMidMessage)
        ));
        let mut garbage = &[0x55u8; 64][..];
        let mut full = BlocksMessage::new(64 << 10);
        for _ in 0..16 {
            assert!(!full.is_full());
            full.push(&[0; 64 << 10]);
        }
        assert!(full.is_full());
        assert!(matches!(
            MessageReader::default().read(&mut garbage),
            Err(StreamError::Malformed(_))
        ));
    }
}
