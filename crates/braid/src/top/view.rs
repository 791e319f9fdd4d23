//! How `braid top` draws its model: a header, per peer its paths (each
//! direction's rate with a sparkline of the last minute, RTT ± jitter,
//! loss each way, first-arrival share) and its reorder window, then the
//! daemon's recent events. Made for 80 × 24 and wider.

use super::model::{Interface, PeerView, Status};
use crate::log::{utc_timestamp, RecentEvent};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use std::time::{SystemTime, UNIX_EPOCH};

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
/// Columns of a path row besides its sparkline.
const FIXED_COLUMNS: usize = 56;
/// Most event lines shown at the bottom.
const EVENT_LINES: usize = 5;

/// Draws everything; `scroll` is the first body line shown (clamped).
pub fn draw(frame: &mut Frame, interfaces: &[Interface], now: SystemTime, scroll: &mut usize) {
    let area = frame.area();
    let width = usize::from(area.width);
    let events = event_lines(interfaces, width);
    let event_rows = if events.is_empty() {
        0
    } else {
        (events.len() + 1).min(EVENT_LINES + 1) as u16
    };
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(event_rows),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header(interfaces, now, width)), head);
    let lines = body_lines(interfaces, now, width);
    let room = usize::from(body.height);
    *scroll = (*scroll).min(lines.len().saturating_sub(room));
    let shown: Vec<Line> = lines.into_iter().skip(*scroll).take(room).collect();
    frame.render_widget(Paragraph::new(shown), body);
    if event_rows > 0 {
        let mut foot_lines = vec![Line::styled(
            "events",
            Style::default().add_modifier(Modifier::BOLD),
        )];
        let keep = usize::from(event_rows) - 1;
        let skip = events.len().saturating_sub(keep);
        foot_lines.extend(events.into_iter().skip(skip));
        frame.render_widget(Paragraph::new(foot_lines), foot);
    }
}

fn header(interfaces: &[Interface], now: SystemTime, width: usize) -> Line<'static> {
    let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
    let clock = utc_timestamp(unix_ms(now));
    let text = format!(
        " braid top {} · {} UTC · q quits, ↑↓ scroll",
        names.join(" "),
        &clock[11..19]
    );
    Line::styled(
        pad(&text, width),
        Style::default().add_modifier(Modifier::REVERSED),
    )
}

/// The scrolling part: per interface its state, per peer its lines.
pub fn body_lines(interfaces: &[Interface], now: SystemTime, width: usize) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    for iface in interfaces {
        match &iface.status {
            Status::NotRunning { since, why } => {
                let when = &utc_timestamp(unix_ms(*since))[11..19];
                out.push(Line::styled(
                    cut(
                        &format!(" {} is not running (since {when} UTC): {why}", iface.name),
                        width,
                    ),
                    Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
                ));
                out.push(Line::raw(cut(
                    " waiting for it to come back; q quits",
                    width,
                )));
                continue;
            }
            Status::Running if iface.peers.is_empty() => {
                out.push(Line::raw(format!(" {}: no peers", iface.name)));
            }
            Status::Running => {}
        }
        for peer in &iface.peers {
            peer_lines(&mut out, &iface.name, peer, now, width);
        }
    }
    out
}

