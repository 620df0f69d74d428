//! Prediction of a fitted [`AnalyticModel`].

use super::*;

impl AnalyticModel {
    /// Predict `workload` at `knobs` (the clock knob plus every other knob of its group).
    ///
    /// # Errors
    /// A missing clock knob, or no curve for this workload at these other knob values.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let f = *knobs
            .get(&self.freq_knob)
            .ok_or_else(|| ModelError::MissingKnob {
                knob: self.freq_knob.clone(),
                model: "analytic".into(),
                fix: format!("pass --knob {}=…", self.freq_knob),
            })?;
        let other = other_knobs(knobs, &self.freq_knob);
        let g = find_group(&self.groups, workload, &other, knobs, |g| {
            (g.workload.as_str(), &g.other_knobs)
        })?;
        Ok(self.predict_group(g, f))
    }

    /// [`Self::predict`] for group `g` (one of [`Self::groups`]) at clock `f` (MHz): what
    /// `predict` gives for `g`'s workload at `g`'s other knobs and `f`, without looking the
    /// group up.
    pub(crate) fn predict_group(&self, g: &AnalyticGroup, f: f64) -> Prediction {
        let fe = self
            .effective_clocks
            .iter()
            .find(|e| e.nominal_mhz == f)
            .map_or(f, |e| e.effective_mhz);
        let time_s = g.time.as_ref().map(|c| c.at(self.f_ref_mhz, fe));
        let power_w = g.power.as_ref().map(|c| {
            if let Some(k) = c.exponent.filter(|k| k.is_finite()) {
                return c.p_static_w + c.c_w * dynamic_term(f, self.f_ref_mhz, k, None);
            }
            c.p_static_w
                + c.c_w
                    * model_term(
                        f,
                        self.f_ref_mhz,
                        self.power_exponent,
                        self.voltage_knee_mhz,
                        self.params
                            .voltage_table
                            .as_deref()
                            .filter(|t| !t.is_empty()),
                    )
        });
        let energy_j = match (time_s, power_w) {
            (Some(t), Some(w)) => Some(t * w),
            _ => None,
        };
        Prediction {
            time_s,
            power_w,
            energy_j,
        }
    }
}
