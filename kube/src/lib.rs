//! Accord's Kubernetes side. [`manifests`] reads objects from YAML files,
//! [`watch`] keeps them from a live cluster (kube-rs watchers and
//! reflector stores: the same types), [`translate`] turns them into the
//! planner's demand the way kube-scheduler sees them, [`cluster`] reads
//! Nodes and ResourceSlices, and [`write`] publishes labels, events and
//! ProvisioningRequest conditions.

pub mod cluster;
pub mod manifests;
pub mod translate;
pub mod watch;
pub mod write;

pub use manifests::Manifests;
pub use translate::{translate, CannotPlan, Options, Translation};
