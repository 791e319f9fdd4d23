use super::*;
use proptest::prelude::*;

const SPEC_SET: &str = "set=1
private_key=e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a
fwmark=0
listen_port=12912
replace_peers=true
public_key=b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33
preshared_key=188515093e952f5f22e865cef3012e72f8b5f0b598ac0309d5dacce3b70fcf52
replace_allowed_ips=true
allowed_ip=192.168.4.4/32
endpoint=[abcd:23::33%2]:51820
public_key=58402e695ba1772b1cc9309755f043251ea77fdcf10fbe63989ceb7e19321376
replace_allowed_ips=true
allowed_ip=192.168.4.6/32
persistent_keepalive_interval=111
endpoint=182.122.22.19:3233
public_key=662e14fd594556f522604703340351258903b64f35553763f19426ab2a515c58
endpoint=5.152.198.39:51820
replace_allowed_ips=true
allowed_ip=192.168.4.10/32
allowed_ip=192.168.4.11/32
public_key=e818b58db5274087fcc1be5dc728cf53d3b5726b4cef6b9bab8f8f8c2452c25c
remove=true

";

fn pk(hex: &str) -> PublicKey {
    PublicKey::from_hex(hex).unwrap()
}

#[test]
fn spec_set_example() {
    let Request::Set(s) = parse_request(SPEC_SET).unwrap() else {
        panic!("not a set")
    };
    let sk = s.private_key.clone().unwrap().unwrap();
    assert_eq!(
        *sk.to_hex(),
        "e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a"
    );
    assert_eq!(s.fwmark, Some(0));
    assert_eq!(s.listen_port, Some(12912));
    assert!(s.replace_peers);
    assert_eq!(s.peers.len(), 4);

    let p = &s.peers[0];
    assert_eq!(
        p.public_key,
        pk("b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33")
    );
    assert_eq!(
        *p.preshared_key.clone().unwrap().unwrap().to_hex(),
        "188515093e952f5f22e865cef3012e72f8b5f0b598ac0309d5dacce3b70fcf52"
    );
    assert!(p.replace_allowed_ips);
    assert_eq!(p.allowed_ips, ["192.168.4.4/32".parse().unwrap()]);
    let ep = p.endpoint.unwrap();
    assert_eq!(ep.to_string(), "[abcd:23::33%2]:51820");
    let SocketAddr::V6(v6) = ep else { panic!() };
    assert_eq!(v6.scope_id(), 2);

    let p = &s.peers[1];
    assert_eq!(p.persistent_keepalive_interval, Some(111));
    assert_eq!(p.endpoint, Some("182.122.22.19:3233".parse().unwrap()));

    let p = &s.peers[2];
    assert_eq!(p.allowed_ips.len(), 2);
    assert!(!p.remove && p.preshared_key.is_none());

    let p = &s.peers[3];
    assert!(p.remove);
    assert_eq!(
        p.public_key,
        pk("e818b58db5274087fcc1be5dc728cf53d3b5726b4cef6b9bab8f8f8c2452c25c")
    );
}

#[test]
fn get_requests() {
    assert_eq!(parse_request("get=1\n\n").unwrap(), Request::Get);
    assert_eq!(parse_request("get=braid\n\n").unwrap(), Request::GetBraid);
    let e = parse_request("get=1\nfoo=bar\n\n").unwrap_err();
    assert_eq!((e.errno, e.fatal), (Errno::EINVAL, false));
}

#[test]
fn removal_values() {
    let zero = "0".repeat(64);
    let text = format!(
        "set=1\nprivate_key=\npublic_key={}\npreshared_key={zero}\n\n",
        "11".repeat(32)
    );
    let Request::Set(s) = parse_request(&text).unwrap() else {
        panic!()
    };
    assert_eq!(s.private_key, Some(None));
    assert_eq!(s.peers[0].preshared_key, Some(None));
    let text = format!("set=1\nprivate_key={zero}\n\n");
    let Request::Set(s) = parse_request(&text).unwrap() else {
        panic!()
    };
    assert_eq!(s.private_key, Some(None));
}

