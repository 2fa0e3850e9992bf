//! The report as a list of blocks (headings, paragraphs, tables, charts), rendered
//! twice: to Markdown (charts left out, pointing to the HTML) and to one
//! self-contained HTML page (charts inline as SVG, styles inline, no scripts).

use std::fmt::Write;

use super::svg::escape;

/// One piece of the report.
#[derive(Debug, Clone)]
pub enum Block {
    /// A heading of level 1–3.
    Heading(u8, String),
    /// A paragraph (plain text; `code` in backticks is kept as is).
    Para(String),
    /// A bulleted list.
    List(Vec<String>),
    /// A table: header and rows.
    Table(Vec<String>, Vec<Vec<String>>),
    /// A chart: its title (for Markdown) and its SVG.
    Chart(String, String),
}

/// Markdown: GitHub tables, charts named but not drawn.
pub fn markdown(blocks: &[Block]) -> String {
    let mut out = String::new();
    for block in blocks {
        match block {
            Block::Heading(level, text) => {
                let _ = writeln!(out, "{} {text}\n", "#".repeat(*level as usize));
            }
            Block::Para(text) => {
                let _ = writeln!(out, "{text}\n");
            }
            Block::List(items) => {
                for item in items {
                    let _ = writeln!(out, "- {item}");
                }
                out.push('\n');
            }
            Block::Table(head, rows) => {
                let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
                let _ = writeln!(
                    out,
                    "| {} |",
                    head.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | ")
                );
                let _ = writeln!(out, "|{}", "---|".repeat(head.len()));
                for row in rows {
                    let _ = writeln!(
                        out,
                        "| {} |",
                        row.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
                    );
                }
                out.push('\n');
            }
            Block::Chart(title, _) => {
                let _ = writeln!(out, "*Chart: {title} (see report.html).*\n");
            }
        }
    }
    out
}

/// Backticked spans as `<code>`, the rest escaped.
fn inline(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", escape(part));
        } else {
            out.push_str(&escape(part));
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}\
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}svg.chart{display:block;margin:0.5em 0 1.5em;max-width:100%;height:auto;border:1px solid #eee}\
code{background:#f3f3f3;padding:0 3px}h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ddd}";

/// Whether a cell reads as a number (right-aligned).
fn numeric(cell: &str) -> bool {
    let t = cell
        .trim()
        .trim_end_matches([' ', '%', 's'])
        .replace([',', '.', '-', '+'], "");
    !t.is_empty() && t.chars().all(|c| c.is_ascii_digit())
}

/// One HTML page.
pub fn html(title: &str, blocks: &[Block]) -> String {
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n",
        escape(title)
    );
    for block in blocks {
        match block {
            Block::Heading(level, text) => {
                let _ = writeln!(out, "<h{level}>{}</h{level}>", inline(text));
            }
            Block::Para(text) => {
                let _ = writeln!(out, "<p>{}</p>", inline(text));
            }
            Block::List(items) => {
                out.push_str("<ul>");
                for item in items {
                    let _ = write!(out, "<li>{}</li>", inline(item));
                }
                out.push_str("</ul>\n");
            }
            Block::Table(head, rows) => {
                out.push_str("<table><tr>");
                for h in head {
                    let _ = write!(out, "<th>{}</th>", inline(h));
                }
                out.push_str("</tr>");
                for row in rows {
                    out.push_str("<tr>");
                    for c in row {
                        let class = if numeric(c) { " class=\"n\"" } else { "" };
                        let _ = write!(out, "<td{class}>{}</td>", inline(c));
                    }
                    out.push_str("</tr>");
                }
                out.push_str("</table>\n");
            }
            Block::Chart(_, svg) => {
                out.push_str(svg);
                out.push('\n');
            }
        }
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_renderings_carry_the_same_table() {
        let blocks = vec![
            Block::Heading(1, "Report".into()),
            Block::Para("see `report.json`".into()),
            Block::Table(
                vec!["a".into(), "b".into()],
                vec![vec!["1,000".into(), "x|y".into()]],
            ),
            Block::Chart("offered".into(), "<svg></svg>".into()),
        ];
        let md = markdown(&blocks);
        assert!(md.contains("| a | b |\n|---|---|\n| 1,000 | x\\|y |"));
        assert!(md.contains("*Chart: offered (see report.html).*"));
        let page = html("t", &blocks);
        assert!(page.contains("<code>report.json</code>"));
        assert!(page.contains("<td class=\"n\">1,000</td><td>x|y</td>"));
        assert!(page.contains("<svg></svg>"));
        assert!(!page.contains("<script"));
    }
}
