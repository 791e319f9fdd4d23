//! A listening and a connecting line on loopback: datagrams of every size
//! cross in both directions whole and in order, and the connecting line
//! opens a new connection by itself when the listener drops the old one.

use super::*;
use crate::poll::{self, Interest};
use std::net::SocketAddrV4;

/// Generous bound on poll rounds; a healthy run needs a handful.
const ROUNDS: usize = 2000;

fn datagram(n: usize) -> Vec<u8> {
    let len = 1 + (n * 97) % 1500;
    (0..len).map(|i| (i + n) as u8).collect()
}

fn batch_of(range: std::ops::Range<usize>, to: SocketAddr, line: u16) -> PacketBatch {
    let mut batch = PacketBatch::new(range.len(), 2048);
    for n in range {
        let d = datagram(n);
        batch.push_with(0, to, |slot| {
            slot[..d.len()].copy_from_slice(&d);
            d.len()
        });
        let last = batch.len() - 1;
        batch.set_line(last, line);
    }
    batch
}

/// Receives on `line` until `want` datagrams arrived, driving `other`
/// too (its connection handshake or backlog).
fn receive(line: &TcpLine, other: &TcpLine, want: usize) -> Vec<(Vec<u8>, SocketAddr)> {
    let mut got = Vec::new();
    let mut batch = PacketBatch::new(64, 2048);
    for _ in 0..ROUNDS {
        if got.len() >= want {
            break;
        }
        let fds = [
            (line.as_raw_fd(), Interest::READABLE),
            (other.as_raw_fd(), Interest::READABLE),
        ];
        let wait = if line.has_pending() {
            Duration::ZERO
        } else {
            Duration::from_millis(10)
        };
        poll::wait(&fds, Some(wait)).unwrap();
        other.recv_batch(&mut batch, 9).unwrap();
        assert_eq!(batch.len(), 0, "nothing was sent the other way");
        line.recv_batch(&mut batch, 7).unwrap();
        for i in 0..batch.len() {
            assert_eq!(batch.line(i), 7);
            got.push((batch.packet(i).to_vec(), batch.addr(i)));
        }
    }
    got
}

/// Drives both lines until `connecting` has an established connection.
fn settle(listening: &TcpLine, connecting: &TcpLine) {
    let mut batch = PacketBatch::new(8, 2048);
    for _ in 0..ROUNDS {
        let fds = [
            (listening.as_raw_fd(), Interest::READABLE),
            (connecting.as_raw_fd(), Interest::READABLE),
        ];
        poll::wait(&fds, Some(Duration::from_millis(10))).unwrap();
        listening.recv_batch(&mut batch, 0).unwrap();
        connecting.recv_batch(&mut batch, 0).unwrap();
        let established = lock(&connecting.table)
            .connections
            .iter()
            .any(|c| c.is_established());
        if established && listening.connections() > 0 {
            return;
        }
    }
    panic!("no connection between the lines");
}

