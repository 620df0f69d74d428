//! Drawing each kind of [`super::Plot`] with plotters: axes, series, legends and the palette.

use super::{
    pareto_front, short, GpuStreamsPlot, ParetoPlot, PredictedVsMeasured, StackedBars,
    TimelinePlot, SIZE,
};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// (lo, hi) of `v` with 5 % padding; a unit range around a single value; (0, 1) when empty.
fn padded(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for x in v.filter(|x| x.is_finite()) {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return (lo - d, hi + d);
    }
    let d = 0.05 * (hi - lo);
    (lo - d, hi + d)
}

pub(super) fn draw_timeline<DB: DrawingBackend>(
    p: &TimelinePlot,
    root: &DrawingArea<DB, Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let (x0, x1) = padded(
        p.lines
            .iter()
            .flat_map(|l| l.points.iter().map(|q| q.0))
            .chain(std::iter::once(0.0))
            .chain(p.spans.iter().flat_map(|s| [s.start_s, s.end_s])),
    );
    let x0 = x0.max(0.0);
    let (mut y0, mut y1) = padded(p.lines.iter().flat_map(|l| l.points.iter().map(|q| q.1)));
    if !p.log10_y && y0 > 0.0 && y0 < 0.5 * y1 {
        y0 = 0.0;
    }
    let mut y_labels = 10;
    if p.log10_y {
        // Whole decades, one label each.
        y0 = y0.floor();
        y1 = y1.ceil().max(y0 + 1.0);
        y_labels = (y1 - y0) as usize + 1;
    }
    let mut chart = ChartBuilder::on(root)
        .caption(&p.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    let log = p.log10_y;
    let yfmt = move |v: &f64| {
        if log {
            short(10f64.powf(*v))
        } else {
            short(*v)
        }
    };
    chart
        .configure_mesh()
        .x_desc("time since start (s)")
        .y_desc(p.y_label.as_str())
        .y_labels(y_labels)
        .y_label_formatter(&yfmt)
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    // Regions: one colour per label, drawn under the lines; one legend entry per label.
    let mut labels: Vec<&str> = Vec::new();
    for s in &p.spans {
        if !labels.contains(&s.label.as_str()) {
            labels.push(&s.label);
        }
    }
    for (i, label) in labels.iter().enumerate() {
        let c = color(i + 5);
        let rects = p
            .spans
            .iter()
            .filter(|s| s.label == *label)
            .map(|s| Rectangle::new([(s.start_s, y0), (s.end_s, y1)], c.mix(0.18).filled()));
        chart
            .draw_series(rects)?
            .label(format!("region {label}"))
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.mix(0.35).filled())
            });
    }
    for (i, l) in p.lines.iter().enumerate() {
        let c = color(i);
        // A non-finite y (a zero on the log axis, a failed read) breaks the line.
        let segments: Vec<&[(f64, f64)]> = l
            .points
            .split(|q| !q.1.is_finite())
            .filter(|s| !s.is_empty())
            .collect();
        for (k, seg) in segments.iter().enumerate() {
            let s = chart.draw_series(LineSeries::new(seg.iter().copied(), c.stroke_width(2)))?;
            if k == 0 {
                s.label(l.name.as_str()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            }
            if seg.len() == 1 {
                chart.draw_series(seg.iter().map(|q| Circle::new(*q, 3, c.filled())))?;
            }
        }
    }
    if !p.lines.is_empty() || !labels.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 13))
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    if p.lines.is_empty() {
        root.draw(&Text::new(
            "no samples with these columns",
            (SIZE.0 as i32 / 2 - 120, SIZE.1 as i32 / 2),
            ("sans-serif", 16),
        ))?;
    }
    Ok(())
}

pub(super) fn draw_streams<DB: DrawingBackend>(
    p: &GpuStreamsPlot,
    root: &DrawingArea<DB, Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let n = p.rows.len().max(1);
    let t1 = p
        .bars
        .iter()
        .map(|b| b.2)
        .chain(p.spans.iter().map(|s| s.end_s))
        .fold(0.0, f64::max);
    let t1 = if t1 > 0.0 { t1 * 1.02 } else { 1.0 };
    let mut chart = ChartBuilder::on(root)
        .caption(&p.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(120)
        .build_cartesian_2d(0.0..t1, (0..n).into_segmented())?;
    let names = p.rows.clone();
    let yfmt = move |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&yfmt)
        .x_desc("time since the start of the run (s)")
        .draw()?;
    for (k, s) in p.spans.iter().enumerate() {
        let c = color(k).mix(0.08);
        chart.draw_series(std::iter::once(Rectangle::new(
            [
                (s.start_s, SegmentValue::Exact(0)),
                (s.end_s, SegmentValue::Exact(n)),
            ],
            c.filled(),
        )))?;
    }
    let mut legends: Vec<String> = Vec::new();
    for b in &p.bars {
        if !legends.contains(&b.3) {
            legends.push(b.3.clone());
        }
    }
    for (k, name) in legends.iter().enumerate() {
        let c = color(k);
        let rects: Vec<_> = p
            .bars
            .iter()
            .filter(|b| &b.3 == name)
            .map(|b| {
                // At least a hair wide so that microsecond kernels show.
                let end = b.2.max(b.1 + t1 * 2e-4);
                let mut r = Rectangle::new(
                    [
                        (b.1, SegmentValue::Exact(b.0)),
                        (end, SegmentValue::Exact(b.0 + 1)),
                    ],
                    c.filled(),
                );
                r.set_margin(6, 6, 0, 0);
                r
            })
            .collect();
        chart
            .draw_series(rects)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 12))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

