//! The report's figures: described as data (two axes with their labels and units, layers of
//! points, lines and intervals, each with a mark that tells it apart without colour), then
//! drawn once as SVG by plotters.
//!
//! Every axis is drawn on a linear coordinate of our own ([`Ticked`]) that carries its ticks
//! and their labels: a log axis is plotted in log10 with ticks at 1-2-5 steps, a categorical
//! axis (a parameter's values) at whole positions, so that one chart type serves every figure
//! and the ticks read as numbers a person would write.

use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::element::{Drawable, PointCollection};
use plotters::prelude::*;
use plotters_backend::{BackendCoord, DrawingErrorKind};

/// Colours that stay apart for the common colour-vision deficiencies (Okabe and Ito); every
/// layer also differs by its mark or its line, so none relies on colour alone.
pub(crate) mod colour {
    use plotters::style::RGBColor;

    /// Black.
    pub(crate) const BLACK: RGBColor = RGBColor(0, 0, 0);
    /// Blue.
    pub(crate) const BLUE: RGBColor = RGBColor(0, 114, 178);
    /// Orange.
    pub(crate) const ORANGE: RGBColor = RGBColor(230, 159, 0);
    /// Vermillion.
    pub(crate) const VERMILLION: RGBColor = RGBColor(213, 94, 0);
    /// Bluish green.
    pub(crate) const GREEN: RGBColor = RGBColor(0, 158, 115);
    /// Grey, for reference lines.
    pub(crate) const GREY: RGBColor = RGBColor(120, 120, 120);
}

/// Values spanning more than this factor go on a log axis ([`Axis::fitting`]).
pub(crate) const LOG_ABOVE: f64 = 10.0;

/// How an axis maps values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scale {
    /// Linear.
    Linear,
    /// Logarithmic (positive values only; others are left out).
    Log,
    /// Categories at positions 0, 1, …, named in order (a parameter's values).
    Categories(Vec<String>),
}

/// One axis: its label (with the unit) and scale.
#[derive(Debug, Clone)]
pub(crate) struct Axis {
    label: String,
    scale: Scale,
}

impl Axis {
    /// A linear axis labelled `label` (name the unit in it: `time (ms)`).
    pub(crate) fn linear(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Linear,
        }
    }

    /// A log axis labelled `label`.
    pub(crate) fn log(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Log,
        }
    }

    /// Log when `values` span more than [`LOG_ABOVE`] (and are all positive), else linear.
    pub(crate) fn fitting(label: impl Into<String>, values: impl Iterator<Item = f64>) -> Axis {
        let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite()) {
            low = low.min(v);
            high = high.max(v);
        }
        if low > 0.0 && high / low > LOG_ABOVE {
            Axis::log(label)
        } else {
            Axis::linear(label)
        }
    }

    /// A categorical axis: `names` at positions 0, 1, ….
    pub(crate) fn categories(label: impl Into<String>, names: Vec<String>) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Categories(names),
        }
    }

    /// Where `v` goes on the plot's linear coordinate (`None`: it cannot be drawn).
    fn map(&self, v: f64) -> Option<f64> {
        match self.scale {
            Scale::Log if v > 0.0 && v.is_finite() => Some(v.log10()),
            Scale::Log => None,
            _ if v.is_finite() => Some(v),
            _ => None,
        }
    }

    /// The plotted range of `mapped` values, padded; a categorical axis spans its categories.
    fn range(&self, mapped: impl Iterator<Item = f64>) -> (f64, f64) {
        if let Scale::Categories(names) = &self.scale {
            return (-0.6, names.len().max(1) as f64 - 0.4);
        }
        let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in mapped {
            low = low.min(v);
            high = high.max(v);
        }
        if !low.is_finite() {
            return (0.0, 1.0);
        }
        let span = high - low;
        let pad = if span > 0.0 {
            span * 0.05
        } else if self.scale == Scale::Log {
            0.1
        } else {
            low.abs().max(1.0) * 0.05
        };
        (low - pad, high + pad)
    }

    /// Tick positions within `range` (plotted coordinates) and their labels.
    fn ticks(&self, (low, high): (f64, f64)) -> Vec<(f64, String)> {
        match &self.scale {
            Scale::Linear => linear_ticks(low, high)
                .into_iter()
                .map(|t| (t, number(t)))
                .collect(),
            Scale::Log => log_ticks(low, high),
            Scale::Categories(names) => {
                let every = names.len().div_ceil(24).max(1);
                names
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % every == 0)
                    .map(|(i, name)| (i as f64, shorten(name, 14)))
                    .collect()
            }
        }
    }
}

