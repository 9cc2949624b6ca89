#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_swrod::BlockDecoder;
use swdaq_swrod::net::stream::MessageReader;
use swdaq_swrod::net::wire::{End, Kind, Subscribed, parse_elinks};

// Whatever a FELIX server's (or a subscriber's) peer sends on the stream: whole messages or
// an error that ends the connection, never a panic; every payload a message carries is read
// as its kind says, and the blocks of a `Blocks` message go through the SW ROD's decoder.
fuzz_target!(|data: &[u8]| {
    let mut stream = std::io::Cursor::new(data);
    let mut reader = MessageReader::default();
    let mut decoder = BlockDecoder::new(&[0, 1, 2, 3]);
    while let Ok(Some(header)) = reader.read(&mut stream) {
        let payload = reader.payload();
        assert_eq!(payload.len(), header.len);
        match header.kind {
            Kind::Subscribe => drop(parse_elinks(payload)),
            Kind::Subscribed => drop(Subscribed::parse(payload)),
            Kind::End => drop(End::parse(payload)),
            Kind::Refused => drop(String::from_utf8_lossy(payload)),
            Kind::Blocks => decoder.decode_blocks(payload, |_, _, _| {}),
        }
    }
});
