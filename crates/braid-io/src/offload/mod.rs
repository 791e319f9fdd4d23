//! TUN offload: the `virtio_net_hdr` that prefixes every packet on a TUN
//! opened with `IFF_VNET_HDR`, TSO super-packet splitting on reads and TCP
//! coalescing (GRO) on writes.
//!
//! With `TUNSETOFFLOAD` the kernel hands the TUN whole 64 KiB TCP sends
//! (one read instead of ~45) and accepts 64 KiB TCP writes, which it feeds
//! to the local stack as one skb. Both ends of that trade are here, as
//! pure functions over byte slices so they can be tested without a device:
//! [`split`] turns a super-packet into MTU-sized IP packets with correct
//! headers and checksums, [`coalesce`] plans which packets of a write batch
//! travel as one super-packet and writes its header, [`checksum`] is the
//! Internet checksum both need.

pub mod checksum;
pub mod coalesce;
mod header;
pub mod split;

pub use header::*;

#[cfg(test)]
mod tests;
