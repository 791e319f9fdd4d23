//! Batches leave in the order their counters were given, when several
//! pipelines send at once (one per TUN queue).
//!
//! Each pipeline reads its queue, takes counters for the batch under the
//! device lock, seals outside it and sends. Two pipelines sealing at once
//! would otherwise put a peer's counters on the wire out of order: a stock
//! WireGuard peer takes that (its replay window), but a braid peer's
//! reorder window would hold the later batch until the earlier one came,
//! and a flow in it waits for packets of flows that are not its own. With
//! a ticket taken under the device lock right after the counters, and the
//! send waiting for the ticket's turn, the sealing still runs on every
//! core and only the sends (which the socket serialises anyway) queue up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

/// The ticket counter and whose turn it is to send.
#[derive(Debug, Default)]
pub struct SendOrder {
    issued: AtomicU64,
    turn: Mutex<u64>,
    turn_changed: Condvar,
}

/// A batch's place in the sending order; its turn passes on when it is
/// dropped (after the send, or when the send failed or never happened),
/// so no pipeline waits for a batch that will not come.
#[must_use = "the turn passes on when the ticket is dropped"]
pub struct Ticket<'a> {
    order: &'a SendOrder,
    number: u64,
}

impl SendOrder {
    /// The next ticket. Take it under the lock that gave the batch its
    /// counters, so tickets and counters come in the same order.
    pub fn take(&self) -> Ticket<'_> {
        Ticket {
            order: self,
            number: self.issued.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn turn(&self) -> std::sync::MutexGuard<'_, u64> {
        self.turn.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Ticket<'_> {
    /// Waits until every earlier ticket is dropped.
    pub fn wait_turn(&self) {
        let mut turn = self.order.turn();
        while *turn != self.number {
            turn = self
                .order
                .turn_changed
                .wait(turn)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.wait_turn();
        *self.order.turn() += 1;
        self.order.turn_changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sends_follow_the_tickets_whatever_order_the_work_ends_in() {
        let order = Arc::new(SendOrder::default());
        let sent = Arc::new(Mutex::new(Vec::new()));
        let taken = Mutex::new(());
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let (order, sent, taken) = (&order, &sent, &taken);
                scope.spawn(move || {
                    for round in 0..200u64 {
                        let ticket = {
                            let _counters = taken.lock().unwrap();
                            order.take()
                        };
                        // Work of uneven length, as sealing batches of
                        // different sizes is.
                        let spins = (thread * 7 + round * 13) % 50;
                        for _ in 0..spins * 100 {
                            std::hint::spin_loop();
                        }
                        ticket.wait_turn();
                        sent.lock().unwrap().push(ticket.number);
                    }
                });
            }
        });
        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 800);
        assert!(
            sent.windows(2).all(|w| w[1] == w[0] + 1),
            "sent out of ticket order"
        );
    }

    #[test]
    fn a_ticket_dropped_without_sending_passes_its_turn_on() {
        let order = SendOrder::default();
        let first = order.take();
        let second = order.take();
        drop(first);
        second.wait_turn();
        drop(second);
        assert_eq!(*order.turn(), 2);
    }
}
