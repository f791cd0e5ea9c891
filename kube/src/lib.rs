//! Accord's Kubernetes side. [`manifests`] reads objects (YAML manifests
//! now; watchers later feed the same types), [`translate`] turns them into
//! the planner's demand the way kube-scheduler sees them.

pub mod cluster;
pub mod manifests;
pub mod translate;
pub mod watch;
pub mod write;

pub use manifests::Manifests;
pub use translate::{translate, CannotPlan, Options, Translation};
