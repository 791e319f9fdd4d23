//! The local lines of an interface: line 0 is the main socket (ListenPort,
//! what stock WireGuard peers talk to); every distinct `bind=` of a `Path`
//! line gets a socket of its own, tied to its interface so the datagrams
//! leave through that line whatever the routing table prefers. TCP lines
//! (opened by `tcp_lines`) join the same list; each entry is a [`Line`],
//! UDP or TCP, driven the same way. With `Queues = N` the main line is a
//! group of N sockets on the one port (`SO_REUSEPORT`): the kernel spreads
//! the senders over them, and the thread of TUN queue k receives from
//! member k (member 0 is line 0 itself). Everything is sent from line 0.

use super::line::{stamped, Line};
use crate::config::Bind;
use braid_core::batch::PacketBatch;
use braid_io::UdpSocket;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::SystemTime;

pub struct Lines {
    sockets: Vec<Line>,
    binds: Vec<Option<Bind>>,
    /// The main line's group beyond line 0 itself: member k is at k - 1.
    members: Vec<UdpSocket>,
}

impl Lines {
    /// The lines of an interface whose main line is `main_group` (see
    /// `UdpSocket::bind_group`): the first socket is line 0.
    pub fn new(main_group: Vec<UdpSocket>) -> Lines {
        let mut group = main_group.into_iter().map(stamped);
        let main = group.next().expect("a socket group has a first socket");
        Lines {
            sockets: vec![Line::Udp(main)],
            binds: vec![None],
            members: group.collect(),
        }
    }

    /// Adds a line that no `bind=` names; returns its index.
    pub fn push(&mut self, line: Line) -> io::Result<u16> {
        let index = line_index(self.sockets.len())?;
        self.sockets.push(line);
        self.binds.push(None);
        Ok(index)
    }

    /// The line for `bind` (opened on first use); `None` is the main line.
    pub fn line_for(&mut self, bind: Option<&Bind>) -> io::Result<u16> {
        let Some(bind) = bind else { return Ok(0) };
        if let Some(i) = self.binds.iter().position(|b| b.as_ref() == Some(bind)) {
            // Exact: every line got an index that fits (line_index).
            return Ok(i as u16);
        }
        // A slot a reload closed is taken first, so lines do not run out
        // over many reloads.
        let reuse = self
            .sockets
            .iter()
            .skip(1)
            .position(|l| matches!(l, Line::Closed))
            .map(|i| i + 1);
        let index = match reuse {
            Some(i) => line_index(i)?,
            None => line_index(self.sockets.len())?,
        };
        let socket = match bind {
            Bind::Interface(dev) => UdpSocket::bind_on(
                SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
                Some(dev),
            )
            .or_else(|_| {
                UdpSocket::bind_on(
                    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0),
                    Some(dev),
                )
            }),
            Bind::Address(addr) => {
                let dev = braid_io::netcfg::interface_with_address(*addr);
                UdpSocket::bind_on(SocketAddr::new(*addr, 0), dev.as_deref())
            }
        }
        .map(stamped)
        .map_err(|e| io::Error::new(e.kind(), format!("line bind={}: {e}", describe(bind))))?;
        match reuse {
            Some(i) => {
                self.sockets[i] = Line::Udp(socket);
                self.binds[i] = Some(bind.clone());
            }
            None => {
                self.sockets.push(Line::Udp(socket));
                self.binds.push(Some(bind.clone()));
            }
        }
        Ok(index)
    }

    /// Closes UDP line `line` (never the main line, nor a TCP line): a
    /// reload left no path on it.
    pub fn close(&mut self, line: u16) {
        let i = usize::from(line);
        if i == 0 || !matches!(self.sockets.get(i), Some(Line::Udp(_))) {
            return;
        }
        self.sockets[i] = Line::Closed;
        self.binds[i] = None;
    }

    /// The UDP lines opened for a `bind=`, by index.
    pub fn bound_udp_lines(&self) -> impl Iterator<Item = u16> + '_ {
        self.sockets
            .iter()
            .zip(&self.binds)
            .enumerate()
            .filter(|(_, (l, b))| matches!(l, Line::Udp(_)) && b.is_some())
            // Exact: every line got an index that fits (line_index).
            .map(|(i, _)| i as u16)
    }

    /// What line `line` is bound to (`None`: the main line, or no such line).
    pub fn bind(&self, line: u16) -> Option<&Bind> {
        self.binds.get(line as usize).and_then(Option::as_ref)
    }

    pub fn main(&self) -> &UdpSocket {
        self.sockets[0]
            .udp()
            .expect("line 0 is the main UDP socket")
    }

    /// The main line's group: line 0 and the members that receive beside it.
    pub fn main_group(&self) -> impl Iterator<Item = &UdpSocket> {
        std::iter::once(self.main()).chain(&self.members)
    }

    /// How many sockets the main line's group has (1 without `Queues`).
    pub fn main_group_len(&self) -> usize {
        1 + self.members.len()
    }

    /// Member `k` (1 or more) of the main line's group.
    pub fn member(&self, k: usize) -> Option<&UdpSocket> {
        self.members.get(k.checked_sub(1)?)
    }

    /// Receives one batch from member `k` (1 or more) of the main line's
    /// group: datagrams of line 0.
    pub fn recv_member(
        &self,
        k: usize,
        batch: &mut PacketBatch,
        times: &mut [Option<SystemTime>],
    ) -> io::Result<usize> {
        match self.member(k) {
            Some(socket) => socket.recv_batch_timed(batch, times),
            None => Ok(0),
        }
    }

    /// A new group for the main line (a `ListenPort` change): as large as
    /// the one it replaces, or one socket alone once braid runs without
    /// root (see `main_group_size`); queues without a member of their own
    /// then only read their TUN queue.
    pub fn replace_main(&mut self, main_group: Vec<UdpSocket>) {
        debug_assert!(
            (1..=self.main_group_len().max(1)).contains(&main_group.len()),
            "a group of {} for {}",
            main_group.len(),
            self.main_group_len()
        );
        let mut group = main_group.into_iter().map(stamped);
        if let Some(main) = group.next() {
            self.sockets[0] = Line::Udp(main);
        }
        self.members = group.collect();
    }

    /// Every line, UDP and TCP, by index.
    pub fn all(&self) -> &[Line] {
        &self.sockets
    }

    /// Every UDP socket: the lines' and the main group's members.
    pub fn udp_sockets(&self) -> impl Iterator<Item = &UdpSocket> {
        self.sockets
            .iter()
            .filter_map(Line::udp)
            .chain(&self.members)
    }

    /// Line `line` if it is a listening TCP line.
    pub fn tcp_listener(&self, line: usize) -> Option<&braid_io::TcpLine> {
        match self.sockets.get(line)? {
            Line::Tcp(super::line::TcpRole::Listen, tcp) => Some(tcp),
            _ => None,
        }
    }

    /// Receives one batch from line `line`, tagging each datagram with it.
    pub fn recv(
        &self,
        line: usize,
        batch: &mut PacketBatch,
        times: &mut [Option<SystemTime>],
    ) -> io::Result<usize> {
        // Indexing first: a line that exists has an index that fits u16.
        self.sockets[line].recv(line as u16, batch, times)
    }

    /// The longest datagram line `line` last found too long for the
    /// batch's slots (see `UdpSocket::take_oversize`; TCP lines take
    /// frames of any length).
    pub fn take_oversize(&self, line: usize) -> Option<usize> {
        self.sockets[line].udp()?.take_oversize()
    }

    /// Sends a batch, each datagram (and copy) on the line it names.
    pub fn send(&self, batch: &PacketBatch) -> io::Result<()> {
        if self.sockets.len() == 1 {
            self.main().send_batch(batch)?;
            return Ok(());
        }
        for (line, socket) in self.sockets.iter().enumerate() {
            // Exact: every line got an index that fits (line_index).
            socket.send(line as u16, batch)?;
        }
        Ok(())
    }

    /// Local addresses a send on some line could not leave from since the
    /// last call (see `UdpSocket::take_refused_sources`); empty, without
    /// allocating, when there were none.
    pub fn take_refused_sources(&self) -> Vec<IpAddr> {
        let mut all = Vec::new();
        for socket in self.udp_sockets() {
            all.extend(socket.take_refused_sources());
        }
        all
    }

    /// Datagrams dropped on send, all lines together (saturating: a sum
    /// of counters must not wrap to a small number, nor panic).
    pub fn dropped(&self) -> u64 {
        saturating_sum(self.sockets.iter().map(Line::dropped))
    }
}

