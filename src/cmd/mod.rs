//! One module per command.

pub(crate) mod batch;
pub(crate) mod dump;
pub(crate) mod inspect;
pub(crate) mod schedule;
pub(crate) mod stats;
pub(crate) mod synth;
pub(crate) mod validate;
