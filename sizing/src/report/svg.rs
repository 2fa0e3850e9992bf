//! Charts as inline SVG strings: line charts (linear or log axes) and grouped bar
//! charts. Hand-built so the report is one self-contained page with no JavaScript and
//! no network, and the tool pulls in no plotting library.

use std::fmt::Write;

/// Width of every chart, px.
const WIDTH: f64 = 720.0;
/// Height of every chart, px.
const HEIGHT: f64 = 330.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 210.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 48.0;
/// Colours that stay apart for the colour-blind (Okabe–Ito), then greys.
const PALETTE: [&str; 10] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
    "#999999", "#666666",
];

/// One line.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
    /// Dashed (for a second measure of the same thing, e.g. p50 next to p99).
    pub dashed: bool,
}

/// A line chart.
#[derive(Debug, Clone, Default)]
pub struct LineChart {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// Horizontal reference lines (label, y).
    pub hlines: Vec<(String, f64)>,
    /// Draw y = x (offered vs acknowledged).
    pub diagonal: bool,
    /// Start the y axis at zero (linear axes).
    pub y_from_zero: bool,
}

/// XML-escapes text.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A tick label: `1.2M`, `250k`, `45`, `0.5`.
pub fn short(value: f64) -> String {
    let a = value.abs();
    let (v, suffix) = if a >= 1e9 {
        (value / 1e9, "G")
    } else if a >= 1e6 {
        (value / 1e6, "M")
    } else if a >= 1e3 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    let text = if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{text}{suffix}")
}

/// About five round ticks covering `[lo, hi]`.
fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| span / s <= 6.0)
        .unwrap_or(magnitude * 10.0);
    let mut ticks = Vec::new();
    let mut t = (lo / step).ceil() * step;
    while t <= hi + step * 1e-9 && ticks.len() < 12 {
        ticks.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    ticks
}

/// Powers of ten (with 2 and 5 between when few) covering `[lo, hi]`, both > 0.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let mut ticks = Vec::new();
    for e in a..=b {
        let base = 10f64.powi(e);
        let steps: &[f64] = if b - a <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
        for m in steps {
            let t = base * m;
            if t >= lo * 0.999 && t <= hi * 1.001 {
                ticks.push(t);
            }
        }
    }
    ticks
}

/// Maps data to pixels on one axis.
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    from: f64,
    to: f64,
}

impl Axis {
    fn new(values: &[f64], log: bool, from_zero: bool, from: f64, to: f64) -> Axis {
        let usable: Vec<f64> = values
            .iter()
            .copied()
            .filter(|v| v.is_finite() && (!log || *v > 0.0))
            .collect();
        let mut lo = usable.iter().copied().fold(f64::INFINITY, f64::min);
        let mut hi = usable.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() {
            (lo, hi) = if log { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        if log {
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil().max(lo.log10() + 1.0));
        } else {
            if from_zero {
                lo = lo.min(0.0);
            }
            if hi - lo < 1e-12 {
                hi = lo + lo.abs().max(1.0);
            }
            let ticks = linear_ticks(lo, hi);
            let step = if ticks.len() > 1 {
                ticks[1] - ticks[0]
            } else {
                hi - lo
            };
            lo = (lo / step).floor() * step;
            hi = (hi / step).ceil() * step;
        }
        Axis {
            lo,
            hi,
            log,
            from,
            to,
        }
    }

    fn px(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        self.from + f.clamp(-0.02, 1.02) * (self.to - self.from)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            log_ticks(self.lo, self.hi)
        } else {
            linear_ticks(self.lo, self.hi)
        }
    }
}

fn frame(out: &mut String, title: &str, x_label: &str, y_label: &str) {
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{t}"><rect width="100%" height="100%" fill="#fff"/><text x="{LEFT}" y="20" font-size="14" font-weight="bold">{t}</text><text x="{x}" y="{y}" font-size="12" text-anchor="middle">{xl}</text><text transform="translate(16 {ym}) rotate(-90)" font-size="12" text-anchor="middle">{yl}</text>"##,
        t = escape(title),
        x = LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        y = HEIGHT - 10.0,
        xl = escape(x_label),
        ym = TOP + (HEIGHT - TOP - BOTTOM) / 2.0,
        yl = escape(y_label),
    );
}

