//! Prediction and explanation of a fitted [`AnalyticCountersModel`].

use super::*;

impl AnalyticCountersModel {
    /// Predict `workload` at `knobs`.
    ///
    /// # Errors
    /// A missing clock knob, or no group for the workload at the other knob values.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let f = *knobs
            .get(&self.freq_knob)
            .ok_or_else(|| ModelError::MissingKnob {
                knob: self.freq_knob.clone(),
                model: "analytic_counters".into(),
                fix: format!("pass --knob {}=…", self.freq_knob),
            })?;
        let o = group_key(knobs, &self.freq_knob, self.mem_knob.as_deref());
        let g = find_group(&self.groups, workload, &o, knobs, |g| {
            (g.workload.as_str(), &g.other_knobs)
        })?;
        // A model file is input: a negative or NaN t0 would make f64::clamp panic.
        if let Some(t0) = g.t0_s.filter(|t0| t0.is_nan() || *t0 < 0.0) {
            return Err(ModelError::Inconsistent {
                model: "analytic_counters".into(),
                what: format!("workload `{}`: t0_s = {t0}", g.workload),
            });
        }
        if !(f.is_finite() && f > 0.0) {
            return Err(ModelError::Inconsistent {
                model: "analytic_counters".into(),
                what: format!("{} = {f}: the clock must be positive", self.freq_knob),
            });
        }
        let time_s = match self.combine {
            Combine::Sum => g.t0_s.zip(g.memory_s).map(|(t0, m)| {
                let tm = (self.alpha * m).clamp(0.0, t0);
                tm + (t0 - tm) * g.f0_mhz / f
            }),
            Combine::Max => g
                .t0_s
                .zip(g.memory_s)
                .map(|(t0, m)| t0 * roofline_ratio(g, self.alpha * m, g.f0_mhz / f)),
            Combine::BaseCpi => {
                let rm = match &self.mem_knob {
                    Some(k) => {
                        let m = *knobs.get(k).ok_or_else(|| ModelError::MissingKnob {
                            knob: k.clone(),
                            model: "analytic_counters".into(),
                            fix: format!("pass --knob {k}=…"),
                        })?;
                        if !(m.is_finite() && m > 0.0) {
                            return Err(ModelError::Inconsistent {
                                model: "analytic_counters".into(),
                                what: format!("{k} = {m}: the clock must be positive"),
                            });
                        }
                        g.mem0_mhz.map_or(f64::NAN, |m0| m0 / m)
                    }
                    None => 1.0,
                };
                self.base_cpi.and_then(|b| {
                    let r = base_cpi_ratio(
                        g,
                        b,
                        self.mem_cycles_per_transaction,
                        self.thread_idle,
                        (g.f0_mhz / f, rm),
                    )?;
                    Some(g.t0_s? * r)
                })
            }
        };
        let power_w = self.power_at(g, f, knobs);
        Ok(Prediction {
            time_s,
            power_w,
            energy_j: time_s.zip(power_w).map(|(t, p)| t * p),
        })
    }

    /// `combine = max`: the fractions `(a, c, m)` of a group (host-side complement, compute
    /// bottleneck, memory), as [`roofline_ratio`] uses them; `None` without a reference time.
    pub fn roofline_fractions(&self, g: &CounterGroup) -> Option<(f64, f64, f64)> {
        let (t0, m) = g.t0_s.zip(g.memory_s)?;
        Some(fractions(g, self.alpha * m, t0))
    }

    fn power_at(&self, g: &CounterGroup, f: f64, knobs: &Knobs) -> Option<f64> {
        let pm = self.power.as_ref()?;
        // The power model's groups are keyed by every knob but the core clock.
        let at_setting = split(knobs, &self.freq_knob);
        let own = pm
            .groups
            .iter()
            .find(|a| a.workload == g.workload && a.other_knobs == at_setting)
            .is_some_and(|a| a.power.is_some());
        if own {
            return pm.predict(&g.workload, knobs).ok()?.power_w;
        }
        // Only the reference point.
        let p0 = g.p0_w?;
        if let Some(tab) = self
            .power_transfer
            .iter()
            .find(|t| t.other_knobs == g.other_knobs)
        {
            // The chip curves between the two nearest fitted clocks (none beyond them).
            let rows = &tab.rows;
            let i = rows.partition_point(|r| r[0] < f);
            let at = if rows.get(i).is_some_and(|r| r[0] == f) {
                Some((rows[i][1], rows[i][2]))
            } else if i > 0 && i < rows.len() {
                let (lo, hi) = (rows[i - 1], rows[i]);
                let u = (f - lo[0]) / (hi[0] - lo[0]);
                Some((lo[1] + u * (hi[1] - lo[1]), lo[2] + u * (hi[2] - lo[2])))
            } else if f == g.f0_mhz {
                return Some(p0);
            } else {
                None
            };
            let rho = speed_ratio(g, g.f0_mhz / f);
            if let (Some((sf, vf)), Some(rho)) = (at, rho) {
                return Some(sf + vf * (p0 - tab.static_ref_w) * rho);
            }
            return None;
        }
        // Scale P0 by the median ratio of the other workloads: power at the setting asked
        // for over power at the group's reference setting.
        let mut reference = knobs.clone();
        reference.insert(self.freq_knob.clone(), g.f0_mhz);
        if let (Some(k), Some(m0)) = (&self.mem_knob, g.mem0_mhz) {
            reference.insert(k.clone(), m0);
        }
        // One power group per (workload, other knobs): each workload at most once. Each
        // workload's groups at `knobs` and at the reference are what `pm.predict` would find
        // for them (the first group with the workload and the other knobs), looked up in one
        // pass over the groups instead of one search per workload and call.
        let first_at = |point: &Knobs| -> Option<(f64, BTreeMap<&str, &analytic::AnalyticGroup>)> {
            let clock = *point.get(&pm.freq_knob)?;
            let other = analytic::other_knobs(point, &pm.freq_knob);
            let mut by_workload = BTreeMap::new();
            for a in pm.groups.iter().filter(|a| a.other_knobs == other) {
                by_workload.entry(a.workload.as_str()).or_insert(a);
            }
            Some((clock, by_workload))
        };
        let ((f_at, at), (f_ref, at_ref)) = (first_at(knobs)?, first_at(&reference)?);
        let mut ratios: Vec<f64> = pm
            .groups
            .iter()
            .filter(|a| a.power.is_some() && a.other_knobs == at_setting)
            .filter_map(|a| {
                let w = a.workload.as_str();
                let pf = pm.predict_group(at.get(w)?, f_at).power_w?;
                let pr = pm.predict_group(at_ref.get(w)?, f_ref).power_w?;
                (pr > 0.0).then(|| pf / pr)
            })
            .collect();
        if ratios.is_empty() {
            return None;
        }
        ratios.sort_by(f64::total_cmp);
        Some(p0 * ratios[ratios.len() / 2])
    }

    /// `combine = base_cpi`'s part of [`Self::explain`].
    fn explain_base_cpi(&self) -> String {
        let mut s = format!(
            "analytic DVFS model, base CPI from counters (CPI stack: Eyerman et al. ASPLOS 2006): t(f) = t0·[(1 − φ) + φ·f0/f], φ = {}·min(1, β·N/C)\nclock knob: {}\ninstructions: {}, cycles: {}\nβ (base CPI, fitted on the training points at the non-reference clocks) = {}\n",
            match self.thread_idle {
                ThreadIdle::OffCore => "min(1, C/(f0·t0·n))",
                ThreadIdle::Waits => "min(1, C/(f0·t0)) (idle threads: waits on the busy ones, chosen by the training error over off-core time)",
            },
            self.freq_knob,
            self.instructions_counter.as_deref().unwrap_or("-"),
            self.cycles_counter.as_deref().unwrap_or("none (φ from time)"),
            self.base_cpi
                .map_or("not fitted (no training point at a second clock)".into(), |b| {
                    format!("{b:.4}")
                }),
        );
        let two = self.mem_knob.is_some();
        if let Some(k) = &self.mem_knob {
            s += &format!(
                "two clocks (bound and bottleneck over the core and memory clocks; Wang & Chu, IEEE TPDS 2020): t(f, m) = t0·[(1 − max(φ, μ)) + max(φ·f0/f, μ·m0/m)], μ = min(1, γ·D/(m0·t0))\nmemory clock knob: {k}\nDRAM transactions D: {}\nγ (memory-clock cycles per DRAM transaction, fitted with β) = {}\n",
                self.dram_counters.join(" + "),
                self.mem_cycles_per_transaction
                    .map_or("not fitted (no training point at a second memory clock): no prediction at another memory clock".into(), |c| format!("{c:.4}")),
            );
        }
        s += "workload                         other knobs            f0_mhz      t0_s       CPI      φ";
        s += if two { "  m0_mhz      μ\n" } else { "\n" };
        for g in &self.groups {
            let cpi = g.cycles.zip(g.instructions).map(|(c, n)| c / n);
            let phi = self
                .base_cpi
                .and_then(|b| base_share(g, b, self.thread_idle));
            s += &format!(
                "{:<32} {:<22} {:>7} {:>9} {:>9} {:>6}",
                g.workload,
                knob_key(&g.other_knobs),
                g.f0_mhz,
                g.t0_s.map_or("-".into(), |v| format!("{v:.4}")),
                cpi.map_or("-".into(), |v| format!("{v:.3}")),
                phi.map_or("-".into(), |v| format!("{v:.3}")),
            );
            if two {
                let mu = self
                    .mem_cycles_per_transaction
                    .and_then(|c| mem_share(g, c));
                s += &format!(
                    " {:>7} {:>6}",
                    g.mem0_mhz.map_or("-".into(), |v| format!("{v}")),
                    mu.map_or("-".into(), |v| format!("{v:.3}")),
                );
            }
            s += "\n";
        }
        s
    }

    /// What was fitted, for `fit --explain`.
    pub fn explain(&self) -> String {
        let form = match self.combine {
            Combine::Sum => "t(f) = t_mem + (t0 − t_mem)·f0/f, t_mem = α·M".to_string(),
            Combine::Max => format!(
                "bound and bottleneck (Roofline; CRISP): t(f) = t0·[(1 − a) + max(c·f0/f, m) + (a − max(c, m))·f0/f], m = α·M/t0, c = max of [{}], a = {}",
                self.compute_counters.join(", "),
                self.active_counter.as_deref().unwrap_or("1 (no active counter)")
            ),
            Combine::BaseCpi => return self.explain_base_cpi(),
        };
        let mut s = format!(
            "analytic DVFS model, memory part from counters (Moore 2012; Choi et al. 2004): {form}\nclock knob: {}\nmemory terms: {}\nα = {:.4} ({})\n",
            self.freq_knob,
            self.memory_terms
                .iter()
                .map(|t| format!("{} {:?}", t.counter, t.kind))
                .collect::<Vec<_>>()
                .join(" + "),
            self.alpha,
            self.alpha_source
        );
        for t in &self.power_transfer {
            s += &format!(
                "power of a workload with only its reference point (other knobs {}): P(f) = S(f) + v(f)·(P0 − {:.2} W)·t0/t(f), S and v fitted at {} clocks\n",
                knob_key(&t.other_knobs),
                t.static_ref_w,
                t.rows.len()
            );
        }
        let max = self.combine == Combine::Max;
        s += "workload                         other knobs            f0_mhz      t0_s    M_s  t_mem/t0";
        s += if max { "        c        a\n" } else { "\n" };
        for g in &self.groups {
            let frac = g
                .t0_s
                .zip(g.memory_s)
                .map(|(t0, m)| (self.alpha * m).clamp(0.0, t0) / t0);
            s += &format!(
                "{:<32} {:<22} {:>7} {:>9} {:>9} {:>8}\n",
                g.workload,
                knob_key(&g.other_knobs),
                g.f0_mhz,
                g.t0_s.map_or("-".into(), |v| format!("{v:.4}")),
                g.memory_s.map_or("-".into(), |v| format!("{v:.4}")),
                frac.map_or("-".into(), |v| format!("{v:.3}")),
            );
            if max {
                s.pop();
                s += &format!(
                    " {:>8} {:>8}\n",
                    g.compute_fraction.map_or("-".into(), |v| format!("{v:.3}")),
                    g.active_fraction.map_or("-".into(), |v| format!("{v:.3}")),
                );
            }
        }
        s
    }
}
