//! `Compression =` in the device: the interface's and each peer's policy,
//! and whether a peer gets (and may send) LZ4-compressed packets. The
//! format itself is in `crate::compress`.

use super::state::Device;
use crate::compress::CompressionPolicy;
use crate::peer::PeerId;

impl Device {
    /// The interface's `Compression =` (peers may override it).
    pub fn set_compression(&mut self, policy: CompressionPolicy) {
        self.compression = policy;
    }

    /// One peer's `Compression =`; `None` follows the interface's.
    pub fn set_peer_compression(&mut self, pid: PeerId, policy: Option<CompressionPolicy>) {
        if let Some(p) = self.peers[pid].as_mut() {
            p.compression = policy;
        }
        self.peers.settle();
    }

    /// Whether we offer (and accept) LZ4-compressed packets with `pid`;
    /// never without the extensions.
    pub(super) fn offers_lz4(&self, pid: PeerId) -> bool {
        let policy = self.peers[pid]
            .as_ref()
            .and_then(|p| p.compression)
            .unwrap_or(self.compression);
        self.extensions && policy == CompressionPolicy::Lz4
    }
}
