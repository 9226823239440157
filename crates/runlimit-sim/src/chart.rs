//! An SVG chart of admitted and denied requests per minute, one line per
//! candidate.

use std::path::Path;

use plotters::prelude::*;

use crate::report::Report;

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing the chart failed: {0}")]
pub struct ChartError(String);

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
/// minute below, one colour per row.
///
/// # Errors
///
/// [`ChartError`] when the file cannot be written.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), ChartError> {
    draw(report, path).map_err(|error| ChartError(error.to_string()))
}

fn draw(report: &Report, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let minutes = report
        .rows
        .iter()
        .map(|row| row.per_minute.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let root = SVGBackend::new(path, (1000, 700)).into_drawing_area();
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
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
