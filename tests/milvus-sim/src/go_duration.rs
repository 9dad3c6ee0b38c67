//! Go's `time.ParseDuration`, because Milvus reads the `timeout` import option with it and the
//! topology file uses the same strings for stage durations ("50ms", "1.5h", "1h30m").

use std::time::Duration;

/// A duration string Go would refuse, with Go's own wording (`time: invalid duration "x"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("time: {kind} \"{input}\"")]
pub struct GoDurationError {
    kind: &'static str,
    input: String,
}

/// A parsed Go duration: Go allows a sign, and Milvus adds a negative timeout to "now".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoDuration {
    Forward(Duration),
    Backward(Duration),
}

impl GoDuration {
    /// The duration clamped at zero: a negative duration is already over.
    pub fn clamped(self) -> Duration {
        match self {
            GoDuration::Forward(d) => d,
            GoDuration::Backward(_) => Duration::ZERO,
        }
    }
}

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parses `s` as Go's `time.ParseDuration` does: an optional sign, then one or more
/// `<decimal><unit>` pairs; `"0"` alone is allowed.
pub fn parse(s: &str) -> Result<GoDuration, GoDurationError> {
    let invalid = |kind: &'static str| GoDurationError {
        kind,
        input: s.to_owned(),
    };
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(GoDuration::Forward(Duration::ZERO));
    }
    if rest.is_empty() {
        return Err(invalid("invalid duration"));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..digits_end];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(invalid("invalid duration"));
        }
        rest = &rest[digits_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        if unit.is_empty() {
            return Err(invalid("missing unit in duration"));
        }
        let scale = unit_nanos(unit).ok_or_else(|| invalid("unknown unit in duration"))?;
        rest = &rest[unit_end..];
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid("invalid duration"))?
        };
        let mut frac_nanos: u128 = 0;
        let mut divisor: u128 = 1;
        for digit in frac.bytes().take(18) {
            frac_nanos = frac_nanos * 10 + u128::from(digit - b'0');
            divisor *= 10;
        }
        total = whole
            .checked_mul(scale)
            .and_then(|w| w.checked_add(frac_nanos * scale / divisor))
            .and_then(|t| t.checked_add(total))
            .filter(|t| *t <= i64::MAX as u128)
            .ok_or_else(|| invalid("invalid duration"))?;
    }
    let nanos = u64::try_from(total).expect("total is bounded by i64::MAX above");
    let duration = Duration::from_nanos(nanos);
    Ok(if negative {
        GoDuration::Backward(duration)
    } else {
        GoDuration::Forward(duration)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fwd(s: &str) -> Duration {
        match parse(s).expect("valid duration") {
            GoDuration::Forward(d) => d,
            GoDuration::Backward(d) => panic!("{s} parsed as negative {d:?}"),
        }
    }

    #[test]
    fn parses_what_go_parses() {
        assert_eq!(fwd("0"), Duration::ZERO);
        assert_eq!(fwd("300s"), Duration::from_secs(300));
        assert_eq!(fwd("1.5h"), Duration::from_secs(5400));
        assert_eq!(fwd("1h30m"), Duration::from_secs(5400));
        assert_eq!(fwd("50ms"), Duration::from_millis(50));
        assert_eq!(fwd("2us"), Duration::from_micros(2));
        assert_eq!(fwd(".5s"), Duration::from_millis(500));
        assert_eq!(
            parse("-2s").expect("negative is valid"),
            GoDuration::Backward(Duration::from_secs(2))
        );
    }

    #[test]
    fn refuses_with_go_messages() {
        assert_eq!(
            parse("abc").expect_err("no number").to_string(),
            "time: invalid duration \"abc\""
        );
        assert_eq!(
            parse("10").expect_err("no unit").to_string(),
            "time: missing unit in duration \"10\""
        );
        assert_eq!(
            parse("10d").expect_err("bad unit").to_string(),
            "time: unknown unit in duration \"10d\""
        );
        assert!(parse("").is_err());
    }
}
