//! Timestamps and dates as text: RFC 3339 in UTC, fraction trimmed like Go's RFC3339Nano.

const SECONDS_PER_DAY: i64 = 86_400;

/// Appends `secs.nanos` since the Unix epoch as `2024-01-01T00:00:00.123456789Z`, with
/// trailing zeros of the fraction (and a zero fraction entirely) left out.
pub(crate) fn write_rfc3339_nano(out: &mut Vec<u8>, secs: i64, nanos: u32) {
    let days = secs.div_euclid(SECONDS_PER_DAY);
    let second_of_day = secs.rem_euclid(SECONDS_PER_DAY);
    write_date(out, days);
    out.push(b'T');
    write_two(out, second_of_day / 3600);
    out.push(b':');
    write_two(out, second_of_day / 60 % 60);
    out.push(b':');
    write_two(out, second_of_day % 60);
    if nanos > 0 {
        let mut digits = [0u8; 9];
        let mut rest = nanos;
        for digit in digits.iter_mut().rev() {
            *digit = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        let len = digits.iter().rposition(|&d| d != b'0').map_or(0, |i| i + 1);
        out.push(b'.');
        out.extend_from_slice(&digits[..len]);
    }
    out.push(b'Z');
}

/// Appends a day count since 1970-01-01 as `YYYY-MM-DD` (proleptic Gregorian).
pub(crate) fn write_date(out: &mut Vec<u8>, days: i64) {
    let (year, month, day) = civil_from_days(days);
    if (0..=9999).contains(&year) {
        let year = year as u32;
        out.push(b'0' + (year / 1000) as u8);
        out.push(b'0' + (year / 100 % 10) as u8);
        out.push(b'0' + (year / 10 % 10) as u8);
        out.push(b'0' + (year % 10) as u8);
    } else {
        // Outside RFC 3339's range; ISO 8601's expanded form keeps it readable.
        out.extend_from_slice(format!("{year:+}").as_bytes());
    }
    out.push(b'-');
    write_two(out, i64::from(month));
    out.push(b'-');
    write_two(out, i64::from(day));
}

/// Splits a count of ticks, `ticks_per_second` (a divisor of 10^9) to the second, into
/// (seconds, nanoseconds), flooring toward negative infinity.
pub(crate) fn split_ticks(ticks: i64, ticks_per_second: i64) -> (i64, u32) {
    let secs = ticks.div_euclid(ticks_per_second);
    let sub = ticks.rem_euclid(ticks_per_second);
    let nanos = sub * (1_000_000_000 / ticks_per_second);
    (secs, nanos as u32)
}

fn write_two(out: &mut Vec<u8>, value: i64) {
    out.push(b'0' + (value / 10 % 10) as u8);
    out.push(b'0' + (value % 10) as u8);
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (year, month, day).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rfc(secs: i64, nanos: u32) -> String {
        let mut out = Vec::new();
        write_rfc3339_nano(&mut out, secs, nanos);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn fractions_are_trimmed_like_go() {
        assert_eq!(rfc(1_704_067_200, 0), "2024-01-01T00:00:00Z");
        assert_eq!(
            rfc(1_704_067_200, 123_456_789),
            "2024-01-01T00:00:00.123456789Z"
        );
        assert_eq!(rfc(1_704_067_200, 120_000_000), "2024-01-01T00:00:00.12Z");
        assert_eq!(rfc(1_704_067_200, 1), "2024-01-01T00:00:00.000000001Z");
    }

    #[test]
    fn dates_match_chrono_across_eras() {
        for days in [-719_528i64, -1, 0, 1, 11_016, 19_723, 2_932_896] {
            let mut out = Vec::new();
            write_date(&mut out, days);
            let expected = chrono::NaiveDate::from_num_days_from_ce_opt((days + 719_163) as i32)
                .map(|d| d.format("%Y-%m-%d").to_string());
            assert_eq!(Some(String::from_utf8_lossy(&out).into_owned()), expected);
        }
    }

    #[test]
    fn negative_times_floor() {
        assert_eq!(split_ticks(-1, 1_000_000_000), (-1, 999_999_999));
        assert_eq!(rfc(-1, 999_999_999), "1969-12-31T23:59:59.999999999Z");
        assert_eq!(split_ticks(1_500, 1_000), (1, 500_000_000));
    }
}
