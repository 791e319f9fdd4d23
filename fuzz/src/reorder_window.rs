//! The reorder window driven the way the device drives it (passes_through
//! then delivered_in_place, else insert; drains; timeouts; resets; path and
//! hold changes), against a model of what may come out:
//! - only packets that went in come out, each at most once per session;
//! - with the window on, a session's packets come out in counter order;
//! - held packets and bytes stay within capacity and max_bytes, held and
//!   ready within twice that, and the slot pool within 2 × capacity + 1;
//! - UnderWindow only below the next counter, never Duplicated for a
//!   counter that went in once, and `accepted` counts every delivery.

use crate::input::Input;
use braid_core::reorder::{InsertOutcome, ReorderConfig, ReorderWindow, MAX_PATHS};
use braid_core::testing::clock;
use std::collections::HashSet;
use std::time::Duration;

/// A packet's bytes name its session and counter, so what comes out can be
/// matched against what went in.
fn packet(session: u32, counter: u64, extra: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(12 + extra);
    p.extend_from_slice(&session.to_le_bytes());
    p.extend_from_slice(&counter.to_le_bytes());
    p.resize(12 + extra, 0xab);
    p
}

fn parse(p: &[u8]) -> (u32, u64) {
    assert!(p.len() >= 12, "a packet came out shorter than it went in");
    (
        u32::from_le_bytes(p[..4].try_into().expect("4 bytes")),
        u64::from_le_bytes(p[4..12].try_into().expect("8 bytes")),
    )
}

struct Model {
    session: u32,
    /// (session, counter) that went into the window (in place or inserted).
    given: HashSet<(u32, u64)>,
    delivered: HashSet<(u32, u64)>,
    /// Ones that went in while the window was off: they come out in
    /// arrival order, so the order check skips them.
    unordered: HashSet<(u32, u64)>,
    /// Ones the window refused (too large, under the window, no room).
    refused: HashSet<(u32, u64)>,
    /// Last counter delivered in this session (order check).
    last_delivered: Option<u64>,
    deliveries: u64,
    off: bool,
}

