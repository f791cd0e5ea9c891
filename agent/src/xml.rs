//! A look at an XML file's shape before any parser reads it. roxmltree
//! (and hwloc's own reader after it) recurse once per nested element, so a
//! file nested 20,000 deep would overflow the stack and abort the agent;
//! this scan is a loop. It refuses elements nested deeper than
//! [`MAX_XML_DEPTH`] and a DTD internal subset (whose entities could expand
//! to more nesting; hwloc and nvidia-smi exports have none). It is no
//! validator: whatever it lets through, the parser still checks, and it
//! only ever over-counts what the parser would open.

/// Deepest element nesting accepted. hwloc exports nest about 20 deep
/// (machine, package, caches, core, PU; PCI bridges), nvidia-smi about 6.
pub const MAX_XML_DEPTH: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XmlShapeError {
    #[error("elements nested deeper than {limit} levels (line {line}); refused before parsing")]
    TooDeep { limit: usize, line: usize },
    #[error(
        "a DTD internal subset (line {line}) is not accepted \
         (hwloc and nvidia-smi exports have none)"
    )]
    InternalSubset { line: usize },
}

fn find(b: &[u8], from: usize, what: &[u8]) -> Option<usize> {
    b.get(from..)?
        .windows(what.len())
        .position(|w| w == what)
        .map(|p| from + p)
}

fn line_of(b: &[u8], at: usize) -> usize {
    1 + b[..at.min(b.len())].iter().filter(|&&c| c == b'\n').count()
}

/// The index of the `>` that ends the markup starting at `from`, skipping
/// quoted strings; `bracket_at` is set to the first `[` outside quotes.
fn markup_end(b: &[u8], from: usize, bracket_at: &mut Option<usize>) -> Option<usize> {
    let mut quote = None;
    for (i, &c) in b.iter().enumerate().skip(from) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, b'"' | b'\'') => quote = Some(c),
            (None, b'[') if bracket_at.is_none() => *bracket_at = Some(i),
            (None, b'>') => return Some(i),
            (None, _) => {}
        }
    }
    None
}

/// Checks the nesting depth of `text` against `limit` (see the module).
/// Unterminated markup ends the scan: the parser refuses it.
pub fn check_shape(text: &str, limit: usize) -> Result<(), XmlShapeError> {
    let b = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(lt) = b[i..].iter().position(|&c| c == b'<').map(|p| i + p) {
        let rest = &b[lt..];
        let end = if rest.starts_with(b"<!--") {
            find(b, lt + 4, b"-->").map(|e| e + 2)
        } else if rest.starts_with(b"<![CDATA[") {
            find(b, lt + 9, b"]]>").map(|e| e + 2)
        } else if rest.starts_with(b"<?") {
            find(b, lt + 2, b"?>").map(|e| e + 1)
        } else if rest.starts_with(b"<!") {
            let mut bracket = None;
            let end = markup_end(b, lt + 2, &mut bracket);
            if let Some(at) = bracket {
                return Err(XmlShapeError::InternalSubset {
                    line: line_of(b, at),
                });
            }
            end
        } else if rest.starts_with(b"</") {
            depth = depth.saturating_sub(1);
            markup_end(b, lt + 2, &mut None)
        } else {
            let end = markup_end(b, lt + 1, &mut None);
            if let Some(e) = end {
                if b[e - 1] != b'/' {
                    depth += 1;
                    if depth > limit {
                        return Err(XmlShapeError::TooDeep {
                            limit,
                            line: line_of(b, lt),
                        });
                    }
                }
            }
            end
        };
        match end {
            Some(e) => i = e + 1,
            None => return Ok(()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(n: usize) -> String {
        format!(
            "<?xml version=\"1.0\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n{}{}",
            "<a x=\"1>2\">".repeat(n),
            "</a>".repeat(n)
        )
    }

    #[test]
    fn depth_is_counted_and_refused_past_the_limit() {
        assert_eq!(check_shape(&nested(3), 3), Ok(()));
        assert_eq!(
            check_shape(&nested(4), 3),
            Err(XmlShapeError::TooDeep { limit: 3, line: 3 })
        );
        assert_eq!(check_shape(&nested(512), MAX_XML_DEPTH), Ok(()));
        assert!(check_shape(&nested(20_000), MAX_XML_DEPTH).is_err());
        // Siblings, empty elements, comments, CDATA and PIs do not nest.
        let flat = format!(
            "<r>{}</r>",
            "<a/><b></b><!-- <c> --><![CDATA[<d>]]><?pi <e>?>".repeat(1000)
        );
        assert_eq!(check_shape(&flat, 2), Ok(()));
    }

    #[test]
    fn an_internal_subset_is_refused() {
        let xml = "<?xml version=\"1.0\"?>\n<!DOCTYPE t [\n<!ENTITY e \"<a><a>\">\n]>\n<t>&e;</t>";
        assert_eq!(
            check_shape(xml, MAX_XML_DEPTH),
            Err(XmlShapeError::InternalSubset { line: 2 })
        );
        // A '[' inside a quoted system id is no subset.
        assert_eq!(
            check_shape("<!DOCTYPE t SYSTEM \"a[1].dtd\"><t/>", MAX_XML_DEPTH),
            Ok(())
        );
    }

    #[test]
    fn unterminated_markup_ends_the_scan() {
        assert_eq!(check_shape("<a><b x=\"", 1), Ok(()));
        assert_eq!(
            check_shape("<a><b><c x=\"", 1),
            Err(XmlShapeError::TooDeep { limit: 1, line: 1 })
        );
        assert_eq!(check_shape("<a><!-- ", 1), Ok(()));
        assert_eq!(check_shape("<a", 0), Ok(()));
    }
}
