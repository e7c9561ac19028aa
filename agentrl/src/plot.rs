//! Chapter 1: line charts for the book's data figures.
//!
//! A [`LineChart`] is plain data (title, axis labels, ranges, a list of
//! [`Series`]); [`LineChart::save_svg`] turns it into an SVG file with
//! plotters. Later chapters reuse it for learning curves, so it stays small:
//! straight lines, optional point markers, an optional logarithmic x axis, and
//! a legend once there is more than one series.
//!
//! The output is byte-for-byte reproducible. Plotters is built without font
//! support, so it estimates text sizes with a fixed formula instead of asking
//! the machine's fonts, and every number in the file is formatted by Rust.
//! Re-running a chapter therefore leaves its figures unchanged in git.

use plotters::chart::SeriesLabelPosition;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Width and height of a chart in SVG pixels.
pub const CHART_SIZE: (u32, u32) = (640, 400);

/// The book's series colours: the Okabe–Ito palette, which stays distinct
/// for the common kinds of colour blindness. Its yellow is left out because
/// it is hard to see against white paper.
pub const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),   // blue
    RGBColor(230, 159, 0),   // orange
    RGBColor(0, 158, 115),   // bluish green
    RGBColor(213, 94, 0),    // vermillion
    RGBColor(204, 121, 167), // reddish purple
    RGBColor(86, 180, 233),  // sky blue
    RGBColor(0, 0, 0),       // black
];

/// Text and axis colour: a near-black that is softer than pure black.
pub const INK: RGBColor = RGBColor(34, 34, 34);
/// Grid lines: light enough that the data stays in front.
pub const GRID: RGBColor = RGBColor(225, 225, 225);
/// Neutral mid grey, used for outlines and secondary marks.
pub const GREY: RGBColor = RGBColor(120, 120, 120);

/// The font family of every figure; the reader's SVG viewer picks the face.
pub const FONT: &str = "sans-serif";

/// Colour of the `index`-th series; the sequence repeats after [`PALETTE`].
pub fn series_colour(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

// ANCHOR: types
/// One line of a chart: its legend label and its (x, y) points, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Draw a dot at every point as well (for sparse data such as few H values).
    pub markers: bool,
    /// A shaded band around the line, (x, low, high) per point: an interval over seeds.
    pub band: Vec<(f64, f64, f64)>,
}

/// A line chart; `x_range` and `y_range` fix the visible window.
#[derive(Clone, Debug, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_range: (f64, f64),
    pub y_range: (f64, f64),
    /// Logarithmic x axis (then `x_range.0` must be positive).
    pub log_x: bool,
    pub series: Vec<Series>,
}
// ANCHOR_END: types

impl Series {
    /// A series drawn as a plain line.
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            label: label.into(),
            points,
            markers: false,
            band: Vec::new(),
        }
    }

    /// A line through the means and a band from low to high: `band[i]` is
    /// (mean, low, high) at `xs[i]`.
    pub fn banded(label: impl Into<String>, xs: &[f64], band: &[(f64, f64, f64)]) -> Self {
        assert_eq!(xs.len(), band.len(), "one x per band point");
        let points = xs
            .iter()
            .zip(band)
            .map(|(&x, &(mean, _, _))| (x, mean))
            .collect();
        Series {
            band: xs
                .iter()
                .zip(band)
                .map(|(&x, &(_, low, high))| (x, low, high))
                .collect(),
            ..Series::new(label, points)
        }
    }

    /// The same series with a dot at every point.
    pub fn with_markers(mut self) -> Self {
        self.markers = true;
        self
    }
}