/// At most 8 ticks at a 1-2-5 step over `[low, high]`.
fn linear_ticks(low: f64, high: f64) -> Vec<f64> {
    let span = high - low;
    if span.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || !span.is_finite() {
        return vec![low];
    }
    let raw = span / 6.0;
    let power = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| span / s <= 8.0)
        .unwrap_or(10.0 * power);
    let first = (low / step).ceil() as i64;
    let last = (high / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// Ticks of a log axis over `[low, high]` (log10 coordinates): decades, with 2 and 5 between
/// them over a narrow range, or linear steps within a fraction of a decade.
fn log_ticks(low: f64, high: f64) -> Vec<(f64, String)> {
    let span = high - low;
    if span < 0.7 {
        return linear_ticks(10f64.powf(low), 10f64.powf(high))
            .into_iter()
            .filter(|v| *v > 0.0)
            .map(|v| (v.log10(), number(v)))
            .collect();
    }
    let multiples: &[f64] = if span < 2.5 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    let every = ((span / 8.0).ceil() as i64).max(1);
    let mut ticks = Vec::new();
    for decade in (low.floor() as i64)..=(high.ceil() as i64) {
        if multiples.len() == 1 && decade.rem_euclid(every) != 0 {
            continue;
        }
        for m in multiples {
            let v = m * 10f64.powi(decade as i32);
            let at = v.log10();
            if (low..=high).contains(&at) {
                ticks.push((at, number(v)));
            }
        }
    }
    ticks
}

/// A tick's number: up to four significant digits, no trailing zeros, an exponent only for
/// very large or small values.
pub(crate) fn number(v: f64) -> String {
    let magnitude = v.abs();
    if magnitude == 0.0 {
        return "0".into();
    }
    if !(1e-3..1e6).contains(&magnitude) {
        return format!("{v:.1e}");
    }
    let digits = (3 - magnitude.log10().floor() as i32).max(0) as usize;
    let text = format!("{v:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// `text` cut to `width` characters with an ellipsis.
fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(width - 1).collect();
        format!("{cut}…")
    }
}

/// A point's mark: told apart by shape, not only by colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// A small filled dot (the many).
    Dot,
    /// An open circle.
    Ring,
    /// A filled triangle (the best).
    Triangle,
    /// A cross.
    Cross,
    /// An open square.
    Square,
}

/// How a line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stroke {
    /// Solid.
    Solid,
    /// Long dashes.
    Dashed,
    /// Dots.
    Dotted,
}

/// What a layer draws.
#[derive(Debug, Clone)]
pub(crate) enum Shape {
    /// A mark at each point.
    Points(Mark, Vec<(f64, f64)>),
    /// A line through the points, with a mark at each when given.
    Line(Stroke, Option<Mark>, Vec<(f64, f64)>),
    /// Vertical intervals: `(x, low, middle, high)`, a mark at the middle.
    Intervals(Mark, Vec<(f64, f64, f64, f64)>),
}

/// One layer of a figure: what it draws, its colour, and its name in the legend.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    name: String,
    colour: RGBColor,
    shape: Shape,
}

impl Layer {
    /// Marks at `points`.
    pub(crate) fn points(
        name: impl Into<String>,
        colour: RGBColor,
        mark: Mark,
        points: Vec<(f64, f64)>,
    ) -> Layer {
        Layer {
            name: name.into(),
            colour,
            shape: Shape::Points(mark, points),
        }
    }

    /// A line through `points`, with `mark` at each.
    pub(crate) fn line(
        name: impl Into<String>,
        colour: RGBColor,
        stroke: Stroke,
        mark: Option<Mark>,
        points: Vec<(f64, f64)>,
    ) -> Layer {
        Layer {
            name: name.into(),
            colour,
            shape: Shape::Line(stroke, mark, points),
        }
    }

    /// Intervals `(x, low, middle, high)` with `mark` at the middle.
    pub(crate) fn intervals(
        name: impl Into<String>,
        colour: RGBColor,
        mark: Mark,
        intervals: Vec<(f64, f64, f64, f64)>,
    ) -> Layer {
        Layer {
            name: name.into(),
            colour,
            shape: Shape::Intervals(mark, intervals),
        }
    }

