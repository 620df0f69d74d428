//! `set_uncore_freq`: the uncore frequency of Intel uncore domains (write control
//! `cpu.uncore_freq`), through the same `CpufreqController` as the core frequency
//! (`powerperf_node::controller::uncore`). One domain is held by one session; the values a session's
//! first change of a domain overwrites go to the journal before the write.

use super::{Daemon, Hold, Inner, Saved};
use powerperf_node::daemon::Response;

impl Daemon {
    pub(super) fn set_uncore(
        &self,
        g: &mut Inner,
        id: u64,
        mhz: f64,
        domains: Option<Vec<String>>,
    ) -> Response {
        let Some(sess) = g.sessions.get(&id) else {
            return Response::refused("no session");
        };
        let control = "cpu.uncore_freq";
        if !(mhz.is_finite() && mhz > 0.0 && mhz <= 1e6) {
            return self.refuse(
                sess,
                id,
                format!("{mhz} is not a frequency in MHz (0, 1e6]"),
            );
        }
        if domains.as_ref().is_some_and(|d| d.len() > 4096) {
            return self.refuse(sess, id, "more than 4096 uncore domains named".into());
        }
        // the policy first: a user without the grant learns nothing about the hardware
        if let Err(why) = self
            .opts
            .config
            .may_write(&sess.who, control, Some(mhz), &[])
        {
            return self.refuse(sess, id, why);
        }
        let Some(ctl) = &self.ctl else {
            return self.refuse(
                sess,
                id,
                format!(
                    "no CPU frequency control on this node: {}",
                    self.no_ctl.as_deref().unwrap_or("?")
                ),
            );
        };
        let doms = match ctl.uncore_select(domains.as_deref()) {
            Ok(d) => d,
            Err(e) => return self.refuse(sess, id, e.to_string()),
        };
        let keys: Vec<(String, String)> = doms
            .iter()
            .map(|d| (format!("uncore {}", d.name), d.name.clone()))
            .collect();
        for (k, _) in &keys {
            if let Some(h) = g.held_other.get(k) {
                if h.session != id {
                    let why = format!(
                        "{k} is held by session {} of uid {} (pid {}) at {}: two sessions may not set one uncore domain, so this request is refused (nothing was changed); wait until that session ends, or ask for other domains",
                        h.session, h.uid, h.pid, h.setting
                    );
                    return self.refuse(sess, id, why);
                }
            }
        }
        if let Err(e) = ctl.plan_uncore(mhz, &doms) {
            return self.refuse(sess, id, e.to_string());
        }
        let new: Vec<_> = doms
            .iter()
            .zip(&keys)
            .filter(|(_, (k, _))| !g.held_other.contains_key(k))
            .map(|(d, _)| d.clone())
            .collect();
        let (uid, pid, job) = (sess.who.uid, sess.peer_pid, sess.job.clone());
        if !new.is_empty() {
            let snap = match ctl.uncore_snapshot(&new) {
                Ok(s) => s,
                Err(e) => {
                    return Response::refused(format!("cannot read the current settings: {e}"))
                }
            };
            if let Err(r) = g.save_first(id, (uid, pid, job.clone()), control, Saved::Uncore(snap))
            {
                return r;
            }
        }
        let what = format!("uncore {mhz} MHz");
        for (k, _) in &keys {
            g.held_other.insert(
                k.clone(),
                Hold {
                    session: id,
                    uid,
                    pid,
                    setting: what.clone(),
                },
            );
        }
        let mut c = ctl.clone();
        let done = c.set_uncore(mhz, &doms);
        if done.is_ok() {
            let names: Vec<&str> = keys.iter().map(|(_, n)| n.as_str()).collect();
            tracing::info!(session = id, uid, pid, control, value = %what, domains = ?names, "set");
            let what = names
                .iter()
                .map(|n| crate::metrics::Applied::Hertz {
                    control,
                    target: (*n).to_string(),
                    min: mhz * 1e6,
                    max: mhz * 1e6,
                })
                .collect();
            self.note(crate::metrics::Event::Applied { id, what });
        }
        super::write_answer(id, (uid, pid), "uncore", done)
    }
}
