//! `braid top [NAME]`: a live, full-screen view of running interfaces,
//! refreshed every second from the snapshot `braid show --json` reads.
//! Works in an 80 × 24 terminal (over ssh too); `q` quits.
//!
//! An interface that stops while it is shown says so and is waited for;
//! one that is not running when `braid top` starts is an error, as with
//! `braid show`.

mod model;
mod view;

pub use model::{Interface, Status, HISTORY};
pub use view::{render_text, sparkline};

use crate::uapi::{self, DeviceSnapshot};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use std::io::IsTerminal;
use std::time::{Duration, Instant, SystemTime};

/// How often the view is refreshed.
pub const REFRESH: Duration = Duration::from_secs(1);

/// Asks interface `name`'s daemon for its snapshot, with an error a person
/// can act on.
pub fn look(name: &str) -> Result<DeviceSnapshot, String> {
    let path = uapi::socket_path(name);
    uapi::query_braid(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            format!("no braid daemon answers on {} ({e})", path.display())
        }
        std::io::ErrorKind::PermissionDenied => format!(
            "{}: permission denied; braid top needs root, like wg show",
            path.display()
        ),
        _ => format!("{}: {e}", path.display()),
    })
}

/// The interfaces to show: `name`, or every one that answers.
fn interfaces(name: Option<&str>) -> Result<Vec<String>, String> {
    if let Some(n) = name {
        look(n).map_err(|e| format!("{n} is not running: {e}"))?;
        return Ok(vec![n.to_string()]);
    }
    let mut names: Vec<String> = std::fs::read_dir(uapi::SOCKET_DIR)
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_suffix(".sock")
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.retain(|n| look(n).is_ok());
    if names.is_empty() {
        return Err(format!(
            "no braid interface is running (none answers in {})",
            uapi::SOCKET_DIR
        ));
    }
    Ok(names)
}

pub fn run(name: Option<&str>) -> Result<(), String> {
    let names = interfaces(name)?;
    if !std::io::stdout().is_terminal() {
        return Err("braid top needs a terminal; `braid show` prints the same once".into());
    }
    let mut shown: Vec<Interface> = names.iter().map(|n| Interface::new(n)).collect();
    let mut terminal = ratatui::try_init().map_err(|e| format!("terminal: {e}"))?;
    let result = live(&mut terminal, &mut shown);
    ratatui::restore();
    result
}

fn refresh(shown: &mut [Interface]) {
    for iface in shown.iter_mut() {
        let looked = look(&iface.name);
        iface.update(Instant::now(), SystemTime::now(), looked);
    }
}

fn live(terminal: &mut ratatui::DefaultTerminal, shown: &mut [Interface]) -> Result<(), String> {
    let mut scroll = 0usize;
    let mut next = Instant::now();
    loop {
        if Instant::now() >= next {
            refresh(shown);
            next = Instant::now() + REFRESH;
        }
        terminal
            .draw(|f| view::draw(f, shown, SystemTime::now(), &mut scroll))
            .map_err(|e| format!("terminal: {e}"))?;
        let wait = next.saturating_duration_since(Instant::now());
        if !event::poll(wait).map_err(|e| format!("terminal: {e}"))? {
            continue;
        }
        let Event::Key(key) = event::read().map_err(|e| format!("terminal: {e}"))? else {
            continue;
        };
        if key.kind == KeyEventKind::Release {
            continue;
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => return Ok(()),
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return Ok(()),
            KeyCode::Down | KeyCode::Char('j') => scroll += 1,
            KeyCode::Up | KeyCode::Char('k') => scroll = scroll.saturating_sub(1),
            KeyCode::PageDown | KeyCode::Char(' ') => scroll += 10,
            KeyCode::PageUp => scroll = scroll.saturating_sub(10),
            KeyCode::Home => scroll = 0,
            _ => {}
        }
    }
}