fn peer_lines(
    out: &mut Vec<Line<'static>>,
    iface: &str,
    peer: &PeerView,
    now: SystemTime,
    width: usize,
) {
    let handshake = match peer.last_handshake {
        Some(t) => match now.duration_since(t) {
            Ok(d) => format!("handshake {} ago", short_duration(d.as_secs())),
            Err(_) => "handshake now".into(),
        },
        None => "no handshake".into(),
    };
    let mut title = format!("{iface} peer {}", short_key(&peer.key));
    for part in [&peer.mode, &peer.cipher] {
        if !part.is_empty() {
            title.push_str(" · ");
            title.push_str(part);
        }
    }
    title = format!(
        "{title} · {handshake} · ↓{} ↑{}",
        peer.rx_bps.map_or("-".into(), rate),
        peer.tx_bps.map_or("-".into(), rate)
    );
    out.push(Line::styled(
        cut(&title, width),
        Style::default()
            .fg(Color::Yellow)
            .add_modifier(Modifier::BOLD),
    ));
    let spark = width.saturating_sub(FIXED_COLUMNS).max(4);
    out.push(Line::styled(
        cut(
            &format!(
                " {:<9}{:<5}{:>8} {:<spark$} {:>13} {:>10} {:>5}",
                "path", "state", "now", "last minute", "rtt ± jitter", "loss ↑/↓", "first"
            ),
            width,
        ),
        Style::default().add_modifier(Modifier::DIM),
    ));
    for p in &peer.paths {
        let state_style = match p.state.as_str() {
            "up" => Style::default().fg(Color::Green),
            "down" => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
            _ => Style::default(),
        };
        let rtt = match (p.rtt_us, p.jitter_us) {
            (Some(r), Some(j)) => format!("{}±{} ms", ms(r), ms(j)),
            _ => "-".into(),
        };
        let loss = if p.state == "unknown" {
            "-".into()
        } else {
            format!("{:.1}/{:.1}%", p.loss_out * 100.0, p.loss_in * 100.0)
        };
        let first = p
            .first_share
            .map_or("-".into(), |s| format!("{:.0}%", s * 100.0));
        out.push(Line::from(vec![
            Span::raw(format!(" {:<9}", cut(&p.name, 8))),
            Span::styled(format!("{:<5}", p.state), state_style),
            Span::raw(format!(
                "{:>8} ",
                format!("↓{}", p.rx_history.last().map_or("-".into(), |r| rate(*r)))
            )),
            Span::styled(
                sparkline(&p.rx_history, spark),
                Style::default().fg(Color::Cyan),
            ),
            Span::raw(format!(" {rtt:>13} {loss:>10} {first:>5}")),
        ]));
        let mut extra = Vec::new();
        if let Some(m) = p.mtu {
            extra.push(format!("mtu {m}"));
        }
        if let Some(e) = p.estimate_bps {
            extra.push(format!("est {}", rate(e as f64)));
        }
        out.push(Line::from(vec![
            Span::raw(format!(" {:<14}", "")),
            Span::raw(format!(
                "{:>8} ",
                format!("↑{}", p.tx_history.last().map_or("-".into(), |r| rate(*r)))
            )),
            Span::styled(
                sparkline(&p.tx_history, spark),
                Style::default().fg(Color::Magenta),
            ),
            Span::raw(format!(" {}", extra.join(" · "))),
        ]));
    }
    let r = &peer.reorder;
    out.push(Line::raw(cut(
        &format!(
            " reorder hold {} ms, held {} │ accepted {} buffered {} dup {} late {} lost {}",
            ms(r.hold_us),
            r.held,
            count(r.accepted),
            count(r.buffered),
            count(r.duplicated),
            count(r.under_window),
            count(r.lost)
        ),
        width,
    )));
}

fn event_lines(interfaces: &[Interface], width: usize) -> Vec<Line<'static>> {
    let mut all: Vec<(&str, &RecentEvent)> = interfaces
        .iter()
        .flat_map(|i| i.events.iter().map(move |e| (i.name.as_str(), e)))
        .collect();
    all.sort_by_key(|(_, e)| e.unix_ms);
    let keys: Vec<&str> = interfaces
        .iter()
        .flat_map(|i| i.peers.iter().map(|p| p.key.as_str()))
        .collect();
    all.into_iter()
        .map(|(name, e)| {
            let mut text = e.text.clone();
            for k in &keys {
                text = text.replace(k, &short_key(k));
            }
            let style = match e.level.as_str() {
                "error" => Style::default().fg(Color::Red),
                "warn" => Style::default().fg(Color::Yellow),
                _ => Style::default(),
            };
            let prefix = if interfaces.len() > 1 {
                format!("{name} ")
            } else {
                String::new()
            };
            Line::styled(
                cut(
                    &format!(" {} {prefix}{text}", &utc_timestamp(e.unix_ms)[11..19]),
                    width,
                ),
                style,
            )
        })
        .collect()
}