#[test]
fn datagrams_cross_both_ways_and_the_connecting_line_reconnects() {
    let listening = TcpLine::listen(0, 0).unwrap();
    let port = listening.local_port().unwrap();
    let server = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let connecting = TcpLine::connect(server, None, None, 0).unwrap();
    settle(&listening, &connecting);

    // Client to server: the address on arrival is the client's.
    for chunk in [0..100, 100..300] {
        let len = chunk.len();
        let sent = connecting
            .send_batch_on_line(&batch_of(chunk, server, 3), 3)
            .unwrap();
        assert_eq!(sent, len);
    }
    let got = receive(&listening, &connecting, 300);
    assert_eq!(got.len(), 300);
    let client = got[0].1;
    for (n, (bytes, from)) in got.iter().enumerate() {
        assert_eq!(bytes, &datagram(n), "datagram {n}");
        assert_eq!(*from, client);
    }

    // Server to client, addressed by what arrived; other lines' datagrams
    // and unknown addresses are not sent.
    let mut reply = batch_of(0..50, client, 1);
    reply.set_line(0, 2);
    assert_eq!(listening.send_batch_on_line(&reply, 1).unwrap(), 49);
    let stranger = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9));
    assert_eq!(
        listening
            .send_batch_on_line(&batch_of(0..5, stranger, 1), 1)
            .unwrap(),
        0
    );
    assert_eq!(listening.dropped(), 5);
    let got = receive(&connecting, &listening, 49);
    assert_eq!(got.len(), 49);
    for (k, (bytes, from)) in got.iter().enumerate() {
        assert_eq!(bytes, &datagram(k + 1));
        assert_eq!(*from, server, "tagged with the endpoint it connected to");
    }

    // The listener drops the connection: the connecting line notices the
    // end of the stream and opens a new one.
    {
        let mut table = lock(&listening.table);
        for c in &table.connections {
            c.break_off();
        }
        listening.close_broken(&mut table);
    }
    let mut batch = PacketBatch::new(8, 2048);
    for _ in 0..ROUNDS {
        if connecting.connections_opened() >= 2 && listening.connections_opened() >= 2 {
            break;
        }
        let fds = [
            (listening.as_raw_fd(), Interest::READABLE),
            (connecting.as_raw_fd(), Interest::READABLE),
        ];
        poll::wait(&fds, Some(Duration::from_millis(10))).unwrap();
        listening.recv_batch(&mut batch, 0).unwrap();
        connecting.recv_batch(&mut batch, 0).unwrap();
    }
    assert_eq!(connecting.connections_opened(), 2, "reconnected once");
    settle(&listening, &connecting);
    connecting
        .send_batch_on_line(&batch_of(0..10, server, 3), 3)
        .unwrap();
    let got = receive(&listening, &connecting, 10);
    assert_eq!(got.len(), 10);
    assert_ne!(got[0].1, client, "a new connection, a new source port");
}

#[test]
fn strangers_make_room_for_them_not_for_an_authenticated_peer() {
    let listening = TcpLine::listen(0, 0).unwrap();
    let port = listening.local_port().unwrap();
    let server = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let connecting = TcpLine::connect(server, None, None, 0).unwrap();
    settle(&listening, &connecting);
    connecting
        .send_batch_on_line(&batch_of(0..1, server, 0), 0)
        .unwrap();
    let peer = receive(&listening, &connecting, 1)[0].1;
    listening.sort_out(|addr| addr == peer);
    assert_eq!(listening.authenticated_connections(), 1);

    // From as many loopback addresses (one address would be held to
    // MAX_UNAUTHENTICATED_PER_ADDRESS long before the table fills).
    let strangers: Vec<TcpStream> = (0..MAX_CONNECTIONS + 5)
        .map(|k| {
            let from = IpAddr::V4(Ipv4Addr::new(
                127,
                0,
                1 + (k / 250) as u8,
                1 + (k % 250) as u8,
            ));
            sys::start_connect(server, None, Some(from), 0, KERNEL_UNSENT).unwrap()
        })
        .collect();
    let mut batch = PacketBatch::new(8, 2048);
    for _ in 0..ROUNDS {
        if listening.connections_opened() as usize > strangers.len() {
            break;
        }
        poll::wait(
            &[(listening.as_raw_fd(), Interest::READABLE)],
            Some(Duration::from_millis(10)),
        )
        .unwrap();
        listening.recv_batch(&mut batch, 0).unwrap();
    }
    assert_eq!(listening.connections(), MAX_CONNECTIONS);
    assert_eq!(listening.authenticated_connections(), 1, "the peer stays");
    connecting
        .send_batch_on_line(&batch_of(1..2, server, 0), 0)
        .unwrap();
    assert_eq!(receive(&listening, &connecting, 1)[0].0, datagram(1));
}