impl LineChart {
    /// A linear chart with no series yet; add them with [`LineChart::with_series`].
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> Self {
        LineChart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_range: (0.0, 1.0),
            y_range: (0.0, 1.0),
            log_x: false,
            series: Vec::new(),
        }
    }

    pub fn with_ranges(mut self, x_range: (f64, f64), y_range: (f64, f64)) -> Self {
        self.x_range = x_range;
        self.y_range = y_range;
        self
    }

    pub fn with_log_x(mut self) -> Self {
        self.log_x = true;
        self
    }

    pub fn with_series(mut self, series: Series) -> Self {
        self.series.push(series);
        self
    }

    // ANCHOR: save_svg
    /// Write the chart to `path` as SVG. Errors name the path.
    pub fn save_svg(&self, path: &Path) -> Result<(), String> {
        let svg = self
            .to_svg()
            .map_err(|err| format!("cannot draw chart {}: {err}", path.display()))?;
        std::fs::write(path, svg)
            .map_err(|err| format!("cannot write chart {}: {err}", path.display()))
    }
    // ANCHOR_END: save_svg

    /// The chart as an SVG document. Drawing into a string first means a
    /// failed draw never leaves a half-written file behind.
    pub fn to_svg(&self) -> Result<String, String> {
        self.check()?;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, CHART_SIZE).into_drawing_area();
            root.fill(&WHITE).map_err(|err| err.to_string())?;
            let (x0, x1) = self.x_range;
            if self.log_x {
                self.draw(
                    &root,
                    (x0..x1).log_scale().with_key_points(log_ticks(x0, x1)),
                )?;
            } else {
                self.draw(&root, x0..x1)?;
            }
            root.present().map_err(|err| err.to_string())?;
        }
        Ok(svg)
    }

    /// Reject ranges that plotters would turn into NaN coordinates.
    fn check(&self) -> Result<(), String> {
        let (x0, x1) = self.x_range;
        let (y0, y1) = self.y_range;
        if !(x0 < x1 && y0 < y1) {
            return Err(format!("empty range x {x0}..{x1}, y {y0}..{y1}"));
        }
        if self.log_x && x0 <= 0.0 {
            return Err(format!("a log x axis needs x > 0, got x from {x0}"));
        }
        Ok(())
    }

    /// Axes, grid, lines and legend. Generic over the x coordinate so that
    /// the linear and the log chart share one code path.
    fn draw<X>(&self, root: &DrawingArea<SVGBackend, Shift>, x_coord: X) -> Result<(), String>
    where
        X: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
    {
        let (y0, y1) = self.y_range;
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, (FONT, 22).into_font().color(&INK))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d(x_coord, y0..y1)
            .map_err(|err| err.to_string())?;

        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .axis_desc_style((FONT, 17).into_font().color(&INK))
            .label_style((FONT, 15).into_font().color(&INK))
            .axis_style(GREY)
            .bold_line_style(GRID)
            .light_line_style(WHITE.mix(0.0)) // only one level of grid: less clutter
            .x_label_formatter(&|v| {
                if self.log_x {
                    log_tick_label(*v)
                } else {
                    tick_label(*v)
                }
            })
            .y_label_formatter(&|v| tick_label(*v))
            .draw()
            .map_err(|err| err.to_string())?;

        for (index, series) in self
            .series
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.band.is_empty())
        {
            let outline: Vec<(f64, f64)> = series
                .band
                .iter()
                .map(|&(x, low, _)| (x, low))
                .chain(series.band.iter().rev().map(|&(x, _, high)| (x, high)))
                .collect();
            chart
                .draw_series(std::iter::once(Polygon::new(
                    outline,
                    series_colour(index).mix(0.18).filled(),
                )))
                .map_err(|err| err.to_string())?;
        }
        for (index, series) in self.series.iter().enumerate() {
            let colour = series_colour(index);
            let line = LineSeries::new(series.points.iter().copied(), colour.stroke_width(2));
            chart
                .draw_series(line)
                .map_err(|err| err.to_string())?
                .label(series.label.as_str())
                .legend(move |(x, y)| legend_sample(x, y, colour));
            if series.markers {
                let dots = series
                    .points
                    .iter()
                    .map(|&p| Circle::new(p, 3, colour.filled()));
                chart.draw_series(dots).map_err(|err| err.to_string())?;
            }
        }

        if self.series.len() > 1 {
            chart
                .configure_series_labels()
                .position(self.legend_corner())
                .margin(10)
                .label_font((FONT, 15).into_font().color(&INK))
                .background_style(WHITE.mix(0.9))
                .border_style(GRID)
                .draw()
                .map_err(|err| err.to_string())?;
        }
        Ok(())
    }

    /// Put the legend where it hides the least data: of eight spots along
    /// the plot's edge, the one whose legend-sized patch holds the fewest
    /// samples of the drawn lines. Ties go to the earlier spot in a fixed
    /// order (corners first), which keeps the output stable.
    fn legend_corner(&self) -> SeriesLabelPosition {
        use SeriesLabelPosition::*;
        // (spot, horizontal place, vertical place), 0 = left/bottom, 1 = right/top.
        let spots = [
            (UpperRight, 1.0, 1.0),
            (UpperLeft, 0.0, 1.0),
            (LowerRight, 1.0, 0.0),
            (LowerLeft, 0.0, 0.0),
            (UpperMiddle, 0.5, 1.0),
            (LowerMiddle, 0.5, 0.0),
            (MiddleRight, 1.0, 0.5),
            (MiddleLeft, 0.0, 0.5),
        ];
        let (width, height) = self.legend_extent();
        let samples = self.line_samples();
        let covered = |h: f64, v: f64| {
            let (left, bottom) = (h * (1.0 - width), v * (1.0 - height));
            let (across, up) = (left..=left + width, bottom..=bottom + height);
            let inside = |(u, w): &&(f64, f64)| across.contains(u) && up.contains(w);
            samples.iter().filter(inside).count()
        };
        let best = spots.iter().min_by_key(|(_, h, v)| covered(*h, *v));
        best.map(|(spot, _, _)| spot.clone()).unwrap_or(UpperRight)
    }

    /// The legend box's rough width and height as fractions of the plot area
    /// (about 556 x 300 pixels), from the same text-width rule plotters uses.
    fn legend_extent(&self) -> (f64, f64) {
        let longest = self.series.iter().map(|s| s.label.len()).max().unwrap_or(0) as f64;
        let width = (60.0 + 7.0 * longest) / 556.0;
        let height = (30.0 + 18.0 * self.series.len() as f64) / 300.0;
        (width.min(1.0), height.min(1.0))
    }

    /// Points along every line in plot units, with extra points between the
    /// data points so that steep, sparsely sampled segments count too.
    fn line_samples(&self) -> Vec<(f64, f64)> {
        const STEPS: usize = 16;
        let mut samples = Vec::new();
        for series in &self.series {
            let units: Vec<(f64, f64)> = series
                .points
                .iter()
                .map(|&(x, y)| self.unit_position(x, y))
                .collect();
            for pair in units.windows(2) {
                let ((u0, v0), (u1, v1)) = (pair[0], pair[1]);
                for step in 0..STEPS {
                    let t = step as f64 / STEPS as f64;
                    samples.push((u0 + t * (u1 - u0), v0 + t * (v1 - v0)));
                }
            }
            samples.extend(units.last());
        }
        samples
    }

    /// Where a data point sits in the plot, from (0, 0) bottom left to (1, 1) top right.
    fn unit_position(&self, x: f64, y: f64) -> (f64, f64) {
        let (x0, x1) = self.x_range;
        let (y0, y1) = self.y_range;
        let u = if self.log_x {
            (x.ln() - x0.ln()) / (x1.ln() - x0.ln())
        } else {
            (x - x0) / (x1 - x0)
        };
        (u, (y - y0) / (y1 - y0))
    }
}