#[test]
fn allowed_ips_before_replace_are_dropped() {
    let text = format!(
        "set=1\npublic_key={}\nallowed_ip=10.0.0.1/32\nreplace_allowed_ips=true\nallowed_ip=10.0.0.2/32\n\n",
        "11".repeat(32)
    );
    let Request::Set(s) = parse_request(&text).unwrap() else {
        panic!()
    };
    assert_eq!(s.peers[0].allowed_ips, ["10.0.0.2/32".parse().unwrap()]);
}

#[test]
fn malformed_requests() {
    let key = "11".repeat(32);
    let cases: Vec<(String, Errno, bool)> = vec![
        ("set=1\nlisten_port=1\n".into(), Errno::EPROTO, true), // no blank line
        ("set=1\nlisten_port=1".into(), Errno::EPROTO, true),
        ("set=2\n\n".into(), Errno::EPROTO, true),
        ("hello\n\n".into(), Errno::EPROTO, true),
        (
            format!("set=1\nx={}\n\n", "a".repeat(MAX_LINE_LEN)),
            Errno::EPROTO,
            true,
        ),
        ("set=1\nbogus=1\n\n".into(), Errno::EINVAL, false),
        ("set=1\nnoequals\n\n".into(), Errno::EPROTO, false),
        ("set=1\nlisten_port=65536\n\n".into(), Errno::EINVAL, false),
        ("set=1\nlisten_port=+1\n\n".into(), Errno::EINVAL, false),
        ("set=1\nfwmark=-1\n\n".into(), Errno::EINVAL, false),
        (
            "set=1\nreplace_peers=false\n\n".into(),
            Errno::EINVAL,
            false,
        ),
        ("set=1\nprivate_key=zz\n\n".into(), Errno::EINVAL, false),
        (
            format!("set=1\nprivate_key={}\n\n", "g".repeat(64)),
            Errno::EINVAL,
            false,
        ),
        ("set=1\npublic_key=abcd\n\n".into(), Errno::EINVAL, false),
        (
            format!("set=1\npublic_key={key}\nlisten_port=1\n\n"),
            Errno::EINVAL,
            false,
        ),
        (
            format!("set=1\npublic_key={key}\npublic_key={key}\n\n"),
            Errno::EINVAL,
            false,
        ),
        (
            format!("set=1\npublic_key={key}\nendpoint=host:1\n\n"),
            Errno::EINVAL,
            false,
        ),
        (
            format!("set=1\npublic_key={key}\nallowed_ip=10.0.0.1\n\n"),
            Errno::EINVAL,
            false,
        ),
        (
            format!("set=1\npublic_key={key}\nallowed_ip=10.0.0.1/33\n\n"),
            Errno::EINVAL,
            false,
        ),
        (
            format!("set=1\npublic_key={key}\nprotocol_version=2\n\n"),
            Errno::EINVAL,
            false,
        ),
        (
            format!("set=1\npublic_key={key}\ntx_bytes=1\n\n"),
            Errno::EINVAL,
            false,
        ),
        (
            format!("set=1\npublic_key={key}\nremove=1\n\n"),
            Errno::EINVAL,
            false,
        ),
        ("set=1\n\u{ff}=1\n\n".into(), Errno::EINVAL, false),
    ];
    for (text, errno, is_fatal) in cases {
        let e = parse_request(&text).expect_err(&text);
        assert_eq!((e.errno, e.fatal), (errno, is_fatal), "{text:?}: {e}");
    }
    // Raw invalid UTF-8 goes through the reader, not parse_request.
    let mut c = io::Cursor::new(b"set=1\n\xff\xfe=1\n\n".to_vec());
    assert_eq!(read_request(&mut c).unwrap_err().errno, Errno::EINVAL);
}

#[test]
fn secret_text_keeps_every_byte_when_it_grows() {
    use std::fmt::Write as _;
    let mut t = GetText::with_capacity(4);
    let mut plain = String::new();
    for i in 0..1000 {
        let _ = writeln!(t, "line {i} {}", "k".repeat(i % 70));
        let _ = writeln!(plain, "line {i} {}", "k".repeat(i % 70));
    }
    assert_eq!(*t.into_text(), plain);
}

