use super::*;

// RFC 7748 Alice/Bob private keys, base64.
const SK: &str = "dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LCo=";
const SK2: &str = "XasIfmJKikt54X+Lg4AO5m87sSkmGLb9HC+LJ/+I4Os=";
const PSK: &str = "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0czA=";

fn pk(sk: &str) -> String {
    PrivateKey::from_base64(sk)
        .unwrap()
        .public_key()
        .to_string()
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, "wg0.conf")
}

#[test]
fn full_config() {
    let peer = pk(SK2);
    let text = format!(
        "# a comment\n\
         [Interface]\n\
         PrivateKey = {SK}\n\
         Address = 10.0.0.1/24, fd00::1/64 # two\n\
         Address = 10.0.1.1\n\
         ListenPort = 51820\n\
         MTU = 1420\n\
         Table = main\n\
         FwMark = 0x1f\n\
         DNS = 1.1.1.1, example.internal\n\
         PostUp = iptables -A FORWARD -i %i -j ACCEPT\n\
         PostUp = echo up\n\
         PreDown = echo down\n\
         SaveConfig = true\n\
         \n\
         [Peer]\n\
         PublicKey = {peer}\n\
         PresharedKey = {PSK}\n\
         AllowedIPs = 0.0.0.0/0, ::/0\n\
         Endpoint = vpn.example.com:51820\n\
         PersistentKeepalive = 25\n"
    );
    let c = parse(&text).unwrap();
    let i = &c.interface;
    assert_eq!(i.private_key, PrivateKey::from_base64(SK).unwrap());
    let addrs: Vec<String> = i.addresses.iter().map(|a| a.to_string()).collect();
    assert_eq!(addrs, ["10.0.0.1/24", "fd00::1/64", "10.0.1.1/32"]);
    assert_eq!(i.listen_port, Some(51820));
    assert_eq!(i.mtu, Some(1420));
    assert_eq!(i.table, Table::Id(254));
    assert_eq!(i.fwmark, Some(0x1f));
    assert_eq!(i.dns, ["1.1.1.1", "example.internal"]);
    assert_eq!(
        i.post_up,
        ["iptables -A FORWARD -i %i -j ACCEPT", "echo up"]
    );
    assert_eq!(i.pre_down, ["echo down"]);
    assert!(i.pre_up.is_empty() && i.post_down.is_empty());
    assert!(i.save_config);
    assert_eq!(c.peers.len(), 1);
    let p = &c.peers[0];
    assert_eq!(p.public_key.to_string(), peer);
    assert_eq!(
        p.preshared_key,
        Some(PresharedKey::from_base64(PSK).unwrap())
    );
    assert_eq!(p.allowed_ips.len(), 2);
    assert_eq!(
        p.endpoint,
        Some(Endpoint {
            host: "vpn.example.com".into(),
            port: 51820
        })
    );
    assert_eq!(p.persistent_keepalive, Some(25));
}