    /// How many data points it draws.
    fn len(&self) -> usize {
        match &self.shape {
            Shape::Points(_, p) | Shape::Line(_, _, p) => p.len(),
            Shape::Intervals(_, i) => i.len(),
        }
    }
}

/// A figure: two axes and its layers, with a caption that says in words what it shows.
#[derive(Debug, Clone)]
pub(crate) struct Figure {
    id: String,
    caption: String,
    x: Axis,
    y: Axis,
    layers: Vec<Layer>,
    size: (u32, u32),
}

impl Figure {
    /// An empty figure `id` (unique in the page) with `caption` (plain text).
    pub(crate) fn new(id: impl Into<String>, caption: impl Into<String>, x: Axis, y: Axis) -> Self {
        Figure {
            id: id.into(),
            caption: caption.into(),
            x,
            y,
            layers: Vec::new(),
            size: (760, 360),
        }
    }

    /// Adds `layer` (an empty one is left out).
    pub(crate) fn layer(mut self, layer: Layer) -> Figure {
        if layer.len() > 0 {
            self.layers.push(layer);
        }
        self
    }

    /// Its size in pixels (as drawn; the page scales it to fit).
    pub(crate) fn size(mut self, width: u32, height: u32) -> Figure {
        self.size = (width, height);
        self
    }

    /// Its id in the page.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Its caption.
    pub(crate) fn caption(&self) -> &str {
        &self.caption
    }

    /// Data points drawn, over every layer.
    pub(crate) fn points(&self) -> usize {
        self.layers.iter().map(Layer::len).sum()
    }

    /// The figure as an SVG element, labelled by the caption of id `{id}-caption` for screen
    /// readers; `Err` with plotters' message if it could not be drawn.
    pub(crate) fn svg(&self) -> Result<String, String> {
        let mut svg = String::new();
        self.draw(&mut svg).map_err(|e| e.to_string())?;
        let labelled = format!(
            "<svg role=\"img\" aria-labelledby=\"{}-caption\" class=\"plot\"",
            self.id
        );
        Ok(svg.replacen("<svg", &labelled, 1))
    }

    /// Every layer's points in plotted coordinates.
    fn mapped(&self, layer: &Layer) -> Vec<(f64, f64)> {
        let xy = |&(x, y): &(f64, f64)| Some((self.x.map(x)?, self.y.map(y)?));
        match &layer.shape {
            Shape::Points(_, p) | Shape::Line(_, _, p) => p.iter().filter_map(xy).collect(),
            Shape::Intervals(_, i) => i
                .iter()
                .flat_map(|&(x, lo, _, hi)| [(x, lo), (x, hi)])
                .filter_map(|p| xy(&p))
                .collect(),
        }
    }