#[test]
fn low_order_peer_keys_are_refused() {
    for key in ["00".repeat(32), format!("01{}", "00".repeat(31))] {
        let e = parse_request(&format!("set=1\npublic_key={key}\n\n")).unwrap_err();
        assert_eq!(e.errno, Errno::EINVAL);
        assert!(
            e.message
                .starts_with("invalid public_key: a low-order point"),
            "{}",
            e.message
        );
    }
}

#[test]
fn secrets_not_in_error_messages() {
    let secret = "e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba5202";
    for text in [
        format!("set=1\nprivate_key={secret}\n\n"),
        format!(
            "set=1\npublic_key={}\npreshared_key={secret}\n\n",
            "11".repeat(32)
        ),
    ] {
        let e = parse_request(&text).unwrap_err();
        assert!(!e.message.contains(&secret[..16]), "{}", e.message);
    }
}

#[test]
fn errors_leave_the_stream_in_sync() {
    let input = "set=1\nbogus=1\nlisten_port=2\n\nget=1\n\nset=1\nlisten_port=3\n\n";
    let mut out = Vec::new();
    let mut seen = Vec::new();
    serve(&mut io::Cursor::new(input), &mut out, &mut |req| {
        seen.push(req);
        Response::Ok
    })
    .unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], Request::Get);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "errno=-22\n\nerrno=0\n\nerrno=0\n\n"
    );
}

#[test]
fn fatal_errors_end_the_connection() {
    let input = format!("get=1\n\nset=1\n{}\n\nget=1\n\n", "x".repeat(5000));
    let mut out = Vec::new();
    let mut n = 0;
    serve(&mut io::Cursor::new(input), &mut out, &mut |_| {
        n += 1;
        Response::Error(Errno::EIO)
    })
    .unwrap();
    assert_eq!(n, 1);
    // get errors are positive (wg's get parser rejects a sign).
    assert_eq!(String::from_utf8(out).unwrap(), "errno=5\n\nerrno=-71\n\n");
}

fn sample_snapshot() -> DeviceSnapshot {
    let sk =
        PrivateKey::from_hex("e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a")
            .unwrap();
    let mut snap = DeviceSnapshot::new(Some(sk), 12912, 0);
    let mut p1 = PeerSnapshot::new(pk(
        "b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33",
    ));
    p1.preshared_key = Some(
        PresharedKey::from_hex("188515093e952f5f22e865cef3012e72f8b5f0b598ac0309d5dacce3b70fcf52")
            .unwrap(),
    );
    p1.endpoint = Some("[abcd:23::33%2]:51820".parse().unwrap());
    p1.allowed_ips = vec!["192.168.4.4/32".parse().unwrap()];
    p1.last_handshake = Some(UNIX_EPOCH + Duration::new(1_700_000_000, 5));
    p1.rx_bytes = 2224;
    p1.tx_bytes = 38333;
    p1.extra = vec![("paths_up".into(), 2), ("reordered".into(), 17)];
    let mut p2 = PeerSnapshot::new(pk(
        "58402e695ba1772b1cc9309755f043251ea77fdcf10fbe63989ceb7e19321376",
    ));
    p2.endpoint = Some("182.122.22.19:3233".parse().unwrap());
    p2.persistent_keepalive_interval = 111;
    p2.allowed_ips = vec![
        "192.168.4.6/32".parse().unwrap(),
        "fd00::/64".parse().unwrap(),
    ];
    snap.peers = vec![p1, p2];
    snap.extra = vec![("batches".into(), 99)];
    snap
}

