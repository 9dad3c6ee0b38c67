//! serde_json's errors as lockstep's refusals state positions: a line and a column in
//! characters, and the message without serde_json's own position. Used by the job's REST
//! body and by a backup's meta files alike.

/// Where serde_json stopped in `input`, as a 1-based line and a 1-based column in
/// characters, as every other refusal counts them. serde_json counts a line's bytes, and
/// from 0 before its first one (an error right after a newline, or in an empty input, is at
/// its column 0), which names no character of the input.
pub(crate) fn json_position(e: &serde_json::Error, input: &[u8]) -> (usize, usize) {
    let line = e.line().max(1);
    let start: usize = input
        .split(|b| *b == b'\n')
        .take(line - 1)
        .map(|l| l.len() + 1)
        .sum();
    let rest = input.get(start..).unwrap_or_default();
    let read = &rest[..e.column().min(rest.len())];
    let column = String::from_utf8_lossy(read).chars().count().max(1);
    (line, column)
}

/// serde_json's message without its trailing " at line L column C": the position is
/// reported on its own, by [`json_position`].
pub(crate) fn json_message(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    full.strip_suffix(&suffix).unwrap_or(&full).to_owned()
}
