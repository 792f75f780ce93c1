//! The one duration grammar, shared by the command line and probe scripts: a decimal number and a unit.

use std::time::Duration;

/// A duration that does not parse; each holds the text as given (trimmed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("bad duration `{0}`: expected a number and a unit (500ms, 1.5s, 2m, 1h)")]
    Syntax(String),
    #[error("bad duration `{text}`: unknown unit `{unit}` (use ns, us, ms, s, m or h)")]
    Unit { text: String, unit: String },
    #[error("bad duration `{0}`: too long")]
    TooLong(String),
    #[error("bad duration `{0}`: must be more than zero")]
    Zero(String),
}

/// Parses `500ms`, `1.5s`, `2m`, `1h`, `250us`, `10ns`, or a plain number of seconds. More than zero.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let s = text.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let bad = || DurationError::Syntax(s.to_string());
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() || (num.contains('.') && frac.is_empty()) || frac.contains('.') {
        return Err(bad());
    }
    let unit_ns: u128 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(DurationError::Unit { text: s.to_string(), unit: unit.to_string() }),
    };
    // Exact decimal arithmetic in nanoseconds: `7ns` and `1.5s` must print back as they were written.
    let too_long = || DurationError::TooLong(s.to_string());
    let whole: u128 = int.parse().map_err(|_| too_long())?;
    let mut nanos = whole.checked_mul(unit_ns).ok_or_else(too_long)?;
    let mut scale = unit_ns;
    for digit in frac.bytes().take(30) {
        scale /= 10;
        nanos += u128::from(digit - b'0') * scale;
    }
    if nanos > 1_000_000_000 * 1_000_000_000 {
        return Err(too_long());
    }
    let d = Duration::from_nanos(u64::try_from(nanos).map_err(|_| too_long())?);
    if d.is_zero() {
        return Err(DurationError::Zero(s.to_string()));
    }
    Ok(d)
}

/// A start or end offset into a trace (`--from 0`, `--to 15s`): a duration, or zero.
pub fn parse_offset(text: &str) -> Result<Duration, DurationError> {
    match text.trim() {
        "0" | "0s" => Ok(Duration::ZERO),
        t => parse_duration(t),
    }
}

/// A growth rate that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad rate `{0}`: expected a size per time, such as 10MiB/min, 500KiB/s, 1GB/h (sizes B, KiB, MiB, GiB, KB, MB, GB)"
)]
pub struct RateError(pub String);

/// Parses a growth rate such as `10MiB/min`, `500KiB/s`, `1GB/h` into bytes per minute. More than zero.
pub fn parse_rate(text: &str) -> Result<f64, RateError> {
    let s = text.trim();
    let bad = || RateError(s.to_string());
    let (size, per) = s.split_once('/').ok_or_else(bad)?;
    let bytes = size_bytes(size).ok_or_else(bad)?;
    let per_min: f64 = match per.trim() {
        "s" | "sec" => 60.0,
        "min" | "m" => 1.0,
        "h" | "hour" => 1.0 / 60.0,
        _ => return Err(bad()),
    };
    let rate = bytes * per_min;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(bad());
    }
    Ok(rate)
}

/// `512KiB`, `4MiB`, `1.5GB`, `4096` in bytes.
fn size_bytes(size: &str) -> Option<f64> {
    let size = size.trim();
    let split = size.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(size.len());
    let (num, unit) = size.split_at(split);
    let num: f64 = num.parse().ok()?;
    let unit_bytes: f64 = match unit.trim() {
        "B" | "" => 1.0,
        "KiB" | "K" | "k" => 1024.0,
        "MiB" | "M" => 1024.0 * 1024.0,
        "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        _ => return None,
    };
    Some(num * unit_bytes)
}

/// A size that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad size `{0}`: expected a number of bytes, such as 4096, 512KiB, 4MiB (B, KiB, MiB, GiB, KB, MB, GB)")]
pub struct SizeError(pub String);

/// Parses a size such as `512KiB` into bytes: a whole number of at least one.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let bad = || SizeError(text.trim().to_string());
    let b = size_bytes(text).ok_or_else(bad)?;
    if !(b.is_finite() && (1.0..1e18).contains(&b)) {
        return Err(bad());
    }
    Ok(b.round() as u64)
}

/// `20261206T181530Z`: a time in seconds since the epoch, in UTC, for file names (civil-from-days, after
/// Howard Hinnant's algorithm).
pub fn utc_stamp(secs: u64) -> String {
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(951782400), "20000229T000000Z");
        assert_eq!(utc_stamp(1796580930), "20261206T181530Z");
    }

    #[test]
    fn grammar() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("10ns"), Ok(Duration::from_nanos(10)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        for bad in ["10x", "", "0s", "-1s", ".5s", "1.s", "1..2s", "s", "1e3s", "99999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let unit = parse_duration(" 10x ").unwrap_err();
        assert_eq!(unit, DurationError::Unit { text: "10x".into(), unit: "x".into() });
        assert_eq!(unit.to_string(), "bad duration `10x`: unknown unit `x` (use ns, us, ms, s, m or h)");
        assert_eq!(parse_duration("0s"), Err(DurationError::Zero("0s".into())));
        assert_eq!(parse_duration("99999999999h"), Err(DurationError::TooLong("99999999999h".into())));
        assert_eq!(parse_duration("1.s"), Err(DurationError::Syntax("1.s".into())));
    }

    #[test]
    fn rates_and_offsets() {
        assert_eq!(parse_rate("10MiB/min"), Ok(10.0 * 1024.0 * 1024.0));
        assert_eq!(parse_rate("1KiB/s"), Ok(60.0 * 1024.0));
        assert_eq!(parse_rate(" 6GB/h "), Ok(1e8));
        for bad in ["10MiB", "10XB/min", "MiB/min", "10MiB/day", "0MiB/min", "1..5MiB/s"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_offset("0"), Ok(Duration::ZERO));
        assert_eq!(parse_offset("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_offset("soon").is_err());
    }
}
