//! The data cipher two peers end up with, in simulated time
//! (`braid_core::testing`) over a perfect 1 ms line: AES-256-GCM only when
//! both offer it, ChaCha20-Poly1305 with anyone else (stock WireGuard
//! included), and data flows either way.

use braid_core::cipher::{AesLibrary, CipherPolicy, DataCipher};
use braid_core::messages::{TYPE_DATA, TYPE_DATA_AES};
use braid_core::testing::{Net, NodeId, A, B};
use braid_netem::link::LinkParams;
use std::time::Duration;

const LATENCY: Duration = Duration::from_millis(1);

/// One end: its device, whether it runs braid's extensions, its policy,
/// whether its CPU has AES instructions and which library seals AES.
#[derive(Clone, Copy)]
struct End {
    extensions: bool,
    policy: CipherPolicy,
    aes_hardware: bool,
    aes_library: AesLibrary,
}

const BRAID_AES: End = End {
    extensions: true,
    policy: CipherPolicy::Auto,
    aes_hardware: true,
    aes_library: AesLibrary::Ring,
};

/// A and B, set up as `a_end` and `b_end`, over a perfect `LATENCY` line;
/// no handshake yet.
fn pair(a_end: End, b_end: End) -> Net {
    let mut net = Net::pair();
    for (n, end) in [(A, a_end), (B, b_end)] {
        let d = &mut net[n].device;
        d.set_extensions(end.extensions);
        d.set_cipher(end.policy);
        d.set_aes_hardware(end.aes_hardware);
        d.set_aes_library(end.aes_library);
    }
    let line = LinkParams {
        delay: LATENCY,
        ..LinkParams::default()
    };
    net.connect_alike((A, 0), (B, 0), line);
    net
}

/// A 120-byte packet enters `from`'s TUN, for the other side.
fn send_packet(net: &mut Net, from: NodeId) {
    let to = if from == A { B } else { A };
    net.send(from, to, &[0; 100]);
}

/// Types of the data messages `node` sent, in order.
fn data_types(net: &Net, node: NodeId) -> Vec<u8> {
    net.capture
        .iter()
        .filter(|d| d.from == node && matches!(d.kind(), TYPE_DATA | TYPE_DATA_AES))
        .map(|d| d.kind())
        .collect()
}

/// Sends `n` packets each way, one per virtual millisecond, then lets the
/// line drain.
fn exchange(net: &mut Net, n: usize) {
    for _ in 0..n {
        send_packet(net, A);
        send_packet(net, B);
        net.run_for(Duration::from_millis(1));
    }
    net.run_for(Duration::from_millis(20));
}

fn cipher_of(net: &Net, node: NodeId) -> Option<DataCipher> {
    net.peer_info(node).cipher
}

/// Brings the session up and lets hellos cross, then sends data both ways.
fn negotiate(a: End, b: End) -> Net {
    let mut pair = pair(a, b);
    send_packet(&mut pair, A);
    pair.run_for(Duration::from_millis(300));
    pair.capture.clear();
    pair[A].delivered.clear();
    pair[B].delivered.clear();
    exchange(&mut pair, 50);
    pair
}

fn all(types: &[u8], ty: u8) -> bool {
    !types.is_empty() && types.iter().all(|&t| t == ty)
}

#[test]
fn two_braid_peers_with_aes_hardware_move_to_aes() {
    let pair = negotiate(BRAID_AES, BRAID_AES);
    assert_eq!(cipher_of(&pair, A), Some(DataCipher::Aes256Gcm));
    assert_eq!(cipher_of(&pair, B), Some(DataCipher::Aes256Gcm));
    assert!(all(&data_types(&pair, A), TYPE_DATA_AES));
    assert!(all(&data_types(&pair, B), TYPE_DATA_AES));
    assert_eq!(pair[B].delivered.len(), 50);
    assert_eq!(pair[A].delivered.len(), 50);
}

