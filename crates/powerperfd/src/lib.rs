//! powerperfd, powerperf's privileged node service (docs/cluster.md): the config and its
//! access policy ([`policy`]), who a client is ([`users`]), the journal of changes to undo
//! ([`journal`]) and the server ([`server`]); the binary is src/main.rs. The protocol and the
//! client are the node crate's (`powerperf_node::daemon`), as are the controllers and
//! readers the server uses: powerperfd does not link powerperf-core (docs/architecture.md).

pub mod devices;
pub mod journal;
pub mod metrics;
pub mod policy;
pub mod server;
pub mod users;