impl Model {
    fn deliver(&mut self, p: &[u8]) {
        let (session, counter) = parse(p);
        assert!(
            self.given.contains(&(session, counter)),
            "{session}/{counter} came out but never went in"
        );
        assert!(
            !self.refused.contains(&(session, counter)),
            "{session}/{counter} came out after it was refused"
        );
        assert!(
            self.delivered.insert((session, counter)),
            "{session}/{counter} delivered twice"
        );
        if session == self.session && !self.unordered.contains(&(session, counter)) {
            if let Some(last) = self.last_delivered {
                assert!(counter > last, "{counter} delivered after {last}");
            }
            self.last_delivered = Some(counter);
        }
        self.deliveries += 1;
    }
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let cfg_byte = input.u8();
    let capacity = 1 + input.u8() as usize % 16;
    let max_packet = 12 + input.u8() as usize % 64;
    let cfg = ReorderConfig {
        hold_ceiling: if cfg_byte & 0x0f == 0 {
            Duration::ZERO
        } else {
            Duration::from_millis(u64::from(cfg_byte) * 3)
        },
        capacity,
        max_bytes: max_packet * (1 + input.u8() as usize % (2 * capacity)),
        max_packet,
        // From the byte already read, so earlier inputs keep their meaning:
        // 0 (a line trusted at once) to 3.75 ms.
        pass_wait: Duration::from_micros(u64::from(cfg_byte >> 4) * 250),
        // The same byte: paths trusted at once, or after 4 to 12 packets
        // (short inputs reach both sides of the learning).
        slack_learning: u64::from(cfg_byte & 0x03) * 4,
    };
    if cfg.validate().is_err() {
        return;
    }
    let mut window = ReorderWindow::new(cfg.clone());
    let mut model = Model {
        session: 0,
        given: HashSet::new(),
        delivered: HashSet::new(),
        refused: HashSet::new(),
        unordered: HashSet::new(),
        last_delivered: None,
        deliveries: 0,
        off: cfg.hold_ceiling.is_zero(),
    };
    let mut now = clock::epoch();
    let mut last = 0u64;
    let mut steps = 0;
    while !input.is_empty() && steps < 2048 {
        steps += 1;
        let op = input.u8();
        match op % 8 {
            0..=3 => {
                // Steps saturate: the window must take any u64, up to the
                // session's last counter u64::MAX.
                let counter = match op >> 5 {
                    0..=2 => last.saturating_add(1),
                    3 => last.saturating_add(u64::from(input.u8() % 8)),
                    4 => last.saturating_sub(u64::from(input.u8() % 8)),
                    5 => last.saturating_add(u64::from(input.u16())),
                    6 => last,
                    _ => {
                        // Anywhere, or (half the time) near the top.
                        let c = input.u64();
                        if input.bool() {
                            u64::MAX - (c >> 48)
                        } else {
                            c >> 4
                        }
                    }
                };
                last = counter;
                let path = input.u8() as usize % MAX_PATHS;
                let extra = input.u8() as usize % 80;
                let pkt = packet(model.session, counter, extra);
                let key = (model.session, counter);
                if model.off {
                    model.unordered.insert(key);
                }
                if model.given.contains(&key) {
                    // The replay check upstream rejects a second copy; the
                    // device reports it instead of inserting it.
                    window.note_duplicate(now, counter, path);
                } else if window.passes_through(counter) {
                    model.given.insert(key);
                    window.delivered_in_place(now, counter, path);
                    model.deliver(&pkt);
                } else {
                    model.given.insert(key);
                    let outcome = window.insert(now, counter, path, &pkt);
                    // Insert gives up due gaps first, so compare with the
                    // next counter after it (which only ever grows).
                    let next = window.next_counter();
                    match outcome {
                        InsertOutcome::Ready | InsertOutcome::Buffered => {}
                        InsertOutcome::TooLarge => {
                            assert!(pkt.len() > cfg.max_packet, "{} bytes too large", pkt.len());
                            model.refused.insert(key);
                        }
                        InsertOutcome::UnderWindow => {
                            assert!(
                                next.is_some_and(|n| counter < n),
                                "{counter} under {next:?}"
                            );
                            model.refused.insert(key);
                        }
                        InsertOutcome::Duplicated => {
                            panic!("{counter} reported duplicated but never went in")
                        }
                        InsertOutcome::ReadyFull => {
                            model.refused.insert(key);
                        }
                    }
                }
            }
            4 => {
                let counter = last.saturating_sub(u64::from(input.u8() % 16));
                window.note_duplicate(now, counter, input.u8() as usize % MAX_PATHS);
            }
            5 => {
                now +=
                    Duration::from_micros(u64::from(input.u16()) * u64::from(input.u8() % 16 + 1));
                window.handle_timeout(now);
            }
            6 => match input.u8() % 5 {
                0 => window.set_live_paths(input.u8()),
                1 => window.set_path_skew(Duration::from_micros(u64::from(input.u16()) * 8)),
                2 => {
                    let ceiling = Duration::from_millis(u64::from(input.u8()));
                    window.set_hold_ceiling(ceiling);
                    model.off = ceiling.is_zero();
                    // Switching on or off may legitimately reorder what
                    // was released before against what comes next.
                    model.last_delivered = None;
                }
                3 => {
                    if let Some(t) = window.poll_timeout() {
                        now = now.max(t);
                        window.handle_timeout(now);
                    }
                }
                _ => {
                    window.reset();
                    drain_all(&mut window, &mut model, input.bool());
                    model.session += 1;
                    model.last_delivered = None;
                    last = input.u8().into();
                }
            },
            _ => {}
        }
        // The device drains after every batch; sometimes let it pile up.
        if op & 0x10 == 0 {
            drain_all(&mut window, &mut model, op & 0x08 != 0);
        }
        check_bounds(&window, &cfg);
    }
    drain_all(&mut window, &mut model, false);
    {
        assert_eq!(
            window.counters().accepted,
            model.deliveries,
            "accepted counter differs from deliveries"
        );
    }
}

fn drain_all(window: &mut ReorderWindow, model: &mut Model, one_by_one: bool) {
    if one_by_one {
        while let Some(p) = window.pop_ready() {
            let p = p.to_vec();
            model.deliver(&p);
        }
    } else {
        window.drain_ready(|p| model.deliver(p));
    }
}

fn check_bounds(window: &ReorderWindow, cfg: &ReorderConfig) {
    assert!(window.held_packets() <= cfg.capacity, "held over capacity");
    assert!(window.held_bytes() <= cfg.max_bytes, "held over max_bytes");
    assert!(
        window.held_packets() + window.ready_packets() <= 2 * cfg.capacity,
        "held + ready over twice the capacity"
    );
    assert!(
        window.allocated_slots() <= 2 * cfg.capacity + 1,
        "slot pool grew past 2 × capacity + 1"
    );
}