type GoodCase = (&'static str, fn(&Config) -> bool);

#[test]
fn good_configs() {
    let peer = pk(SK2);
    let cases: &[GoodCase] = &[
        ("[Interface]\nPrivateKey={SK}", |c| {
            c.peers.is_empty()
                && c.interface.table == Table::Auto
                && c.interface.listen_port.is_none()
                && !c.interface.save_config
                && c.interface.fail_closed
        }),
        ("[Interface]\nPrivateKey={SK}\nFailClosed = False", |c| !c.interface.fail_closed),
        ("[Interface]\nPrivateKey={SK}\nfailclosed=true", |c| c.interface.fail_closed),
        // Case-insensitive sections, keys and keywords.
        ("[INTERFACE]\nprivatekey={SK}\nLISTENPORT=1\ntable=OFF\n[peer]\npublickey={PEER}", |c| {
            c.interface.listen_port == Some(1) && c.interface.table == Table::Off && c.peers.len() == 1
        }),
        ("[Interface]\nPrivateKey={SK}\nTable=1234\nFwMark=off", |c| {
            c.interface.table == Table::Id(1234) && c.interface.fwmark.is_none()
        }),
        ("[Interface]\nPrivateKey={SK}\nTable=local\nFwMark=51820", |c| {
            c.interface.table == Table::Id(255) && c.interface.fwmark == Some(51820)
        }),
        ("  [Interface]   # hi\n\tPrivateKey\t=\t{SK}   # trailing\n\n\n", |c| c.peers.is_empty()),
        ("[Interface]\nPrivateKey={SK}\nCipher = AES256GCM\n[Peer]\nPublicKey={PEER}\nCipher = chacha20poly1305", |c| {
            c.interface.cipher == CipherPolicy::Aes256Gcm
                && c.peers[0].cipher == Some(CipherPolicy::ChaCha20Poly1305)
        }),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}", |c| {
            c.interface.cipher == CipherPolicy::Auto && c.peers[0].cipher.is_none()
        }),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nPath = line1 bind=veth1 endpoint=198.18.1.1:51820\nPath = line2 bind=198.18.2.2 endpoint=198.18.2.1:51820\nPath = line3 endpoint=[2001:db8::1]:1\nMode = Failover\nReorderHold = 333ms\nReorderCapacity = 2048", |c| {
            let p = &c.peers[0];
            p.paths.len() == 3
                && p.paths[0].bind == Some(Bind::Interface("veth1".into()))
                && p.paths[1].bind == Some(Bind::Address("198.18.2.2".parse().unwrap()))
                && p.paths[2].bind.is_none()
                && p.paths[1].endpoint.to_string() == "198.18.2.1:51820"
                && p.mode == Mode::Failover
                && p.reorder_hold == Some(Duration::from_millis(333))
                && p.reorder_capacity == Some(2048)
        }),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nTransport = TCP\nPath = a endpoint=198.18.1.1:1\nPath = b endpoint=198.18.2.1:1 transport=udp\nPath = c transport=tcp endpoint=198.18.3.1:1", |c| {
            let p = &c.peers[0];
            p.transport == Transport::Tcp
                && p.paths[0].transport.is_none()
                && p.path_transport(&p.paths[0]) == Transport::Tcp
                && p.path_transport(&p.paths[1]) == Transport::Udp
                && p.path_transport(&p.paths[2]) == Transport::Tcp
        }),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nPath = a endpoint=198.18.1.1:1 transport=tcp", |c| {
            let p = &c.peers[0];
            p.transport == Transport::Udp && p.path_transport(&p.paths[0]) == Transport::Tcp
        }),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nReorderHold = 0", |c| {
            c.peers[0].reorder_hold == Some(Duration::ZERO) && c.peers[0].mode == Mode::Redundant
        }),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nAllowedIPs=\nEndpoint=[2001:db8::1]:51820\nPersistentKeepalive=off", |c| {
            let p = &c.peers[0];
            p.allowed_ips.is_empty()
                && p.persistent_keepalive == Some(0)
                && p.endpoint.as_ref().unwrap().host == "2001:db8::1"
                && p.endpoint.as_ref().unwrap().to_string() == "[2001:db8::1]:51820"
        }),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nAllowedIPs=10.0.0.2/32\nAllowedIPs = 10.0.0.3/32 , 10.0.0.4/32", |c| {
            c.peers[0].allowed_ips.len() == 3
        }),
        ("[Peer]\nPublicKey={PEER}\n[Interface]\nPrivateKey={SK}", |c| c.peers.len() == 1),
        ("[Interface]\nPrivateKey={SK}", |c| c.interface.mss_fix == MssFix::Auto),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nRateLimit = 50mbit", |c| c.peers[0].rate_limit == Some(50_000_000)),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nratelimit=1.5Gbit", |c| c.peers[0].rate_limit == Some(1_500_000_000)),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}", |c| c.peers[0].rate_limit.is_none()),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}", |c| {
            c.interface.compression == CompressionPolicy::Off && c.peers[0].compression.is_none()
        }),
        ("[Interface]\nPrivateKey={SK}\nCompression = LZ4\n[Peer]\nPublicKey={PEER}\nCompression = off", |c| {
            c.interface.compression == CompressionPolicy::Lz4
                && c.peers[0].compression == Some(CompressionPolicy::Off)
        }),
        ("[Interface]\nPrivateKey={SK}", |c| {
            c.interface.metrics_listen.is_none() && c.interface.log_level.is_none()
        }),
        ("[Interface]\nPrivateKey={SK}\nMetricsListen = 127.0.0.1:9586\nLogLevel = Debug", |c| {
            c.interface.metrics_listen == Some("127.0.0.1:9586".parse().unwrap())
                && c.interface.log_level == Some(crate::log::Level::Debug)
        }),
        ("[Interface]\nPrivateKey={SK}\nmetricslisten=[2001:db8::1]:9586\nloglevel=warn", |c| {
            c.interface.metrics_listen == Some("[2001:db8::1]:9586".parse().unwrap())
                && c.interface.log_level == Some(crate::log::Level::Warn)
        }),
        ("[Interface]\nPrivateKey={SK}\nMetricsListen = off", |c| c.interface.metrics_listen.is_none()),
        ("[Interface]\nPrivateKey={SK}\nMssFix = AUTO", |c| c.interface.mss_fix == MssFix::Auto),
        ("[Interface]\nPrivateKey={SK}\nmssfix=off", |c| c.interface.mss_fix == MssFix::Off),
        ("[Interface]\nPrivateKey={SK}\nMssFix = 1000", |c| c.interface.mss_fix == MssFix::Fixed(1000)),
        ("[Interface]\nPrivateKey={SK}\nMssFix = 536", |c| c.interface.mss_fix == MssFix::Fixed(536)),
        ("[Interface]\nPrivateKey={SK}\nMssFix = 65495", |c| c.interface.mss_fix == MssFix::Fixed(65495)),
        ("[Interface]\nPrivateKey={SK}", |c| c.interface.realtime_priority.is_none()),
        ("[Interface]\nPrivateKey={SK}\nRealtimePriority = 20", |c| c.interface.realtime_priority == Some(20)),
        ("[Interface]\nPrivateKey={SK}\nrealtimepriority=99", |c| c.interface.realtime_priority == Some(99)),
        ("[Interface]\nPrivateKey={SK}\nRealtimePriority = OFF", |c| c.interface.realtime_priority.is_none()),
        ("[Interface]\nPrivateKey={SK}", |c| c.interface.queues == 1),
        ("[Interface]\nPrivateKey={SK}\nQueues = 4", |c| c.interface.queues == 4),
        ("[Interface]\nPrivateKey={SK}\nListenPort=0\nSaveConfig=false\nMTU=65535", |c| {
            c.interface.listen_port == Some(0) && c.interface.mtu == Some(65535)
        }),
    ];
    for (i, (text, check)) in cases.iter().enumerate() {
        let text = text.replace("{SK}", SK).replace("{PEER}", &peer);
        let c = parse(&text).unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert!(check(&c), "case {i}: {c:?}");
    }
}