/// `values` (oldest first) as bars over `width` cells, each cell the
/// largest of the samples it covers, scaled to the largest shown.
pub fn sparkline(values: &[f64], width: usize) -> String {
    if width == 0 {
        return String::new();
    }
    let cells: Vec<f64> = if values.len() <= width {
        values.to_vec()
    } else {
        (0..width)
            .map(|c| {
                let from = c * values.len() / width;
                let to = ((c + 1) * values.len() / width).max(from + 1);
                values[from..to].iter().copied().fold(0.0, f64::max)
            })
            .collect()
    };
    let top = cells.iter().copied().fold(0.0, f64::max);
    let mut s: String = cells
        .iter()
        .map(|v| {
            if top <= 0.0 || *v <= 0.0 {
                ' '
            } else {
                let i = ((v / top) * (BARS.len() - 1) as f64).round() as usize;
                BARS[i.min(BARS.len() - 1)]
            }
        })
        .collect();
    // Newest at the right edge: pad on the left while the minute fills.
    let len = s.chars().count();
    if len < width {
        s = format!("{}{s}", " ".repeat(width - len));
    }
    s
}

/// Bits per second, five characters or so: `93.1M`, `850k`, `1.20G`.
pub fn rate(bps: f64) -> String {
    match bps {
        b if b >= 1e9 => format!("{:.2}G", b / 1e9),
        b if b >= 1e6 => format!("{:.1}M", b / 1e6),
        b if b >= 1e3 => format!("{:.0}k", b / 1e3),
        b => format!("{b:.0}"),
    }
}

fn count(n: u64) -> String {
    match n {
        n if n >= 10_000_000 => format!("{:.0}M", n as f64 / 1e6),
        n if n >= 10_000 => format!("{:.0}k", n as f64 / 1e3),
        n => n.to_string(),
    }
}