fn legend(out: &mut String, index: usize, name: &str, dashed: bool) {
    let y = TOP + 8.0 + index as f64 * 18.0;
    let x = WIDTH - RIGHT + 14.0;
    let _ = write!(
        out,
        r#"<line x1="{x}" y1="{y}" x2="{x2}" y2="{y}" stroke="{c}" stroke-width="2.5"{d}/><text x="{tx}" y="{ty}" font-size="11">{n}</text>"#,
        x2 = x + 22.0,
        c = PALETTE[index % PALETTE.len()],
        d = if dashed {
            r#" stroke-dasharray="5 3""#
        } else {
            ""
        },
        tx = x + 28.0,
        ty = y + 4.0,
        n = escape(name),
    );
}

impl LineChart {
    /// The chart as an `<svg>` element.
    pub fn to_svg(&self) -> String {
        let mut out = String::new();
        frame(&mut out, &self.title, &self.x_label, &self.y_label);
        let xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        let mut ys: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .collect();
        ys.extend(self.hlines.iter().map(|h| h.1));
        if self.diagonal {
            ys.extend(xs.iter().copied());
        }
        let x = Axis::new(&xs, self.log_x, !self.log_x, LEFT, WIDTH - RIGHT);
        let y = Axis::new(&ys, self.log_y, self.y_from_zero, HEIGHT - BOTTOM, TOP);
        for t in x.ticks() {
            let px = x.px(t);
            let _ = write!(
                out,
                r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{b}" stroke="#eee"/><text x="{px:.1}" y="{ty}" font-size="11" text-anchor="middle">{l}</text>"##,
                b = HEIGHT - BOTTOM,
                ty = HEIGHT - BOTTOM + 15.0,
                l = short(t)
            );
        }
        for t in y.ticks() {
            let py = y.px(t);
            let _ = write!(
                out,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{r}" y2="{py:.1}" stroke="#eee"/><text x="{tx}" y="{ty:.1}" font-size="11" text-anchor="end">{l}</text>"##,
                r = WIDTH - RIGHT,
                tx = LEFT - 6.0,
                ty = py + 4.0,
                l = short(t)
            );
        }
        let _ = write!(
            out,
            r##"<rect x="{LEFT}" y="{TOP}" width="{w}" height="{h}" fill="none" stroke="#888"/>"##,
            w = WIDTH - LEFT - RIGHT,
            h = HEIGHT - TOP - BOTTOM
        );
        if self.diagonal && !xs.is_empty() {
            let (lo, hi) = (x.lo.max(y.lo), x.hi.min(y.hi));
            let _ = write!(
                out,
                r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#bbb" stroke-dasharray="2 4"/>"##,
                x.px(lo),
                y.px(lo),
                x.px(hi),
                y.px(hi)
            );
        }
        for (label, value) in &self.hlines {
            let py = y.px(*value);
            let _ = write!(
                out,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{r}" y2="{py:.1}" stroke="#c00" stroke-dasharray="6 3"/><text x="{tx}" y="{ty:.1}" font-size="11" fill="#c00" text-anchor="end">{l}</text>"##,
                r = WIDTH - RIGHT,
                tx = WIDTH - RIGHT - 4.0,
                ty = py - 4.0,
                l = escape(label)
            );
        }
        for (i, s) in self.series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            let points: Vec<String> = s
                .points
                .iter()
                .filter(|(a, b)| a.is_finite() && b.is_finite() && (!self.log_y || *b > 0.0))
                .map(|(a, b)| format!("{:.1},{:.1}", x.px(*a), y.px(*b)))
                .collect();
            let _ = write!(
                out,
                r#"<polyline class="series" fill="none" stroke="{colour}" stroke-width="2"{d} points="{p}"/>"#,
                d = if s.dashed {
                    r#" stroke-dasharray="5 3""#
                } else {
                    ""
                },
                p = points.join(" ")
            );
            for p in &points {
                let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = write!(
                    out,
                    r#"<circle cx="{px}" cy="{py}" r="2.5" fill="{colour}"/>"#
                );
            }
            legend(&mut out, i, &s.name, s.dashed);
        }
        out.push_str("</svg>");
        out
    }
}

/// Grouped bars: for each category, one bar per series.
#[derive(Debug, Clone, Default)]
pub struct BarChart {
    /// Title.
    pub title: String,
    /// Y axis label.
    pub y_label: String,
    /// Categories along x.
    pub categories: Vec<String>,
    /// (legend, one value per category).
    pub series: Vec<(String, Vec<Option<f64>>)>,
}

