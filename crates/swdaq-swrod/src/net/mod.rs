//! FELIX over the network: a FELIX server publishing an emulated card's e-links
//! ([`server`]) and the SW ROD's subscriptions to them ([`subscriber`]), over TCP with the
//! messages of [`wire`] framed by [`stream`].
//!
//! Why TCP: FELIX hosts publish to SW RODs through felix-star over netio-next or netio3,
//! which are connection oriented, reliable and message based, over RDMA (libfabric verbs)
//! or TCP; a slow subscriber holds the publisher back rather than losing data, and the
//! client re-establishes a lost connection. TCP gives that without RDMA hardware; UDP would
//! lose data under load, which no FELIX link to a SW ROD does.

pub mod bench;
pub mod server;
pub mod stream;
pub mod subscriber;
pub mod wire;
