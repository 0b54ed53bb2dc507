//! Draws a QR code as a standalone SVG document (decisions.md §4: the QR answer's `svg`).
//!
//! The `qrcode` crate computes the module matrix (byte mode, error correction M, the smallest
//! version that fits); we draw it: one `<path>` whose subpaths are the horizontal runs of dark
//! modules, inside a four-module quiet zone, scaled by `viewBox` so it prints crisply at any size.

use std::fmt::Write as _;

use qrcode::{Color, EcLevel, QrCode};

/// Width of the light border, in modules (ISO/IEC 18004 asks for four).
const QUIET_ZONE: usize = 4;
/// Rendered size of one module, in SVG user units (pixels when shown unscaled).
const MODULE_PX: usize = 8;

/// The SVG of `payload` as a QR code. A payload too long for any QR version (the EMVCo payload is
/// at most a few hundred bytes, far below the 2331-byte limit at level M) renders as an empty,
/// valid SVG rather than failing the request: the `payload` field is still the source of truth.
pub fn render(payload: &str) -> String {
    let Ok(code) = QrCode::with_error_correction_level(payload.as_bytes(), EcLevel::M) else {
        return svg_document(0, "");
    };
    let width = code.width();
    let colors = code.to_colors();
    let mut path = String::with_capacity(width * width);
    for (y, row) in colors.chunks(width.max(1)).enumerate() {
        let mut x = 0;
        while x < row.len() {
            if row.get(x) == Some(&Color::Dark) {
                let start = x;
                while row.get(x) == Some(&Color::Dark) {
                    x += 1;
                }
                // Writing to a String cannot fail.
                let _ = write!(
                    path,
                    "M{} {}h{}v1h-{}z",
                    start + QUIET_ZONE,
                    y + QUIET_ZONE,
                    x - start,
                    x - start
                );
            } else {
                x += 1;
            }
        }
    }
    svg_document(width, &path)
}

fn svg_document(modules: usize, path: &str) -> String {
    let side = modules + 2 * QUIET_ZONE;
    let pixels = side * MODULE_PX;
    format!(
        concat!(
            r#"<?xml version="1.0" encoding="UTF-8"?>"#,
            r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{px}" height="{px}" "#,
            r#"viewBox="0 0 {side} {side}" shape-rendering="crispEdges">"#,
            r##"<rect width="{side}" height="{side}" fill="#fff"/>"##,
            r##"<path fill="#000" d="{path}"/></svg>"##
        ),
        px = pixels,
        side = side,
        path = path
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn draws_every_dark_module_once_inside_the_quiet_zone() {
        let payload = "00020101021226230019walletd.local/wallet5204000053038865802YE6304ABCD";
        let svg = render(payload);
        assert!(svg.starts_with("<?xml"));
        assert!(svg.ends_with("</svg>"));
        let code = QrCode::with_error_correction_level(payload.as_bytes(), EcLevel::M).unwrap();
        let dark = code
            .to_colors()
            .iter()
            .filter(|c| **c == Color::Dark)
            .count();
        // Each subpath `M x y h n v1 h-n z` covers n modules.
        let drawn: usize = svg
            .split('M')
            .skip(1)
            .map(|sub| {
                let h = sub.split('h').nth(1).unwrap();
                h.split('v').next().unwrap().parse::<usize>().unwrap()
            })
            .sum();
        assert_eq!(drawn, dark);
        let side = code.width() + 2 * QUIET_ZONE;
        assert!(svg.contains(&format!(r#"viewBox="0 0 {side} {side}""#)));
    }
}
