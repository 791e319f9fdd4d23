//! `--plot FILE.svg` of `braid bench lines`, `braid bench tunnel` and
//! `braid demo`: throughput per second, per line and in total, one panel
//! per transfer, with the moments that matter marked (a line cut and
//! restored, a rate changed, braid's own word that a line went down or
//! came back, i.e. the failover). Drawn with `plotters`' SVG backend.
//!
//! [`sample`] gathers the figures while a transfer runs.

pub mod sample;

use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// One line on a panel: Mbit/s at seconds since the transfer started.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// The total (drawn bold and black) rather than one line.
    pub total: bool,
}

/// What happened at a moment of the transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    /// The bench cut a line.
    Cut,
    /// The bench restored it.
    Restore,
    /// The bench changed a line's rate.
    Rate,
    /// braid saw a line go down (the failover, in failover mode).
    Down,
    /// braid saw a line come up.
    Up,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub at: f64,
    pub kind: MarkKind,
    pub label: String,
}

/// One transfer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
    pub marks: Vec<Mark>,
}

/// Width of the picture and height of one panel, in pixels.
const WIDTH: u32 = 960;
const PANEL_HEIGHT: u32 = 320;
const TITLE_HEIGHT: u32 = 40;

/// Checks a `--plot` value before anything runs: it ends in `.svg` and its
/// directory exists.
pub fn parse_target(flag: &str, value: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(value);
    if path.extension().and_then(|e| e.to_str()) != Some("svg") {
        return Err(format!(
            "{flag}: {value:?} must end in .svg (the plot is SVG)"
        ));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "{flag}: the directory {} does not exist",
            dir.display()
        ));
    }
    Ok(path)
}

fn line_color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
    ];
    COLORS[i % COLORS.len()]
}

fn mark_color(kind: MarkKind) -> RGBColor {
    match kind {
        MarkKind::Cut | MarkKind::Down => RGBColor(214, 39, 40),
        MarkKind::Restore | MarkKind::Up => RGBColor(44, 160, 44),
        MarkKind::Rate => RGBColor(127, 127, 127),
    }
}

/// Writes `panels` under `title` to `path` as one SVG.
pub fn write_svg(path: &Path, title: &str, panels: &[Panel]) -> Result<(), String> {
    let svg = render_svg(title, panels)?;
    std::fs::write(path, svg).map_err(|e| format!("{}: {e}", path.display()))
}

/// The SVG text of `panels`.
pub fn render_svg(title: &str, panels: &[Panel]) -> Result<String, String> {
    let mut svg = String::new();
    let height = TITLE_HEIGHT + PANEL_HEIGHT * panels.len().max(1) as u32;
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        draw(&root, title, panels).map_err(|e| format!("drawing the plot: {e}"))?;
        root.present()
            .map_err(|e| format!("drawing the plot: {e}"))?;
    }
    Ok(svg)
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
    panels: &[Panel],
) -> DrawResult {
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(TITLE_HEIGHT);
    head.draw(&Text::new(
        title.to_string(),
        (12, 10),
        ("sans-serif", 20).into_font().style(FontStyle::Bold),
    ))?;
    if panels.is_empty() {
        body.draw(&Text::new(
            "no transfer was measured".to_string(),
            (12, 20),
            ("sans-serif", 16).into_font(),
        ))?;
        return Ok(());
    }
    for (area, panel) in body.split_evenly((panels.len(), 1)).iter().zip(panels) {
        draw_panel(area, panel)?;
    }
    Ok(())
}

fn draw_panel(area: &DrawingArea<SVGBackend, plotters::coord::Shift>, panel: &Panel) -> DrawResult {
    let x_max = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(panel.marks.iter().map(|m| m.at))
        .fold(1.0, f64::max)
        .ceil();
    let y_top = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    // Room above the highest point for the marks' labels.
    let y_max = if y_top > 0.0 { y_top * 1.25 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("Mbit/s")
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    for (i, mark) in panel.marks.iter().enumerate() {
        let color = mark_color(mark.kind);
        let style = ShapeStyle::from(&color).stroke_width(2);
        chart.draw_series(DashedLineSeries::new(
            [(mark.at, 0.0), (mark.at, y_max)],
            6,
            4,
            style,
        ))?;
        // Labels of marks close together go one under the other.
        let row = (i % 3) as f64;
        chart.draw_series(std::iter::once(Text::new(
            mark.label.clone(),
            (mark.at + x_max * 0.004, y_max * (0.97 - 0.07 * row)),
            ("sans-serif", 12).into_font().color(&color),
        )))?;
    }
    let mut line = 0;
    for s in &panel.series {
        let style = if s.total {
            ShapeStyle::from(&BLACK).stroke_width(3)
        } else {
            line += 1;
            ShapeStyle::from(&line_color(line - 1)).stroke_width(2)
        };
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), style))?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .label_font(("sans-serif", 12))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests;
