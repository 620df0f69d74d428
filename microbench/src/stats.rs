//! Summary statistics of repeated measurements: median, quartiles, min/max and outliers
//! beyond 1.5 interquartile ranges (Tukey's fences).

use serde::Serialize;

/// The summary of `repeats` samples of one quantity (all fields in the quantity's unit).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// First quartile (linear interpolation between order statistics).
    pub q1: f64,
    /// Third quartile.
    pub q3: f64,
    /// Number of samples (warm-up runs excluded).
    pub repeats: usize,
    /// Samples outside `[q1 - 1.5·IQR, q3 + 1.5·IQR]` (Tukey 1977).
    pub outliers: Vec<f64>,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Stat {
    /// Summarise `samples`. Non-finite samples are dropped; an empty input gives NaNs and
    /// `repeats = 0`.
    pub fn from_samples(samples: &[f64]) -> Stat {
        let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if s.is_empty() {
            return Stat {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
                q1: f64::NAN,
                q3: f64::NAN,
                repeats: 0,
                outliers: Vec::new(),
            };
        }
        s.sort_by(|a, b| a.total_cmp(b));
        let (q1, q3) = (quantile(&s, 0.25), quantile(&s, 0.75));
        let iqr = q3 - q1;
        let (lo, hi) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
        Stat {
            median: quantile(&s, 0.5),
            min: s[0],
            max: s[s.len() - 1],
            q1,
            q3,
            repeats: s.len(),
            outliers: s.iter().copied().filter(|&x| x < lo || x > hi).collect(),
        }
    }

    /// This summary with every value multiplied by `k` (a unit change; `k > 0`).
    pub fn scaled(&self, k: f64) -> Stat {
        Stat {
            median: self.median * k,
            min: self.min * k,
            max: self.max * k,
            q1: self.q1 * k,
            q3: self.q3 * k,
            repeats: self.repeats,
            outliers: self.outliers.iter().map(|x| x * k).collect(),
        }
    }

    /// Half the min–max range relative to the median, in percent.
    pub fn spread_pct(&self) -> f64 {
        50.0 * (self.max - self.min) / self.median.abs()
    }
}

/// A stopwatch on the calling thread's CPU time ([`crate::os::thread_cpu_ns`]), used by
/// every single-threaded measurement.
pub struct CpuTimer(u64);

impl CpuTimer {
    /// Start.
    pub fn start() -> CpuTimer {
        CpuTimer(crate::os::thread_cpu_ns())
    }
    /// Nanoseconds of thread CPU time since `start` (at least 1).
    pub fn elapsed_ns(&self) -> f64 {
        (crate::os::thread_cpu_ns().saturating_sub(self.0)).max(1) as f64
    }
}

/// Run `sample` `warmup` times unrecorded, then `repeats` times, and summarise the
/// returned values.
pub fn measure(warmup: usize, repeats: usize, mut sample: impl FnMut() -> f64) -> Stat {
    for _ in 0..warmup {
        std::hint::black_box(sample());
    }
    let v: Vec<f64> = (0..repeats.max(1)).map(|_| sample()).collect();
    Stat::from_samples(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_quartiles_and_outliers() {
        let s = Stat::from_samples(&[5.0, 1.0, 2.0, 3.0, 4.0, 100.0, 3.0]);
        assert_eq!(s.median, 3.0);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 100.0);
        assert_eq!(s.q1, 2.5);
        assert_eq!(s.q3, 4.5);
        assert_eq!(s.outliers, vec![100.0]);
        assert_eq!(s.repeats, 7);
        let e = Stat::from_samples(&[]);
        assert_eq!(e.repeats, 0);
        assert!(e.median.is_nan());
        assert_eq!(Stat::from_samples(&[2.0, 4.0]).scaled(0.5).median, 1.5);
    }
}