impl BarChart {
    /// The chart as an `<svg>` element.
    pub fn to_svg(&self) -> String {
        let mut out = String::new();
        frame(&mut out, &self.title, "", &self.y_label);
        let values: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.1.iter().flatten().copied())
            .collect();
        let y = Axis::new(&values, false, true, HEIGHT - BOTTOM, TOP);
        for t in y.ticks() {
            let py = y.px(t);
            let _ = write!(
                out,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{r}" y2="{py:.1}" stroke="#eee"/><text x="{tx}" y="{ty:.1}" font-size="11" text-anchor="end">{l}</text>"##,
                r = WIDTH - RIGHT,
                tx = LEFT - 6.0,
                ty = py + 4.0,
                l = short(t)
            );
        }
        let n = self.categories.len().max(1) as f64;
        let group_w = (WIDTH - LEFT - RIGHT) / n;
        let bar_w = group_w * 0.8 / self.series.len().max(1) as f64;
        for (c, category) in self.categories.iter().enumerate() {
            let gx = LEFT + c as f64 * group_w;
            let _ = write!(
                out,
                r#"<text x="{x:.1}" y="{y}" font-size="11" text-anchor="middle">{l}</text>"#,
                x = gx + group_w / 2.0,
                y = HEIGHT - BOTTOM + 15.0,
                l = escape(category)
            );
            for (s, (_, vals)) in self.series.iter().enumerate() {
                let Some(v) = vals.get(c).copied().flatten() else {
                    continue;
                };
                let (top, base) = (y.px(v), y.px(0.0));
                let bx = gx + group_w * 0.1 + s as f64 * bar_w;
                let _ = write!(
                    out,
                    r#"<rect class="bar" x="{bx:.1}" y="{top:.1}" width="{w:.1}" height="{h:.1}" fill="{c}"/><text x="{tx:.1}" y="{ty:.1}" font-size="10" text-anchor="middle">{l}</text>"#,
                    w = (bar_w - 2.0).max(1.0),
                    h = (base - top).max(0.0),
                    c = PALETTE[s % PALETTE.len()],
                    tx = bx + bar_w / 2.0,
                    ty = top - 3.0,
                    l = short(v)
                );
            }
        }
        for (s, (name, _)) in self.series.iter().enumerate() {
            legend(&mut out, s, name, false);
        }
        out.push_str("</svg>");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_chart_draws_every_series_and_escapes_text() {
        let chart = LineChart {
            title: "offered <vs> acked".into(),
            x_label: "offered rows/s".into(),
            y_label: "acked rows/s".into(),
            series: vec![
                Series {
                    name: "a & b".into(),
                    points: vec![(1e4, 1e4), (2e4, 1.9e4)],
                    dashed: false,
                },
                Series {
                    name: "c".into(),
                    points: vec![(1e4, 9e3), (f64::NAN, 1.0)],
                    dashed: true,
                },
            ],
            diagonal: true,
            hlines: vec![("limit".into(), 15_000.0)],
            ..LineChart::default()
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("offered &lt;vs&gt; acked"));
        assert!(svg.contains("a &amp; b"));
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn log_axes_skip_non_positive_values() {
        let chart = LineChart {
            series: vec![Series {
                name: "p99".into(),
                points: vec![(1.0, 0.0), (2.0, 50.0), (3.0, 5000.0)],
                dashed: false,
            }],
            log_y: true,
            ..LineChart::default()
        };
        let svg = chart.to_svg();
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(svg.contains(">1k<") || svg.contains(">10k<"), "{svg}");
    }

    #[test]
    fn a_bar_chart_draws_one_bar_per_known_value() {
        let chart = BarChart {
            title: "bytes per row".into(),
            y_label: "bytes".into(),
            categories: vec!["msgpack".into(), "lp".into()],
            series: vec![
                ("wal".into(), vec![Some(38.6), None]),
                ("parquet".into(), vec![Some(5.3), Some(5.4)]),
            ],
        };
        assert_eq!(chart.to_svg().matches(r#"class="bar""#).count(), 3);
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(
            linear_ticks(0.0, 100.0),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        assert_eq!(log_ticks(1.0, 1000.0), vec![1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(short(1_250_000.0), "1.25M");
        assert_eq!(short(250_000.0), "250k");
        assert_eq!(short(0.5), "0.5");
    }
}
