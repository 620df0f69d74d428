//! events_dsl