fn saturating_sum(counts: impl Iterator<Item = u64>) -> u64 {
    counts.fold(0, u64::saturating_add)
}

/// Most lines an interface has: the event loop polls every line's socket
/// together with its waker and the TUN in one `poll` call of at most
/// [`braid_io::poll::MAX_FDS`] descriptors. A line beyond that would never
/// be read, so it is refused.
pub const MAX_LINES: usize = braid_io::poll::MAX_FDS - 2;

/// The index a new line gets when `count` lines exist, or why there is
/// none: at most [`MAX_LINES`] (which also keeps line numbers, u16 in every
/// datagram, from wrapping onto line 0).
fn line_index(count: usize) -> io::Result<u16> {
    if count >= MAX_LINES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "too many lines: at most {MAX_LINES} (the main socket, one per distinct bind=, one per TCP endpoint and the TCP listener)"
            ),
        ));
    }
    u16::try_from(count).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many lines"))
}

fn describe(bind: &Bind) -> String {
    match bind {
        Bind::Interface(dev) => dev.clone(),
        Bind::Address(a) => a.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_stop_where_the_event_loop_stops_polling() {
        const { assert!(MAX_LINES < u16::MAX as usize) };
        assert_eq!(line_index(0).unwrap(), 0);
        assert_eq!(line_index(MAX_LINES - 1).unwrap() as usize, MAX_LINES - 1);
        let e = line_index(MAX_LINES).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("too many lines: at most 14"), "{e}");
        assert!(line_index(65536).is_err());
        assert!(line_index(usize::MAX).is_err());
    }

    #[test]
    fn dropped_counts_add_up_saturating() {
        assert_eq!(saturating_sum([1, 2, 3].into_iter()), 6);
        assert_eq!(saturating_sum([u64::MAX - 1, 5, 7].into_iter()), u64::MAX);
        assert_eq!(saturating_sum(std::iter::empty()), 0);
    }
}
