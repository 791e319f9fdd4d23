//! The statistics the benches report: percentiles, medians and spreads of
//! measured values.

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// (median, min, max) of the values present.
pub fn spread(values: &[Option<f64>]) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = values.iter().flatten().copied().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some((median, v[0], v[n - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_spread() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(100.0));
        assert_eq!(percentile(&v, 99.0), Some(198.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(
            spread(&[Some(3.0), None, Some(1.0), Some(2.0)]),
            Some((2.0, 1.0, 3.0))
        );
        assert_eq!(spread(&[Some(1.0), Some(4.0)]), Some((2.5, 1.0, 4.0)));
        assert_eq!(spread(&[None]), None);
    }
}
