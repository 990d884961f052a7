//! Output caps with explicit markers (spec 50 §4.1, §4.2, §4.5). Limits count chars; 0 = off.

/// Keep head and tail around `\n... [middle truncated: {skipped} chars skipped] ...\n`; the
/// result never exceeds `max_chars` (a limit smaller than the marker falls back to a head cut).
pub fn middle_truncate(output: &str, max_chars: usize) -> String {
    let total = output.chars().count();
    if max_chars == 0 || total <= max_chars {
        return output.to_owned();
    }
    // The marker's length depends on the skipped count, which depends on the marker's length:
    // size it with the total (an upper bound on `skipped`).
    let marker_len = format!("\n... [middle truncated: {total} chars skipped] ...\n")
        .chars()
        .count();
    if max_chars <= marker_len {
        return output.chars().take(max_chars).collect();
    }
    let keep = max_chars - marker_len;
    let head = keep / 2;
    let tail = keep - head;
    let skipped = total - head - tail;
    let head_s: String = output.chars().take(head).collect();
    let tail_s: String = output.chars().skip(total - tail).collect();
    format!("{head_s}\n... [middle truncated: {skipped} chars skipped] ...\n{tail_s}")
}

/// Keep the head, then `\n... [truncated: showing first {kept} of {total} chars. {hint}] ...`;
/// the result never exceeds `max_chars`.
pub fn head_truncate(output: &str, max_chars: usize, hint: &str) -> String {
    let total = output.chars().count();
    if max_chars == 0 || total <= max_chars {
        return output.to_owned();
    }
    let marker = |kept: usize| {
        format!("\n... [truncated: showing first {kept} of {total} chars. {hint}] ...")
    };
    let marker_len = marker(max_chars).chars().count();
    if max_chars <= marker_len {
        return output.chars().take(max_chars).collect();
    }
    let kept = max_chars - marker_len;
    let head: String = output.chars().take(kept).collect();
    format!("{head}{}", marker(kept))
}

/// read_file's hint.
pub const READ_FILE_HINT: &str = "Use start_line/end_line to read a specific range";
/// ls's hint.
pub const LS_HINT: &str = "Use a more specific path to see fewer results";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn middle_truncation_keeps_head_and_tail_within_the_limit() {
        let s: String = "x".repeat(500) + &"y".repeat(500);
        let out = middle_truncate(&s, 200);
        assert!(out.chars().count() <= 200);
        assert!(out.starts_with('x') && out.ends_with('y'));
        let kept = out.chars().filter(|c| *c == 'x' || *c == 'y').count();
        assert!(out.contains(&format!(
            "[middle truncated: {} chars skipped]",
            1000 - kept
        )));
        assert_eq!(middle_truncate("short", 200), "short");
        assert_eq!(middle_truncate(&s, 0), s);
        assert_eq!(middle_truncate(&s, 10).chars().count(), 10);
    }

    #[test]
    fn middle_marker_counts_exactly_what_was_dropped() {
        let s: String = "x".repeat(1000);
        let out = middle_truncate(&s, 300);
        let kept = out.chars().filter(|c| *c == 'x').count();
        assert!(out.contains(&format!(
            "[middle truncated: {} chars skipped]",
            1000 - kept
        )));
    }

    #[test]
    fn head_truncation() {
        let s = "y".repeat(1000);
        let out = head_truncate(&s, 200, READ_FILE_HINT);
        assert!(out.chars().count() <= 200);
        let kept = out.chars().filter(|c| *c == 'y').count();
        assert!(out.ends_with(&format!(
            "[truncated: showing first {kept} of 1000 chars. Use start_line/end_line to read a specific range] ..."
        )));
        assert_eq!(head_truncate(&s, 0, LS_HINT), s);
    }
}