#[test]
fn ends_sealing_aes_with_different_libraries_understand_each_other() {
    for &library in AesLibrary::ALL {
        let other = End {
            aes_library: library,
            ..BRAID_AES
        };
        let pair = negotiate(other, BRAID_AES);
        assert_eq!(
            cipher_of(&pair, A),
            Some(DataCipher::Aes256Gcm),
            "{library:?}"
        );
        assert_eq!(
            cipher_of(&pair, B),
            Some(DataCipher::Aes256Gcm),
            "{library:?}"
        );
        assert!(all(&data_types(&pair, A), TYPE_DATA_AES));
        assert_eq!(pair[B].delivered.len(), 50, "{library:?}");
        assert_eq!(pair[A].delivered.len(), 50, "{library:?}");
    }
}

#[test]
fn anyone_not_offering_aes_keeps_chacha() {
    let no_hw = End {
        aes_hardware: false,
        ..BRAID_AES
    };
    let chacha_only = End {
        policy: CipherPolicy::ChaCha20Poly1305,
        ..BRAID_AES
    };
    let stock = End {
        extensions: false,
        ..BRAID_AES
    };
    let forced_without_hw = End {
        policy: CipherPolicy::Aes256Gcm,
        aes_hardware: false,
        ..BRAID_AES
    };
    // (A, B, the cipher both must use)
    let cases = [
        (BRAID_AES, no_hw, DataCipher::ChaCha20Poly1305),
        (no_hw, no_hw, DataCipher::ChaCha20Poly1305),
        (chacha_only, BRAID_AES, DataCipher::ChaCha20Poly1305),
        (BRAID_AES, chacha_only, DataCipher::ChaCha20Poly1305),
        (BRAID_AES, stock, DataCipher::ChaCha20Poly1305),
        (stock, BRAID_AES, DataCipher::ChaCha20Poly1305),
        // `Cipher = aes256gcm` offers it even without the hardware.
        (forced_without_hw, BRAID_AES, DataCipher::Aes256Gcm),
        (forced_without_hw, no_hw, DataCipher::ChaCha20Poly1305),
    ];
    for (i, (a, b, want)) in cases.into_iter().enumerate() {
        let pair = negotiate(a, b);
        assert_eq!(cipher_of(&pair, A), Some(want), "case {i}: A");
        assert_eq!(cipher_of(&pair, B), Some(want), "case {i}: B");
        let ty = match want {
            DataCipher::ChaCha20Poly1305 => TYPE_DATA,
            DataCipher::Aes256Gcm => TYPE_DATA_AES,
        };
        assert!(all(&data_types(&pair, A), ty), "case {i}: A's data types");
        assert!(all(&data_types(&pair, B), ty), "case {i}: B's data types");
        assert_eq!(pair[B].delivered.len(), 50, "case {i}: delivered to B");
        assert_eq!(pair[A].delivered.len(), 50, "case {i}: delivered to A");
    }
}

#[test]
fn a_peer_policy_overrides_the_interface() {
    let mut pair = pair(BRAID_AES, BRAID_AES);
    pair[A]
        .device
        .set_peer_cipher(0, Some(CipherPolicy::ChaCha20Poly1305));
    send_packet(&mut pair, A);
    pair.run_for(Duration::from_millis(300));
    pair.capture.clear();
    exchange(&mut pair, 10);
    assert_eq!(cipher_of(&pair, A), Some(DataCipher::ChaCha20Poly1305));
    assert_eq!(cipher_of(&pair, B), Some(DataCipher::ChaCha20Poly1305));
    assert!(all(&data_types(&pair, B), TYPE_DATA));
}

#[test]
fn a_rekeyed_session_negotiates_again() {
    let mut pair = negotiate(BRAID_AES, BRAID_AES);
    // Past REKEY_AFTER_TIME the initiator starts a new session, which
    // begins in ChaCha20-Poly1305 and moves to AES after the hellos.
    for _ in 0..130 {
        exchange(&mut pair, 1);
        pair.run_for(Duration::from_secs(1));
    }
    pair.capture.clear();
    exchange(&mut pair, 20);
    assert_eq!(cipher_of(&pair, A), Some(DataCipher::Aes256Gcm));
    assert!(all(&data_types(&pair, A), TYPE_DATA_AES));
    assert!(all(&data_types(&pair, B), TYPE_DATA_AES));
}
