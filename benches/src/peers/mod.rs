//! `peer-figures`: Accord beside the real cluster-autoscaler and Karpenter
//! on the same trace, on the real control plane (issue 32). The trace
//! ([`trace`]), the one measurement ([`measure`]), the arms ([`arms`]),
//! the report ([`report`]).

pub mod arms;
pub mod measure;
pub mod report;
pub mod trace;