fn ms(us: u64) -> String {
    let v = us as f64 / 1000.0;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn short_duration(s: u64) -> String {
    match s {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s => format!("{} h", s / 3600),
    }
}

/// The first 8 characters of a base64 key and its last: enough to tell
/// peers apart on 80 columns.
pub fn short_key(key: &str) -> String {
    if key.len() > 12 {
        format!("{}…{}", &key[..8], &key[key.len() - 1..])
    } else {
        key.to_string()
    }
}

fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn pad(s: &str, width: usize) -> String {
    let s = cut(s, width);
    let n = s.chars().count();
    format!("{s}{}", " ".repeat(width.saturating_sub(n)))
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What a frame of `width` × `height` shows, as text (for tests).
pub fn render_text(interfaces: &[Interface], now: SystemTime, width: u16, height: u16) -> String {
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
    let mut scroll = 0;
    terminal
        .draw(|f| draw(f, interfaces, now, &mut scroll))
        .expect("draw");
    let buffer = terminal.backend().buffer();
    let area: Rect = buffer.area;
    let mut text = String::new();
    for y in 0..area.height {
        for x in 0..area.width {
            text.push_str(buffer[(x, y)].symbol());
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::PrivateKey;
    use crate::uapi::{DeviceSnapshot, PathSnapshot, PeerSnapshot};
    use std::time::{Duration, Instant};

    fn snapshot(step: u64) -> DeviceSnapshot {
        let mut s = DeviceSnapshot::new(None, 51820, 0);
        let mut p = PeerSnapshot::new(PrivateKey::from_bytes([2; 32]).public_key());
        p.mode = "redundant".into();
        p.cipher = "aes256gcm".into();
        p.last_handshake = Some(UNIX_EPOCH + Duration::from_secs(1_000));
        p.rx_bytes = step * 2_500_000;
        p.extra = vec![("accepted".into(), 1234), ("lost".into(), 2)];
        let path = |name: &str, state: &str, rx: u64| PathSnapshot {
            name: name.into(),
            remote: "198.18.1.1:51820".parse().unwrap(),
            state: state.into(),
            rx_packets: 0,
            rx_bytes: rx,
            tx_packets: 0,
            tx_bytes: step * 10_000,
            first_arrivals: step * 10,
            resent: 0,
            rtt_us: Some(3_100),
            jitter_us: Some(400),
            loss: 0.0,
            loss_out: 0.02,
            loss_in: 0.0,
            pmtu: None,
            estimate: None,
        };
        p.paths = vec![
            path("fibre", "up", step * 1_250_000),
            path("lte", "down", step * 125_000),
        ];
        s.peers = vec![p];
        s.events = vec![RecentEvent {
            unix_ms: 1_012_000,
            level: "warn".into(),
            text: format!(
                "peer {}: path lte to 198.18.2.1:51820 down (was up)",
                PrivateKey::from_bytes([2; 32]).public_key().to_base64()
            ),
        }];
        s
    }

    #[test]
    fn an_80_by_24_frame_shows_paths_rates_and_events() {
        let mut iface = Interface::new("wg0");
        let t0 = Instant::now();
        for step in 0..5 {
            iface.update(
                t0 + Duration::from_secs(step),
                UNIX_EPOCH,
                Ok(snapshot(step)),
            );
        }
        let now = UNIX_EPOCH + Duration::from_secs(1_012);
        let text = render_text(&[iface], now, 80, 24);
        println!("{text}");
        for want in [
            "braid top wg0 · 00:16:52 UTC",
            "wg0 peer ",
            "redundant · aes256gcm · handshake 12 s ago · ↓20.0M",
            " fibre    up     ↓10.0M",
            " lte      down    ↓1.0M",
            "3.10±0.40 ms",
            "2.0/0.0%",
            "reorder hold 0.00 ms, held 0 │ accepted 1234 buffered 0 dup 0 late 0 lost 2",
            "events",
            "00:16:52 peer ",
            "path lte to 198.18.2.1:51820 down (was up)",
        ] {
            assert!(text.contains(want), "no {want:?} in\n{text}");
        }
        assert!(text.contains('█'), "no sparkline in\n{text}");
        for line in text.lines() {
            assert_eq!(line.chars().count(), 80);
        }
    }

    #[test]
    fn a_stopped_interface_says_so() {
        let mut iface = Interface::new("wg0");
        iface.update(
            Instant::now(),
            UNIX_EPOCH + Duration::from_secs(3_600),
            Err("no daemon answers on /var/run/wireguard/wg0.sock".into()),
        );
        let text = render_text(&[iface], UNIX_EPOCH, 80, 24);
        assert!(
            text.contains("wg0 is not running (since 01:00:00 UTC): no daemon answers"),
            "{text}"
        );
        assert!(
            text.contains("waiting for it to come back; q quits"),
            "{text}"
        );
    }

    #[test]
    fn sparklines_and_units() {
        assert_eq!(sparkline(&[], 4), "    ");
        assert_eq!(sparkline(&[0.0, 1.0, 2.0, 7.0], 4), " ▂▃█");
        // Sixty samples on 6 cells: each the largest of its ten.
        let v: Vec<f64> = (0..60).map(|i| if i == 35 { 8.0 } else { 1.0 }).collect();
        assert_eq!(sparkline(&v, 6), "▂▂▂█▂▂");
        assert_eq!(rate(93_100_000.0), "93.1M");
        assert_eq!(rate(1_200_000_000.0), "1.20G");
        assert_eq!(rate(850_000.0), "850k");
        assert_eq!(rate(12.0), "12");
        assert_eq!(short_key("AbCdEfGhIjKlMnOp="), "AbCdEfGh…=");
        assert_eq!(cut("abcdef", 4), "abc…");
    }
}
