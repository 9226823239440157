//! An SVG chart of admitted and denied requests per minute, one line per
//! candidate, with a change of policies marked.

use std::{
    io,
    path::{Path, PathBuf},
};

use plotters::prelude::*;

use crate::report::Report;

/// Why a chart could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChartError {
    /// Drawing the chart failed.
    #[error("drawing the chart failed: {0}")]
    Draw(String),
    /// The chart could not be written to its file.
    #[error("writing the chart to {}: {source}", path.display())]
    Write {
        /// The file the chart was to be written to.
        path: PathBuf,
        /// Why writing failed.
        source: io::Error,
    },
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Draws `report` as an SVG at `path`: admitted per minute above, denied per
/// minute below, one colour per row, and a grey vertical line at a change
/// of policies.
///
/// # Errors
///
/// [`ChartError::Write`], naming `path`, when the file cannot be written;
/// [`ChartError::Draw`] if drawing fails.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), ChartError> {
    let mut svg = String::new();
    draw(report, &mut svg).map_err(|error| ChartError::Draw(error.to_string()))?;
    std::fs::write(path, svg).map_err(|source| ChartError::Write {
        path: path.to_owned(),
        source,
    })
}

fn draw(report: &Report, svg: &mut String) -> Result<(), Box<dyn std::error::Error>> {
    let minutes = report
        .rows
        .iter()
        .map(|row| row.per_minute.len())
        .max()
        .unwrap_or(0)
        .max(1);
    // Drawn into memory, so that a file error is an `io::Error` naming it.
    let root = SVGBackend::with_string(svg, (1000, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 1));
    for (panel, (title, pick)) in panels.iter().zip([
        ("admitted per minute", 0usize),
        ("denied per minute", 1usize),
    ]) {
        let peak = report
            .rows
            .iter()
            .flat_map(|row| row.per_minute.iter().map(|counts| counts[pick]))
            .max()
            .unwrap_or(0)
            .max(1);
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0..minutes, 0..peak + peak / 10 + 1)?;
        chart
            .configure_mesh()
            .x_desc("minutes from the first request")
            .draw()?;
        for (index, row) in report.rows.iter().enumerate() {
            let colour = PALETTE[index % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    row.per_minute
                        .iter()
                        .enumerate()
                        .map(|(minute, counts)| (minute, counts[pick])),
                    colour.stroke_width(2),
                ))?
                .label(row.policy.clone())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(2))
                });
        }
        if let Some(change) = &report.change {
            let grey = BLACK.mix(0.5);
            chart
                .draw_series(LineSeries::new(
                    [(change.minute, 0), (change.minute, peak + peak / 10 + 1)],
                    grey.stroke_width(1),
                ))?
                .label(format!("policy change ({})", change.since_first_request))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], grey.stroke_width(1))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
