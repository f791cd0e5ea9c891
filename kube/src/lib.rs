//! Accord's Kubernetes side. [`manifests`] reads objects from YAML
//! files, [`discovery`] finds which of the kinds Accord reads a cluster
//! serves (and at which version), [`watch`] keeps them from a live cluster
//! (kube-rs watchers and reflector stores: the same types), [`translate`](mod@translate)
//! turns them into the planner's demand the way kube-scheduler sees them,
//! [`cluster`] reads Nodes and ResourceSlices, and [`write`](mod@write) publishes
//! Accord's Node labels and taints, events and ProvisioningRequest
//! conditions; [`buffer_status`] CapacityBuffers' status.

pub mod buffer_status;
pub mod cluster;
pub mod dark_nodes;
pub mod discovery;
pub mod manifests;
pub mod translate;
pub mod watch;
pub mod workload_ref;
pub mod write;

pub use manifests::Manifests;
pub use translate::{translate, CannotPlan, Options, Translation};
