//! The plot of docs/src/design/accuracy.md: one client's window over time, as each
//! decider sees it, drawn as SVG.

use std::path::Path;

use plotters::prelude::*;

use crate::replay::Sample;

/// A line of the plot: its legend, colour, and value at each sample.
type Series = (&'static str, RGBColor, fn(&Sample) -> f64);

pub fn draw(
    path: &Path,
    samples: &[Sample],
    limit: u64,
    title: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let end_s = samples
        .last()
        .map_or(1.0, |sample| sample.t_ms as f64 / 1000.0);
    let top = samples
        .iter()
        .map(|sample| sample.exact_fixed.max(sample.exact_p1) as f64)
        .fold(limit as f64, f64::max)
        * 1.15;
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..end_s, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("requests in the window before each request")
        .light_line_style(WHITE)
        .draw()?;

    let points = |value: fn(&Sample) -> f64| -> Vec<(f64, f64)> {
        samples
            .iter()
            .map(|sample| (sample.t_ms as f64 / 1000.0, value(sample)))
            .collect()
    };
    let series: [Series; 5] = [
        (
            "fixed window: what it admitted in (t - W, t]",
            RGBColor(240, 190, 140),
            |s| s.exact_fixed as f64,
        ),
        (
            "fixed window: count of its current window",
            RGBColor(200, 120, 40),
            |s| s.fixed as f64,
        ),
        (
            "exact: what precision 1 admitted in (t - W, t]",
            RGBColor(30, 30, 30),
            |s| s.exact_p1 as f64,
        ),
        (
            "slidegate precision 1: estimate",
            RGBColor(40, 100, 200),
            |s| s.estimate_p1,
        ),
        (
            "slidegate precision 10: estimate",
            RGBColor(40, 160, 80),
            |s| s.estimate_p10,
        ),
    ];
    for (label, colour, value) in series {
        chart
            .draw_series(LineSeries::new(points(value), colour.stroke_width(1)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
    }
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, limit as f64), (end_s, limit as f64)],
            RED.stroke_width(1),
        ))?
        .label("limit")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], RED));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