    fn draw(&self, svg: &mut String) -> Result<(), DrawError> {
        let all: Vec<(f64, f64)> = self.layers.iter().flat_map(|l| self.mapped(l)).collect();
        let x_range = self.x.range(all.iter().map(|p| p.0));
        let mut y_range = self.y.range(all.iter().map(|p| p.1));
        // Room at the top for the legend, so that it hides no point.
        let named = self.layers.iter().filter(|l| !l.name.is_empty()).count();
        y_range.1 += (y_range.1 - y_range.0) * 0.09 * named as f64;
        let x_ticks = self.x.ticks(x_range);
        let y_ticks = self.y.ticks(y_range);
        let root = SVGBackend::with_string(svg, self.size).into_drawing_area();
        root.fill(&WHITE)?;
        let x_coord = Ticked {
            range: x_range.0..x_range.1,
            ticks: x_ticks,
        };
        let y_coord = Ticked {
            range: y_range.0..y_range.1,
            ticks: y_ticks,
        };
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d(x_coord, y_coord)?;
        chart
            .configure_mesh()
            .x_desc(self.x.label.as_str())
            .y_desc(self.y.label.as_str())
            .bold_line_style(RGBColor(225, 225, 225))
            .axis_style(colour::BLACK)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .draw()?;
        for layer in &self.layers {
            self.draw_layer(&mut chart, layer)?;
        }
        if self.layers.iter().any(|l| !l.name.is_empty()) {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(160, 160, 160))
                .label_font(("sans-serif", 15))
                .draw()?;
        }
        root.present()?;
        Ok(())
    }

    fn draw_layer<'a>(
        &self,
        chart: &mut ChartContext<'a, SVGBackend<'a>, Plot>,
        layer: &Layer,
    ) -> Result<(), DrawError> {
        let colour = layer.colour;
        let mapped = self.mapped(layer);
        let drawn = match &layer.shape {
            Shape::Points(mark, _) => {
                let mark = *mark;
                chart
                    .draw_series(
                        mapped
                            .into_iter()
                            .map(move |p| Marker::new(p, mark, colour)),
                    )?
                    .legend(move |p| Marker::new((p.0 + 10, p.1), mark, colour))
            }
            Shape::Line(stroke, mark, _) => {
                let stroke = *stroke;
                draw_line(chart, &mapped, stroke, colour)?;
                let mark = *mark;
                let marks = mapped.into_iter().filter(|_| mark.is_some());
                chart
                    .draw_series(marks.map(move |at| Marker {
                        at,
                        mark,
                        colour,
                        line: None,
                    }))?
                    .legend(move |(x, y)| Marker {
                        at: (x + 10, y),
                        mark,
                        colour,
                        line: Some(stroke),
                    })
            }
            Shape::Intervals(mark, intervals) => {
                let mark = *mark;
                self.draw_bars(chart, intervals, colour)?;
                let middles = intervals
                    .iter()
                    .filter_map(|&(x, _, mid, _)| Some((self.x.map(x)?, self.y.map(mid)?)));
                chart
                    .draw_series(middles.map(move |p| Marker::new(p, mark, colour)))?
                    .legend(move |p| Marker::new((p.0 + 10, p.1), mark, colour))
            }
        };
        if !layer.name.is_empty() {
            drawn.label(layer.name.as_str());
        }
        Ok(())
    }

    /// The bars of `intervals` (`(x, low, middle, high)`), those that fall on the axes.
    fn draw_bars<'a>(
        &self,
        chart: &mut ChartContext<'a, SVGBackend<'a>, Plot>,
        intervals: &[(f64, f64, f64, f64)],
        colour: RGBColor,
    ) -> Result<(), DrawError> {
        let bars = intervals.iter().filter_map(|&(x, lo, mid, hi)| {
            Some(ErrorBar::new_vertical(
                self.x.map(x)?,
                self.y.map(lo)?,
                self.y.map(mid)?,
                self.y.map(hi)?,
                colour.stroke_width(1),
                8,
            ))
        });
        chart.draw_series(bars)?;
        Ok(())
    }
}

/// A line through `mapped`, solid, dashed or dotted as `stroke` says.
fn draw_line<'a>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Plot>,
    mapped: &[(f64, f64)],
    stroke: Stroke,
    colour: RGBColor,
) -> Result<(), DrawError> {
    let style = colour.stroke_width(2);
    match stroke {
        Stroke::Solid => {
            chart.draw_series(LineSeries::new(mapped.iter().copied(), style))?;
        }
        Stroke::Dashed => {
            chart.draw_series(DashedLineSeries::new(mapped.iter().copied(), 8, 5, style))?;
        }
        Stroke::Dotted => {
            chart.draw_series(DashedLineSeries::new(mapped.iter().copied(), 2, 4, style))?;
        }
    }
    Ok(())
}

/// What drawing on the SVG backend fails with (writing to a string: not expected).
type DrawError = DrawingAreaErrorKind<<SVGBackend<'static> as DrawingBackend>::ErrorType>;

/// The coordinate type of every figure.
type Plot = plotters::coord::cartesian::Cartesian2d<Ticked, Ticked>;

/// A linear coordinate over `range` whose ticks are ours, each with its label.
#[derive(Debug, Clone)]
struct Ticked {
    range: Range<f64>,
    ticks: Vec<(f64, String)>,
}

impl Ranged for Ticked {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.range.end - self.range.start;
        if span <= 0.0 {
            return (limit.0 + limit.1) / 2;
        }
        let along = (value - self.range.start) / span;
        limit.0 + (f64::from(limit.1 - limit.0) * along).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Bold points only: one grid line per tick, no lighter lines between.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.iter().map(|t| t.0).collect()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

impl ValueFormatter<f64> for Ticked {
    fn format_ext(&self, value: &f64) -> String {
        self.ticks
            .iter()
            .min_by(|a, b| (a.0 - value).abs().total_cmp(&(b.0 - value).abs()))
            .map(|t| t.1.clone())
            .unwrap_or_default()
    }
}

/// A mark at a point: one plotters element for every mark (the figure's points, and the
/// legend's samples, where it stands on a short stretch of its layer's line).
struct Marker<C> {
    at: C,
    mark: Option<Mark>,
    colour: RGBColor,
    /// The legend's sample of a line through the mark.
    line: Option<Stroke>,
}

impl<C> Marker<C> {
    fn new(at: C, mark: Mark, colour: RGBColor) -> Marker<C> {
        Marker {
            at,
            mark: Some(mark),
            colour,
            line: None,
        }
    }
}

impl<'a, C> PointCollection<'a, C> for &'a Marker<C> {
    type Point = &'a C;
    type IntoIter = std::iter::Once<&'a C>;

