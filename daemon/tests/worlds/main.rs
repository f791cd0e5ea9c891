//! accordd in whole worlds, one binary: the lab (its control plane,
//! kubelets, BMCs and agents) and the upstream control plane. Each test
//! takes `support::lab::ONE_LAB_AT_A_TIME`, so on CI's two cores no two
//! worlds run at once, as when each file was its own binary and binaries
//! ran one after another.

mod support;

mod lab;
mod lab_bios;
mod lab_buffers;
mod lab_capacity;
mod lab_chaos;
mod lab_dark;
mod lab_ha;
mod lab_health;
mod lab_mig;
mod lab_queues;
mod lab_relations;
mod lab_truth;
mod lab_upstream;
mod real_control_plane;
