//! Datagrams of every message type into a device that has a configured
//! peer but no session, optionally with a handshake of its own pending
//! (so responses and cookie replies can name a live index).

use crate::input::Input;
use crate::pair::{source, Pair};
use crate::steer;
use std::time::Duration;

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut pair = Pair::new();
    let flags = input.u8();
    if flags & 1 != 0 {
        // A starts a handshake: its index is live for responses and cookies.
        let (now, pb) = (pair.now(), pair.pb);
        pair.a_mut().set_persistent_keepalive(now, pb, 25);
        pair.transmit(true);
    }
    if flags & 2 != 0 {
        pair.a_mut().set_extensions(false);
    }
    let a_public = pair.a().public_key().expect("key set");
    let mut steps = 0;
    while !input.is_empty() && steps < 64 {
        steps += 1;
        let how = input.u8();
        let mut msg = steer::datagram(&mut input);
        if how & 1 != 0 {
            steer::fix_mac1(&mut msg, &a_public);
        }
        if how & 2 != 0 {
            let pending = pair.a().peer(pair.pb).and_then(|p| p.handshake.as_ref());
            if let Some(h) = pending {
                steer::set_receiver(&mut msg, h.local_index);
                if how & 1 != 0 {
                    steer::fix_mac1(&mut msg, &a_public);
                }
            }
        }
        if how & 4 != 0 {
            pair.advance(Duration::from_millis(u64::from(input.u16())));
        }
        pair.deliver(true, source(how >> 3), &[&msg]);
        pair.transmit(true);
    }
}