    fn point_iter(self) -> Self::IntoIter {
        std::iter::once(&self.at)
    }
}

impl<C, DB: DrawingBackend> Drawable<DB> for Marker<C> {
    fn draw<I: Iterator<Item = BackendCoord>>(
        &self,
        mut points: I,
        backend: &mut DB,
        _: (u32, u32),
    ) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
        let Some((x, y)) = points.next() else {
            return Ok(());
        };
        let colour = self.colour;
        let stroke = colour.stroke_width(2);
        if let Some(line) = self.line {
            let (dash, gap) = match line {
                Stroke::Solid => (20, 0),
                Stroke::Dashed => (8, 4),
                Stroke::Dotted => (2, 4),
            };
            let mut from = x - 10;
            while from < x + 10 {
                let to = (from + dash).min(x + 10);
                backend.draw_line((from, y), (to, y), &stroke)?;
                from = to + gap;
            }
        }
        match self.mark {
            None => Ok(()),
            Some(Mark::Dot) => backend.draw_circle((x, y), 3, &colour.mix(0.6).filled(), true),
            Some(Mark::Ring) => backend.draw_circle((x, y), 4, &stroke, false),
            Some(Mark::Triangle) => backend.fill_polygon(
                [(x, y - 6), (x - 6, y + 4), (x + 6, y + 4)],
                &colour.filled(),
            ),
            Some(Mark::Cross) => {
                backend.draw_line((x - 4, y - 4), (x + 4, y + 4), &stroke)?;
                backend.draw_line((x - 4, y + 4), (x + 4, y - 4), &stroke)
            }
            Some(Mark::Square) => backend.draw_rect((x - 4, y - 4), (x + 4, y + 4), &stroke, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_read_as_numbers_a_person_writes() {
        let linear = |low, high| -> Vec<String> {
            linear_ticks(low, high).into_iter().map(number).collect()
        };
        assert_eq!(linear(0.0, 10.0), ["0", "2", "4", "6", "8", "10"]);
        assert_eq!(linear(0.13, 0.61), ["0.2", "0.3", "0.4", "0.5", "0.6"]);
        let decades: Vec<String> = log_ticks(-0.2, 3.1).into_iter().map(|t| t.1).collect();
        assert_eq!(decades, ["1", "10", "100", "1000"]);
        let steps: Vec<String> = log_ticks(0.0, 1.5).into_iter().map(|t| t.1).collect();
        assert_eq!(steps, ["1", "2", "5", "10", "20"]);
        assert_eq!(number(3.0), "3");
        assert_eq!(number(2.869829), "2.87");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(12_345_678.0), "1.2e7");
    }

    #[test]
    fn a_figure_draws_every_layer_as_svg_labelled_by_its_caption() {
        let figure = Figure::new(
            "t",
            "two layers",
            Axis::categories("BM", vec!["32".into(), "64".into()]),
            Axis::log("time (ms)"),
        )
        .layer(Layer::points(
            "choices",
            colour::BLUE,
            Mark::Dot,
            vec![(0.0, 1.0), (1.0, 30.0), (1.0, -1.0)],
        ))
        .layer(Layer::line(
            "best",
            colour::BLACK,
            Stroke::Dashed,
            Some(Mark::Triangle),
            vec![(0.0, 1.0), (1.0, 30.0)],
        ));
        let svg = figure.svg().expect("drawn");
        assert!(svg.starts_with("<svg role=\"img\" aria-labelledby=\"t-caption\""));
        // Two dots (the negative time cannot go on a log axis), the axis labels, the legend.
        assert_eq!(svg.matches("<circle").count(), 2 + 1, "{svg}");
        for text in ["time (ms)", "BM", "choices", "best", ">\n32\n<", ">\n64\n<"] {
            assert!(svg.contains(text), "{text} missing from {svg}");
        }
        assert_eq!(figure.points(), 5);
    }
}
