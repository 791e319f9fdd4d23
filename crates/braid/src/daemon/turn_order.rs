//! Work that several pipelines do at once, finished in the order it was
//! begun: batches leave for the lines in the order of their counters, and
//! reach the TUN in the order the reorder windows released them.
//!
//! **Sending** (one pipeline per TUN queue). Each pipeline reads its queue,
//! takes counters for the batch under the device lock, seals outside it
//! and sends. Two pipelines sealing at once would otherwise put a peer's
//! counters on the wire out of order: a stock WireGuard peer takes that
//! (its replay window), but a braid peer's reorder window would hold the
//! later batch until the earlier one came, and a flow in it waits for
//! packets of flows that are not its own.
//!
//! **Receiving** (one pipeline per socket of the `ListenPort` group). Each
//! pipeline receives from its socket, opens outside the lock and hands the
//! batch to the reorder windows under it. A multipath peer whose lines
//! land on two sockets has its packets put in order there; written to the
//! TUN by two threads at once they would leave it out of order again.
//!
//! Either way a ticket is taken under the device lock right where the
//! order is decided, and the step that must keep it (the send, the TUN
//! write) waits for the ticket's turn: the AEAD work still runs on every
//! core, and only the system calls queue up, which the socket or the TUN
//! serialises anyway.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

/// The ticket counter and whose turn it is.
#[derive(Debug, Default)]
pub struct TurnOrder {
    issued: AtomicU64,
    turn: Mutex<u64>,
    turn_changed: Condvar,
}

/// A batch's place in the order; its turn passes on when it is dropped
/// (after the send or write, or when it failed or never happened), so no
/// pipeline waits for a batch that will not come.
#[must_use = "the turn passes on when the ticket is dropped"]
pub struct Ticket<'a> {
    order: &'a TurnOrder,
    number: u64,
}

impl TurnOrder {
    /// The next ticket. Take it under the lock that decided the batch's
    /// place (its counters, its release from the reorder windows), so
    /// tickets and that order agree.
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
        let order = Arc::new(TurnOrder::default());
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
        let order = TurnOrder::default();
        let first = order.take();
        let second = order.take();
        drop(first);
        second.wait_turn();
        drop(second);
        assert_eq!(*order.turn(), 2);
    }
}