#[test]
fn bad_configs() {
    let peer = pk(SK2);
    let own = pk(SK);
    // (text, line, key, fragment of the message)
    let cases: &[(&str, Option<usize>, Option<&str>, &str)] = &[
        ("", None, None, "missing [Interface]"),
        ("[Interface]\nListenPort=1", Some(1), Some("PrivateKey"), "required"),
        ("PrivateKey={SK}", Some(1), Some("PrivateKey"), "outside of any section"),
        ("[Interface]\nPrivateKey={SK}\n[Interface]", Some(3), None, "duplicate [Interface]"),
        ("[Interface]\nPrivateKey={SK}\n[Peers]", Some(3), None, "unknown section"),
        ("[Interface]\nPrivateKey={SK}\nthis line is junk", Some(3), None, "expected 'Key = Value'"),
        ("[Interface]\nPrivateKey={SK}\n = 3", Some(3), None, "missing key"),
        ("[Interface]\nPrivateKey={SK}\nListenPort=70000", Some(3), Some("ListenPort"), "invalid port \"70000\" (expected 0-65535)"),
        ("[Interface]\nPrivateKey={SK}\nListenPort=+1", Some(3), Some("ListenPort"), "invalid port"),
        ("[Interface]\nPrivateKey={SK}\nListenPort=1\nlistenport=2", Some(4), Some("ListenPort"), "duplicate key (already set on line 3)"),
        ("[Interface]\nPrivateKey={SK}\nPrivateKey={SK}", Some(3), Some("PrivateKey"), "duplicate"),
        ("[Interface]\nPrivateKey={SK}\nMTU=20", Some(3), Some("MTU"), "expected 68-65535"),
        ("[Interface]\nPrivateKey={SK}\nTable=sideways", Some(3), Some("Table"), "invalid table"),
        ("[Interface]\nPrivateKey={SK}\nFwMark=0x", Some(3), Some("FwMark"), "invalid fwmark"),
        ("[Interface]\nPrivateKey={SK}\nFwMark=0x100000000", Some(3), Some("FwMark"), "invalid fwmark"),
        ("[Interface]\nPrivateKey={SK}\nSaveConfig=yes", Some(3), Some("SaveConfig"), "true or false"),
        ("[Interface]\nPrivateKey={SK}\nFailClosed=off", Some(3), Some("FailClosed"), "true or false"),
        ("[Interface]\nPrivateKey={SK}\nAddress=10.0.0.1/33", Some(3), Some("Address"), "0-32"),
        ("[Interface]\nPrivateKey={SK}\nAddress=10.0.0.1,,10.0.0.2", Some(3), Some("Address"), "empty item"),
        ("[Interface]\nPrivateKey={SK}\nListenPrt=1", Some(3), Some("ListenPrt"), "unknown key"),
        ("[Interface]\nPrivateKey={SK}\nPublicKey={PEER}", Some(3), Some("PublicKey"), "unknown key in [Interface]"),
        ("[Interface]\nPrivateKey=abc", Some(2), Some("PrivateKey"), "not a valid base64-encoded 32-byte key"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nAllowedIPs=10.0.0.0/8", Some(3), Some("PublicKey"), "required"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nAddress=10.0.0.1", Some(5), Some("Address"), "unknown key in [Peer]"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\n[Peer]\nPublicKey={PEER}", Some(6), Some("PublicKey"), "duplicate peer (same public key as the peer on line 4)"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={OWN}", Some(4), Some("PublicKey"), "own public key"),
        // braid's multipath keys.
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nPath = l1 bind=eth0", Some(5), Some("Path"), "has no endpoint"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nPath = l1 via=eth0 endpoint=198.18.0.1:1", Some(5), Some("Path"), "unknown path option \"via\""),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nPath = l1 endpoint=198.18.0.1", Some(5), Some("Path"), "endpoint"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nPath = l1 endpoint=198.18.0.1:1\nPath = l1 endpoint=198.18.0.2:1", Some(6), Some("Path"), "exists already"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nPath = bad/name endpoint=198.18.0.1:1", Some(5), Some("Path"), "invalid path name"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nTransport = quic", Some(5), Some("Transport"), "unknown transport \"quic\" (expected udp or tcp)"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nTransport = tcp\nTransport = udp", Some(6), Some("Transport"), "duplicate key (already set on line 5)"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nPath = l1 endpoint=198.18.0.1:1 transport=sctp", Some(5), Some("Path"), "unknown transport \"sctp\""),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nPath = l1 endpoint=198.18.0.1:1 transport=tcp transport=tcp", Some(5), Some("Path"), "transport= given twice"),
        ("[Interface]\nPrivateKey={SK}\nTransport = tcp", Some(3), Some("Transport"), "unknown key in [Interface]"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nMode = striped", Some(5), Some("Mode"), "unknown mode \"striped\""),
        ("[Interface]\nPrivateKey={SK}\nCipher = des\n", Some(3), Some("Cipher"), "unknown cipher \"des\""),
        ("[Interface]\nPrivateKey={SK}\nMssFix = 535", Some(3), Some("MssFix"), "invalid MSS \"535\" (expected auto, off or 536-65495)"),
        ("[Interface]\nPrivateKey={SK}\nMssFix = 65496", Some(3), Some("MssFix"), "invalid MSS \"65496\""),
        ("[Interface]\nPrivateKey={SK}\nMssFix = on", Some(3), Some("MssFix"), "expected auto, off or 536-65495"),
        ("[Interface]\nPrivateKey={SK}\nMssFix = -1", Some(3), Some("MssFix"), "invalid MSS"),
        ("[Interface]\nPrivateKey={SK}\nMssFix = off\nMssFix = 1000", Some(4), Some("MssFix"), "duplicate key (already set on line 3)"),
        ("[Interface]\nPrivateKey={SK}\nRealtimePriority = 0", Some(3), Some("RealtimePriority"), "invalid priority \"0\" (expected off or 1-99)"),
        ("[Interface]\nPrivateKey={SK}\nRealtimePriority = 100", Some(3), Some("RealtimePriority"), "invalid priority \"100\""),
        ("[Interface]\nPrivateKey={SK}\nRealtimePriority = rr", Some(3), Some("RealtimePriority"), "expected off or 1-99"),
        ("[Interface]\nPrivateKey={SK}\nQueues = 0", Some(3), Some("Queues"), "invalid queue count \"0\" (expected 1-64)"),
        ("[Interface]\nPrivateKey={SK}\nQueues = 65", Some(3), Some("Queues"), "invalid queue count \"65\""),
        ("[Interface]\nPrivateKey={SK}\nQueues = many", Some(3), Some("Queues"), "expected 1-64"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nRealtimePriority = 20", Some(5), Some("RealtimePriority"), "unknown key in [Peer]"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nMssFix = 1000", Some(5), Some("MssFix"), "unknown key in [Peer]"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nCipher = aes\n", Some(5), Some("Cipher"), "unknown cipher \"aes\""),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nReorderHold = 5", Some(5), Some("ReorderHold"), "needs a unit"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nReorderHold = 3 weeks", Some(5), Some("ReorderHold"), "unknown unit"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nReorderHold = 60s", Some(5), Some("ReorderHold"), "above the maximum"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nReorderCapacity = 0", Some(5), Some("ReorderCapacity"), "expected 1-65536"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nRateLimit = 50", Some(5), Some("RateLimit"), "needs a unit"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nRateLimit = 50mbps", Some(5), Some("RateLimit"), "bytes per second"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nRateLimit = 0mbit", Some(5), Some("RateLimit"), "outside"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nRateLimit = 1mbit\nRateLimit = 2mbit", Some(6), Some("RateLimit"), "duplicate key (already set on line 5)"),
        ("[Interface]\nPrivateKey={SK}\nRateLimit = 1mbit", Some(3), Some("RateLimit"), "unknown key in [Interface]"),
        ("[Interface]\nPrivateKey={SK}\nMetricsListen = localhost:9586", Some(3), Some("MetricsListen"), "invalid address \"localhost:9586\" (expected IP:PORT"),
        ("[Interface]\nPrivateKey={SK}\nMetricsListen = 9586", Some(3), Some("MetricsListen"), "invalid address"),
        ("[Interface]\nPrivateKey={SK}\nMetricsListen = 127.0.0.1:0", Some(3), Some("MetricsListen"), "port 0"),
        ("[Interface]\nPrivateKey={SK}\nMetricsListen = 127.0.0.1:1\nMetricsListen = 127.0.0.1:2", Some(4), Some("MetricsListen"), "duplicate key (already set on line 3)"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nMetricsListen = 127.0.0.1:1", Some(5), Some("MetricsListen"), "unknown key in [Peer]"),
        ("[Interface]\nPrivateKey={SK}\nLogLevel = chatty", Some(3), Some("LogLevel"), "unknown log level \"chatty\" (expected error, warn, info or debug)"),
        ("[Interface]\nPrivateKey={SK}\nLogLevel =", Some(3), Some("LogLevel"), "unknown log level \"\""),
        ("[Interface]\nPrivateKey={SK}\nCompression = lzo", Some(3), Some("Compression"), "unknown compression \"lzo\" (expected lz4 or off)"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nCompression = yes", Some(5), Some("Compression"), "unknown compression"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nEndpoint=2001:db8::1:51820", Some(5), Some("Endpoint"), "invalid endpoint"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nEndpoint=host", Some(5), Some("Endpoint"), "invalid endpoint"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nEndpoint=host:99999", Some(5), Some("Endpoint"), "invalid endpoint"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nEndpoint=[::1]51820", Some(5), Some("Endpoint"), "invalid endpoint"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nPersistentKeepalive=65536", Some(5), Some("PersistentKeepalive"), "0-65535"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nPresharedKey=nope", Some(5), Some("PresharedKey"), "not a valid base64"),
        ("[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={PEER}\nAllowedIPs=10.0.0.0/8,bogus", Some(5), Some("AllowedIPs"), "\"bogus\""),
    ];
    for (text, line, key, fragment) in cases {
        let text = text
            .replace("{SK}", SK)
            .replace("{PEER}", &peer)
            .replace("{OWN}", &own);
        let err = parse(&text).expect_err(&text);
        let msg = err.to_string();
        match &err {
            ConfigError::Invalid {
                source_name,
                line: l,
                key: k,
                ..
            } => {
                assert_eq!(source_name, "wg0.conf");
                assert_eq!(l, line, "{msg}");
                assert_eq!(k.as_deref(), *key, "{msg}");
            }
            other => panic!("unexpected error {other:?}"),
        }
        assert!(msg.contains(fragment), "{msg:?} lacks {fragment:?}");
        let prefix = match (line, key) {
            (Some(l), Some(k)) => format!("wg0.conf:{l}: key '{k}': "),
            (Some(l), None) => format!("wg0.conf:{l}: "),
            (None, _) => "wg0.conf: ".to_string(),
        };
        assert!(msg.starts_with(&prefix), "{msg:?} vs {prefix:?}");
    }
}