pub(super) fn draw_stacked<DB: DrawingBackend>(
    p: &StackedBars,
    root: &DrawingArea<DB, Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let n = p.bars.len().max(1);
    let top = p
        .bars
        .iter()
        .map(|(_, v)| v.iter().filter(|x| x.is_finite()).sum::<f64>())
        .fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.25 } else { 1.0 };
    let mut chart = ChartBuilder::on(root)
        .caption(&p.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..top)?;
    let names: Vec<String> = p.bars.iter().map(|b| b.0.clone()).collect();
    let xfmt = move |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&xfmt)
        .y_desc(p.y_label.as_str())
        .draw()?;
    let mut base = vec![0.0; p.bars.len()];
    for (k, cat) in p.categories.iter().enumerate() {
        let c = color(k);
        let mut rects = Vec::new();
        for (i, (_, vals)) in p.bars.iter().enumerate() {
            let v = vals
                .get(k)
                .copied()
                .filter(|x| x.is_finite())
                .unwrap_or(0.0);
            let mut r = Rectangle::new(
                [
                    (SegmentValue::Exact(i), base[i]),
                    (SegmentValue::Exact(i + 1), base[i] + v),
                ],
                c.filled(),
            );
            r.set_margin(0, 0, 12, 12);
            rects.push(r);
            base[i] += v;
        }
        chart
            .draw_series(rects)?
            .label(cat.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

pub(super) fn draw_pvm<DB: DrawingBackend>(
    p: &PredictedVsMeasured,
    root: &DrawingArea<DB, Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let root = root.titled(&p.title, ("sans-serif", 20))?;
    let cols = p.panels.len().max(1);
    let areas = root.split_evenly((1, cols));
    for (panel, area) in p.panels.iter().zip(areas.iter()) {
        let (lo, hi) = padded(panel.points.iter().flat_map(|q| [q.1, q.2]));
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.target, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(lo..hi, lo..hi)?;
        chart
            .configure_mesh()
            .x_desc("measured")
            .y_desc("predicted")
            .x_labels(5)
            .y_labels(5)
            .x_label_formatter(&|v| short(*v))
            .y_label_formatter(&|v| short(*v))
            .draw()?;
        chart
            .draw_series(LineSeries::new(
                [(lo, lo), (hi, hi)],
                BLACK.mix(0.5).stroke_width(1),
            ))?
            .label("y = x")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.mix(0.5)));
        let mut groups: Vec<&str> = Vec::new();
        for q in &panel.points {
            if !groups.contains(&q.0.as_str()) {
                groups.push(&q.0);
            }
        }
        for (i, g) in groups.iter().enumerate() {
            let c = color(i);
            let s = chart.draw_series(
                panel
                    .points
                    .iter()
                    .filter(|q| q.0 == *g)
                    .map(|q| Circle::new((q.1, q.2), 4, c.filled())),
            )?;
            if groups.len() <= 10 {
                s.label(*g)
                    .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.filled()));
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 11))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    Ok(())
}

pub(super) fn draw_pareto<DB: DrawingBackend>(
    p: &ParetoPlot,
    root: &DrawingArea<DB, Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let all = || {
        p.points
            .iter()
            .map(|q| (q.1, q.2))
            .chain(p.chosen.iter().map(|c| (c.1, c.2)))
    };
    let (x0, x1) = padded(all().map(|q| q.0));
    let (y0, y1) = padded(all().map(|q| q.1));
    let mut chart = ChartBuilder::on(root)
        .caption(&p.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    chart
        .configure_mesh()
        .x_desc("predicted time (s)")
        .y_desc("predicted energy (J)")
        .x_label_formatter(&|v| short(*v))
        .y_label_formatter(&|v| short(*v))
        .draw()?;
    let front = pareto_front(&p.points);
    let grey = RGBColor(120, 120, 120);
    chart
        .draw_series(
            p.points
                .iter()
                .map(|q| Circle::new((q.1, q.2), 4, grey.filled())),
        )?
        .label("settings")
        .legend(move |(x, y)| Circle::new((x + 8, y), 4, grey.filled()));
    let blue = color(0);
    chart
        .draw_series(LineSeries::new(
            front.iter().map(|&i| (p.points[i].1, p.points[i].2)),
            blue.stroke_width(2),
        ))?
        .label("Pareto front")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], blue.stroke_width(2)));
    chart.draw_series(front.iter().map(|&i| {
        let q = &p.points[i];
        EmptyElement::at((q.1, q.2))
            + Circle::new((0, 0), 5, blue.filled())
            + Text::new(q.0.clone(), (6, -14), ("sans-serif", 11))
    }))?;
    if let Some((label, t, e)) = &p.chosen {
        let red = color(3);
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((*t, *e))
                    + TriangleMarker::new((0, 0), 9, red.filled())
                    + Text::new(format!("plan: {label}"), (10, 4), ("sans-serif", 13)),
            ))?
            .label("plan's choice")
            .legend(move |(x, y)| TriangleMarker::new((x + 8, y), 6, red.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}
