//! Arc's rule for MessagePack timestamps: the unit is inferred from the magnitude.

use crate::error::{Error, Result};

/// Converts a timestamp of unknown unit to nanoseconds: below 1e10 it is seconds, below
/// 1e13 milliseconds, below 1e16 microseconds, otherwise nanoseconds (Arc's rule).
pub(crate) fn int_to_ns(v: i64) -> Result<i64> {
    let magnitude = v.unsigned_abs();
    let scale: i64 = if magnitude < 10_000_000_000 {
        1_000_000_000
    } else if magnitude < 10_000_000_000_000 {
        1_000_000
    } else if magnitude < 10_000_000_000_000_000 {
        1_000
    } else {
        1
    };
    v.checked_mul(scale)
        .ok_or_else(|| Error::InvalidPayload(format!("timestamp {v} is out of range")))
}

/// As [`int_to_ns`] for a float timestamp (fractional seconds are kept).
pub(crate) fn float_to_ns(v: f64) -> Result<i64> {
    if !v.is_finite() {
        return Err(Error::InvalidPayload(format!(
            "timestamp {v} is not a finite number"
        )));
    }
    let magnitude = v.abs();
    let scale = if magnitude < 1e10 {
        1e9
    } else if magnitude < 1e13 {
        1e6
    } else if magnitude < 1e16 {
        1e3
    } else {
        1.0
    };
    let ns = (v * scale).round();
    if ns < i64::MIN as f64 || ns >= i64::MAX as f64 {
        return Err(Error::InvalidPayload(format!(
            "timestamp {v} is out of range"
        )));
    }
    Ok(ns as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_follow_magnitude() {
        assert_eq!(int_to_ns(1_700_000_000).unwrap(), 1_700_000_000_000_000_000);
        assert_eq!(
            int_to_ns(1_700_000_000_123).unwrap(),
            1_700_000_000_123_000_000
        );
        assert_eq!(
            int_to_ns(1_700_000_000_123_456).unwrap(),
            1_700_000_000_123_456_000
        );
        assert_eq!(
            int_to_ns(1_700_000_000_123_456_789).unwrap(),
            1_700_000_000_123_456_789
        );
        assert_eq!(
            float_to_ns(1_700_000_000.5).unwrap(),
            1_700_000_000_500_000_000
        );
    }

    #[test]
    fn overflowing_seconds_are_refused() {
        assert!(int_to_ns(9_999_999_999).is_err());
        assert!(float_to_ns(f64::NAN).is_err());
    }
}
