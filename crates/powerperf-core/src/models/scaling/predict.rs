//! Prediction and explanation of a fitted [`ScalingModel`].

use super::*;

impl ScalingModel {
    fn reliable(&self, target: &str, workload: &str) -> bool {
        crate::models::features::is_reliable(&self.unreliable, target, workload)
    }

    /// Predict `workload` at `knobs` from its baseline point.
    ///
    /// # Errors
    /// [`ModelError::UnknownWorkload`] when the workload has no baseline point;
    /// [`ModelError::UnknownSetting`] for a setting no training workload was measured at.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let b = self
            .baselines
            .get(workload)
            .ok_or_else(|| ModelError::UnknownWorkload {
                workload: workload.into(),
                known: crate::models::name_list(
                    &self.baselines.keys().cloned().collect::<Vec<_>>(),
                ),
            })?;
        let at_base = matches_setting(knobs, &self.baseline);
        let mut out = Prediction::default();
        for tm in &self.targets {
            if !self.reliable(&tm.target, workload) {
                continue;
            }
            let Some(tb) = b.targets.get(&tm.target).copied() else {
                continue;
            };
            let v =
                if at_base {
                    tb
                } else {
                    match tm.settings.iter().position(|s| {
                        matches_setting(knobs, &s.knobs) && s.knobs.len() == knobs.len()
                    }) {
                        Some(kidx) => self.value_at(tm, b, tb, kidx, workload, knobs)?,
                        None => self.between_clocks(tm, b, tb, workload, knobs)?,
                    }
                };
            match tm.target.as_str() {
                "power_w" => out.power_w = Some(v),
                "time_s" => out.time_s = Some(v),
                _ => {}
            }
        }
        if let (Some(p), Some(t)) = (out.power_w, out.time_s) {
            out.energy_j = Some(p * t);
        }
        Ok(out)
    }

    /// Target `tm` of a workload with baseline `b` (value `tb` there) at the setting with
    /// index `kidx` of the target's settings.
    fn value_at(
        &self,
        tm: &TargetModel,
        b: &ScalingBaseline,
        tb: f64,
        kidx: usize,
        workload: &str,
        knobs: &Knobs,
    ) -> Result<f64, ModelError> {
        let sw = &tm.settings[kidx];
        // A model file is input: its parts are checked, not trusted (a damaged file
        // must give an error, not a panic in indexing or f64::clamp).
        let inconsistent = |what: String| ModelError::Inconsistent {
            model: "scaling".into(),
            what: format!("target `{}`: {what}", tm.target),
        };
        let n = tm.features.len();
        if tm.means.len() < n || tm.stds.len() < n || tm.mins.len() < n || tm.maxs.len() < n {
            return Err(inconsistent(format!(
                "{n} features, {} means, {} stds, {} mins and {} maxs",
                tm.means.len(),
                tm.stds.len(),
                tm.mins.len(),
                tm.maxs.len()
            )));
        }
        let Some(&w0) = sw.weights.first() else {
            return Err(inconsistent("a setting without weights".into()));
        };
        let mut h = w0;
        for (j, f) in tm.features.iter().enumerate() {
            let Some(w) = sw.weights.get(j + 1) else {
                break;
            };
            let (lo, hi) = (tm.mins[j], tm.maxs[j]);
            if lo.is_nan() || hi.is_nan() || lo > hi {
                return Err(inconsistent(format!("the range of `{f}` is [{lo}, {hi}]")));
            }
            let x = b.features.get(f).copied().unwrap_or(tm.means[j]);
            h += w * (x.clamp(lo, hi) - tm.means[j]) / tm.stds[j];
        }
        let global = tm.static_part + (tb - tm.static_part) * h;
        Ok(match tm.transfer {
            Some(tr @ (Transfer::Neighbors | Transfer::Blend)) => {
                let nb = tm.neighbors.as_ref().ok_or_else(|| {
                    inconsistent("the transfer uses neighbours but none are stored".into())
                })?;
                let r = nb
                    .ratio(kidx, |f| feature_value(b, f))
                    .map_err(inconsistent)?
                    .ok_or_else(|| ModelError::UnknownSetting {
                        workload: workload.into(),
                        knobs: knob_key(knobs),
                        known: "(no training workload measured there)".into(),
                    })?;
                let local = nb.static_part + (tb - nb.static_part) * r;
                if tr == Transfer::Blend {
                    0.5 * (global + local)
                } else {
                    local
                }
            }
            _ => global,
        })
    }

    /// A setting no training workload was measured at: the linear interpolation in the
    /// clock knob between the target's two nearest settings on either side with the same
    /// other knobs (a response is smooth in the clock; the global transfer's weights are a
    /// polynomial in it). Outside the training clocks, or where no clock knob applies, the
    /// setting is refused as unknown (never extrapolated).
    fn between_clocks(
        &self,
        tm: &TargetModel,
        b: &ScalingBaseline,
        tb: f64,
        workload: &str,
        knobs: &Knobs,
    ) -> Result<f64, ModelError> {
        // The settings the model has, the baseline among them (one end of the range a
        // clock is interpolated in).
        let unknown = || ModelError::UnknownSetting {
            workload: workload.into(),
            knobs: knob_key(knobs),
            known: std::iter::once(format!("{} (baseline)", knob_key(&self.baseline)))
                .chain(tm.settings.iter().map(|s| knob_key(&s.knobs)))
                .collect::<Vec<_>>()
                .join("; "),
        };
        let clock = clock_knob_of(&self.baseline);
        let (Some(ck), Some(&c)) = (clock, clock.and_then(|ck| knobs.get(ck))) else {
            return Err(unknown());
        };
        if !c.is_finite() {
            return Err(unknown());
        }
        let others_match = |s: &Knobs| {
            s.len() == knobs.len()
                && knobs
                    .iter()
                    .filter(|(k, _)| k.as_str() != ck)
                    .all(|(k, v)| s.get(k).is_some_and(|x| (x - v).abs() < 1e-9))
        };
        // Candidates: the target's settings with the same other knobs, and the baseline
        // itself (key `None`, value `tb`) where its other knobs are the request's.
        let base = self
            .baseline
            .get(ck)
            .filter(|_| others_match(&self.baseline))
            .map(|&bc| (None, bc));
        let points = tm
            .settings
            .iter()
            .enumerate()
            .filter(|(_, s)| others_match(&s.knobs))
            .filter_map(|(k, s)| s.knobs.get(ck).map(|&x| (Some(k), x)))
            .chain(base);
        between(points, c, |k: Option<usize>| match k {
            Some(k) => self.value_at(tm, b, tb, k, workload, knobs),
            None => Ok(tb),
        })?
        .ok_or_else(unknown)
    }

    /// What was fitted and why, for `powerperf fit --explain`.
    pub fn explain(&self) -> String {
        let mut s = format!(
            "scaling model: T(k) = s + (T(b) − s)·(w0(k) + Σ w_j(k)·z_j), baseline {}, loss {:?}, smoothing {:?}\n",
            knob_key(&self.baseline),
            self.params.loss,
            self.params.smooth_degree
        );
        for t in &self.targets {
            s += &format!(
                "{}: s = {:.3}, features [{}], {} training workloads, training MAPE {:.2} %\n",
                t.target,
                t.static_part,
                t.features.join(", "),
                t.training_workloads.len(),
                t.training_mape_pct
            );
            if !t.outliers.is_empty() {
                s += &format!(
                    "  robust training set aside {} training point(s): {}\n",
                    t.outliers.len(),
                    t.outliers.join("; ")
                );
            }
            if let Some(note) = &t.robust_note {
                s += &format!("  {note}\n");
            }
            if !t.choice.is_empty() {
                let sc: Vec<String> = t
                    .choice
                    .iter()
                    .map(|(n, e)| format!("{n} {e:.2} %"))
                    .collect();
                let tr = t.transfer.unwrap_or(Transfer::Global);
                let chosen = if tr == Transfer::Global
                    && t.features.is_empty()
                    && t.choice.iter().any(|(n, _)| n == GLOBAL_NO_FEATURES)
                {
                    GLOBAL_NO_FEATURES.to_string()
                } else {
                    format!("{tr:?}").to_lowercase()
                };
                s += &format!(
                    "  transfer chosen by inner-CV MAPE on the training workloads: {} -> {chosen}\n",
                    sc.join(", "),
                );
            }
            if let Some(nb) = &t.neighbors {
                s += &format!(
                    "  neighbours: K = {} ({:?}), s = {:.3}, distance in [{}], inner-CV MAPE {:.2} %\n",
                    if nb.k == 0 { "all".to_string() } else { nb.k.to_string() },
                    nb.weighting,
                    nb.static_part,
                    nb.features
                        .iter()
                        .zip(&nb.log)
                        .zip(&nb.mins)
                        .map(|((f, l), lo)| if *l {
                            // The floor a value is raised to first: the training minimum,
                            // or half the smallest positive value where zeros were replaced.
                            format!("ln max({f}, {lo:.3e})")
                        } else {
                            f.clone()
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                    nb.inner_cv_mape_pct
                );
                s += &selection_steps("    neighbours step", &nb.selection);
            }
            s += &selection_steps("  step", &t.selection);
        }
        s
    }
}
