//! Accord's pure core: the hardware model, the fleet and demand models, fit
//! (kube-scheduler's and DRA's view) and the planner. No I/O, no async, no
//! clock but the `now` a caller passes in.

pub mod backoff;
pub mod conditions;
pub mod config_file;
pub mod demand;
pub mod device;
pub mod fit;
pub mod fleet;
pub mod hardware;
pub mod json;
pub mod lifecycle;
pub mod names;
pub mod plan;
pub mod quantity;
pub mod truth;
pub mod yaml;