#[test]
fn low_order_peer_keys_are_refused_with_the_line() {
    // The all-zero placeholder and the point u = 1, both of small order.
    for key in [
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    ] {
        let text = format!("[Interface]\nPrivateKey = {SK}\n[Peer]\nPublicKey = {key}\n");
        let msg = parse(&text).unwrap_err().to_string();
        assert!(
            msg.starts_with("wg0.conf:4: key 'PublicKey': a low-order point"),
            "{msg}"
        );
    }
}

#[test]
fn exact_message_format() {
    let text = format!("[Interface]\nPrivateKey = {SK}\n\n\n\n\nListenPort = 70000\n");
    assert_eq!(
        parse(&text).unwrap_err().to_string(),
        "wg0.conf:7: key 'ListenPort': invalid port \"70000\" (expected 0-65535)"
    );
}

#[test]
fn secrets_never_in_messages() {
    // Almost-valid secrets: wrong length, bad padding, bad characters.
    let secrets = [
        &SK[..43],
        &PSK[..40],
        "dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LCo==",
        "dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LC!=",
    ];
    for s in secrets {
        for text in [
            format!("[Interface]\nPrivateKey = {s}\n"),
            format!(
                "[Interface]\nPrivateKey = {SK}\n[Peer]\nPublicKey = {}\nPresharedKey = {s}\n",
                pk(SK2)
            ),
        ] {
            let msg = parse(&text).unwrap_err().to_string();
            assert!(!msg.contains(&s[..20]), "{msg}");
            assert!(
                msg.contains("not a valid base64-encoded 32-byte key"),
                "{msg}"
            );
        }
    }
    // Nor in a duplicate-key message, nor in Debug output of the config.
    let msg = parse(&format!("[Interface]\nPrivateKey={SK}\nPrivateKey={SK2}"))
        .unwrap_err()
        .to_string();
    assert!(
        !msg.contains(&SK[..20]) && !msg.contains(&SK2[..20]),
        "{msg}"
    );
    let c = parse(&format!(
        "[Interface]\nPrivateKey={SK}\n[Peer]\nPublicKey={}\nPresharedKey={PSK}",
        pk(SK2)
    ))
    .unwrap();
    let dbg = format!("{c:?}");
    assert!(!dbg.contains(&SK[..20]) && !dbg.contains(&PSK[..20]));
}