/// The short line drawn next to a legend label; plotters passes the left
/// middle of the sample's slot, which is 30 pixels wide by default. It is a
/// bare line even for series with markers: plotters' composed elements would
/// tie the legend to a `'static` backend, and the colour alone already
/// identifies the series.
fn legend_sample(x: i32, y: i32, colour: RGBColor) -> PathElement<(i32, i32)> {
    PathElement::new(vec![(x, y), (x + 22, y)], colour.stroke_width(2))
}

/// Tick labels with at most three decimals and no trailing zeros: `0.25`,
/// `10`, `0.001`, so that every axis of the book prints numbers one way.
pub fn tick_label(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    match text {
        "-0" => "0".to_string(),
        other => other.to_string(),
    }
}

/// Grid positions of a log axis: 1, 2, ..., 9 times each power of ten in
/// range, or only the powers themselves when the range spans more than three
/// decades. We list them ourselves because plotters' own list repeats every
/// power of ten, which prints its label twice.
pub fn log_ticks(low: f64, high: f64) -> Vec<f64> {
    let (first, last) = (low.log10().floor() as i32, high.log10().ceil() as i32);
    let multiples: &[f64] = if last - first > 3 {
        &[1.0]
    } else {
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    };
    let slack = 1e-9 * high;
    let decades = (first..=last).map(|exponent| 10f64.powi(exponent));
    let candidates = decades.flat_map(|power| multiples.iter().map(move |m| m * power));
    candidates
        .filter(|&v| v >= low - slack && v <= high + slack)
        .collect()
}