#[test]
fn get_reply_exact() {
    let expected = "\
private_key=e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a
listen_port=12912
public_key=b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33
preshared_key=188515093e952f5f22e865cef3012e72f8b5f0b598ac0309d5dacce3b70fcf52
protocol_version=1
endpoint=[abcd:23::33%2]:51820
last_handshake_time_sec=1700000000
last_handshake_time_nsec=5
tx_bytes=38333
rx_bytes=2224
persistent_keepalive_interval=0
allowed_ip=192.168.4.4/32
public_key=58402e695ba1772b1cc9309755f043251ea77fdcf10fbe63989ceb7e19321376
preshared_key=0000000000000000000000000000000000000000000000000000000000000000
protocol_version=1
endpoint=182.122.22.19:3233
last_handshake_time_sec=0
last_handshake_time_nsec=0
tx_bytes=0
rx_bytes=0
persistent_keepalive_interval=111
allowed_ip=192.168.4.6/32
allowed_ip=fd00::/64
errno=0

";
    let mut snap = sample_snapshot();
    assert_eq!(*format_get(&snap), expected);
    snap.fwmark = 7;
    assert!(format_get(&snap).contains("listen_port=12912\nfwmark=7\npublic_key="));
    // braid counters stay out of the stock reply.
    assert!(!format_get(&snap).contains("reordered"));
}

