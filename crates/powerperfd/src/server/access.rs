//! `access` (GEOPM's `PlatformGetUserAccess`): what this session's identity may read and set
//! under the daemon's policy ([`crate::policy::Config::access_of`]). Only the caller's own
//! access: the identity comes from `SO_PEERCRED` (or a uid-0 client's `on_behalf_of`), and
//! the request carries no field naming anyone (`{"op":"access","uid":0}` is refused as an
//! unknown field). Nothing is read from the hardware and nothing is changed.

use super::{Daemon, Inner};
use powerperf_node::daemon::Response;

impl Daemon {
    pub(super) fn access(&self, g: &Inner, id: u64) -> Response {
        let Some(sess) = g.sessions.get(&id) else {
            return Response::refused("no session");
        };
        let a = self.opts.config.access_of(&sess.who);
        tracing::info!(
            session = id,
            uid = sess.peer_uid,
            pid = sess.peer_pid,
            as_uid = sess.who.uid,
            job = sess.job.as_deref().unwrap_or(""),
            read = ?a.read,
            write = %a.describe_writes(),
            "access: answered the caller's own grants"
        );
        Response {
            ok: true,
            session: Some(id),
            access: Some(a),
            ..Default::default()
        }
    }
}