/// Labels for [`log_ticks`]: a label on every tick would crowd 7, 8, 9, 10
/// together, so only 1, 2, 3 and 5 times a power of ten are labelled; the
/// other ticks keep their grid line. Values below 0.001, which three
/// decimals would print as 0, are written as `2e-5`.
pub fn log_tick_label(value: f64) -> String {
    let mantissa = value / 10f64.powf(value.log10().floor());
    let nearest = mantissa.round();
    let labelled = (mantissa - nearest).abs() < 1e-6 && [1.0, 2.0, 3.0, 5.0].contains(&nearest);
    match (labelled, value < 1e-3) {
        (false, _) => String::new(),
        (true, true) => format!("{value:.0e}"),
        (true, false) => tick_label(value),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// p^H for a few p: the shape chapter 1 draws on a log axis.
    fn success_chart() -> LineChart {
        let mut chart = LineChart::new("Episode success p^H", "horizon H", "P(success)")
            .with_ranges((1.0, 50.0), (0.0, 1.0))
            .with_log_x();
        for p in [0.99, 0.95, 0.9, 0.8] {
            let points = (1..=50).map(|h| (h as f64, f64::powi(p, h))).collect();
            chart = chart.with_series(Series::new(format!("p = {p}"), points));
        }
        chart
    }

    fn temp_file(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("agentrl-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    /// Draw a figure twice into files and check the SVG bytes are equal
    /// (shared with the diagram tests).
    pub(crate) fn assert_same_svg_twice(tag: &str, draw: impl Fn(&std::path::Path)) {
        let (first, second) = (
            temp_file(&format!("{tag}-a.svg")),
            temp_file(&format!("{tag}-b.svg")),
        );
        draw(&first);
        draw(&second);
        let bytes = std::fs::read(&first).unwrap();
        assert!(bytes.starts_with(b"<svg"));
        assert_eq!(bytes, std::fs::read(&second).unwrap());
        for file in [&first, &second] {
            std::fs::remove_file(file).unwrap();
        }
        // Only succeeds once the folder is empty; another test may still use it.
        let _ = std::fs::remove_dir(first.parent().unwrap());
    }

    #[test]
    fn plot_is_byte_identical_across_runs() {
        assert_same_svg_twice("plot", |path| success_chart().save_svg(path).unwrap());
    }

    #[test]
    fn plot_has_title_labels_and_legend() {
        let svg = success_chart().to_svg().unwrap();
        for text in [
            "Episode success p^H",
            "horizon H",
            "P(success)",
            "p = 0.99",
            "p = 0.8",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        // One series alone gets no legend.
        let single = LineChart::new("t", "x", "y")
            .with_series(Series::new("only", vec![(0.0, 0.0), (1.0, 1.0)]));
        assert!(!single.to_svg().unwrap().contains(">only"));
    }

    #[test]
    fn plot_markers_add_circles() {
        let line = Series::new("s", vec![(0.1, 0.1), (0.5, 0.5), (0.9, 0.2)]);
        let plain = LineChart::new("t", "x", "y").with_series(line.clone());
        let dotted = LineChart::new("t", "x", "y").with_series(line.with_markers());
        let circles = |chart: &LineChart| chart.to_svg().unwrap().matches("<circle").count();
        assert_eq!(circles(&dotted), circles(&plain) + 3);
    }

    #[test]
    fn plot_legend_avoids_the_data() {
        // Decreasing curves fill the upper left, so the legend goes elsewhere.
        assert_ne!(
            success_chart().legend_corner(),
            SeriesLabelPosition::UpperLeft
        );
        let rising = LineChart::new("t", "x", "y")
            .with_series(Series::new(
                "a",
                (0..=20)
                    .map(|i| (i as f64 / 20.0, i as f64 / 20.0))
                    .collect(),
            ))
            .with_series(Series::new(
                "b",
                (0..=20).map(|i| (i as f64 / 20.0, 0.9)).collect(),
            ));
        assert_eq!(rising.legend_corner(), SeriesLabelPosition::LowerRight);
    }

    #[test]
    fn plot_errors_name_the_path() {
        let path = Path::new("/nonexistent-dir/agentrl/chart.svg");
        let err = success_chart().save_svg(path).unwrap_err();
        assert!(err.contains("/nonexistent-dir/agentrl/chart.svg"), "{err}");
        let bad = LineChart::new("t", "x", "y")
            .with_ranges((0.0, 10.0), (0.0, 1.0))
            .with_log_x();
        assert!(bad
            .save_svg(&temp_file("bad.svg"))
            .unwrap_err()
            .contains("log"));
    }

    #[test]
    fn plot_tick_labels_are_short() {
        assert_eq!(tick_label(10.0), "10");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(-0.0001), "0");
        assert_eq!(tick_label(2.6e-3), "0.003");
        let expected = [
            1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 20.0, 30.0, 40.0, 50.0,
        ];
        assert_eq!(log_ticks(1.0, 50.0), expected);
        assert_eq!(log_ticks(1.0, 1e5), [1.0, 10.0, 100.0, 1000.0, 1e4, 1e5]);
        let labels: Vec<String> = [1.0, 3.0, 4.0, 9.0, 10.0, 30.0, 40.0, 50.0]
            .map(log_tick_label)
            .to_vec();
        assert_eq!(labels, ["1", "3", "", "", "10", "30", "", "50"]);
        assert_eq!(log_tick_label(3.0 * 1e-5), "3e-5");
        assert_eq!(log_tick_label(0.02), "0.02");
    }
}
