//! kube's integration tests, one binary (each test binary is linked on
//! its own: one per crate keeps CI's link time down).

mod cluster;
mod dark_nodes;
mod deploy;
mod hostile_yaml;
mod limits;
mod plan;
mod publish;
mod rbac;
mod real_cluster;
mod relations;
mod translate;
mod translate_queues;
mod versions;
mod volumes;
mod watch;
mod writes_provisioning;
