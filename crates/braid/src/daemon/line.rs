//! One local line of an interface, UDP or TCP, and how it is driven. The
//! interface's table of lines is `lines`; which TCP lines a config needs,
//! `tcp_lines`.

use crate::config::Bind;
use braid_core::batch::PacketBatch;
use braid_io::{TcpLine, UdpSocket};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::SystemTime;

/// What a TCP line is for, so that paths sharing it find it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpRole {
    Listen,
    Connect(Option<Bind>, SocketAddr),
}

/// `socket`, asked to stamp every datagram with its arrival time: the
/// reorder window then judges a gap by when its packets arrived, not by
/// when a thread that was not running got to them (see
/// `dataplane::receive`). Without stamps (an old kernel refusing the
/// option) the read time stands in, as before.
pub fn stamped(socket: UdpSocket) -> UdpSocket {
    let _ = socket.enable_rx_timestamps();
    socket
}

/// One local line of the interface.
pub enum Line {
    Udp(UdpSocket),
    Tcp(TcpRole, TcpLine),
    /// A line a reload took away: its socket is closed, so nothing arrives
    /// on it (and the peer's traffic there cannot bring its path back);
    /// the slot keeps the other lines' numbers and is reused by the next
    /// new line.
    Closed,
}

impl Line {
    /// The descriptor that is readable when [`recv`](Self::recv) has work.
    pub fn poll_fd(&self) -> RawFd {
        match self {
            Line::Udp(s) => s.as_raw_fd(),
            Line::Tcp(_, t) => t.as_raw_fd(),
            // poll(2) skips a negative descriptor.
            Line::Closed => -1,
        }
    }

    /// Datagrams already in user space that no poll will report.
    pub fn has_pending(&self) -> bool {
        match self {
            Line::Udp(s) => s.has_pending(),
            Line::Tcp(_, t) => t.has_pending(),
            Line::Closed => false,
        }
    }

    /// Receives one batch, each datagram tagged with `line`.
    /// `times[k]` gets datagram k's arrival time when the kernel stamped it
    /// (UDP lines; see [`stamped`]); other slots keep what they held.
    pub fn recv(
        &self,
        line: u16,
        batch: &mut PacketBatch,
        times: &mut [Option<SystemTime>],
    ) -> io::Result<usize> {
        match self {
            Line::Udp(s) => {
                let n = s.recv_batch_timed(batch, times)?;
                if line != 0 {
                    for i in 0..n {
                        batch.set_line(i, line);
                    }
                }
                Ok(n)
            }
            Line::Tcp(_, t) => t.recv_batch(batch, line),
            Line::Closed => Ok(0),
        }
    }

    pub fn send(&self, line: u16, batch: &PacketBatch) -> io::Result<usize> {
        match self {
            Line::Udp(s) => s.send_batch_on_line(batch, line),
            Line::Tcp(_, t) => t.send_batch_on_line(batch, line),
            // Nothing is routed to a closed line once its paths are gone.
            Line::Closed => Ok(0),
        }
    }

    pub fn dropped(&self) -> u64 {
        match self {
            Line::Udp(s) => s.dropped(),
            Line::Tcp(_, t) => t.dropped(),
            Line::Closed => 0,
        }
    }

    pub fn udp(&self) -> Option<&UdpSocket> {
        match self {
            Line::Udp(s) => Some(s),
            Line::Tcp(..) | Line::Closed => None,
        }
    }
}
