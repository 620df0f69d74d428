//! collect
