//! The anti-replay window against a naive model (a set of accepted
//! counters and the highest one): `check` and `update` must decide exactly
//! as the acceptance rule in `replay.rs` says, for any sequence.

use crate::input::Input;
use braid_core::replay::{ReplayWindow, REJECT_AFTER_MESSAGES, WINDOW};
use std::collections::HashSet;

struct Model {
    accepted: HashSet<u64>,
    highest: Option<u64>,
}

impl Model {
    fn acceptable(&self, c: u64) -> bool {
        c < REJECT_AFTER_MESSAGES
            && !self.accepted.contains(&c)
            && self.highest.is_none_or(|h| c + WINDOW >= h)
    }

    fn update(&mut self, c: u64) -> bool {
        let ok = self.acceptable(c);
        if ok {
            self.accepted.insert(c);
            self.highest = Some(self.highest.map_or(c, |h| h.max(c)));
        }
        ok
    }
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut window = ReplayWindow::new();
    let mut model = Model {
        accepted: HashSet::new(),
        highest: None,
    };
    let mut last = 0u64;
    let mut steps = 0;
    while !input.is_empty() && steps < 4096 {
        steps += 1;
        let op = input.u8();
        // Counters near the last one (where the window's edges are), far
        // jumps, and values near the hard limit.
        let counter = match op % 8 {
            0 => last.wrapping_add(u64::from(input.u8())),
            1 => last.saturating_sub(u64::from(input.u8())),
            2 => last
                .saturating_sub(WINDOW)
                .wrapping_add(u64::from(input.u8()) % 3),
            3 => last.wrapping_add(u64::from(input.u16())),
            4 => last.saturating_sub(u64::from(input.u16())),
            5 => REJECT_AFTER_MESSAGES.wrapping_sub(u64::from(input.u8())),
            6 => last.wrapping_add(WINDOW * u64::from(input.u8() % 4)),
            _ => input.u64(),
        };
        let want = model.acceptable(counter);
        assert_eq!(window.check(counter), want, "check({counter})");
        if op & 0x80 == 0 {
            assert_eq!(
                window.update(counter),
                model.update(counter),
                "update({counter})"
            );
            assert_eq!(window.highest(), model.highest);
            if want {
                assert!(!window.check(counter), "accepted {counter} twice");
            }
        }
        last = counter;
    }
}
