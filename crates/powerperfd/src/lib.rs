//! powerperfd, powerperf's privileged node service (docs/cluster.md): the config and its
//! access policy ([`policy`]), who a client is ([`users`]), the journal of changes to undo
//! ([`journal`]) and the server ([`server`]). The protocol and the client are in the
//! powerperf library (`powerperf_node::daemon`).

pub mod journal;
pub mod metrics;
pub mod policy;
pub mod server;
pub mod users;
