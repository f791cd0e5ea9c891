//! What YAML text may be before a YAML parser sees it (kube's manifests,
//! the lab's scenario manifests): pure, a linear scan.

/// Unmatched `[` and `{` allowed before the YAML parser sees a text: far
/// above the deserializer's own limit (128), so only text it would refuse
/// anyway is refused here, in linear time.
pub const MAX_FLOW_NESTING: usize = 1_000;

/// Where `[`/`{` (not in a comment) first stand more than `limit` deep,
/// counted without regard to quoting: a count that overstates only for a
/// text with more unmatched brackets in its strings than the limit.
pub fn flow_too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    let mut depth = 0usize;
    for (l, line) in text.lines().enumerate() {
        let mut prev_space = true;
        for (c, ch) in line.chars().enumerate() {
            match ch {
                '#' if prev_space => break,
                '[' | '{' => {
                    depth += 1;
                    if depth > limit {
                        return Some((l + 1, c + 1));
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            prev_space = ch.is_whitespace();
        }
    }
    None
}