#[test]
fn a_datagram_longer_than_a_frame_is_dropped_and_the_stream_stays_in_step() {
    let listening = TcpLine::listen(0, 0).unwrap();
    let port = listening.local_port().unwrap();
    let server = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let connecting = TcpLine::connect(server, None, None, 0).unwrap();
    settle(&listening, &connecting);
    // 65536 bytes would go out behind a prefix of 0 if the length were
    // truncated to 16 bits, and the listener would take the stream for
    // garbage; dropped, the datagrams around it arrive intact.
    let mut batch = PacketBatch::new(3, MAX_FRAME + 1);
    for (len, byte) in [(10, 1u8), (MAX_FRAME + 1, 2), (1000, 3)] {
        batch.push_with(0, server, |slot| {
            slot[..len].fill(byte);
            len
        });
        let last = batch.len() - 1;
        batch.set_line(last, 0);
    }
    assert_eq!(connecting.send_batch_on_line(&batch, 0).unwrap(), 2);
    assert_eq!(connecting.dropped(), 1);
    let got = receive(&listening, &connecting, 2);
    let got: Vec<Vec<u8>> = got.into_iter().map(|(bytes, _)| bytes).collect();
    assert_eq!(got, [vec![1; 10], vec![3; 1000]]);
    assert_eq!(listening.connections(), 1, "the connection is still up");
}

/// Accepts what is waiting on `listening`.
fn accept_waiting(listening: &TcpLine) {
    let mut batch = PacketBatch::new(8, 2048);
    for _ in 0..20 {
        let fds = [(listening.as_raw_fd(), Interest::READABLE)];
        if !poll::wait(&fds, Some(Duration::from_millis(10)))
            .unwrap()
            .is_readable(0)
        {
            return;
        }
        listening.recv_batch(&mut batch, 0).unwrap();
    }
}

#[test]
fn one_address_holds_few_unauthenticated_connections() {
    let listening = TcpLine::listen(0, 0).unwrap();
    let port = listening.local_port().unwrap();
    let to = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    // A peer's connection, authenticated (as the core would say).
    let peer = TcpStream::connect(to).unwrap();
    accept_waiting(&listening);
    let peer_addr = peer.local_addr().unwrap();
    listening.mark_peers(|a| a == peer_addr);
    assert_eq!(listening.authenticated_connections(), 1);
    // A flood from the same address: only the newest few of it stay, and
    // the peer's connection is never the one that goes.
    let flood: Vec<TcpStream> = (0..3 * MAX_CONNECTIONS)
        .map(|_| {
            let s = TcpStream::connect(to).unwrap();
            accept_waiting(&listening);
            s
        })
        .collect();
    assert_eq!(
        listening.connections(),
        1 + MAX_UNAUTHENTICATED_PER_ADDRESS,
        "the peer and the flood's newest"
    );
    assert_eq!(listening.authenticated_connections(), 1);
    let kept: Vec<SocketAddr> = lock(&listening.table)
        .connections
        .iter()
        .map(|c| c.remote)
        .collect();
    assert!(kept.contains(&peer_addr));
    let newest = flood[flood.len() - 1].local_addr().unwrap();
    assert!(kept.contains(&newest), "the newest stranger stays");
}

#[test]
fn strangers_speaking_is_reported_at_most_every_mark_interval() {
    let listening = TcpLine::listen(0, 0).unwrap();
    let port = listening.local_port().unwrap();
    let to = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let now = Instant::now();
    assert!(!listening.strangers_spoke(now), "nobody spoke");
    let mut s = TcpStream::connect(to).unwrap();
    accept_waiting(&listening);
    // One frame: a 2-byte length prefix and a datagram.
    use std::io::Write as _;
    s.write_all(&[0, 4, 1, 2, 3, 4]).unwrap();
    let mut batch = PacketBatch::new(8, 2048);
    for _ in 0..ROUNDS {
        listening.recv_batch(&mut batch, 0).unwrap();
        if !batch.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(batch.len(), 1, "the frame arrived");
    assert!(listening.strangers_spoke(now));
    assert!(!listening.strangers_spoke(now), "reported once");
}
