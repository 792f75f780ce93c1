//! A small hand-written SVG line chart of Rss+Swap over time, one line per memory class, for
//! `syscatch mem --watch --plot FILE.svg`. Pure: samples in, SVG text out.

use std::fmt::Write;

/// One line of the chart: a label and one value (kB) per sample time.
pub struct Series<'a> {
    pub label: &'a str,
    pub values: Vec<u64>,
}

/// The plot area's size; the legend goes below it, one line per series, and the chart widens for a long label.
const PLOT_W: f64 = 720.0;
const PLOT_H: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 40.0;
const LEGEND_LINE: f64 = 16.0;
/// A generous width of one character at font-size 11 (sans-serif averages about 0.55 em; digits and capitals
/// are wider).
const CHAR_W: f64 = 7.0;
const COLORS: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// How far a legend line reaches from the plot's left edge: its swatch and its text.
fn legend_width(text: &str) -> f64 {
    14.0 + text.chars().count() as f64 * CHAR_W
}

/// A tick step of 1, 2 or 5 times a power of ten giving at most about 5 ticks up to `max`.
fn nice_step(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

/// Renders the chart. `times` are seconds since the first sample; series shorter than `times` are drawn over
/// the samples they have. Series that stay at zero are left out of the chart and the legend.
pub fn plot_svg(title: &str, times: &[f64], series: &[Series]) -> String {
    let shown: Vec<(usize, &Series)> =
        series.iter().enumerate().filter(|(_, s)| s.values.iter().any(|&v| v > 0)).collect();
    let t_max = times.iter().copied().fold(0.0f64, f64::max).max(1e-9);
    let mib = |kb: u64| kb as f64 / 1024.0;
    let v_max = shown.iter().flat_map(|(_, s)| s.values.iter().map(|&v| mib(v))).fold(0.0f64, f64::max);
    let y_step = nice_step(v_max);
    let y_top = ((v_max / y_step).ceil() * y_step).max(y_step);
    let x_step = nice_step(t_max);
    let legend: Vec<String> = shown
        .iter()
        .map(|(_, ser)| format!("{} ({:.1} MiB)", ser.label, mib(ser.values.last().copied().unwrap_or(0))))
        .collect();
    let widest = legend.iter().map(|l| legend_width(l)).fold(0.0f64, f64::max);
    let w = PLOT_W.max(LEFT + widest + RIGHT);
    let h = PLOT_H + legend.len() as f64 * LEGEND_LINE + 8.0;
    let pw = PLOT_W - LEFT - RIGHT;
    let ph = PLOT_H - TOP - BOTTOM;
    let x = |t: f64| LEFT + t / t_max * pw;
    let y = |v: f64| TOP + ph - v / y_top * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="{w:.0}" height="{h:.0}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{LEFT}" y="18" font-size="13">{}</text>"#, escape(title));
    let ticks = |top: f64, step: f64| (0..=((top / step).round() as usize).min(20)).map(move |k| k as f64 * step);
    let decimals = |step: f64| (-step.log10().floor()).clamp(0.0, 6.0) as usize;
    let (yd, xd) = (decimals(y_step), decimals(x_step));
    for v in ticks(y_top, y_step) {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.yd$} MiB</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            yy + 4.0
        );
    }
    for t in ticks(t_max, x_step).filter(|&t| t <= t_max * 1.0001) {
        let xx = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{TOP}" x2="{xx:.1}" y2="{:.1}" stroke="#eee"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{t:.xd$}s</text>"##,
            TOP + ph,
            TOP + ph + 15.0
        );
    }
    let _ = writeln!(s, r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time (s); Rss+Swap by class</text>"#,
        LEFT + pw / 2.0,
        PLOT_H - 6.0
    );
    for (k, (i, ser)) in shown.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> =
            times.iter().zip(&ser.values).map(|(&t, &val)| format!("{:.1},{:.1}", x(t), y(mib(val)))).collect();
        let _ = writeln!(s, r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#, pts.join(" "));
        let ly = PLOT_H + 4.0 + (k + 1) as f64 * LEGEND_LINE - 4.0;
        let _ = writeln!(
            s,
            r#"<rect x="{LEFT}" y="{:.1}" width="10" height="10" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            ly - 9.0,
            LEFT + 14.0,
            ly,
            escape(&legend[k]),
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_shown_series_only() {
        let times = [0.0, 1.0, 2.0];
        let series = [
            Series { label: "anon <large>", values: vec![1024, 2048, 4096] },
            Series { label: "gpu", values: vec![0, 0, 0] },
        ];
        let svg = plot_svg("pid 1 & co", &times, &series);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(svg.contains("anon &lt;large&gt; (4.0 MiB)"));
        assert!(svg.contains("pid 1 &amp; co"));
        assert!(!svg.contains("gpu"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    /// The legend fits: below the plot, every line inside the chart, however long its label (it was cut off at
    /// the right edge).
    #[test]
    fn the_legend_fits_in_the_chart() {
        let attr = |svg: &str, tag: &str, name: &str| -> f64 {
            let at = svg.find(tag).unwrap();
            let rest = &svg[at..];
            let v = rest.split(&format!(" {name}=\"")).nth(1).unwrap();
            v[..v.find('"').unwrap()].parse().unwrap()
        };
        let long = "anon <large> mapped by libucs.so.0 (ucs_mpool_grow) in the registration cache of a worker";
        let series = [
            Series { label: long, values: vec![1024, 2048, 4096] },
            Series { label: "heap", values: vec![10, 20, 30] },
        ];
        let svg = plot_svg("pid 1", &[0.0, 1.0, 2.0], &series);
        let (w, h) = (attr(&svg, "<svg", "width"), attr(&svg, "<svg", "height"));
        let texts: Vec<&str> = svg.lines().filter(|l| l.contains("(4.0 MiB)") || l.contains("(0.0 MiB)")).collect();
        assert_eq!(texts.len(), 2, "{svg}");
        for line in texts {
            let x = attr(line, "<text", "x");
            let y = attr(line, "<text", "y");
            let text = &line[line.rfind("\">").unwrap() + 2..line.rfind("</text>").unwrap()];
            let chars = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").chars().count();
            assert!(x + chars as f64 * 6.0 <= w, "{line} does not fit in {w}");
            assert!(y <= h && y > PLOT_H, "{line}: below the plot, inside {h}");
        }
        // A short legend keeps the chart's usual width.
        let short = plot_svg("", &[0.0, 1.0], &[Series { label: "heap", values: vec![1, 2] }]);
        assert_eq!(attr(&short, "<svg", "width"), PLOT_W);
    }

    #[test]
    fn degenerate_inputs() {
        for svg in [
            plot_svg("", &[], &[]),
            plot_svg("", &[0.0], &[Series { label: "x", values: vec![5] }]),
            plot_svg("", &[0.0, 1.0], &[Series { label: "x", values: vec![u64::MAX] }]),
        ] {
            assert!(svg.ends_with("</svg>\n"));
            assert!(!svg.contains("NaN"));
        }
    }
}