#[test]
fn get_reply_round_trips_through_set_parser() {
    // The device part of a get reply is valid set syntax; feeding the
    // keys a set accepts back in must reproduce the snapshot.
    let snap = sample_snapshot();
    let settable: String = format_get(&snap)
        .lines()
        .filter(|l| {
            !l.starts_with("last_handshake")
                && !l.starts_with("tx_bytes")
                && !l.starts_with("rx_bytes")
                && !l.starts_with("errno")
                && !l.is_empty()
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let Request::Set(s) = parse_request(&format!("set=1\n{settable}\n")).unwrap() else {
        panic!()
    };
    assert_eq!(s.private_key.unwrap(), snap.private_key);
    assert_eq!(s.listen_port, Some(snap.listen_port));
    for (u, p) in s.peers.iter().zip(&snap.peers) {
        assert_eq!(u.public_key, p.public_key);
        assert_eq!(u.preshared_key.clone().unwrap(), p.preshared_key);
        assert_eq!(u.endpoint, p.endpoint);
        assert_eq!(u.allowed_ips, p.allowed_ips);
        assert_eq!(
            u.persistent_keepalive_interval,
            Some(p.persistent_keepalive_interval)
        );
        assert_eq!(u.protocol_version, Some(1));
    }
}

#[test]
fn braid_reply_has_no_secrets_and_round_trips() {
    let snap = sample_snapshot();
    let reply = format_braid(&snap);
    assert!(reply.starts_with("json={"));
    assert!(reply.ends_with("}\nerrno=0\n\n"));
    assert_eq!(reply.lines().count(), 3);
    let sk = snap.private_key.as_ref().unwrap();
    let psk = snap.peers[0].preshared_key.as_ref().unwrap();
    for secret in [sk.to_hex(), sk.to_base64(), psk.to_hex(), psk.to_base64()] {
        assert!(!reply.contains(&secret[..20]));
    }
    let json = reply.lines().next().unwrap().strip_prefix("json=").unwrap();
    let back = snapshot_from_json(json).unwrap();
    assert_eq!(back.private_key, None);
    assert_eq!(back.public_key, snap.public_key);
    assert_eq!(back.extra, snap.extra);
    assert_eq!(back.peers.len(), 2);
    assert_eq!(back.peers[0].extra, snap.peers[0].extra);
    assert_eq!(back.peers[0].last_handshake, snap.peers[0].last_handshake);
    assert_eq!(back.peers[0].endpoint, snap.peers[0].endpoint);
    assert!(back.peers[0].preshared_key.is_some());
    assert!(back.peers[1].preshared_key.is_none());
    assert_eq!(back.peers[1].last_handshake, None);
    assert_eq!(back.peers[1].allowed_ips, snap.peers[1].allowed_ips);
}

#[test]
fn numbers_out_of_range_name_their_key_and_apply_nothing() {
    let key = "11".repeat(32);
    for (line, name, max) in [
        ("listen_port=99999", "listen_port", "65535"),
        ("listen_port=65536", "listen_port", "65535"),
        ("fwmark=4294967296", "fwmark", "4294967295"),
        ("fwmark=18446744073709551616", "fwmark", "4294967295"),
        ("fwmark=99999999999999999999999", "fwmark", "4294967295"),
        (
            "persistent_keepalive_interval=4294967296",
            "persistent_keepalive_interval",
            "65535",
        ),
        (
            "persistent_keepalive_interval=65536",
            "persistent_keepalive_interval",
            "65535",
        ),
        (
            "protocol_version=4294967297",
            "protocol_version",
            "4294967295",
        ),
    ] {
        let peer = !line.starts_with("listen_port") && !line.starts_with("fwmark");
        let text = if peer {
            format!("set=1\npublic_key={key}\n{line}\n\n")
        } else {
            format!("set=1\n{line}\n\n")
        };
        let e = parse_request(&text).unwrap_err();
        assert_eq!((e.errno, e.fatal), (Errno::EINVAL, false), "{line}");
        assert!(
            e.message.contains(&format!("invalid {name}:")) && e.message.contains(max),
            "{line}: {}",
            e.message
        );
    }
    // The largest values that fit are taken as they are.
    let text = format!(
        "set=1\nlisten_port=65535\nfwmark=4294967295\npublic_key={key}\npersistent_keepalive_interval=65535\n\n"
    );
    let Request::Set(s) = parse_request(&text).unwrap() else {
        panic!("not a set")
    };
    assert_eq!(s.listen_port, Some(u16::MAX));
    assert_eq!(s.fwmark, Some(u32::MAX));
    assert_eq!(s.peers[0].persistent_keepalive_interval, Some(u16::MAX));

    // Served: the handler never sees the bad set (nothing is applied,
    // not even the valid line before the bad one), and the next
    // request is answered as usual.
    let input = "set=1\nlisten_port=1\nlisten_port=99999\n\nget=1\n\n";
    let mut out = Vec::new();
    let mut seen = Vec::new();
    serve(&mut io::Cursor::new(input), &mut out, &mut |req| {
        seen.push(req.operation());
        Response::Get(DeviceSnapshot::default())
    })
    .unwrap();
    assert_eq!(seen, [Operation::Get]);
    let out = String::from_utf8(out).unwrap();
    assert!(out.starts_with("errno=-22\n\nlisten_port=0\n"), "{out:?}");
}

#[test]
fn errno_extremes_neither_overflow_nor_truncate() {
    assert_eq!(
        format_errno(Some(Operation::Set), Errno(i32::MIN)),
        "errno=-2147483648\n\n"
    );
    assert_eq!(
        format_errno(Some(Operation::Get), Errno(i32::MIN)),
        "errno=2147483648\n\n"
    );
    assert_eq!(
        format_errno(Some(Operation::Set), Errno(-22)),
        "errno=-22\n\n"
    );
    // 4294967297 truncated to i32 would be 1 (EPERM).
    for reply in ["errno=-4294967297\n\n", "errno=4294967297\n\n"] {
        let e = parse_braid_reply(reply).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{reply}");
        assert_eq!(e.raw_os_error(), None);
    }
    let e = parse_braid_reply("errno=-98\n\n").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE));
    let e = parse_braid_reply(&format!("errno={}\n\n", i64::MIN)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
}

#[test]
fn handshake_times_out_of_range_are_an_error_not_a_panic() {
    let json_with = |sec: serde_json::Value, nsec: serde_json::Value| {
        let mut v: serde_json::Value =
            serde_json::from_str(&snapshot_to_json(&sample_snapshot())).unwrap();
        v["peers"][0]["last_handshake_time_sec"] = sec;
        v["peers"][0]["last_handshake_time_nsec"] = nsec;
        v.to_string()
    };
    let back = snapshot_from_json(&json_with(5.into(), 7.into())).unwrap();
    assert_eq!(
        back.peers[0].last_handshake,
        Some(UNIX_EPOCH + Duration::new(5, 7))
    );
    let back = snapshot_from_json(&json_with(0.into(), 0.into())).unwrap();
    assert_eq!(back.peers[0].last_handshake, None);
    for (sec, nsec) in [
        (5u64, 1_000_000_000u32),
        (u64::MAX, 999_999_999),
        (u64::MAX, u32::MAX),
        (i64::MAX as u64 + 1, 0),
    ] {
        let e = snapshot_from_json(&json_with(sec.into(), nsec.into()))
            .expect_err(&format!("{sec}.{nsec}"));
        assert!(e.to_string().contains("out of range"), "{e}");
        let reply = format!("json={}\nerrno=0\n\n", json_with(sec.into(), nsec.into()));
        assert_eq!(
            parse_braid_reply(&reply).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}

#[test]
fn unix_socket_round_trip() {
    let dir = std::env::temp_dir().join(format!("braid-uapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.sock");
    let _ = std::fs::remove_file(&path);
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        for _ in 0..3 {
            let (stream, _) = listener.accept().unwrap();
            serve_connection(stream, &mut |req| match req {
                Request::Get | Request::GetMore(_) => Response::Get(sample_snapshot()),
                Request::GetBraid => Response::Braid(sample_snapshot()),
                Request::Set(_) => Response::Error(Errno::EADDRINUSE),
                Request::SetBraid(c) => Response::Synced(Ok(vec![c.source])),
            })
            .unwrap();
        }
    });
    let reply = query(&path, "get=1\n\n").unwrap();
    assert_eq!(reply, *format_get(&sample_snapshot()));
    assert_eq!(reply_errno(&reply), Some(0));
    let reply = query(&path, "set=1\nlisten_port=1\n\n").unwrap();
    assert_eq!(reply, "errno=-98\n\n");
    assert_eq!(reply_errno(&reply), Some(-98));
    let snap = query_braid(&path).unwrap();
    assert_eq!(snap.peers.len(), 2);
    server.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

fn drive(bytes: &[u8]) {
    let mut c = io::Cursor::new(bytes);
    loop {
        match read_request(&mut c) {
            Ok(None) => break,
            Ok(Some(_)) => {}
            Err(e) if e.fatal => break,
            Err(_) => {}
        }
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        drive(&bytes);
    }

    #[test]
    fn random_lines_never_panic(
        lines in proptest::collection::vec(
            prop_oneof![
                Just("set=1".to_string()),
                Just("get=1".to_string()),
                Just(String::new()),
                Just(format!("public_key={}", "ab".repeat(32))),
                "[a-z_]{1,12}=[ -~]{0,70}",
                "(listen_port|fwmark|persistent_keepalive_interval|endpoint|allowed_ip|preshared_key|private_key)=[0-9a-f:./\\[\\]%]{0,66}",
            ],
            0..24,
        )
    ) {
        let mut text = lines.join("\n");
        text.push('\n');
        drive(text.as_bytes());
    }
}

/// A `get=1` answered in parts: `serve` asks for each next part and writes
/// them in order as one reply; the next request is served after it.
#[test]
fn a_get_in_parts_streams_as_one_reply() {
    let part = |text: &str, more: Option<usize>| Response::GetPart {
        text: Zeroizing::new(text.to_string()),
        more: more.map(GetCursor),
    };
    let mut asked = Vec::new();
    let mut out = Vec::new();
    serve(
        &mut io::Cursor::new("get=1\n\nget=1\n\n"),
        &mut out,
        &mut |req| {
            asked.push(req.clone());
            match req {
                Request::Get => part("listen_port=1\n", Some(10)),
                Request::GetMore(GetCursor(10)) => part("public_key=a\n", Some(20)),
                Request::GetMore(GetCursor(20)) => part("public_key=b\nerrno=0\n\n", None),
                other => panic!("{other:?}"),
            }
        },
    )
    .unwrap();
    let one = "listen_port=1\npublic_key=a\npublic_key=b\nerrno=0\n\n";
    assert_eq!(String::from_utf8(out).unwrap(), format!("{one}{one}"));
    assert_eq!(
        asked,
        [
            Request::Get,
            Request::GetMore(GetCursor(10)),
            Request::GetMore(GetCursor(20)),
            Request::Get,
            Request::GetMore(GetCursor(10)),
            Request::GetMore(GetCursor(20)),
        ]
    );
}