#[test]
fn interface_names() {
    assert_eq!(
        Config::interface_name("/etc/wireguard/wg0.conf").unwrap(),
        "wg0"
    );
    assert_eq!(
        Config::interface_name("a_b=c+d.e-f.conf").unwrap(),
        "a_b=c+d.e-f"
    );
    assert_eq!(
        Config::interface_name("123456789012345.conf").unwrap(),
        "123456789012345"
    );
    for bad in [
        "1234567890123456.conf",
        "wg 0.conf",
        "wg*0",
        "wg:0.conf",
        "",
        "wgä.conf",
    ] {
        assert!(Config::interface_name(bad).is_err(), "{bad}");
    }
}

#[test]
fn load_from_disk() {
    let dir = std::env::temp_dir().join(format!("braid-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wgtest.conf");
    std::fs::write(&path, format!("[Interface]\nPrivateKey={SK}\nMTU=x\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let msg = Config::load(&path).unwrap_err().to_string();
    assert!(msg.starts_with("wgtest.conf:3: key 'MTU': "), "{msg}");
    std::fs::write(&path, format!("[Interface]\nPrivateKey={SK}\n")).unwrap();
    assert!(Config::load(&path).is_ok());
    let missing = Config::load(dir.join("nope.conf")).unwrap_err();
    assert!(matches!(missing, ConfigError::Io { .. }));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn private_modes_pass() {
    for mode in [0o600, 0o400, 0o700, 0o100600, 0o4600] {
        assert_eq!(
            shared_mode_problem(mode, Path::new("/x.conf")),
            None,
            "{mode:o}"
        );
    }
}

#[test]
fn shared_modes_are_refused_with_the_fix() {
    for mode in [0o640, 0o604, 0o644, 0o620, 0o602, 0o660, 0o666, 0o100644] {
        let msg = shared_mode_problem(mode, Path::new("/etc/wireguard/wg0.conf"))
            .unwrap_or_else(|| panic!("mode {mode:o} accepted"));
        assert!(msg.contains("group or others"), "{msg}");
        assert!(msg.contains("chmod 600 /etc/wireguard/wg0.conf"), "{msg}");
        assert!(msg.contains(&format!("{:04o}", mode & 0o7777)), "{msg}");
    }
}

#[test]
fn check_reads_the_file_mode() {
    let dir = std::env::temp_dir().join(format!("braid-priv-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("k.conf");
    std::fs::write(&path, "x").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = check_private_file(&path).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
    assert!(err.to_string().contains("chmod 600"), "{err}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    check_private_file(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn endpoint_resolution() {
    let e = Endpoint::parse("127.0.0.1:51820").unwrap();
    assert_eq!(e.resolve().unwrap(), "127.0.0.1:51820".parse().unwrap());
    let e = Endpoint::parse("[::1]:1").unwrap();
    assert_eq!(e.resolve().unwrap(), "[::1]:1".parse().unwrap());
    let e = Endpoint::parse("localhost:7").unwrap();
    assert_eq!(e.resolve().unwrap().port(), 7);
}

/// Found by the `config` fuzz target: a duration too long for
/// `Duration` panicked instead of being refused.
#[test]
fn overlong_duration_is_an_error_not_a_panic() {
    let digits = format!("{}100ms", "0".repeat(22) + "2" + &"0".repeat(60));
    assert!(parse_hold(&digits).unwrap_err().contains("too long"));
    assert!(parse_hold("99999999999999999999s").is_err());
    let text = format!(
        "[Interface]\nPrivateKey = {SK}\n[Peer]\nPublicKey = {}\nReorderHold = {digits}\n",
        pk(SK2)
    );
    let e = parse(&text).unwrap_err().to_string();
    assert!(e.contains("ReorderHold") && e.contains("too long"), "{e}");
}

/// `RateLimit` (moved from braid-core's shaper with the grammar): bits
/// only, within the shaper's range.
#[test]
fn rate_limit_case_table() {
    let good = [
        ("50mbit", 50_000_000),
        ("50Mbit", 50_000_000),
        ("50 mbit", 50_000_000),
        ("1.5gbit", 1_500_000_000),
        ("100kbit", 100_000),
        ("8000bit", 8_000),
        ("1000gbit", 1_000_000_000_000),
    ];
    for (s, want) in good {
        assert_eq!(parse_rate_limit(s), Ok(want), "{s}");
    }
    let bad = [
        ("50", "needs a unit"),
        ("", "not a rate"),
        ("50mbps", "bytes per second"),
        ("50kbps", "bytes per second"),
        ("50mb", "unknown unit"),
        ("fast", "not a rate"),
        ("mbit", "not a rate"),
        ("1.2.3mbit", "not a rate"),
        ("0mbit", "outside"),
        ("0", "outside"),
        ("7999bit", "outside"),
        ("1001gbit", "outside"),
        ("-5mbit", "negative"),
    ];
    for (s, want) in bad {
        let e = parse_rate_limit(s).expect_err(s);
        assert!(e.contains(want), "{s}: {e}");
    }
    for (bits, s) in [
        (50_000_000, "50mbit"),
        (1_500_000_000, "1.5gbit"),
        (12_345_000, "12.345mbit"),
    ] {
        assert_eq!(braid_core::shaper::format_rate(bits), s);
        assert_eq!(parse_rate_limit(s), Ok(bits));
    }
    let text = format!(
        "[Interface]\nPrivateKey = {SK}\n[Peer]\nPublicKey = {}\nRateLimit = 10mbps\n",
        pk(SK2)
    );
    let e = parse(&text).unwrap_err().to_string();
    assert!(
        e.contains("RateLimit") && e.contains("bytes per second"),
        "{e}"
    );
    let text = format!(
        "[Interface]\nPrivateKey = {SK}\n[Peer]\nPublicKey = {}\nReorderHold = 5\n",
        pk(SK2)
    );
    let e = parse(&text).unwrap_err().to_string();
    assert!(e.contains("ReorderHold") && e.contains("no unit"), "{e}");
}
