//! `auto`'s selection rule (issue 41; docs/models.md, "`auto`'s selection rule"): a
//! challenger replaces the reference candidate only where the inner cross-validation says
//! clearly that it is better, by more than one standard error of the per-fold differences
//! (the one-standard-error rule: Breiman, Friedman, Olshen & Stone, *Classification and
//! Regression Trees*, 1984, §3.4.3; Hastie, Tibshirani & Friedman, *The Elements of
//! Statistical Learning*, 2nd ed., §7.10). Where the inner folds cannot tell the candidates
//! apart, the simpler model, the reference, is kept.

/// The paired comparison of a challenger with the reference over the inner folds that
/// score both.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    /// Mean over the folds of challenger − reference (the error's unit, e.g. percent).
    pub mean: f64,
    /// Standard error of that mean: sd / √folds (sample standard deviation).
    pub se: f64,
    /// Folds that score both.
    pub folds: usize,
}

impl Paired {
    /// Whether the challenger is clearly better: `mean + se < 0` over at least two folds.
    pub fn clearly_better(&self) -> bool {
        self.folds >= 2 && self.mean + self.se < 0.0
    }
}

/// The paired per-fold differences `challenger[f] − reference[f]` over the folds where both
/// are finite.
pub fn paired(challenger: &[f64], reference: &[f64]) -> Paired {
    let d: Vec<f64> = challenger
        .iter()
        .zip(reference)
        .filter(|(c, r)| c.is_finite() && r.is_finite())
        .map(|(c, r)| c - r)
        .collect();
    let n = d.len();
    if n == 0 {
        return Paired {
            mean: f64::NAN,
            se: f64::NAN,
            folds: 0,
        };
    }
    let mean = d.iter().sum::<f64>() / n as f64;
    let se = if n >= 2 {
        let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        (var / n as f64).sqrt()
    } else {
        f64::NAN
    };
    Paired { mean, se, folds: n }
}

/// The candidate taken: among the challengers clearly better than `reference`
/// ([`Paired::clearly_better`] on `per_fold`, each candidate's error per inner fold, NaN where
/// a fold does not score it), the one with the lowest `pooled` error (the first on a tie);
/// `reference` where none is.
pub fn choose(per_fold: &[Vec<f64>], pooled: &[f64], reference: usize) -> usize {
    (0..per_fold.len())
        .filter(|&c| c != reference && pooled[c].is_finite())
        .filter(|&c| paired(&per_fold[c], &per_fold[reference]).clearly_better())
        .min_by(|&a, &b| pooled[a].total_cmp(&pooled[b]))
        .unwrap_or(reference)
}

/// Per-fold MAPE (percent) from per-fold sums: `(sum of absolute percentage errors, count)`
/// per fold; NaN where a fold has no point.
pub fn fold_mapes(sums: &[(f64, usize)]) -> Vec<f64> {
    sums.iter()
        .map(|&(s, n)| if n > 0 { s / n as f64 } else { f64::NAN })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_one_standard_error_keeps_the_reference() {
        // The challenger is lower on average (by 0.5) but the folds disagree (spread ≈ 1.1).
        let reference = vec![5.0, 5.0, 5.0, 5.0];
        let challenger = vec![3.0, 6.0, 3.5, 5.5];
        let p = paired(&challenger, &reference);
        assert!((p.mean + 0.5).abs() < 1e-12);
        assert!(p.se > 0.5);
        assert!(!p.clearly_better());
        let pooled = [5.0, 4.5];
        assert_eq!(choose(&[reference, challenger], &pooled, 0), 0);
    }

    #[test]
    fn a_clear_win_is_taken_and_the_lowest_pooled_of_clear_wins() {
        let reference = vec![5.0, 6.0, 7.0, 5.0];
        let a = vec![4.0, 5.1, 6.0, 4.2]; // about 0.9 lower in every fold
        let b = vec![3.0, 4.0, 5.0, 3.0]; // 2 lower in every fold: spread 0
        let c = vec![1.0, 9.0, 1.0, 9.0]; // lower pooled, but not clearly
        assert!(paired(&a, &reference).clearly_better());
        assert!(paired(&b, &reference).clearly_better());
        assert!(!paired(&c, &reference).clearly_better());
        let pooled = [5.75, 4.8, 3.75, 5.0];
        assert_eq!(choose(&[reference.clone(), a, b, c.clone()], &pooled, 0), 2);
        // One fold is not enough to say anything.
        let one = paired(&[1.0, f64::NAN], &[5.0, 5.0]);
        assert_eq!(one.folds, 1);
        assert!(!one.clearly_better());
        assert_eq!(choose(&[reference, c], &[5.75, f64::NAN], 0), 0);
    }
}
