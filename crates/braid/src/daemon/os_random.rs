//! The operating system's random numbers, for the device's every random
//! choice: a generator seeded once would be copied with the memory of a
//! cloned VM or a restored snapshot, and both twins would then pick the
//! same ephemeral keys. Linux WireGuard (`get_random_bytes`) and
//! wireguard-go (`crypto/rand`) ask the operating system each time too.
//! The device draws randomness only for handshakes, indices, timer jitter
//! and cookies, never per data packet, so a system call each time is cheap.

use rand_core::RngCore;

pub struct OsRandom;

impl RngCore for OsRandom {
    fn next_u32(&mut self) -> u32 {
        rand_core::impls::next_u32_via_fill(self)
    }

    fn next_u64(&mut self) -> u64 {
        rand_core::impls::next_u64_via_fill(self)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        // A system without a working random number generator cannot run a
        // VPN safely at all.
        getrandom::getrandom(dest).expect("operating system random number generator failed");
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_core::batch::PacketBatch;
    use braid_core::device::Device;
    use std::time::{Duration, Instant, SystemTime};

    /// The ephemeral public key of the first initiation `d` sends to a
    /// peer that wants keepalives.
    fn first_ephemeral(mut d: Device, now: Instant) -> [u8; 32] {
        d.set_private_key(Some([0x21; 32]));
        let peer = crate::keys::PrivateKey::from_bytes([0x42; 32]).public_key();
        let pid = d.add_peer(*peer.as_bytes()).unwrap();
        d.set_endpoint(pid, "198.18.9.2:51820".parse().unwrap());
        d.set_persistent_keepalive(now, pid, 1);
        let later = now + Duration::from_secs(2);
        d.handle_timeout(later);
        let mut out = PacketBatch::new(16, 2048);
        d.poll_transmit(later, &mut out);
        let init = out.packet(0);
        assert_eq!(init[0], braid_core::messages::TYPE_INITIATION);
        init[8..40].try_into().unwrap()
    }

    /// Two devices made from the same memory (the same seed), as a VM and
    /// its clone are.
    fn twins() -> (Device, Device, Instant) {
        let now = Instant::now();
        let wall = SystemTime::now();
        (
            Device::new(now, wall, [9; 32]),
            Device::new(now, wall, [9; 32]),
            now,
        )
    }

    #[test]
    fn clones_pick_different_ephemeral_keys() {
        let (a, b, now) = twins();
        // Seeded only, the twins repeat each other's ephemeral key.
        assert_eq!(first_ephemeral(a, now), first_ephemeral(b, now));
        let (mut a, mut b, now) = twins();
        a.set_random_source(Box::new(OsRandom));
        b.set_random_source(Box::new(OsRandom));
        assert_ne!(first_ephemeral(a, now), first_ephemeral(b, now));
    }
}
