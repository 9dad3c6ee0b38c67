//! Deterministic sampling, so a check that looks at "N per batch" looks at the
//! same files on every attempt and the report can be reproduced.

/// At most `n` items spread evenly over `items` (first and last included when
/// `n >= 2`); all of them when there are no more than `n`.
pub fn evenly<T>(items: &[T], n: usize) -> Vec<&T> {
    if items.len() <= n {
        return items.iter().collect();
    }
    match n {
        0 => Vec::new(),
        1 => vec![&items[0]],
        _ => (0..n)
            .map(|i| &items[i * (items.len() - 1) / (n - 1)])
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::evenly;

    #[test]
    fn takes_all_when_few() {
        assert_eq!(evenly(&[1, 2, 3], 5), vec![&1, &2, &3]);
    }

    #[test]
    fn spreads_and_keeps_both_ends() {
        let items: Vec<u32> = (0..10).collect();
        assert_eq!(evenly(&items, 3), vec![&0, &4, &9]);
        assert_eq!(evenly(&items, 1), vec![&0]);
        assert!(evenly(&items, 0).is_empty());
    }
}
